//! rdma_cm multicast: `rdma_join_multicast`, `rdma_join_multicast_ex`,
//! `rdma_leave_multicast`.
//!
//! On RoCE v2 a join asks no subnet manager: the group is an IPv4 multicast address, its
//! GID that address in IPv4-mapped form (as Linux's rdma_cm makes it; Linux refuses IPv6
//! groups on RoCE v2, and so does this), and the join completes at once with
//! RDMA_CM_EVENT_MULTICAST_JOIN. The event's `ud` parameters are what a sender needs: the
//! group's address handle attributes, the multicast QP and the UDP port space's Q_Key;
//! its private data pointer is the join's `context`. As librdmacm does, the ID's QP, if
//! it has one, is attached to the group at the join (unless joined send-only) and
//! detached at the leave. The host also joins the group at the IP level (IGMP), as
//! Linux's rdma_cm does, so that switches that snoop IGMP forward the group here.

use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};

use ferroce_transport::MULTICAST_QPN;

use super::addr::sockaddr_of;
use super::channel::Event;
use super::id::{api, complete, id_of, Group};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::mcast::set_mcast;
use crate::qp::{ah_attr_of, qp_of};
use libc::sockaddr;

/// Most groups one ID joins: each holds a socket.
const MAX_GROUPS_PER_ID: usize = 64;

fn join(
    id: *mut rdma_cm_id,
    addr: *const sockaddr,
    context: *mut c_void,
    send_only: bool,
) -> Result<(), c_int> {
    let cid = id_of(id).ok_or(libc::EINVAL)?;
    let group = sockaddr_of(addr)?.ip();
    let sh = cid.shared.clone();
    let qp = cid.qp();
    let mut st = sh.lock();
    // Only a datagram ID bound to a device (rdma_bind_addr or rdma_resolve_addr) joins.
    let dev = st.dev.clone().ok_or(libc::EINVAL)?;
    if st.ps != RDMA_PS_UDP {
        return Err(libc::EINVAL);
    }
    let v4 = match group {
        IpAddr::V4(v4) if v4.is_multicast() => v4,
        IpAddr::V4(_) => return Err(libc::EINVAL),
        IpAddr::V6(_) => return Err(libc::EOPNOTSUPP),
    };
    if st.groups.len() >= MAX_GROUPS_PER_ID {
        return Err(libc::ENOMEM);
    }
    let mgid = v4.to_ipv6_mapped();
    let av = dev
        .cm
        .address_vector(mgid)
        .map_err(|e| crate::guard::errno_of(&e))?;
    let mut e = Event::new(RDMA_CM_EVENT_MULTICAST_JOIN, sh.me, 0);
    e.c.param.ud = ManuallyDrop::new(rdma_ud_param {
        private_data: context.cast_const(),
        private_data_len: 0,
        ah_attr: ah_attr_of(&av),
        qp_num: MULTICAST_QPN,
        qkey: RDMA_UDP_QKEY,
    });
    let mut attached = None;
    if !send_only {
        if let Some(q) = qp_of(qp) {
            match set_mcast(q, mgid, true) {
                Ok(()) => attached = Some((qp as usize, q.inner.qpn())),
                Err(errno) => {
                    // As librdmacm: the join's event turns into an error.
                    e.c.event = RDMA_CM_EVENT_MULTICAST_ERROR;
                    e.c.status = -errno;
                }
            }
        }
    }
    let igmp = if send_only || e.c.status != 0 {
        None
    } else {
        igmp_join(v4, st.src.map(|s| s.ip()))
    };
    if e.c.status == 0 {
        st.groups.push(Group {
            addr: group,
            mgid,
            qp: attached,
            _igmp: igmp,
        });
    }
    tracing::debug!(%group, send_only, status = e.c.status, "rdma_join_multicast");
    sh.post_locked(&st, e);
    drop(st);
    complete(&sh, RDMA_CM_EVENT_MULTICAST_JOIN)
}

/// The host's IP-level membership of `group` on the interface with address `local`: a
/// UDP socket that joined it (IGMP reports go out; the socket is bound to no RoCE port,
/// so it receives nothing). `None` if the kernel refuses: RoCE traffic does not need it
/// on a link without IGMP snooping.
fn igmp_join(group: Ipv4Addr, local: Option<IpAddr>) -> Option<UdpSocket> {
    let local = match local {
        Some(IpAddr::V4(a)) => a,
        _ => Ipv4Addr::UNSPECIFIED,
    };
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    match sock.join_multicast_v4(&group, &local) {
        Ok(()) => Some(sock),
        Err(e) => {
            tracing::debug!(%group, %local, error = %e, "no IGMP membership for the group");
            None
        }
    }
}

fn leave(id: *mut rdma_cm_id, addr: *const sockaddr) -> Result<(), c_int> {
    let cid = id_of(id).ok_or(libc::EINVAL)?;
    let group = sockaddr_of(addr)?.ip();
    let mut st = cid.shared.lock();
    let at = st
        .groups
        .iter()
        .position(|g| g.addr == group)
        .ok_or(libc::EADDRNOTAVAIL)?;
    let g = st.groups.remove(at);
    let still_joined = st.groups.iter().any(|o| o.mgid == g.mgid && o.qp == g.qp);
    drop(st);
    if let (Some((p, qpn)), false) = (g.qp, still_joined) {
        // The same QP, if it still lives (it may have been destroyed first).
        if let Some(q) = qp_of(p as *mut ibv_qp).filter(|q| q.inner.qpn() == qpn) {
            set_mcast(q, g.mgid, false)?;
        }
    }
    tracing::debug!(%group, "rdma_leave_multicast");
    Ok(())
}

#[export_name = "__ferroce_rdma_join_multicast"]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    api("rdma_join_multicast", || join(id, addr, context, false))
}

#[export_name = "__ferroce_rdma_join_multicast_ex"]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    api("rdma_join_multicast_ex", || {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller's rdma_cm_join_mc_attr_ex.
        let a = unsafe { std::ptr::read_unaligned(attr) };
        let known = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 || a.comp_mask & !known != 0 {
            return Err(libc::EINVAL);
        }
        let send_only = if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS != 0 {
            match a.join_flags {
                RDMA_MC_JOIN_FLAG_FULLMEMBER => false,
                RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER => true,
                _ => return Err(libc::EINVAL),
            }
        } else {
            false
        };
        join(id, a.addr.cast(), context, send_only)
    })
}

#[export_name = "__ferroce_rdma_leave_multicast"]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    api("rdma_leave_multicast", || leave(id, addr))
}

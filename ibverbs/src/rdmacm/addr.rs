//! Addresses: `rdma_bind_addr`, `rdma_resolve_addr`, `rdma_resolve_route`, and the
//! socket addresses in `cm_id->route.addr`.
//!
//! A device is the interface that holds the address: binding to an address picks it; a
//! destination is reached from the source address the kernel's routing table gives
//! (as rdma_cm asks the kernel), and that address's device.

use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use ferroce::net::gid::gid_of;
use ferroce_wire::cm::rdma_cm::{self, PortSpace};

use super::channel::Event;
use super::devices::{self, CmDevice};
use super::id::{api, id_of, Shared, St};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use libc::sockaddr;

/// The socket address at `p` (AF_INET or AF_INET6).
pub(crate) fn sockaddr_of(p: *const sockaddr) -> Result<SocketAddr, c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: `p` is non-NULL and points at a socket address of the family it names (the
    // API's contract); only as many bytes as that family's struct are read.
    unsafe {
        match (*p).sa_family as c_int {
            libc::AF_INET => {
                let a = &*(p as *const libc::sockaddr_in);
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let a = &*(p as *const libc::sockaddr_in6);
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => Err(libc::EAFNOSUPPORT),
        }
    }
}

/// Writes `a` into a 128-byte `sockaddr_storage` slot.
pub(crate) fn write_sockaddr(dst: &mut libc::sockaddr_storage, a: SocketAddr) {
    // SAFETY: zero is a valid sockaddr_storage.
    *dst = unsafe { std::mem::zeroed() };
    let p = dst as *mut libc::sockaddr_storage;
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let s = unsafe { &mut *(p as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let s = unsafe { &mut *(p as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
        }
    }
}

fn storage(u: &mut rdma_addr__bindgen_ty_1) -> &mut libc::sockaddr_storage {
    // SAFETY: the union's members all begin at its start; it is 128 bytes, 8-aligned,
    // as `sockaddr_storage` (bindgen's layout checks and `layout_tests.rs`).
    unsafe { &mut *(u as *mut rdma_addr__bindgen_ty_1 as *mut libc::sockaddr_storage) }
}

fn storage_dst(u: &mut rdma_addr__bindgen_ty_2) -> &mut libc::sockaddr_storage {
    // SAFETY: as `storage`.
    unsafe { &mut *(u as *mut rdma_addr__bindgen_ty_2 as *mut libc::sockaddr_storage) }
}

/// Fills `cm_id->verbs`, `port_num` and `route.addr` from the ID's state.
///
/// An ID bound to a loopback address (127.0.0.0/8, ::1) and not yet resolved towards a
/// destination shows no device, as a wildcard bind: it listens on `lo`'s device, but
/// `cm_id->verbs` stays NULL. rdma_cm would refuse such a bind on a host whose RDMA
/// devices are on its NICs (no device has a loopback GID), and libfabric's verbs provider
/// counts on getting no device from it: it binds to "localhost" to learn which device a
/// listener without an address would use, and on finding `lo`'s it dropped every other
/// device, so `fi_info -p verbs` listed no MSG endpoint. Requests to the listener, and any
/// ID resolved towards an address, get the device as before.
pub(crate) fn fill(sh: &Shared, st: &mut St) {
    let (src, dst) = (st.src, st.dst);
    let dev = st
        .dev
        .clone()
        .filter(|_| dst.is_some() || !src.is_some_and(|a| is_loopback(a.ip())));
    let Some(c) = sh.c(st) else { return };
    if let Some(d) = &dev {
        c.verbs = d.verbs();
        c.port_num = 1;
        if c.pd.is_null() {
            c.pd = d.pd();
        }
    }
    let ib = rdma_ib_addr {
        sgid: ibv_gid {
            raw: src.map_or([0; 16], |a| gid_of(a.ip()).octets()),
        },
        dgid: ibv_gid {
            raw: dst.map_or([0; 16], |a| gid_of(a.ip()).octets()),
        },
        pkey: 0xffff_u16.to_be(),
    };
    c.route.addr.addr.ibaddr = std::mem::ManuallyDrop::new(ib);
    if let Some(a) = src {
        write_sockaddr(storage(&mut c.route.addr.__bindgen_anon_1), a);
    }
    if let Some(a) = dst {
        write_sockaddr(storage_dst(&mut c.route.addr.__bindgen_anon_2), a);
    }
}

/// Whether `ip` is a loopback address (an IPv4-mapped one too).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// A port of the local range for an ID bound to port 0.
fn ephemeral_port() -> u16 {
    let r = ferroce::verbs::random_psn().map_or(0, |v| v as u16);
    32768 + r % 28232
}

/// The source address the kernel would use towards `dst`.
fn source_towards(dst: IpAddr) -> Result<IpAddr, c_int> {
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    s.connect((dst, 9))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))?;
    s.local_addr()
        .map(|a| a.ip())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// Binds the ID's state to `a` (port 0: one of the local range that no process listens
/// on, on its device or any for a wildcard address; see `ferroce::cm::ports`).
///
/// A wildcard address opens every device now, though the ID stays on none: a listen that
/// follows is then quick, as the kernel's is. Programs tell the peer their port between
/// the bind and the listen (qperf 0.4.11 does, with `-cm1`), and the peer's request came
/// while ferroce's listen was still opening devices (60 ms for two here): refused with
/// reason 8 (no listener), or lost while no process of that host had the interface open.
fn bind(st: &mut St, a: SocketAddr) -> Result<(), c_int> {
    let mut a = a;
    if !a.ip().is_unspecified() {
        st.dev = Some(devices::with_address(a.ip())?);
    } else {
        let _opened = devices::all();
    }
    if a.port() == 0 {
        let names: Vec<String> = match &st.dev {
            Some(d) => vec![d.name.clone()],
            None => ferroce::verbs::Device::list()
                .iter()
                .map(|d| d.name().to_owned())
                .collect(),
        };
        let ps = if st.ps == RDMA_PS_UDP {
            PortSpace::UDP
        } else {
            PortSpace::TCP
        };
        let mut port = ephemeral_port();
        for _ in 0..16 {
            let sid = rdma_cm::service_id(ps, port);
            if !names.iter().any(|n| ferroce::cm::ports::is_held(n, sid)) {
                break;
            }
            port = ephemeral_port();
        }
        a.set_port(port);
    }
    st.src = Some(a);
    Ok(())
}

#[export_name = "__ferroce_rdma_bind_addr"]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    api("rdma_bind_addr", || {
        let id = id_of(id).ok_or(libc::EINVAL)?;
        let a = sockaddr_of(addr)?;
        let sh = &id.shared;
        let mut st = sh.lock();
        if st.src.is_some() {
            return Err(libc::EINVAL);
        }
        bind(&mut st, a)?;
        fill(sh, &mut st);
        Ok(())
    })
}

/// Resolves the device and source for `dst`: the event to post.
fn resolve(st: &mut St, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), c_int> {
    if let Some(s) = src.filter(|_| st.src.is_none()) {
        bind(st, s)?;
    }
    let from = match st.src {
        Some(s) if !s.ip().is_unspecified() => s.ip(),
        _ => source_towards(dst.ip())?,
    };
    let dev: Arc<CmDevice> = devices::with_address(from)?;
    let port = st.src.map_or_else(ephemeral_port, |s| s.port());
    st.src = Some(SocketAddr::new(from, port));
    st.dst = Some(dst);
    st.dev = Some(dev);
    Ok(())
}

#[export_name = "__ferroce_rdma_resolve_addr"]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    api("rdma_resolve_addr", || {
        let id = id_of(id).ok_or(libc::EINVAL)?;
        let dst = sockaddr_of(dst_addr)?;
        let src = if src_addr.is_null() {
            None
        } else {
            Some(sockaddr_of(src_addr)?)
        };
        let sh = id.shared.clone();
        let mut st = sh.lock();
        match resolve(&mut st, src, dst) {
            Ok(()) => fill(&sh, &mut st),
            Err(e) => {
                tracing::info!(%dst, errno = e, "rdma_resolve_addr: no ferroce device reaches it");
                sh.post_locked(&st, Event::new(RDMA_CM_EVENT_ADDR_ERROR, sh.me, -e));
                drop(st);
                return super::id::complete(&sh, RDMA_CM_EVENT_ADDR_RESOLVED);
            }
        }
        let dev = st.dev.clone().ok_or(libc::ENODEV)?;
        drop(st);
        // The peer must answer ARP (neighbour discovery) within the time given, as
        // with rdma_cm; that wait is a thread's.
        let wait = Duration::from_millis(if timeout_ms > 0 {
            timeout_ms as u64
        } else {
            2000
        });
        let waiter = sh.clone();
        ferroce::link::threads::spawn("ferroce-rdma-addr", move || {
            let e = match dev.cm.resolve_neighbor(dst.ip(), wait) {
                Ok(()) => Event::new(RDMA_CM_EVENT_ADDR_RESOLVED, sh.me, 0),
                Err(err) => {
                    tracing::info!(%dst, %err, "rdma_resolve_addr: no answer from it");
                    Event::new(RDMA_CM_EVENT_ADDR_ERROR, sh.me, -libc::ETIMEDOUT)
                }
            };
            sh.post(e);
        })
        .map_err(|_| libc::EAGAIN)?;
        super::id::complete(&waiter, RDMA_CM_EVENT_ADDR_RESOLVED)
    })
}

#[export_name = "__ferroce_rdma_resolve_route"]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    api("rdma_resolve_route", || {
        let id = id_of(id).ok_or(libc::EINVAL)?;
        let sh = &id.shared;
        let st = sh.lock();
        if st.dst.is_none() || st.dev.is_none() {
            return Err(libc::EINVAL);
        }
        // The path is the address pair: RoCE has no subnet manager to ask, and the
        // peer's MAC is resolved when the REQ goes out.
        sh.post_locked(&st, Event::new(RDMA_CM_EVENT_ROUTE_RESOLVED, sh.me, 0));
        drop(st);
        super::id::complete(sh, RDMA_CM_EVENT_ROUTE_RESOLVED)
    })
}

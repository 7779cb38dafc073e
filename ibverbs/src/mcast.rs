//! ibv_attach_mcast and ibv_detach_mcast: UD QPs in multicast groups.
//!
//! On RoCE a group is an IP multicast address as a GID (IPv4 in IPv4-mapped form); the
//! LID argument is InfiniBand's and is ignored, as by rxe and RoCE NICs.

use std::ffi::c_int;
use std::net::Ipv6Addr;

use crate::ffi::*;
use crate::guard::{catch, errno_of};
use crate::qp::{qp_of, Qp};

/// Attaches (or detaches) `qp` to the group `gid` points at; the verbs convention: 0 or
/// an errno value.
fn set(qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> c_int {
    let Some(q) = qp_of(qp) else {
        return libc::EINVAL;
    };
    if gid.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: checked non-NULL; the caller passes one ibv_gid, whose every bit pattern is
    // a valid byte array (read unaligned: C may hand any address).
    let raw = unsafe { std::ptr::read_unaligned(gid).raw };
    match set_mcast(q, Ipv6Addr::from(raw), attach) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Attaches (or detaches) `q` to group `gid`: EINVAL for a QP that is not UD, a GID that
/// is no group, or a detach from a group the QP is not in; ENOMEM when the group or the
/// device is full.
pub(crate) fn set_mcast(q: &Qp, gid: Ipv6Addr, attach: bool) -> Result<(), c_int> {
    let r = if attach {
        q.inner.attach_mcast(gid)
    } else {
        q.inner.detach_mcast(gid)
    };
    r.map_err(|e| {
        tracing::debug!(%gid, attach, error = %e, "multicast attach or detach refused");
        errno_of(&e)
    })
}

#[export_name = "__ferroce_ibv_attach_mcast"]
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    catch("ibv_attach_mcast", libc::EIO, || set(qp, gid, true))
}

#[export_name = "__ferroce_ibv_detach_mcast"]
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    catch("ibv_detach_mcast", libc::EIO, || set(qp, gid, false))
}

//! Memory regions: the application's own memory, registered in place (no copy, no
//! staging buffer): ferroce reads and writes it directly from and to frames.

use std::ffi::{c_int, c_uint, c_void};

use ferroce::verbs::RawRegion;
use ferroce_transport::Access;

use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};
use crate::pd::pd_of;

#[repr(C)]
pub(crate) struct Mr {
    pub ibv: ibv_mr,
    pub inner: RawRegion,
}

/// The region behind `p`, if live.
pub(crate) fn mr_of(p: *const ibv_mr) -> Option<&'static Mr> {
    // SAFETY: live (checked), freed only by ibv_dereg_mr.
    handles::get(p as *const Mr, Kind::Mr).map(|p| unsafe { &*p })
}

/// Access flags ferroce implements; optional ones (IBV_ACCESS_OPTIONAL_RANGE) and hints
/// that change nothing here are accepted and ignored, anything else is refused.
const ENFORCED: c_uint = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND;
const IGNORED: c_uint = IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE;

/// The transport's access flags for verbs `access`, or EINVAL.
pub(crate) fn access_of(access: c_uint) -> Result<Access, c_int> {
    if access & !(ENFORCED | IGNORED) != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Access(access & ENFORCED))
}

unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    catch("ibv_reg_mr", std::ptr::null_mut(), || {
        let Some(p) = pd_of(pd) else {
            return null_with(libc::EINVAL);
        };
        if addr.is_null() && length != 0 {
            return null_with(libc::EINVAL);
        }
        let access = match access_of(access) {
            Ok(a) => a,
            Err(e) => return null_with(e),
        };
        // SAFETY: ibv_reg_mr's contract: `addr..addr+length` is the caller's memory and
        // stays allocated until ibv_dereg_mr, which drops (and so revokes) the region.
        let region = unsafe { p.inner.reg_mr_raw(addr.cast(), length, Some(iova), access) };
        match region {
            Ok(inner) => {
                let ibv = ibv_mr {
                    context: p.ibv.context,
                    pd,
                    addr,
                    length,
                    handle: 0,
                    lkey: inner.lkey(),
                    rkey: inner.rkey(),
                };
                handles::insert(Box::new(Mr { ibv, inner }), Kind::Mr).cast()
            }
            Err(e) => null_with(errno_of(&e)),
        }
    })
}

#[export_name = "__ferroce_ibv_reg_mr"]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg(pd, addr, length, addr as u64, access as c_uint) }
}

#[export_name = "__ferroce_ibv_reg_mr_iova"]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg(pd, addr, length, iova, access as c_uint) }
}

#[export_name = "__ferroce_ibv_reg_mr_iova2"]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg(pd, addr, length, iova, access) }
}

#[export_name = "__ferroce_ibv_dereg_mr"]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    catch("ibv_dereg_mr", libc::EIO, || {
        if mr_of(mr).is_some_and(|m| m.inner.has_windows()) {
            // A bound memory window opens onto it (rxe refuses too).
            return libc::EBUSY;
        }
        match handles::remove(mr as *mut Mr, Kind::Mr) {
            Some(m) => match m.inner.dereg() {
                Ok(()) => 0,
                Err(e) => errno_of(&e),
            },
            None => libc::EINVAL,
        }
    })
}

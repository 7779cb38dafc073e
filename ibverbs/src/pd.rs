//! Protection domains.

use std::ffi::c_int;

use ferroce::verbs::ProtectionDomain;

use crate::context::{c_ptr, ctx_of};
use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};

#[repr(C)]
pub(crate) struct Pd {
    pub ibv: ibv_pd,
    pub inner: ProtectionDomain,
}

/// The PD behind `p`, if live.
pub(crate) fn pd_of(p: *const ibv_pd) -> Option<&'static Pd> {
    // SAFETY: live (checked), freed only by ibv_dealloc_pd.
    handles::get(p as *const Pd, Kind::Pd).map(|p| unsafe { &*p })
}

#[export_name = "__ferroce_ibv_alloc_pd"]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    catch("ibv_alloc_pd", std::ptr::null_mut(), || {
        let Some(c) = ctx_of(context) else {
            return null_with(libc::EINVAL);
        };
        match c.inner.alloc_pd() {
            Ok(inner) => {
                let ibv = ibv_pd {
                    context: c_ptr(c),
                    handle: 0,
                };
                handles::insert(Box::new(Pd { ibv, inner }), Kind::Pd).cast()
            }
            Err(e) => null_with(errno_of(&e)),
        }
    })
}

#[export_name = "__ferroce_ibv_dealloc_pd"]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    catch("ibv_dealloc_pd", libc::EIO, || {
        let Some(p) = pd_of(pd) else {
            return libc::EINVAL;
        };
        // rdma-core refuses while regions, QPs or AHs still use the PD.
        if p.inner.in_use() {
            return libc::EBUSY;
        }
        drop(handles::remove(pd as *mut Pd, Kind::Pd));
        0
    })
}

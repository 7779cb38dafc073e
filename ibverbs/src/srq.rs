//! Shared receive queues.

use std::ffi::c_int;
use std::sync::{Mutex, PoisonError};

use ferroce::verbs::SharedReceiveQueue;

use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};
use crate::pd::pd_of;

#[repr(C)]
pub(crate) struct Srq {
    pub ibv: ibv_srq,
    pub inner: SharedReceiveQueue,
    /// Its attributes as created and modified (the limit is kept, not armed: ferroce
    /// raises no SRQ-limit event).
    pub attr: Mutex<ibv_srq_attr>,
}

// SAFETY: the raw pointers inside are C handles, never dereferenced from here.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

/// The SRQ behind `p`, if live.
pub(crate) fn srq_of(p: *const ibv_srq) -> Option<&'static Srq> {
    // SAFETY: live (checked), freed only by ibv_destroy_srq.
    handles::get(p as *const Srq, Kind::Srq).map(|p| unsafe { &*p })
}

#[export_name = "__ferroce_ibv_create_srq"]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    catch("ibv_create_srq", std::ptr::null_mut(), || {
        let Some(p) = pd_of(pd) else {
            return null_with(libc::EINVAL);
        };
        if init.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes a whole ibv_srq_init_attr.
        let init = unsafe { &*init };
        let inner = match p.inner.create_srq(init.attr.max_wr, init.attr.max_sge) {
            Ok(s) => s,
            Err(e) => return null_with(errno_of(&e)),
        };
        // SAFETY: plain C data; zero is valid for every field.
        let mut ibv: ibv_srq = unsafe { std::mem::zeroed() };
        ibv.context = p.ibv.context;
        ibv.srq_context = init.srq_context;
        ibv.pd = pd;
        let srq = Srq {
            ibv,
            inner,
            attr: Mutex::new(init.attr),
        };
        handles::insert(Box::new(srq), Kind::Srq).cast()
    })
}

#[export_name = "__ferroce_ibv_modify_srq"]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    catch("ibv_modify_srq", libc::EIO, || {
        let Some(s) = srq_of(srq) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        if mask as u32 & IBV_SRQ_MAX_WR != 0 {
            return libc::EOPNOTSUPP; // resizing
        }
        if mask as u32 & IBV_SRQ_LIMIT != 0 {
            // SAFETY: checked non-NULL.
            let limit = unsafe { (*attr).srq_limit };
            s.attr
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .srq_limit = limit;
        }
        0
    })
}

#[export_name = "__ferroce_ibv_query_srq"]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    catch("ibv_query_srq", libc::EIO, || {
        let Some(s) = srq_of(srq) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        let a = *s.attr.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: checked non-NULL.
        unsafe { attr.write(a) };
        0
    })
}

#[export_name = "__ferroce_ibv_destroy_srq"]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    catch("ibv_destroy_srq", libc::EIO, || {
        match handles::remove(srq as *mut Srq, Kind::Srq) {
            Some(s) => {
                drop(s);
                0
            }
            None => libc::EINVAL,
        }
    })
}

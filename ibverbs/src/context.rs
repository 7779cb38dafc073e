//! An open device as C sees it: an `ibv_context` inside a `verbs_context` (opened in
//! [`crate::open`]), and its asynchronous event descriptor.

use std::ffi::c_int;
use std::mem::offset_of;

use ferroce::link::eventfd::EventFd;
use ferroce::verbs::Context;

use crate::ffi::*;
use crate::guard::catch;
use crate::handles::{self, Kind};

/// An open device.
#[repr(C)]
pub(crate) struct Ctx {
    /// Must come first: C's `ibv_context *` points at `vctx.context`.
    pub vctx: verbs_context,
    pub inner: Context,
    /// The descriptor of asynchronous events (`async_fd`).
    pub async_fd: EventFd,
}

/// The context behind `p`, if `p` is a live one.
pub(crate) fn ctx_of(p: *const ibv_context) -> Option<&'static Ctx> {
    let base =
        (p as *const u8).wrapping_sub(offset_of!(Ctx, vctx) + offset_of!(verbs_context, context));
    let c = handles::get(base as *const Ctx, Kind::Context)?;
    // SAFETY: live (checked), and freed only by ibv_close_device.
    Some(unsafe { &*c })
}

/// The `ibv_context *` of a context.
pub(crate) fn c_ptr(c: &Ctx) -> *mut ibv_context {
    &c.vctx.context as *const ibv_context as *mut ibv_context
}

#[export_name = "__ferroce_ibv_get_async_event"]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    catch("ibv_get_async_event", -1, || {
        let Some(c) = ctx_of(context) else {
            crate::guard::set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            crate::guard::set_errno(libc::EINVAL);
            return -1;
        }
        // Blocks until an event comes, unless the program made async_fd non-blocking.
        // ferroce raises none yet (no QP-fatal or CQ-error events): a blocking caller
        // waits, as on a device where nothing goes wrong.
        if let Err(e) = c.async_fd.take() {
            crate::guard::set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
        crate::guard::set_errno(libc::EAGAIN);
        -1
    })
}

#[export_name = "__ferroce_ibv_ack_async_event"]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {
    // Objects are not destroyed while events about them wait: nothing to count.
}

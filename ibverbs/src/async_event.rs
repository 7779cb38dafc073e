//! Asynchronous events: `ibv_get_async_event` blocks on the context's `async_fd` (unless
//! the program made it non-blocking) and returns the next event of its QPs and CQs.

use std::ffi::c_int;

use crate::context::ctx_of;
use crate::ffi::*;
use crate::guard::{catch, set_errno};
use crate::handles::{self, Kind};

#[export_name = "__ferroce_ibv_get_async_event"]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    catch("ibv_get_async_event", -1, || {
        let Some(c) = ctx_of(context) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // Blocks until an event comes, unless the program made async_fd non-blocking.
        if let Err(e) = c.events.fd.take() {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
        match c.events.pop() {
            Some(e) => {
                // SAFETY: checked non-NULL; the caller passes room for one event.
                unsafe { event.write(e) };
                0
            }
            None => {
                set_errno(libc::EAGAIN);
                -1
            }
        }
    })
}

#[export_name = "__ferroce_ibv_ack_async_event"]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: checked non-NULL; the caller passes an event ibv_get_async_event filled.
    let e = unsafe { *event };
    // Objects are not destroyed while events about them wait, so the counts are only
    // bookkeeping the program may read; counted on live objects only.
    // SAFETY: union members read per the event type; objects checked live before use.
    unsafe {
        match e.event_type {
            IBV_EVENT_QP_FATAL => {
                if let Some(qp) = handles::get(e.element.qp as *const ibv_qp, Kind::Qp) {
                    (*qp).events_completed = (*qp).events_completed.wrapping_add(1);
                }
            }
            IBV_EVENT_CQ_ERR => {
                if let Some(cq) = handles::get(e.element.cq as *const ibv_cq, Kind::Cq) {
                    (*cq).async_events_completed = (*cq).async_events_completed.wrapping_add(1);
                }
            }
            _ => {}
        }
    }
}

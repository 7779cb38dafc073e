//! An open device as C sees it: an `ibv_context` inside a `verbs_context` (opened in
//! [`crate::open`]), and the asynchronous events of its objects.

use std::collections::{HashMap, VecDeque};
use std::mem::offset_of;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ferroce::link::eventfd::EventFd;
use ferroce::verbs::{AsyncEvent, AsyncEventSink, Context, CqId};

use crate::ffi::*;
use crate::handles::{self, Kind};

/// An open device.
#[repr(C)]
pub(crate) struct Ctx {
    /// Must come first: C's `ibv_context *` points at `vctx.context`.
    pub vctx: verbs_context,
    pub inner: Context,
    /// Its asynchronous events (`async_fd` is their descriptor).
    pub events: Arc<CtxEvents>,
    /// `cmd_fd`: a descriptor programs may dup or poll (`/dev/null`; ferroce has no
    /// kernel command channel, and device import through it answers EOPNOTSUPP).
    pub cmd_fd: std::os::fd::OwnedFd,
}

/// The asynchronous events of one context's objects, as `ibv_get_async_event` returns
/// them. Contexts sharing a driver each hear every event and keep those of their own
/// QPs and CQs.
pub(crate) struct CtxEvents {
    /// One count per queued event (semaphore mode).
    pub fd: EventFd,
    /// Leaf locks (taken by the driver with its endpoint locked).
    queue: Mutex<VecDeque<Raw>>,
    qps: Mutex<HashMap<u32, usize>>,
    cqs: Mutex<HashMap<CqId, usize>>,
}

/// An event for C: its raw pointers are handles, compared and handed back only.
#[derive(Clone, Copy)]
pub(crate) struct Raw(pub ibv_async_event);
// SAFETY: see above; nothing dereferences the pointers inside from Rust.
unsafe impl Send for Raw {}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CtxEvents {
    pub(crate) fn new() -> std::io::Result<CtxEvents> {
        Ok(CtxEvents {
            fd: EventFd::semaphore()?,
            queue: Mutex::new(VecDeque::new()),
            qps: Mutex::new(HashMap::new()),
            cqs: Mutex::new(HashMap::new()),
        })
    }

    /// Events about QP `qpn` go to `qp` (its C address) from now on.
    pub(crate) fn add_qp(&self, qpn: u32, qp: *mut ibv_qp) {
        relock(&self.qps).insert(qpn, qp as usize);
    }

    pub(crate) fn remove_qp(&self, qpn: u32) {
        relock(&self.qps).remove(&qpn);
    }

    /// Events about CQ `id` go to `cq`.
    pub(crate) fn add_cq(&self, id: CqId, cq: *mut ibv_cq) {
        relock(&self.cqs).insert(id, cq as usize);
    }

    pub(crate) fn remove_cq(&self, id: CqId) {
        relock(&self.cqs).remove(&id);
    }

    /// The next event, once the descriptor said one is there.
    pub(crate) fn pop(&self) -> Option<ibv_async_event> {
        relock(&self.queue).pop_front().map(|r| r.0)
    }
}

impl AsyncEventSink for CtxEvents {
    fn async_event(&self, event: AsyncEvent) {
        let c = match event {
            AsyncEvent::QpFatal(qpn) => relock(&self.qps).get(&qpn).map(|&qp| ibv_async_event {
                element: ibv_async_event__bindgen_ty_1 {
                    qp: qp as *mut ibv_qp,
                },
                event_type: IBV_EVENT_QP_FATAL,
            }),
            AsyncEvent::CqErr(id) => relock(&self.cqs).get(&id).map(|&cq| ibv_async_event {
                element: ibv_async_event__bindgen_ty_1 {
                    cq: cq as *mut ibv_cq,
                },
                event_type: IBV_EVENT_CQ_ERR,
            }),
            AsyncEvent::PortActive | AsyncEvent::PortErr => Some(ibv_async_event {
                element: ibv_async_event__bindgen_ty_1 { port_num: 1 },
                event_type: if event == AsyncEvent::PortActive {
                    IBV_EVENT_PORT_ACTIVE
                } else {
                    IBV_EVENT_PORT_ERR
                },
            }),
            // A device event names no QP, CQ or port: libibverbs leaves the element 0.
            AsyncEvent::DeviceFatal => Some(ibv_async_event {
                element: ibv_async_event__bindgen_ty_1 { port_num: 0 },
                event_type: IBV_EVENT_DEVICE_FATAL,
            }),
        };
        if let Some(e) = c {
            relock(&self.queue).push_back(Raw(e));
            self.fd.wake();
        }
    }
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

//! The context's ops table: the header's inline verbs (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_srq_recv`) call through it.

use crate::ffi::*;

pub(crate) fn context_ops() -> ibv_context_ops {
    // SAFETY: a table of optional function pointers; zero is None for each.
    let mut ops: ibv_context_ops = unsafe { std::mem::zeroed() };
    ops.poll_cq = Some(crate::cq::poll_cq);
    ops.req_notify_cq = Some(crate::cq::req_notify_cq);
    ops.post_send = Some(crate::post::post_send);
    ops.post_recv = Some(crate::post::post_recv);
    ops.post_srq_recv = Some(crate::post::post_srq_recv);
    ops.alloc_mw = Some(crate::mw::alloc_mw);
    ops.dealloc_mw = Some(crate::mw::dealloc_mw);
    ops.bind_mw = Some(crate::mw::bind_mw);
    ops
}

//! `librdmacm.so.1` on ferroce: rdma_cm's C API (`<rdma/rdma_cma.h>`) over
//! [`ferroce::cm::ConnectionManager`], so that programs that make their connections with
//! rdma_cm (rping, ucmatose, udaddy, perftest's `-R`, ...) run unmodified.
//!
//! The library is the same object as ferroce's `libibverbs.so.1`: `ferroce exec` shows it
//! to programs under both names, and the dynamic loader, seeing one file, loads it once.
//! So a `cm_id->verbs` is one of this library's own contexts, and `rdma_create_qp` makes a
//! QP the connection manager can bring to RTS itself.
//!
//! rdma_cm is asynchronous: each step returns at once and its outcome arrives as an event
//! on the ID's channel (an eventfd counting events, as rdma_cm's channel fd is readable
//! while events wait). Steps that wait on the network (connect, the RTU after an accept,
//! a disconnect) run on a short-lived thread each, which posts the event; an ID that is
//! destroyed gets no more events.

mod addr;
pub(crate) mod channel;
mod conn;
mod devices;
mod ep;
mod hang_up;
mod id;
mod mcast;
mod misc;
mod qp;

#[cfg(test)]
mod tests;

// The rdma_cm calls rsockets are made of (`crate::rsocket`), as a C program calls them.
pub(crate) use addr::{rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route};
pub(crate) use channel::{
    rdma_ack_cm_event, rdma_create_event_channel, rdma_destroy_event_channel, rdma_get_cm_event,
};
pub(crate) use conn::{
    rdma_accept, rdma_connect, rdma_destroy_id, rdma_disconnect, rdma_listen, rdma_reject,
};
pub(crate) use id::{last_errno, rdma_create_id, rdma_migrate_id};
pub(crate) use qp::{rdma_create_qp, rdma_destroy_qp};

/// A device's interface went away: the connections on it hear of it
/// (`conn::device_removed`). The device (`devices`) raises it, and `conn`, which acts on
/// it, uses `devices`: the call goes through here, above both.
fn device_removed(dev: &std::sync::Arc<devices::CmDevice>) {
    conn::device_removed(dev);
}

/// An event channel was destroyed: the connections of the IDs still on it end
/// (`hang_up::channel_closed`). The channel (`channel`) raises it, and `hang_up`, which
/// acts on it, uses `channel`: the call goes through here, above both.
fn channel_closed(events: &std::sync::Arc<channel::Events>) {
    hang_up::channel_closed(events);
}

crate::exports::versioned! {
    rdma_accept @ "RDMACM_1.0";
    rdma_ack_cm_event @ "RDMACM_1.0";
    rdma_bind_addr @ "RDMACM_1.0";
    rdma_connect @ "RDMACM_1.0";
    rdma_create_ep @ "RDMACM_1.0";
    rdma_create_event_channel @ "RDMACM_1.0";
    rdma_create_id @ "RDMACM_1.0";
    rdma_create_qp @ "RDMACM_1.0";
    rdma_create_qp_ex @ "RDMACM_1.0";
    rdma_destroy_ep @ "RDMACM_1.0";
    rdma_destroy_event_channel @ "RDMACM_1.0";
    rdma_destroy_id @ "RDMACM_1.0";
    rdma_destroy_qp @ "RDMACM_1.0";
    rdma_disconnect @ "RDMACM_1.0";
    rdma_event_str @ "RDMACM_1.0";
    rdma_free_devices @ "RDMACM_1.0";
    rdma_freeaddrinfo @ "RDMACM_1.0";
    rdma_get_cm_event @ "RDMACM_1.0";
    rdma_get_devices @ "RDMACM_1.0";
    rdma_get_dst_port @ "RDMACM_1.0";
    rdma_get_request @ "RDMACM_1.0";
    rdma_get_src_port @ "RDMACM_1.0";
    rdma_getaddrinfo @ "RDMACM_1.0";
    rdma_join_multicast @ "RDMACM_1.0";
    rdma_leave_multicast @ "RDMACM_1.0";
    rdma_listen @ "RDMACM_1.0";
    rdma_migrate_id @ "RDMACM_1.0";
    rdma_notify @ "RDMACM_1.0";
    rdma_reject @ "RDMACM_1.0";
    rdma_resolve_addr @ "RDMACM_1.0";
    rdma_resolve_route @ "RDMACM_1.0";
    rdma_set_option @ "RDMACM_1.0";
    rdma_establish @ "RDMACM_1.2";
    rdma_join_multicast_ex @ "RDMACM_1.1";
    rdma_init_qp_attr @ "RDMACM_1.2";
}

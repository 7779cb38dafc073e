//! rsockets (`<rdma/rsocket.h>`, part of librdmacm): sockets whose bytes go by RDMA, so
//! that rdma-core's `rstream` and `rcopy`, and socket programs under rdma-core's
//! `librspreload.so` (iperf3, sockperf, ...), run on ferroce unmodified, and talk to
//! rdma-core's own rsockets on an rxe or RoCE host.
//!
//! Stream sockets only. Each is an rdma_cm ID on an event channel of its own, whose fd is
//! the socket's number (as in rdma-core, so numbers never collide with the program's
//! other fds); the protocol (connection data, messages in immediate data, credits and
//! published receive buffers) is rdma-core's, in [`proto`] and [`flow`]. Not built:
//! datagram rsockets (`SOCK_DGRAM`: EOPNOTSUPP), the zero-copy `riomap` / `riowrite`
//! (`crate::stubs`: EOPNOTSUPP; the connection data offers a map of no entries, as
//! rdma-core's default does),
//! keepalive messages (the option is kept, nothing is sent).

mod api;
mod ep;
mod flow;
mod poll;
mod proto;
mod stream;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError};

use stream::RSocket;

/// A peer broke the protocol and its connection ends: counted as
/// `rsocket_protocol_errors` (in `FERROCE_STATS` reports when not 0).
fn count_protocol_error() {
    crate::stats::RSOCKET_PROTOCOL_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The live sockets by number.
static SOCKETS: Mutex<BTreeMap<c_int, Arc<RSocket>>> = Mutex::new(BTreeMap::new());

fn insert(s: RSocket) -> c_int {
    let fd = s.fd;
    SOCKETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(fd, Arc::new(s));
    fd
}

fn lookup(fd: c_int) -> Option<Arc<RSocket>> {
    SOCKETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&fd)
        .cloned()
}

fn remove(fd: c_int) -> Option<Arc<RSocket>> {
    SOCKETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&fd)
}

crate::exports::versioned! {
    raccept @ "RDMACM_1.0";
    rbind @ "RDMACM_1.0";
    rclose @ "RDMACM_1.0";
    rconnect @ "RDMACM_1.0";
    rfcntl @ "RDMACM_1.0";
    rgetpeername @ "RDMACM_1.0";
    rgetsockname @ "RDMACM_1.0";
    rgetsockopt @ "RDMACM_1.0";
    rlisten @ "RDMACM_1.0";
    rpoll @ "RDMACM_1.0";
    rread @ "RDMACM_1.0";
    rreadv @ "RDMACM_1.0";
    rrecv @ "RDMACM_1.0";
    rrecvfrom @ "RDMACM_1.0";
    rrecvmsg @ "RDMACM_1.0";
    rselect @ "RDMACM_1.0";
    rsend @ "RDMACM_1.0";
    rsendmsg @ "RDMACM_1.0";
    rsendto @ "RDMACM_1.0";
    rsetsockopt @ "RDMACM_1.0";
    rshutdown @ "RDMACM_1.0";
    rsocket @ "RDMACM_1.0";
    rwrite @ "RDMACM_1.0";
    rwritev @ "RDMACM_1.0";
}

//! Connections a program leaves open when it destroys their channel or exits: ended as
//! closing its rdma_cm file ends them in the kernel.
//!
//! With rdma-core, an event channel is a file of the kernel's rdma_ucm, and its IDs live in
//! the kernel. Closing the file (`rdma_destroy_event_channel`, or the process's exit, which
//! closes every file) destroys the IDs still on it, and the IB CM sends what ends each
//! connection: a DREQ from an established one, the DREP to a peer's DREQ. The peer hears
//! DISCONNECTED at once. ferroce's IDs live in the process, so nothing did that: a peer
//! waited out its DREQ's resends (4.3 s each) or, having sent nothing, never heard. qperf
//! 0.4.11's server with `-cm1` closes so (it destroys its listening ID and the channel,
//! never the connected ID), and each of its tests took 5 s more than it ran.
//!
//! A child of `fork()` shares its parent's rdma_cm file in the kernel, so its exit or its
//! destroying the channel ends nothing: the table here is a [`PerProcess`] one, which a
//! child finds empty.

use std::sync::{Arc, MutexGuard, TryLockError, Weak};
use std::time::Duration;

use super::channel::Events;
use super::id::{Shared, St};
use crate::per_process::PerProcess;

/// The IDs of this process that have had a connection (connected or accepted).
static CONNECTED: PerProcess<Weak<Shared>> = PerProcess::new();

/// Notes that `sh` has a connection now, to be ended with its channel or the process.
pub(super) fn track(sh: &Arc<Shared>) {
    crate::exit_hooks::add(at_exit);
    let mut t = CONNECTED.lock();
    // Bounded by the IDs alive: the dead go at each insertion.
    t.retain(|w| w.strong_count() > 0);
    t.push(Arc::downgrade(sh));
}

/// `rdma_destroy_event_channel`: the connections of the IDs still on `events` end.
pub(super) fn channel_closed(events: &Arc<Events>) {
    for sh in live() {
        if Arc::ptr_eq(&sh.events(), events) {
            end(sh.lock());
        }
    }
}

/// The process exits: every connection still open ends.
fn at_exit() {
    for sh in live() {
        if let Some(st) = lock_soon(&sh) {
            end(st);
        }
    }
}

fn live() -> Vec<Arc<Shared>> {
    CONNECTED.lock().iter().filter_map(Weak::upgrade).collect()
}

/// The ID's lock, if it comes within 100 ms: at exit another thread may be stopped for
/// good inside a call that holds it.
fn lock_soon(sh: &Shared) -> Option<MutexGuard<'_, St>> {
    for _ in 0..100 {
        match sh.st.try_lock() {
            Ok(st) => return Some(st),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    None
}

/// Sends what ends `sh`'s connection (the DREQ, or the DREP to the peer's DREQ), unless
/// the program ended it already; `st` is its state, locked (let go before the CM is
/// called, as `rdma_disconnect` does).
fn end(mut st: MutexGuard<'_, St>) {
    if !st.alive || st.closing {
        return; // destroyed (which ended it) or disconnected by the program
    }
    let (Some(conn), Some(dev)) = (st.conn, st.dev.clone()) else {
        return;
    };
    st.closing = true;
    drop(st);
    let _ = dev.cm.begin_disconnect(conn);
}

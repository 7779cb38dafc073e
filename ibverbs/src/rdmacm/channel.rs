//! Event channels and events: `rdma_create_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`, `rdma_destroy_event_channel`.
//!
//! A channel's `fd` is a semaphore eventfd with one count per waiting event: it is
//! readable exactly while `rdma_get_cm_event` has something to return, blocks that call
//! while it has not, and a program that sets O_NONBLOCK on it gets EAGAIN instead.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use ferroce::link::eventfd::EventFd;

use crate::ffi::cma_h::*;
use crate::guard::{catch, null_with, set_errno};
use crate::handles::{self, Kind};

/// An event as C sees it, and the private data its `param` points into.
#[repr(C)]
pub(crate) struct Event {
    /// Must come first: C's `rdma_cm_event *` points at it.
    pub c: rdma_cm_event,
    pub private: Vec<u8>,
    /// The count of its ID's events handed out and not yet acknowledged.
    pub unacked: Option<Arc<Unacked>>,
    /// A CONNECT_REQUEST's place in its listener's backlog, given back when the program
    /// reads the event (or the event goes unread with its ID).
    pub slot: Option<Slot>,
}

/// Linux's bound on a listen backlog (`net.rdma_ucm.max_backlog`'s default), and the
/// backlog of a listen that asks for none (0 or less).
pub(crate) const MAX_BACKLOG: usize = 1024;

/// A listening ID's CONNECT_REQUEST events posted and not yet read: at most its
/// `rdma_listen` backlog, as in Linux's rdma_ucm. A request beyond it is dropped
/// unanswered, so that its sender's resend may find room; without the bound a peer
/// sending fresh REQs to a program that stops reading its channel would grow the
/// queued events and their IDs without end.
#[derive(Default)]
pub(crate) struct Backlog {
    limit: AtomicUsize,
    unread: AtomicUsize,
}

/// One place in a [`Backlog`], held by the event until it is read.
pub(crate) struct Slot(Arc<Backlog>);

impl Backlog {
    /// Sets the bound from `rdma_listen`'s `backlog`.
    pub(crate) fn set_limit(&self, backlog: c_int) {
        let n = usize::try_from(backlog)
            .ok()
            .filter(|n| (1..=MAX_BACKLOG).contains(n))
            .unwrap_or(MAX_BACKLOG);
        self.limit.store(n, Ordering::Relaxed);
    }

    /// A place for one more unread request, if the backlog has room.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Slot> {
        let limit = self.limit.load(Ordering::Relaxed);
        self.unread
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }

    /// Requests posted and not yet read.
    #[cfg(test)]
    pub(crate) fn unread(&self) -> usize {
        self.unread.load(Ordering::Acquire)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.unread.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An ID's events handed to the program and not acknowledged yet: rdma_destroy_id waits
/// for them, as rdma_cm's does (a program's event thread then goes back to waiting on the
/// channel before the program tears it down).
#[derive(Default)]
pub(crate) struct Unacked {
    n: Mutex<usize>,
    acked: Condvar,
}

impl Unacked {
    fn add(&self, d: isize) {
        let mut n = self.n.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_add_signed(d);
        self.acked.notify_all();
    }

    /// Waits (at most `limit`) until every event handed out is acknowledged.
    pub(crate) fn wait(&self, limit: std::time::Duration) {
        let n = self.n.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .acked
            .wait_timeout_while(n, limit, |n| *n > 0)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

// SAFETY: the raw pointers inside are C handles (IDs) and a pointer into `private`,
// which moves with the event; nothing in Rust dereferences the handles.
unsafe impl Send for Event {}

impl Event {
    /// An event of `kind` about `id` (a C `rdma_cm_id *`).
    pub(crate) fn new(kind: rdma_cm_event_type, id: usize, status: c_int) -> Event {
        // SAFETY: plain C data (pointers, integers, unions of them); zero is valid.
        let mut c: rdma_cm_event = unsafe { std::mem::zeroed() };
        c.event = kind;
        c.id = id as *mut rdma_cm_id;
        c.status = status;
        Event {
            c,
            private: Vec::new(),
            unacked: None,
            slot: None,
        }
    }
}

/// The events of one channel.
pub(crate) struct Events {
    fd: EventFd,
    queue: Mutex<VecDeque<Box<Event>>>,
}

impl Events {
    pub(crate) fn new() -> std::io::Result<Events> {
        Ok(Events {
            fd: EventFd::semaphore()?,
            queue: Mutex::new(VecDeque::new()),
        })
    }

    /// Queues `e` (its private data pointer set here, where it stops moving).
    pub(crate) fn post(&self, mut e: Box<Event>) {
        if !e.private.is_empty() {
            let len = e.private.len().min(u8::MAX as usize) as u8;
            let ptr = e.private.as_ptr().cast();
            let param = &raw mut e.c.param as *mut rdma_conn_param;
            // SAFETY: both union members begin with `private_data` and
            // `private_data_len` at the same offsets; `param` points into `e`.
            unsafe {
                (*param).private_data = ptr;
                (*param).private_data_len = len;
            }
        }
        tracing::debug!(event = e.c.event, status = e.c.status, "rdma_cm event");
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(e);
        self.fd.wake();
    }

    /// Blocks (unless the program made the fd non-blocking) for the next event, counted
    /// among its ID's events handed out before it leaves the queue: `forget` then
    /// `Unacked::wait` (rdma_destroy_id) either takes an event back or waits for it.
    fn next(&self) -> Result<Box<Event>, c_int> {
        loop {
            self.fd
                .take()
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            // None: `forget` took this count's event away meanwhile; wait for the next.
            if let Some(mut e) = q.pop_front() {
                if let Some(u) = &e.unacked {
                    u.add(1);
                }
                drop(q);
                e.slot = None; // read: its backlog place is free
                return Ok(e);
            }
        }
    }

    /// Takes out the events of `id` not yet read (the ID moves to another channel).
    pub(crate) fn take_of(&self, id: usize) -> VecDeque<Box<Event>> {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let (mine, rest): (VecDeque<_>, VecDeque<_>) =
            q.drain(..).partition(|e| e.c.id as usize == id);
        *q = rest;
        for _ in 0..mine.len() {
            let _ = self.fd.try_take();
        }
        mine
    }

    /// Takes back the events of `id` not yet read (the ID is going away).
    pub(crate) fn forget(&self, id: usize) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let before = q.len();
        q.retain(|e| e.c.id as usize != id);
        for _ in q.len()..before {
            // One count per event taken away; the queue lock keeps readers out.
            let _ = self.fd.try_take();
        }
    }
}

/// A channel as C sees it.
#[repr(C)]
pub(crate) struct Channel {
    /// Must come first: C's `rdma_event_channel *` points at it.
    pub c: rdma_event_channel,
    pub events: Arc<Events>,
}

/// The channel behind `p`, if live.
pub(crate) fn channel_of(p: *const rdma_event_channel) -> Option<&'static Channel> {
    // SAFETY: live (checked), freed only by rdma_destroy_event_channel.
    handles::get(p as *const Channel, Kind::CmChannel).map(|p| unsafe { &*p })
}

/// A new channel, live.
pub(crate) fn create() -> Result<*mut Channel, c_int> {
    crate::log::init();
    let events = Arc::new(Events::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?);
    let c = rdma_event_channel {
        fd: events.fd.as_raw_fd(),
    };
    Ok(handles::insert(
        Box::new(Channel { c, events }),
        Kind::CmChannel,
    ))
}

/// Frees the channel made for a synchronous ID (`ch`), which nothing else uses: when the
/// ID goes or moves onto a program's channel. Not as rdma_destroy_event_channel, which
/// would end the connections of the IDs on it.
pub(crate) fn release_own(ch: usize) {
    drop(handles::remove(ch as *mut Channel, Kind::CmChannel));
}

#[export_name = "__ferroce_rdma_create_event_channel"]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    catch(
        "rdma_create_event_channel",
        std::ptr::null_mut(),
        || match create() {
            Ok(p) => p.cast(),
            Err(e) => null_with(e),
        },
    )
}

#[export_name = "__ferroce_rdma_destroy_event_channel"]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    catch("rdma_destroy_event_channel", (), || {
        // As closing rdma_cm's file: the connections of IDs still on it end.
        if let Some(ch) = handles::remove(channel as *mut Channel, Kind::CmChannel) {
            super::channel_closed(&ch.events);
        }
    })
}

#[export_name = "__ferroce_rdma_get_cm_event"]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    catch("rdma_get_cm_event", -1, || {
        let Some(ch) = channel_of(channel) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // Its own reference: the program may destroy the channel while this waits.
        let events = ch.events.clone();
        match events.next() {
            Ok(e) => {
                let p = handles::insert(e, Kind::CmEvent);
                // SAFETY: `event` is non-NULL, and the caller's to write (the API's contract).
                unsafe { *event = p.cast() };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

#[export_name = "__ferroce_rdma_ack_cm_event"]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    catch("rdma_ack_cm_event", -1, || {
        match handles::remove(event as *mut Event, Kind::CmEvent) {
            Some(e) => {
                if let Some(u) = &e.unacked {
                    u.add(-1);
                }
                0
            }
            None => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    })
}

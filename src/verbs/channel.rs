//! Completion channels: a descriptor that polls readable when a CQ attached to it
//! completes work after a notification request, as `ibv_comp_channel` does.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};

use crate::driver::CqEventSink;
use crate::link::eventfd::EventFd;

use super::{CompletionQueue, Error};

/// A completion channel: CQs attached to it ([`CompletionQueue::attach_channel`]) report
/// here when a requested notification ([`CompletionQueue::req_notify`]) fires. Its
/// descriptor polls readable while events wait; [`CompletionChannel::get_event`] takes
/// one. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CompletionChannel {
    inner: Arc<Channel>,
}

#[derive(Debug)]
struct Channel {
    /// One count per queued event (semaphore mode): blocking reads wait for the next.
    fd: EventFd,
    /// The tokens of the CQs that fired, oldest first. A leaf lock.
    events: Mutex<VecDeque<u64>>,
}

impl CqEventSink for Channel {
    fn cq_event(&self, token: u64) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(token);
        self.fd.wake();
    }
}

impl CompletionChannel {
    /// A new channel with nothing attached.
    pub fn new() -> Result<CompletionChannel, Error> {
        Ok(CompletionChannel {
            inner: Arc::new(Channel {
                fd: EventFd::semaphore()?,
                events: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// The descriptor: readable while events wait. It blocks in `get_event` unless its
    /// owner sets O_NONBLOCK on it (then `get_event` fails with `WouldBlock`).
    pub fn fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }

    /// Takes the next event: the token of the CQ that fired. Blocks until one comes
    /// unless the descriptor is non-blocking; fails with `Interrupted` when a signal
    /// handler installed without `SA_RESTART` runs meanwhile, as read(2) does.
    pub fn get_event(&self) -> io::Result<u64> {
        self.inner.fd.take()?;
        self.inner
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .ok_or_else(|| io::Error::other("completion channel: count without an event"))
    }

    /// Events waiting.
    pub fn pending(&self) -> usize {
        self.inner
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl CompletionQueue {
    /// Reports this CQ's notifications to `channel`, tagged `token` (what
    /// [`CompletionChannel::get_event`] returns for it).
    pub fn attach_channel(&self, channel: &CompletionChannel, token: u64) {
        self.ctx
            .shared()
            .attach_cq_events(self.id, channel.inner.clone(), token);
    }

    /// Requests one notification at the next completion, or with `solicited_only` at
    /// the next completion of a message sent with the solicited-event flag (or an
    /// error): `ibv_req_notify_cq`.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        let shared = self.ctx.shared();
        let mut ep = shared.endpoint();
        ep.req_notify_cq(self.id, solicited_only)?;
        self.armed.store(true, std::sync::atomic::Ordering::Relaxed);
        // The caller is about to sleep until a completion: what its posts left for its
        // next poll goes now.
        shared.send_pending(&mut ep);
        Ok(())
    }
}

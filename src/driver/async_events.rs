//! Asynchronous events (a QP that failed by itself, a CQ that overflowed): taken from the
//! transport wherever it may raise them and handed to every subscriber of the device.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use ferroce_transport::{AsyncEvent, Endpoint};

use super::Shared;

/// Who hears a device's asynchronous events.
pub trait AsyncEventSink: Send + Sync {
    /// `event` happened. Called with the endpoint locked: take only leaf locks, do not
    /// block.
    fn async_event(&self, event: AsyncEvent);
}

/// The subscribers; a leaf lock, taken with the endpoint locked.
#[derive(Default)]
pub(super) struct AsyncEvents {
    sinks: Mutex<Vec<Weak<dyn AsyncEventSink>>>,
}

impl AsyncEvents {
    fn sinks(&self) -> MutexGuard<'_, Vec<Weak<dyn AsyncEventSink>>> {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Shared {
    /// Hands the device's asynchronous events to `sink` from now on, while it lives.
    pub fn subscribe_async_events(&self, sink: &Arc<dyn AsyncEventSink>) {
        let mut sinks = self.async_events.sinks();
        sinks.retain(|s| s.strong_count() > 0);
        sinks.push(Arc::downgrade(sink));
    }

    /// Delivers the events the transport raised since the last call; cheap when none.
    pub(super) fn deliver_async_events(&self, ep: &mut Endpoint) {
        if !ep.has_async_events() {
            return;
        }
        let mut raised = Vec::new();
        ep.take_async_events(&mut raised);
        let sinks: Vec<_> = self
            .async_events
            .sinks()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for e in raised {
            tracing::debug!(event = ?e, "asynchronous event");
            for s in &sinks {
                s.async_event(e);
            }
        }
    }
}

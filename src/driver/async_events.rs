//! Asynchronous events (a QP that failed by itself, a CQ that overflowed): taken from the
//! transport wherever it may raise them and handed to every subscriber of the device; and
//! the port's own (its link went down or came up) and the device's (its interface is
//! gone), raised by the driver thread when the link says its state changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use ferroce_transport::{AsyncEvent, Endpoint};

use super::Shared;

/// Who hears a device's asynchronous events.
pub trait AsyncEventSink: Send + Sync {
    /// `event` happened. Called with the endpoint locked: take only leaf locks, do not
    /// block.
    fn async_event(&self, event: AsyncEvent);
}

/// The subscribers (a leaf lock, taken with the endpoint locked), and the port's state.
pub(super) struct AsyncEvents {
    sinks: Mutex<Vec<Weak<dyn AsyncEventSink>>>,
    /// The port is ACTIVE: its link is up (changed by the driver thread only).
    port_up: AtomicBool,
    /// DEVICE_FATAL was raised: the link's interface is gone (set once, by the driver
    /// thread).
    fatal: AtomicBool,
}

impl AsyncEvents {
    pub(super) fn new(port_up: bool) -> AsyncEvents {
        AsyncEvents {
            sinks: Mutex::default(),
            port_up: AtomicBool::new(port_up),
            fatal: AtomicBool::new(false),
        }
    }

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
        self.broadcast(&raised);
    }

    /// Whether the port is ACTIVE (its link up, with carrier) as of the driver's last look.
    pub fn port_active(&self) -> bool {
        self.async_events.port_up.load(Ordering::Relaxed)
    }

    /// Whether the device is dead: its interface left for good.
    pub fn device_fatal(&self) -> bool {
        self.async_events.fatal.load(Ordering::Relaxed)
    }

    /// The link said its state may have changed: a change of the port's state raises
    /// PORT_ACTIVE or PORT_ERR, as rxe does when its netdev comes up or goes down, and an
    /// interface that left raises DEVICE_FATAL once, after PORT_ERR, as rxe's device is
    /// unregistered with its netdev. QPs are left as they are (their retries run out).
    pub(super) fn check_port(&self) {
        let up = self.io.link.is_up();
        if self.async_events.port_up.swap(up, Ordering::Relaxed) != up {
            tracing::info!(up, "port state changed");
            self.broadcast(&[if up {
                AsyncEvent::PortActive
            } else {
                AsyncEvent::PortErr
            }]);
        }
        if self.io.link.is_gone() && !self.async_events.fatal.swap(true, Ordering::Relaxed) {
            tracing::warn!("the port's interface is gone: the device cannot work again");
            self.broadcast(&[AsyncEvent::DeviceFatal]);
        }
    }

    /// Hands `raised` to every subscriber.
    fn broadcast(&self, raised: &[AsyncEvent]) {
        let sinks: Vec<_> = self
            .async_events
            .sinks()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for &e in raised {
            tracing::debug!(event = ?e, "asynchronous event");
            for s in &sinks {
                s.async_event(e);
            }
        }
    }
}

//! Completion-channel events: the transport marks CQs whose requested notification fired
//! (`ibv_req_notify_cq`); the driver hands each to the channel the CQ is attached to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ferroce_transport::{CqId, Endpoint};

use super::Shared;

/// Where a CQ's notifications go: a completion channel.
pub trait CqEventSink: Send + Sync {
    /// The CQ attached with `token` fired its requested notification. Called with the
    /// endpoint locked: it must only take leaf locks and not block.
    fn cq_event(&self, token: u64);
}

/// Each attached CQ's sink and the token it reports with.
type Sinks = HashMap<CqId, (Arc<dyn CqEventSink>, u64)>;

/// The channel each CQ is attached to.
#[derive(Default)]
pub(super) struct CqEvents {
    /// A leaf lock, taken with the endpoint locked.
    sinks: Mutex<Sinks>,
}

impl CqEvents {
    fn sinks(&self) -> MutexGuard<'_, Sinks> {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Shared {
    /// Sends `cq`'s notifications to `sink`, tagged `token`.
    pub fn attach_cq_events(&self, cq: CqId, sink: Arc<dyn CqEventSink>, token: u64) {
        self.cq_events.sinks().insert(cq, (sink, token));
    }

    /// Stops sending `cq`'s notifications anywhere.
    pub fn detach_cq_events(&self, cq: CqId) {
        self.cq_events.sinks().remove(&cq);
    }

    /// Delivers the notifications the transport fired since the last call, and its
    /// asynchronous events; cheap when there are none. Called wherever completions can appear: after received frames,
    /// timers and API calls.
    pub(super) fn deliver_cq_events(&self, ep: &mut Endpoint) {
        // Asynchronous events appear at the same points.
        self.deliver_async_events(ep);
        if !ep.has_cq_events() {
            return;
        }
        let mut fired = Vec::new();
        ep.take_cq_events(&mut fired);
        let sinks = self.cq_events.sinks();
        for cq in fired {
            // A CQ without a channel was armed by a Rust user polling it: nothing to tell.
            if let Some((sink, token)) = sinks.get(&cq) {
                sink.cq_event(*token);
            }
        }
    }
}

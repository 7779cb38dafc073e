//! Completion queues: bounded FIFOs of work completions, with the notification requests
//! of completion channels (`ibv_req_notify_cq`).

use std::collections::VecDeque;

use crate::counters::Counters;
use crate::verbs::{CqId, WcStatus, WorkCompletion};

#[derive(Debug)]
struct Cq {
    depth: usize,
    entries: VecDeque<WorkCompletion>,
    /// A notification was requested: `Some(solicited_only)`. One event per request, as
    /// with a hardware CQ's arm.
    armed: Option<bool>,
}

/// Every completion queue of an endpoint.
#[derive(Debug, Default)]
pub(crate) struct CqTable {
    cqs: Vec<Option<Cq>>,
    /// CQs whose armed notification fired, for the driver to deliver (oldest first).
    events: Vec<CqId>,
    /// CQs that overflowed since the last [`CqTable::take_errors`], once each.
    errors: Vec<CqId>,
}

impl CqTable {
    pub(crate) fn create(&mut self, depth: usize) -> CqId {
        let cq = Cq {
            depth,
            entries: VecDeque::new(),
            armed: None,
        };
        if let Some(i) = self.cqs.iter().position(Option::is_none) {
            self.cqs[i] = Some(cq);
            CqId(i as u32)
        } else {
            self.cqs.push(Some(cq));
            CqId(self.cqs.len() as u32 - 1)
        }
    }

    /// Changes a CQ's depth; fails if it has no such CQ or holds more than `depth`.
    pub(crate) fn resize(&mut self, id: CqId, depth: usize) -> bool {
        match self.cqs.get_mut(id.0 as usize) {
            Some(Some(cq)) if cq.entries.len() <= depth => {
                cq.depth = depth;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn exists(&self, id: CqId) -> bool {
        matches!(self.cqs.get(id.0 as usize), Some(Some(_)))
    }

    pub(crate) fn destroy(&mut self, id: CqId) -> bool {
        match self.cqs.get_mut(id.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                self.events.retain(|e| *e != id);
                self.errors.retain(|e| *e != id);
                true
            }
            _ => false,
        }
    }

    /// Adds a completion; a full CQ drops it and counts `cq_overflow` (an overrun is an
    /// application bug: size CQs for the WRs posted).
    pub(crate) fn push(&mut self, id: CqId, wc: WorkCompletion, counters: &mut Counters) {
        self.push_solicited(id, wc, false, counters);
    }

    /// Adds a completion of a message that asked for a solicited event (BTH SE bit) or
    /// not: a CQ armed for solicited events only fires for those, and for errors
    /// (IB spec 11.4.2.2).
    pub(crate) fn push_solicited(
        &mut self,
        id: CqId,
        wc: WorkCompletion,
        solicited: bool,
        counters: &mut Counters,
    ) {
        match self.cqs.get_mut(id.0 as usize) {
            Some(Some(cq)) if cq.entries.len() < cq.depth => {
                cq.entries.push_back(wc);
                let fire = match cq.armed {
                    Some(solicited_only) => {
                        !solicited_only || solicited || wc.status != WcStatus::Success
                    }
                    None => false,
                };
                if fire {
                    cq.armed = None;
                    self.events.push(id);
                }
            }
            Some(Some(_)) => {
                counters.cq_overflow += 1;
                tracing::debug!(cq = id.0, ?wc, "completion queue overrun");
                if !self.errors.contains(&id) {
                    self.errors.push(id);
                }
            }
            _ => {
                counters.cq_overflow += 1;
                tracing::debug!(cq = id.0, ?wc, "completion for a destroyed CQ");
            }
        }
    }

    /// Requests one event at the next completion (or the next solicited or error one).
    pub(crate) fn arm(&mut self, id: CqId, solicited_only: bool) -> bool {
        match self.cqs.get_mut(id.0 as usize) {
            Some(Some(cq)) => {
                // A request for any completion is not narrowed by a later solicited-only one.
                cq.armed = Some(solicited_only && cq.armed.unwrap_or(true));
                true
            }
            _ => false,
        }
    }

    /// Whether a CQ overflowed since the last [`CqTable::take_errors`].
    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Whether armed notifications fired since the last [`CqTable::take_events`].
    pub(crate) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Moves the CQs that overflowed into `out`.
    pub(crate) fn take_errors(&mut self, out: &mut Vec<CqId>) {
        out.append(&mut self.errors);
    }

    /// Moves the fired notifications into `out`.
    pub(crate) fn take_events(&mut self, out: &mut Vec<CqId>) {
        out.append(&mut self.events);
    }

    /// Moves up to `max` completions into `out`; returns how many.
    pub(crate) fn poll(&mut self, id: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        match self.cqs.get_mut(id.0 as usize) {
            Some(Some(cq)) => {
                let n = max.min(cq.entries.len());
                out.extend(cq.entries.drain(..n));
                n
            }
            _ => 0,
        }
    }

    pub(crate) fn len(&self, id: CqId) -> usize {
        match self.cqs.get(id.0 as usize) {
            Some(Some(cq)) => cq.entries.len(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::WcOpcode;

    fn wc(status: WcStatus) -> WorkCompletion {
        WorkCompletion::new(1, 7, WcOpcode::Recv, status)
    }

    fn events(t: &mut CqTable) -> Vec<CqId> {
        let mut out = Vec::new();
        t.take_events(&mut out);
        out
    }

    #[test]
    fn an_armed_cq_fires_once_per_request() {
        let (mut t, mut c) = (CqTable::default(), Counters::default());
        let id = t.create(8);
        t.push(id, wc(WcStatus::Success), &mut c);
        assert!(events(&mut t).is_empty(), "not armed: no event");
        assert!(t.arm(id, false));
        t.push(id, wc(WcStatus::Success), &mut c);
        t.push(id, wc(WcStatus::Success), &mut c);
        assert_eq!(events(&mut t), vec![id], "one event for one request");
        assert!(!t.has_events());
    }

    #[test]
    fn solicited_only_waits_for_a_solicited_or_error_completion() {
        let (mut t, mut c) = (CqTable::default(), Counters::default());
        let id = t.create(8);
        assert!(t.arm(id, true));
        t.push_solicited(id, wc(WcStatus::Success), false, &mut c);
        assert!(!t.has_events(), "unsolicited completion does not fire");
        t.push_solicited(id, wc(WcStatus::Success), true, &mut c);
        assert_eq!(events(&mut t), vec![id]);
        assert!(t.arm(id, true));
        t.push(id, wc(WcStatus::WrFlushErr), &mut c);
        assert_eq!(events(&mut t), vec![id], "errors always fire");
    }

    #[test]
    fn arming_a_destroyed_cq_fails_and_its_events_go() {
        let (mut t, mut c) = (CqTable::default(), Counters::default());
        let id = t.create(8);
        assert!(t.arm(id, false));
        t.push(id, wc(WcStatus::Success), &mut c);
        assert!(t.destroy(id));
        assert!(!t.has_events());
        assert!(!t.arm(id, false));
    }
}

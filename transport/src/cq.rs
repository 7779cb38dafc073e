//! Completion queues: bounded FIFOs of work completions.

use std::collections::VecDeque;

use crate::counters::Counters;
use crate::verbs::{CqId, WorkCompletion};

#[derive(Debug)]
struct Cq {
    depth: usize,
    entries: VecDeque<WorkCompletion>,
}

/// Every completion queue of an endpoint.
#[derive(Debug, Default)]
pub(crate) struct CqTable {
    cqs: Vec<Option<Cq>>,
}

impl CqTable {
    pub(crate) fn create(&mut self, depth: usize) -> CqId {
        let cq = Cq {
            depth,
            entries: VecDeque::new(),
        };
        if let Some(i) = self.cqs.iter().position(Option::is_none) {
            self.cqs[i] = Some(cq);
            CqId(i as u32)
        } else {
            self.cqs.push(Some(cq));
            CqId(self.cqs.len() as u32 - 1)
        }
    }

    pub(crate) fn exists(&self, id: CqId) -> bool {
        matches!(self.cqs.get(id.0 as usize), Some(Some(_)))
    }

    pub(crate) fn destroy(&mut self, id: CqId) -> bool {
        match self.cqs.get_mut(id.0 as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                true
            }
            _ => false,
        }
    }

    /// Adds a completion; a full CQ drops it and counts `cq_overflow` (an overrun is an
    /// application bug: size CQs for the WRs posted).
    pub(crate) fn push(&mut self, id: CqId, wc: WorkCompletion, counters: &mut Counters) {
        match self.cqs.get_mut(id.0 as usize) {
            Some(Some(cq)) if cq.entries.len() < cq.depth => cq.entries.push_back(wc),
            _ => {
                counters.cq_overflow += 1;
                tracing::debug!(cq = id.0, ?wc, "completion queue overrun");
            }
        }
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

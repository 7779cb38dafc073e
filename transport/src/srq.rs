//! Shared receive queues: one pool of receive WQEs that several QPs draw from.

use std::collections::{BTreeMap, VecDeque};

use crate::error::{Error, Result};
use crate::verbs::{PdId, RecvWr, SrqAttr, SrqId};

/// One shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: PdId,
    pub attr: SrqAttr,
    pub queue: VecDeque<RecvWr>,
    /// QPs attached to it.
    pub users: usize,
}

/// Every SRQ of an endpoint.
#[derive(Debug, Default)]
pub(crate) struct SrqTable {
    srqs: BTreeMap<u32, Srq>,
    next: u32,
}

impl SrqTable {
    pub fn create(&mut self, pd: PdId, attr: SrqAttr) -> SrqId {
        self.next += 1;
        let id = self.next;
        self.srqs.insert(
            id,
            Srq {
                pd,
                attr,
                queue: VecDeque::new(),
                users: 0,
            },
        );
        SrqId(id)
    }

    pub fn destroy(&mut self, id: SrqId) -> Result<()> {
        match self.srqs.get(&id.0) {
            None => Err(Error::InvalidSrq),
            Some(s) if s.users > 0 => Err(Error::SrqInUse),
            Some(_) => {
                self.srqs.remove(&id.0);
                Ok(())
            }
        }
    }

    pub fn get(&self, id: SrqId) -> Option<&Srq> {
        self.srqs.get(&id.0)
    }

    pub fn get_mut(&mut self, id: SrqId) -> Option<&mut Srq> {
        self.srqs.get_mut(&id.0)
    }

    /// Whether any SRQ belongs to `pd`.
    pub fn uses_pd(&self, pd: PdId) -> bool {
        self.srqs.values().any(|s| s.pd == pd)
    }

    /// Queues a receive WR after checking it against the SRQ's limits.
    pub fn post(&mut self, id: SrqId, wr: &RecvWr) -> Result<()> {
        let s = self.srqs.get_mut(&id.0).ok_or(Error::InvalidSrq)?;
        if s.queue.len() >= s.attr.max_wr as usize {
            return Err(Error::QueueFull);
        }
        if wr.sg_list.len() > s.attr.max_sge as usize {
            return Err(Error::TooManySge);
        }
        crate::mr::sge_total(&wr.sg_list).ok_or(Error::MessageTooLarge)?;
        s.queue.push_back(wr.clone());
        Ok(())
    }
}

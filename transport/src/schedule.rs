//! Which QPs the endpoint has to look at: those that may have a datagram to send, and the
//! earliest timer of each.
//!
//! Why: `poll_transmit`, `poll_timeout` and `handle_timeout` each visited every QP, and a
//! driver asks all three on every turn of its loop. A process of a large all-to-all job
//! (MPI, NCCL) holds a QP per peer, most of them idle at any moment: with 1000 idle QPs
//! on each side, one 64 KiB WRITE cost 4 times as much in the engine benchmark
//! (`rdma_write_64k/idle_qps`). Now the endpoint marks a QP ready whenever anything
//! happens to it (a work request, a packet, a timer, a change of state or of congestion
//! control) and unmarks it once it has nothing to send; and it keeps each QP's earliest
//! deadline in an ordered set. Idle QPs cost nothing per call; a QP whose state changes
//! costs O(log QPs), and only when its earliest deadline moves.
//!
//! The marks are conservative: a ready QP may turn out to have nothing to send (one look,
//! then it is unmarked), but a QP with something to send is always marked, because
//! nothing but those events gives a QP work. The deadlines are exact, so `poll_timeout`
//! says what it did before.

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::time::Instant;

/// What the schedule needs of a QP (implemented by `crate::qp::Qp`; a trait, so that
/// this module does not import the QP's).
pub(crate) trait Scheduled {
    /// The QP's number.
    fn qpn(&self) -> u32;
    /// Its entries in the schedule.
    fn mark(&mut self) -> &mut Mark;
    /// Its earliest timer.
    fn deadline(&self) -> Option<Instant>;
    /// Whether it may have something to send later without any event (paced work
    /// waiting for its pacer).
    fn waits_for_time(&self) -> bool;
}

/// A QP's entries in the [`Schedule`], kept in the QP so that checking them costs no
/// lookup.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mark {
    /// In [`Schedule::ready`].
    ready: bool,
    /// The deadline filed in [`Schedule::deadlines`].
    deadline: Option<Instant>,
}

/// The QPs worth a look, by number, and their deadlines.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    /// QPs that may have a datagram to send.
    ready: BTreeSet<u32>,
    /// Each QP's earliest timer, for QPs with one.
    deadlines: BTreeSet<(Instant, u32)>,
}

impl Schedule {
    /// Something happened to `qp`: it may have work to send, and its timers may have
    /// moved.
    pub(crate) fn touch(&mut self, qp: &mut impl Scheduled) {
        let qpn = qp.qpn();
        let m = qp.mark();
        if !m.ready {
            self.ready.insert(qpn);
            m.ready = true;
        }
        self.retime(qp);
    }

    /// `qp` sent a datagram: it stays ready, and its timers may have moved.
    pub(crate) fn retime(&mut self, qp: &mut impl Scheduled) {
        let (qpn, at) = (qp.qpn(), qp.deadline());
        let m = qp.mark();
        if at == m.deadline {
            return;
        }
        if let Some(old) = m.deadline {
            self.deadlines.remove(&(old, qpn));
        }
        if let Some(at) = at {
            self.deadlines.insert((at, qpn));
        }
        m.deadline = at;
    }

    /// `qp` had nothing to send. It stays ready only while paced work waits for its
    /// pacer, which lets it send as time passes, without an event.
    pub(crate) fn settle(&mut self, qp: &mut impl Scheduled) {
        let (qpn, waits) = (qp.qpn(), qp.waits_for_time());
        let m = qp.mark();
        if m.ready && !waits {
            self.ready.remove(&qpn);
            m.ready = false;
        }
        self.retime(qp);
    }

    /// `qp` is gone.
    pub(crate) fn forget(&mut self, qp: &mut impl Scheduled) {
        let qpn = qp.qpn();
        self.ready.remove(&qpn);
        if let Some(at) = qp.mark().deadline {
            self.deadlines.remove(&(at, qpn));
        }
    }

    /// The lowest ready QP number at or above `from`.
    pub(crate) fn next_ready(&self, from: u32) -> Option<u32> {
        self.ready.range(from..).next().copied()
    }

    /// Whether any QP is marked ready.
    pub(crate) fn any_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The earliest deadline of any QP.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// The first deadline due at `now` after `after` (in deadline, then QP number order):
    /// walking with the last one returned as `after` visits each due QP once, even
    /// where its timer work leaves a deadline in the past.
    pub(crate) fn due(
        &self,
        now: Instant,
        after: Option<(Instant, u32)>,
    ) -> Option<(Instant, u32)> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.deadlines
            .range((from, Bound::Unbounded))
            .next()
            .copied()
            .filter(|&(at, _)| at <= now)
    }

    /// How many QPs are marked ready (for tests).
    #[cfg(test)]
    pub(crate) fn ready_count(&self) -> usize {
        self.ready.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::testing::{connect, QpOpts, Sim};
    use crate::{Access, SendFlags, SendWr, Sge, WrOpcode};

    #[test]
    fn only_qps_with_work_stay_ready() {
        let mut sim = Sim::new(5, 2, false);
        let o = QpOpts::default();
        let pairs: Vec<_> = (0..100).map(|_| connect(&mut sim, 0, 1, &o)).collect();
        assert!(sim.run_idle(Duration::from_secs(1)));
        for n in &sim.nodes {
            assert_eq!(n.schedule().ready_count(), 0, "connected, idle QPs");
            assert!(!n.may_transmit(), "nothing to send");
            assert_eq!(n.poll_timeout(), None);
        }

        let (a, b) = pairs[42];
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let src = sim.nodes[0]
            .reg_mr_with(a.pd, vec![7; 8192], None, all)
            .unwrap();
        let dst = sim.nodes[1].reg_mr(b.pd, 8192, all).unwrap();
        let wr = SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite,
            sg_list: vec![Sge {
                addr: src.addr,
                length: 8192,
                lkey: src.lkey,
            }],
            flags: SendFlags::SIGNALED,
            remote_addr: dst.addr,
            rkey: dst.rkey,
            ..Default::default()
        };
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        assert_eq!(sim.nodes[0].schedule().ready_count(), 1, "the QP posted to");
        assert!(sim.nodes[0].may_transmit());

        assert!(sim.run_idle(Duration::from_secs(1)));
        let mut wcs = Vec::new();
        assert_eq!(sim.nodes[0].poll_cq(a.cq, &mut wcs, 4), 1);
        assert_eq!(wcs[0].status, crate::WcStatus::Success);
        for n in &sim.nodes {
            assert_eq!(n.schedule().ready_count(), 0, "all work done");
            assert!(!n.may_transmit(), "all work done");
            assert_eq!(n.poll_timeout(), None, "no timer left armed");
        }
    }
}

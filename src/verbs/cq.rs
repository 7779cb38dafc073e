//! Completion queues: poll, block with a timeout, or await (tokio).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferroce_transport::{CqId, WorkCompletion};

use super::Context;
use crate::driver::PollMark;

/// Polls `wait_one` makes (each one also polling the link, yielding the core in between)
/// before it sleeps: a few hundred microseconds natively, longer than an emulated round
/// trip. A sleep hands the link back to the driver thread, which then needs a wake-up per
/// frame; spinning longer burns a core that others (a router, the peer) may need.
const SPIN_POLLS: usize = 200;

/// A completion queue.
#[derive(Debug)]
pub struct CompletionQueue {
    pub(super) ctx: Context,
    pub(super) id: CqId,
    /// When this CQ was last found empty (polls skip the lock until something changed).
    mark: PollMark,
    /// The program has asked for a notification on this CQ (`req_notify`): it waits for
    /// completions on a channel, and a poll that finds some is not a sign that it spins.
    pub(super) armed: AtomicBool,
}

impl CompletionQueue {
    pub(crate) fn new(ctx: Context, id: CqId) -> Self {
        CompletionQueue {
            ctx,
            id,
            mark: PollMark::default(),
            armed: AtomicBool::new(false),
        }
    }

    /// The CQ's id in the transport: how asynchronous events name it.
    pub fn id(&self) -> CqId {
        self.id
    }

    /// Whether a QP still uses this CQ (destroying it now would fail).
    pub fn in_use(&self) -> bool {
        self.ctx.shared().endpoint().cq_in_use(self.id)
    }

    /// Changes the number of completions the CQ holds (at least those it holds now).
    pub fn resize(&self, depth: usize) -> Result<(), super::Error> {
        self.ctx.shared().endpoint().resize_cq(self.id, depth)?;
        Ok(())
    }

    /// Moves up to `max` completions into `out`; returns how many.
    pub fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        self.poll_busy(out, max).0
    }

    /// [`CompletionQueue::poll`], and whether the call took frames in from the link (poll
    /// mode) even where they completed nothing here: a caller spinning on the CQ can tell
    /// a poll that did the driver's work from an idle one, and give its core up after an
    /// idle one only.
    pub fn poll_busy(&self, out: &mut Vec<WorkCompletion>, max: usize) -> (usize, bool) {
        let shared = self.ctx.shared();
        let mut n = shared.poll_cq(self.id, &self.mark, out, max);
        let mut received = false;
        let armed = self.armed.load(Ordering::Relaxed);
        // Poll mode: with the CQ empty, take in what the link holds on this thread (the
        // answer being waited for is often there already) instead of waiting for the
        // driver thread to wake up for it.
        if n > 0 {
            // A program that polls without ever asking for events spins on its CQs (or on
            // its memory between polls); one that waits on a channel blocks after its
            // polls, and the driver must keep watching the link for it: counted as
            // polling, each of `ibv_rc_pingpong -e`'s polls put the driver into its naps,
            // and every message waited one out (1.1 ms a round trip instead of 58 µs).
            if !armed {
                shared.polled_completions();
            }
        } else {
            // The same holds for the polls that find nothing (rsockets wait this way).
            let took = if armed {
                shared.poll_rx_before_waiting()
            } else {
                shared.poll_rx()
            };
            if took {
                received = true;
                n = shared.poll_cq(self.id, &self.mark, out, max);
            }
        }
        if n > 0 {
            // Where the peer's next frame has tended to follow a completion closely, take
            // it in too before returning (a program about to wait on its memory would
            // otherwise leave it to the driver thread).
            shared.linger();
        }
        (n, received)
    }

    /// Blocks until a completion is available or `timeout` passes.
    pub fn wait_one(&self, timeout: Duration) -> Option<WorkCompletion> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(1);
        // A completion often follows within microseconds (an ACK on its way): look again
        // a few times, yielding the core, before paying for a sleep and a wake-up.
        for _ in 0..SPIN_POLLS {
            if self.poll(&mut out, 1) == 1 {
                return out.pop();
            }
            std::thread::yield_now();
        }
        loop {
            let gen = self.ctx.shared().completion_generation();
            if self.poll(&mut out, 1) == 1 {
                return out.pop();
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.ctx.shared().wait_completions(gen, deadline - now);
        }
    }

    /// Waits (asynchronously) for the next completion.
    pub async fn next(&self) -> WorkCompletion {
        let mut out = Vec::with_capacity(1);
        loop {
            let notified = self.ctx.shared().completions().notify.notified();
            if self.poll(&mut out, 1) == 1 {
                return out.pop().expect("one completion");
            }
            self.ctx.shared().stop_polling();
            notified.await;
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.ctx.shared().detach_cq_events(self.id);
        let _ = self.ctx.shared().endpoint().destroy_cq(self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::verbs::*;

    /// The driver thread of an idle in-memory device sleeps without locking the endpoint.
    fn settle() {
        std::thread::sleep(Duration::from_millis(50));
    }

    #[test]
    fn an_empty_cq_is_polled_again_without_taking_the_endpoint_lock() {
        let (a, _b) = Context::memory_pair().unwrap();
        let cq = a.create_cq(4).unwrap();
        settle();
        let mut out = Vec::new();
        assert_eq!(
            cq.poll(&mut out, 4),
            0,
            "found empty: the CQ remembers when"
        );
        let (held_tx, held_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let shared = a.shared().clone();
        let holder = std::thread::spawn(move || {
            let _ep = shared.endpoint();
            held_tx.send(()).unwrap();
            // Held until the poller is done, or for 5 s if it blocks on the lock.
            let _ = done_rx.recv_timeout(Duration::from_secs(5));
        });
        held_rx.recv().unwrap();
        let (polled_tx, polled_rx) = mpsc::channel();
        let poller = std::thread::spawn(move || {
            let mut out = Vec::new();
            polled_tx.send(cq.poll(&mut out, 4)).unwrap();
            cq
        });
        let polled = polled_rx.recv_timeout(Duration::from_secs(2));
        let _ = done_tx.send(());
        holder.join().unwrap();
        poller.join().unwrap();
        assert_eq!(polled, Ok(0), "the poll waited for the endpoint lock");
    }

    #[test]
    fn completions_made_after_an_empty_poll_are_seen_by_the_next() {
        let (a, _b) = Context::memory_pair().unwrap();
        let pd = a.alloc_pd().unwrap();
        let cq = a.create_cq(8).unwrap();
        let mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        let qp = pd
            .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
            .unwrap();
        qp.init(Access::LOCAL_WRITE, 0).unwrap();
        for i in 0..3 {
            qp.post_recv(&RecvWr {
                wr_id: i,
                sg_list: vec![mr.sge(0, 8)],
            })
            .unwrap();
        }
        settle();
        let mut out = Vec::new();
        assert_eq!(cq.poll(&mut out, 8), 0);
        // This thread's own call flushes the receives: no frame, no driver involved.
        let mut err = qp.query().unwrap();
        err.qp_state = QpState::Err;
        qp.modify(&err, QpAttrMask::STATE).unwrap();
        assert_eq!(cq.poll(&mut out, 8), 3, "{out:?}");
        assert!(out.iter().all(|w| w.status == WcStatus::WrFlushErr));
    }
}

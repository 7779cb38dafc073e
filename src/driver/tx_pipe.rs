//! Transmit batches and the order they go out in, so that one thread can build the next
//! batch while another is still in the system call sending the last.
//!
//! Why: a send call is long. On a veth (and towards rxe) the receiver's softirq runs inside
//! it, and in the rxe VM a profile of ferroce→rxe 64 KiB WRITEs left 47% of the CPU idle
//! while the two threads that send (the poster and the driver) took turns on the endpoint
//! lock, which each held through its system call. A batch is built under the endpoint lock
//! (the transport writes the frames); once built, its frames are copies that need nothing
//! of the endpoint, so the lock is released for the send. Batches must still reach the
//! link in the order they were built (go-back-N would take a swap within a QP for a loss),
//! so each takes a turn when built, under the endpoint lock, and sends in turn order.
//!
//! Two batches are enough: one in the kernel, one being built. A third thread that wants
//! one waits for a batch to come back, with the endpoint locked; that cannot deadlock,
//! because a batch comes back before its holder locks the endpoint again.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::link::FrameBatch;

/// Transmit batches lent out at once.
const BATCHES: usize = 2;

/// The transmit batches and the turns of the threads sending them.
pub(super) struct TxPipe {
    state: Mutex<State>,
    /// A batch came back.
    freed: Condvar,
    /// A turn ended.
    served: Condvar,
    /// Times a thread waited for a free batch (`tx_batch_waits`) and for the send of an
    /// earlier batch (`tx_turn_waits`): how often building and sending overlapped.
    batch_waits: AtomicU64,
    turn_waits: AtomicU64,
}

struct State {
    free: Vec<FrameBatch>,
    /// The turn the next built batch gets.
    next_turn: u64,
    /// The turn whose batch may be sent now.
    serving: u64,
    /// Threads waiting for a batch, and for their turn: a notification is a system call,
    /// and most batches and turns end with nobody to tell.
    want_batch: usize,
    want_turn: usize,
}

fn relock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Plain counters and buffers: a panic elsewhere cannot leave them half-changed.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn wait<'a>(c: &Condvar, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    c.wait(s).unwrap_or_else(PoisonError::into_inner)
}

impl TxPipe {
    /// Batches of `capacity` frames each.
    pub(super) fn new(capacity: usize) -> Self {
        TxPipe {
            state: Mutex::new(State {
                free: (0..BATCHES).map(|_| FrameBatch::new(capacity)).collect(),
                next_turn: 0,
                serving: 0,
                want_batch: 0,
                want_turn: 0,
            }),
            freed: Condvar::new(),
            served: Condvar::new(),
            batch_waits: AtomicU64::new(0),
            turn_waits: AtomicU64::new(0),
        }
    }

    /// The `tx_batch_waits` and `tx_turn_waits` counters, for `--stats`.
    pub(super) fn counters(&self) -> [(&'static str, u64); 2] {
        [
            ("tx_batch_waits", self.batch_waits.load(Ordering::Relaxed)),
            ("tx_turn_waits", self.turn_waits.load(Ordering::Relaxed)),
        ]
    }

    /// Lends a batch, waiting until one comes back if all are lent. Called with the
    /// endpoint locked.
    pub(super) fn lend(&self) -> Lent<'_> {
        let mut s = relock(&self.state);
        loop {
            if let Some(batch) = s.free.pop() {
                return Lent {
                    pipe: self,
                    batch: Some(batch),
                };
            }
            self.batch_waits.fetch_add(1, Ordering::Relaxed);
            s.want_batch += 1;
            s = wait(&self.freed, s);
            s.want_batch -= 1;
        }
    }

    /// The next place in the send order. Called with the endpoint locked, right after the
    /// batch was built, so turns follow the order batches were built in.
    pub(super) fn turn(&self) -> Turn<'_> {
        let mut s = relock(&self.state);
        let turn = s.next_turn;
        s.next_turn += 1;
        Turn { pipe: self, turn }
    }
}

/// A lent batch; it goes back to the pipe when dropped.
pub(super) struct Lent<'a> {
    pipe: &'a TxPipe,
    /// `Some` until dropped.
    batch: Option<FrameBatch>,
}

impl Deref for Lent<'_> {
    type Target = FrameBatch;
    fn deref(&self) -> &FrameBatch {
        self.batch.as_ref().expect("a lent batch until dropped")
    }
}

impl DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut FrameBatch {
        self.batch.as_mut().expect("a lent batch until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.batch.take() {
            let mut s = relock(&self.pipe.state);
            s.free.push(batch);
            if s.want_batch > 0 {
                self.pipe.freed.notify_one();
            }
        }
    }
}

/// A place in the send order; dropping it (sent, or unwinding) lets the next one go.
pub(super) struct Turn<'a> {
    pipe: &'a TxPipe,
    turn: u64,
}

impl Turn<'_> {
    /// Waits until every batch built before this one has been sent.
    pub(super) fn wait(&self) {
        let mut s = relock(&self.pipe.state);
        if s.serving != self.turn {
            self.pipe.turn_waits.fetch_add(1, Ordering::Relaxed);
        }
        while s.serving != self.turn {
            s.want_turn += 1;
            s = wait(&self.pipe.served, s);
            s.want_turn -= 1;
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = relock(&self.pipe.state);
        // Turns end in order: a turn is dropped only after waiting for it (or on a panic
        // before its send, when the next may go anyway).
        s.serving = s.serving.max(self.turn + 1);
        if s.want_turn > 0 {
            // Every waiter looks: only the next turn's goes on.
            self.pipe.served.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn batches_go_out_in_the_order_their_turns_were_taken() {
        let pipe = TxPipe::new(1);
        let sent = Mutex::new(Vec::new());
        let mut turns: Vec<Turn<'_>> = (0..4).map(|_| pipe.turn()).collect();
        let first = turns.remove(0);
        std::thread::scope(|scope| {
            // The later a turn, the sooner its thread tries to send: without the turns
            // they would send in reverse.
            for (i, turn) in turns.into_iter().enumerate().rev() {
                let sent = &sent;
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(5 * (2 - i) as u64));
                    turn.wait();
                    sent.lock().unwrap().push(i + 1);
                });
            }
            // All three wait while the first turn's batch is "in the kernel".
            let start = std::time::Instant::now();
            while pipe.counters()[1].1 < 3 {
                assert!(start.elapsed() < Duration::from_secs(10), "no turn waited");
                std::thread::sleep(Duration::from_millis(1));
            }
            first.wait();
            sent.lock().unwrap().push(0);
            drop(first);
        });
        assert_eq!(*sent.lock().unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(pipe.counters()[1], ("tx_turn_waits", 3));
    }

    #[test]
    fn a_third_borrower_waits_for_a_batch_to_come_back() {
        let pipe = TxPipe::new(1);
        assert_eq!(BATCHES, 2);
        let a = pipe.lend();
        let b = pipe.lend();
        let got = Mutex::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _c = pipe.lend();
                *got.lock().unwrap() = true;
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(
                !*got.lock().unwrap(),
                "took a third batch while two were lent"
            );
            drop(a);
        });
        assert!(*got.lock().unwrap());
        assert_eq!(pipe.counters()[0], ("tx_batch_waits", 1));
        drop(b);
        assert_eq!(relock(&pipe.state).free.len(), BATCHES);
    }
}

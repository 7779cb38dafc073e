//! Poll mode: programs that poll their CQs let ferroce do the work on their own threads.
//!
//! A program that waits for its peer's RDMA WRITE by watching its own memory (perftest's
//! WRITE latency test does) calls the library only to post its own WRITE and poll for its
//! completion; everything it waits for in between must be stored by someone. After a few
//! rounds its polls linger after the completion and take the peer's WRITE in on the
//! program's own thread, instead of leaving it to the driver thread's wake-up.
//!
//! A burst of posts behind others in flight leaves in a few transmissions, at the poster's
//! next poll: every WRITE still arrives whole and completes in order.

use std::time::{Duration, Instant};

use ferroce::verbs::*;

const ROUNDS: u64 = 400;

/// The tests here count how work is shared between the programs' threads and the driver
/// threads; another test's threads on the same CPUs would change that. One at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn counter(ctx: &Context, name: &str) -> u64 {
    ctx.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

/// One end of a ping-pong: its QP, its CQ, the region the peer writes (or sends) into,
/// and the region it writes (or sends) from.
struct End {
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    inbox: MemoryRegion,
    outbox: MemoryRegion,
}

fn end(ctx: Context, qp_type: QpType) -> End {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.create_qp(&cq, &cq, qp_type, QpCap::default()).unwrap();
    qp.init(Access::LOCAL_WRITE | Access::REMOTE_WRITE, 0)
        .unwrap();
    let inbox = pd
        .reg_mr(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let outbox = pd.reg_mr(8, Access::empty()).unwrap();
    End {
        ctx,
        _pd: pd,
        cq,
        qp,
        inbox,
        outbox,
    }
}

/// Two ends on the in-memory wire, their QPs (RC or UC) connected to each other.
fn pair(qp_type: QpType) -> (End, End) {
    let (a, b) = Context::memory_pair().unwrap();
    let (a, b) = (end(a, qp_type), end(b, qp_type));
    a.qp.connect(&RcPath::new(b.ctx.gid(0).unwrap(), b.qp.qpn(), 1, 2))
        .unwrap();
    b.qp.connect(&RcPath::new(a.ctx.gid(0).unwrap(), a.qp.qpn(), 2, 1))
        .unwrap();
    (a, b)
}

impl End {
    /// Spins on the inbox, as perftest does, until the peer's WRITE of `round` is there.
    fn wait_for(&self, round: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = [0; 8];
        loop {
            self.inbox.read(0, &mut got).unwrap();
            if u64::from_le_bytes(got) == round {
                return;
            }
            assert!(Instant::now() < deadline, "round {round} never arrived");
            std::hint::spin_loop();
        }
    }

    /// WRITEs `round` into the peer's inbox and polls until it completes.
    fn write(&self, round: u64, peer: (u64, u32)) {
        self.outbox.write(0, &round.to_le_bytes()).unwrap();
        self.qp
            .post_send(&wr::rdma_write(
                round,
                self.outbox.sge(0, 8),
                peer.0,
                peer.1,
            ))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = Vec::new();
        while self.cq.poll(&mut out, 1) == 0 {
            assert!(Instant::now() < deadline, "round {round}: no completion");
        }
        assert_eq!((out[0].wr_id, out[0].status), (round, WcStatus::Success));
    }
}

/// Linger counters of both ends after one ping-pong of `ROUNDS` on a fresh pair.
#[derive(Debug)]
struct Seen {
    hits: u64,
    timeouts: u64,
    misses: u64,
}

fn ping_pong(qp_type: QpType) -> Seen {
    ping_pong_armed(qp_type, false)
}

/// [`ping_pong`], each end asking for a notification on its CQ before every post (as a
/// program that waits on a completion channel does) when `armed`.
fn ping_pong_armed(qp_type: QpType, armed: bool) -> Seen {
    let (a, b) = pair(qp_type);
    let arm = |e: &End| {
        if armed {
            e.cq.req_notify(false).unwrap();
        }
    };
    let to_a = (a.inbox.addr(), a.inbox.rkey());
    let to_b = (b.inbox.addr(), b.inbox.rkey());
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..=ROUNDS {
                arm(&a);
                a.write(round, to_b);
                a.wait_for(round);
            }
        });
        s.spawn(|| {
            for round in 1..=ROUNDS {
                b.wait_for(round);
                arm(&b);
                b.write(round, to_a);
            }
        });
    });
    let sum = |name| counter(&a.ctx, name) + counter(&b.ctx, name);
    Seen {
        hits: sum("poll_linger_hits"),
        timeouts: sum("poll_linger_timeouts"),
        misses: sum("poll_linger_misses"),
    }
}

#[test]
fn polls_learn_to_take_in_the_write_a_memory_spinning_program_waits_for() {
    polls_learn_to_linger(QpType::Rc);
}

/// The same over UC, whose WRITE completes as it leaves: the program's polls find their
/// completion at once and never look at the link. They count as polling all the same;
/// until 2026-12-03 they did not, nothing lingered, and every WRITE waited for the driver
/// thread (`ib_write_lat -c UC`: 2 ms typical on a 2-CPU host).
#[test]
fn polls_learn_to_take_in_the_write_over_uc_where_a_write_completes_at_once() {
    polls_learn_to_linger(QpType::Uc);
}

/// A program that asks for events on its CQ waits on the channel after its polls, and
/// the driver must go on watching the link for it: its polls that find completions are not
/// taken for spinning. Until they were told apart (2026-12-03, the same day the UC test
/// above began to pass), each of `ibv_rc_pingpong -e`'s polls put the driver into its naps
/// of up to a millisecond (1.1 ms a round trip instead of 58 µs), and here the polls
/// learnt to linger as over UC without events.
#[test]
fn polls_of_a_cq_armed_for_events_are_not_taken_for_spinning() {
    let _serial = serial();
    let seen = ping_pong_armed(QpType::Uc, true);
    assert_eq!(
        (seen.hits, seen.timeouts, seen.misses),
        (0, 0, 0),
        "lingered, or the driver took the program for a poller: {seen:?}"
    );
}

fn polls_learn_to_linger(qp_type: QpType) {
    let _serial = serial();
    // Without lingering the driver thread executes each of the 2 * ROUNDS WRITEs (the
    // programs poll only until their own WRITE completes): about 600 misses here. With
    // it, a few rounds teach the polls to take in the peer's WRITE, and from then on ACK
    // and WRITE arrive together at the program's poll: a dozen misses. Where other work
    // holds the CPUs, the peer may not run within a linger, lingers time out and the
    // driver takes over, as it should: so up to three tries, each on a fresh pair.
    let mut tries = Vec::new();
    for _ in 0..3 {
        let seen = ping_pong(qp_type);
        assert!(
            seen.hits + seen.timeouts <= 2 * ROUNDS,
            "lingered more often than completions were polled: {seen:?}"
        );
        let learned = seen.hits > 0 && seen.misses <= ROUNDS;
        tries.push(seen);
        if learned {
            return;
        }
    }
    panic!("{qp_type:?}: the driver executed most WRITEs in every try: {tries:?}");
}

/// A's RC QP connected to B's on the in-memory wire (MTU 1024, `RcPath`'s default), and a
/// region of `dst_len` bytes on B that A may write. Fields drop in order: QPs first.
struct Writer {
    qp_a: QueuePair,
    _qp_b: QueuePair,
    cq_a: CompletionQueue,
    _cq_b: CompletionQueue,
    dst: MemoryRegion,
    pd_a: ProtectionDomain,
    _pd_b: ProtectionDomain,
    a: Context,
    _b: Context,
}

fn writer(dst_len: usize) -> Writer {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(4).unwrap());
    let cap = QpCap::default();
    let qp_a = pd_a.create_qp(&cq_a, &cq_a, QpType::Rc, cap).unwrap();
    let qp_b = pd_b.create_qp(&cq_b, &cq_b, QpType::Rc, cap).unwrap();
    qp_b.init(Access::LOCAL_WRITE | Access::REMOTE_WRITE, 0)
        .unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 1, 2))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 2, 1))
        .unwrap();
    let dst = pd_b
        .reg_mr(dst_len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    Writer {
        qp_a,
        _qp_b: qp_b,
        cq_a,
        _cq_b: cq_b,
        dst,
        pd_a,
        _pd_b: pd_b,
        a,
        _b: b,
    }
}

impl Writer {
    /// WRITE `n` of `writes` went to slot `n % slots` of `size` bytes, holding `pattern(n)`:
    /// checks that each slot holds the last WRITE into it.
    fn check_slots(
        &self,
        slots: usize,
        size: usize,
        writes: u64,
        pattern: impl Fn(u64) -> Vec<u8>,
    ) {
        for slot in 0..slots {
            let last = (writes - 1) - ((writes - 1 - slot as u64) % slots as u64);
            let mut got = vec![0; size];
            self.dst.read(slot * size, &mut got).unwrap();
            assert!(
                got == pattern(last),
                "slot {slot} does not hold WRITE {last}"
            );
        }
    }

    /// Posts `writes` work requests, `make(n)` the n-th, as perftest does: as many as
    /// `depth` allows, back to back, then a poll; each must complete, in order.
    fn stream(&self, writes: u64, depth: u64, mut make: impl FnMut(u64) -> SendWr) {
        let (mut posted, mut completed) = (0u64, 0u64);
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while completed < writes {
            while posted < writes && posted - completed < depth {
                self.qp_a.post_send(&make(posted)).unwrap();
                posted += 1;
            }
            out.clear();
            self.cq_a.poll(&mut out, 16);
            for wc in &out {
                assert_eq!((wc.wr_id, wc.status), (completed, WcStatus::Success));
                completed += 1;
            }
            assert!(
                Instant::now() < deadline,
                "{completed} of {writes} completed; {:?}",
                self.a.counters()
            );
        }
    }
}

#[test]
fn a_burst_of_posts_left_for_the_next_poll_arrives_whole_and_in_order() {
    let _serial = serial();
    const SIZE: usize = 4096;
    const SLOTS: usize = 16;
    const WRITES: u64 = 600;
    let w = writer(SIZE * SLOTS);
    // One source slot per WRITE in flight, refilled when its WRITE completes.
    let src = w.pd_a.reg_mr(SIZE * 64, Access::empty()).unwrap();
    let pattern = |n: u64| -> Vec<u8> { (0..SIZE).map(|i| (n as usize * 7 + i) as u8).collect() };
    w.stream(WRITES, 48, |n| {
        let s = (n % 64) as usize * SIZE;
        src.write(s, &pattern(n)).unwrap();
        let d = (n as usize % SLOTS) * SIZE;
        wr::rdma_write(n, src.sge(s, SIZE), w.dst.addr() + d as u64, w.dst.rkey())
    });
    w.check_slots(SLOTS, SIZE, WRITES, pattern);
}

#[test]
fn a_post_of_more_than_one_transmit_batch_sends_it_all_without_waking_the_driver() {
    let _serial = serial();
    // A 64 KiB WRITE at MTU 1024 is 64 packets: exactly one transmit batch. A poster that
    // stopped after one full batch woke the driver for the rest, nearly once per WRITE
    // (about 300 here), though there was rarely a rest; the driver's wake-up then fought
    // the poster for the endpoint lock. The poster now sends up to a few batches itself.
    // One WRITE at a time: each post has nothing ahead of it, so the poster sends it (a
    // stream of them is the driver's, see the next test).
    const SIZE: usize = 64 * 1024;
    const WRITES: u64 = 300;
    let w = writer(SIZE);
    let src = w.pd_a.reg_mr(SIZE, Access::empty()).unwrap();
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 13 + 5) as u8).collect();
    src.write(0, &data).unwrap();
    let before = counter(&w.a, "driver_wakeups");
    w.stream(WRITES, 1, |n| {
        wr::rdma_write(n, src.sge(0, SIZE), w.dst.addr(), w.dst.rkey())
    });
    let wakeups = counter(&w.a, "driver_wakeups") - before;
    assert!(
        wakeups < WRITES / 10,
        "the driver was woken {wakeups} times for {WRITES} WRITEs"
    );
    assert_eq!(counter(&w.a, "posts_left_to_driver"), 0);
    let mut got = vec![0; SIZE];
    w.dst.read(0, &mut got).unwrap();
    assert!(got == data, "the WRITEs' data did not arrive");
}

#[test]
fn a_stream_of_large_posts_is_left_to_the_driver_and_arrives_whole() {
    let _serial = serial();
    // 64 KiB WRITEs, up to four outstanding: every post behind another fills a transmit
    // batch alone, and its frames are the driver's to send (one thread sending one QP's
    // frames). Each WRITE goes to a slot of its own, with a pattern of its own.
    const SIZE: usize = 64 * 1024;
    const SLOTS: usize = 4;
    const WRITES: u64 = 200;
    let pattern = |n: u64| -> Vec<u8> { (0..SIZE).map(|i| (i as u64 * 7 + n) as u8).collect() };
    let w = writer(SIZE * SLOTS);
    let src = w.pd_a.reg_mr(SIZE * SLOTS, Access::empty()).unwrap();
    // Made before the stream: made between two posts (half a millisecond each in a debug
    // build) they gave the WRITE before time to complete, and in about a third of the runs
    // no post found another ahead of it.
    let patterns: Vec<Vec<u8>> = (0..WRITES).map(pattern).collect();
    let before = counter(&w.a, "driver_wakeups");
    let slept = counter(&w.a, "driver_sleeps");
    w.stream(WRITES, SLOTS as u64, |n| {
        let slot = (n % SLOTS as u64) as usize;
        src.write(slot * SIZE, &patterns[n as usize]).unwrap();
        wr::rdma_write(
            n,
            src.sge(slot * SIZE, SIZE),
            w.dst.addr() + (slot * SIZE) as u64,
            w.dst.rkey(),
        )
    });
    let left = counter(&w.a, "posts_left_to_driver");
    let wakeups = counter(&w.a, "driver_wakeups") - before;
    let sleeps = counter(&w.a, "driver_sleeps") - slept;
    // Not the first post (nothing ahead of it), nor any that found the stream drained.
    assert!(
        left >= WRITES / 2,
        "{left} of {WRITES} posts left to the driver"
    );
    assert!(
        wakeups <= left + WRITES / 10,
        "the driver was woken {wakeups} times for {left} posts left to it"
    );
    // A wake-up is written only when none is pending, and one stops pending when the
    // driver's sleep ends: at most one per sleep, and one each at the window's two ends.
    // (Without merging, posts made while the woken driver waited for the lock or a CPU
    // each wrote one: 40-60 more than sleeps here.)
    assert!(
        wakeups <= sleeps + 2,
        "{wakeups} wake-ups written for {sleeps} sleeps of the driver"
    );
    w.check_slots(SLOTS, SIZE, WRITES, pattern);
}

/// The SEND ping-pong's side of an [`End`]: both directions' completions on its one CQ,
/// its inbox always posted as the receive.
impl End {
    fn post_recv(&self) {
        self.qp
            .post_recv(&RecvWr {
                wr_id: 0,
                sg_list: vec![self.inbox.sge(0, 8)],
            })
            .unwrap();
    }

    /// Polls until the peer's message of `round` is received, as `ib_send_lat` does.
    fn receive(&self, round: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = Vec::new();
        loop {
            out.clear();
            if self.cq.poll(&mut out, 1) == 1 {
                assert_eq!(out[0].status, WcStatus::Success, "round {round}");
                if out[0].opcode == WcOpcode::Recv {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "round {round} never arrived");
        }
        let mut got = [0; 8];
        self.inbox.read(0, &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), round);
    }

    fn send(&self, round: u64) {
        self.outbox.write(0, &round.to_le_bytes()).unwrap();
        self.qp
            .post_send(&wr::send(round, self.outbox.sge(0, 8)))
            .unwrap();
    }
}

/// Transmissions (system calls on a real link) of both ends for one SEND ping-pong of
/// `ROUNDS` on a fresh pair.
fn send_ping_pong() -> u64 {
    let (a, b) = pair(QpType::Rc);
    a.post_recv();
    b.post_recv();
    let sent = || counter(&a.ctx, "link_tx_batches") + counter(&b.ctx, "link_tx_batches");
    let before = sent();
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..=ROUNDS {
                a.send(round);
                a.receive(round);
                a.post_recv();
            }
        });
        s.spawn(|| {
            for round in 1..=ROUNDS {
                b.receive(round);
                b.post_recv();
                b.send(round);
            }
        });
    });
    sent() - before
}

impl End {
    /// Waits for the peer's message of `round` on `channel`, as a program that asks for
    /// events does (`ibv_rc_pingpong -e`, rsockets): arm, poll the CQ empty, and sleep
    /// on the channel when nothing came.
    fn receive_on(&self, channel: &CompletionChannel, round: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.cq.req_notify(false).unwrap();
            let mut out = Vec::new();
            while self.cq.poll(&mut out, 4) > 0 {}
            let mut received = false;
            for wc in &out {
                assert_eq!(wc.status, WcStatus::Success, "round {round}");
                received |= wc.opcode == WcOpcode::Recv;
            }
            if received {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let ready = ferroce::link::eventfd::poll_readable(&[channel.fd()], Some(left));
            assert!(
                ready.unwrap() & 1 != 0,
                "round {round}: no event within 20 s"
            );
            channel.get_event().unwrap();
        }
        let mut got = [0; 8];
        self.inbox.read(0, &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), round);
    }
}

/// A program that waits on a completion channel sleeps whenever its polls find nothing,
/// and only the driver thread can fire the event it sleeps for: its empty polls must not
/// send the driver into naps in which it leaves the link to polling threads. Until
/// 2026-12-03 they did; each message then waited out the rest of a nap before anyone
/// took it in (`ibv_rc_pingpong -e` between two namespaces: 33-38 µs an iteration
/// against 13-18 after; rdma-core's `rstream` over ferroce's rsockets, 1 MiB transfers:
/// 6.2-7.9 Gb/s against 12.2-17.4).
#[test]
fn a_program_waiting_on_a_channel_never_sends_the_driver_into_naps() {
    let _serial = serial();
    let (a, b) = pair(QpType::Rc);
    let channel = |e: &End| {
        let ch = CompletionChannel::new().unwrap();
        e.cq.attach_channel(&ch, 1);
        ch
    };
    let (ch_a, ch_b) = (channel(&a), channel(&b));
    a.post_recv();
    b.post_recv();
    let naps = || counter(&a.ctx, "driver_naps") + counter(&b.ctx, "driver_naps");
    let before = naps();
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..=ROUNDS {
                a.send(round);
                a.receive_on(&ch_a, round);
                a.post_recv();
            }
        });
        s.spawn(|| {
            for round in 1..=ROUNDS {
                b.receive_on(&ch_b, round);
                b.post_recv();
                b.send(round);
            }
        });
    });
    assert_eq!(
        naps() - before,
        0,
        "the driver napped, leaving the link to threads that sleep on their channel"
    );
}

#[test]
fn a_posted_receive_leaves_the_ack_for_the_reply() {
    let _serial = serial();
    // Each end posts its next receive between taking in the peer's message and sending
    // its reply. When that post sent the ACK poll mode had kept back, every ACK left
    // before its reply existed: two transmissions per message, exactly 4 * ROUNDS, in
    // every run. Now a post sends nothing, and an ACK taken in by the program's poll
    // leaves with the reply: 2 to 3.4 * ROUNDS seen. How far below 4 * ROUNDS depends on
    // who takes the frames in: where other work holds the CPUs the driver thread does,
    // and answers at once, as it should (3.7 * ROUNDS once in CI, with another test of
    // this file beside it). So the count must be below 4 * ROUNDS: some ACK rode a reply.
    let mut tries = Vec::new();
    for _ in 0..3 {
        let sent = send_ping_pong();
        tries.push(sent);
        if sent < 4 * ROUNDS {
            return;
        }
    }
    panic!("no ACK left with a reply in any try: {tries:?} transmissions for {ROUNDS} rounds");
}

#[test]
fn the_last_message_s_ack_leaves_before_the_receiver_s_qp_goes_to_error() {
    let _serial = serial();
    // Poll mode keeps a received message's ACK back for the next post or poll. A program
    // that moves its QP to ERR right after its last receive completes (rdma_disconnect
    // does) dropped that ACK with the QP's other output: its peer, whose message had
    // arrived, retried into RETRY_EXC_ERR (3 of 6 runs of tests/netns/fork_children.c).
    // On fresh pairs, each after a ping-pong that puts both ends in poll mode.
    for attempt in 0..8 {
        let (a, b) = pair(QpType::Rc);
        a.post_recv();
        b.post_recv();
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 1..=50 {
                    a.send(round);
                    a.receive(round);
                    a.post_recv();
                }
                a.send(51);
            });
            s.spawn(|| {
                for round in 1..=50 {
                    b.receive(round);
                    b.post_recv();
                    b.send(round);
                }
                b.receive(51);
                let mut attr = b.qp.query().unwrap();
                attr.qp_state = QpState::Err;
                b.qp.modify(&attr, QpAttrMask::STATE).unwrap();
            });
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = Vec::new();
        let last = loop {
            out.clear();
            if a.cq.poll(&mut out, 1) == 1 && out[0].wr_id == 51 {
                break out[0];
            }
            assert!(
                Instant::now() < deadline,
                "attempt {attempt}: no completion"
            );
        };
        assert_eq!(
            (last.opcode, last.status),
            (WcOpcode::Send, WcStatus::Success),
            "attempt {attempt}: the last SEND, delivered, must complete"
        );
    }
}

/// A program spinning on a CQ that gets no completions (perftest's rdma_cm server polls
/// the CQ of its control channel while the peer WRITEs into its memory) does the driver's
/// work in its polls: `poll_busy` says which polls took frames in, so the C library gives
/// the core up only after idle ones.
///
/// Which thread takes a WRITE in, the poller or the receiver's driver thread, is a race:
/// CI once saw the driver take all of 400 (125,375 idle polls). So the peer writes until
/// a poll has taken one in, or 20 s have passed; only a poll that never takes frames in
/// fails.
#[test]
fn a_poll_says_whether_it_took_frames_in() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let _one = serial();
    let (a, b) = pair(QpType::Rc);
    let to_a = (a.inbox.addr(), a.inbox.rkey());
    let mut out = Vec::new();
    let (mut busy, mut idle) = (0u64, 0u64);
    let seen_busy = AtomicBool::new(false);
    // The last round written, once the writer stopped (0 until then).
    let last = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut round = 0;
            while round < ROUNDS
                || !(seen_busy.load(Ordering::Relaxed) || Instant::now() >= deadline)
            {
                round += 1;
                b.write(round, to_a);
            }
            last.store(round, Ordering::Release);
        });
        let mut got = [0; 8];
        while {
            a.inbox.read(0, &mut got).unwrap();
            let l = last.load(Ordering::Acquire);
            l == 0 || u64::from_le_bytes(got) != l
        } {
            assert!(
                Instant::now() < deadline + Duration::from_secs(20),
                "the WRITEs never all arrived"
            );
            let (n, received) = a.cq.poll_busy(&mut out, 1);
            assert_eq!(n, 0, "a WRITE completes nothing at its responder");
            if received {
                busy += 1;
                seen_busy.store(true, Ordering::Relaxed);
            } else {
                idle += 1;
            }
        }
    });
    assert!(
        busy > 0,
        "no poll took a WRITE in in 20 s ({idle} idle polls)"
    );
    // With the peer done, a poll soon finds the link empty (the driver may still be taking
    // a last ACK's answer in: look a few times).
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.cq.poll_busy(&mut out, 1) != (0, false) {
        assert!(
            Instant::now() < deadline,
            "polls of an idle link keep taking frames in"
        );
    }
}

/// A READ of more responses than one transmit batch, whose request a polling thread took
/// in while the responder's driver thread slept: the poller sends the first batch, and the
/// rest must follow without waiting for a timer.
///
/// Why: a UCX rendezvous (`ucx_perftest -t tag_bw -s 1048576`, UCX_TLS=rc) stalled for
/// 1.07 s in about half the runs: the peer READs the 1 MiB message while the sender polls
/// for the end of it; the poller took the READ request in, sent 128 responses, and the
/// other 896 waited until an unrelated timer woke the driver. The poller took the frame
/// before the sleeping driver, woken by the same frame, looked at the link, so the driver
/// found nothing and slept on.
///
/// Which thread takes the request in is a race, so each try starts from a sleeping driver
/// (the responder's thread idle for a while) and the test repeats until polls have taken
/// the request in several times (or 20 s have passed). A stalled READ ends with the
/// requester's local ACK timeout: counted, and the test fails on it.
#[test]
fn read_responses_of_many_batches_follow_a_request_a_poller_took_in() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let _one = serial();
    const LEN: usize = 1 << 20;
    const TAKEN: u32 = 5;
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
        .unwrap();
    qp_b.init(Access::REMOTE_READ, 0).unwrap();
    // 268 ms: a stall ends with it; nothing else in a live READ waits that long.
    let path = |gid, qpn, rq, sq| RcPath {
        timeout: 16,
        ..RcPath::new(gid, qpn, rq, sq)
    };
    qp_a.connect(&path(b.gid(0).unwrap(), qp_b.qpn(), 1, 2))
        .unwrap();
    qp_b.connect(&path(a.gid(0).unwrap(), qp_a.qpn(), 2, 1))
        .unwrap();
    let data: Vec<u8> = (0..LEN).map(|i| (i * 31 + i / 4096) as u8).collect();
    let src = pd_b.reg_mr_with(data.clone(), Access::REMOTE_READ).unwrap();
    let dst = pd_a.reg_mr(LEN, Access::LOCAL_WRITE).unwrap();

    // The try under way (0: none yet) and the last one the poller has finished.
    let (try_no, polled) = (AtomicU32::new(0), AtomicU32::new(0));
    let (taken, done) = (AtomicU32::new(0), AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tries = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut out = Vec::new();
            let mut last = 0;
            while !done.load(Ordering::Acquire) {
                let t = try_no.load(Ordering::Acquire);
                if t == last {
                    std::thread::sleep(Duration::from_micros(100));
                    continue;
                }
                // Spin on the CQ (a READ completes nothing at its responder) until the
                // requester has its completion.
                let mut took = false;
                while try_no.load(Ordering::Acquire) == t && !done.load(Ordering::Acquire) {
                    let (n, received) = cq_b.poll_busy(&mut out, 1);
                    assert_eq!(n, 0, "a READ completes nothing at its responder");
                    took |= received;
                    if polled.load(Ordering::Acquire) == t {
                        break;
                    }
                }
                taken.fetch_add(u32::from(took), Ordering::AcqRel);
                last = t;
            }
        });
        while taken.load(Ordering::Acquire) < TAKEN && Instant::now() < deadline {
            tries += 1;
            // Long enough idle for the responder's driver to fall asleep on the link.
            std::thread::sleep(Duration::from_millis(5));
            try_no.store(tries, Ordering::Release);
            std::thread::sleep(Duration::from_micros(200));
            qp_a.post_send(&wr::rdma_read(
                u64::from(tries),
                dst.sge(0, LEN),
                src.addr(),
                src.rkey(),
            ))
            .unwrap();
            let wc = cq_a
                .wait_one(Duration::from_secs(20))
                .expect("the READ's completion");
            assert_eq!((wc.wr_id, wc.status), (u64::from(tries), WcStatus::Success));
            polled.store(tries, Ordering::Release);
            std::thread::sleep(Duration::from_millis(1));
        }
        done.store(true, Ordering::Release);
    });
    let mut got = vec![0; LEN];
    dst.read(0, &mut got).unwrap();
    assert!(got == data, "the READ's data");
    let took = taken.load(Ordering::Acquire);
    eprintln!("{tries} READs, {took} requests taken in by a poll");
    assert!(took > 0, "no poll took a READ request in, in {tries} tries");
    assert_eq!(
        (
            counter(&a, "ack_timeouts"),
            counter(&a, "completer_retry_err")
        ),
        (0, 0),
        "READs stalled until the requester's timeout"
    );
}

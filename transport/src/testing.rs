//! A deterministic simulated network for tests, fuzzing and benchmarks (not a stable API).
//!
//! Endpoints exchange the real datagrams they emit. Each direction can lose, duplicate,
//! reorder, delay and corrupt packets, driven by a seeded RNG and a virtual clock, so
//! a failing run replays exactly from its seed. A tap sees (and may drop or edit) every
//! packet before the faults apply.
//!
//! Optionally, nodes send at a line rate ([`Sim::set_link_rate`]) and the packets toward
//! one node cross a switch queue ([`Sim::set_marking_queue`]) with a service rate, a
//! buffer (tail drop) and RED-like ECN marking, for congestion control tests.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::{
    Access, AddressVector, CqId, Endpoint, EndpointConfig, Instant, Mtu, PdId, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, QpState, QpType, WorkCompletion, MAX_DATAGRAM_LEN,
};

/// SplitMix64: tiny, fast and good enough for fault schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Faults of one direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    /// Probability a packet gets an extra delay of up to 4× `delay_ns` (reordering).
    pub reorder: f64,
    /// Probability a packet gets one bit flipped in its IB part.
    pub corrupt: f64,
    pub delay_ns: u64,
    pub jitter_ns: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay_ns: 2_000,
            jitter_ns: 0,
        }
    }
}

/// What the network did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Copies delivered with a flipped bit.
    pub corrupted: u64,
    /// Copies that overtook an earlier packet of the same direction (reorder or jitter).
    pub reordered: u64,
    pub tapped_out: u64,
    pub unroutable: u64,
    /// Datagrams sent after a silence ([`crate::Transmit::silences`] above 0), and the
    /// most silences in a row any of them followed.
    pub repeats: u64,
    pub most_silences: u8,
}

/// Where a datagram in flight is going next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hop {
    /// To the destination node (after the marking queue or not).
    Deliver { queued: bool },
    /// Into the marking queue; `delay_ns` from its exit to the destination.
    Queue { delay_ns: u64 },
}

/// A datagram on the wire: (time, sequence, destination node, source node, hop, bytes).
type InFlight = (u64, u64, usize, usize, Hop, Vec<u8>);

/// A switch egress queue toward one node: FIFO at `rate` bytes/s, tail drop beyond
/// `buffer` bytes, and RED-like marking of ECN-capable packets on the backlog they find:
/// none up to `kmin`, probability rising linearly to `pmax` at `kmax`, every one from
/// `kmax` on (the DCQCN paper's congestion point). Packets that are not ECN-capable are
/// never marked, only tail-dropped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MarkingQueue {
    /// Packets to this node pass the queue.
    pub to: usize,
    /// Service rate, bytes per second.
    pub rate: u64,
    /// Buffer, bytes.
    pub buffer: u64,
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
}

/// What the marking queue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub enqueued: u64,
    /// Packets dropped because the buffer was full.
    pub dropped: u64,
    /// Packets marked CE.
    pub marked: u64,
    /// Largest backlog a packet found, bytes.
    pub max_backlog: u64,
    /// Backlog the latest packet found, bytes.
    pub backlog: u64,
    /// Bytes delivered to the destination after the queue, per source node.
    pub bytes_out: Vec<u64>,
}

#[derive(Debug, Clone)]
struct QueueState {
    q: MarkingQueue,
    /// The queue is empty from then on, ns.
    busy_until: u64,
    stats: QueueStats,
}

/// Sets CE in an IPv4 or IPv6 datagram (the ICRC masks the ECN bits; the IPv4 header
/// checksum is recomputed).
pub fn set_ce(pkt: &mut [u8]) {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            pkt[1] |= 3;
            let ihl = usize::from(pkt[0] & 0xf) * 4;
            if pkt.len() < ihl {
                return;
            }
            pkt[10] = 0;
            pkt[11] = 0;
            let mut sum = 0u32;
            for w in pkt[..ihl].chunks(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            pkt[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        Some(6) if pkt.len() >= 40 => pkt[1] |= 0x30,
        _ => {}
    }
}

/// The ECN bits of an IPv4 or IPv6 datagram.
pub fn ecn_of(pkt: &[u8]) -> u8 {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => pkt[1] & 3,
        Some(6) if pkt.len() >= 40 => (pkt[1] >> 4) & 3,
        _ => 0,
    }
}

/// A tap: `(from, to, datagram) -> keep`.
pub type Tap = Box<dyn FnMut(usize, usize, &mut Vec<u8>) -> bool>;

/// Nodes joined by a simulated network.
pub struct Sim {
    pub now: Instant,
    pub nodes: Vec<Endpoint>,
    pub stats: SimStats,
    pub seed: u64,
    faults: Vec<Vec<Faults>>,
    /// Latest delivery time scheduled per direction, to count reordering.
    last_delivery: Vec<Vec<u64>>,
    rng: Rng,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    tap: Option<Tap>,
    buf: Vec<u8>,
    /// Per node: line rate in bytes/s, and when its link is free again (ns).
    links: Vec<(Option<u64>, u64)>,
    marking: Option<QueueState>,
}

impl core::fmt::Debug for Sim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("seed", &self.seed)
            .field("stats", &self.stats)
            .finish()
    }
}

/// The IPv4-mapped GID of node `i` (10.0.0.i+1).
pub fn node_gid(i: usize) -> Ipv6Addr {
    Ipv4Addr::new(10, 0, 0, (i + 1) as u8).to_ipv6_mapped()
}

/// An IPv6 GID of node `i` (fd00::i+1).
pub fn node_gid_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, (i + 1) as u16)
}

impl Sim {
    /// `n` endpoints with IPv4-mapped GIDs (or IPv6 ones) and a 4096 port MTU.
    pub fn new(seed: u64, n: usize, ipv6: bool) -> Sim {
        let nodes = (0..n)
            .map(|i| {
                Endpoint::new(EndpointConfig {
                    local_gids: vec![if ipv6 { node_gid_v6(i) } else { node_gid(i) }],
                    port_mtu: Mtu::Mtu4096,
                    ..Default::default()
                })
            })
            .collect();
        Sim {
            now: Instant::ZERO,
            nodes,
            stats: SimStats::default(),
            seed,
            faults: vec![vec![Faults::default(); n]; n],
            last_delivery: vec![vec![0; n]; n],
            rng: Rng::new(seed),
            queue: BinaryHeap::new(),
            seq: 0,
            tap: None,
            buf: vec![0; MAX_DATAGRAM_LEN],
            links: vec![(None, 0); n],
            marking: None,
        }
    }

    /// Node `node` serializes what it sends at `rate` bytes/s (its NIC's line rate);
    /// `None`: infinitely fast (the default).
    pub fn set_link_rate(&mut self, node: usize, rate: Option<u64>) {
        self.links[node].0 = rate.filter(|&r| r > 0);
    }

    /// Packets toward `q.to` cross a marking queue from now on.
    pub fn set_marking_queue(&mut self, q: MarkingQueue) {
        self.marking = Some(QueueState {
            q,
            busy_until: self.now.as_nanos(),
            stats: QueueStats {
                bytes_out: vec![0; self.nodes.len()],
                ..QueueStats::default()
            },
        });
    }

    /// What the marking queue did so far (`None` without one).
    pub fn queue_stats(&self) -> Option<&QueueStats> {
        self.marking.as_ref().map(|m| &m.stats)
    }

    /// The first GID of node `i`.
    pub fn gid(&self, i: usize) -> Ipv6Addr {
        self.nodes[i].config().local_gids[0]
    }

    /// Sets the faults from `from` to `to`.
    pub fn set_faults(&mut self, from: usize, to: usize, f: Faults) {
        self.faults[from][to] = f;
    }

    /// Sets the same faults on every direction.
    pub fn set_all_faults(&mut self, f: Faults) {
        for row in &mut self.faults {
            row.fill(f);
        }
    }

    /// Installs a tap that sees every datagram first.
    pub fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Removes the tap.
    pub fn clear_tap(&mut self) {
        self.tap = None;
    }

    fn route(&self, dst: Ipv6Addr) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.config().local_gids.contains(&dst))
    }

    /// Drains every node's transmit queue into the network.
    fn pump(&mut self) {
        for from in 0..self.nodes.len() {
            loop {
                // Every simulated run holds the driver's shortcut to its promise: nothing
                // is sent by an endpoint that said it had nothing.
                let may = self.nodes[from].may_transmit();
                let Some(t) = self.nodes[from].poll_transmit(self.now, &mut self.buf) else {
                    break;
                };
                assert!(may, "node {from} sent although may_transmit() was false");
                self.stats.sent += 1;
                self.stats.repeats += u64::from(t.silences > 0);
                self.stats.most_silences = self.stats.most_silences.max(t.silences);
                let dst = match t.dst {
                    core::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
                    core::net::IpAddr::V6(a) => a,
                };
                // A group's packets reach every other node, as through a switch that
                // floods them; the sender's own QPs are its driver's business.
                let to: Vec<usize> = if crate::is_multicast_gid(dst) {
                    (0..self.nodes.len()).filter(|n| *n != from).collect()
                } else {
                    self.route(dst).into_iter().collect()
                };
                if to.is_empty() {
                    self.stats.unroutable += 1;
                    continue;
                }
                for to in to {
                    let mut pkt = self.buf[..t.len].to_vec();
                    if let Some(tap) = &mut self.tap {
                        if !tap(from, to, &mut pkt) {
                            self.stats.tapped_out += 1;
                            continue;
                        }
                    }
                    self.inject(from, to, pkt);
                }
            }
        }
    }

    /// Sends `pkt` from `from` to `to` through the faults of that direction.
    pub fn inject(&mut self, from: usize, to: usize, pkt: Vec<u8>) {
        let f = self.faults[from][to];
        if self.rng.chance(f.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.chance(f.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut p = pkt.clone();
            if self.rng.chance(f.corrupt) {
                let ib = if p.first().is_some_and(|b| b >> 4 == 6) {
                    48
                } else {
                    28
                };
                if p.len() > ib + 5 {
                    // Any bit of the IB part except BTH byte 4, which the ICRC masks.
                    let mut at = ib + self.rng.below((p.len() - ib) as u64) as usize;
                    if at == ib + 4 {
                        at += 1;
                    }
                    p[at] ^= 1 << self.rng.below(8);
                    self.stats.corrupted += 1;
                }
            }
            let mut delay = f.delay_ns + self.rng.below(f.jitter_ns + 1);
            if self.rng.chance(f.reorder) {
                delay += self.rng.below(4 * f.delay_ns.max(1_000));
            }
            // The packet leaves the sender once its link is free.
            let mut start = self.now.as_nanos();
            if let (Some(rate), busy) = &mut self.links[from] {
                start = start.max(*busy) + tx_ns(p.len(), *rate);
                *busy = start;
            }
            if self.marking.as_ref().is_some_and(|m| m.q.to == to) {
                self.seq += 1;
                let hop = Hop::Queue { delay_ns: delay };
                self.queue
                    .push(Reverse((start, self.seq, to, from, hop, p)));
            } else {
                self.schedule_delivery(from, to, start + delay, false, p);
            }
        }
    }

    fn schedule_delivery(&mut self, from: usize, to: usize, at: u64, queued: bool, p: Vec<u8>) {
        let last = &mut self.last_delivery[from][to];
        if at < *last {
            self.stats.reordered += 1;
        } else {
            *last = at;
        }
        self.seq += 1;
        self.queue.push(Reverse((
            at,
            self.seq,
            to,
            from,
            Hop::Deliver { queued },
            p,
        )));
    }

    /// A packet reaches the marking queue at `at`.
    fn enqueue(&mut self, at: u64, from: usize, to: usize, delay_ns: u64, mut p: Vec<u8>) {
        let Some(m) = &mut self.marking else {
            return self.schedule_delivery(from, to, at + delay_ns, false, p);
        };
        let len = p.len() as u64;
        let backlog_ns = m.busy_until.saturating_sub(at);
        let backlog = u64::try_from(u128::from(backlog_ns) * u128::from(m.q.rate) / 1_000_000_000)
            .unwrap_or(u64::MAX);
        m.stats.max_backlog = m.stats.max_backlog.max(backlog);
        m.stats.backlog = backlog;
        if backlog + len > m.q.buffer {
            m.stats.dropped += 1;
            return;
        }
        m.stats.enqueued += 1;
        let p_mark = if backlog <= m.q.kmin {
            0.0
        } else if backlog >= m.q.kmax {
            1.0
        } else {
            m.q.pmax * (backlog - m.q.kmin) as f64 / (m.q.kmax - m.q.kmin) as f64
        };
        if matches!(ecn_of(&p), 1 | 2) && self.rng.chance(p_mark) {
            set_ce(&mut p);
            m.stats.marked += 1;
        }
        let done = at.max(m.busy_until) + tx_ns(p.len(), m.q.rate);
        m.busy_until = done;
        self.schedule_delivery(from, to, done + delay_ns, true, p);
    }

    /// One event: send what is ready, then advance the clock to the next delivery or
    /// timer and process it. Returns false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.pump();
        let next_pkt = self.queue.peek().map(|Reverse((t, ..))| *t);
        let next_timer = self
            .nodes
            .iter()
            .filter_map(Endpoint::poll_timeout)
            .min()
            .map(Instant::as_nanos);
        let next = match (next_pkt, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return false,
            },
        };
        if next > self.now.as_nanos() {
            self.now = Instant::from_nanos(next);
        }
        while let Some(Reverse((t, ..))) = self.queue.peek() {
            if *t > self.now.as_nanos() {
                break;
            }
            let Some(Reverse((t, _, to, from, hop, p))) = self.queue.pop() else {
                break;
            };
            match hop {
                Hop::Queue { delay_ns } => self.enqueue(t, from, to, delay_ns, p),
                Hop::Deliver { queued } => {
                    if let (true, Some(m)) = (queued, &mut self.marking) {
                        m.stats.bytes_out[from] += p.len() as u64;
                    }
                    self.stats.delivered += 1;
                    self.nodes[to].handle_packet(self.now, &p);
                }
            }
        }
        for n in &mut self.nodes {
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                n.handle_timeout(self.now);
            }
        }
        true
    }

    /// Steps until `done` holds or `limit` of virtual time passes; true if `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.now > end || !self.step() {
                return done(self);
            }
        }
    }

    /// Steps until the network and every timer are idle, or `limit` passes.
    pub fn run_idle(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        while self.now <= end {
            if !self.step() {
                return true;
            }
        }
        false
    }
}

/// Nanoseconds to send `len` bytes at `rate` bytes/s, rounded up.
fn tx_ns(len: usize, rate: u64) -> u64 {
    u64::try_from((len as u128 * 1_000_000_000).div_ceil(u128::from(rate))).unwrap_or(u64::MAX)
}

/// One side of a test connection: its PD, CQ and QP.
#[derive(Debug, Clone, Copy)]
pub struct Side {
    pub node: usize,
    pub pd: PdId,
    pub cq: CqId,
    pub qpn: u32,
}

/// QP options for [`connect`].
#[derive(Debug, Clone, Copy)]
pub struct QpOpts {
    pub qp_type: QpType,
    pub mtu: Mtu,
    /// First PSN each side sends.
    pub psn: [u32; 2],
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: Access,
    pub cap: QpCap,
    pub qkey: u32,
    pub cq_depth: usize,
}

impl Default for QpOpts {
    fn default() -> Self {
        QpOpts {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            psn: [0x100, 0x200],
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            qkey: 0x1111_1111,
            cq_depth: 1 << 16,
        }
    }
}

/// Creates a QP (PD, CQ) on `node` in RESET.
pub fn create(sim: &mut Sim, node: usize, o: &QpOpts) -> Side {
    let pd = sim.nodes[node].alloc_pd();
    create_in_pd(sim, node, pd, o)
}

/// Creates a QP (and its CQ) in an existing PD on `node`, in RESET.
pub fn create_in_pd(sim: &mut Sim, node: usize, pd: PdId, o: &QpOpts) -> Side {
    let ep = &mut sim.nodes[node];
    let cq = ep.create_cq(o.cq_depth).expect("cq");
    let qpn = ep
        .create_qp(
            pd,
            QpInitAttr {
                qp_type: o.qp_type,
                send_cq: cq,
                recv_cq: cq,
                cap: o.cap,
                sq_sig_all: false,
                srq: None,
            },
        )
        .expect("qp");
    Side { node, pd, cq, qpn }
}

/// Moves `s` through INIT, RTR and RTS toward `peer` (ignored for UD).
pub fn bring_up(sim: &mut Sim, s: Side, peer_gid: Ipv6Addr, peer_qpn: u32, o: &QpOpts, idx: usize) {
    use QpAttrMask as M;
    let ep = &mut sim.nodes[s.node];
    let ud = o.qp_type == QpType::Ud;
    let attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: o.access,
        qkey: o.qkey,
        ..QpAttr::default()
    };
    let m = M::STATE | M::PKEY_INDEX | M::PORT | if ud { M::QKEY } else { M::ACCESS_FLAGS };
    ep.modify_qp(sim.now, s.qpn, &attr, m).expect("INIT");
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: o.mtu,
        dest_qp_num: peer_qpn,
        rq_psn: o.psn[1 - idx],
        av: AddressVector::new(peer_gid),
        max_dest_rd_atomic: o.max_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        ..QpAttr::default()
    };
    let m = match o.qp_type {
        QpType::Ud => M::STATE,
        QpType::Uc => M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
        QpType::Rc => {
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        }
    };
    ep.modify_qp(sim.now, s.qpn, &attr, m).expect("RTR");
    let attr = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: o.psn[idx],
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
        ..QpAttr::default()
    };
    let m = if o.qp_type == QpType::Rc {
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    } else {
        M::STATE | M::SQ_PSN
    };
    ep.modify_qp(sim.now, s.qpn, &attr, m).expect("RTS");
}

/// Two connected QPs (RC or UC; UD QPs are just brought up) on nodes `a` and `b`.
pub fn connect(sim: &mut Sim, a: usize, b: usize, o: &QpOpts) -> (Side, Side) {
    let sa = create(sim, a, o);
    let sb = create(sim, b, o);
    let (ga, gb) = (sim.gid(a), sim.gid(b));
    bring_up(sim, sa, gb, sb.qpn, o, 0);
    bring_up(sim, sb, ga, sa.qpn, o, 1);
    (sa, sb)
}

/// Polls every completion of a side's CQ.
pub fn drain_cq(sim: &mut Sim, s: Side) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    while sim.nodes[s.node].poll_cq(s.cq, &mut v, 64) > 0 {}
    v
}

/// Opcode and PSN of a datagram, for taps (None if it does not parse).
pub fn opcode_psn(pkt: &[u8]) -> Option<(ferroce_wire::Opcode, u32)> {
    let d = ferroce_wire::Datagram::parse(pkt).ok()?;
    let ib = d.ib();
    Some((ib.opcode(), ib.bth().psn().value()))
}

/// The parsed IB packet of a datagram, for taps.
pub fn parse(pkt: &[u8]) -> Option<ferroce_wire::IbRepr<'_>> {
    let d = ferroce_wire::Datagram::parse(pkt).ok()?;
    ferroce_wire::IbRepr::parse(&d.ib()).ok()
}

/// Recomputes the ICRC after a tap edited a datagram.
pub fn refill_icrc(pkt: &mut [u8]) {
    let _ = ferroce_wire::icrc::fill(pkt);
}

/// Builds a valid datagram (with ICRC) from `src` to `dst`, for hostile-input tests.
pub fn forge(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    bth: ferroce_wire::BthRepr,
    ext: ferroce_wire::ExtRepr,
    payload: &[u8],
) -> Vec<u8> {
    let ip = match (src.to_ipv4_mapped(), dst.to_ipv4_mapped()) {
        (Some(s), Some(d)) => ferroce_wire::IpRepr::V4 {
            src: s,
            dst: d,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            identification: 0,
            dont_fragment: true,
        },
        _ => ferroce_wire::IpRepr::V6 {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        },
    };
    let d = ferroce_wire::DatagramRepr {
        ip,
        src_port: 0xc000,
        ib: ferroce_wire::IbRepr { bth, ext, payload },
    };
    let mut out = vec![0; d.buffer_len()];
    let n = d.emit(&mut out).expect("forge");
    out.truncate(n);
    out
}

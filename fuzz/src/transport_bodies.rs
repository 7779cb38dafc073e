//! The bodies of the ferroce-transport fuzz targets (so far one: `responder`), listed in
//! [`TARGETS`].
//!
//! Like `lib.rs`, this file is the only copy of its bodies and is compiled twice, each time
//! as a plain module (never as a crate root, and never as a child of `lib.rs`, which must
//! stay `std` + `ferroce_wire` only for `wire/tests/fuzz_corpus.rs`):
//!
//! * by `fuzz_targets/responder.rs` through `#[path = "../src/transport_bodies.rs"]`
//!   (nightly, `cargo fuzz run responder`);
//! * by the stable tests `transport/tests/fuzz_responder.rs` (every seed in
//!   `fuzz/corpus/responder/` plus a mutation pass) and `transport/tests/fuzz_responder_seeds.rs`
//!   (the seed generator), through `#[path = "../../fuzz/src/transport_bodies.rs"]`.
//!
//! So it uses nothing but `std`, `ferroce_wire` and `ferroce_transport`, and carries no
//! crate-level attributes.
//!
//! # The `responder` target
//!
//! Each input builds a fresh [`Harness`]: one [`Endpoint`] at 10.0.0.2 with five QPs whose
//! peer is 10.0.0.1, nine memory regions with known keys and contents, posted receive WQEs
//! and three send WQEs, then reads the input as a sequence of chunks
//! (`mode: u8, len: u16 big-endian, body: [u8; len]`, the length cut to what is left). The
//! `mode` bits:
//!
//! | bits | meaning |
//! | --- | --- |
//! | [`WRAP`] (0) | 0: `body` is a whole IP datagram, handed to `handle_packet` as is; 1: `body` is an IB packet (BTH through ICRC) that the harness wraps in IPv4/UDP from the peer to 10.0.0.2, with a correct ICRC |
//! | [`FIX`] (1) | wrapped: clear TVer, set P_Key 0xffff and make the length and pad count valid for the opcode; raw: recompute the IPv4 header checksum and the ICRC of a datagram that parses |
//! | [`PATCH_QP`] (2) | wrapped: the destination QP becomes `QP_TABLE[low byte of dest QP % 7]` (the five QPs, an unknown QPN, QP 1) |
//! | [`PATCH_PSN`] (3) | wrapped: the PSN becomes (the QP's initial expected PSN, or for a response the QP's first send PSN) + PSN, mod 2^24 |
//! | 4–5 | advance the virtual clock by [`CLOCK_STEPS`]`[n]` before the packet |
//! | [`FROM_STRANGER`] (6) | wrapped: the source is 10.0.0.3 instead of the peer |
//! | [`HOLD`] (7) | do not drain `poll_transmit` after this packet (responses pile up) |
//!
//! Before every packet the clock advances and `handle_timeout` runs; after it `poll_transmit`
//! is drained (unless [`HOLD`]) and every CQ is polled. At the end the clock jumps
//! [`FINAL_ROUNDS`] times by a second, with `handle_timeout`, a drain and a poll each.
//!
//! Invariants (a panic is a finding):
//!
//! * no panic anywhere in the endpoint (implicit);
//! * memory: the regions that no QP may write (`ro`: REMOTE_READ only, `local`: LOCAL_WRITE
//!   but in no WQE, `src`: no rights, `pd2_rw`: all rights but in a PD whose only QP has
//!   REMOTE_READ access only, `big`: 16 KiB REMOTE_READ only) end byte-identical; the receive regions (`recv`, `pd2_recv`)
//!   change only inside the SGEs of WQEs posted on a QP of their PD (clipped to the region);
//!   `rw` and `wo` (remote write/atomic rights) may change anywhere; every region stays
//!   registered with its length;
//! * every emitted datagram parses with `Datagram::parse`, has a valid ICRC, goes from
//!   10.0.0.2 to the peer, to the sending QP's remote QPN, and is sent by an RC QP; a READ
//!   response is sent only by a QP with REMOTE_READ access and its payload is a run of bytes
//!   of a REMOTE_READ region of that QP's PD, as they are now (no leak of other memory), and
//!   exactly the bytes the READ the responder executed as new names for that PSN (a
//!   duplicate replays only inside its original); an
//!   atomic ACK only by a QP with REMOTE_ATOMIC access; requests only by the QP with send
//!   WQEs, a SEND carrying exactly its source bytes;
//! * liveness of the sans-IO surface: once `poll_transmit` returns `None`, a second call at
//!   the same instant does too; after `handle_timeout(now)`, `poll_timeout` is `None` or
//!   later than `now`;
//! * the number of datagrams sent is at most [`INITIAL_TX`] + [`TX_PER_STEP`] per packet
//!   or final round (a bounded drain: an endless stream fails this at once);
//! * completions: each names a posted WR of its own CQ's QP (or of the SRQ that QP uses),
//!   with a matching opcode, and completes it at most once, so `poll_cq` never yields more
//!   than was posted; a successful receive's `byte_len` fits its WQE; no CQ overflows.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::time::Duration;

use ferroce_transport::{
    Access, AddressVector, CqId, Endpoint, EndpointConfig, Instant, MrInfo, Mtu, PdId, QpAttr,
    QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr, SrqId,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode, MAX_DATAGRAM_LEN,
};
use ferroce_wire::{
    bth, finalize, BthRepr, Datagram, DatagramRepr, ExtRepr, IbRepr, IpRepr, Opcode, Operation,
    Psn, Syndrome,
};

/// A fuzz target body.
pub type Body = fn(&[u8]);

/// Every target of this file, by the name of its `[[bin]]`, its `fuzz_targets/<name>.rs`
/// and its corpus directory.
pub const TARGETS: &[(&str, Body)] = &[("responder", responder)];

/// Mode bit: the body is an IB packet to wrap (else a whole IP datagram).
pub const WRAP: u8 = 1 << 0;
/// Mode bit: make the packet well-formed (see the module docs).
pub const FIX: u8 = 1 << 1;
/// Mode bit: the destination QP comes from [`Harness::qp_table`].
pub const PATCH_QP: u8 = 1 << 2;
/// Mode bit: the PSN is an offset from the destination QP's initial PSN.
pub const PATCH_PSN: u8 = 1 << 3;
/// Mode bits 4–5: index into [`CLOCK_STEPS`].
pub const CLOCK_SHIFT: u8 = 4;
/// Mode bit: a wrapped packet comes from [`STRANGER`] instead of [`PEER`].
pub const FROM_STRANGER: u8 = 1 << 6;
/// Mode bit: no `poll_transmit` drain after this packet.
pub const HOLD: u8 = 1 << 7;
/// The mode of the generated seeds: a wrapped, fixed packet with QP and PSN from the tables.
pub const SEED_MODE: u8 = WRAP | FIX | PATCH_QP | PATCH_PSN;

/// Clock advances before a packet, in nanoseconds: none, a little, past the local ACK
/// timeout of the RC QPs (16.8 ms), past any RNR timer.
pub const CLOCK_STEPS: [u64; 4] = [0, 2_000, 20_000_000, 1_000_000_000];
/// One-second rounds of timers and drains after the last packet.
pub const FINAL_ROUNDS: u64 = 2;

/// The endpoint under test.
pub const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The peer of every RC and UC QP.
pub const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// Some other host.
pub const STRANGER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
/// A QP number that does not exist.
pub const UNKNOWN_QPN: u32 = 0x00ab_cdef;
/// The Q_Key of the UD QP.
pub const QKEY: u32 = 0x1111_1111;
/// Path MTU of the RC and UC QPs (the UD QP uses the port MTU, 1024).
pub const PATH_MTU: Mtu = Mtu::Mtu256;

/// QP indices into [`Harness::qps`].
pub const RC: usize = 0;
/// RC QP on the SRQ, no remote access rights.
pub const RC_SRQ: usize = 1;
/// UC QP with REMOTE_WRITE.
pub const UC: usize = 2;
/// UD QP.
pub const UD: usize = 3;
/// RC QP in RTR, in the second PD, REMOTE_READ only.
pub const RC_PD2: usize = 4;

/// Region indices into [`Harness::regions`].
pub const RW: usize = 0;
/// LOCAL_WRITE | REMOTE_WRITE.
pub const WO: usize = 1;
/// REMOTE_READ only.
pub const RO: usize = 2;
/// LOCAL_WRITE only, in no WQE.
pub const LOCAL_ONLY: usize = 3;
/// No rights: the source of the RC QP's SEND.
pub const SRC: usize = 4;
/// LOCAL_WRITE: receive buffers and READ/atomic result buffers, with gaps between them.
pub const RECV: usize = 5;
/// Every right, in the second PD.
pub const PD2_RW: usize = 6;
/// LOCAL_WRITE, in the second PD: the RTR QP's receive buffer.
pub const PD2_RECV: usize = 7;

/// REMOTE_READ only, 16 KiB: READs of many packets, and duplicates inside them.
pub const BIG: usize = 8;
/// Length of `big`.
pub const BIG_LEN: usize = 16 * 1024;

/// Request packets the send WQEs of the RC QP need (SEND, READ request, FETCH_ADD).
pub const SQ_PKTS: u64 = 3;
/// The longest READ response stream: the largest REMOTE_READ region (`big`) at the path
/// MTU.
pub const MAX_READ_PKTS: u64 = BIG_LEN as u64 / 256;
/// Datagrams the first drain may send: the send queue.
pub const INITIAL_TX: u64 = SQ_PKTS;
/// Datagrams one packet (or final round) may add: one responder item (at most a whole READ
/// response stream, or an ACK/NAK), and two go-back-N rewinds of the send queue (one by the
/// packet, one by a timer).
pub const TX_PER_STEP: u64 = MAX_READ_PKTS + 1 + 2 * SQ_PKTS;

/// What may happen to a region's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Never changes.
    Canary,
    /// Changes only inside [`Region::areas`].
    Buffers,
    /// May change anywhere (remote write or atomic rights).
    Anywhere,
}

/// A registered region and what is known about it.
#[derive(Debug, Clone)]
pub struct Region {
    pub name: &'static str,
    pub pd: PdId,
    pub info: MrInfo,
    pub access: Access,
    pub rule: Rule,
    pub initial: Vec<u8>,
    /// Byte ranges (offsets into the region) that posted WQEs may write.
    pub areas: Vec<Range<usize>>,
}

/// A QP of the harness.
#[derive(Debug, Clone)]
pub struct QpInfo {
    pub name: &'static str,
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: PdId,
    pub cq: CqId,
    pub srq: Option<SrqId>,
    pub access: Access,
    pub peer_qpn: u32,
    /// First PSN the responder expects.
    pub rq_psn: u32,
    /// First PSN the requester sends.
    pub sq_psn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WrKind {
    /// A receive WR; `owner` is the QP index whose CQ must report it.
    Recv {
        owner: usize,
        total: u32,
    },
    Send {
        qp: usize,
        opcode: WcOpcode,
    },
}

#[derive(Debug, Clone, Copy)]
struct Wr {
    kind: WrKind,
    done: bool,
}

/// One datagram the endpoint sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Index of the QP that sent it.
    pub qp: usize,
    pub opcode: Opcode,
    pub psn: u32,
    pub syndrome: Option<Syndrome>,
}

/// What a run did, for the seed tests.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub counters: ferroce_transport::Counters,
    /// Every completion, with the index of the QP whose CQ gave it.
    pub completions: Vec<(usize, WorkCompletion)>,
    pub sent: Vec<Sent>,
    /// Names of the regions whose bytes changed.
    pub changed: Vec<&'static str>,
    pub states: Vec<QpState>,
}

/// The endpoint, its QPs and regions, the clock and the bookkeeping the invariants need.
#[derive(Debug)]
pub struct Harness {
    pub ep: Endpoint,
    pub qps: Vec<QpInfo>,
    pub regions: Vec<Region>,
    pub now: Instant,
    wrs: BTreeMap<u64, Wr>,
    next_wr_id: u64,
    steps: u64,
    tx: u64,
    buf: Vec<u8>,
    completions: Vec<(usize, WorkCompletion)>,
    sent: Vec<Sent>,
    /// READ requests the responder executed as new (the originals), newest last.
    reads: Vec<ReadOrig>,
}

/// A READ request the responder executed as new: a response at a PSN in its range must
/// carry exactly the bytes of its range at that packet's offset.
#[derive(Debug, Clone, Copy)]
struct ReadOrig {
    qp: usize,
    psn: Psn,
    va: u64,
    rkey: u32,
    len: u32,
}

/// Originals kept (more than any QP's READ resources).
const MAX_READS: usize = 64;

/// A byte of region `region`'s initial contents: a hash, so a run of bytes of one region
/// is not found in another.
fn pattern(region: usize, k: usize) -> u8 {
    let x = ((region as u64) << 32 | k as u64).wrapping_add(1);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

fn gid(a: Ipv4Addr) -> Ipv6Addr {
    a.to_ipv6_mapped()
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// The endpoint with everything set up and nothing sent yet.
    pub fn new() -> Harness {
        let mut ep = Endpoint::new(EndpointConfig {
            local_gids: vec![gid(LOCAL)],
            port_mtu: Mtu::Mtu1024,
            ..Default::default()
        });
        let pd1 = ep.alloc_pd();
        let pd2 = ep.alloc_pd();
        let lw = Access::LOCAL_WRITE;
        let all = lw | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        // `rw`, `wo`, `ro` and `local` are adjacent in iova space; `pd2_rw` has `rw`'s iova,
        // so only the key (and its PD) can tell them apart.
        #[rustfmt::skip]
        let specs: [(&str, PdId, u64, usize, Access, Rule); 9] = [
            ("rw", pd1, 0x1_0000, 1024, all, Rule::Anywhere),
            ("wo", pd1, 0x1_0400, 256, lw | Access::REMOTE_WRITE, Rule::Anywhere),
            ("ro", pd1, 0x1_0500, 512, Access::REMOTE_READ, Rule::Canary),
            ("local", pd1, 0x1_0700, 256, lw, Rule::Canary),
            ("src", pd1, 0x2_0000, 64, Access::empty(), Rule::Canary),
            ("recv", pd1, 0x3_0000, 8192, lw, Rule::Buffers),
            ("pd2_rw", pd2, 0x1_0000, 512, all, Rule::Canary),
            ("pd2_recv", pd2, 0x4_0000, 512, lw, Rule::Buffers),
            ("big", pd1, 0x10_0000, BIG_LEN, Access::REMOTE_READ, Rule::Canary),
        ];
        let regions = specs
            .iter()
            .enumerate()
            .map(|(i, &(name, pd, iova, len, access, rule))| {
                let initial: Vec<u8> = (0..len).map(|k| pattern(i, k)).collect();
                let info = ep
                    .reg_mr_with(pd, initial.clone(), Some(iova), access)
                    .expect("reg_mr");
                Region {
                    name,
                    pd,
                    info,
                    access,
                    rule,
                    initial,
                    areas: Vec::new(),
                }
            })
            .collect();

        let srq = ep
            .create_srq(
                pd1,
                SrqAttr {
                    max_wr: 8,
                    max_sge: 3,
                    srq_limit: 0,
                },
            )
            .expect("srq");
        let remote = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        // name, type, PD, SRQ, access, peer QPN, sq_psn, rq_psn, RTS (else RTR)
        type QpSpec = (
            &'static str,
            QpType,
            PdId,
            Option<SrqId>,
            Access,
            u32,
            u32,
            u32,
            bool,
        );
        #[rustfmt::skip]
        let specs: [QpSpec; 5] = [
            // The RC QP's PSNs wrap around 2^24 within its first few packets.
            ("rc", QpType::Rc, pd1, None, remote, 0x101, 0xff_fffe, 0xff_fffc, true),
            ("rc_srq", QpType::Rc, pd1, Some(srq), Access::empty(), 0x102, 0x200, 0x300, true),
            ("uc", QpType::Uc, pd1, None, Access::REMOTE_WRITE, 0x103, 0x400, 0x500, true),
            ("ud", QpType::Ud, pd1, None, Access::empty(), 0, 0x600, 0, true),
            ("rc_pd2", QpType::Rc, pd2, None, Access::REMOTE_READ, 0x105, 0x800, 0x900, false),
        ];
        let mut qps = Vec::new();
        for (name, qp_type, pd, srq, access, peer_qpn, sq_psn, rq_psn, rts) in specs {
            let cq = ep.create_cq(64).expect("cq");
            let cap = QpCap {
                max_send_wr: 4,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 3,
                max_inline_data: 0,
            };
            let init = QpInitAttr {
                qp_type,
                send_cq: cq,
                recv_cq: cq,
                cap,
                sq_sig_all: false,
                srq,
            };
            let qpn = ep.create_qp(pd, init).expect("create_qp");
            let qp = QpInfo {
                name,
                qpn,
                qp_type,
                pd,
                cq,
                srq,
                access,
                peer_qpn,
                rq_psn,
                sq_psn,
            };
            bring_up(&mut ep, &qp, rts);
            qps.push(qp);
        }

        let mut h = Harness {
            ep,
            qps,
            regions,
            now: Instant::ZERO,
            wrs: BTreeMap::new(),
            next_wr_id: 1,
            steps: 0,
            tx: 0,
            buf: vec![0; MAX_DATAGRAM_LEN],
            completions: Vec::new(),
            sent: Vec::new(),
            reads: Vec::new(),
        };
        h.post_wqes();
        h
    }

    fn sge(&self, region: usize, offset: u64, length: u32) -> Sge {
        let r = &self.regions[region];
        Sge {
            addr: r.info.addr + offset,
            length,
            lkey: r.info.lkey,
        }
    }

    /// Records the parts of `sges` that a QP of `pd` may legitimately write.
    fn allow(&mut self, pd: PdId, sges: &[Sge]) {
        for s in sges {
            let Some(r) = self
                .regions
                .iter_mut()
                .find(|r| r.info.lkey == s.lkey && r.pd == pd)
            else {
                continue;
            };
            if r.rule != Rule::Buffers || !r.access.contains(Access::LOCAL_WRITE) {
                continue;
            }
            let lo = s.addr.max(r.info.addr);
            let hi = s
                .addr
                .saturating_add(u64::from(s.length))
                .min(r.info.addr + r.info.len);
            if lo < hi {
                r.areas
                    .push((lo - r.info.addr) as usize..(hi - r.info.addr) as usize);
            }
        }
    }

    fn post_recv(&mut self, qp: usize, sges: Vec<Sge>) {
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let total = sges.iter().map(|s| s.length).sum();
        let q = self.qps[qp].clone();
        self.allow(q.pd, &sges);
        let wr = RecvWr {
            wr_id,
            sg_list: sges,
        };
        match q.srq {
            Some(srq) => self.ep.post_srq_recv(self.now, srq, &wr),
            None => self.ep.post_recv(self.now, q.qpn, &wr),
        }
        .expect("post_recv");
        let kind = WrKind::Recv { owner: qp, total };
        self.wrs.insert(wr_id, Wr { kind, done: false });
    }

    fn post_send(&mut self, qp: usize, mut wr: SendWr) {
        wr.wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        wr.flags |= SendFlags::SIGNALED;
        let q = self.qps[qp].clone();
        if matches!(
            wr.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicFetchAdd | WrOpcode::AtomicCmpSwp
        ) {
            self.allow(q.pd, &wr.sg_list);
        }
        self.ep.post_send(self.now, q.qpn, &wr).expect("post_send");
        let kind = WrKind::Send {
            qp,
            opcode: wr.opcode.into(),
        };
        self.wrs.insert(wr.wr_id, Wr { kind, done: false });
    }

    /// Receive WQEs (some of them poisoned: an SGE the QP may not write through) and the RC
    /// QP's send WQEs. Bytes between the SGEs of `recv` stay canaries.
    fn post_wqes(&mut self) {
        let ro = self.sge(RO, 0, 64);
        let pd2 = self.sge(PD2_RW, 0, 100);
        let bogus = Sge {
            lkey: 0x00ff_ff01,
            ..self.sge(RECV, 0, 64)
        };
        let recv = |h: &Self, off: u64, len: u32| h.sge(RECV, off, len);

        let wqes: Vec<(usize, Vec<Sge>)> = vec![
            (RC, vec![recv(self, 0, 300), recv(self, 400, 300)]),
            (RC, vec![recv(self, 800, 64)]),
            (
                RC,
                vec![
                    recv(self, 1000, 256),
                    recv(self, 1300, 8),
                    recv(self, 1400, 400),
                ],
            ),
            // No LOCAL_WRITE on `ro`: the scatter must fail.
            (RC, vec![ro]),
            (RC_SRQ, vec![recv(self, 2000, 600)]),
            // The second SGE is in the other PD.
            (RC_SRQ, vec![recv(self, 2700, 100), pd2]),
            (RC_SRQ, vec![recv(self, 2900, 300)]),
            (UC, vec![recv(self, 3300, 600)]),
            (UC, vec![recv(self, 4000, 64)]),
            (UD, vec![recv(self, 4200, 40 + 1024)]),
            // The 40-byte GRH area split over two SGEs.
            (UD, vec![recv(self, 5300, 20), recv(self, 5400, 200)]),
            (UD, vec![bogus]),
            // Runs 64 bytes past the end of `recv`.
            (UD, vec![recv(self, 8192 - 64, 128)]),
            (UD, vec![recv(self, 5700, 100)]),
            (RC_PD2, vec![self.sge(PD2_RECV, 0, 300)]),
            // A PD1 region from the PD2 QP.
            (RC_PD2, vec![recv(self, 5900, 64)]),
        ];
        for (qp, sges) in wqes {
            self.post_recv(qp, sges);
        }

        let send = SendWr {
            opcode: WrOpcode::Send,
            sg_list: vec![self.sge(SRC, 0, 4)],
            ..Default::default()
        };
        let read = SendWr {
            opcode: WrOpcode::RdmaRead,
            sg_list: vec![recv(self, 6000, 512)],
            remote_addr: 0x7000_0000,
            rkey: 0x4242,
            ..Default::default()
        };
        let fetch_add = SendWr {
            opcode: WrOpcode::AtomicFetchAdd,
            sg_list: vec![recv(self, 6600, 8)],
            remote_addr: 0x7000_1000,
            rkey: 0x4242,
            compare_add: 1,
            ..Default::default()
        };
        for wr in [send, read, fetch_add] {
            self.post_send(RC, wr);
        }
    }

    /// The destination QPs [`PATCH_QP`] picks from.
    pub fn qp_table(&self) -> [u32; 7] {
        let q = |i: usize| self.qps[i].qpn;
        [q(0), q(1), q(2), q(3), q(4), UNKNOWN_QPN, 1]
    }

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qpn == qpn)
    }

    /// Applies the mode's patches to an IB packet and wraps it in IPv4/UDP with an ICRC.
    pub fn wrap(&self, mode: u8, body: &[u8]) -> Vec<u8> {
        let mut ib = body.to_vec();
        if mode & PATCH_QP != 0 && ib.len() >= 8 {
            let table = self.qp_table();
            let qpn = table[usize::from(ib[7]) % table.len()];
            ib[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        if mode & PATCH_PSN != 0 && ib.len() >= 12 {
            let dest = u32::from_be_bytes([0, ib[5], ib[6], ib[7]]);
            let response = Opcode::new(ib[0]).is_some_and(|o| o.info().is_response());
            let base = self.qp_index(dest).map_or(0, |i| {
                let q = &self.qps[i];
                if response {
                    q.sq_psn
                } else {
                    q.rq_psn
                }
            });
            let off = u32::from_be_bytes([0, ib[9], ib[10], ib[11]]);
            let psn = Psn::new(base).add(off).value();
            ib[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
        }
        if mode & FIX != 0 {
            fix(&mut ib);
        }
        let src = if mode & FROM_STRANGER != 0 {
            STRANGER
        } else {
            PEER
        };
        let d = DatagramRepr {
            ip: IpRepr::V4 {
                src,
                dst: LOCAL,
                dscp: 0,
                ecn: 0,
                ttl: 64,
                identification: 0,
                dont_fragment: true,
            },
            src_port: 0xc000 | u16::from(mode),
            ib: IbRepr {
                bth: BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0, Psn::new(0)),
                ext: ExtRepr::default(),
                payload: &[],
            },
        };
        let hl = d.header_len();
        let mut out = vec![0; hl + ib.len()];
        out[hl..].copy_from_slice(&ib);
        if d.emit_ip_udp(&mut out[..hl], ib.len()).is_ok() {
            let _ = finalize(&mut out);
        }
        out
    }

    /// The running total of datagrams allowed so far.
    fn tx_budget(&self) -> u64 {
        INITIAL_TX + self.steps * TX_PER_STEP
    }

    /// Drains `poll_transmit`, checking every datagram.
    fn drain(&mut self) {
        loop {
            let mut buf = core::mem::take(&mut self.buf);
            let t = self.ep.poll_transmit(self.now, &mut buf);
            if let Some(t) = t {
                self.tx += 1;
                assert!(
                    self.tx <= self.tx_budget(),
                    "{} datagrams sent after {} packets/rounds: more than {} + {} per packet",
                    self.tx,
                    self.steps,
                    INITIAL_TX,
                    TX_PER_STEP
                );
                assert!(t.len <= buf.len());
                self.check_datagram(&buf[..t.len], t.qpn);
            }
            if t.is_none() {
                // `None` means nothing to send now: an application's I/O loop stops here,
                // so anything still queued would wait for an unrelated event.
                let again = self.ep.poll_transmit(self.now, &mut buf);
                assert!(
                    again.is_none(),
                    "poll_transmit gave None, then a datagram at the same instant"
                );
                self.buf = buf;
                return;
            }
            self.buf = buf;
        }
    }

    /// Advances the clock and runs the timers; none may still be due afterwards (an
    /// application sleeping until `poll_timeout` would spin).
    fn tick(&mut self, dt: Duration) {
        self.now = self.now + dt;
        self.ep.handle_timeout(self.now);
        if let Some(t) = self.ep.poll_timeout() {
            assert!(
                t > self.now,
                "after handle_timeout({:?}) a timer is still due at {t:?}",
                self.now
            );
        }
    }

    /// Records `pkt` if it is a READ request (the responder just executed it as new).
    fn record_read(&mut self, pkt: &[u8]) {
        let Ok(d) = Datagram::parse(pkt) else { return };
        let Ok(ib) = IbRepr::parse(&d.ib()) else {
            return;
        };
        let (Some(reth), Some(qp)) = (ib.ext.reth, self.qp_index(ib.bth.dest_qp)) else {
            return;
        };
        if ib.bth.opcode.operation() != Operation::RdmaReadRequest {
            return;
        }
        if self.reads.len() == MAX_READS {
            self.reads.remove(0);
        }
        self.reads.push(ReadOrig {
            qp,
            psn: ib.bth.psn,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
        });
    }

    /// Whether `payload`, a READ response of QP `qp` at `psn`, is exactly the bytes its
    /// original request names for that packet (as they are now): a duplicate may only
    /// replay inside the original, never other memory or more of it.
    fn read_response_in_range(&self, qp: usize, pd: PdId, psn: Psn, payload: &[u8]) -> bool {
        let mtu = u64::from(PATH_MTU.bytes());
        self.reads.iter().rev().any(|o| {
            let k = u64::from(psn.value().wrapping_sub(o.psn.value()) & Psn::MASK);
            let off = k * mtu;
            if o.qp != qp || off + payload.len() as u64 > u64::from(o.len) {
                return false;
            }
            let Some(r) = self.regions.iter().find(|r| {
                r.info.rkey == o.rkey && r.pd == pd && r.access.contains(Access::REMOTE_READ)
            }) else {
                return false;
            };
            let Some(at) = (o.va + off).checked_sub(r.info.addr) else {
                return false;
            };
            self.ep
                .mr_bytes(r.info.lkey)
                .is_some_and(|b| b.get(at as usize..at as usize + payload.len()) == Some(payload))
        })
    }

    fn check_datagram(&mut self, bytes: &[u8], qpn: u32) {
        let d = Datagram::parse(bytes).expect("an emitted datagram parses");
        assert_eq!(
            d.ip_packet().len(),
            bytes.len(),
            "Transmit::len is the IP length"
        );
        assert!(d.icrc_ok(), "an emitted datagram has a valid ICRC");
        assert_eq!(d.src_gid(), gid(LOCAL));
        assert_eq!(d.dst_gid(), gid(PEER));
        let ib = IbRepr::parse(&d.ib()).expect("an emitted IB packet parses");
        let qp = self
            .qp_index(qpn)
            .unwrap_or_else(|| panic!("Transmit::qpn {qpn:#x} is not a QP"));
        let q = &self.qps[qp];
        assert_eq!(
            q.qp_type,
            QpType::Rc,
            "only the RC QPs have anything to send"
        );
        assert_eq!(ib.bth.dest_qp, q.peer_qpn, "sent to the QP's remote QPN");
        let op = ib.bth.opcode;
        let requester = self
            .wrs
            .values()
            .any(|w| matches!(w.kind, WrKind::Send { qp: s, .. } if s == qp));
        match op.operation() {
            Operation::Acknowledge => {}
            Operation::RdmaReadResponse => {
                assert!(
                    q.access.contains(Access::REMOTE_READ),
                    "READ response from {} without REMOTE_READ",
                    q.name
                );
                let p = ib.payload;
                // Checks both that the bytes come from a REMOTE_READ region of the QP's PD
                // (no leak of other memory) and that they are the ones the READ named.
                assert!(
                    p.is_empty() || self.read_response_in_range(qp, q.pd, ib.bth.psn, p),
                    "{} sent a READ response at PSN {} ({} bytes) that is not the bytes its \
                     READ named in a REMOTE_READ region of its PD",
                    q.name,
                    ib.bth.psn,
                    p.len()
                );
            }
            Operation::AtomicAcknowledge => assert!(
                q.access.contains(Access::REMOTE_ATOMIC),
                "atomic ACK from {} without REMOTE_ATOMIC",
                q.name
            ),
            Operation::Send => {
                assert!(requester, "SEND from {}, which has no send WQE", q.name);
                let src = &self.regions[SRC].initial[..4];
                assert_eq!(ib.payload, src, "a SEND carries its source bytes");
            }
            Operation::RdmaReadRequest | Operation::FetchAdd => {
                assert!(requester, "{} request from {}", op.name(), q.name);
            }
            _ => panic!("{} sent {}", q.name, op.name()),
        }
        self.sent.push(Sent {
            qp,
            opcode: op,
            psn: ib.bth.psn.value(),
            syndrome: ib.ext.aeth.map(|a| a.syndrome),
        });
    }

    /// Polls every CQ and checks each completion against the posted WRs.
    fn poll_cqs(&mut self) {
        let mut wcs = Vec::new();
        for qp in 0..self.qps.len() {
            wcs.clear();
            while self.ep.poll_cq(self.qps[qp].cq, &mut wcs, 16) > 0 {}
            for wc in &wcs {
                self.check_completion(qp, wc);
                self.completions.push((qp, *wc));
            }
        }
        assert_eq!(self.ep.counters().cq_overflow, 0, "a CQ overflowed");
    }

    fn check_completion(&mut self, qp: usize, wc: &WorkCompletion) {
        let q = &self.qps[qp];
        assert_eq!(wc.qp_num, q.qpn, "completion in the CQ of {}", q.name);
        let wr = self
            .wrs
            .get_mut(&wc.wr_id)
            .unwrap_or_else(|| panic!("completion for WR {} that was never posted", wc.wr_id));
        assert!(!wr.done, "WR {} completed twice: {wc:?}", wc.wr_id);
        wr.done = true;
        match wr.kind {
            WrKind::Recv { owner, total } => {
                assert_eq!(owner, qp, "receive WR {} completed on {}", wc.wr_id, q.name);
                assert!(
                    matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
                    "receive WR completed as {:?}",
                    wc.opcode
                );
                if wc.opcode == WcOpcode::Recv && wc.status == WcStatus::Success {
                    assert!(
                        wc.byte_len <= total,
                        "received {} bytes into a {total}-byte WQE",
                        wc.byte_len
                    );
                }
            }
            WrKind::Send { qp: s, opcode } => {
                assert_eq!(s, qp, "send WR completed on {}", q.name);
                assert_eq!(wc.opcode, opcode, "send WR completed with another opcode");
            }
        }
    }

    /// Regions checked against their rules; returns the names of those that changed.
    fn check_memory(&self) -> Vec<&'static str> {
        let mut changed = Vec::new();
        for r in &self.regions {
            let now = self
                .ep
                .mr_bytes(r.info.lkey)
                .unwrap_or_else(|| panic!("region {} is gone", r.name));
            assert_eq!(now.len(), r.initial.len(), "region {} changed size", r.name);
            let Some(first) = now.iter().zip(&r.initial).position(|(a, b)| a != b) else {
                continue;
            };
            changed.push(r.name);
            match r.rule {
                Rule::Anywhere => {}
                Rule::Canary => panic!("canary region {} changed at byte {first}", r.name),
                Rule::Buffers => {
                    let diffs = now.iter().zip(&r.initial).enumerate().skip(first);
                    for (i, (a, b)) in diffs {
                        if a != b {
                            assert!(
                                r.areas.iter().any(|a| a.contains(&i)),
                                "region {} changed at byte {i}, outside every posted SGE",
                                r.name
                            );
                        }
                    }
                }
            }
        }
        changed
    }

    /// One packet: clock, timers, the packet, a drain (unless held), the CQs.
    pub fn step(&mut self, mode: u8, body: &[u8]) {
        self.steps += 1;
        let dt = CLOCK_STEPS[usize::from((mode >> CLOCK_SHIFT) & 3)];
        self.tick(Duration::from_nanos(dt));
        let pkt = if mode & WRAP != 0 {
            self.wrap(mode, body)
        } else {
            let mut p = body.to_vec();
            if mode & FIX != 0 {
                let n = Datagram::parse(&p).map(|d| d.ip_packet().len());
                if let Ok(n) = n {
                    ferroce_wire::ipv4::fill_header_checksum(&mut p[..n]);
                    let _ = finalize(&mut p[..n]);
                }
            }
            p
        };
        let executed = self.ep.counters().rdma_recvs;
        self.ep.handle_packet(self.now, &pkt);
        if self.ep.counters().rdma_recvs > executed {
            self.record_read(&pkt);
        }
        if mode & HOLD == 0 {
            self.drain();
        }
        self.poll_cqs();
    }

    /// The final timer rounds and every end-of-run check.
    pub fn finish(mut self) -> Outcome {
        self.drain();
        for _ in 0..FINAL_ROUNDS {
            self.steps += 1;
            self.tick(Duration::from_secs(1));
            self.drain();
            self.poll_cqs();
        }
        let changed = self.check_memory();
        let done = self.wrs.values().filter(|w| w.done).count();
        assert!(done <= self.wrs.len());
        let states = self
            .qps
            .iter()
            .map(|q| self.ep.qp_state(q.qpn).expect("QP exists"))
            .collect();
        Outcome {
            counters: self.ep.counters().clone(),
            completions: self.completions,
            sent: self.sent,
            changed,
            states,
        }
    }
}

/// Moves a QP through INIT and RTR to RTS (or leaves it in RTR), toward [`PEER`].
fn bring_up(ep: &mut Endpoint, q: &QpInfo, rts: bool) {
    use QpAttrMask as M;
    let ud = q.qp_type == QpType::Ud;
    let attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: q.access,
        qkey: QKEY,
        ..QpAttr::default()
    };
    let m = M::STATE | M::PKEY_INDEX | M::PORT | if ud { M::QKEY } else { M::ACCESS_FLAGS };
    ep.modify_qp(Instant::ZERO, q.qpn, &attr, m).expect("INIT");
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: PATH_MTU,
        dest_qp_num: q.peer_qpn,
        rq_psn: q.rq_psn,
        av: AddressVector::new(gid(PEER)),
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let m = match q.qp_type {
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
    ep.modify_qp(Instant::ZERO, q.qpn, &attr, m).expect("RTR");
    if !rts {
        return;
    }
    let attr = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: q.sq_psn,
        // 4.096 us << 12 = 16.8 ms; three retries of each kind, then the WQE fails.
        timeout: 12,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let m = if q.qp_type == QpType::Rc {
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    } else {
        M::STATE | M::SQ_PSN
    };
    ep.modify_qp(Instant::ZERO, q.qpn, &attr, m).expect("RTS");
}

/// [`FIX`] for a wrapped packet: version 0, the default P_Key, and a length and pad count
/// the opcode allows (room for its headers and the ICRC, no payload where it has none, a
/// whole number of words, a pad no longer than the payload).
fn fix(ib: &mut Vec<u8>) {
    if ib.len() < 12 {
        ib.resize(12, 0);
    }
    ib[1] &= 0xf0;
    ib[2] = 0xff;
    ib[3] = 0xff;
    let Some(op) = Opcode::new(ib[0]) else {
        return;
    };
    let hdr = 12 + op.headers().len();
    if !op.has_payload() || ib.len() < hdr + 4 {
        ib.resize(hdr + 4, 0);
    }
    let body = ib.len() - hdr - 4;
    ib.resize(ib.len() + (body.wrapping_neg() & 3), 0);
    let body = ib.len() - hdr - 4;
    let mut h = bth::Header::new_unchecked(&mut ib[..]);
    let pad = h.pad_count().min(body.min(3) as u8);
    h.set_pad_count(pad);
}

/// One chunk of a `responder` input: `mode`, the body's length (big-endian u16), the body.
pub fn chunk(mode: u8, body: &[u8]) -> Vec<u8> {
    let len = u16::try_from(body.len()).expect("a chunk body fits a u16 length");
    let mut v = vec![mode];
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Splits an input into chunks; a short length field or body takes what is left.
pub fn chunks(mut data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let Some((&mode, rest)) = data.split_first() {
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
            _ => (0, &rest[rest.len()..]),
        };
        let (body, rest) = rest.split_at(len.min(rest.len()));
        out.push((mode, body));
        data = rest;
    }
    out
}

/// Runs one input and returns what happened; panics when an invariant fails.
pub fn run(data: &[u8]) -> Outcome {
    let mut h = Harness::new();
    h.drain();
    h.poll_cqs();
    for (mode, body) in chunks(data) {
        h.step(mode, body);
    }
    h.finish()
}

/// `responder`: arbitrary packets to an endpoint with RC, UC and UD QPs (module docs).
pub fn responder(data: &[u8]) {
    let _ = run(data);
}

//! What a fuzz round sends: a well-formed request message for the live connection (from
//! the rxe captures' messages, or made up for the target's rights), then a few mutations
//! that know the structure — header fields, opcode sequences, lengths, PSN jumps, key and
//! address edges — and, now and then, a bit flipped anywhere in the IB headers. Every
//! frame carries a valid ICRC unless the mutation is the ICRC.

use ferroce::capture::CaptureReader;
use ferroce_wire::frame::Frame;
use ferroce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, ExtRepr, HeaderSet, IethRepr, ImmDtRepr, NakCode,
    Opcode, Operation, Position, Psn, RethRepr, Service, Syndrome,
};

use super::super::cases::Needs;
use super::super::peer::{Peer, Tweak};
use super::super::runner::Remote;

/// One packet of a round before it is built.
#[derive(Debug, Clone)]
pub struct Spec {
    /// BTH fields.
    pub bth: BthRepr,
    /// Extended headers.
    pub ext: ExtRepr,
    /// Payload.
    pub payload: Vec<u8>,
    /// Mistakes applied after building.
    pub tweak: Tweak,
    /// A bit flipped at this offset into the IB headers (ICRC recomputed).
    pub flip: Option<(usize, u8)>,
    /// The mutations applied, for the report.
    pub mutations: Vec<String>,
}

/// A message shape taken from a capture: opcodes, flags and payload of each packet.
#[derive(Debug, Clone)]
pub struct Template {
    packets: Vec<(BthRepr, ExtRepr, Vec<u8>)>,
}

impl Template {
    /// The operation the message does.
    pub fn operation(&self) -> Operation {
        self.packets[0].0.opcode.operation()
    }
}

/// The built-in seeds: Linux rxe's own traffic (tests/vectors/rxe), one message shape per
/// opcode sequence and length.
const SEED_PCAPS: &[&[u8]] = &[
    include_bytes!("../../../../tests/vectors/rxe/write_bw_s4100.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/write_bw_s64.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/write_bw_s1024.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/read_bw_s64.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/read_bw_s1024.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/send_bw_s64.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/rc_pingpong_s64.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/read_bw_s4100.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/atomic_fadd.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/atomic_cas.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/send_bw_s4100.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/rc_pingpong_s4096.pcap"),
    include_bytes!("../../../../tests/vectors/rxe/write_lat_s2.pcap"),
];

/// The request messages among `frames` (Ethernet frames of a capture): RC requests
/// grouped FIRST..LAST or ONLY, one per distinct shape.
pub fn templates_from_frames<I: IntoIterator<Item = Vec<u8>>>(frames: I) -> Vec<Template> {
    let mut out: Vec<Template> = Vec::new();
    let mut current: Vec<(BthRepr, ExtRepr, Vec<u8>)> = Vec::new();
    for data in frames {
        let Ok(f) = Frame::parse(&data) else {
            continue;
        };
        let ib = f.ib();
        let op = ib.opcode();
        if op.service() != Service::Rc || op.info().is_response() {
            continue;
        }
        let (Ok(bth), Ok(ext)) = (BthRepr::parse(&ib.bth()), ExtRepr::parse(&ib)) else {
            continue;
        };
        if matches!(op.position(), Position::First | Position::Only) {
            current.clear();
        }
        current.push((bth, ext, ib.payload().to_vec()));
        if matches!(op.position(), Position::Last | Position::Only) {
            let t = Template {
                packets: std::mem::take(&mut current),
            };
            let shape = |t: &Template| -> Vec<(u8, usize)> {
                t.packets
                    .iter()
                    .map(|(b, _, p)| (b.opcode.value(), p.len()))
                    .collect()
            };
            if !out.iter().any(|o| shape(o) == shape(&t)) {
                out.push(t);
            }
        }
    }
    out
}

/// The request messages in a capture file (pcap or pcapng) of the user's.
pub fn templates_from_file(path: &std::path::Path) -> Result<Vec<Template>, String> {
    let mut r = CaptureReader::open(path)
        .map_err(|e| format!("cannot read seed capture '{}': {e}", path.display()))?;
    let mut frames = Vec::new();
    while let Some(Ok(f)) = r.next_frame() {
        if f.link == ferroce::capture::LinkType::Ethernet {
            frames.push(f.data);
        }
    }
    Ok(templates_from_frames(frames))
}

/// The built-in seed messages.
pub fn builtin_templates() -> Vec<Template> {
    let mut frames = Vec::new();
    for bytes in SEED_PCAPS {
        let Ok(mut r) = pcap_file::pcap::PcapReader::new(*bytes) else {
            continue;
        };
        while let Some(Ok(p)) = r.next_packet() {
            frames.push(p.data.to_vec());
        }
    }
    templates_from_frames(frames)
}

/// The generator of rounds: seeded, so a run is repeatable.
#[derive(Debug)]
pub struct Gen {
    rng: fastrand::Rng,
    templates: Vec<Template>,
}

impl Gen {
    /// A generator with `seed` and message shapes `templates`.
    pub fn new(seed: u64, templates: Vec<Template>) -> Gen {
        Gen {
            rng: fastrand::Rng::with_seed(seed),
            templates,
        }
    }

    /// Seed messages in use.
    pub fn templates(&self) -> usize {
        self.templates.len()
    }

    /// The packets of one round on connection `r` to a target that `offers` these rights;
    /// at most `max` packets.
    pub fn round(&mut self, r: &Remote, pqpn: u32, offers: &[Needs], max: usize) -> Vec<Spec> {
        let mut specs = self.message(r, pqpn, offers);
        // A second message now and then: pipelining, and sequences across messages.
        if self.rng.u8(..4) == 0 {
            let next_psn = specs
                .last()
                .map_or(r.epsn, |s| s.bth.psn.value().wrapping_add(1));
            let more = self.message(
                &Remote {
                    epsn: next_psn & Psn::MASK,
                    ..*r
                },
                pqpn,
                offers,
            );
            specs.extend(more);
        }
        let n = 1 + self.rng.usize(..3);
        for _ in 0..n {
            if specs.is_empty() {
                break;
            }
            self.mutate(&mut specs, r, pqpn);
        }
        specs.truncate(max.max(1));
        specs
    }

    /// A well-formed message for the connection: a captured shape, or one made up.
    fn message(&mut self, r: &Remote, pqpn: u32, offers: &[Needs]) -> Vec<Spec> {
        let wanted = |op: Operation| match op {
            Operation::Send => offers.contains(&Needs::Send),
            Operation::RdmaWrite => offers.contains(&Needs::Write),
            Operation::RdmaReadRequest => offers.contains(&Needs::Read),
            Operation::CompareSwap | Operation::FetchAdd => offers.contains(&Needs::Atomic),
            _ => false,
        };
        let fitting: Vec<usize> = (0..self.templates.len())
            .filter(|&i| wanted(self.templates[i].operation()))
            .collect();
        // Mostly what the target allows; sometimes anything (rights it lacks).
        let pick = match (fitting.is_empty(), self.rng.u8(..8)) {
            (false, 0..=3) => Some(fitting[self.rng.usize(..fitting.len())]),
            (_, 4) if !self.templates.is_empty() => Some(self.rng.usize(..self.templates.len())),
            _ => None,
        };
        if let Some(i) = pick {
            let t = self.templates[i].clone();
            return t
                .packets
                .iter()
                .enumerate()
                .map(|(k, (bth, ext, payload))| {
                    let mut ext = *ext;
                    self.connect_ext(&mut ext, r, pqpn, payload.len());
                    Spec {
                        bth: BthRepr {
                            dest_qp: r.qpn,
                            psn: Psn::new((r.epsn + k as u32) & Psn::MASK),
                            ..*bth
                        },
                        ext,
                        payload: payload.clone(),
                        tweak: Tweak::default(),
                        flip: None,
                        mutations: Vec::new(),
                    }
                })
                .collect();
        }
        let ops: Vec<Operation> = [
            Operation::Send,
            Operation::RdmaWrite,
            Operation::RdmaReadRequest,
            Operation::FetchAdd,
            Operation::CompareSwap,
        ]
        .into_iter()
        .filter(|&o| wanted(o))
        .collect();
        let op = if ops.is_empty() {
            Operation::RdmaWrite
        } else {
            ops[self.rng.usize(..ops.len())]
        };
        let mtu = r.mtu.max(256) as usize;
        let len = match self.rng.u8(..6) {
            0 => 0,
            1 => self.rng.usize(1..64),
            2 => mtu,
            3 => mtu * (1 + self.rng.usize(..3)) + self.rng.usize(..4),
            _ => self.rng.usize(..(4 * mtu)),
        }
        .min(r.size.max(1) as usize);
        let mut specs = Vec::new();
        let spec = |opcode: Opcode, k: u32, payload: Vec<u8>| Spec {
            bth: BthRepr::new(opcode, r.qpn, Psn::new((r.epsn + k) & Psn::MASK)),
            ext: ExtRepr::default(),
            payload,
            tweak: Tweak::default(),
            flip: None,
            mutations: Vec::new(),
        };
        match op {
            Operation::Send | Operation::RdmaWrite => {
                let n = len.div_ceil(mtu).max(1);
                for i in 0..n {
                    let pos = super::super::runner::position_of(i as u32, n as u32);
                    let opcode = Opcode::lookup(Service::Rc, op, pos, false, false)
                        .unwrap_or(Opcode::RC_SEND_ONLY);
                    let plen = (len - (i * mtu).min(len)).min(mtu);
                    let payload = (0..plen).map(|b| b as u8 ^ 0xa5).collect();
                    specs.push(spec(opcode, i as u32, payload));
                }
            }
            Operation::RdmaReadRequest => {
                specs.push(spec(Opcode::RC_RDMA_READ_REQUEST, 0, Vec::new()))
            }
            Operation::FetchAdd => specs.push(spec(Opcode::RC_FETCH_ADD, 0, Vec::new())),
            _ => specs.push(spec(Opcode::RC_COMPARE_SWAP, 0, Vec::new())),
        }
        for s in &mut specs {
            s.bth.ack_req = false;
            let mut ext = ExtRepr::default();
            self.fill_ext(s.bth.opcode, &mut ext, r, pqpn, len);
            s.ext = ext;
        }
        if let Some(last) = specs.last_mut() {
            last.bth.ack_req = true;
        }
        specs
    }

    /// Points a captured message's headers at this connection's QP, buffer and key.
    fn connect_ext(&mut self, ext: &mut ExtRepr, r: &Remote, pqpn: u32, _len: usize) {
        if let Some(reth) = &mut ext.reth {
            reth.va = r.va;
            reth.rkey = r.rkey;
            reth.dma_len = reth.dma_len.min(r.size as u32);
        }
        if let Some(a) = &mut ext.atomic_eth {
            a.va = r.va;
            a.rkey = r.rkey;
        }
        if let Some(d) = &mut ext.deth {
            d.src_qp = pqpn;
        }
        if let Some(i) = &mut ext.ieth {
            i.rkey = r.rkey;
        }
    }

    /// The headers `opcode` carries, with values right for the connection.
    fn fill_ext(&mut self, opcode: Opcode, ext: &mut ExtRepr, r: &Remote, pqpn: u32, len: usize) {
        let h = opcode.headers();
        let keep = *ext;
        *ext = ExtRepr::default();
        if h.contains(HeaderSet::RETH) {
            ext.reth = keep.reth.or(Some(RethRepr {
                va: r.va,
                rkey: r.rkey,
                dma_len: len as u32,
            }));
        }
        if h.contains(HeaderSet::ATOMIC_ETH) {
            ext.atomic_eth = keep.atomic_eth.or(Some(AtomicEthRepr {
                va: r.va,
                rkey: r.rkey,
                swap_add: 1,
                compare: 0,
            }));
        }
        if h.contains(HeaderSet::DETH) {
            ext.deth = keep.deth.or(Some(DethRepr {
                qkey: self.rng.u32(..),
                src_qp: pqpn,
            }));
        }
        if h.contains(HeaderSet::IMMDT) {
            ext.immdt = keep.immdt.or(Some(ImmDtRepr {
                imm: self.rng.u32(..),
            }));
        }
        if h.contains(HeaderSet::IETH) {
            ext.ieth = keep.ieth.or(Some(IethRepr { rkey: r.rkey }));
        }
        if h.contains(HeaderSet::AETH) {
            let syndrome = match self.rng.u8(..4) {
                0 => Syndrome::Ack { credits: 0x1f },
                1 => Syndrome::RnrNak {
                    timer: self.rng.u8(..32),
                },
                2 => Syndrome::Nak(NakCode::PsnSequenceError),
                _ => Syndrome::Nak(NakCode::InvalidRequest),
            };
            ext.aeth = keep.aeth.or(Some(AethRepr {
                syndrome,
                msn: self.rng.u32(..) & 0xff_ffff,
            }));
        }
        if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
            ext.atomic_ack_eth = keep.atomic_ack_eth.or(Some(ferroce_wire::AtomicAckEthRepr {
                orig: self.rng.u64(..),
            }));
        }
        if h.contains(HeaderSet::CNP) {
            ext.cnp = Some(ferroce_wire::CnpRepr::default());
        }
    }

    /// Applies one mutation to one packet (or to the sequence).
    fn mutate(&mut self, specs: &mut Vec<Spec>, r: &Remote, pqpn: u32) {
        let i = self.rng.usize(..specs.len());
        let rng = &mut self.rng;
        let edge32 = |rng: &mut fastrand::Rng, v: u32| match rng.u8(..6) {
            0 => 0,
            1 => u32::MAX,
            2 => v ^ (1 << rng.u32(..32)),
            3 => v.wrapping_add(1),
            4 => v.wrapping_sub(1),
            _ => rng.u32(..),
        };
        let what: String = match rng.u8(..20) {
            // Sequence mutations.
            0 if specs.len() > 1 => {
                specs.remove(i);
                format!("packet {} left out", i + 1)
            }
            1 => {
                let dup = specs[i].clone();
                specs.insert(i, dup);
                format!("packet {} sent twice", i + 1)
            }
            2 if specs.len() > 1 => {
                let j = (i + 1) % specs.len();
                specs.swap(i, j);
                format!("packets {} and {} swapped", i + 1, j + 1)
            }
            // PSN jumps.
            3 | 4 => {
                let p = specs[i].bth.psn.value();
                let np = match rng.u8(..5) {
                    0 => p.wrapping_sub(1),
                    1 => p.wrapping_add(1),
                    2 => p.wrapping_add(1 << 23),
                    3 => p.wrapping_sub(1 << 23),
                    _ => rng.u32(..),
                } & Psn::MASK;
                specs[i].bth.psn = Psn::new(np);
                format!("psn {p:#08x} -> {np:#08x}")
            }
            // Another opcode, with the headers it carries.
            5 | 6 => {
                let all: Vec<Opcode> = Opcode::all().collect();
                let op = if rng.bool() {
                    all[rng.usize(..all.len())]
                } else {
                    // Same operation, another position: sequence errors.
                    let s = &specs[i];
                    let pos = [
                        Position::First,
                        Position::Middle,
                        Position::Last,
                        Position::Only,
                    ][rng.usize(..4)];
                    Opcode::lookup(Service::Rc, s.bth.opcode.operation(), pos, false, false)
                        .unwrap_or(s.bth.opcode)
                };
                let old = specs[i].bth.opcode;
                specs[i].bth.opcode = op;
                let len = specs[i].payload.len();
                let mut ext = specs[i].ext;
                self.fill_ext(op, &mut ext, r, pqpn, len);
                specs[i].ext = ext;
                if !op.has_payload() {
                    specs[i].payload.clear();
                }
                format!("opcode {} -> {}", old.name(), op.name())
            }
            7 => {
                let b = rng.u8(..);
                specs[i].tweak.opcode = Some(b);
                format!("opcode byte {b:#04x}")
            }
            // Address, key and length edges.
            8..=10 => {
                let size = r.size.max(1);
                let s = &mut specs[i];
                if let Some(reth) = &mut s.ext.reth {
                    match rng.u8(..3) {
                        0 => {
                            let len = u64::from(reth.dma_len);
                            reth.va = match rng.u8(..6) {
                                0 => r.va.wrapping_sub(1),
                                1 => r.va + size - len.min(size) + 1,
                                2 => r.va + size,
                                3 => 0,
                                4 => u64::MAX - len / 2,
                                _ => rng.u64(..),
                            };
                            format!("RETH va {:#x}", reth.va)
                        }
                        1 => {
                            reth.rkey = edge32(rng, reth.rkey);
                            format!("RETH rkey {:#x}", reth.rkey)
                        }
                        _ => {
                            reth.dma_len = match rng.u8(..5) {
                                0 => 0,
                                1 => reth.dma_len + 1,
                                2 => size as u32 + 1,
                                3 => 1 << 31,
                                _ => edge32(rng, reth.dma_len),
                            };
                            format!("RETH dma_len {}", reth.dma_len)
                        }
                    }
                } else if let Some(a) = &mut s.ext.atomic_eth {
                    if rng.bool() {
                        a.va = match rng.u8(..4) {
                            0 => r.va + rng.u64(1..8),
                            1 => r.va + size,
                            2 => u64::MAX - 7,
                            _ => rng.u64(..),
                        };
                        format!("AtomicETH va {:#x}", a.va)
                    } else {
                        a.rkey = edge32(rng, a.rkey);
                        format!("AtomicETH rkey {:#x}", a.rkey)
                    }
                } else {
                    let n = match rng.u8(..4) {
                        0 => 0,
                        1 => r.mtu as usize + 1 + rng.usize(..4),
                        2 => s.payload.len() + 1,
                        _ => rng.usize(..4200),
                    };
                    s.payload.resize(n, 0x3c);
                    format!("payload {n} bytes")
                }
            }
            // BTH fields.
            11 => {
                let q = match rng.u8(..4) {
                    0 => 0,
                    1 => 1,
                    2 => 0xff_ffff,
                    _ => r.qpn ^ (1 << rng.u32(..24)),
                };
                specs[i].bth.dest_qp = q;
                format!("dest QP {q:#x}")
            }
            12 => {
                let k = [0u16, 0x7fff, 0x8000, rng.u16(..)][rng.usize(..4)];
                specs[i].bth.pkey = k;
                format!("P_Key {k:#06x}")
            }
            13 => {
                let s = &mut specs[i];
                match rng.u8(..5) {
                    0 => {
                        s.tweak.tver = Some(rng.u8(1..16));
                        "TVer".into()
                    }
                    1 => {
                        s.tweak.pad = Some(rng.u8(1..4));
                        "pad count".into()
                    }
                    2 => {
                        s.bth.solicited = !s.bth.solicited;
                        "SE flipped".into()
                    }
                    3 => {
                        s.bth.fecn = true;
                        s.bth.becn = true;
                        "FECN and BECN".into()
                    }
                    _ => {
                        s.bth.ack_req = !s.bth.ack_req;
                        "AckReq flipped".into()
                    }
                }
            }
            // A response the target never asked for (ghost).
            14 => {
                let op = [
                    Opcode::RC_ACKNOWLEDGE,
                    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    Opcode::RC_ATOMIC_ACKNOWLEDGE,
                    Opcode::CNP,
                ][rng.usize(..5)];
                let mut ext = ExtRepr::default();
                self.fill_ext(op, &mut ext, r, pqpn, 0);
                let payload = if op.has_payload() {
                    vec![0x77; self.rng.usize(..=r.mtu as usize)]
                } else {
                    Vec::new()
                };
                let psn = Psn::new(self.rng.u32(..) & Psn::MASK);
                specs.insert(
                    i,
                    Spec {
                        bth: BthRepr::new(op, r.qpn, psn),
                        ext,
                        payload,
                        tweak: Tweak::default(),
                        flip: None,
                        mutations: Vec::new(),
                    },
                );
                format!("a {} nobody asked for", op.name())
            }
            // Raw damage.
            15 => {
                specs[i].tweak.bad_icrc = true;
                "bad ICRC".into()
            }
            16 => {
                let n = rng.usize(1..24);
                specs[i].tweak.truncate = n;
                format!("{n} bytes cut off")
            }
            _ => {
                let at = rng.usize(..64);
                let bit = 1u8 << rng.u8(..8);
                specs[i].flip = Some((at, bit));
                format!("bit {bit:#04x} of IB header byte {at} flipped")
            }
        };
        let i = i.min(specs.len().saturating_sub(1));
        if let Some(s) = specs.get_mut(i) {
            s.mutations.push(what);
        }
    }
}

/// Builds one packet; `None` when its headers cannot be emitted at all.
pub fn build(peer: &mut Peer, s: &Spec) -> Option<Vec<u8>> {
    let mut frame = peer.build(s.bth, s.ext, &s.payload, &s.tweak).ok()?;
    if let Some((at, bit)) = s.flip {
        let ip_off = 14;
        let v4 = frame.get(ip_off).map(|b| b >> 4) == Some(4);
        let bth = ip_off + if v4 { 20 } else { 40 } + 8;
        let room = frame.len().checked_sub(bth + 4)?;
        if room > 0 {
            frame[bth + at % room] ^= bit;
            if !s.tweak.bad_icrc && s.tweak.truncate == 0 {
                let _ = ferroce_wire::icrc::fill(&mut frame[ip_off..]);
            }
        }
    }
    Some(frame)
}

/// One line for a packet of a round.
pub fn describe(s: &Spec) -> String {
    let mut t = format!(
        "{} psn={:#08x} qp={:#x}",
        s.bth.opcode.name(),
        s.bth.psn.value(),
        s.bth.dest_qp
    );
    if !s.payload.is_empty() {
        t.push_str(&format!(" len={}", s.payload.len()));
    }
    if let Some(r) = s.ext.reth {
        t.push_str(&format!(
            " va={:#x} rkey={:#x} dma_len={}",
            r.va, r.rkey, r.dma_len
        ));
    }
    if let Some(a) = s.ext.atomic_eth {
        t.push_str(&format!(" va={:#x} rkey={:#x}", a.va, a.rkey));
    }
    if !s.mutations.is_empty() {
        t.push_str(&format!(" [{}]", s.mutations.join("; ")));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_come_from_the_rxe_captures() {
        let t = builtin_templates();
        let ops: Vec<Operation> = t.iter().map(|t| t.operation()).collect();
        for op in [
            Operation::RdmaWrite,
            Operation::RdmaReadRequest,
            Operation::FetchAdd,
            Operation::CompareSwap,
            Operation::Send,
        ] {
            assert!(
                ops.contains(&op),
                "no {op:?} message among {} seeds",
                t.len()
            );
        }
        // The 4100-byte WRITE is FIRST, MIDDLE x3, LAST at MTU 1024.
        assert!(t.iter().any(|t| t.packets.len() == 5));
    }

    /// Rounds are repeatable from the seed, bounded, and varied.
    #[test]
    fn rounds_are_seeded_and_bounded() {
        let r = Remote {
            qpn: 0x11,
            epsn: 0xff_fff0,
            va: 0x1000,
            rkey: 0x55,
            size: 65536,
            mtu: 1024,
            timeout_ms: 67,
        };
        let offers = [Needs::Any, Needs::Write, Needs::NoRecv];
        let run = |seed| {
            let mut g = Gen::new(seed, builtin_templates());
            (0..200)
                .map(|_| g.round(&r, 0x42, &offers, 8))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        let b = run(7);
        let text =
            |v: &Vec<Vec<Spec>>| -> Vec<String> { v.iter().flatten().map(describe).collect() };
        assert_eq!(text(&a), text(&b));
        assert!(a.iter().all(|r| !r.is_empty() && r.len() <= 8));
        let mutated = a
            .iter()
            .flatten()
            .filter(|s| !s.mutations.is_empty())
            .count();
        assert!(mutated >= 200, "{mutated} mutated packets in 200 rounds");
        let distinct: std::collections::BTreeSet<String> = a
            .iter()
            .flatten()
            .flat_map(|s| {
                s.mutations
                    .iter()
                    .map(|m| m.split(' ').next().unwrap_or("").to_string())
            })
            .collect();
        assert!(distinct.len() >= 12, "{distinct:?}");
    }
}

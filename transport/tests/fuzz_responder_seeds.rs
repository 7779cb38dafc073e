//! The generator of the `responder` fuzz seeds, `fuzz/corpus/responder/seed-*`, so they are
//! reproducible, and a check that each seed reaches what it is named for.
//!
//! * `cargo test -p ferroce-transport --test fuzz_responder_seeds` checks that the committed
//!   seeds are exactly what this file generates (none missing, changed or stale), and runs
//!   every seed through the body, asserting its expected effect (a completion, a NAK, a
//!   counter...), so a seed that silently stopped reaching the responder fails here.
//! * `FERROCE_WRITE_FUZZ_SEEDS=1 cargo test -p ferroce-transport --test fuzz_responder_seeds`
//!   (re)writes them, removing stale `seed-*` files and leaving any other file alone.
//!
//! A seed is a few chunks in the target's input format (see `fuzz/src/transport_bodies.rs`),
//! almost all [`SEED_MODE`]: an IB packet built with `IbRepr::emit`, whose BTH destination QP
//! is an index into the harness's QP table and whose PSN is an offset from that QP's initial
//! PSN, so a seed stays valid whatever QPNs and PSNs the harness picks.

// Not every item of the shared file is used by this test.
#[allow(dead_code)]
#[path = "../../fuzz/src/transport_bodies.rs"]
mod bodies;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use bodies::*;
use ferroce_transport::{WcFlags, WcOpcode, WcStatus};
use ferroce_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DatagramRepr, DethRepr, ExtRepr,
    IbRepr, IethRepr, ImmDtRepr, IpRepr, NakCode, Opcode, Psn, RethRepr, Syndrome,
};

const WRITE_ENV: &str = "FERROCE_WRITE_FUZZ_SEEDS";

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/responder")
}

/// The IB packet (BTH through a zero ICRC) of `op` to QP table index `qp`, PSN offset `psn`.
fn ib(op: Opcode, qp: usize, psn: u32, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
    let mut bth = BthRepr::new(op, qp as u32, Psn::new(psn));
    // Requests ask for an ACK on the last packet of a message, as a requester does.
    bth.ack_req = !op.info().is_response()
        && matches!(
            op.position(),
            ferroce_wire::Position::Last | ferroce_wire::Position::Only
        );
    let r = IbRepr { bth, ext, payload };
    let mut v = vec![0; r.buffer_len()];
    r.emit(&mut v).expect("emit");
    v
}

/// A [`SEED_MODE`] chunk.
fn pkt(op: Opcode, qp: usize, psn: u32, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
    chunk(SEED_MODE, &ib(op, qp, psn, ext, payload))
}

fn reth(va: u64, rkey: u32, dma_len: u32) -> ExtRepr {
    ExtRepr {
        reth: Some(RethRepr { va, rkey, dma_len }),
        ..Default::default()
    }
}

fn imm(ext: ExtRepr) -> ExtRepr {
    ExtRepr {
        immdt: Some(ImmDtRepr { imm: 0x1234_5678 }),
        ..ext
    }
}

fn aeth(syndrome: Syndrome) -> ExtRepr {
    ExtRepr {
        aeth: Some(AethRepr { syndrome, msn: 0 }),
        ..Default::default()
    }
}

fn atomic(va: u64, rkey: u32, swap_add: u64, compare: u64) -> ExtRepr {
    ExtRepr {
        atomic_eth: Some(AtomicEthRepr {
            va,
            rkey,
            swap_add,
            compare,
        }),
        ..Default::default()
    }
}

fn deth(qkey: u32) -> ExtRepr {
    ExtRepr {
        deth: Some(DethRepr { qkey, src_qp: 0x77 }),
        ..Default::default()
    }
}

const NONE: ExtRepr = ExtRepr {
    deth: None,
    reth: None,
    atomic_eth: None,
    aeth: None,
    atomic_ack_eth: None,
    immdt: None,
    ieth: None,
    cnp: None,
};

fn bytes(n: usize, tag: u8) -> Vec<u8> {
    (0..n).map(|i| tag ^ (i as u8)).collect()
}

/// A whole IPv4 datagram from `src` with the packet's headers and a correct ICRC.
fn datagram(src: std::net::Ipv4Addr, bth: BthRepr, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
    let d = DatagramRepr {
        ip: IpRepr::V4 {
            src,
            dst: LOCAL,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            identification: 1,
            dont_fragment: true,
        },
        src_port: 0xc001,
        ib: IbRepr { bth, ext, payload },
    };
    let mut v = vec![0; d.buffer_len()];
    d.emit(&mut v).expect("emit");
    v
}

type Expect = Box<dyn Fn(&Outcome) -> bool>;

struct Seed {
    name: &'static str,
    data: Vec<u8>,
    /// What the seed must reach.
    expect: Expect,
    what: &'static str,
}

fn recv_ok(o: &Outcome, qp: usize, byte_len: u32) -> bool {
    o.completions.iter().any(|(q, wc)| {
        *q == qp
            && wc.status == WcStatus::Success
            && wc.opcode == WcOpcode::Recv
            && wc.byte_len == byte_len
    })
}

fn status(o: &Outcome, qp: usize, s: WcStatus) -> bool {
    o.completions
        .iter()
        .any(|(q, wc)| *q == qp && wc.status == s)
}

fn sent(o: &Outcome, op: Opcode) -> usize {
    o.sent.iter().filter(|s| s.opcode == op).count()
}

fn nak(o: &Outcome, code: NakCode) -> bool {
    o.sent
        .iter()
        .any(|s| s.syndrome == Some(Syndrome::Nak(code)))
}

fn seeds() -> Vec<Seed> {
    let h = Harness::new();
    let mr = |i: usize| h.regions[i].info;
    let (rw, wo, ro, local, pd2_rw) = (mr(RW), mr(WO), mr(RO), mr(LOCAL_ONLY), mr(PD2_RW));
    let big = mr(BIG);
    let mut v: Vec<Seed> = Vec::new();
    let mut add = |name, what, data: Vec<Vec<u8>>, expect: Expect| {
        v.push(Seed {
            name,
            data: data.concat(),
            expect,
            what,
        })
    };
    use Opcode as O;

    // RC SENDs into the RC QP's first receive WQE (600 bytes in two SGEs).
    add(
        "rc-send-only",
        "a 32-byte receive and an ACK",
        vec![pkt(O::RC_SEND_ONLY, RC, 0, NONE, &bytes(32, 1))],
        Box::new(|o| recv_ok(o, RC, 32) && sent(o, O::RC_ACKNOWLEDGE) == 1),
    );
    add(
        "rc-send-only-imm",
        "a receive with immediate data",
        vec![pkt(
            O::RC_SEND_ONLY_WITH_IMMEDIATE,
            RC,
            0,
            imm(NONE),
            &bytes(8, 2),
        )],
        Box::new(|o| {
            o.completions
                .iter()
                .any(|(_, wc)| wc.wc_flags.contains(WcFlags::WITH_IMM) && wc.imm_data != 0)
        }),
    );
    add(
        "rc-send-first-middle-last",
        "a 576-byte three-packet receive across two SGEs",
        vec![
            pkt(O::RC_SEND_FIRST, RC, 0, NONE, &bytes(256, 3)),
            pkt(O::RC_SEND_MIDDLE, RC, 1, NONE, &bytes(256, 4)),
            pkt(O::RC_SEND_LAST, RC, 2, NONE, &bytes(64, 5)),
        ],
        Box::new(|o| recv_ok(o, RC, 576)),
    );
    add(
        "rc-send-first-last-imm",
        "a two-packet receive with immediate data",
        vec![
            pkt(O::RC_SEND_FIRST, RC, 0, NONE, &bytes(256, 6)),
            pkt(
                O::RC_SEND_LAST_WITH_IMMEDIATE,
                RC,
                1,
                imm(NONE),
                &bytes(44, 7),
            ),
        ],
        Box::new(|o| recv_ok(o, RC, 300)),
    );
    let inv = ExtRepr {
        ieth: Some(IethRepr { rkey: wo.rkey }),
        ..NONE
    };
    add(
        "rc-send-only-inv",
        "a receive that asks to invalidate `wo`, an ordinary region: refused as in rxe",
        vec![pkt(
            O::RC_SEND_ONLY_WITH_INVALIDATE,
            RC,
            0,
            inv,
            &bytes(12, 8),
        )],
        Box::new(|o| {
            status(o, RC, WcStatus::RemInvReqErr)
                && nak(o, NakCode::InvalidRequest)
                && !o
                    .completions
                    .iter()
                    .any(|(_, wc)| wc.wc_flags.contains(WcFlags::WITH_INV))
        }),
    );
    add(
        "rc-send-last-inv",
        "a two-packet receive ending with a refused invalidate: the receive fails",
        vec![
            pkt(O::RC_SEND_FIRST, RC, 0, NONE, &bytes(256, 9)),
            pkt(O::RC_SEND_LAST_WITH_INVALIDATE, RC, 1, inv, &bytes(4, 10)),
        ],
        Box::new(|o| {
            status(o, RC, WcStatus::RemInvReqErr)
                && nak(o, NakCode::InvalidRequest)
                && !recv_ok(o, RC, 260)
        }),
    );
    add(
        "rc-send-too-long",
        "a second SEND too long for the 64-byte second WQE: LocLenErr and a NAK",
        vec![
            pkt(O::RC_SEND_ONLY, RC, 0, NONE, &bytes(16, 12)),
            pkt(O::RC_SEND_ONLY, RC, 1, NONE, &bytes(100, 13)),
        ],
        Box::new(|o| status(o, RC, WcStatus::LocLenErr) && nak(o, NakCode::InvalidRequest)),
    );
    add(
        "rc-send-poisoned-wqe",
        "the fourth receive WQE points into `ro` (no LOCAL_WRITE): LocProtErr",
        vec![
            pkt(O::RC_SEND_ONLY, RC, 0, NONE, &bytes(4, 14)),
            pkt(O::RC_SEND_ONLY, RC, 1, NONE, &bytes(4, 15)),
            pkt(O::RC_SEND_ONLY, RC, 2, NONE, &bytes(4, 16)),
            pkt(O::RC_SEND_ONLY, RC, 3, NONE, &bytes(4, 17)),
        ],
        Box::new(|o| {
            status(o, RC, WcStatus::LocProtErr) && nak(o, NakCode::RemoteOperationalError)
        }),
    );

    // RC RDMA WRITEs.
    add(
        "rc-write-only",
        "64 bytes written into `rw`",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY,
            RC,
            0,
            reth(rw.addr + 16, rw.rkey, 64),
            &bytes(64, 20),
        )],
        Box::new(|o| o.changed.contains(&"rw") && o.counters.rdma_recvs == 1),
    );
    add(
        "rc-write-first-middle-last",
        "a 600-byte three-packet WRITE",
        vec![
            pkt(
                O::RC_RDMA_WRITE_FIRST,
                RC,
                0,
                reth(rw.addr, rw.rkey, 600),
                &bytes(256, 21),
            ),
            pkt(O::RC_RDMA_WRITE_MIDDLE, RC, 1, NONE, &bytes(256, 22)),
            pkt(O::RC_RDMA_WRITE_LAST, RC, 2, NONE, &bytes(88, 23)),
        ],
        Box::new(|o| o.changed.contains(&"rw") && o.counters.rdma_recvs == 1),
    );
    add(
        "rc-write-only-imm",
        "a WRITE with immediate consuming a receive WQE",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            RC,
            0,
            imm(reth(wo.addr, wo.rkey, 16)),
            &bytes(16, 24),
        )],
        Box::new(|o| {
            o.completions
                .iter()
                .any(|(_, wc)| wc.opcode == WcOpcode::RecvRdmaWithImm && wc.byte_len == 16)
        }),
    );
    add(
        "rc-write-last-imm",
        "a two-packet WRITE ending with immediate",
        vec![
            pkt(
                O::RC_RDMA_WRITE_FIRST,
                RC,
                0,
                reth(rw.addr + 100, rw.rkey, 300),
                &bytes(256, 25),
            ),
            pkt(
                O::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                RC,
                1,
                imm(NONE),
                &bytes(44, 26),
            ),
        ],
        Box::new(|o| {
            o.completions
                .iter()
                .any(|(_, wc)| wc.opcode == WcOpcode::RecvRdmaWithImm && wc.byte_len == 300)
        }),
    );
    add(
        "rc-write-zero-length",
        "a zero-length WRITE with a bogus rkey (not checked for length 0)",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY,
            RC,
            0,
            reth(0, 0xdead_beef, 0),
            &[],
        )],
        Box::new(|o| o.counters.rdma_recvs == 1 && o.changed.is_empty()),
    );
    add(
        "rc-write-bad-rkey",
        "a WRITE with the rkey of a LOCAL_WRITE-only region: NAK, QP to ERR, WQEs flushed",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY,
            RC,
            0,
            reth(local.addr, local.rkey, 8),
            &bytes(8, 27),
        )],
        Box::new(|o| nak(o, NakCode::RemoteAccessError) && status(o, RC, WcStatus::WrFlushErr)),
    );
    add(
        "rc-write-out-of-bounds",
        "a WRITE running 8 bytes past the end of `rw`: NAK",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY,
            RC,
            0,
            reth(rw.addr + rw.len - 8, rw.rkey, 16),
            &bytes(16, 28),
        )],
        Box::new(|o| nak(o, NakCode::RemoteAccessError) && o.changed.is_empty()),
    );
    add(
        "rc-write-other-pd",
        "a WRITE with the rkey of the other PD's region at the same iova: NAK",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY,
            RC,
            0,
            reth(pd2_rw.addr, pd2_rw.rkey, 16),
            &bytes(16, 29),
        )],
        Box::new(|o| nak(o, NakCode::RemoteAccessError) && o.changed.is_empty()),
    );

    // RC READs and atomics.
    add(
        "rc-read",
        "a 600-byte READ of `rw`: three response packets",
        vec![pkt(
            O::RC_RDMA_READ_REQUEST,
            RC,
            0,
            reth(rw.addr, rw.rkey, 600),
            &[],
        )],
        Box::new(|o| {
            sent(o, O::RC_RDMA_READ_RESPONSE_FIRST) == 1
                && sent(o, O::RC_RDMA_READ_RESPONSE_MIDDLE) == 1
                && sent(o, O::RC_RDMA_READ_RESPONSE_LAST) == 1
        }),
    );
    add(
        "rc-read-ro",
        "a READ of `ro`: one response packet",
        vec![pkt(
            O::RC_RDMA_READ_REQUEST,
            RC,
            0,
            reth(ro.addr + 8, ro.rkey, 64),
            &[],
        )],
        Box::new(|o| sent(o, O::RC_RDMA_READ_RESPONSE_ONLY) == 1),
    );
    add(
        "rc-read-too-many",
        "five READs held back: the fifth is over max_dest_rd_atomic (4)",
        (0..5)
            .map(|k| {
                let mut c = pkt(
                    O::RC_RDMA_READ_REQUEST,
                    RC,
                    k,
                    reth(rw.addr, rw.rkey, 8),
                    &[],
                );
                c[0] |= HOLD;
                c
            })
            .collect(),
        Box::new(|o| {
            sent(o, O::RC_RDMA_READ_RESPONSE_ONLY) == 4 && nak(o, NakCode::InvalidRequest)
        }),
    );
    add(
        "rc-cmp-swap",
        "a compare-and-swap on `rw`",
        vec![pkt(
            O::RC_COMPARE_SWAP,
            RC,
            0,
            atomic(rw.addr + 8, rw.rkey, 0x55, 0),
            &[],
        )],
        Box::new(|o| sent(o, O::RC_ATOMIC_ACKNOWLEDGE) == 1),
    );
    add(
        "rc-fetch-add",
        "a fetch-and-add on `rw`",
        vec![pkt(
            O::RC_FETCH_ADD,
            RC,
            0,
            atomic(rw.addr + 16, rw.rkey, 5, 0),
            &[],
        )],
        Box::new(|o| sent(o, O::RC_ATOMIC_ACKNOWLEDGE) == 1 && o.changed.contains(&"rw")),
    );
    add(
        "rc-atomic-misaligned",
        "a fetch-and-add at an address that is not 8-byte aligned: NAK",
        vec![pkt(
            O::RC_FETCH_ADD,
            RC,
            0,
            atomic(rw.addr + 4, rw.rkey, 5, 0),
            &[],
        )],
        Box::new(|o| nak(o, NakCode::InvalidRequest) && o.changed.is_empty()),
    );

    add(
        "rc-atomic-write",
        "an atomic write of 8 bytes into `wo` (REMOTE_WRITE alone suffices): an ACK",
        vec![pkt(
            O::RC_ATOMIC_WRITE,
            RC,
            0,
            reth(wo.addr + 8, wo.rkey, 8),
            &bytes(8, 41),
        )],
        Box::new(|o| sent(o, O::RC_ACKNOWLEDGE) == 1 && o.changed == ["wo"]),
    );
    add(
        "rc-atomic-write-misaligned",
        "an atomic write at an address that is not 8-byte aligned: NAK, nothing stored",
        vec![pkt(
            O::RC_ATOMIC_WRITE,
            RC,
            0,
            reth(wo.addr + 4, wo.rkey, 8),
            &bytes(8, 42),
        )],
        Box::new(|o| nak(o, NakCode::InvalidRequest) && o.changed.is_empty()),
    );
    add(
        "rc-atomic-write-read-only",
        "an atomic write into `ro` (REMOTE_READ only): remote access error, nothing stored",
        vec![pkt(
            O::RC_ATOMIC_WRITE,
            RC,
            0,
            reth(ro.addr, ro.rkey, 8),
            &bytes(8, 43),
        )],
        Box::new(|o| nak(o, NakCode::RemoteAccessError) && o.changed.is_empty()),
    );

    // RC sequence errors.
    add(
        "rc-duplicate-send",
        "a SEND, then the same PSN again: re-ACKed",
        vec![
            pkt(O::RC_SEND_ONLY, RC, 0, NONE, &bytes(8, 30)),
            pkt(O::RC_SEND_ONLY, RC, 0, NONE, &bytes(8, 30)),
        ],
        Box::new(|o| o.counters.duplicate_request == 1 && sent(o, O::RC_ACKNOWLEDGE) == 2),
    );
    let big_read = |psn: u32, off: u64, len: u32| {
        pkt(
            O::RC_RDMA_READ_REQUEST,
            RC,
            psn,
            reth(big.addr + off, big.rkey, len),
            &[],
        )
    };
    add(
        "rc-big-read-dup-tail",
        "a 16-packet READ of `big`, then a retry of its last 11 packets: replayed",
        vec![big_read(0, 0, 4096), big_read(5, 5 * 256, 4096 - 5 * 256)],
        Box::new(|o| {
            o.counters.duplicate_request == 1
                && sent(o, O::RC_RDMA_READ_RESPONSE_MIDDLE) == 14 + 9
                && sent(o, O::RC_RDMA_READ_RESPONSE_LAST) == 2
        }),
    );
    add(
        "rc-big-read-dup-outside",
        "a READ of `big`, then a \"retry\" asking for twice as much: NAK invalid request",
        vec![big_read(0, 0, 4096), big_read(0, 0, 8192)],
        Box::new(|o| {
            o.counters.rx_dup_read_outside == 1
                && nak(o, NakCode::InvalidRequest)
                && sent(o, O::RC_RDMA_READ_RESPONSE_LAST) == 1
        }),
    );
    add(
        "rc-duplicate-read",
        "a two-packet READ, then the request again: re-executed",
        vec![
            pkt(
                O::RC_RDMA_READ_REQUEST,
                RC,
                0,
                reth(rw.addr, rw.rkey, 512),
                &[],
            ),
            pkt(
                O::RC_RDMA_READ_REQUEST,
                RC,
                0,
                reth(rw.addr, rw.rkey, 512),
                &[],
            ),
        ],
        Box::new(|o| {
            o.counters.duplicate_request == 1 && sent(o, O::RC_RDMA_READ_RESPONSE_LAST) == 2
        }),
    );
    add(
        "rc-duplicate-atomic",
        "a fetch-and-add, then again: answered from the cache",
        vec![
            pkt(O::RC_FETCH_ADD, RC, 0, atomic(rw.addr, rw.rkey, 1, 0), &[]),
            pkt(O::RC_FETCH_ADD, RC, 0, atomic(rw.addr, rw.rkey, 1, 0), &[]),
        ],
        Box::new(|o| o.counters.duplicate_request == 1 && sent(o, O::RC_ATOMIC_ACKNOWLEDGE) == 2),
    );
    add(
        "rc-out-of-sequence",
        "a SEND three PSNs ahead: one sequence NAK",
        vec![pkt(O::RC_SEND_ONLY, RC, 3, NONE, &bytes(8, 31))],
        Box::new(|o| o.counters.out_of_seq_request == 1 && nak(o, NakCode::PsnSequenceError)),
    );
    add(
        "rc-middle-without-first",
        "a SEND_MIDDLE with no message open: NAK",
        vec![pkt(O::RC_SEND_MIDDLE, RC, 0, NONE, &bytes(256, 32))],
        Box::new(|o| nak(o, NakCode::InvalidRequest)),
    );

    // Other QPs.
    add(
        "unknown-qp",
        "a SEND to a QP that does not exist",
        vec![pkt(O::RC_SEND_ONLY, 5, 0, NONE, &bytes(8, 40))],
        Box::new(|o| o.counters.rx_unknown_qp == 1),
    );
    add(
        "qp1",
        "a UD SEND to QP 1",
        vec![pkt(O::UD_SEND_ONLY, 6, 0, deth(QKEY), &bytes(8, 41))],
        Box::new(|o| o.counters.rx_unknown_qp == 1),
    );
    add(
        "rc-srq-send",
        "a SEND to the RC QP on the SRQ",
        vec![pkt(O::RC_SEND_ONLY, RC_SRQ, 0, NONE, &bytes(40, 42))],
        Box::new(|o| recv_ok(o, RC_SRQ, 40)),
    );
    add(
        "rc-srq-poisoned",
        "two SENDs on the SRQ QP; the second WQE's second SGE is in the other PD",
        vec![
            pkt(O::RC_SEND_ONLY, RC_SRQ, 0, NONE, &bytes(8, 43)),
            pkt(O::RC_SEND_ONLY, RC_SRQ, 1, NONE, &bytes(200, 44)),
        ],
        Box::new(|o| status(o, RC_SRQ, WcStatus::LocProtErr)),
    );
    add(
        "rc-srq-write-denied",
        "a WRITE to the QP without REMOTE_WRITE: NAK",
        vec![pkt(
            O::RC_RDMA_WRITE_ONLY,
            RC_SRQ,
            0,
            reth(rw.addr, rw.rkey, 8),
            &bytes(8, 45),
        )],
        Box::new(|o| nak(o, NakCode::InvalidRequest) && o.changed.is_empty()),
    );
    add(
        "rc-pd2-read",
        "a 300-byte READ of `pd2_rw` from the RTR QP in the other PD",
        vec![pkt(
            O::RC_RDMA_READ_REQUEST,
            RC_PD2,
            0,
            reth(pd2_rw.addr, pd2_rw.rkey, 300),
            &[],
        )],
        Box::new(|o| sent(o, O::RC_RDMA_READ_RESPONSE_LAST) == 1),
    );
    add(
        "rc-pd2-read-other-pd",
        "a READ of `rw` (same iova, other PD) from the RTR QP: NAK",
        vec![pkt(
            O::RC_RDMA_READ_REQUEST,
            RC_PD2,
            0,
            reth(rw.addr, rw.rkey, 16),
            &[],
        )],
        Box::new(|o| nak(o, NakCode::RemoteAccessError)),
    );
    add(
        "rc-pd2-send",
        "two SENDs to the RTR QP; the second WQE is in the other PD",
        vec![
            pkt(O::RC_SEND_ONLY, RC_PD2, 0, NONE, &bytes(20, 46)),
            pkt(O::RC_SEND_ONLY, RC_PD2, 1, NONE, &bytes(20, 47)),
        ],
        Box::new(|o| recv_ok(o, RC_PD2, 20) && status(o, RC_PD2, WcStatus::LocProtErr)),
    );
    add(
        "uc-send-only",
        "a UC SEND",
        vec![pkt(O::UC_SEND_ONLY, UC, 0, NONE, &bytes(24, 50))],
        Box::new(|o| recv_ok(o, UC, 24)),
    );
    add(
        "uc-send-first-middle-last",
        "a three-packet UC SEND",
        vec![
            pkt(O::UC_SEND_FIRST, UC, 0, NONE, &bytes(256, 51)),
            pkt(O::UC_SEND_MIDDLE, UC, 1, NONE, &bytes(256, 52)),
            pkt(
                O::UC_SEND_LAST_WITH_IMMEDIATE,
                UC,
                2,
                imm(NONE),
                &bytes(4, 53),
            ),
        ],
        Box::new(|o| recv_ok(o, UC, 516)),
    );
    add(
        "uc-send-lost-middle",
        "a UC SEND missing its middle packet: dropped, the WQE reused",
        vec![
            pkt(O::UC_SEND_FIRST, UC, 0, NONE, &bytes(256, 54)),
            pkt(O::UC_SEND_LAST, UC, 2, NONE, &bytes(4, 55)),
            pkt(O::UC_SEND_ONLY, UC, 3, NONE, &bytes(4, 56)),
        ],
        Box::new(|o| o.counters.rx_uc_dropped > 0 && recv_ok(o, UC, 4)),
    );
    add(
        "uc-write-only",
        "a UC WRITE into `wo`",
        vec![pkt(
            O::UC_RDMA_WRITE_ONLY,
            UC,
            0,
            reth(wo.addr, wo.rkey, 32),
            &bytes(32, 57),
        )],
        Box::new(|o| o.changed.contains(&"wo")),
    );
    add(
        "uc-write-first-last-imm",
        "a two-packet UC WRITE ending with immediate",
        vec![
            pkt(
                O::UC_RDMA_WRITE_FIRST,
                UC,
                0,
                reth(rw.addr, rw.rkey, 260),
                &bytes(256, 58),
            ),
            pkt(
                O::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                UC,
                1,
                imm(NONE),
                &bytes(4, 60),
            ),
        ],
        Box::new(|o| {
            o.completions.iter().any(|(q, wc)| {
                *q == UC && wc.opcode == WcOpcode::RecvRdmaWithImm && wc.byte_len == 260
            })
        }),
    );
    add(
        "uc-write-imm",
        "a UC WRITE with immediate",
        vec![pkt(
            O::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            UC,
            0,
            imm(reth(rw.addr, rw.rkey, 4)),
            &bytes(4, 61),
        )],
        Box::new(|o| {
            o.completions
                .iter()
                .any(|(q, wc)| *q == UC && wc.opcode == WcOpcode::RecvRdmaWithImm)
        }),
    );
    add(
        "ud-send-only",
        "a UD SEND: GRH area + 64 bytes",
        vec![pkt(O::UD_SEND_ONLY, UD, 0, deth(QKEY), &bytes(64, 70))],
        Box::new(|o| recv_ok(o, UD, 104)),
    );
    add(
        "ud-send-imm",
        "a UD SEND with immediate",
        vec![pkt(
            O::UD_SEND_ONLY_WITH_IMMEDIATE,
            UD,
            0,
            imm(deth(QKEY)),
            &bytes(8, 71),
        )],
        Box::new(|o| recv_ok(o, UD, 48)),
    );
    add(
        "ud-bad-qkey",
        "a UD SEND with the wrong Q_Key",
        vec![pkt(O::UD_SEND_ONLY, UD, 0, deth(QKEY ^ 1), &bytes(8, 72))],
        Box::new(|o| o.counters.rx_bad_qkey == 1),
    );
    add(
        "ud-every-wqe",
        "five UD SENDs, from a stranger too: split GRH, bogus lkey, SGE past the region end",
        (0..5u8)
            .map(|k| {
                let mut c = pkt(O::UD_SEND_ONLY, UD, 0, deth(QKEY), &bytes(60, 73 + k));
                if k % 2 == 1 {
                    c[0] |= FROM_STRANGER;
                }
                c
            })
            .collect(),
        Box::new(|o| {
            recv_ok(o, UD, 100)
                && status(o, UD, WcStatus::LocProtErr)
                && o.completions.iter().filter(|(q, _)| *q == UD).count() == 5
        }),
    );

    // Responses to the RC QP's own SEND (PSN offset 0), READ (1, 2) and FETCH_ADD (3).
    let read_resp = |op, psn, ext, tag| pkt(op, RC, psn, ext, &bytes(256, tag));
    let ack = aeth(Syndrome::Ack { credits: 4 });
    add(
        "rc-responses",
        "an ACK, two READ responses and an atomic ACK complete the three send WQEs",
        vec![
            pkt(O::RC_ACKNOWLEDGE, RC, 0, ack, &[]),
            read_resp(O::RC_RDMA_READ_RESPONSE_FIRST, 1, ack, 80),
            read_resp(O::RC_RDMA_READ_RESPONSE_LAST, 2, ack, 81),
            pkt(
                O::RC_ATOMIC_ACKNOWLEDGE,
                RC,
                3,
                ExtRepr {
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig: 7 }),
                    ..ack
                },
                &[],
            ),
        ],
        Box::new(|o| {
            o.completions
                .iter()
                .filter(|(q, wc)| *q == RC && wc.status == WcStatus::Success)
                .count()
                == 3
                && o.changed.contains(&"recv")
        }),
    );
    add(
        "rc-nak-sequence",
        "a sequence NAK: go-back-N",
        vec![pkt(
            O::RC_ACKNOWLEDGE,
            RC,
            1,
            aeth(Syndrome::Nak(NakCode::PsnSequenceError)),
            &[],
        )],
        Box::new(|o| o.counters.rcvd_seq_err == 1 && sent(o, O::RC_RDMA_READ_REQUEST) >= 2),
    );
    add(
        "rc-rnr-nak",
        "an RNR NAK, then a wait: the SEND goes again",
        vec![
            pkt(
                O::RC_ACKNOWLEDGE,
                RC,
                0,
                aeth(Syndrome::RnrNak { timer: 1 }),
                &[],
            ),
            chunk(WRAP | (2 << CLOCK_SHIFT), &[]),
        ],
        Box::new(|o| o.counters.rcvd_rnr_err == 1 && sent(o, O::RC_SEND_ONLY) >= 2),
    );
    add(
        "rc-nak-remote-access",
        "a remote access NAK for the SEND: RemAccessErr, QP to ERR",
        vec![pkt(
            O::RC_ACKNOWLEDGE,
            RC,
            0,
            aeth(Syndrome::Nak(NakCode::RemoteAccessError)),
            &[],
        )],
        Box::new(|o| status(o, RC, WcStatus::RemAccessErr)),
    );
    add(
        "rc-ack-timeouts",
        "no answer for three seconds: retries, then RetryExcErr",
        vec![chunk(3 << CLOCK_SHIFT, &[]), chunk(3 << CLOCK_SHIFT, &[])],
        Box::new(|o| o.counters.ack_timeouts >= 3 && status(o, RC, WcStatus::RetryExcErr)),
    );

    // Whole datagrams and odd packets.
    let mut bth = BthRepr::new(O::RC_SEND_ONLY, h.qps[RC].qpn, Psn::new(h.qps[RC].rq_psn));
    bth.ack_req = true;
    add(
        "raw-datagram",
        "a whole IPv4 datagram with its ICRC, handed over as is",
        vec![chunk(0, &datagram(PEER, bth, NONE, &bytes(16, 90)))],
        Box::new(|o| recv_ok(o, RC, 16)),
    );
    let mut d = datagram(PEER, bth, NONE, &bytes(16, 91));
    d[8] = 1; // TTL: masked by the ICRC (the IPv4 checksum, which covers it, is fixed)
    ferroce_wire::ipv4::fill_header_checksum(&mut d);
    d[26] ^= 0xff; // UDP checksum: masked too
    add(
        "raw-datagram-refill",
        "a datagram whose source was changed to a stranger, its ICRC recomputed (FIX)",
        vec![chunk(FIX, &{
            let mut d = d.clone();
            d[15] = 3; // 10.0.0.3; FIX recomputes the IPv4 checksum too
            d
        })],
        Box::new(|o| o.counters.rx_bad_src == 1),
    );
    add(
        "raw-bad-icrc",
        "a datagram with a wrong ICRC",
        vec![chunk(0, &{
            let mut d = d;
            let n = d.len();
            d[n - 1] ^= 1;
            d
        })],
        Box::new(|o| o.counters.rx_icrc_err == 1),
    );
    add(
        "stranger",
        "a SEND from a third host to the RC QP: dropped",
        vec![chunk(
            SEED_MODE | FROM_STRANGER,
            &ib(O::RC_SEND_ONLY, RC, 0, NONE, &bytes(8, 92)),
        )],
        Box::new(|o| o.counters.rx_bad_src == 1),
    );
    add(
        "cnp",
        "a congestion notification packet",
        vec![pkt(
            O::CNP,
            RC,
            0,
            ExtRepr {
                cnp: Some(CnpRepr::default()),
                ..NONE
            },
            &[],
        )],
        Box::new(|o| o.counters.rx_cnp == 1),
    );
    add(
        "held-writes",
        "three WRITEs answered together: the ACKs coalesce",
        (0..3)
            .map(|k| {
                let mut c = pkt(
                    O::RC_RDMA_WRITE_ONLY,
                    RC,
                    k,
                    reth(rw.addr + 64 * u64::from(k), rw.rkey, 8),
                    &bytes(8, 93),
                );
                c[0] |= HOLD;
                c
            })
            .collect(),
        Box::new(|o| o.counters.rdma_recvs == 3 && sent(o, O::RC_ACKNOWLEDGE) == 1),
    );
    v
}

/// A short account of a run: counters that moved, completions, datagrams, changed regions.
fn summary(o: &Outcome) -> String {
    let counters: Vec<String> = o
        .counters
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let wcs: Vec<String> = o
        .completions
        .iter()
        .map(|(q, wc)| format!("qp{q}:{:?}/{:?}/{}", wc.opcode, wc.status, wc.byte_len))
        .collect();
    let sent: Vec<String> = o
        .sent
        .iter()
        .map(|s| {
            format!(
                "qp{}:{}@{:#x}{:?}",
                s.qp,
                s.opcode.name(),
                s.psn,
                s.syndrome
            )
        })
        .collect();
    format!(
        "\n counters: {}\n completions: {}\n sent: {}\n changed: {:?}\n states: {:?}",
        counters.join(" "),
        wcs.join(" "),
        sent.join(" "),
        o.changed,
        o.states
    )
}

#[test]
fn seeds_reach_what_they_are_named_for() {
    let seeds = seeds();
    let mut names = std::collections::BTreeSet::new();
    let mut failed = Vec::new();
    for s in &seeds {
        assert!(names.insert(s.name), "two seeds named {}", s.name);
        assert!(
            s.data.len() <= 1024,
            "seed {} is {} bytes",
            s.name,
            s.data.len()
        );
        let o = run(&s.data);
        if !(s.expect)(&o) {
            failed.push(format!("seed-{} ({}): {}", s.name, s.what, summary(&o)));
        }
    }
    assert!(
        failed.is_empty(),
        "seeds that miss what they are for:\n{}",
        failed.join("\n")
    );
}

#[test]
fn committed_seeds_are_up_to_date() {
    let dir = corpus_dir();
    let want: BTreeMap<String, Vec<u8>> = seeds()
        .into_iter()
        .map(|s| (format!("seed-{}", s.name), s.data))
        .collect();
    let write = std::env::var_os(WRITE_ENV).is_some();
    if write {
        fs::create_dir_all(&dir).expect("create the corpus directory");
    }
    let have: BTreeMap<String, Vec<u8>> = fs::read_dir(&dir)
        .map(|rd| {
            rd.map(|e| e.expect("entry").path())
                .filter_map(|p| {
                    let name = p.file_name()?.to_str()?.to_owned();
                    name.starts_with("seed-")
                        .then(|| (name, fs::read(&p).expect("readable seed")))
                })
                .collect()
        })
        .unwrap_or_default();
    if write {
        for name in have.keys().filter(|n| !want.contains_key(*n)) {
            fs::remove_file(dir.join(name)).expect("remove a stale seed");
        }
        for (name, data) in &want {
            if have.get(name) != Some(data) {
                fs::write(dir.join(name), data).expect("write a seed");
            }
        }
        eprintln!("wrote {} seeds to {}", want.len(), dir.display());
        return;
    }
    let stale: Vec<&String> = have.keys().filter(|n| !want.contains_key(*n)).collect();
    let wrong: Vec<&String> = want
        .iter()
        .filter(|(n, d)| have.get(*n) != Some(d))
        .map(|(n, _)| n)
        .collect();
    assert!(
        stale.is_empty() && wrong.is_empty(),
        "fuzz/corpus/responder/ is out of date (missing or changed: {wrong:?}; stale: {stale:?}); \
         run `{WRITE_ENV}=1 cargo test -p ferroce-transport --test fuzz_responder_seeds`"
    );
}

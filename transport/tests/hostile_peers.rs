//! Hostile peers: what a spoofer with valid ICRCs can and cannot make a responder do.
//! Each test fails on the engine before the hardening (6e319e6) and passes after.

mod common;

use ferroce_transport::testing::{bring_up, connect, create_in_pd, forge, QpOpts, Rng, Side, Sim};
use ferroce_transport::{
    next_rkey, seeded_fill, Access, Endpoint, EndpointConfig, MrInfo, Mtu, MwBind, MwType,
    QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, WcStatus,
};
use ferroce_wire::{
    BthRepr, ExtRepr, IethRepr, NakCode, Opcode, Operation, Psn, RethRepr, Syndrome,
};

/// The PSN node 1's QP expects first (node 0 sends from `QpOpts::default().psn[0]`).
const RQ_PSN: u32 = 0x100;

/// Two connected RC QPs (MTU 1024) and a 1 MiB readable, writable region on node 1
/// filled with a pattern.
fn setup(seed: u64) -> (Sim, Side, Side, MrInfo) {
    let mut sim = Sim::new(seed, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let bytes: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 + i / 251) as u8).collect();
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let mr = sim.nodes[1].reg_mr_with(b.pd, bytes, None, access).unwrap();
    (sim, a, b, mr)
}

/// A request from node 0's address to node 1's QP, with a valid ICRC.
fn to_b(sim: &Sim, b: Side, op: Opcode, psn: u32, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
    forge(
        sim.gid(0),
        sim.gid(1),
        BthRepr::new(op, b.qpn, Psn::new(psn)),
        ext,
        payload,
    )
}

/// An 8-byte SEND with invalidate of `rkey` to `to`'s QP at the expected PSN.
fn send_inv(sim: &Sim, to: Side, rkey: u32) -> Vec<u8> {
    let ext = ExtRepr {
        ieth: Some(IethRepr { rkey }),
        ..Default::default()
    };
    to_b(
        sim,
        to,
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        RQ_PSN,
        ext,
        &[1; 8],
    )
}

fn read_req(sim: &Sim, b: Side, psn: u32, va: u64, rkey: u32, len: u32) -> Vec<u8> {
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va,
            rkey,
            dma_len: len,
        }),
        ..Default::default()
    };
    to_b(sim, b, Opcode::RC_RDMA_READ_REQUEST, psn, ext, &[])
}

type Out = common::Sent;

/// Everything node 1 sends now.
fn drain(sim: &mut Sim) -> Vec<Out> {
    common::drain_sent(sim, 1)
}

fn read_payload(out: &[Out]) -> Vec<u8> {
    out.iter()
        .filter(|o| o.0.operation() == Operation::RdmaReadResponse)
        .flat_map(|o| o.3.clone())
        .collect()
}

fn naks(out: &[Out], code: NakCode) -> usize {
    out.iter()
        .filter(|o| o.2 == Some(Syndrome::Nak(code)))
        .count()
}

#[test]
fn keys_iovas_and_qpns_come_from_the_random_source() {
    let cfg = || EndpointConfig {
        local_gids: vec![],
        port_mtu: Mtu::Mtu4096,
        ..Default::default()
    };
    let regions = |seed: u64| {
        let mut ep = Endpoint::with_random(cfg(), seeded_fill(seed));
        let pd = ep.alloc_pd();
        let mrs: Vec<MrInfo> = (0..200)
            .map(|_| ep.reg_mr(pd, 5000, Access::LOCAL_WRITE).unwrap())
            .collect();
        let cq = ep.create_cq(16).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            cap: QpOpts::default().cap,
            sq_sig_all: false,
            srq: None,
        };
        let qpns: Vec<u32> = (0..50).map(|_| ep.create_qp(pd, init).unwrap()).collect();
        (mrs, qpns)
    };
    let (m1, q1) = regions(1);
    let (m2, q2) = regions(2);
    // Another source, other keys, iovas and QP numbers: nothing follows from the order.
    assert_ne!(m1[0].lkey, m2[0].lkey);
    assert_ne!(m1[0].addr, m2[0].addr);
    assert_ne!(q1[0], q2[0]);
    let mut keys: Vec<u32> = m1.iter().map(|m| m.lkey).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), m1.len(), "keys are unique");
    assert!(keys.iter().all(|&k| k != 0));
    // Not the old (slot + 1) << 8 | generation: the low byte is not the same everywhere.
    assert!(m1.iter().any(|m| m.lkey & 0xff != m1[0].lkey & 0xff));
    assert!(m1.iter().all(|m| m.lkey != 0x101));
    for (i, m) in m1.iter().enumerate() {
        assert_eq!(m.addr % 4096, 0, "page-aligned");
        assert!(m.addr.checked_add(m.len).is_some());
        for n in &m1[i + 1..] {
            assert!(
                m.addr + m.len <= n.addr || n.addr + n.len <= m.addr,
                "overlap"
            );
        }
    }
    assert!(q1.iter().all(|&q| (2..=0xff_ffff).contains(&q)));
    let sequential = q1.windows(2).filter(|w| w[1] == w[0] + 1).count();
    assert!(sequential < 3, "QP numbers count up: {q1:x?}");
}

#[test]
fn duplicate_read_outside_the_original_is_refused() {
    let (mut sim, _a, b, mr) = setup(60);
    let req = read_req(&sim, b, RQ_PSN, mr.addr + 64, mr.rkey, 16);
    sim.nodes[1].handle_packet(sim.now, &req);
    let out = drain(&mut sim);
    assert_eq!(read_payload(&out).len(), 16);
    // The same PSN, now 1000 bytes elsewhere in the region.
    let dup = read_req(&sim, b, RQ_PSN, mr.addr + 4096, mr.rkey, 1000);
    sim.nodes[1].handle_packet(sim.now, &dup);
    let out = drain(&mut sim);
    assert!(read_payload(&out).is_empty(), "replayed other memory");
    assert_eq!(naks(&out, NakCode::InvalidRequest), 1, "{out:?}");
    assert_eq!(sim.nodes[1].counters().rx_dup_read_outside, 1);
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Err);
}

#[test]
fn duplicate_read_replays_only_its_tail_of_the_original() {
    let (mut sim, _a, b, mr) = setup(61);
    let len = 10 * 1024;
    let p = read_req(&sim, b, RQ_PSN, mr.addr, mr.rkey, len);
    sim.nodes[1].handle_packet(sim.now, &p);
    let first = drain(&mut sim);
    assert_eq!(read_payload(&first).len(), len as usize);
    // A retry from the 4th response: the original's bytes from 3 KiB on, PSNs from +3.
    let dup = read_req(&sim, b, RQ_PSN + 3, mr.addr + 3072, mr.rkey, len - 3072);
    sim.nodes[1].handle_packet(sim.now, &dup);
    let out = drain(&mut sim);
    assert_eq!(read_payload(&out), read_payload(&first)[3072..]);
    assert_eq!(out[0].1, RQ_PSN + 3);
    assert_eq!(out.last().unwrap().1, RQ_PSN + 9);
    // Longer than the original's tail: refused.
    let dup = read_req(&sim, b, RQ_PSN + 3, mr.addr + 3072, mr.rkey, len);
    sim.nodes[1].handle_packet(sim.now, &dup);
    let out = drain(&mut sim);
    assert!(read_payload(&out).is_empty());
    assert_eq!(naks(&out, NakCode::InvalidRequest), 1);
}

#[test]
fn duplicate_reads_share_one_stream() {
    let (mut sim, _a, b, mr) = setup(62);
    let len: u32 = 256 * 1024;
    let req = read_req(&sim, b, RQ_PSN, mr.addr, mr.rkey, len);
    sim.nodes[1].handle_packet(sim.now, &req);
    // 200 duplicates while the 256-packet response stream is still going out.
    for _ in 0..200 {
        sim.nodes[1].handle_packet(sim.now, &req);
    }
    let out = drain(&mut sim);
    assert_eq!(
        read_payload(&out).len(),
        len as usize,
        "one stream, not 201"
    );
    assert_eq!(sim.nodes[1].counters().rx_dup_read_busy, 200);
    // Once it ended, a retry is answered again, once.
    sim.nodes[1].handle_packet(sim.now, &req);
    let out = drain(&mut sim);
    assert_eq!(read_payload(&out).len(), len as usize);
}

/// rxe resends a READ whose responses it already holds but has not processed yet, then
/// sends a new READ once it has: the responder then finds max_dest_rd_atomic resources in
/// use, one of them replaying a retry nobody needs. The new READ takes that one's
/// resource (the replay stops) instead of a fatal NAK; a new READ over the limit with no
/// replay in use is still refused (fuzz seed `rc-read-too-many`).
#[test]
fn a_new_read_at_the_limit_takes_a_replays_resource() {
    let (mut sim, _a, b, mr) = setup(64);
    let max = u32::from(QpOpts::default().max_rd_atomic);
    // READs of 64 bytes each, at PSNs RQ_PSN.. and addresses 64 bytes apart.
    let reads = |sim: &mut Sim| {
        for k in 0..max {
            let a = mr.addr + 64 * u64::from(k);
            let req = read_req(sim, b, RQ_PSN + k, a, mr.rkey, 64);
            sim.nodes[1].handle_packet(sim.now, &req);
        }
    };
    reads(&mut sim);
    assert_eq!(read_payload(&drain(&mut sim)).len(), 64 * max as usize);
    // Every one retried: `max` replays in use, none sent yet.
    reads(&mut sim);
    // A new READ of other bytes.
    let new = read_req(&sim, b, RQ_PSN + max, mr.addr + 8192, mr.rkey, 64);
    sim.nodes[1].handle_packet(sim.now, &new);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::InvalidRequest), 0, "{out:?}");
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Rts);
    let reads: Vec<&Out> = out
        .iter()
        .filter(|o| o.0.operation() == Operation::RdmaReadResponse)
        .collect();
    assert_eq!(
        reads.len(),
        max as usize,
        "max - 1 replays and the new READ"
    );
    let answer = reads
        .iter()
        .find(|o| o.1 == RQ_PSN + max)
        .expect("the new READ answered");
    let want: Vec<u8> = (8192..8192 + 64u32)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    assert_eq!(answer.3, want);
}

#[test]
fn dma_length_over_2_gib_is_an_invalid_request() {
    for (op, payload) in [
        (Opcode::RC_RDMA_READ_REQUEST, &[][..]),
        (Opcode::RC_RDMA_WRITE_FIRST, &[0u8; 1024][..]),
    ] {
        let (mut sim, _a, b, mr) = setup(63);
        let ext = ExtRepr {
            reth: Some(RethRepr {
                va: mr.addr,
                rkey: mr.rkey,
                dma_len: (1 << 31) + 256,
            }),
            ..Default::default()
        };
        let p = to_b(&sim, b, op, RQ_PSN, ext, payload);
        sim.nodes[1].handle_packet(sim.now, &p);
        let out = drain(&mut sim);
        assert!(read_payload(&out).is_empty());
        assert_eq!(naks(&out, NakCode::InvalidRequest), 1, "{op:?}: {out:?}");
        assert_eq!(sim.nodes[1].counters().rx_dma_len_too_long, 1);
    }
}

#[test]
fn remote_invalidation_of_an_ordinary_region_is_refused() {
    let (mut sim, _a, b, mr) = setup(64);
    // The receive buffer: never advertised, but in the PD.
    let rbuf = post_recv_64(&mut sim, b, 1);
    let inv = send_inv(&sim, b, rbuf.lkey);
    sim.nodes[1].handle_packet(sim.now, &inv);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::InvalidRequest), 1, "{out:?}");
    assert_eq!(sim.nodes[1].counters().rx_invalidate_refused, 1);
    // Both regions still work locally.
    assert!(sim.nodes[1].mr_info(rbuf.lkey).is_some());
    assert!(sim.nodes[1].mr_bytes(mr.lkey).is_some());
    let mut wcs = Vec::new();
    sim.nodes[1].poll_cq(b.cq, &mut wcs, 8);
    assert!(wcs.iter().all(|w| w.invalidated_rkey == 0));
}

#[test]
fn ipv4_header_checksum_errors_are_dropped_and_counted() {
    let (mut sim, _a, b, mr) = setup(65);
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: mr.addr,
            rkey: mr.rkey,
            dma_len: 8,
        }),
        ..Default::default()
    };
    let mut p = to_b(&sim, b, Opcode::RC_RDMA_WRITE_ONLY, RQ_PSN, ext, &[9; 8]);
    // The ICRC masks the checksum: the packet still has a valid ICRC.
    p[10] ^= 0x5a;
    sim.nodes[1].handle_packet(sim.now, &p);
    let c = sim.nodes[1].counters().clone();
    assert_eq!(c.rx_ip_csum_err, 1);
    assert_eq!((c.rcvd_pkts, c.rx_icrc_err), (0, 0));
    assert!(drain(&mut sim).is_empty(), "no ACK");
    assert_eq!(
        &sim.nodes[1].mr_bytes(mr.lkey).unwrap()[..8],
        &[0, 7, 14, 21, 28, 35, 42, 49]
    );
    // Fixed, it is executed.
    p[10] ^= 0x5a;
    sim.nodes[1].handle_packet(sim.now, &p);
    assert_eq!(&sim.nodes[1].mr_bytes(mr.lkey).unwrap()[..8], &[9; 8]);
}

#[test]
fn random_psns_far_ahead_earn_no_sequence_nak() {
    let (mut sim, _a, b, mr) = setup(66);
    let mut rng = Rng::new(5);
    let write = |sim: &Sim, psn: u32| {
        let ext = ExtRepr {
            reth: Some(RethRepr {
                va: mr.addr,
                rkey: mr.rkey,
                dma_len: 8,
            }),
            ..Default::default()
        };
        to_b(sim, b, Opcode::RC_RDMA_WRITE_ONLY, psn, ext, &[3; 8])
    };
    let mut good = RQ_PSN;
    let mut ahead = 0;
    for i in 0..2000 {
        // The real requester's packet, then a spoofed one at a random PSN.
        if i % 2 == 0 {
            let p = write(&sim, good);
            sim.nodes[1].handle_packet(sim.now, &p);
            good += 1;
        }
        let psn = (rng.next_u64() as u32) & 0xff_ffff;
        let d = Psn::new(psn).distance(Psn::new(good));
        if d > 4096 {
            ahead += 1;
            let p = write(&sim, psn);
            sim.nodes[1].handle_packet(sim.now, &p);
        }
    }
    assert!(ahead > 500);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::PsnSequenceError), 0, "{:?}", &out[..4]);
    assert_eq!(sim.nodes[1].counters().rx_psn_out_of_window, ahead);
    // A real gap (a lost packet, the next one in flight) is still NAKed once.
    let p = write(&sim, good + 1);
    sim.nodes[1].handle_packet(sim.now, &p);
    let p = write(&sim, good + 2);
    sim.nodes[1].handle_packet(sim.now, &p);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::PsnSequenceError), 1);
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Rts);
}

/// Another RC QP of node 1 in `b`'s PD, ready to receive from node 0's address.
fn other_qp(sim: &mut Sim, b: Side) -> Side {
    let side = create_in_pd(sim, 1, b.pd, &QpOpts::default());
    let g0 = sim.gid(0);
    bring_up(sim, side, g0, 0x77, &QpOpts::default(), 1);
    side
}

/// A 64-byte receive buffer in `on`'s PD, posted to its QP as receive `wr_id`.
fn post_recv_64(sim: &mut Sim, on: Side, wr_id: u64) -> MrInfo {
    let rbuf = sim.nodes[1].reg_mr(on.pd, 64, Access::LOCAL_WRITE).unwrap();
    let recv = RecvWr {
        wr_id,
        sg_list: vec![Sge {
            addr: rbuf.addr,
            length: 64,
            lkey: rbuf.lkey,
        }],
    };
    sim.nodes[1].post_recv(sim.now, on.qpn, &recv).unwrap();
    rbuf
}

#[test]
fn a_type2_window_answers_and_is_revoked_only_on_its_own_qp() {
    let (mut sim, _a, b, _mr) = setup(65);
    let access = Access::LOCAL_WRITE | Access::MW_BIND;
    let region = sim.nodes[1]
        .reg_mr_with(b.pd, vec![0; 256], None, access)
        .unwrap();
    let (mw, k) = sim.nodes[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    let key = next_rkey(k);
    let bind = SendWr::bind_mw(
        1,
        MwBind {
            mw,
            rkey: key,
            mr_lkey: region.lkey,
            addr: region.addr,
            len: 256,
            access: Access::REMOTE_WRITE,
        },
    );
    sim.nodes[1].post_send(sim.now, b.qpn, &bind).unwrap();
    assert!(drain(&mut sim).is_empty(), "a bind sends nothing");
    let mut wcs = Vec::new();
    sim.nodes[1].poll_cq(b.cq, &mut wcs, 8);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let write = |sim: &Sim, to: Side, data: &[u8]| {
        let ext = ExtRepr {
            reth: Some(RethRepr {
                va: region.addr,
                rkey: key,
                dma_len: data.len() as u32,
            }),
            ..Default::default()
        };
        to_b(sim, to, Opcode::RC_RDMA_WRITE_ONLY, RQ_PSN, ext, data)
    };

    // The window's key on another QP of the same PD: remote access error, nothing written.
    let c = other_qp(&mut sim, b);
    let w = write(&sim, c, &[9; 8]);
    sim.nodes[1].handle_packet(sim.now, &w);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::RemoteAccessError), 1, "{out:?}");
    assert_eq!(sim.nodes[1].mr_bytes(region.lkey).unwrap(), vec![0; 256]);

    // A SEND with invalidate of the window arriving on another QP: refused, counted.
    let d = other_qp(&mut sim, b);
    post_recv_64(&mut sim, d, 5);
    let inv = send_inv(&sim, d, key);
    sim.nodes[1].handle_packet(sim.now, &inv);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::InvalidRequest), 1, "{out:?}");
    assert_eq!(sim.nodes[1].counters().rx_invalidate_refused, 1);

    // The window still works on its own QP.
    let w = write(&sim, b, &[7; 8]);
    sim.nodes[1].handle_packet(sim.now, &w);
    let out = drain(&mut sim);
    assert_eq!(naks(&out, NakCode::RemoteAccessError), 0, "{out:?}");
    assert_eq!(&sim.nodes[1].mr_bytes(region.lkey).unwrap()[..8], &[7; 8]);
}

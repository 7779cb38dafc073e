//! Hostile input: garbage, truncation, wrong keys and addresses are counted and dropped.

use ferroce_transport::testing::{connect, forge, node_gid, refill_icrc, QpOpts, Rng, Sim};
use ferroce_wire::{BthRepr, DethRepr, ExtRepr, Opcode, Psn, RethRepr};

#[test]
fn garbage_and_truncated_datagrams_never_panic() {
    let mut sim = Sim::new(40, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let mut rng = Rng::new(7);
    let bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(0x100));
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: u64::MAX - 3,
            rkey: 0x1234,
            dma_len: 16,
        }),
        ..Default::default()
    };
    let good = forge(sim.gid(0), sim.gid(1), bth, ext, &[1; 16]);
    for i in 0..good.len() {
        sim.nodes[1].handle_packet(sim.now, &good[..i]);
    }
    for i in 0..2000 {
        let mut p = good.clone();
        let n = 1 + rng.below(4);
        for _ in 0..n {
            let at = rng.below(p.len() as u64) as usize;
            p[at] = rng.next_u64() as u8;
        }
        if i % 2 == 1 {
            // Valid checksums around the edits: they reach the parser and the QP.
            ferroce_wire::ipv4::fill_header_checksum(&mut p);
            refill_icrc(&mut p);
        }
        sim.nodes[1].handle_packet(sim.now, &p);
        let len = rng.below(200) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        sim.nodes[1].handle_packet(sim.now, &junk);
    }
    let c = sim.nodes[1].counters();
    assert!(c.rx_malformed > 0 && c.rx_icrc_err > 0, "{c:?}");
    // Edited packets with valid checksums reached the QP (out-of-range, wrong key or
    // wrong PSN), never memory.
    assert!(c.rcvd_pkts > 100, "{c:?}");
    let _ = a;
}

#[test]
fn a_write_past_the_end_of_the_address_space_is_refused() {
    // The bounds case on purpose, not by luck: a valid WRITE at the expected PSN whose
    // range wraps past u64::MAX, with the region's real key.
    let mut sim = Sim::new(42, 2, false);
    let (_a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let mr = sim.nodes[1]
        .reg_mr(
            b.pd,
            64,
            ferroce_transport::Access::LOCAL_WRITE | ferroce_transport::Access::REMOTE_WRITE,
        )
        .unwrap();
    let bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, b.qpn, Psn::new(0x100));
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: u64::MAX - 3,
            rkey: mr.rkey,
            dma_len: 16,
        }),
        ..Default::default()
    };
    let p = forge(sim.gid(0), sim.gid(1), bth, ext, &[1; 16]);
    sim.nodes[1].handle_packet(sim.now, &p);
    assert_eq!(sim.nodes[1].counters().rcvd_pkts, 1);
    assert_eq!(sim.nodes[1].counters().naks_sent, 1);
    assert!(sim.nodes[1]
        .mr_bytes(mr.lkey)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn wrong_qp_pkey_source_and_state_are_counted() {
    let mut sim = Sim::new(41, 3, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let send = |dst_qp: u32| BthRepr::new(Opcode::RC_SEND_ONLY, dst_qp, Psn::new(0x100));
    let (g0, g1, g2) = (sim.gid(0), sim.gid(1), sim.gid(2));
    sim.nodes[1].handle_packet(
        sim.now,
        &forge(g0, g1, send(0x9999), ExtRepr::default(), &[]),
    );
    assert_eq!(sim.nodes[1].counters().rx_unknown_qp, 1);
    let bad_pkey = BthRepr {
        pkey: 0x1234,
        ..send(b.qpn)
    };
    sim.nodes[1].handle_packet(sim.now, &forge(g0, g1, bad_pkey, ExtRepr::default(), &[]));
    assert_eq!(sim.nodes[1].counters().rx_bad_pkey, 1);
    // The right QP, from a third host: RC only talks to its peer.
    sim.nodes[1].handle_packet(
        sim.now,
        &forge(g2, g1, send(b.qpn), ExtRepr::default(), &[]),
    );
    assert_eq!(sim.nodes[1].counters().rx_bad_src, 1);
    // To an address that is not ours.
    sim.nodes[1].handle_packet(
        sim.now,
        &forge(g0, node_gid(9), send(b.qpn), ExtRepr::default(), &[]),
    );
    assert_eq!(sim.nodes[1].counters().rx_unknown_gid, 1);
    // A UD opcode to an RC QP.
    let ud = BthRepr::new(Opcode::UD_SEND_ONLY, b.qpn, Psn::new(0));
    let ext = ExtRepr {
        deth: Some(DethRepr { qkey: 1, src_qp: 5 }),
        ..Default::default()
    };
    sim.nodes[1].handle_packet(sim.now, &forge(g0, g1, ud, ext, &[]));
    assert_eq!(sim.nodes[1].counters().rx_bad_opcode, 1);
    // Nothing reached the QP, so nothing was answered.
    assert_eq!(sim.nodes[1].counters().rcvd_pkts, 0);
    assert!(sim.nodes[1]
        .poll_transmit(sim.now, &mut vec![0; 5000])
        .is_none());
    let _ = a;
}

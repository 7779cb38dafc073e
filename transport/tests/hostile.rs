//! Hostile input: garbage, truncation, wrong keys and addresses are counted and dropped.

use ferroce_transport::testing::{connect, forge, node_gid, QpOpts, Rng, Sim};
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
    for _ in 0..2000 {
        let mut p = good.clone();
        let n = 1 + rng.below(4);
        for _ in 0..n {
            let at = rng.below(p.len() as u64) as usize;
            p[at] = rng.next_u64() as u8;
        }
        sim.nodes[1].handle_packet(sim.now, &p);
        let len = rng.below(200) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        sim.nodes[1].handle_packet(sim.now, &junk);
    }
    let c = sim.nodes[1].counters();
    assert!(c.rx_malformed > 0 && c.rx_icrc_err > 0, "{c:?}");
    let _ = a;
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

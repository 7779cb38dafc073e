//! UD multicast: a SEND to a group's GID and the multicast QP reaches every QP attached to
//! the group, on every node, each through its own checks; nothing else reaches them.

mod common;

use core::net::{Ipv4Addr, Ipv6Addr};

use common::*;
use ferroce_transport::testing::{bring_up, create, drain_cq, forge, QpOpts, Side, Sim};
use ferroce_transport::{
    Error, QpType, UdDest, WcFlags, WcStatus, WrOpcode, MAX_QPS_PER_GROUP, MULTICAST_QPN,
};
use ferroce_wire::{BthRepr, DethRepr, ExtRepr, Opcode, Psn};

const QKEY: u32 = 0x0123_4567;

fn group(last: u8) -> Ipv6Addr {
    Ipv4Addr::new(239, 1, 2, last).to_ipv6_mapped()
}

fn ud_opts() -> QpOpts {
    QpOpts {
        qp_type: QpType::Ud,
        qkey: QKEY,
        ..Default::default()
    }
}

/// A UD QP on `node`, ready to send and receive.
fn ud(sim: &mut Sim, node: usize) -> Side {
    let o = ud_opts();
    let s = create(sim, node, &o);
    let g = sim.gid(node);
    bring_up(sim, s, g, 0, &o, 0);
    s
}

/// Posts one 64-byte receive on `s` (GRH area included) into a fresh region.
fn receive_into(sim: &mut Sim, s: Side) -> ferroce_transport::MrInfo {
    let m = mr(sim, s, vec![0; 64]);
    post_recv(sim, s, 1, vec![sge(&m, 0, 64)]);
    m
}

/// `from` sends `data` to group `g` with Q_Key `qkey`.
fn send_to_group(sim: &mut Sim, from: Side, g: Ipv6Addr, data: &[u8], qkey: u32) {
    let src = mr(sim, from, data.to_vec());
    let mut wr = send_wr(9, WrOpcode::Send, vec![sge(&src, 0, data.len() as u32)]);
    wr.ud = Some(UdDest::new(g, MULTICAST_QPN, qkey));
    sim.nodes[from.node]
        .post_send(sim.now, from.qpn, &wr)
        .unwrap();
    assert_ok(&wait_wcs(sim, from, 1));
    sim.run_idle(std::time::Duration::from_millis(1));
}

#[test]
fn a_send_to_a_group_reaches_every_attached_qp_and_no_other() {
    let mut sim = Sim::new(60, 3, false);
    let a = ud(&mut sim, 0);
    let (b1, b2) = (ud(&mut sim, 1), ud(&mut sim, 1));
    let (c, c_other) = (ud(&mut sim, 2), ud(&mut sim, 2));
    let g = group(1);
    for s in [b1, b2, c] {
        sim.nodes[s.node].attach_mcast(s.qpn, g).unwrap();
    }
    // Attached to another group only.
    sim.nodes[2].attach_mcast(c_other.qpn, group(2)).unwrap();
    let bufs: Vec<_> = [b1, b2, c, c_other]
        .into_iter()
        .map(|s| receive_into(&mut sim, s))
        .collect();
    send_to_group(&mut sim, a, g, b"to the group", QKEY);
    for (s, m) in [b1, b2, c].into_iter().zip(&bufs) {
        let wcs = drain_cq(&mut sim, s);
        assert_eq!(wcs.len(), 1, "QP {:#x} got {wcs:?}", s.qpn);
        let wc = wcs[0];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.qp_num, s.qpn, "each copy completes on its own QP");
        assert_eq!((wc.src_qp, wc.src_gid), (a.qpn, Some(sim.gid(0))));
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        let got = sim.nodes[s.node].mr_bytes(m.lkey).unwrap();
        assert_eq!(&got[40..52], b"to the group");
        // The GRH area's IPv4 header names the group as its destination.
        assert_eq!(&got[36..40], &g.octets()[12..]);
    }
    assert!(drain_cq(&mut sim, c_other).is_empty());
    assert_eq!(sim.nodes[1].counters().mcast_rcv_packets, 1);
    assert_eq!(sim.nodes[1].counters().rcvd_pkts, 2);
    assert_eq!(sim.nodes[2].counters().mcast_rcv_packets, 1);

    // Detached, b2 gets nothing more; a wrong Q_Key is dropped per QP.
    sim.nodes[1].detach_mcast(b2.qpn, g).unwrap();
    let _ = receive_into(&mut sim, b1);
    let _ = receive_into(&mut sim, b2);
    let _ = receive_into(&mut sim, c);
    send_to_group(&mut sim, a, g, b"again", QKEY);
    assert_eq!(drain_cq(&mut sim, b1).len(), 1);
    assert!(drain_cq(&mut sim, b2).is_empty(), "detached");
    assert_eq!(drain_cq(&mut sim, c).len(), 1);
    send_to_group(&mut sim, a, g, b"bad key", QKEY ^ 1);
    assert!(drain_cq(&mut sim, b1).is_empty());
    assert_eq!(sim.nodes[1].counters().rx_bad_qkey, 1);
}

#[test]
fn only_ud_qps_join_only_multicast_groups_and_destroy_detaches() {
    let mut sim = Sim::new(61, 2, false);
    let u = ud(&mut sim, 0);
    let rc = create(&mut sim, 0, &QpOpts::default());
    let ep = &mut sim.nodes[0];
    assert!(matches!(
        ep.attach_mcast(rc.qpn, group(1)),
        Err(Error::Unsupported(_))
    ));
    assert!(ep.attach_mcast(u.qpn, sim_unicast()).is_err());
    assert_eq!(
        ep.attach_mcast(0x77_7777, group(1)),
        Err(Error::InvalidQp(0x77_7777))
    );
    assert!(ep.detach_mcast(u.qpn, group(1)).is_err(), "never attached");
    ep.attach_mcast(u.qpn, group(1)).unwrap();
    ep.attach_mcast(u.qpn, group(3)).unwrap();
    assert_eq!(ep.mcast_groups(), vec![group(1), group(3)]);
    ep.destroy_qp(u.qpn).unwrap();
    assert!(
        ep.mcast_groups().is_empty(),
        "a destroyed QP leaves its groups"
    );
}

fn sim_unicast() -> Ipv6Addr {
    Ipv4Addr::new(10, 0, 0, 9).to_ipv6_mapped()
}

#[test]
fn a_group_holds_a_bounded_number_of_qps() {
    let mut sim = Sim::new(62, 1, false);
    let qps: Vec<Side> = (0..=MAX_QPS_PER_GROUP).map(|_| ud(&mut sim, 0)).collect();
    for s in &qps[..MAX_QPS_PER_GROUP] {
        sim.nodes[0].attach_mcast(s.qpn, group(1)).unwrap();
    }
    assert_eq!(
        sim.nodes[0].attach_mcast(qps[MAX_QPS_PER_GROUP].qpn, group(1)),
        Err(Error::OutOfResources)
    );
}

#[test]
fn forged_multicast_packets_are_counted_and_dropped() {
    let mut sim = Sim::new(63, 2, false);
    let b = ud(&mut sim, 1);
    let g = group(1);
    sim.nodes[1].attach_mcast(b.qpn, g).unwrap();
    let _ = receive_into(&mut sim, b);
    let from = sim.gid(0);
    let deth = ExtRepr {
        deth: Some(DethRepr {
            qkey: QKEY,
            src_qp: 5,
        }),
        ..Default::default()
    };
    let ud_send = |qpn| BthRepr::new(Opcode::UD_SEND_ONLY, qpn, Psn::new(0));
    let ep = &mut sim.nodes[1];
    // To the group but to a QP's own number: a group's packets name the multicast QP.
    ep.handle_packet(sim.now, &forge(from, g, ud_send(b.qpn), deth, b"x"));
    // To this node's own address but to the multicast QP.
    let own = ep.config().local_gids[0];
    ep.handle_packet(
        sim.now,
        &forge(from, own, ud_send(MULTICAST_QPN), deth, b"x"),
    );
    assert_eq!(ep.counters().rx_bad_mcast, 2);
    // An RC opcode to the group.
    let rc = BthRepr::new(Opcode::RC_SEND_ONLY, MULTICAST_QPN, Psn::new(0));
    ep.handle_packet(sim.now, &forge(from, g, rc, ExtRepr::default(), b"x"));
    assert_eq!(ep.counters().rx_bad_opcode, 1);
    // A group nobody here joined.
    ep.handle_packet(
        sim.now,
        &forge(from, group(7), ud_send(MULTICAST_QPN), deth, b"x"),
    );
    assert_eq!(ep.counters().rx_mcast_no_group, 1);
    assert_eq!(ep.counters().rcvd_pkts, 0);
    assert!(drain_cq(&mut sim, b).is_empty());
    // The genuine article still gets in.
    let ep = &mut sim.nodes[1];
    ep.handle_packet(sim.now, &forge(from, g, ud_send(MULTICAST_QPN), deth, b"x"));
    assert_eq!(drain_cq(&mut sim, b).len(), 1);
}

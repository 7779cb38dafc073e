//! DCQCN hooks through the endpoint API: ECN bits and DSCP, the notification point (CNPs
//! on CE), the reaction point (CNPs drive the pacer) and pacing itself.

mod common;

use common::*;
use ferroce_transport::testing::{
    bring_up, connect, create, ecn_of, forge, parse, set_ce, QpOpts, Side, Sim,
};
use ferroce_transport::{
    AddressVector, DcqcnConfig, Endpoint, Instant, Mtu, QpAttr, QpAttrMask as M, QpState, QpType,
    UdDest, WrOpcode, ECN_ECT0, ECN_ECT1, MAX_DATAGRAM_LEN,
};
use ferroce_wire::{cnp, BthRepr, CnpRepr, Datagram, ExtRepr, IbRepr, Opcode};

const US: u64 = 1000;

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn dcqcn_on() -> DcqcnConfig {
    DcqcnConfig {
        enabled: true,
        ..DcqcnConfig::default()
    }
}

/// An RC pair whose address vectors carry `tc` as traffic class.
fn rc_pair_tc(sim: &mut Sim, tc: u8) -> (Side, Side) {
    let o = QpOpts::default();
    let a = create(sim, 0, &o);
    let b = create(sim, 1, &o);
    for (s, peer, idx) in [(a, b, 0usize), (b, a, 1)] {
        let ep = &mut sim.nodes[s.node];
        let init = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: o.access,
            ..QpAttr::default()
        };
        ep.modify_qp(
            sim.now,
            s.qpn,
            &init,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )
        .unwrap();
        let peer_gid = ep_gid(sim, peer.node);
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: o.mtu,
            dest_qp_num: peer.qpn,
            rq_psn: o.psn[1 - idx],
            av: AddressVector {
                traffic_class: tc,
                ..AddressVector::new(peer_gid)
            },
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            ..QpAttr::default()
        };
        let ep = &mut sim.nodes[s.node];
        ep.modify_qp(
            sim.now,
            s.qpn,
            &rtr,
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
        )
        .unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: o.psn[idx],
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        ep.modify_qp(
            sim.now,
            s.qpn,
            &rts,
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
        )
        .unwrap();
    }
    (a, b)
}

fn ep_gid(sim: &Sim, node: usize) -> std::net::Ipv6Addr {
    sim.gid(node)
}

/// DSCP and ECN of an IPv4 or IPv6 datagram.
fn dscp_ecn(pkt: &[u8]) -> (u8, u8) {
    let tos = if pkt[0] >> 4 == 4 {
        pkt[1]
    } else {
        (pkt[0] << 4) | (pkt[1] >> 4)
    };
    (tos >> 2, tos & 3)
}

/// Every datagram each node sent while a WRITE of `len` bytes ran from node 0 to 1.
fn write_and_capture(sim: &mut Sim, a: Side, b: Side, len: usize) -> Vec<(usize, Vec<u8>)> {
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let s2 = seen.clone();
    sim.set_tap(Box::new(move |from, _, p| {
        s2.borrow_mut().push((from, p.clone()));
        true
    }));
    let src = mr(sim, a, pattern(1, len));
    let dst = mr(sim, b, vec![0; len]);
    let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, len as u32)]);
    wr.remote_addr = dst.addr;
    wr.rkey = dst.rkey;
    sim.nodes[a.node].post_send(sim.now, a.qpn, &wr).unwrap();
    assert_ok(&wait_wcs(sim, a, 1));
    sim.clear_tap();
    assert_eq!(
        sim.nodes[b.node].mr_bytes(dst.lkey).as_deref(),
        Some(&pattern(1, len)[..])
    );
    let v = seen.borrow().clone();
    v
}

#[test]
fn cc_qps_send_ect0_with_the_av_dscp_in_both_ip_versions() {
    for ipv6 in [false, true] {
        let mut sim = Sim::new(1, 2, ipv6);
        for n in 0..2 {
            sim.nodes[n].set_dcqcn(dcqcn_on()).unwrap();
        }
        // DSCP 26 (AF31) and ECN bits 01 in the AV: the ECN bits are congestion control's.
        let (a, b) = rc_pair_tc(&mut sim, (26 << 2) | 1);
        let pkts = write_and_capture(&mut sim, a, b, 5000);
        assert!(pkts.iter().any(|(f, _)| *f == 0) && pkts.iter().any(|(f, _)| *f == 1));
        for (from, p) in &pkts {
            assert_eq!(dscp_ecn(p), (26, ECN_ECT0), "from node {from}, ipv6 {ipv6}");
            assert!(Datagram::parse(p).unwrap().icrc_ok());
        }
    }
}

#[test]
fn ect1_is_configurable_and_transmit_reports_the_ecn_bits() {
    let mut ep_cfg = dcqcn_on();
    ep_cfg.ecn = ECN_ECT1;
    let mut sim = Sim::new(2, 2, false);
    sim.nodes[0].set_dcqcn(ep_cfg).unwrap();
    let (a, _b) = rc_pair_tc(&mut sim, 7 << 2);
    let src = mr(&mut sim, a, pattern(2, 64));
    let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, 64)]);
    wr.remote_addr = 0;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let t = sim.nodes[0].poll_transmit(at(0), &mut buf).unwrap();
    assert_eq!(t.ecn, ECN_ECT1);
    assert_eq!(dscp_ecn(&buf[..t.len]), (7, ECN_ECT1));
}

#[test]
fn without_cc_the_av_traffic_class_goes_out_unchanged() {
    for ipv6 in [false, true] {
        let mut sim = Sim::new(3, 2, ipv6);
        let (a, b) = rc_pair_tc(&mut sim, (26 << 2) | 1);
        for (_, p) in write_and_capture(&mut sim, a, b, 3000) {
            assert_eq!(dscp_ecn(&p), (26, 1), "ipv6 {ipv6}");
        }
    }
}

#[test]
fn per_qp_setting_overrides_the_endpoint() {
    // Endpoint on, QP off: the plain traffic class.
    let mut sim = Sim::new(4, 2, false);
    sim.nodes[0].set_dcqcn(dcqcn_on()).unwrap();
    let (a, b) = rc_pair_tc(&mut sim, 10 << 2);
    sim.nodes[0].set_qp_dcqcn(a.qpn, Some(false)).unwrap();
    assert_eq!(sim.nodes[0].qp_rate(a.qpn, at(0)), None);
    for (from, p) in write_and_capture(&mut sim, a, b, 3000) {
        if from == 0 {
            assert_eq!(dscp_ecn(&p), (10, 0));
        }
    }
    // Endpoint off, QP on: ECT(0).
    let mut sim = Sim::new(5, 2, false);
    let (a, b) = rc_pair_tc(&mut sim, 10 << 2);
    sim.nodes[0].set_qp_dcqcn(a.qpn, Some(true)).unwrap();
    assert!(sim.nodes[0].qp_rate(a.qpn, at(0)).is_some());
    for (from, p) in write_and_capture(&mut sim, a, b, 3000) {
        assert_eq!(dscp_ecn(&p), (10, if from == 0 { ECN_ECT0 } else { 0 }));
    }
    assert!(sim.nodes[0].set_qp_dcqcn(0x999, Some(true)).is_err());
    let bad = DcqcnConfig {
        ecn: 3,
        ..dcqcn_on()
    };
    assert!(sim.nodes[0].set_dcqcn(bad).is_err());
}

/// Checks one datagram is a CNP as RoCE NICs send it, from `src` to `dst` for `qpn`.
#[track_caller]
fn assert_cnp(p: &[u8], src: std::net::Ipv6Addr, dst: std::net::Ipv6Addr, qpn: u32) {
    let d = Datagram::parse(p).expect("parses");
    d.verify_icrc().expect("valid ICRC");
    assert_eq!((d.src_gid(), d.dst_gid()), (src, dst));
    assert_eq!(dscp_ecn(p), (48, 0), "cnp_dscp, not ECN-capable");
    let ib = IbRepr::parse(&d.ib()).unwrap();
    assert_eq!(ib.bth.opcode, Opcode::CNP);
    assert_eq!(ib.bth.opcode.value(), 0x81);
    assert_eq!(ib.bth.dest_qp, qpn);
    assert!(ib.bth.becn && !ib.bth.fecn);
    assert_eq!(ib.bth.pkey, BthRepr::DEFAULT_PKEY);
    assert_eq!(ib.ext.cnp, Some(CnpRepr { reserved: [0; 16] }));
    assert!(ib.payload.is_empty());
    // IP, UDP, BTH, 16 reserved bytes, ICRC.
    let ip = if src.to_ipv4_mapped().is_some() {
        20
    } else {
        40
    };
    assert_eq!(p.len(), ip + 8 + 12 + 16 + 4);
}

fn is_cnp(p: &[u8]) -> bool {
    parse(p).is_some_and(|r| r.bth.opcode == Opcode::CNP)
}

/// Drains `ep` at `now`, returning the CNPs and the other datagrams.
fn drain(ep: &mut Endpoint, now: Instant) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let (mut cnps, mut other) = (Vec::new(), Vec::new());
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        let p = buf[..t.len].to_vec();
        if is_cnp(&p) {
            assert_eq!(t.ecn, 0);
            cnps.push(p);
        } else {
            other.push(p);
        }
    }
    (cnps, other)
}

#[test]
fn ce_marked_requests_make_one_cnp_per_interval_to_the_sender_qp() {
    for ipv6 in [false, true] {
        let mut sim = Sim::new(6, 2, ipv6);
        sim.nodes[1].set_dcqcn(dcqcn_on()).unwrap(); // min_time_between_cnps 4 µs
        let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
        let src = mr(&mut sim, a, pattern(3, 8 * 1024));
        let dst = mr(&mut sim, b, vec![0; 8 * 1024]);
        let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, 8 * 1024)]);
        wr.remote_addr = dst.addr;
        wr.rkey = dst.rkey;
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        // Node 0 has no congestion control: all eight packets at once.
        let (_, mut reqs) = drain(&mut sim.nodes[0], at(0));
        assert_eq!(reqs.len(), 8);
        for p in &mut reqs {
            assert_eq!(ecn_of(p), 0);
            set_ce(p);
            assert_eq!(ecn_of(p), 3);
            assert!(Datagram::parse(p).unwrap().icrc_ok(), "the ICRC masks ECN");
        }
        // Marked packets at 0, 1, 3.999, 4, 5, 8.5, 9 and 20 µs: CNPs at 0, 4, 8.5, 20.
        let times = [
            0,
            US,
            4 * US - 1,
            4 * US,
            5 * US,
            8 * US + 500,
            9 * US,
            20 * US,
        ];
        let mut cnp_times = Vec::new();
        let (ga, gb) = (sim.gid(0), sim.gid(1));
        for (p, &t) in reqs.iter().zip(&times) {
            sim.nodes[1].handle_packet(at(t), p);
            let (cnps, _) = drain(&mut sim.nodes[1], at(t));
            for c in &cnps {
                assert_cnp(c, gb, ga, a.qpn);
                cnp_times.push(t);
            }
        }
        assert_eq!(cnp_times, vec![0, 4 * US, 8 * US + 500, 20 * US]);
        let c = sim.nodes[1].counters();
        assert_eq!(c.np_ecn_marked_roce_packets, 8);
        assert_eq!(c.np_cnp_sent, 4);
        assert_eq!(c.rx_icrc_err, 0);
        // The data itself was placed: marking is not an error.
        assert_eq!(
            sim.nodes[1].mr_bytes(dst.lkey).as_deref(),
            Some(&pattern(3, 8 * 1024)[..])
        );
    }
}

#[test]
fn zero_interval_sends_a_cnp_for_every_marked_packet() {
    let mut sim = Sim::new(7, 2, false);
    let cfg = DcqcnConfig {
        min_time_between_cnps: 0,
        ..dcqcn_on()
    };
    sim.nodes[1].set_dcqcn(cfg).unwrap();
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(4, 4096));
    let dst = mr(&mut sim, b, vec![0; 4096]);
    let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, 4096)]);
    wr.remote_addr = dst.addr;
    wr.rkey = dst.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let (_, mut reqs) = drain(&mut sim.nodes[0], at(0));
    for p in &mut reqs {
        set_ce(p);
        sim.nodes[1].handle_packet(at(0), p);
    }
    let (cnps, _) = drain(&mut sim.nodes[1], at(0));
    assert_eq!(cnps.len(), 4);
    assert_eq!(sim.nodes[1].counters().np_cnp_sent, 4);
}

#[test]
fn marked_responses_make_the_requester_send_a_cnp_to_the_responder_qp() {
    let mut sim = Sim::new(8, 2, false);
    sim.nodes[0].set_dcqcn(dcqcn_on()).unwrap();
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let dst = mr(&mut sim, a, vec![0; 2048]);
    let src = mr(&mut sim, b, pattern(5, 2048));
    let mut wr = send_wr(1, WrOpcode::RdmaRead, vec![sge(&dst, 0, 2048)]);
    wr.remote_addr = src.addr;
    wr.rkey = src.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let (_, reqs) = drain(&mut sim.nodes[0], at(0));
    assert_eq!(reqs.len(), 1);
    sim.nodes[1].handle_packet(at(US), &reqs[0]);
    let (_, mut resps) = drain(&mut sim.nodes[1], at(US));
    assert_eq!(resps.len(), 2);
    for p in &mut resps {
        set_ce(p);
        sim.nodes[0].handle_packet(at(2 * US), p);
    }
    let (cnps, _) = drain(&mut sim.nodes[0], at(2 * US));
    assert_eq!(
        cnps.len(),
        1,
        "two marked responses within the interval: one CNP"
    );
    assert_cnp(&cnps[0], sim.gid(0), sim.gid(1), b.qpn);
    assert_eq!(sim.nodes[0].counters().np_ecn_marked_roce_packets, 2);
    assert_eq!(
        sim.nodes[0].mr_bytes(dst.lkey).as_deref(),
        Some(&pattern(5, 2048)[..])
    );
}

#[test]
fn ud_cnp_goes_to_the_deth_source_qp_and_address() {
    let mut sim = Sim::new(9, 3, false);
    let o = QpOpts {
        qp_type: QpType::Ud,
        ..Default::default()
    };
    sim.nodes[1].set_dcqcn(dcqcn_on()).unwrap();
    let a = create(&mut sim, 0, &o);
    let b = create(&mut sim, 1, &o);
    let c = create(&mut sim, 2, &o);
    let (ga, gb, gc) = (sim.gid(0), sim.gid(1), sim.gid(2));
    bring_up(&mut sim, a, gb, b.qpn, &o, 0);
    bring_up(&mut sim, b, ga, a.qpn, &o, 1);
    bring_up(&mut sim, c, gb, b.qpn, &o, 0);
    for k in 0..2 {
        let r = mr(&mut sim, b, vec![0; 200]);
        post_recv(&mut sim, b, k, vec![sge(&r, 0, 200)]);
    }
    let mut marked = Vec::new();
    for s in [a, c] {
        let m = mr(&mut sim, s, pattern(6, 100));
        let mut wr = send_wr(1, WrOpcode::Send, vec![sge(&m, 0, 100)]);
        wr.ud = Some(UdDest::new(gb, b.qpn, o.qkey));
        sim.nodes[s.node].post_send(sim.now, s.qpn, &wr).unwrap();
        let (_, mut p) = drain(&mut sim.nodes[s.node], at(0));
        set_ce(&mut p[0]);
        marked.push(p.remove(0));
    }
    // Per QP: the second sender's packet 5 µs later gets its own CNP.
    sim.nodes[1].handle_packet(at(0), &marked[0]);
    let (cnps, _) = drain(&mut sim.nodes[1], at(0));
    assert_eq!(cnps.len(), 1);
    assert_cnp(&cnps[0], gb, ga, a.qpn);
    sim.nodes[1].handle_packet(at(5 * US), &marked[1]);
    let (cnps, _) = drain(&mut sim.nodes[1], at(5 * US));
    assert_eq!(cnps.len(), 1);
    assert_cnp(&cnps[0], gb, gc, c.qpn);
}

#[test]
fn without_cc_marked_packets_are_counted_and_answered_by_no_cnp() {
    let mut sim = Sim::new(10, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(7, 3000));
    let dst = mr(&mut sim, b, vec![0; 3000]);
    let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, 3000)]);
    wr.remote_addr = dst.addr;
    wr.rkey = dst.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let (_, mut reqs) = drain(&mut sim.nodes[0], at(0));
    for (k, p) in reqs.iter_mut().enumerate() {
        set_ce(p);
        sim.nodes[1].handle_packet(at(k as u64 * 10 * US), p);
    }
    let (cnps, other) = drain(&mut sim.nodes[1], at(100 * US));
    assert!(cnps.is_empty());
    assert_eq!(other.len(), 1, "the ACK");
    let c = sim.nodes[1].counters();
    assert_eq!((c.np_ecn_marked_roce_packets, c.np_cnp_sent), (3, 0));
}

fn forge_cnp(from: std::net::Ipv6Addr, to: std::net::Ipv6Addr, qpn: u32) -> Vec<u8> {
    let ext = ExtRepr {
        cnp: Some(CnpRepr::default()),
        ..Default::default()
    };
    forge(from, to, cnp::bth(qpn), ext, &[])
}

#[test]
fn cnps_drive_the_reaction_point_of_the_right_qp_only() {
    let mut sim = Sim::new(11, 3, false);
    sim.nodes[0].set_dcqcn(dcqcn_on()).unwrap();
    let (a, _b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let (ga, gb, gc) = (sim.gid(0), sim.gid(1), sim.gid(2));
    let ep = &mut sim.nodes[0];
    let s = ep.qp_rate(a.qpn, at(0)).unwrap();
    assert!(!s.limited);
    assert_eq!(s.current_rate, 10_000.0);
    // From the peer: handled, the rate halves (α = 1023/1024).
    ep.handle_packet(at(10 * US), &forge_cnp(gb, ga, a.qpn));
    let s = ep.qp_rate(a.qpn, at(10 * US)).unwrap();
    assert!(s.limited);
    assert_eq!(s.cnps, 1);
    let want = 10_000.0 * (1.0 - 1023.0 / 2048.0);
    assert!((s.current_rate - want).abs() < 1e-6, "{s:?}");
    // From a third host, to an unknown QP, to a QP without congestion control: ignored.
    ep.handle_packet(at(20 * US), &forge_cnp(gc, ga, a.qpn));
    ep.handle_packet(at(20 * US), &forge_cnp(gb, ga, 0x777));
    let other = create(&mut sim, 0, &QpOpts::default());
    sim.nodes[0].set_qp_dcqcn(other.qpn, Some(false)).unwrap();
    sim.nodes[0].handle_packet(at(20 * US), &forge_cnp(gb, ga, other.qpn));
    let c = sim.nodes[0].counters();
    assert_eq!(
        (c.rx_cnp, c.rp_cnp_handled, c.rp_cnp_ignored),
        (4, 1, 3),
        "{c:?}"
    );
    assert_eq!(sim.nodes[0].qp_rate(a.qpn, at(20 * US)).unwrap().cnps, 1);
    // A CNP with a bad ICRC is not a CNP at all.
    let mut bad = forge_cnp(gb, ga, a.qpn);
    let n = bad.len();
    bad[n - 1] ^= 1;
    sim.nodes[0].handle_packet(at(30 * US), &bad);
    assert_eq!(sim.nodes[0].counters().rx_cnp, 4);
    assert_eq!(sim.nodes[0].counters().rx_icrc_err, 1);
}

/// Runs node 0 and node 1 against each other by hand, delivering instantly; returns
/// (time, bytes) of every datagram node 0 sent.
fn run_paced(sim: &mut Sim, until: u64) -> Vec<(u64, usize, bool)> {
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let mut sent = Vec::new();
    let mut now = 0;
    while now <= until {
        let mut progress = true;
        while progress {
            progress = false;
            while let Some(t) = sim.nodes[0].poll_transmit(at(now), &mut buf) {
                let p = buf[..t.len].to_vec();
                sent.push((now, t.len, is_cnp(&p)));
                sim.nodes[1].handle_packet(at(now), &p);
                progress = true;
            }
            while let Some(t) = sim.nodes[1].poll_transmit(at(now), &mut buf) {
                let p = buf[..t.len].to_vec();
                sim.nodes[0].handle_packet(at(now), &p);
                progress = true;
            }
        }
        let next = [sim.nodes[0].poll_timeout(), sim.nodes[1].poll_timeout()]
            .into_iter()
            .flatten()
            .map(Instant::as_nanos)
            .filter(|&t| t > now)
            .min();
        match next {
            Some(t) => now = t,
            None => break,
        }
        for n in 0..2 {
            if sim.nodes[n].poll_timeout().is_some_and(|t| t <= at(now)) {
                sim.nodes[n].handle_timeout(at(now));
            }
        }
    }
    sent
}

#[test]
fn the_pacer_spaces_requests_and_poll_timeout_names_the_send_time() {
    let mut sim = Sim::new(12, 2, false);
    let cfg = DcqcnConfig {
        line_rate: 1_000,
        pacing_burst_bytes: 0,
        ..dcqcn_on()
    };
    sim.nodes[0].set_dcqcn(cfg).unwrap();
    let o = QpOpts {
        mtu: Mtu::Mtu1024,
        timeout: 18,
        ..QpOpts::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let len = 64 * 1024;
    let src = mr(&mut sim, a, pattern(8, len));
    let dst = mr(&mut sim, b, vec![0; len]);
    let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, len as u32)]);
    wr.remote_addr = dst.addr;
    wr.rkey = dst.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    // One packet at 0; nothing more before its time, which poll_timeout names.
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let first = sim.nodes[0].poll_transmit(at(0), &mut buf).unwrap();
    sim.nodes[1].handle_packet(at(0), &buf[..first.len]);
    // 1000 Mb/s: 8 ns per byte.
    let gap = 8 * first.len as u64;
    assert_eq!(sim.nodes[0].poll_timeout(), Some(at(gap)));
    assert!(sim.nodes[0].poll_transmit(at(gap - 1), &mut buf).is_none());
    assert_eq!(sim.nodes[0].poll_timeout(), Some(at(gap)));
    let second = sim.nodes[0].poll_transmit(at(gap), &mut buf).unwrap();
    sim.nodes[1].handle_packet(at(gap), &buf[..second.len]);
    // The rest, driven by poll_timeout: each packet leaves exactly when the last one's
    // bytes at 1000 Mb/s have passed.
    let mut sent = vec![(0, first.len, false), (gap, second.len, false)];
    sent.extend(run_paced(&mut sim, 10_000 * US));
    let data: Vec<_> = sent.iter().filter(|s| !s.2).collect();
    assert_eq!(data.len(), 64);
    for w in data.windows(2) {
        assert_eq!(w[1].0 - w[0].0, 8 * w[0].1 as u64, "{w:?}");
    }
    assert_eq!(
        sim.nodes[1].mr_bytes(dst.lkey).as_deref(),
        Some(&pattern(8, len)[..])
    );
    assert_eq!(sim.nodes[0].counters().retransmitted_pkts, 0);
    // Node 1 has no congestion control: its ACKs are not paced, and node 0 does not
    // pace what it receives.
    assert!(sim.nodes[1].qp_rate(b.qpn, at(0)).is_none());
}

#[test]
fn read_responses_are_paced_acks_are_not() {
    let mut sim = Sim::new(13, 2, false);
    let cfg = DcqcnConfig {
        line_rate: 2_000,
        pacing_burst_bytes: 0,
        ..dcqcn_on()
    };
    sim.nodes[1].set_dcqcn(cfg).unwrap();
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let len = 16 * 1024;
    let dst = mr(&mut sim, a, vec![0; len]);
    let src = mr(&mut sim, b, pattern(9, len));
    let mut wr = send_wr(1, WrOpcode::RdmaRead, vec![sge(&dst, 0, len as u32)]);
    wr.remote_addr = src.addr;
    wr.rkey = src.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    // Also a WRITE from node 0: node 1 ACKs it while its READ responses are paced.
    let wsrc = mr(&mut sim, a, pattern(10, 1000));
    let wdst = mr(&mut sim, b, vec![0; 1000]);
    let mut w = send_wr(2, WrOpcode::RdmaWrite, vec![sge(&wsrc, 0, 1000)]);
    w.remote_addr = wdst.addr;
    w.rkey = wdst.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let mut resp_times = Vec::new();
    let mut now = 0;
    for _ in 0..10_000 {
        while let Some(t) = sim.nodes[0].poll_transmit(at(now), &mut buf) {
            sim.nodes[1].handle_packet(at(now), &buf[..t.len]);
        }
        while let Some(t) = sim.nodes[1].poll_transmit(at(now), &mut buf) {
            let r = parse(&buf[..t.len]).unwrap();
            resp_times.push((now, t.len, r.bth.opcode));
            sim.nodes[0].handle_packet(at(now), &buf[..t.len]);
        }
        match sim.nodes[1].poll_timeout() {
            Some(t) if t.as_nanos() > now => now = t.as_nanos(),
            _ => break,
        }
    }
    let reads: Vec<_> = resp_times
        .iter()
        .filter(|r| r.2.operation() == ferroce_wire::Operation::RdmaReadResponse)
        .collect();
    assert_eq!(reads.len(), 16);
    for w in reads.windows(2) {
        // 2000 Mb/s: 4 ns per byte.
        assert_eq!(w[1].0 - w[0].0, 4 * w[0].1 as u64);
    }
    assert_eq!(
        sim.nodes[0].mr_bytes(dst.lkey).as_deref(),
        Some(&pattern(9, len)[..])
    );
    assert_eq!(
        sim.nodes[1].mr_bytes(wdst.lkey).as_deref(),
        Some(&pattern(10, 1000)[..])
    );
}

#[test]
fn a_paced_transfer_takes_the_time_its_rate_allows() {
    for (rate, line) in [(500u64, 500u32), (4_000, 4_000)] {
        let mut sim = Sim::new(14, 2, false);
        let cfg = DcqcnConfig {
            line_rate: line,
            ..dcqcn_on()
        };
        sim.nodes[0].set_dcqcn(cfg).unwrap();
        let o = QpOpts {
            mtu: Mtu::Mtu4096,
            timeout: 18,
            ..QpOpts::default()
        };
        let (a, b) = connect(&mut sim, 0, 1, &o);
        let len = 1 << 20;
        let src = mr(&mut sim, a, pattern(11, len));
        let dst = mr(&mut sim, b, vec![0; len]);
        let mut wr = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, len as u32)]);
        wr.remote_addr = dst.addr;
        wr.rkey = dst.rkey;
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        assert_ok(&wait_wcs(&mut sim, a, 1));
        let took = sim.now.as_nanos();
        // 256 packets of 4096 bytes plus IPv4, UDP, BTH and ICRC (and a RETH on the
        // first): the last one leaves when 255 have passed, and is ACKed 4 µs later.
        let bits = 8 * (255 * (4096 + 20 + 8 + 12 + 4) + 16);
        let ideal = bits * 1000 / rate + 4 * US;
        assert!(
            took >= ideal && took <= ideal + ideal / 100,
            "{rate} Mb/s: {took} ns, ideal {ideal} ns"
        );
        assert_eq!(
            sim.nodes[1].mr_bytes(dst.lkey).as_deref(),
            Some(&pattern(11, len)[..])
        );
    }
}

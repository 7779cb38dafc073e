//! The order in which an endpoint's QPs send: round-robin, in turns of up to 64
//! datagrams. The link joins consecutive packets of one QP into a super-packet; packets
//! of busy QPs taken one each in alternation never are consecutive, and each then
//! crossed the kernel alone (64 KiB WRITEs on two QPs: 5.6-6.8 Gb/s, against 14.7-15.2
//! on one, with `ferroce perf write-bw -q 2` on a veth).

mod common;

use common::*;
use ferroce_transport::testing::{connect, parse, QpOpts, Sim};
use ferroce_transport::{WrOpcode, MAX_DATAGRAM_LEN};

/// Datagrams one QP sends in a row while another has packets waiting.
const TURN: usize = 64;

#[test]
fn busy_qps_take_turns_of_64_datagrams_and_every_message_lands() {
    let mut sim = Sim::new(11, 2, false);
    let o = QpOpts::default();
    let len = 256 * 1024; // 256 packets each at the default MTU of 1024
    let pairs: Vec<_> = (0..3).map(|_| connect(&mut sim, 0, 1, &o)).collect();
    let mut dsts = Vec::new();
    for (i, &(a, b)) in pairs.iter().enumerate() {
        let data = pattern(i as u64, len);
        let src = mr(&mut sim, a, data.clone());
        let dst = mr(&mut sim, b, vec![0; len]);
        let wr = rdma_wr(
            i as u64,
            WrOpcode::RdmaWrite,
            sge(&src, 0, len as u32),
            dst.addr,
            dst.rkey,
        );
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        dsts.push((dst, data));
    }

    // What node 0 sends first, in order: the destination QP of each datagram.
    let mut buf = vec![0u8; MAX_DATAGRAM_LEN];
    let mut order = Vec::new();
    let mut sent = Vec::new();
    while order.len() < 6 * TURN {
        let t = sim.nodes[0]
            .poll_transmit(sim.now, &mut buf)
            .expect("three long WRITEs have packets to send");
        let pkt = &buf[..t.len];
        order.push(parse(pkt).expect("a valid datagram").bth.dest_qp);
        sent.push(pkt.to_vec());
    }
    // Runs of one destination, in order.
    let mut runs: Vec<(u32, usize)> = Vec::new();
    for &q in &order {
        match runs.last_mut() {
            Some((last, n)) if *last == q => *n += 1,
            _ => runs.push((q, 1)),
        }
    }
    assert_eq!(
        runs.iter().map(|r| r.1).collect::<Vec<_>>(),
        vec![TURN; 6],
        "turns of {TURN}: {runs:?}"
    );
    // Round-robin: each of the three QPs once in every three turns.
    let mut first_three: Vec<u32> = runs[..3].iter().map(|r| r.0).collect();
    first_three.sort_unstable();
    first_three.dedup();
    assert_eq!(first_three.len(), 3, "every QP gets a turn: {runs:?}");
    assert_eq!(
        runs[..3].iter().map(|r| r.0).collect::<Vec<_>>(),
        runs[3..].iter().map(|r| r.0).collect::<Vec<_>>(),
        "in the same order each round"
    );

    // Delivered in that order, the rest by the simulation: every WRITE completes whole.
    for pkt in &sent {
        sim.nodes[1].handle_packet(sim.now, pkt);
    }
    for &(a, _) in &pairs {
        assert_ok(&wait_wcs(&mut sim, a, 1));
    }
    for (dst, data) in &dsts {
        assert!(sim.nodes[1].mr_bytes(dst.lkey).unwrap() == *data);
    }
}

//! An endpoint with many QPs looks only at those with work (see `schedule.rs`): these
//! tests hold the events that give a QP work to it when it is one among hundreds of idle
//! ones — a posted request, a lost packet's timer, an RNR wait — so that none of them is
//! left waiting.

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use ferroce_transport::testing::{connect, QpOpts, Sim};
use ferroce_transport::WrOpcode;

/// QP pairs between the two nodes, nearly all idle.
const PAIRS: usize = 300;

#[test]
fn lost_writes_on_two_of_many_qps_are_resent_when_their_timers_fire() {
    let mut sim = Sim::new(21, 2, false);
    let o = QpOpts::default();
    let pairs: Vec<_> = (0..PAIRS).map(|_| connect(&mut sim, 0, 1, &o)).collect();
    assert!(sim.run_idle(Duration::from_secs(1)));

    let len = 16 * 1024;
    let mut dsts = Vec::new();
    for (tag, i) in [(1u64, 7usize), (2, 211)] {
        let (a, b) = pairs[i];
        let data = pattern(tag, len);
        let src = mr(&mut sim, a, data.clone());
        let dst = mr(&mut sim, b, vec![0; len]);
        let wr = rdma_wr(
            tag,
            WrOpcode::RdmaWrite,
            sge(&src, 0, len as u32),
            dst.addr,
            dst.rkey,
        );
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        dsts.push((a, b, dst, data));
    }

    // Everything the two QPs send first is lost: only their ACK timers bring it back.
    let lost = Rc::new(Cell::new(0u32));
    let l = lost.clone();
    sim.set_tap(Box::new(move |from, _, _| {
        if from == 0 {
            l.set(l.get() + 1);
            return false;
        }
        true
    }));
    let posted = sim.now;
    assert!(sim.step());
    assert_eq!(
        lost.get(),
        2 * 16,
        "both WRITEs went out whole (16 packets each)"
    );
    let deadline = sim.nodes[0]
        .poll_timeout()
        .expect("the ACK timers are armed");
    assert!(deadline > posted);
    sim.clear_tap();

    for (a, b, dst, data) in &dsts {
        let wcs = wait_wcs(&mut sim, *a, 1);
        assert_eq!(wcs.len(), 1);
        assert_ok(&wcs);
        assert!(sim.nodes[b.node].mr_bytes(dst.lkey).unwrap() == *data);
    }
    assert!(sim.nodes[0].counters().ack_timeouts >= 2);
    assert!(sim.run_idle(Duration::from_secs(1)));
    for n in &sim.nodes {
        assert_eq!(n.poll_timeout(), None, "no timer left armed");
    }
}

#[test]
fn an_rnr_wait_on_one_of_many_qps_ends_in_a_resend() {
    let mut sim = Sim::new(22, 2, false);
    let o = QpOpts {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..QpOpts::default()
    };
    let pairs: Vec<_> = (0..PAIRS).map(|_| connect(&mut sim, 0, 1, &o)).collect();
    assert!(sim.run_idle(Duration::from_secs(1)));

    // A SEND to a QP with no receive posted yet: RNR NAK, then a wait on a timer.
    let (a, b) = pairs[123];
    let data = pattern(3, 512);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 512]);
    let wr = send_wr(3, WrOpcode::Send, vec![sge(&src, 0, 512)]);
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    assert!(sim.run_until(Duration::from_millis(50), |s| s.nodes[0]
        .counters()
        .rcvd_rnr_err
        > 0));
    post_recv(&mut sim, b, 4, vec![sge(&dst, 0, 512)]);

    let wcs = wait_wcs(&mut sim, a, 1);
    assert_eq!(wcs.len(), 1);
    assert_ok(&wcs);
    let got = wait_wcs(&mut sim, b, 1);
    assert_ok(&got);
    assert!(sim.nodes[b.node].mr_bytes(dst.lkey).unwrap() == data);
}

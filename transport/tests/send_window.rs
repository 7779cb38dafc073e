//! The requester's send window: how many packets it sends beyond the oldest
//! unacknowledged one. rxe stops at 128; ferroce keeps 512 in flight, so that a link
//! joining packets into super-frames of 61 (64 KiB at MTU 1024) is not left waiting for
//! ACKs between transmit batches of 128 packets (`scripts/bench.sh host`: 64 KiB WRITEs
//! at veth MTU 1500 gained 11%, and with batches of 128 but a window of 128, 4 KiB WRITEs
//! lost 20%).

mod common;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use ferroce_transport::testing::{connect, opcode_psn, QpOpts, Sim};
use ferroce_transport::WrOpcode;

const WINDOW: usize = 512;

#[test]
fn a_requester_keeps_512_packets_in_flight_and_no_more() {
    let mut sim = Sim::new(7, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let len = 1 << 20; // 1024 packets at MTU 1024
    let data = pattern(3, len);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; len]);
    // Every request PSN node 0 sends; every answer of node 1 dropped until `acks`.
    let psns = Rc::new(RefCell::new(BTreeSet::new()));
    let acks = Rc::new(Cell::new(false));
    let (p, k) = (psns.clone(), acks.clone());
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 1 {
            return k.get();
        }
        if let Some((_, psn)) = opcode_psn(pkt) {
            p.borrow_mut().insert(psn);
        }
        true
    }));
    let wr = rdma_wr(
        1,
        WrOpcode::RdmaWrite,
        sge(&src, 0, len as u32),
        dst.addr,
        dst.rkey,
    );
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    // Well before the retransmit timer: the requester has sent the window and stopped.
    sim.run_until(Duration::from_micros(300), |_| false);
    assert_eq!(psns.borrow().len(), WINDOW, "packets sent without an ACK");
    // With ACKs let through, go-back-N resumes and the whole message lands.
    acks.set(true);
    let wcs = wait_wcs(&mut sim, a, 1);
    assert_ok(&wcs);
    assert_eq!(psns.borrow().len(), len / 1024);
    assert!(sim.nodes[1].mr_bytes(dst.lkey).unwrap() == data);
}

//! Responder-side errors: length, resources, receive WQE protection, atomic alignment.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use ferroce_transport::testing::{bring_up, create, forge, parse, QpOpts, Sim};
use ferroce_transport::{QpState, WcStatus, WrOpcode};
use ferroce_wire::{AtomicEthRepr, BthRepr, ExtRepr, NakCode, Opcode, Psn, Syndrome};

#[test]
fn send_longer_than_the_receive_buffer() {
    let mut sim = Sim::new(50, 2, false);
    let (a, b) = ferroce_transport::testing::connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 1000));
    let dst = mr(&mut sim, b, vec![0; 100]);
    post_recv(&mut sim, b, 8, vec![sge(&dst, 0, 100)]);
    post_recv(&mut sim, b, 9, vec![sge(&dst, 0, 100)]);
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 1000)]),
        )
        .unwrap();
    let wa = wait_wcs(&mut sim, a, 1);
    assert_eq!(wa[0].status, WcStatus::RemInvReqErr);
    let wb = wait_wcs(&mut sim, b, 2);
    assert_eq!((wb[0].wr_id, wb[0].status), (8, WcStatus::LocLenErr));
    assert_eq!((wb[1].wr_id, wb[1].status), (9, WcStatus::WrFlushErr));
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Err);
}

#[test]
fn receive_wqe_with_a_bad_lkey_is_a_remote_operational_error() {
    let mut sim = Sim::new(51, 2, false);
    let (a, b) = ferroce_transport::testing::connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 64));
    let dst = mr(&mut sim, b, vec![0; 64]);
    let mut bad = sge(&dst, 0, 64);
    bad.lkey ^= 0x77;
    post_recv(&mut sim, b, 8, vec![bad]);
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 64)]),
        )
        .unwrap();
    assert_eq!(wait_wcs(&mut sim, a, 1)[0].status, WcStatus::RemOpErr);
    assert_eq!(wait_wcs(&mut sim, b, 1)[0].status, WcStatus::LocProtErr);
}

#[test]
fn too_many_reads_get_nak_invalid_request_after_earlier_responses() {
    let mut sim = Sim::new(52, 2, false);
    let oa = QpOpts {
        max_rd_atomic: 4,
        ..QpOpts::default()
    };
    let ob = QpOpts {
        max_rd_atomic: 1,
        ..QpOpts::default()
    };
    let a = create(&mut sim, 0, &oa);
    let b = create(&mut sim, 1, &ob);
    let (ga, gb) = (sim.gid(0), sim.gid(1));
    bring_up(&mut sim, a, gb, b.qpn, &oa, 0);
    bring_up(&mut sim, b, ga, a.qpn, &ob, 1);
    let rb = mr(&mut sim, b, pattern(2, 8192));
    let la = mr(&mut sim, a, vec![0; 3 * 8192]);
    for i in 0..3u64 {
        let mut r = send_wr(i + 1, WrOpcode::RdmaRead, vec![sge(&la, i * 8192, 8192)]);
        r.remote_addr = rb.addr;
        r.rkey = rb.rkey;
        sim.nodes[0].post_send(sim.now, a.qpn, &r).unwrap();
    }
    let wa = wait_wcs(&mut sim, a, 3);
    let st: Vec<_> = wa.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RemInvReqErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(
        &sim.nodes[0].mr_bytes(la.lkey).unwrap()[..8192],
        &pattern(2, 8192)[..]
    );
}

#[test]
fn misaligned_atomic_gets_nak_invalid_request() {
    let mut sim = Sim::new(53, 2, false);
    let (a, b) = ferroce_transport::testing::connect(&mut sim, 0, 1, &QpOpts::default());
    let naks = Rc::new(RefCell::new(Vec::new()));
    let n2 = naks.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 1 {
            if let Some(aeth) = parse(pkt).and_then(|p| p.ext.aeth) {
                n2.borrow_mut().push(aeth.syndrome);
            }
        }
        true
    }));
    let word = mr(&mut sim, b, vec![0; 16]);
    let bth = BthRepr::new(
        Opcode::RC_FETCH_ADD,
        b.qpn,
        Psn::new(QpOpts::default().psn[0]),
    );
    let ext = ExtRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: word.addr + 4,
            rkey: word.rkey,
            swap_add: 1,
            compare: 0,
        }),
        ..Default::default()
    };
    let pkt = forge(sim.gid(0), sim.gid(1), bth, ext, &[]);
    sim.nodes[1].handle_packet(sim.now, &pkt);
    sim.run_idle(std::time::Duration::from_millis(1));
    assert_eq!(
        naks.borrow().as_slice(),
        &[Syndrome::Nak(NakCode::InvalidRequest)]
    );
    assert_eq!(sim.nodes[1].mr_bytes(word.lkey).unwrap(), &[0u8; 16][..]);
    let _ = a;
}

//! Shared receive queues: several QPs draw receive WQEs from one pool.

mod common;

use common::*;
use ferroce_transport::testing::{bring_up, create, drain_cq, QpOpts, Side, Sim};
use ferroce_transport::{Error, QpInitAttr, QpState, QpType, RecvWr, SrqAttr, WcStatus, WrOpcode};

/// Two RC QPs on node 1 sharing one SRQ, each connected to its own QP on node 0.
fn rig(sim: &mut Sim, o: &QpOpts, max_wr: u32) -> ([Side; 2], [Side; 2], ferroce_transport::SrqId) {
    let ep = &mut sim.nodes[1];
    let pd = ep.alloc_pd();
    let cq = ep.create_cq(64).unwrap();
    let srq = ep
        .create_srq(
            pd,
            SrqAttr {
                max_wr,
                max_sge: 2,
                srq_limit: 0,
            },
        )
        .unwrap();
    let mut shared = Vec::new();
    for _ in 0..2 {
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            cap: o.cap,
            sq_sig_all: false,
            srq: Some(srq),
        };
        let qpn = ep.create_qp(pd, init).unwrap();
        shared.push(Side {
            node: 1,
            pd,
            cq,
            qpn,
        });
    }
    let senders = [create(sim, 0, o), create(sim, 0, o)];
    let (g0, g1) = (sim.gid(0), sim.gid(1));
    for i in 0..2 {
        bring_up(sim, senders[i], g1, shared[i].qpn, o, 0);
        bring_up(sim, shared[i], g0, senders[i].qpn, o, 1);
    }
    ([senders[0], senders[1]], [shared[0], shared[1]], srq)
}

#[test]
fn qps_on_one_srq_take_receives_in_posting_order() {
    let mut sim = Sim::new(5, 2, false);
    let o = QpOpts::default();
    let (tx, rx, srq) = rig(&mut sim, &o, 16);
    let dst = mr(&mut sim, rx[0], vec![0; 4 * 512]);
    for i in 0..4u64 {
        let wr = RecvWr {
            wr_id: 100 + i,
            sg_list: vec![sge(&dst, i * 512, 512)],
        };
        sim.nodes[1].post_srq_recv(sim.now, srq, &wr).unwrap();
    }
    // Posting to the QP itself is refused: it receives from the SRQ.
    let own = RecvWr {
        wr_id: 1,
        sg_list: vec![sge(&dst, 0, 8)],
    };
    assert!(matches!(
        sim.nodes[1].post_recv(sim.now, rx[0].qpn, &own),
        Err(Error::InvalidWr(_))
    ));
    assert_eq!(sim.nodes[1].query_srq(srq).unwrap().1, 4);

    // Alternate messages from the two senders.
    for (n, side) in [tx[0], tx[1], tx[0], tx[1]].into_iter().enumerate() {
        let data = pattern(n as u64, 300);
        let src = mr(&mut sim, side, data);
        sim.nodes[0]
            .post_send(
                sim.now,
                side.qpn,
                &send_wr(n as u64, WrOpcode::Send, vec![sge(&src, 0, 300)]),
            )
            .unwrap();
        let got = wait_wcs(&mut sim, rx[0], 1);
        assert_ok(&got);
        assert_eq!(
            got[0].wr_id,
            100 + n as u64,
            "WQEs are taken in posting order"
        );
        assert_eq!(
            got[0].qp_num,
            [rx[0].qpn, rx[1].qpn][n % 2],
            "completion names the QP"
        );
        let bytes = &sim.nodes[1].mr_bytes(dst.lkey).unwrap()[n * 512..n * 512 + 300];
        assert_eq!(bytes, &pattern(n as u64, 300)[..]);
    }
    assert_eq!(sim.nodes[1].query_srq(srq).unwrap().1, 0);
    assert_ok(&wait_wcs(&mut sim, tx[0], 2));
    assert_ok(&wait_wcs(&mut sim, tx[1], 2));
}

#[test]
fn an_empty_srq_means_rnr_until_a_wqe_is_posted() {
    let mut sim = Sim::new(6, 2, false);
    let o = QpOpts {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..Default::default()
    };
    let (tx, rx, srq) = rig(&mut sim, &o, 4);
    let src = mr(&mut sim, tx[1], pattern(9, 64));
    sim.nodes[0]
        .post_send(
            sim.now,
            tx[1].qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 64)]),
        )
        .unwrap();
    sim.run_idle(std::time::Duration::from_millis(5));
    assert!(
        sim.nodes[1].counters().send_rnr_err > 0,
        "RNR NAK sent while the SRQ is empty"
    );
    let dst = mr(&mut sim, rx[1], vec![0; 64]);
    sim.nodes[1]
        .post_srq_recv(
            sim.now,
            srq,
            &RecvWr {
                wr_id: 7,
                sg_list: vec![sge(&dst, 0, 64)],
            },
        )
        .unwrap();
    let got = wait_wcs(&mut sim, rx[1], 1);
    assert_ok(&got);
    assert_eq!((got[0].wr_id, got[0].qp_num), (7, rx[1].qpn));
    assert_ok(&wait_wcs(&mut sim, tx[1], 1));
}

#[test]
fn srq_limits_and_lifetime() {
    let mut sim = Sim::new(7, 2, false);
    let o = QpOpts::default();
    let (_tx, rx, srq) = rig(&mut sim, &o, 2);
    let dst = mr(&mut sim, rx[0], vec![0; 64]);
    let wr = RecvWr {
        wr_id: 1,
        sg_list: vec![sge(&dst, 0, 8)],
    };
    sim.nodes[1].post_srq_recv(sim.now, srq, &wr).unwrap();
    sim.nodes[1].post_srq_recv(sim.now, srq, &wr).unwrap();
    assert_eq!(
        sim.nodes[1].post_srq_recv(sim.now, srq, &wr),
        Err(Error::QueueFull)
    );
    let three = RecvWr {
        wr_id: 2,
        sg_list: vec![sge(&dst, 0, 8); 3],
    };
    let roomy = sim.nodes[1]
        .create_srq(
            rx[0].pd,
            SrqAttr {
                max_wr: 8,
                max_sge: 2,
                srq_limit: 0,
            },
        )
        .unwrap();
    assert_eq!(
        sim.nodes[1].post_srq_recv(sim.now, roomy, &three),
        Err(Error::TooManySge)
    );
    let bad = SrqAttr {
        max_wr: 0,
        max_sge: 1,
        srq_limit: 0,
    };
    assert_eq!(
        sim.nodes[1].create_srq(rx[0].pd, bad).unwrap_err(),
        Error::InvalidAttr("max_wr/max_sge")
    );
    // In use by QPs: cannot be destroyed, nor its PD freed.
    assert_eq!(sim.nodes[1].destroy_srq(srq), Err(Error::SrqInUse));
    // A QP going to ERR does not flush the shared WQEs.
    let mut a = sim.nodes[1].query_qp(rx[0].qpn).unwrap().0;
    a.qp_state = QpState::Err;
    sim.nodes[1]
        .modify_qp(sim.now, rx[0].qpn, &a, ferroce_transport::QpAttrMask::STATE)
        .unwrap();
    assert_eq!(sim.nodes[1].query_srq(srq).unwrap().1, 2);
    assert!(drain_cq(&mut sim, rx[0])
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr));
    sim.nodes[1].destroy_qp(rx[0].qpn).unwrap();
    sim.nodes[1].destroy_qp(rx[1].qpn).unwrap();
    sim.nodes[1].destroy_srq(srq).unwrap();
    assert_eq!(
        sim.nodes[1].post_srq_recv(sim.now, srq, &wr),
        Err(Error::InvalidSrq)
    );
}

//! UC and UD services.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use ferroce_transport::testing::{bring_up, connect, create, drain_cq, opcode_psn, QpOpts, Sim};
use ferroce_transport::{
    Error, Mtu, QpType, SendWr, UdDest, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
use ferroce_wire::Opcode;

fn ud_pair(
    sim: &mut Sim,
) -> (
    ferroce_transport::testing::Side,
    ferroce_transport::testing::Side,
    QpOpts,
) {
    let o = QpOpts {
        qp_type: QpType::Ud,
        ..Default::default()
    };
    let a = create(sim, 0, &o);
    let b = create(sim, 1, &o);
    let (ga, gb) = (sim.gid(0), sim.gid(1));
    bring_up(sim, a, gb, b.qpn, &o, 0);
    bring_up(sim, b, ga, a.qpn, &o, 1);
    (a, b, o)
}

#[test]
fn ud_send_delivers_grh_area_source_and_immediate() {
    for ipv6 in [false, true] {
        let mut sim = Sim::new(30, 2, ipv6);
        let (a, b, o) = ud_pair(&mut sim);
        let data = pattern(1, 300);
        let src = mr(&mut sim, a, data.clone());
        let dst = mr(&mut sim, b, vec![0xaa; 340]);
        post_recv(&mut sim, b, 77, vec![sge(&dst, 0, 340)]);
        let mut wr = send_wr(1, WrOpcode::SendWithImm, vec![sge(&src, 0, 300)]);
        wr.imm_data = 0x1234;
        // High bit set: use the sending QP's own Q_Key (which matches).
        wr.ud = Some(UdDest::new(sim.gid(1), b.qpn, 0x8000_0000));
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        assert_ok(&wait_wcs(&mut sim, a, 1));
        let wb = wait_wcs(&mut sim, b, 1);
        assert_ok(&wb);
        let wc = wb[0];
        assert_eq!(wc.byte_len, 340);
        assert_eq!(wc.src_qp, a.qpn);
        assert_eq!(wc.src_gid, Some(sim.gid(0)));
        assert_eq!(wc.imm_data, 0x1234);
        assert!(wc.wc_flags.contains(WcFlags::GRH | WcFlags::WITH_IMM));
        let m = sim.nodes[1].mr_bytes(dst.lkey).unwrap();
        if ipv6 {
            assert_eq!(m[0] >> 4, 6, "IPv6 header fills the GRH area");
            assert_eq!(&m[8..24], &sim.gid(0).octets());
        } else {
            assert_eq!(&m[..20], &[0u8; 20]);
            assert_eq!(m[20], 0x45, "IPv4 header in the last 20 bytes");
            assert_eq!(&m[32..36], &sim.gid(0).octets()[12..]);
        }
        assert_eq!(&m[40..], &data[..]);
        let _ = o;
    }
}

#[test]
fn ud_qkey_mismatch_is_dropped_and_counted() {
    let mut sim = Sim::new(31, 2, false);
    let (a, b, o) = ud_pair(&mut sim);
    let src = mr(&mut sim, a, pattern(1, 10));
    let dst = mr(&mut sim, b, vec![0; 100]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 100)]);
    let mut wr = send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 10)]);
    wr.ud = Some(UdDest::new(sim.gid(1), b.qpn, o.qkey ^ 1));
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    sim.run_idle(std::time::Duration::from_millis(1));
    assert!(drain_cq(&mut sim, b).is_empty());
    assert_eq!(sim.nodes[1].counters().rx_bad_qkey, 1);
    // The right Q_Key gets through to the same receive WQE.
    wr.ud = Some(UdDest::new(sim.gid(1), b.qpn, o.qkey));
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let wb = wait_wcs(&mut sim, b, 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].byte_len),
        (1, WcStatus::Success, 50)
    );
}

#[test]
fn ud_rejects_messages_over_one_mtu_and_rc_opcodes() {
    let mut sim = Sim::new(32, 2, false);
    let (a, b, _) = ud_pair(&mut sim);
    let src = mr(&mut sim, a, vec![0; 5000]);
    let mut wr = send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 4097)]);
    wr.ud = Some(UdDest::new(sim.gid(1), b.qpn, 0));
    assert_eq!(
        sim.nodes[0].post_send(sim.now, a.qpn, &wr),
        Err(Error::MessageTooLarge)
    );
    let mut w = wr.clone();
    w.opcode = WrOpcode::RdmaWrite;
    w.sg_list[0].length = 8;
    assert!(matches!(
        sim.nodes[0].post_send(sim.now, a.qpn, &w),
        Err(Error::InvalidWr(_))
    ));
    let no_dest = SendWr { ud: None, ..w };
    assert!(sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &SendWr {
                opcode: WrOpcode::Send,
                ..no_dest
            }
        )
        .is_err());
}

#[test]
fn uc_message_with_lost_middle_is_dropped_whole_and_next_delivered() {
    let mut sim = Sim::new(33, 2, false);
    let o = QpOpts {
        qp_type: QpType::Uc,
        mtu: Mtu::Mtu256,
        ..Default::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let dropped = Rc::new(RefCell::new(false));
    let d2 = dropped.clone();
    sim.set_tap(Box::new(move |_, _, pkt| {
        if opcode_psn(pkt).is_some_and(|(op, _)| op == Opcode::UC_SEND_MIDDLE) && !*d2.borrow() {
            *d2.borrow_mut() = true;
            return false;
        }
        true
    }));
    let first = pattern(1, 1000);
    let second = pattern(2, 700);
    let s1 = mr(&mut sim, a, first);
    let s2 = mr(&mut sim, a, second.clone());
    let dst = mr(&mut sim, b, vec![0; 1024]);
    post_recv(&mut sim, b, 10, vec![sge(&dst, 0, 1024)]);
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&s1, 0, 1000)]),
        )
        .unwrap();
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(2, WrOpcode::Send, vec![sge(&s2, 0, 700)]),
        )
        .unwrap();
    let wa = wait_wcs(&mut sim, a, 2);
    assert_ok(&wa);
    let wb = wait_wcs(&mut sim, b, 1);
    sim.run_idle(std::time::Duration::from_millis(1));
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].byte_len),
        (10, 700),
        "the WQE is reused by message 2"
    );
    assert_eq!(
        &sim.nodes[1].mr_bytes(dst.lkey).unwrap()[..700],
        &second[..]
    );
    assert!(sim.nodes[1].counters().rx_uc_dropped >= 1);
    assert_eq!(
        sim.nodes[0].counters().retransmitted_pkts,
        0,
        "UC never retransmits"
    );
}

#[test]
fn uc_write_with_imm_and_no_acks() {
    let mut sim = Sim::new(34, 2, false);
    let o = QpOpts {
        qp_type: QpType::Uc,
        ..Default::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let data = pattern(5, 3000);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 3000]);
    post_recv(&mut sim, b, 3, vec![]);
    let mut w = send_wr(1, WrOpcode::RdmaWriteWithImm, vec![sge(&src, 0, 3000)]);
    w.remote_addr = dst.addr;
    w.rkey = dst.rkey;
    w.imm_data = 99;
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    let wb = wait_wcs(&mut sim, b, 1);
    assert_eq!(
        (wb[0].opcode, wb[0].byte_len, wb[0].imm_data),
        (WcOpcode::RecvRdmaWithImm, 3000, 99)
    );
    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap(), &data[..]);
    assert_eq!(
        sim.nodes[1].counters().sent_pkts,
        0,
        "UC responders send nothing"
    );
}

/// The GSI QP: number 1, UD, one per endpoint; a MAD from one endpoint's QP1 reaches the
/// other's with the GSI's Q_Key, and its source QP is 1.
#[test]
fn the_gsi_qp_is_qp1_and_carries_mads() {
    use ferroce_transport::{QpCap, QpInitAttr};
    use ferroce_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
    let mut sim = Sim::new(32, 2, false);
    let o = QpOpts {
        qp_type: QpType::Ud,
        qkey: GSI_QKEY,
        ..Default::default()
    };
    let mut sides = Vec::new();
    for node in 0..2 {
        let ep = &mut sim.nodes[node];
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(64).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap::default(),
            sq_sig_all: false,
            srq: None,
        };
        assert_eq!(ep.create_gsi_qp(pd, init), Ok(GSI_QPN));
        assert!(matches!(
            ep.create_gsi_qp(pd, init),
            Err(Error::InvalidAttr(_))
        ));
        let rc = QpInitAttr {
            qp_type: QpType::Rc,
            ..init
        };
        assert!(matches!(
            ep.create_gsi_qp(pd, rc),
            Err(Error::InvalidAttr(_))
        ));
        let other = ep.create_qp(pd, init).unwrap();
        assert_ne!(other, GSI_QPN, "ordinary QPs never get number 1");
        sides.push(ferroce_transport::testing::Side {
            node,
            pd,
            cq,
            qpn: GSI_QPN,
        });
    }
    let (a, b) = (sides[0], sides[1]);
    let (ga, gb) = (sim.gid(0), sim.gid(1));
    bring_up(&mut sim, a, gb, GSI_QPN, &o, 0);
    bring_up(&mut sim, b, ga, GSI_QPN, &o, 1);
    let mad = pattern(7, MAD_LEN);
    let src = mr(&mut sim, a, mad.clone());
    let dst = mr(&mut sim, b, vec![0; 40 + MAD_LEN]);
    post_recv(&mut sim, b, 5, vec![sge(&dst, 0, 40 + MAD_LEN as u32)]);
    let mut wr = send_wr(1, WrOpcode::Send, vec![sge(&src, 0, MAD_LEN as u32)]);
    wr.ud = Some(UdDest::new(gb, GSI_QPN, GSI_QKEY));
    sim.nodes[0].post_send(sim.now, GSI_QPN, &wr).unwrap();
    let wb = wait_wcs(&mut sim, b, 1);
    assert_ok(&wb);
    assert_eq!(
        (wb[0].src_qp, wb[0].byte_len),
        (GSI_QPN, 40 + MAD_LEN as u32)
    );
    assert_eq!(&sim.nodes[1].mr_bytes(dst.lkey).unwrap()[40..], &mad[..]);
}

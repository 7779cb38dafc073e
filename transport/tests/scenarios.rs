//! Targeted RC scenarios: retries, NAKs, timeouts, duplicates, wraparound, credits.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use ferroce_transport::testing::{
    connect, drain_cq, forge, opcode_psn, parse, Faults, QpOpts, Sim,
};
use ferroce_transport::{Mtu, QpState, SendFlags, WcFlags, WcStatus, WrOpcode};
use ferroce_wire::{AethRepr, BthRepr, ExtRepr, NakCode, Opcode, Psn, Syndrome};

fn small_mtu() -> QpOpts {
    QpOpts {
        mtu: Mtu::Mtu256,
        ..Default::default()
    }
}

#[test]
fn rnr_retry_then_success() {
    let mut sim = Sim::new(10, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &small_mtu());
    let src = mr(&mut sim, a, pattern(1, 600));
    let dst = mr(&mut sim, b, vec![0; 600]);
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 600)]),
        )
        .unwrap();
    // No receive WQE yet: the responder answers RNR NAKs.
    sim.run_until(Duration::from_millis(1), |s| {
        s.nodes[0].counters().rcvd_rnr_err >= 3
    });
    assert!(sim.nodes[1].counters().send_rnr_err >= 3);
    assert!(drain_cq(&mut sim, a).is_empty());
    post_recv(&mut sim, b, 7, vec![sge(&dst, 0, 600)]);
    let wa = wait_wcs(&mut sim, a, 1);
    assert_ok(&wa);
    let wb = wait_wcs(&mut sim, b, 1);
    assert_ok(&wb);
    assert_eq!(
        sim.nodes[1].mr_bytes(dst.lkey).unwrap(),
        &pattern(1, 600)[..]
    );
}

/// An RDMA WRITE with immediate takes its receive WQE at its last packet: with none
/// posted, that packet gets the RNR NAK, and its resend after the wait is taken as the
/// same request, for a one-packet WRITE (WRITE ONLY, whose RNR once left the responder
/// inside the WRITE it had begun: the resend was refused as an invalid request, both QPs
/// went to error) and a three-packet one (the resend is the LAST).
#[test]
fn rnr_on_a_write_with_immediate_then_success() {
    for (seed, len) in [(13, 100u32), (14, 600)] {
        let mut sim = Sim::new(seed, 2, false);
        let (a, b) = connect(&mut sim, 0, 1, &small_mtu());
        let src = mr(&mut sim, a, pattern(2, len as usize));
        let dst = mr(&mut sim, b, vec![0; len as usize]);
        let mut w = send_wr(1, WrOpcode::RdmaWriteWithImm, vec![sge(&src, 0, len)]);
        w.remote_addr = dst.addr;
        w.rkey = dst.rkey;
        w.imm_data = 0x1234_5678;
        sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
        sim.run_until(Duration::from_millis(1), |s| {
            s.nodes[0].counters().rcvd_rnr_err >= 2
        });
        assert!(sim.nodes[1].counters().send_rnr_err >= 2, "{len} B");
        assert!(drain_cq(&mut sim, a).is_empty(), "{len} B");
        post_recv(&mut sim, b, 7, vec![]);
        let wa = wait_wcs(&mut sim, a, 1);
        assert_ok(&wa);
        let wb = wait_wcs(&mut sim, b, 1);
        assert_ok(&wb);
        assert_eq!((wb[0].wr_id, wb[0].imm_data), (7, 0x1234_5678), "{len} B");
        assert_eq!(wb[0].byte_len, len, "{len} B");
        assert_eq!(
            sim.nodes[1].counters().naks_sent,
            sim.nodes[1].counters().send_rnr_err,
            "{len} B: only RNR NAKs"
        );
        assert_eq!(
            sim.nodes[1].mr_bytes(dst.lkey).unwrap(),
            &pattern(2, len as usize)[..]
        );
        assert_eq!(
            sim.nodes[0].qp_state(a.qpn).unwrap(),
            QpState::Rts,
            "{len} B"
        );
    }
}

#[test]
fn rnr_retry_exceeded_fails_and_flushes() {
    let mut sim = Sim::new(11, 2, false);
    let o = QpOpts {
        rnr_retry: 2,
        ..small_mtu()
    };
    let (a, _b) = connect(&mut sim, 0, 1, &o);
    let src = mr(&mut sim, a, pattern(1, 100));
    for id in 1..=2 {
        sim.nodes[0]
            .post_send(
                sim.now,
                a.qpn,
                &send_wr(id, WrOpcode::Send, vec![sge(&src, 0, 100)]),
            )
            .unwrap();
    }
    let wcs = wait_wcs(&mut sim, a, 2);
    assert_eq!(wcs[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(wcs[1].status, WcStatus::WrFlushErr);
    assert_eq!(sim.nodes[0].counters().retry_rnr_exceeded_err, 1);
    assert_eq!(
        sim.nodes[0].counters().rcvd_rnr_err,
        3,
        "2 retries + the failing NAK"
    );
    assert_eq!(sim.nodes[0].qp_state(a.qpn).unwrap(), QpState::Err);
}

#[test]
fn rkey_violation_naks_and_moves_both_sides_to_error() {
    let mut sim = Sim::new(12, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 64));
    let rb = mr(&mut sim, b, vec![0; 64]);
    post_recv(&mut sim, b, 50, vec![sge(&rb, 0, 64)]);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, 64)]);
    w.remote_addr = rb.addr + 32; // runs 32 bytes past the region
    w.rkey = rb.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    let mut later = send_wr(2, WrOpcode::Send, vec![sge(&src, 0, 8)]);
    later.flags = SendFlags::empty(); // flushed WQEs complete even when unsignaled
    sim.nodes[0].post_send(sim.now, a.qpn, &later).unwrap();
    let wa = wait_wcs(&mut sim, a, 2);
    assert_eq!(wa[0].status, WcStatus::RemAccessErr);
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(sim.nodes[0].qp_state(a.qpn).unwrap(), QpState::Err);
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Err);
    let wb = wait_wcs(&mut sim, b, 1);
    assert_eq!((wb[0].wr_id, wb[0].status), (50, WcStatus::WrFlushErr));
    assert_eq!(sim.nodes[1].mr_bytes(rb.lkey).unwrap(), &[0u8; 64][..]);
    // Posting on a QP in ERR completes at once with a flush.
    sim.nodes[0]
        .post_send(sim.now, a.qpn, &send_wr(3, WrOpcode::Send, vec![]))
        .unwrap();
    let w3 = drain_cq(&mut sim, a);
    assert_eq!((w3[0].wr_id, w3[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn ack_timeout_then_retry_exceeded_when_peer_is_dead() {
    let mut sim = Sim::new(13, 2, false);
    let o = QpOpts {
        retry_cnt: 3,
        timeout: 4,
        ..Default::default()
    };
    let (a, _b) = connect(&mut sim, 0, 1, &o);
    sim.set_faults(
        0,
        1,
        Faults {
            loss: 1.0,
            ..Faults::default()
        },
    );
    let src = mr(&mut sim, a, pattern(1, 100));
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 100)]),
        )
        .unwrap();
    let t0 = sim.now;
    let wcs = wait_wcs(&mut sim, a, 1);
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    let c = sim.nodes[0].counters();
    assert_eq!(c.retry_exceeded_err, 1);
    assert_eq!(c.completer_retry_err, 3);
    assert_eq!(c.ack_timeouts, 4);
    assert_eq!(c.sent_pkts, 4, "original + 3 retries");
    // 4 timeouts of 4.096 µs × 2^4 each.
    let waited = sim.now - t0;
    assert!(waited >= Duration::from_nanos(4 * 4096 * 16), "{waited:?}");
    assert_eq!(sim.nodes[0].qp_state(a.qpn).unwrap(), QpState::Err);
}

#[test]
fn psn_sequence_error_recovers_with_one_nak() {
    let mut sim = Sim::new(14, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &small_mtu());
    let dropped = Rc::new(RefCell::new(false));
    let d2 = dropped.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if let Some((op, _)) = opcode_psn(pkt) {
            if from == 0 && op == Opcode::RC_SEND_MIDDLE && !*d2.borrow() {
                *d2.borrow_mut() = true;
                return false;
            }
        }
        true
    }));
    let data = pattern(5, 1024);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 1024]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 1024)]);
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 1024)]),
        )
        .unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert_ok(&wait_wcs(&mut sim, b, 1));
    assert!(*dropped.borrow());
    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap(), &data[..]);
    let (ca, cb) = (sim.nodes[0].counters(), sim.nodes[1].counters());
    assert_eq!(cb.out_of_seq_request, 2, "the two packets after the gap");
    assert_eq!(cb.naks_sent, 1, "one NAK per gap");
    assert_eq!(ca.rcvd_seq_err, 1);
    assert_eq!(ca.retransmitted_pkts, 3);
    // A NAK names the loss: its resends follow no silence (`Transmit::silences`, which
    // tells a link that the peer may not take its super-packets).
    assert_eq!(sim.stats.repeats, 0);
}

#[test]
fn requests_after_ack_timeouts_count_the_silences_until_progress() {
    let mut sim = Sim::new(24, 2, false);
    let o = QpOpts {
        timeout: 4,
        ..small_mtu()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let data = pattern(6, 1024);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 2048]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 1024)]);
    post_recv(&mut sim, b, 2, vec![sge(&dst, 1024, 1024)]);
    // Everything A sends is lost until its ACK timer fires twice (a peer that loses
    // every super-packet whole, and says nothing).
    let lossy = Faults {
        loss: 1.0,
        ..Faults::default()
    };
    sim.set_faults(0, 1, lossy);
    let send = |id| send_wr(id, WrOpcode::Send, vec![sge(&src, 0, 1024)]);
    sim.nodes[0].post_send(sim.now, a.qpn, &send(1)).unwrap();
    sim.run_until(Duration::from_millis(10), |s| {
        s.nodes[0].counters().ack_timeouts >= 2
    });
    let sent = sim.stats.sent;
    // (The second timeout has fired; its resends are not out yet.)
    assert_eq!(sent, 8, "4 packets, then again after the first timeout");
    assert_eq!(
        sim.stats.repeats, 4,
        "those after the timeout, not the first 4"
    );
    assert_eq!(sim.stats.most_silences, 1);
    sim.set_faults(0, 1, Faults::default());
    assert_ok(&wait_wcs(&mut sim, a, 1));
    let repeats = sim.stats.repeats;
    assert!(repeats >= 8, "the resends after the second timeout");
    assert_eq!(sim.stats.most_silences, 2, "two timeouts in a row");
    // Progress clears it: the next message goes out as new.
    sim.nodes[0].post_send(sim.now, a.qpn, &send(2)).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert_ok(&wait_wcs(&mut sim, b, 2));
    assert_eq!(sim.stats.repeats, repeats);
    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap()[1024..], data[..]);
}

#[test]
fn ghost_and_duplicate_acks_are_ignored() {
    let mut sim = Sim::new(15, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 64));
    let dst = mr(&mut sim, b, vec![0; 64]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 64)]);
    // Keep one SEND outstanding so ACKs have something to (wrongly) complete.
    sim.set_faults(
        0,
        1,
        Faults {
            loss: 1.0,
            ..Faults::default()
        },
    );
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 64)]),
        )
        .unwrap();
    sim.step();
    let ack = |psn: u32| {
        let bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, a.qpn, Psn::new(psn));
        let ext = ExtRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 1,
            }),
            ..Default::default()
        };
        forge(sim.gid(1), sim.gid(0), bth, ext, &[])
    };
    let first = QpOpts::default().psn[0];
    let ghost = ack(first + 1000);
    let dup = ack(first - 1);
    sim.nodes[0].handle_packet(sim.now, &ghost);
    sim.nodes[0].handle_packet(sim.now, &dup);
    assert_eq!(sim.nodes[0].counters().rx_ghost_ack, 1);
    assert_eq!(sim.nodes[0].counters().rx_duplicate_ack, 1);
    assert!(
        drain_cq(&mut sim, a).is_empty(),
        "nothing completed by bogus ACKs"
    );
    sim.set_faults(0, 1, Faults::default());
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert_eq!(
        sim.nodes[1].mr_bytes(dst.lkey).unwrap(),
        &pattern(1, 64)[..]
    );
}

#[test]
fn unexpected_opcode_sequence_gets_nak_invalid_request() {
    let mut sim = Sim::new(16, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &small_mtu());
    let naks = Rc::new(RefCell::new(Vec::new()));
    let n2 = naks.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 1 {
            if let Some(p) = parse(pkt) {
                if let Some(aeth) = p.ext.aeth {
                    n2.borrow_mut().push((aeth.syndrome, p.bth.psn.value()));
                }
            }
        }
        true
    }));
    let expected = QpOpts::default().psn[0];
    // A SEND_MIDDLE at the expected PSN, with no SEND_FIRST before it.
    let bth = BthRepr::new(Opcode::RC_SEND_MIDDLE, b.qpn, Psn::new(expected));
    let pkt = forge(sim.gid(0), sim.gid(1), bth, ExtRepr::default(), &[0u8; 256]);
    let dst = mr(&mut sim, b, vec![0; 64]);
    post_recv(&mut sim, b, 9, vec![sge(&dst, 0, 64)]);
    sim.nodes[1].handle_packet(sim.now, &pkt);
    sim.run_idle(Duration::from_millis(1));
    assert_eq!(
        naks.borrow().as_slice(),
        &[(Syndrome::Nak(NakCode::InvalidRequest), expected)]
    );
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Err);
    let wb = drain_cq(&mut sim, b);
    assert_eq!((wb[0].wr_id, wb[0].status), (9, WcStatus::WrFlushErr));
    let _ = a;
}

#[test]
fn psn_wraps_at_2_pow_24_under_loss() {
    let mut sim = Sim::new(17, 2, false);
    let o = QpOpts {
        psn: [0xff_fff0, 0xff_fffe],
        ..small_mtu()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    sim.set_all_faults(Faults {
        loss: 0.02,
        ..Faults::default()
    });
    let seen_zero = Rc::new(RefCell::new(false));
    let s2 = seen_zero.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 0 && opcode_psn(pkt).is_some_and(|(_, p)| p == 0) {
            *s2.borrow_mut() = true;
        }
        true
    }));
    let data = pattern(9, 64 * 1024);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 64 * 1024]);
    let back = mr(&mut sim, a, vec![0; 64 * 1024]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 64 * 1024)]);
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 64 * 1024)]),
        )
        .unwrap();
    let mut r = send_wr(2, WrOpcode::RdmaRead, vec![sge(&back, 0, 64 * 1024)]);
    r.remote_addr = dst.addr;
    r.rkey = dst.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &r).unwrap();
    let wa = wait_wcs(&mut sim, a, 2);
    assert_ok(&wa);
    assert!(*seen_zero.borrow(), "PSN 0 was used after 0xffffff");
    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap(), &data[..]);
    assert_eq!(sim.nodes[0].mr_bytes(back.lkey).unwrap(), &data[..]);
}

#[test]
fn duplicate_read_is_re_executed_from_the_gap() {
    let mut sim = Sim::new(18, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &small_mtu());
    let dropped = Rc::new(RefCell::new(0));
    let d2 = dropped.clone();
    // Drop the first READ_RESPONSE_MIDDLE once, and (separately) a whole response later.
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 1
            && opcode_psn(pkt).is_some_and(|(op, _)| op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE)
            && *d2.borrow() == 0
        {
            *d2.borrow_mut() += 1;
            return false;
        }
        true
    }));
    let data = pattern(4, 2000);
    let rb = mr(&mut sim, b, data.clone());
    let la = mr(&mut sim, a, vec![0; 2000]);
    let mut r = send_wr(1, WrOpcode::RdmaRead, vec![sge(&la, 0, 2000)]);
    r.remote_addr = rb.addr;
    r.rkey = rb.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &r).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert_eq!(*dropped.borrow(), 1);
    assert_eq!(sim.nodes[0].mr_bytes(la.lkey).unwrap(), &data[..]);
    assert!(
        sim.nodes[1].counters().duplicate_request >= 1,
        "the resent READ is a duplicate"
    );
    // The replayed responses follow a silence (`Transmit::silences`: their first sending
    // was lost; the requester's READ after a sequence error is not): 8 packets in all, the
    // first not replayed; one replay.
    assert!(
        (1..=7).contains(&sim.stats.repeats),
        "{}",
        sim.stats.repeats
    );
    assert_eq!(sim.stats.most_silences, 1);
    assert_eq!(
        sim.nodes[1].counters().rdma_recvs,
        1,
        "executed as new once"
    );
}

#[test]
fn duplicate_atomic_is_answered_from_the_cache() {
    let mut sim = Sim::new(19, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let lost = Rc::new(RefCell::new(false));
    let l2 = lost.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 1
            && opcode_psn(pkt).is_some_and(|(op, _)| op == Opcode::RC_ATOMIC_ACKNOWLEDGE)
            && !*l2.borrow()
        {
            *l2.borrow_mut() = true;
            return false;
        }
        true
    }));
    let word = mr(&mut sim, b, 40u64.to_le_bytes().to_vec());
    let res = mr(&mut sim, a, vec![0; 8]);
    let mut fa = send_wr(1, WrOpcode::AtomicFetchAdd, vec![sge(&res, 0, 8)]);
    fa.remote_addr = word.addr;
    fa.rkey = word.rkey;
    fa.compare_add = 2;
    sim.nodes[0].post_send(sim.now, a.qpn, &fa).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert!(*lost.borrow());
    assert_eq!(sim.nodes[1].counters().duplicate_request, 1);
    assert_eq!(
        sim.nodes[1].mr_bytes(word.lkey).unwrap(),
        &42u64.to_le_bytes()
    );
    assert_eq!(
        sim.nodes[0].mr_bytes(res.lkey).unwrap(),
        &40u64.to_le_bytes()
    );
}

#[test]
fn aeth_credits_count_posted_receive_wqes() {
    let mut sim = Sim::new(20, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let acks = Rc::new(RefCell::new(Vec::new()));
    let a2 = acks.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 1 {
            if let Some(aeth) = parse(pkt).and_then(|p| p.ext.aeth) {
                a2.borrow_mut().push(aeth);
            }
        }
        true
    }));
    let src = mr(&mut sim, a, pattern(1, 16));
    let dst = mr(&mut sim, b, vec![0; 16 * 10]);
    for i in 0..10 {
        post_recv(&mut sim, b, i, vec![sge(&dst, 16 * i, 16)]);
    }
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 16)]),
        )
        .unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    // 9 WQEs left: the largest credit count not above 9 is 8, code 6 (IB table 44).
    let got = acks.borrow();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].syndrome, Syndrome::Ack { credits: 6 });
    assert_eq!(got[0].msn, 1);
}

#[test]
fn corrupted_packets_fail_the_icrc_and_data_survives() {
    let mut sim = Sim::new(21, 2, true);
    let (a, b) = connect(&mut sim, 0, 1, &small_mtu());
    sim.set_all_faults(Faults {
        corrupt: 0.1,
        ..Faults::default()
    });
    let data = pattern(2, 32 * 1024);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 32 * 1024]);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&src, 0, 32 * 1024)]);
    w.remote_addr = dst.addr;
    w.rkey = dst.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    let icrc = sim.nodes[0].counters().rx_icrc_err + sim.nodes[1].counters().rx_icrc_err;
    assert!(sim.stats.corrupted > 0);
    assert_eq!(icrc, sim.stats.corrupted);
    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap(), &data[..]);
}

#[test]
fn send_with_invalidate_of_an_ordinary_region_is_refused() {
    // As rxe: only memory windows and fast-registration regions may be invalidated by a
    // peer; an ordinary MR stays valid, the receive fails and both QPs stop.
    let mut sim = Sim::new(22, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 32));
    let target = mr(&mut sim, b, vec![0; 32]);
    let rbuf = mr(&mut sim, b, vec![0; 32]);
    post_recv(&mut sim, b, 5, vec![sge(&rbuf, 0, 32)]);
    let mut s = send_wr(1, WrOpcode::SendWithInv, vec![sge(&src, 0, 32)]);
    s.invalidate_rkey = target.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &s).unwrap();
    assert_eq!(wait_wcs(&mut sim, a, 1)[0].status, WcStatus::RemInvReqErr);
    let wb = wait_wcs(&mut sim, b, 1);
    assert_eq!(wb[0].status, WcStatus::RemInvReqErr);
    assert!(!wb[0].wc_flags.contains(WcFlags::WITH_INV));
    assert!(sim.nodes[1].mr_info(target.lkey).is_some());
    assert_eq!(sim.nodes[1].counters().rx_invalidate_refused, 1);
}

#[test]
fn inline_data_is_copied_at_post_time() {
    let mut sim = Sim::new(23, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 100));
    let dst = mr(&mut sim, b, vec![0; 100]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 100)]);
    let mut s = send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 100)]);
    s.flags |= SendFlags::INLINE;
    sim.nodes[0].post_send(sim.now, a.qpn, &s).unwrap();
    sim.nodes[0]
        .mr_write(src.lkey, 0, &vec![0xff; src.len as usize])
        .unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert_eq!(
        sim.nodes[1].mr_bytes(dst.lkey).unwrap(),
        &pattern(1, 100)[..]
    );
}

#[test]
fn bad_lkey_is_a_local_protection_error() {
    let mut sim = Sim::new(24, 2, false);
    let (a, _b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 100));
    let mut bad = sge(&src, 0, 100);
    bad.lkey ^= 0x55;
    sim.nodes[0]
        .post_send(sim.now, a.qpn, &send_wr(1, WrOpcode::Send, vec![bad]))
        .unwrap();
    sim.nodes[0]
        .post_send(sim.now, a.qpn, &send_wr(2, WrOpcode::Send, vec![]))
        .unwrap();
    let wcs = wait_wcs(&mut sim, a, 2);
    assert_eq!(wcs[0].status, WcStatus::LocProtErr);
    assert_eq!(wcs[1].status, WcStatus::WrFlushErr);
    assert_eq!(sim.nodes[0].counters().sent_pkts, 0);
}

#[test]
fn fence_waits_for_the_read_before_it() {
    let mut sim = Sim::new(25, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let order = Rc::new(RefCell::new(Vec::new()));
    let o2 = order.clone();
    sim.set_tap(Box::new(move |_, _, pkt| {
        if let Some((op, _)) = opcode_psn(pkt) {
            o2.borrow_mut().push(op);
        }
        true
    }));
    let rb = mr(&mut sim, b, pattern(3, 64));
    let la = mr(&mut sim, a, vec![0; 64]);
    let mut r = send_wr(1, WrOpcode::RdmaRead, vec![sge(&la, 0, 64)]);
    r.remote_addr = rb.addr;
    r.rkey = rb.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &r).unwrap();
    let mut w = send_wr(2, WrOpcode::RdmaWrite, vec![sge(&la, 0, 64)]);
    w.remote_addr = rb.addr;
    w.rkey = rb.rkey;
    w.flags |= SendFlags::FENCE;
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 2));
    let ops = order.borrow();
    let resp = ops
        .iter()
        .position(|o| *o == Opcode::RC_RDMA_READ_RESPONSE_ONLY)
        .unwrap();
    let write = ops
        .iter()
        .position(|o| *o == Opcode::RC_RDMA_WRITE_ONLY)
        .unwrap();
    assert!(resp < write, "{ops:?}");
    assert_eq!(sim.nodes[0].mr_bytes(la.lkey).unwrap(), &pattern(3, 64)[..]);
}

#[test]
fn sqd_starts_no_new_message_until_back_to_rts() {
    use ferroce_transport::{QpAttr, QpAttrMask};
    let mut sim = Sim::new(26, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(1, 64));
    let dst = mr(&mut sim, b, vec![0; 64]);
    post_recv(&mut sim, b, 1, vec![sge(&dst, 0, 64)]);
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        ..QpAttr::default()
    };
    sim.nodes[0]
        .modify_qp(sim.now, a.qpn, &sqd, QpAttrMask::STATE)
        .unwrap();
    sim.nodes[0]
        .post_send(
            sim.now,
            a.qpn,
            &send_wr(1, WrOpcode::Send, vec![sge(&src, 0, 64)]),
        )
        .unwrap();
    sim.run_idle(Duration::from_millis(1));
    assert_eq!(sim.nodes[0].counters().sent_pkts, 0);
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    sim.nodes[0]
        .modify_qp(sim.now, a.qpn, &rts, QpAttrMask::STATE)
        .unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    assert_eq!(
        sim.nodes[1].mr_bytes(dst.lkey).unwrap(),
        &pattern(1, 64)[..]
    );
}

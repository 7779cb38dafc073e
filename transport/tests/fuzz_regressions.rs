//! Regressions found by the `responder` fuzz target (`fuzz/src/transport_bodies.rs`).

use ferroce_transport::testing::{connect, forge, parse, QpOpts, Sim};
use ferroce_transport::{Access, QpState, MAX_DATAGRAM_LEN};
use ferroce_wire::{BthRepr, ExtRepr, NakCode, Opcode, Psn, RethRepr, Syndrome};

fn read_request(dest_qp: u32, psn: u32, va: u64, rkey: u32, dma_len: u32) -> (BthRepr, ExtRepr) {
    let mut bth = BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, dest_qp, Psn::new(psn));
    bth.ack_req = true;
    let ext = ExtRepr {
        reth: Some(RethRepr { va, rkey, dma_len }),
        ..Default::default()
    };
    (bth, ext)
}

/// A zero-length READ needs no valid R_Key or VA (C9-88; the responder skips the check
/// when it accepts the request, as rxe does). Its empty response used to read zero bytes
/// through the bogus key anyway, fail, and NAK the READ with the QP moved to ERR.
#[test]
fn zero_length_read_with_any_rkey_gets_an_empty_response() {
    let mut sim = Sim::new(90, 2, false);
    let (_, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let (bth, ext) = read_request(b.qpn, 0x100, 0, 0xdead_beef, 0);
    let pkt = forge(sim.gid(0), sim.gid(1), bth, ext, &[]);
    sim.nodes[1].handle_packet(sim.now, &pkt);
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let t = sim.nodes[1]
        .poll_transmit(sim.now, &mut buf)
        .expect("a READ response");
    let r = parse(&buf[..t.len]).expect("parses");
    assert_eq!(r.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(r.bth.psn, Psn::new(0x100));
    assert!(r.payload.is_empty());
    assert!(matches!(
        r.ext.aeth.map(|a| a.syndrome),
        Some(Syndrome::Ack { .. })
    ));
    assert!(sim.nodes[1].poll_transmit(sim.now, &mut buf).is_none());
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Rts);
}

/// When a READ's source is gone by the time its response is built (here the application
/// deregistered the region), the QP NAKs and moves to ERR. `poll_transmit` used to return
/// `None` on that call with the NAK queued, so an I/O loop draining until `None` left the
/// NAK behind until some unrelated event.
#[test]
fn nak_for_a_read_whose_region_is_gone_goes_out_at_once() {
    let mut sim = Sim::new(91, 2, false);
    let (_, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let mr = sim.nodes[1]
        .reg_mr_with(b.pd, vec![7; 64], None, Access::REMOTE_READ)
        .unwrap();
    let (bth, ext) = read_request(b.qpn, 0x100, mr.addr, mr.rkey, 64);
    let pkt = forge(sim.gid(0), sim.gid(1), bth, ext, &[]);
    sim.nodes[1].handle_packet(sim.now, &pkt);
    sim.nodes[1].dereg_mr(mr.lkey).unwrap();
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let t = sim.nodes[1]
        .poll_transmit(sim.now, &mut buf)
        .expect("the NAK, on the first call");
    let r = parse(&buf[..t.len]).expect("parses");
    assert_eq!(r.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(
        r.ext.aeth.map(|a| a.syndrome),
        Some(Syndrome::Nak(NakCode::RemoteAccessError))
    );
    assert!(sim.nodes[1].poll_transmit(sim.now, &mut buf).is_none());
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Err);
}

//! A requester that sends one PSN as two different packets, as Linux 6.1's rxe did in the
//! interop suite (`tests/probe/findings/rxe-6.1-write-psn-reused.pcapng`): the responder
//! keeps what it executed, ACKs the duplicates with its newest PSN, and answers the shifted
//! message's LAST, which arrives with no message open, with NAK INVALID_REQUEST (an opcode
//! sequence error; rxe's responder answers a missing FIRST the same way). Nothing of the
//! shifted messages reaches memory.

use ferroce_transport::testing::{connect, forge, QpOpts, Sim};
use ferroce_transport::{Access, QpState};
use ferroce_wire::{BthRepr, ExtRepr, NakCode, Opcode, Psn, RethRepr, Syndrome};

mod common;

/// Every datagram the responder sends now, as (opcode, PSN, syndrome).
fn replies(sim: &mut Sim) -> Vec<(Opcode, u32, Option<Syndrome>)> {
    common::drain_sent(sim, 1)
        .into_iter()
        .map(|(op, psn, syndrome, _)| (op, psn, syndrome))
        .collect()
}

#[test]
fn a_psn_resent_as_another_packet_is_a_duplicate_and_the_shift_gets_nak_invalid_request() {
    let mut sim = Sim::new(93, 2, false);
    let (_, b) = connect(&mut sim, 0, 1, &QpOpts::default()); // MTU 1024; B expects 0x100
    let mr = sim.nodes[1]
        .reg_mr(b.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let send =
        |sim: &mut Sim, op: Opcode, psn: u32, reth: Option<(u64, u32)>, fill: u8, n: usize| {
            let mut bth = BthRepr::new(op, b.qpn, Psn::new(psn));
            bth.ack_req = matches!(op, Opcode::RC_RDMA_WRITE_LAST | Opcode::RC_RDMA_WRITE_ONLY);
            let ext = ExtRepr {
                reth: reth.map(|(va, dma_len)| RethRepr {
                    va,
                    rkey: mr.rkey,
                    dma_len,
                }),
                ..Default::default()
            };
            let p = forge(sim.gid(0), sim.gid(1), bth, ext, &vec![fill; n]);
            sim.nodes[1].handle_packet(sim.now, &p);
            replies(sim)
        };
    use Opcode as O;
    // Two 2 KiB messages in order: 0x100-0x101 and 0x102-0x103.
    assert_eq!(
        send(
            &mut sim,
            O::RC_RDMA_WRITE_FIRST,
            0x100,
            Some((mr.addr, 2048)),
            1,
            1024
        ),
        vec![]
    );
    let got = send(&mut sim, O::RC_RDMA_WRITE_LAST, 0x101, None, 1, 1024);
    assert!(
        matches!(
            got[..],
            [(O::RC_ACKNOWLEDGE, 0x101, Some(Syndrome::Ack { .. }))]
        ),
        "{got:?}"
    );
    assert_eq!(
        send(
            &mut sim,
            O::RC_RDMA_WRITE_FIRST,
            0x102,
            Some((mr.addr + 2048, 2048)),
            2,
            1024
        ),
        vec![]
    );
    let got = send(&mut sim, O::RC_RDMA_WRITE_LAST, 0x103, None, 2, 1024);
    assert!(
        matches!(
            got[..],
            [(O::RC_ACKNOWLEDGE, 0x103, Some(Syndrome::Ack { .. }))]
        ),
        "{got:?}"
    );
    let before = sim.nodes[1].counters().duplicate_request;

    // 0x102 again, now an empty WRITE_ONLY with AckReq: a duplicate, ACKed with the newest
    // PSN and not executed.
    let got = send(
        &mut sim,
        O::RC_RDMA_WRITE_ONLY,
        0x102,
        Some((mr.addr, 0)),
        0,
        0,
    );
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (O::RC_ACKNOWLEDGE, 0x103));
    assert!(matches!(got[0].2, Some(Syndrome::Ack { .. })), "{got:?}");
    // The shifted message: FIRST at 0x103 is another duplicate, ACKed again like every
    // duplicate WRITE (as rxe's responder does); its LAST at 0x104 is the expected PSN
    // but no message is open.
    let got = send(
        &mut sim,
        O::RC_RDMA_WRITE_FIRST,
        0x103,
        Some((mr.addr, 2048)),
        3,
        1024,
    );
    assert!(
        matches!(
            got[..],
            [(O::RC_ACKNOWLEDGE, 0x103, Some(Syndrome::Ack { .. }))]
        ),
        "{got:?}"
    );
    assert_eq!(sim.nodes[1].counters().duplicate_request, before + 2);
    let got = send(&mut sim, O::RC_RDMA_WRITE_LAST, 0x104, None, 3, 1024);
    assert_eq!(
        got,
        vec![(
            O::RC_ACKNOWLEDGE,
            0x104,
            Some(Syndrome::Nak(NakCode::InvalidRequest))
        )]
    );
    assert_eq!(sim.nodes[1].qp_state(b.qpn).unwrap(), QpState::Err);
    // Memory holds the two messages executed in order and nothing of the shifted ones.
    let bytes = sim.nodes[1].mr_bytes(mr.lkey).unwrap();
    assert!(bytes[..2048].iter().all(|&x| x == 1));
    assert!(bytes[2048..].iter().all(|&x| x == 2));
}

//! RC atomic write (IBA 1.5, opcode 0x1d): 8 bytes stored at once at an aligned address
//! under the rights of an RDMA WRITE, acknowledged like one. What a requester may not
//! post is refused at post time; what a hostile or mistaken peer sends is NAKed with the
//! memory untouched.

mod common;

use std::time::Duration;

use common::*;
use ferroce_transport::testing::{connect, drain_cq, forge, Faults, QpOpts, Sim};
use ferroce_transport::{
    Access, Error, MrInfo, QpType, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use ferroce_wire::{BthRepr, ExtRepr, NakCode, Opcode, Psn, RethRepr, Syndrome};

fn atomic_write(id: u64, addr: u64, rkey: u32, value: [u8; 8]) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::AtomicWrite,
        flags: SendFlags::SIGNALED,
        remote_addr: addr,
        rkey,
        compare_add: u64::from_ne_bytes(value),
        ..Default::default()
    }
}

/// A region of `len` bytes of 0xee on the side's node, with `access`.
fn region(
    sim: &mut Sim,
    s: ferroce_transport::testing::Side,
    len: usize,
    access: Access,
) -> MrInfo {
    sim.nodes[s.node]
        .reg_mr_with(s.pd, vec![0xee; len], None, access)
        .expect("reg_mr")
}

/// A request from node 0 to `qpn` on node 1 with AckReq and a RETH, checksums right.
fn forged(sim: &Sim, op: Opcode, qpn: u32, psn: u32, reth: RethRepr, payload: &[u8]) -> Vec<u8> {
    let bth = BthRepr {
        ack_req: true,
        ..BthRepr::new(op, qpn, Psn::new(psn))
    };
    let ext = ExtRepr {
        reth: Some(reth),
        ..Default::default()
    };
    forge(sim.gid(0), sim.gid(1), bth, ext, payload)
}

/// Whether the region still holds only the 0xee it was registered with.
fn untouched(sim: &Sim, m: &MrInfo) -> bool {
    sim.nodes[1]
        .mr_bytes(m.lkey)
        .unwrap()
        .iter()
        .all(|&x| x == 0xee)
}

/// One atomic write from a fresh pair whose responder QP has `qp_rights` into a region
/// with `mr_rights`: the requester's completion status, and whether the region stayed.
fn one_refused(seed: u64, qp_rights: Access, mr_rights: Access) -> (WcStatus, bool) {
    let mut sim = Sim::new(seed, 2, false);
    let o = QpOpts {
        access: qp_rights,
        ..Default::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let dst = region(&mut sim, b, 64, mr_rights);
    let wr = atomic_write(1, dst.addr, dst.rkey, [1; 8]);
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let wcs = wait_wcs(&mut sim, a, 1);
    (wcs[0].status, untouched(&sim, &dst))
}

#[test]
fn an_atomic_write_stores_its_eight_bytes_and_completes() {
    let mut sim = Sim::new(1, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    // REMOTE_WRITE alone, as rdma-core's test gives the region: no atomic right needed.
    let dst = region(&mut sim, b, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let value = *b"ferroce!";
    let wr = atomic_write(7, dst.addr + 16, dst.rkey, value);
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    // The packet on the wire: RC_ATOMIC_WRITE, a RETH of 8 bytes, the value as payload.
    let sent = drain_sent(&mut sim, 0);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, Opcode::RC_ATOMIC_WRITE);
    assert_eq!(sent[0].3, value);
    // Sent again by the retransmit timer, then delivered.
    let wcs = wait_wcs(&mut sim, a, 1);
    assert_ok(&wcs);
    assert_eq!((wcs[0].wr_id, wcs[0].opcode), (7, WcOpcode::AtomicWrite));
    let m = sim.nodes[1].mr_bytes(dst.lkey).unwrap();
    assert_eq!(&m[16..24], &value);
    assert!(m[..16].iter().chain(&m[24..]).all(|&x| x == 0xee), "{m:?}");
    assert!(
        drain_cq(&mut sim, b).is_empty(),
        "no completion at the responder"
    );
}

#[test]
fn writes_and_atomic_writes_land_in_order_through_loss_and_duplication() {
    let mut sim = Sim::new(3, 2, false);
    sim.set_all_faults(Faults {
        loss: 0.1,
        dup: 0.1,
        reorder: 0.1,
        ..Default::default()
    });
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let dst = region(
        &mut sim,
        b,
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let src = mr(&mut sim, a, pattern(9, 4096));
    let mut n = 0;
    for round in 0..50u64 {
        // A WRITE over the word, then an atomic write of it: the word must end as the
        // atomic write left it, whatever was lost, duplicated or resent.
        let w = rdma_wr(
            round * 2,
            WrOpcode::RdmaWrite,
            sge(&src, 0, 64),
            dst.addr,
            dst.rkey,
        );
        sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
        let v = (round * 0x0101_0101_0101_0101).to_le_bytes();
        let aw = atomic_write(round * 2 + 1, dst.addr + 8 * (round % 8), dst.rkey, v);
        sim.nodes[0].post_send(sim.now, a.qpn, &aw).unwrap();
        n += 2;
    }
    let wcs = wait_wcs(&mut sim, a, n);
    assert_ok(&wcs);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
    let m = sim.nodes[1].mr_bytes(dst.lkey).unwrap();
    let want = 49u64 * 0x0101_0101_0101_0101;
    assert_eq!(&m[8..16], &want.to_le_bytes(), "round 49 wrote word 1 last");
    assert_eq!(&m[16..64], &pattern(9, 64)[16..64]);
    assert!(
        sim.nodes[0].counters().retransmitted_pkts > 0,
        "the faults bit"
    );
}

#[test]
fn what_a_requester_may_not_post_is_refused_at_post_time() {
    let mut sim = Sim::new(4, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let dst = region(&mut sim, b, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let wr = atomic_write(1, dst.addr + 4, dst.rkey, [1; 8]);
    let e = sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap_err();
    assert!(matches!(e, Error::InvalidWr(_)), "{e:?}");
    let uc = QpOpts {
        qp_type: QpType::Uc,
        ..Default::default()
    };
    let (c, _d) = connect(&mut sim, 0, 1, &uc);
    let wr = atomic_write(2, dst.addr, dst.rkey, [1; 8]);
    let e = sim.nodes[0].post_send(sim.now, c.qpn, &wr).unwrap_err();
    assert!(matches!(e, Error::InvalidWr(_)), "{e:?}");
    assert!(untouched(&sim, &dst));
}

#[test]
fn without_the_write_right_the_peer_says_no_and_memory_stays() {
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let no_write = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    // The region has every right but REMOTE_WRITE: remote access error.
    let (status, kept) = one_refused(5, all | Access::REMOTE_ATOMIC, no_write);
    assert_eq!(status, WcStatus::RemAccessErr);
    assert!(kept);
    // The responder's QP lacks REMOTE_WRITE: invalid request, as for a WRITE.
    let (status, kept) = one_refused(6, no_write, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    assert_eq!(status, WcStatus::RemInvReqErr);
    assert!(kept);
}

/// What a hostile or broken requester may send: each is NAKed as an invalid request (or
/// a remote access error for a bad key), the word untouched.
#[test]
fn malformed_atomic_writes_are_naked_and_store_nothing() {
    type Case = (&'static str, u64, u32, usize, fn(u32) -> u32, NakCode);
    let cases: [Case; 5] = [
        ("misaligned", 4, 8, 8, |k| k, NakCode::InvalidRequest),
        (
            "a RETH of 16 bytes",
            0,
            16,
            8,
            |k| k,
            NakCode::InvalidRequest,
        ),
        (
            "a payload of 4 bytes",
            0,
            8,
            4,
            |k| k,
            NakCode::InvalidRequest,
        ),
        (
            "a payload of 16 bytes",
            0,
            8,
            16,
            |k| k,
            NakCode::InvalidRequest,
        ),
        (
            "a wrong key",
            0,
            8,
            8,
            |k| k ^ 0x100,
            NakCode::RemoteAccessError,
        ),
    ];
    for (what, off, dma_len, payload, key, nak) in cases {
        let mut sim = Sim::new(7, 2, false);
        let (_a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
        let dst = region(&mut sim, b, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let reth = RethRepr {
            va: dst.addr + off,
            rkey: key(dst.rkey),
            dma_len,
        };
        let pkt = forged(
            &sim,
            Opcode::RC_ATOMIC_WRITE,
            b.qpn,
            0x100,
            reth,
            &vec![0x5a; payload],
        );
        sim.nodes[1].handle_packet(sim.now, &pkt);
        let sent = drain_sent(&mut sim, 1);
        assert_eq!(sent.len(), 1, "{what}: {sent:?}");
        assert_eq!(sent[0].2, Some(Syndrome::Nak(nak)), "{what}");
        assert!(untouched(&sim, &dst), "{what}");
    }
}

/// A duplicate (the requester resending after a lost ACK) is acknowledged again and not
/// executed again: a later WRITE's bytes stay.
#[test]
fn a_duplicate_is_acknowledged_without_storing_again() {
    let mut sim = Sim::new(8, 2, false);
    let (_a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let dst = region(&mut sim, b, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let reth = RethRepr {
        va: dst.addr,
        rkey: dst.rkey,
        dma_len: 8,
    };
    let first = forged(&sim, Opcode::RC_ATOMIC_WRITE, b.qpn, 0x100, reth, &[1; 8]);
    sim.nodes[1].handle_packet(sim.now, &first);
    assert_eq!(&sim.nodes[1].mr_bytes(dst.lkey).unwrap()[..8], &[1; 8]);
    let sent = drain_sent(&mut sim, 1);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, 0x100);
    assert!(matches!(sent[0].2, Some(Syndrome::Ack { .. })), "{sent:?}");
    let write = forged(
        &sim,
        Opcode::RC_RDMA_WRITE_ONLY,
        b.qpn,
        0x101,
        reth,
        &[2; 8],
    );
    sim.nodes[1].handle_packet(sim.now, &write);
    assert_eq!(drain_sent(&mut sim, 1).len(), 1);
    assert_eq!(&sim.nodes[1].mr_bytes(dst.lkey).unwrap()[..8], &[2; 8]);
    sim.nodes[1].handle_packet(sim.now + Duration::from_micros(5), &first);
    let sent = drain_sent(&mut sim, 1);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, 0x101, "answered with the last PSN executed");
    assert!(matches!(sent[0].2, Some(Syndrome::Ack { .. })), "{sent:?}");
    assert_eq!(&sim.nodes[1].mr_bytes(dst.lkey).unwrap()[..8], &[2; 8]);
}

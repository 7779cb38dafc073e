//! Split WRITEs (`Endpoint::set_split_writes`): each packet of a multi-packet RDMA WRITE
//! leaves as a WRITE ONLY with its own RETH, so that a link joining equal-length packets
//! into super-frames can join them across messages. The peer's memory must end up exactly
//! as with FIRST/MIDDLE/LAST, with one ACK asked for per work request, through loss,
//! duplication and reordering too.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use ferroce_transport::testing::{connect, parse, Faults, QpOpts, Sim};
use ferroce_transport::{WcOpcode, WrOpcode};
use ferroce_wire::Opcode;

/// What the tap saw of one request packet from node 0.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    opcode: Opcode,
    ack_req: bool,
    /// RETH address (relative to the region's start), key and length.
    reth: Option<(u64, u32, u32)>,
    payload: usize,
}

fn tap_requests(sim: &mut Sim, base: u64) -> Rc<RefCell<Vec<Seen>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    sim.set_tap(Box::new(move |from, _, pkt| {
        if from == 0 {
            if let Some(p) = parse(pkt) {
                s.borrow_mut().push(Seen {
                    opcode: p.bth.opcode,
                    ack_req: p.bth.ack_req,
                    reth: p
                        .ext
                        .reth
                        .map(|r| (r.va.wrapping_sub(base), r.rkey, r.dma_len)),
                    payload: p.payload.len(),
                });
            }
        }
        true
    }));
    seen
}

#[test]
fn a_split_write_is_write_only_packets_with_one_ack_request_each_wr() {
    let mut sim = Sim::new(1, 2, false);
    sim.nodes[0].set_split_writes(true);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let data = pattern(5, 8192);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 16384]);
    let seen = tap_requests(&mut sim, dst.addr);
    // 4096 bytes (4 full packets), then 3000 (two full and a 952-byte one), then a WRITE
    // with immediate, which consumes a receive WQE and so stays one message.
    let (addr, rkey) = (dst.addr, dst.rkey);
    let w1 = rdma_wr(1, WrOpcode::RdmaWrite, sge(&src, 0, 4096), addr, rkey);
    let w2 = rdma_wr(
        2,
        WrOpcode::RdmaWrite,
        sge(&src, 4096, 3000),
        addr + 4096,
        rkey,
    );
    let imm = WrOpcode::RdmaWriteWithImm;
    let mut w3 = rdma_wr(3, imm, sge(&src, 0, 3000), addr + 8192, rkey);
    w3.imm_data = 7;
    post_recv(&mut sim, b, 9, vec![]);
    for w in [&w1, &w2, &w3] {
        sim.nodes[0].post_send(sim.now, a.qpn, w).unwrap();
    }
    let wa = wait_wcs(&mut sim, a, 3);
    assert_ok(&wa);
    let ids: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    assert!(wa.iter().all(|w| w.opcode == WcOpcode::RdmaWrite));
    let wb = wait_wcs(&mut sim, b, 1);
    assert_ok(&wb);
    assert_eq!((wb[0].wr_id, wb[0].imm_data), (9, 7));

    let mem = sim.nodes[1].mr_bytes(dst.lkey).unwrap();
    assert_eq!(&mem[..7096], &data[..7096]);
    assert_eq!(&mem[8192..11192], &data[..3000]);

    let only = |off: u64, len: u32, ack_req| Seen {
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        ack_req,
        reth: Some((off, dst.rkey, len)),
        payload: len as usize,
    };
    let mut want = vec![
        only(0, 1024, false),
        only(1024, 1024, false),
        only(2048, 1024, false),
        only(3072, 1024, true),
        only(4096, 1024, false),
        only(5120, 1024, false),
        only(6144, 952, true),
    ];
    want.push(Seen {
        opcode: Opcode::RC_RDMA_WRITE_FIRST,
        ack_req: false,
        reth: Some((8192, dst.rkey, 3000)),
        payload: 1024,
    });
    want.push(Seen {
        opcode: Opcode::RC_RDMA_WRITE_MIDDLE,
        ack_req: false,
        reth: None,
        payload: 1024,
    });
    want.push(Seen {
        opcode: Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        ack_req: true,
        reth: None,
        payload: 952,
    });
    assert_eq!(*seen.borrow(), want);
    // One ACK per work request at most, not one per packet.
    assert!(
        sim.nodes[1].counters().sent_pkts <= 3,
        "{:?}",
        sim.nodes[1].counters()
    );
}

#[test]
fn split_writes_land_exactly_through_loss_duplication_and_reordering() {
    for seed in 1..=4 {
        let mut sim = Sim::new(seed, 2, false);
        sim.nodes[0].set_split_writes(true);
        let o = QpOpts {
            timeout: 8,
            ..QpOpts::default()
        };
        let (a, b) = connect(&mut sim, 0, 1, &o);
        sim.set_all_faults(Faults {
            loss: 0.03,
            dup: 0.03,
            reorder: 0.05,
            jitter_ns: 20_000,
            ..Faults::default()
        });
        const SLOT: usize = 6000;
        const WRITES: usize = 24;
        let data = pattern(seed, SLOT * WRITES);
        let src = mr(&mut sim, a, data.clone());
        let dst = mr(&mut sim, b, vec![0; SLOT * WRITES]);
        // Lengths from 1 byte to just under 6 packets, each to its own slot, all posted
        // at once so that they go back to back.
        let lens: Vec<usize> = (0..WRITES).map(|i| 1 + (i * 1777) % (SLOT - 1)).collect();
        for (i, &len) in lens.iter().enumerate() {
            let at = (i * SLOT) as u64;
            let sg = sge(&src, at, len as u32);
            let w = rdma_wr(i as u64, WrOpcode::RdmaWrite, sg, dst.addr + at, dst.rkey);
            sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
        }
        let wa = wait_wcs(&mut sim, a, WRITES);
        assert_ok(&wa);
        assert_eq!(wa.len(), WRITES, "seed {seed}");
        let ids: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (0..WRITES as u64).collect::<Vec<_>>(), "seed {seed}");
        let mem = sim.nodes[1].mr_bytes(dst.lkey).unwrap();
        for (i, &len) in lens.iter().enumerate() {
            let at = i * SLOT;
            assert_eq!(
                &mem[at..at + len],
                &data[at..at + len],
                "seed {seed} WRITE {i}"
            );
            assert!(
                mem[at + len..at + SLOT].iter().all(|&x| x == 0),
                "seed {seed}: WRITE {i} wrote past its end"
            );
        }
        // The faults happened, and go-back-N repaired them.
        let c = sim.nodes[0].counters();
        assert!(
            sim.stats.lost > 0 && sim.stats.duplicated > 0 && sim.stats.reordered > 0,
            "seed {seed}: {:?}",
            sim.stats
        );
        assert!(c.completer_retry_err > 0, "seed {seed}: {c:?}");
    }
}

#[test]
fn uc_writes_are_never_split() {
    // A UC responder that loses a packet drops the rest of its message; split into
    // messages of their own, the rest would be written around the hole.
    let mut sim = Sim::new(3, 2, false);
    sim.nodes[0].set_split_writes(true);
    let o = QpOpts {
        qp_type: ferroce_transport::QpType::Uc,
        ..QpOpts::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let data = pattern(8, 3000);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 3000]);
    let seen = tap_requests(&mut sim, dst.addr);
    let w = rdma_wr(
        1,
        WrOpcode::RdmaWrite,
        sge(&src, 0, 3000),
        dst.addr,
        dst.rkey,
    );
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    sim.run_idle(std::time::Duration::from_millis(10));
    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap(), &data[..]);
    let ops: Vec<Opcode> = seen.borrow().iter().map(|s| s.opcode).collect();
    assert_eq!(
        ops,
        [
            Opcode::UC_RDMA_WRITE_FIRST,
            Opcode::UC_RDMA_WRITE_MIDDLE,
            Opcode::UC_RDMA_WRITE_LAST
        ]
    );
}

//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use ferroce_transport::testing::{drain_cq, parse, Side, Sim};
use ferroce_transport::{
    Access, MrInfo, RecvWr, SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode,
    MAX_DATAGRAM_LEN,
};
use ferroce_wire::{Opcode, Syndrome};

pub const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// Deterministic bytes for message `tag`.
pub fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Registers a region holding `bytes` on the side's node and PD.
pub fn mr(sim: &mut Sim, s: Side, bytes: Vec<u8>) -> MrInfo {
    sim.nodes[s.node]
        .reg_mr_with(s.pd, bytes, None, ALL)
        .expect("reg_mr")
}

pub fn sge(m: &MrInfo, off: u64, len: u32) -> Sge {
    Sge {
        addr: m.addr + off,
        length: len,
        lkey: m.lkey,
    }
}

pub fn send_wr(id: u64, op: WrOpcode, sg: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: op,
        sg_list: sg,
        flags: SendFlags::SIGNALED,
        ..Default::default()
    }
}

/// A signaled RDMA request (WRITE, WRITE with immediate, READ) of `sg` naming `addr`
/// under `rkey` on the peer.
pub fn rdma_wr(id: u64, op: WrOpcode, sg: Sge, addr: u64, rkey: u32) -> SendWr {
    SendWr {
        remote_addr: addr,
        rkey,
        ..send_wr(id, op, vec![sg])
    }
}

pub fn post_recv(sim: &mut Sim, s: Side, id: u64, sg: Vec<Sge>) {
    sim.nodes[s.node]
        .post_recv(
            sim.now,
            s.qpn,
            &RecvWr {
                wr_id: id,
                sg_list: sg,
            },
        )
        .expect("post_recv");
}

/// Runs until `n` completions arrived on `s` (collecting them) or 10 s of virtual time.
pub fn wait_wcs(sim: &mut Sim, s: Side, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    sim.run_until(Duration::from_secs(10), |sim| {
        got.extend(drain_cq(sim, s));
        got.len() >= n
    });
    got
}

pub fn assert_ok(wcs: &[WorkCompletion]) {
    for wc in wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
}

/// A datagram a node sent: (opcode, PSN, syndrome if any, payload).
pub type Sent = (Opcode, u32, Option<Syndrome>, Vec<u8>);

/// Everything `node` sends now, parsed.
pub fn drain_sent(sim: &mut Sim, node: usize) -> Vec<Sent> {
    let mut buf = vec![0; MAX_DATAGRAM_LEN];
    let mut out = Vec::new();
    while let Some(t) = sim.nodes[node].poll_transmit(sim.now, &mut buf) {
        let p = parse(&buf[..t.len]).expect("a node sends valid packets");
        out.push((
            p.bth.opcode,
            p.bth.psn.value(),
            p.ext.aeth.map(|a| a.syndrome),
            p.payload.to_vec(),
        ));
    }
    out
}

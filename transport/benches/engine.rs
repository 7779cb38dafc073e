//! Engine cost without I/O: two endpoints joined in memory, one 64 KiB RDMA WRITE per
//! iteration (post, then shuttle datagrams both ways until the completion arrives).
//!
//! * `rdma_write_64k/bytes/<mtu>` reports bytes/s of payload;
//! * `rdma_write_64k/packets/<mtu>` reports datagrams/s (requests plus ACKs), all on one
//!   core: both engines, ICRC generation and checking included.
//!
//! * `rdma_write_64k/idle_qps/<n>`: the same WRITE at MTU 1024 while each endpoint also
//!   holds `n` connected QPs with nothing to do, as a process of a large all-to-all job
//!   does: what the QPs that do not send cost the one that does.
//!
//! Run with `cargo bench -p ferroce-transport --bench engine`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferroce_transport::testing::{connect, QpOpts, Side, Sim};
use ferroce_transport::{
    Access, Instant, Mtu, SendFlags, SendWr, Sge, WorkCompletion, WrOpcode, MAX_DATAGRAM_LEN,
};

const LEN: u32 = 64 * 1024;

struct Pair {
    sim: Sim,
    a: Side,
    wr: SendWr,
    buf: Vec<u8>,
    wcs: Vec<WorkCompletion>,
    now: u64,
}

fn setup(mtu: Mtu, idle: usize) -> Pair {
    let mut sim = Sim::new(1, 2, false);
    let o = QpOpts {
        mtu,
        ..Default::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    for _ in 0..idle {
        connect(&mut sim, 0, 1, &o);
    }
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let src = sim.nodes[0]
        .reg_mr_with(a.pd, vec![0x5a; LEN as usize], None, all)
        .unwrap();
    let dst = sim.nodes[1].reg_mr(b.pd, LEN as usize, all).unwrap();
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        sg_list: vec![Sge {
            addr: src.addr,
            length: LEN,
            lkey: src.lkey,
        }],
        flags: SendFlags::SIGNALED,
        remote_addr: dst.addr,
        rkey: dst.rkey,
        ..Default::default()
    };
    Pair {
        sim,
        a,
        wr,
        buf: vec![0; MAX_DATAGRAM_LEN],
        wcs: Vec::new(),
        now: 0,
    }
}

/// One WRITE, start to completion; returns the datagrams exchanged.
fn one_write(p: &mut Pair) -> u64 {
    p.sim.nodes[0]
        .post_send(Instant::from_nanos(p.now), p.a.qpn, &p.wr)
        .unwrap();
    let mut pkts = 0;
    loop {
        p.now += 1000;
        let now = Instant::from_nanos(p.now);
        let mut moved = false;
        for (from, to) in [(0, 1), (1, 0)] {
            while let Some(t) = p.sim.nodes[from].poll_transmit(now, &mut p.buf) {
                p.sim.nodes[to].handle_packet(now, black_box(&p.buf[..t.len]));
                pkts += 1;
                moved = true;
            }
        }
        p.wcs.clear();
        if p.sim.nodes[0].poll_cq(p.a.cq, &mut p.wcs, 4) > 0 {
            return pkts;
        }
        assert!(moved, "stalled");
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rdma_write_64k");
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let mut p = setup(mtu, 0);
        let per_iter = one_write(&mut p);
        g.throughput(Throughput::Bytes(u64::from(LEN)));
        g.bench_with_input(BenchmarkId::new("bytes", mtu.bytes()), &(), |b, _| {
            b.iter(|| one_write(&mut p))
        });
        g.throughput(Throughput::Elements(per_iter));
        g.bench_with_input(BenchmarkId::new("packets", mtu.bytes()), &(), |b, _| {
            b.iter(|| one_write(&mut p))
        });
    }
    for idle in [0, 1000] {
        let mut p = setup(Mtu::Mtu1024, idle);
        one_write(&mut p);
        g.throughput(Throughput::Bytes(u64::from(LEN)));
        g.bench_with_input(BenchmarkId::new("idle_qps", idle), &(), |b, _| {
            b.iter(|| one_write(&mut p))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The whole device stack without a kernel: verbs API, driver threads, in-memory link,
//! transport. Measures what the driver adds on top of the transport engine benchmark.
//!
//! cargo bench --bench verbs_memory

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroce::verbs::*;

struct Pair {
    _ctx: (Context, Context),
    qp: QueuePair,
    cq: CompletionQueue,
    src: MemoryRegion,
    dst: MemoryRegion,
    _peer: (QueuePair, CompletionQueue),
}

fn pair(mtu: Mtu, len: usize) -> Pair {
    let (a, b) = Context::memory_pair().unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(1024).unwrap(), b.create_cq(1024).unwrap());
    let src = pa.reg_mr(len, Access::LOCAL_WRITE).unwrap();
    let dst = pb
        .reg_mr(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let cap = QpCap {
        max_send_wr: 256,
        ..QpCap::default()
    };
    let qa = pa.create_qp(&ca, &ca, QpType::Rc, cap).unwrap();
    let qb = pb.create_qp(&cb, &cb, QpType::Rc, cap).unwrap();
    let mut p = RcPath::new(b.gid(0).unwrap(), qb.qpn(), 1, 2);
    p.mtu = mtu;
    qa.connect(&p).unwrap();
    let mut p = RcPath::new(a.gid(0).unwrap(), qa.qpn(), 2, 1);
    p.mtu = mtu;
    qb.connect(&p).unwrap();
    Pair {
        _ctx: (a, b),
        qp: qa,
        cq: ca,
        src,
        dst,
        _peer: (qb, cb),
    }
}

/// `iters` WRITEs of `len` bytes with up to `depth` outstanding.
fn stream(p: &Pair, len: usize, depth: usize, iters: u64) -> Duration {
    let wr = wr::rdma_write(0, p.src.sge(0, len), p.dst.addr(), p.dst.rkey());
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = Vec::new();
    while done < iters {
        while posted < iters && posted - done < depth as u64 {
            p.qp.post_send(&wr).unwrap();
            posted += 1;
        }
        let wc = p.cq.wait_one(Duration::from_secs(10)).expect("completion");
        assert_eq!(wc.status, WcStatus::Success);
        done += 1;
        wcs.clear();
        done += p.cq.poll(&mut wcs, 64) as u64;
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_64k");
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let p = pair(mtu, 65536);
        g.throughput(Throughput::Bytes(65536));
        g.bench_function(format!("mtu{}", mtu.bytes()), |b| {
            b.iter_custom(|n| stream(&p, 65536, 16, n))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("write_2b_latency");
    let p = pair(Mtu::Mtu1024, 64);
    g.bench_function("depth1", |b| b.iter_custom(|n| stream(&p, 2, 1, n)));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);

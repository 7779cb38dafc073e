//! Resident memory per QP: opens a device pair on the in-memory wire, creates N connected RC
//! QP pairs (ibv-like default capabilities: 128 send and 128 receive WRs, 4 SGEs), moves
//! a 4 KiB RDMA WRITE over each, and prints the process's resident set size before and
//! after, per QP. No privileges needed.
//!
//!   cargo run --release --example qp_memory -- 1 100 10000
//!
//! Each N runs in a fresh child process so that the figures do not share an allocator
//! history. Memory per QP is bounded: queues are bounded by the QP's capabilities and
//! nothing is allocated per packet in flight beyond them.

use std::process::Command;
use std::time::Duration;

use ferroce::verbs::{wr, Access, Context, QpCap, QpType, RcPath};

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

fn child(n: usize) {
    let (a, b) = Context::memory_pair().expect("memory pair");
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(4096).unwrap(), b.create_cq(4096).unwrap());
    let mr_a = pd_a.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mr_b = pd_b
        .reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let before = rss_kib();
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        let qa = pd_a
            .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
            .unwrap();
        let qb = pd_b
            .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
            .unwrap();
        qa.connect(&RcPath::new(b.gid(0).unwrap(), qb.qpn(), 0, 0))
            .unwrap();
        qb.connect(&RcPath::new(a.gid(0).unwrap(), qa.qpn(), 0, 0))
            .unwrap();
        qps.push((qa, qb));
    }
    for (i, (qa, _)) in qps.iter().enumerate() {
        qa.post_send(&wr::rdma_write(
            i as u64,
            mr_a.sge(0, 4096),
            mr_b.addr(),
            mr_b.rkey(),
        ))
        .unwrap();
        cq_a.wait_one(Duration::from_secs(30)).expect("completion");
    }
    let after = rss_kib();
    let per_qp = (after.saturating_sub(before)) as f64 * 1024.0 / (2 * n) as f64;
    println!(
        "| {n:>6} | {:>8} | {before:>10} | {after:>10} | {per_qp:>12.0} |",
        2 * n
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(n) = args.first().and_then(|a| a.strip_prefix("--child=")) {
        child(n.parse().expect("N"));
        return;
    }
    let ns: Vec<String> = if args.is_empty() {
        vec!["1".into(), "100".into(), "10000".into()]
    } else {
        args
    };
    println!("| QP pairs | QPs open | RSS before (KiB) | RSS after (KiB) | bytes per QP |");
    println!("|----------|----------|------------------|-----------------|--------------|");
    let exe = std::env::current_exe().expect("current exe");
    for n in ns {
        let out = Command::new(&exe)
            .arg(format!("--child={n}"))
            .output()
            .expect("run child");
        if !out.status.success() {
            eprintln!("N={n} failed: {}", String::from_utf8_lossy(&out.stderr));
            std::process::exit(1);
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

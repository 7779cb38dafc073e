//! DCQCN convergence: flows from several hosts share one 10 Gb/s bottleneck, a switch
//! queue that marks CE (RED-like) above a threshold and tail-drops when its buffer is
//! full; every host link is 10 Gb/s too, so the senders can overload it 4:1. With DCQCN
//! (ferroce's defaults) the flows converge to a fair share of a busy link with no drops
//! and no go-back-N; without it, the same setup overflows the buffer and retransmits.
//!
//! `cargo test -p ferroce-transport --test dcqcn_convergence -- --nocapture` prints the
//! figures.

use std::time::Duration;

use ferroce_transport::testing::{connect, MarkingQueue, QpOpts, QueueStats, Side, Sim};
use ferroce_transport::{Access, DcqcnConfig, Instant, Mtu, SendFlags, SendWr, Sge, WrOpcode};

/// 10 Gb/s in bytes per second: every host link and the bottleneck.
const LINK: u64 = 1_250_000_000;
/// Each flow keeps 16 RDMA WRITEs of 64 KiB posted.
const MSG: u32 = 64 * 1024;
const MS: u64 = 1_000_000;

#[derive(Debug, Clone)]
struct Scenario {
    seed: u64,
    flows: usize,
    /// Flow i starts at i × stagger.
    stagger_ns: u64,
    /// Measured from `settle_ns` to `end_ns`.
    settle_ns: u64,
    end_ns: u64,
    queue: MarkingQueue,
    dcqcn: Option<DcqcnConfig>,
}

/// Four flows starting 2 ms apart; the window is the second 100 ms. The switch: 512 KiB
/// of buffer, marking from 20 KiB (probability rising to 10 % at 100 KiB, all above).
fn scenario(dcqcn: Option<DcqcnConfig>) -> Scenario {
    Scenario {
        seed: 0xdc9c,
        flows: 4,
        stagger_ns: 2 * MS,
        settle_ns: 100 * MS,
        end_ns: 200 * MS,
        queue: MarkingQueue {
            to: 0, // the receiver, set by `run`
            rate: LINK,
            buffer: 512 * 1024,
            kmin: 20 * 1024,
            kmax: 100 * 1024,
            pmax: 0.1,
        },
        dcqcn,
    }
}

#[derive(Debug)]
#[allow(dead_code)] // Some fields are only printed.
struct Outcome {
    /// Bytes out of the bottleneck per flow during the window.
    window_bytes: Vec<u64>,
    /// Per flow during the window, Gb/s.
    window_gbps: Vec<f64>,
    utilisation: f64,
    jain: f64,
    /// Queue overflow drops before and during the window.
    drops_before: u64,
    drops_after: u64,
    /// Packets the senders sent again (go-back-N and RNR), and go-back-N rounds.
    retransmitted: u64,
    retries: u64,
    ack_timeouts: u64,
    marked: u64,
    cnps_sent: u64,
    cnps_handled: u64,
    max_backlog: u64,
    /// DCQCN's current rates (Mb/s) of the flows at the end.
    rates: Vec<f64>,
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let s2: f64 = x.iter().map(|&v| (v as f64).powi(2)).sum();
    s * s / (x.len() as f64 * s2)
}

fn run(sc: &Scenario) -> Outcome {
    let n = sc.flows;
    let rx = n; // receiver node
    let mut sim = Sim::new(sc.seed, n + 1, false);
    for node in 0..=n {
        sim.set_link_rate(node, Some(LINK));
        if let Some(cfg) = &sc.dcqcn {
            sim.nodes[node].set_dcqcn(cfg.clone()).unwrap();
        }
    }
    sim.set_marking_queue(MarkingQueue { to: rx, ..sc.queue });
    let o = QpOpts {
        mtu: Mtu::Mtu4096,
        timeout: 14,
        ..QpOpts::default()
    };
    // (sender side, receiver side, source address, lkey, destination address)
    let mut flows: Vec<(Side, Side, u64, u32, u64)> = Vec::new();
    let mut rkeys = Vec::new();
    for i in 0..n {
        let (a, b) = connect(&mut sim, i, rx, &o);
        let src = sim.nodes[i]
            .reg_mr_with(a.pd, vec![i as u8; 1 << 20], None, Access::empty())
            .unwrap();
        let dst = sim.nodes[rx]
            .reg_mr(b.pd, 1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        flows.push((a, b, src.addr, src.lkey, dst.addr));
        rkeys.push(dst.rkey);
    }
    let mut posted = vec![0u64; n];
    let mut top_up = |sim: &mut Sim| {
        let now = sim.now.as_nanos();
        for (i, &(a, _, saddr, lkey, daddr)) in flows.iter().enumerate() {
            if now < i as u64 * sc.stagger_ns {
                continue;
            }
            while sim.nodes[i].sq_outstanding(a.qpn).unwrap() < 16 {
                let off = (posted[i] % 16) * u64::from(MSG);
                let wr = SendWr {
                    wr_id: posted[i],
                    opcode: WrOpcode::RdmaWrite,
                    sg_list: vec![Sge {
                        addr: saddr + off,
                        length: MSG,
                        lkey,
                    }],
                    flags: SendFlags::empty(),
                    remote_addr: daddr + off,
                    rkey: rkeys[i],
                    ..Default::default()
                };
                sim.nodes[i].post_send(sim.now, a.qpn, &wr).unwrap();
                posted[i] += 1;
            }
        }
    };
    // Step until `t`, topping the send queues up as they drain; flows start on time.
    let mut run_to = |sim: &mut Sim, t: u64| {
        let end = Instant::from_nanos(t);
        let mut next_top_up = 0;
        sim.run_until(
            Duration::from_nanos(t.saturating_sub(sim.now.as_nanos())),
            |s| {
                if s.now.as_nanos() >= next_top_up {
                    next_top_up = s.now.as_nanos() + 1_000;
                    top_up(s);
                }
                s.now >= end
            },
        );
    };
    run_to(&mut sim, sc.settle_ns);
    let before: QueueStats = sim.queue_stats().unwrap().clone();
    run_to(&mut sim, sc.end_ns);
    let after = sim.queue_stats().unwrap().clone();
    let window_bytes: Vec<u64> = (0..n)
        .map(|i| after.bytes_out[i] - before.bytes_out[i])
        .collect();
    let window_s = (sc.end_ns - sc.settle_ns) as f64 / 1e9;
    let utilisation = window_bytes.iter().sum::<u64>() as f64 / (LINK as f64 * window_s);
    let c = |f: &dyn Fn(&ferroce_transport::Counters) -> u64| -> u64 {
        sim.nodes.iter().map(|e| f(e.counters())).sum()
    };
    Outcome {
        jain: jain(&window_bytes),
        window_gbps: window_bytes
            .iter()
            .map(|&b| b as f64 * 8.0 / window_s / 1e9)
            .collect(),
        window_bytes,
        utilisation,
        drops_before: before.dropped,
        drops_after: after.dropped - before.dropped,
        retransmitted: c(&|c| c.retransmitted_pkts),
        retries: c(&|c| c.completer_retry_err),
        ack_timeouts: c(&|c| c.ack_timeouts),
        marked: after.marked,
        cnps_sent: c(&|c| c.np_cnp_sent),
        cnps_handled: c(&|c| c.rp_cnp_handled),
        max_backlog: after.max_backlog,
        rates: flows
            .iter()
            .map(|(a, ..)| {
                sim.nodes[a.node]
                    .qp_rate(a.qpn, sim.now)
                    .map_or(f64::NAN, |s| s.current_rate)
            })
            .collect(),
    }
}

#[test]
fn with_dcqcn_flows_converge_to_a_fair_share_of_a_busy_link_without_drops() {
    let cfg = DcqcnConfig {
        enabled: true,
        line_rate: 10_000,
        ..DcqcnConfig::default()
    };
    let on = run(&scenario(Some(cfg)));
    eprintln!("DCQCN on: {on:#?}");
    assert!(on.utilisation >= 0.90, "utilisation {}", on.utilisation);
    assert!(on.jain >= 0.95, "Jain fairness {}", on.jain);
    assert_eq!(on.drops_after, 0, "queue overflow drops after convergence");
    assert_eq!(on.drops_before, 0, "queue overflow drops while converging");
    assert_eq!((on.retransmitted, on.retries), (0, 0), "go-back-N");
    // DCQCN did the work: the switch marked, receivers sent CNPs, senders reacted and
    // run below line rate.
    assert!(on.marked > 0 && on.cnps_sent > 0 && on.cnps_handled == on.cnps_sent);
    assert!(on.rates.iter().all(|&r| r < 5_000.0), "{:?}", on.rates);
}

#[test]
fn without_dcqcn_the_same_setup_overflows_and_retransmits() {
    let off = run(&scenario(None));
    eprintln!("DCQCN off: {off:#?}");
    assert!(off.drops_before + off.drops_after > 0);
    assert!(off.retransmitted > 0 && off.retries > 0);
    assert_eq!(
        (off.marked, off.cnps_sent),
        (0, 0),
        "not ECN-capable: never marked"
    );
}

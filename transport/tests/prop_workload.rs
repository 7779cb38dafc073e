//! Random RC workloads over random fault schedules, checked against a simple model:
//! every operation completes exactly once, in posting order, with byte-exact data;
//! atomics take effect exactly once; retransmissions stay bounded.
//!
//! The test prints the seed it ran with (`proptest seed N`, shown by `cargo test` when it
//! fails, or always with `-- --nocapture`). To replay a failure:
//!
//! ```sh
//! PROPTEST_RNG_SEED=N cargo test -p ferroce-transport --test prop_workload
//! ```
//!
//! Proptest also records failing cases in `prop_workload.proptest-regressions` next to this
//! file (commit it) and re-runs them first.

mod common;

use std::time::Duration;

use common::*;
use ferroce_transport::testing::{connect, drain_cq, Faults, QpOpts, Side, Sim};
use ferroce_transport::{Mtu, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// This file's proptest configuration: `cases` cases drawn from one seed, printed so that a
/// failure can be replayed. The seed is `PROPTEST_RNG_SEED` when set, else a fresh one from
/// the OS; `cargo test` shows a failing test's stderr, seed included.
fn config(cases: u32) -> ProptestConfig {
    let seed = match std::env::var("PROPTEST_RNG_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .expect("PROPTEST_RNG_SEED must be a decimal u64"),
        Err(_) => {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        }
    };
    eprintln!("proptest seed {seed} (replay: PROPTEST_RNG_SEED={seed})");
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        ..ProptestConfig::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwp,
}

#[derive(Debug, Clone)]
struct Op {
    qp: usize,
    kind: Kind,
    len: u32,
    arg: u64,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Send),
        Just(Kind::SendImm),
        Just(Kind::Write),
        Just(Kind::WriteImm),
        Just(Kind::Read),
        Just(Kind::FetchAdd),
        Just(Kind::CmpSwp),
    ]
}

fn size() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0u32..=3000,
        3 => 3000u32..=40_000,
        1 => 40_000u32..=(1 << 20),
    ]
}

fn op(nqp: usize) -> impl Strategy<Value = Op> {
    (0..nqp, kind(), size(), any::<u64>()).prop_map(|(qp, kind, len, arg)| Op {
        qp,
        kind,
        len,
        arg: arg % 4,
    })
}

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    mtu: Mtu,
    nqp: usize,
    psn: [u32; 2],
    faults: Faults,
    ops: Vec<Op>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop::sample::select(Mtu::ALL.to_vec()),
        1usize..=3,
        prop_oneof![Just(0xff_fff0u32), 0u32..(1 << 24)],
        any::<u32>(),
        (0.0f64..0.06, 0.0f64..0.04, 0.0f64..0.15, 0.0f64..0.02),
        0u64..6_000,
    )
        .prop_flat_map(
            |(seed, mtu, nqp, psn, psn2, (loss, dup, reorder, corrupt), jitter)| {
                prop::collection::vec(op(nqp), 1..24).prop_map(move |mut ops| {
                    // Cap the bytes of a case so the suite stays fast in debug builds.
                    let mut total = 0u64;
                    for o in &mut ops {
                        if total + u64::from(o.len) > 1_048_576 {
                            o.len %= 4096;
                        }
                        total += u64::from(o.len);
                    }
                    Case {
                        seed,
                        mtu,
                        nqp,
                        psn: [psn, psn2 & 0xff_ffff],
                        faults: Faults {
                            loss,
                            dup,
                            reorder,
                            corrupt,
                            delay_ns: 2_000,
                            jitter_ns: jitter,
                        },
                        ops,
                    }
                })
            },
        )
}

/// What one QP pair must end up with.
struct Plan {
    a: Side,
    b: Side,
    /// (wr_id, expected send WC opcode, byte_len)
    sends: Vec<(u64, WcOpcode, u32)>,
    /// (recv wr_id, opcode, byte_len, imm, B buffer lkey/offset, expected bytes)
    recvs: Vec<(u64, WcOpcode, u32, Option<u32>)>,
    checks_b: Vec<(u32, usize, Vec<u8>)>,
    checks_a: Vec<(u32, usize, Vec<u8>)>,
}

fn run(c: &Case) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(c.seed, 2, c.seed.is_multiple_of(2));
    // Half the cases split their WRITEs into WRITE ONLY packets, as over a GSO link.
    for node in &mut sim.nodes {
        node.set_split_writes(c.seed % 4 < 2);
    }
    sim.set_all_faults(c.faults);
    let o = QpOpts {
        mtu: c.mtu,
        psn: c.psn,
        timeout: 6,
        ..Default::default()
    };
    let mut plans = Vec::new();
    for _ in 0..c.nqp {
        let (a, b) = connect(&mut sim, 0, 1, &o);
        plans.push(Plan {
            a,
            b,
            sends: vec![],
            recvs: vec![],
            checks_b: vec![],
            checks_a: vec![],
        });
    }
    let mut atomic_word = vec![0u64; c.nqp];
    let mut wr_id = 0u64;
    for (i, op) in c.ops.iter().enumerate() {
        let p = &mut plans[op.qp];
        let (a, b) = (p.a, p.b);
        wr_id += 1;
        let len = op.len;
        let data = pattern(c.seed ^ (i as u64) << 32, len as usize);
        match op.kind {
            Kind::Send | Kind::SendImm => {
                let src = mr(&mut sim, a, data.clone());
                let dst = mr(&mut sim, b, vec![0; len as usize + 16]);
                post_recv(&mut sim, b, 1000 + wr_id, vec![sge(&dst, 0, len + 16)]);
                let opc = if op.kind == Kind::Send {
                    WrOpcode::Send
                } else {
                    WrOpcode::SendWithImm
                };
                let mut wr = send_wr(wr_id, opc, vec![sge(&src, 0, len)]);
                wr.imm_data = wr_id as u32;
                sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
                p.sends.push((wr_id, WcOpcode::Send, len));
                let imm = (op.kind == Kind::SendImm).then_some(wr_id as u32);
                p.recvs.push((1000 + wr_id, WcOpcode::Recv, len, imm));
                p.checks_b.push((dst.lkey, 0, data));
            }
            Kind::Write | Kind::WriteImm => {
                let src = mr(&mut sim, a, data.clone());
                let dst = mr(&mut sim, b, vec![0; len as usize + 8]);
                let opc = if op.kind == Kind::Write {
                    WrOpcode::RdmaWrite
                } else {
                    WrOpcode::RdmaWriteWithImm
                };
                let mut wr = send_wr(wr_id, opc, vec![sge(&src, 0, len)]);
                wr.remote_addr = dst.addr + 8;
                wr.rkey = dst.rkey;
                wr.imm_data = !(wr_id as u32);
                if op.kind == Kind::WriteImm {
                    post_recv(&mut sim, b, 1000 + wr_id, vec![]);
                    p.recvs.push((
                        1000 + wr_id,
                        WcOpcode::RecvRdmaWithImm,
                        len,
                        Some(!(wr_id as u32)),
                    ));
                }
                sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
                p.sends.push((wr_id, WcOpcode::RdmaWrite, len));
                let mut expect = vec![0u8; 8];
                expect.extend_from_slice(&data);
                p.checks_b.push((dst.lkey, 0, expect));
            }
            Kind::Read => {
                let src = mr(&mut sim, b, data.clone());
                let dst = mr(&mut sim, a, vec![0; len as usize]);
                let mut wr = send_wr(wr_id, WrOpcode::RdmaRead, vec![sge(&dst, 0, len)]);
                wr.remote_addr = src.addr;
                wr.rkey = src.rkey;
                sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
                p.sends.push((wr_id, WcOpcode::RdmaRead, len));
                p.checks_a.push((dst.lkey, 0, data));
            }
            Kind::FetchAdd | Kind::CmpSwp => {
                // Every atomic of a QP hits the same word of a per-QP region.
                let word = if let Some((k, _, _)) =
                    p.checks_b.iter().find(|(_, off, _)| *off == usize::MAX)
                {
                    *k
                } else {
                    let m = mr(&mut sim, b, vec![0; 8]);
                    p.checks_b.push((m.lkey, usize::MAX, vec![]));
                    m.lkey
                };
                let winfo = sim.nodes[1].mr_info(word).unwrap();
                let res = mr(&mut sim, a, vec![0xee; 8]);
                let cur = atomic_word[op.qp];
                let (opc, wc_op, next) = if op.kind == Kind::FetchAdd {
                    (
                        WrOpcode::AtomicFetchAdd,
                        WcOpcode::FetchAdd,
                        cur.wrapping_add(op.arg + 1),
                    )
                } else {
                    let hit = op.arg % 2 == 0;
                    (
                        WrOpcode::AtomicCmpSwp,
                        WcOpcode::CompSwap,
                        if hit { cur + 100 } else { cur },
                    )
                };
                let mut wr = send_wr(wr_id, opc, vec![sge(&res, 0, 8)]);
                wr.remote_addr = winfo.addr;
                wr.rkey = winfo.rkey;
                if op.kind == Kind::FetchAdd {
                    wr.compare_add = op.arg + 1;
                } else {
                    wr.compare_add = if op.arg % 2 == 0 { cur } else { cur ^ 1 };
                    wr.swap = cur + 100;
                }
                sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
                atomic_word[op.qp] = next;
                p.sends.push((wr_id, wc_op, 8));
                p.checks_a.push((res.lkey, 0, cur.to_le_bytes().to_vec()));
            }
        }
    }
    let want_a: usize = plans.iter().map(|p| p.sends.len()).sum();
    let want_b: usize = plans.iter().map(|p| p.recvs.len()).sum();
    let mut got: Vec<Vec<WorkCompletion>> = vec![vec![]; c.nqp];
    let mut got_b: Vec<Vec<WorkCompletion>> = vec![vec![]; c.nqp];
    let done = sim.run_until(Duration::from_secs(120), |sim| {
        for (i, p) in plans.iter().enumerate() {
            got[i].extend(drain_cq(sim, p.a));
            got_b[i].extend(drain_cq(sim, p.b));
        }
        got.iter().map(Vec::len).sum::<usize>() >= want_a
            && got_b.iter().map(Vec::len).sum::<usize>() >= want_b
    });
    prop_assert!(
        done,
        "seed {}: timed out: {} of {} send WCs, {} of {} recv WCs, sim {:?}",
        c.seed,
        got.iter().map(Vec::len).sum::<usize>(),
        want_a,
        got_b.iter().map(Vec::len).sum::<usize>(),
        want_b,
        sim.stats
    );
    // Let stray duplicates drain: nothing may complete twice.
    sim.set_all_faults(Faults::default());
    sim.run_idle(Duration::from_secs(5));
    for (i, p) in plans.iter().enumerate() {
        got[i].extend(drain_cq(&mut sim, p.a));
        got_b[i].extend(drain_cq(&mut sim, p.b));
        prop_assert_eq!(
            got[i].len(),
            p.sends.len(),
            "seed {}: send WCs of QP {}",
            c.seed,
            i
        );
        for (wc, (id, opc, len)) in got[i].iter().zip(&p.sends) {
            prop_assert_eq!(wc.status, WcStatus::Success, "seed {}: {:?}", c.seed, wc);
            prop_assert_eq!(wc.wr_id, *id, "seed {}: completion order", c.seed);
            prop_assert_eq!(wc.opcode, *opc);
            prop_assert_eq!(wc.byte_len, *len);
        }
        prop_assert_eq!(
            got_b[i].len(),
            p.recvs.len(),
            "seed {}: recv WCs of QP {}",
            c.seed,
            i
        );
        for (wc, (id, opc, len, imm)) in got_b[i].iter().zip(&p.recvs) {
            prop_assert_eq!(wc.status, WcStatus::Success, "seed {}: {:?}", c.seed, wc);
            prop_assert_eq!(wc.wr_id, *id);
            prop_assert_eq!(wc.opcode, *opc);
            prop_assert_eq!(wc.byte_len, *len);
            if let Some(imm) = imm {
                prop_assert_eq!(wc.imm_data, *imm);
            }
        }
        for (lkey, off, bytes) in &p.checks_b {
            if *off == usize::MAX {
                let m = sim.nodes[1].mr_bytes(*lkey).unwrap();
                prop_assert_eq!(
                    u64::from_le_bytes(m.try_into().unwrap()),
                    atomic_word[i],
                    "seed {}: atomics must take effect exactly once",
                    c.seed
                );
                continue;
            }
            let m = sim.nodes[1].mr_bytes(*lkey).unwrap();
            prop_assert!(
                m[*off..*off + bytes.len()] == bytes[..],
                "seed {}: B data mismatch",
                c.seed
            );
        }
        for (lkey, off, bytes) in &p.checks_a {
            let m = sim.nodes[0].mr_bytes(*lkey).unwrap();
            prop_assert!(
                m[*off..*off + bytes.len()] == bytes[..],
                "seed {}: A data mismatch",
                c.seed
            );
        }
    }
    // Retransmissions: go-back-N may resend up to a window per fault event.
    let faults = sim.stats.lost + sim.stats.corrupted + sim.stats.duplicated + sim.stats.reordered;
    let retx =
        sim.nodes[0].counters().retransmitted_pkts + sim.nodes[1].counters().retransmitted_pkts;
    prop_assert!(
        retx <= (faults + 1) * 2 * 128,
        "seed {}: {} retransmissions for {} fault events",
        c.seed,
        retx,
        faults
    );
    if faults == 0 {
        prop_assert_eq!(retx, 0, "seed {}: clean network retransmitted", c.seed);
    }
    prop_assert_eq!(
        sim.nodes[0].counters().rx_icrc_err + sim.nodes[1].counters().rx_icrc_err,
        sim.stats.corrupted,
        "seed {}: every corrupted copy must fail the ICRC",
        c.seed
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(16))]
    #[test]
    fn random_rc_workloads_complete_exactly_once(c in case()) {
        run(&c)?;
    }
}

//! `ferroce probe`: a RoCE peer that speaks perfect RoCE, then says exactly the wrong
//! thing at the right moment and checks the answer. It tests *other* stacks (a NIC, rxe,
//! an FPGA design) as well as ferroce: it reaches the target through a program the target
//! already runs, takes over the connection's PSN and key state, and runs cases written as
//! data (TOML, see [`cases`]), each with the answer the IB spec requires.
//!
//! Layout: [`cases`] (the file format), [`expr`] (its arithmetic), [`peer`] (raw frames
//! on a link), [`runner`] (one case on one connection), [`target`] (reaching a target
//! program), [`route`] (the target's RoCE address, as its program announces it),
//! [`local`] (ferroce itself in process), [`report`] (the verdict table).

pub mod cases;
pub mod expr;
pub mod fuzz;
pub mod local;
pub mod peer;
pub mod report;
pub mod repro;
pub mod route;
pub mod runner;
pub mod target;

use std::path::PathBuf;
use std::sync::Arc;

use ferroce::link::Link;

use cases::Case;
use peer::Peer;
use route::{Learnt, Route};
use runner::{Outcome, Verdict};
use target::{Mine, Target};

/// How a suite runs.
#[derive(Debug, Clone, Default)]
pub struct SuiteOptions {
    /// Write each case's frames to `DIR/NAME.pcap`.
    pub pcap_dir: Option<PathBuf>,
    /// The target's stack (`rxe`, `ferroce`, ...): deviations a case documents for it are
    /// reported as KNOWN instead of FAIL.
    pub stack: Option<String>,
    /// Also run the cases known to crash that stack.
    pub include_crashing: bool,
}

/// Runs `cases` one by one, each on a fresh connection to `target`; `progress` sees each
/// outcome as it comes.
pub fn run_suite(
    cases: &[Case],
    target: &mut dyn Target,
    link: &Arc<dyn Link>,
    route: impl Into<Route>,
    opts: &SuiteOptions,
    progress: &mut dyn FnMut(&Case, &Outcome),
) -> Vec<Outcome> {
    let mut route = route.into();
    let mut out = Vec::with_capacity(cases.len());
    for case in cases {
        let o = run_one(case, target, link, &mut route, opts);
        progress(case, &o);
        out.push(o);
    }
    out
}

fn run_one(
    case: &Case,
    target: &mut dyn Target,
    link: &Arc<dyn Link>,
    route: &mut Route,
    opts: &SuiteOptions,
) -> Outcome {
    // A case that ends before its first step.
    let early = |verdict: Verdict| Outcome {
        name: case.name.clone(),
        verdict,
        lines: Vec::new(),
        failed_step: None,
        answers: Vec::new(),
    };
    if let Some(stack) = &opts.stack {
        if let Some((_, why)) = case.crashes.iter().find(|(s, _)| s == stack) {
            if !opts.include_crashing {
                return early(Verdict::Skip(format!(
                    "known to crash {stack} (--include-crashing runs it): {why}"
                )));
            }
        }
    }
    if !target.offers().contains(&case.needs) {
        return early(Verdict::Skip(format!(
            "needs a target with {} rights/behaviour",
            case.needs.name()
        )));
    }
    let (mut peer, connected) = match connect_fresh(target, link, route, case.needs) {
        Ok(c) => c,
        Err(e) => return early(Verdict::Error(e)),
    };
    let mut o = runner::run_case(case, &mut peer, connected.remote);
    if let Some(close) = connected.close {
        close();
    }
    if o.verdict == Verdict::Fail {
        if let Some(stack) = &opts.stack {
            if let Some((_, why)) = case.known.iter().find(|(s, _)| s == stack) {
                o.verdict = Verdict::Known(why.clone());
            }
        }
    }
    if let Some(dir) = &opts.pcap_dir {
        let path = dir.join(format!("{}.pcap", case.name));
        if let Err(e) = peer.write_pcap(&path, 0) {
            o.lines.push(runner::Line {
                step: 0,
                what: "note",
                text: format!("cannot write {}: {e}", path.display()),
            });
        }
    }
    o
}

/// A fresh QP of the target connected to a fresh raw endpoint of the probe (what each
/// case, fuzz round and health check starts from); frames left over from earlier
/// connections are drained. A target program that sends of its own accord (an
/// `ib_read_bw` client, in-process or reached out of band) may have sent by then: the
/// drain keeps what came to the new QP for the case.
///
/// The target's program announces its RoCE address (its GID) in the exchange; `route`
/// learns it, and when the probe's own GID had to change to the target's IP version the
/// connection is made once more with the new one.
pub(crate) fn connect_fresh(
    target: &mut dyn Target,
    link: &Arc<dyn Link>,
    route: &mut Route,
    needs: cases::Needs,
) -> Result<(Peer, target::Connected), String> {
    for _ in 0..2 {
        let qpn = pick_qpn(link.as_ref());
        let peer = Peer::new(link.clone(), route.addr, qpn);
        let mine = Mine {
            qpn,
            psn: random24(),
            gid: peer.gid(),
        };
        let mut connected = target.connect(mine, needs)?;
        let mut peer = match route.learn(connected.gid)? {
            Learnt::Same => peer,
            Learnt::Target => Peer::new(link.clone(), route.addr, qpn),
            Learnt::Own => {
                if let Some(close) = connected.close.take() {
                    close();
                }
                continue;
            }
        };
        let _ = peer.drain();
        return Ok((peer, connected));
    }
    Err(format!(
        "the target announced a GID of another IP version than {} twice",
        route.addr.ip
    ))
}

/// A QP number the link delivers to this process: on a shared interface, in a block this
/// process owns (claimed on first use, as the driver claims one for its first QP).
fn pick_qpn(link: &dyn Link) -> u32 {
    use ferroce::transport::QPN_BLOCK_BITS;
    let r = random24();
    let block = match link.qpn_blocks() {
        Some(blocks) if !blocks.is_empty() => Some(blocks[0]),
        Some(_) => link.claim_qpn_block().ok().flatten(),
        None => None,
    };
    match block {
        Some(b) => {
            let low = (r & ((1 << QPN_BLOCK_BITS) - 1)).max(2);
            (u32::from(b) << QPN_BLOCK_BITS) | low
        }
        None => (r & 0xff_ffff).max(2),
    }
}

/// A random 48-bit seed (for `probe fuzz` without `--seed`).
pub fn random_seed() -> u64 {
    u64::from(random24()) << 24 | u64::from(random24())
}

/// 24 random bits (a PSN, a QP number): the OS's random source, or, should it fail, a
/// hasher's random keys (the probe's own numbers protect nothing).
pub(crate) fn random24() -> u32 {
    ferroce::verbs::random_psn().unwrap_or_else(|_| {
        use std::hash::BuildHasher;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::collections::hash_map::RandomState::new().hash_one(nanos) as u32 & 0xff_ffff
    })
}

#[cfg(test)]
mod tests;

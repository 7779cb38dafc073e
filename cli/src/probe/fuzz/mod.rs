//! `ferroce probe fuzz`: rounds of mutated packets inside live connections to a target,
//! each followed by a health check on a second, fresh connection, so that a target which
//! hangs, stops answering, answers wrongly, sends malformed frames or (with `--kmsg`)
//! makes its kernel warn is caught at the round that did it. Each finding is cut down to
//! the fewest packets that still reproduce it and saved as a pcapng reproducer that
//! `ferroce probe replay` sends again on a new connection.
//!
//! A round: connect (the target program's own exchange, as the conformance cases do),
//! build 1..=`max_packets` packets for that connection ([`mutate`]), send them, collect
//! the answers for `answer_ms`, end the connection; then the check ([`check_case`]). The
//! target programs serve one connection at a time, so the "second connection" is the next
//! one, made after the round's has ended.

pub mod kmsg;
pub mod mutate;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroce::link::Link;
use ferroce_wire::{Opcode, Psn};

use super::cases::{self, Case, Needs};
use super::peer::{Dir, Peer};
use super::repro::{rebase, ConnInfo, Repro};
use super::route::Route;
use super::runner::{self, Remote, Verdict};
use super::target::Target;

/// How a fuzz run goes.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    /// Stop after this many rounds.
    pub rounds: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The generator's seed (a run is repeatable from it, against the same target).
    pub seed: u64,
    /// Packets per round at most.
    pub max_packets: usize,
    /// Where reproducers go.
    pub out_dir: PathBuf,
    /// How long to collect answers after a round's last packet.
    pub answer_ms: u64,
    /// The program the target runs, for the reproducers' replay line.
    pub via: String,
    /// Cut findings down to the fewest packets that reproduce them.
    pub minimize: bool,
    /// How long a target that stopped answering may take to come back before the run
    /// stops.
    pub recover_wait: Duration,
}

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingKind {
    /// The target's program could not be reached for the health check.
    Unreachable,
    /// The health check got no answer (or stopped halfway).
    LostLiveness,
    /// The health check got a wrong answer (data, original value, PSN, opcode).
    WrongAnswer,
    /// The target sent a frame with a bad ICRC or one that does not parse.
    MalformedAnswer,
    /// The kernel logged a warning, BUG or oops (`--kmsg`).
    KernelLog,
}

impl FindingKind {
    /// Its name in reports and file names.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::Unreachable => "unreachable",
            FindingKind::LostLiveness => "lost-liveness",
            FindingKind::WrongAnswer => "wrong-answer",
            FindingKind::MalformedAnswer => "malformed-answer",
            FindingKind::KernelLog => "kernel-log",
        }
    }
}

/// A symptom seen after some packets.
#[derive(Debug, Clone)]
pub struct Symptom {
    /// Its kind.
    pub kind: FindingKind,
    /// What exactly (one line).
    pub detail: String,
}

/// One finding of a run.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Its kind and detail as first seen.
    pub symptom: Symptom,
    /// The round it was seen in.
    pub round: u64,
    /// The packets of the round, described.
    pub packets: Vec<String>,
    /// The packets left after minimizing (indices into `packets`).
    pub kept: Vec<usize>,
    /// Whether sending them again on a new connection showed the same kind of symptom.
    pub reproduced: bool,
    /// The reproducer.
    pub file: Option<PathBuf>,
}

/// A run's totals.
#[derive(Debug, Clone, Default)]
pub struct FuzzReport {
    /// Rounds run.
    pub rounds: u64,
    /// Packets sent in rounds (not counting checks and minimizing).
    pub packets: u64,
    /// Connections made (rounds, checks, minimizing).
    pub connections: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// What was found.
    pub findings: Vec<Finding>,
    /// Checks that failed once and passed when repeated at once.
    pub transient: u64,
    /// Why the run stopped early, if it did.
    pub stopped: Option<String>,
}

/// The result of sending some packets on one connection and checking the target after.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The connection the packets went on.
    pub conn: ConnInfo,
    /// The frames sent, in order.
    pub sent: Vec<Vec<u8>>,
    /// The frames received while sending and for `answer_ms` after.
    pub received: Vec<Vec<u8>>,
    /// The answers, described relative to the connection (for comparisons).
    pub answers: Vec<String>,
    /// What went wrong, if anything.
    pub symptom: Option<Symptom>,
}

/// Ends a connection's out-of-band side (see [`super::target::Connected::close`]).
type Closer = Box<dyn FnOnce() + Send>;

/// The health check run after each round: the first of `checks.toml` the target allows.
pub fn check_case(offers: &[Needs]) -> Case {
    let all = cases::parse(include_str!("../../../probe/checks.toml"), "checks.toml")
        .expect("the built-in checks parse (checked by a test)");
    let has = |n| offers.contains(&n);
    let name = if has(Needs::Write) && has(Needs::Read) {
        "check-write-read-back"
    } else if has(Needs::Atomic) {
        "check-fetch-add-twice"
    } else if has(Needs::Read) {
        "check-read"
    } else if has(Needs::Write) {
        "check-write"
    } else {
        "check-send"
    };
    all.into_iter()
        .find(|c| c.name == name)
        .expect("every check named here is in checks.toml")
}

/// A target under fuzzing: the connection machinery shared by rounds, checks, minimizing
/// and replay.
pub struct Fuzzer<'a> {
    target: &'a mut dyn Target,
    link: Arc<dyn Link>,
    route: Route,
    check: Case,
    answer_ms: u64,
    /// Kernel log watch (`--kmsg`).
    pub kmsg: Option<kmsg::Kmsg>,
    /// Connections made so far.
    pub connections: u64,
    /// Checks that failed once, then passed.
    pub transient: u64,
}

impl std::fmt::Debug for Fuzzer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fuzzer")
            .field("route", &self.route)
            .finish()
    }
}

impl<'a> Fuzzer<'a> {
    /// A fuzzer for `target`, reached over `link`.
    pub fn new(
        target: &'a mut dyn Target,
        link: Arc<dyn Link>,
        route: impl Into<Route>,
        answer_ms: u64,
    ) -> Fuzzer<'a> {
        let check = check_case(target.offers());
        Fuzzer {
            target,
            link,
            route: route.into(),
            check,
            answer_ms,
            kmsg: None,
            connections: 0,
            transient: 0,
        }
    }

    /// The name of the health check in use.
    pub fn check_name(&self) -> &str {
        &self.check.name
    }

    /// What the target offers.
    pub fn offers(&self) -> Vec<Needs> {
        self.target.offers().to_vec()
    }

    /// Connects a fresh QP of the target to a fresh one of the probe.
    fn connect(&mut self) -> Result<(Peer, Remote, Option<Closer>), String> {
        self.connections += 1;
        let (peer, c) = super::connect_fresh(self.target, &self.link, &mut self.route, Needs::Any)?;
        Ok((peer, c.remote, c.close))
    }

    /// Sends the frames `make` builds for a fresh connection, collects the answers, ends
    /// the connection, then checks the target's health (and its kernel log).
    pub fn attempt(&mut self, make: &mut dyn FnMut(&mut Peer, &Remote) -> Vec<Vec<u8>>) -> Attempt {
        let unreachable = |e: String, conn| Attempt {
            conn,
            sent: Vec::new(),
            received: Vec::new(),
            answers: Vec::new(),
            symptom: Some(Symptom {
                kind: FindingKind::Unreachable,
                detail: e,
            }),
        };
        let (mut peer, remote, close) = match self.connect() {
            Ok(c) => c,
            Err(e) => return unreachable(e, ConnInfo::default()),
        };
        let conn = conn_info(&remote, peer.qpn);
        let sent = make(&mut peer, &remote);
        let mut symptom = None;
        for f in &sent {
            if let Err(e) = peer.send(f.clone()) {
                symptom = Some(Symptom {
                    kind: FindingKind::Unreachable,
                    detail: format!("cannot send: {e}"),
                });
                break;
            }
        }
        let mut received = Vec::new();
        let mut answers = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(self.answer_ms);
        let undecodable = peer.undecodable;
        while let Ok(Some(r)) = peer.recv(deadline) {
            answers.push(r.describe(remote.epsn));
            if !r.icrc_ok && symptom.is_none() {
                symptom = Some(Symptom {
                    kind: FindingKind::MalformedAnswer,
                    detail: format!("the target sent {r} (bad ICRC)"),
                });
            }
            if answers.len() >= 256 {
                break;
            }
        }
        if peer.undecodable > undecodable && symptom.is_none() {
            symptom = Some(Symptom {
                kind: FindingKind::MalformedAnswer,
                detail: format!(
                    "the target sent {} frame(s) that do not parse",
                    peer.undecodable - undecodable
                ),
            });
        }
        for (dir, f) in peer.frames(0) {
            if dir == Dir::In {
                received.push(f.to_vec());
            }
        }
        if self.target.waits_for_send() {
            finish_pingpong(&mut peer, &remote, sent.len(), Duration::from_secs(1));
        }
        if let Some(close) = close {
            close();
        }
        if symptom.is_none() {
            symptom = self.health().err();
        }
        if symptom.is_none() {
            if let Some(k) = &mut self.kmsg {
                let lines = k.problems();
                if !lines.is_empty() {
                    symptom = Some(Symptom {
                        kind: FindingKind::KernelLog,
                        detail: lines.join(" | "),
                    });
                }
            }
        }
        Attempt {
            conn,
            sent,
            received,
            answers,
            symptom,
        }
    }

    /// The health check, repeated once at once if it fails (a check that passes the
    /// second time is counted as transient, not a finding).
    pub fn health(&mut self) -> Result<(), Symptom> {
        match self.check_once() {
            Ok(()) => Ok(()),
            Err(_) => {
                std::thread::sleep(Duration::from_millis(200));
                let r = self.check_once();
                if r.is_ok() {
                    self.transient += 1;
                }
                r
            }
        }
    }

    fn check_once(&mut self) -> Result<(), Symptom> {
        let (mut peer, remote, close) = self.connect().map_err(|e| Symptom {
            kind: FindingKind::Unreachable,
            detail: e,
        })?;
        let o = runner::run_case(&self.check, &mut peer, remote);
        if let Some(close) = close {
            close();
        }
        match o.verdict {
            Verdict::Pass => Ok(()),
            Verdict::Error(e) => Err(Symptom {
                kind: FindingKind::Unreachable,
                detail: format!("{}: {e}", self.check.name),
            }),
            _ => {
                let step = o.failed_step.unwrap_or(0);
                let lines: Vec<String> = o
                    .lines
                    .iter()
                    .filter(|l| l.step == step || l.step + 1 == step)
                    .map(|l| format!("{} {}", l.what, l.text))
                    .collect();
                let silent = o
                    .lines
                    .iter()
                    .rev()
                    .find(|l| l.what == "observed")
                    .is_some_and(|l| l.text.starts_with("nothing") || l.text.contains("broke off"));
                Err(Symptom {
                    kind: if silent {
                        FindingKind::LostLiveness
                    } else {
                        FindingKind::WrongAnswer
                    },
                    detail: format!("{}: {}", self.check.name, lines.join("; ")),
                })
            }
        }
    }

    /// Waits until the health check passes again, at most `wait`.
    pub fn recovered(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            if self.check_once().is_ok() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Sends `frames` (recorded on connection `from`) again on a fresh connection.
    pub fn replay(&mut self, frames: &[Vec<u8>], from: &ConnInfo) -> Attempt {
        self.attempt(&mut |peer, remote| {
            let to = conn_info(remote, peer.qpn);
            // The addresses of this connection: the target's GID is learnt as it connects.
            let addr = *peer.addressing();
            frames.iter().map(|f| rebase(f, from, &to, &addr)).collect()
        })
    }
}

/// The connection values a frame is relative to.
pub fn conn_info(r: &Remote, pqpn: u32) -> ConnInfo {
    ConnInfo {
        tqpn: r.qpn,
        epsn: r.epsn,
        va: r.va,
        rkey: r.rkey,
        pqpn,
    }
}

/// A pingpong program waits for one SEND, answers it with its own and waits for that
/// one's ACK: it gets a SEND at each PSN it may expect after the round, and its answer is
/// acknowledged, so that it ends now rather than at its timeout or retry limit.
fn finish_pingpong(peer: &mut Peer, remote: &Remote, n: usize, wait: Duration) {
    use ferroce_wire::{AethRepr, ExtRepr, Position, Syndrome};
    let tweak = super::peer::Tweak::default();
    for k in 0..=n as u32 {
        let bth = ferroce_wire::BthRepr::new(
            Opcode::RC_SEND_ONLY,
            remote.qpn,
            Psn::new((remote.epsn + k) & Psn::MASK),
        );
        if let Ok(f) = peer.build(bth, ExtRepr::default(), &[0; 4], &tweak) {
            let _ = peer.send(f);
        }
    }
    let deadline = Instant::now() + wait;
    while let Ok(Some(r)) = peer.recv(deadline) {
        let last = matches!(r.opcode.position(), Position::Last | Position::Only);
        if r.opcode.info().is_response() || !last {
            continue;
        }
        let bth = ferroce_wire::BthRepr::new(Opcode::RC_ACKNOWLEDGE, remote.qpn, Psn::new(r.psn));
        let ext = ExtRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 0x1f },
                msn: 1,
            }),
            ..Default::default()
        };
        if let Ok(f) = peer.build(bth, ext, &[], &tweak) {
            let _ = peer.send(f);
        }
        return;
    }
}

/// Runs rounds until `opts` says stop; `progress` sees one line now and then and each
/// finding as it is made. Fails when the target is unwell before the first round.
pub fn run(
    target: &mut dyn Target,
    link: Arc<dyn Link>,
    route: impl Into<Route>,
    opts: &FuzzOptions,
    templates: Vec<mutate::Template>,
    kmsg: Option<kmsg::Kmsg>,
    progress: &mut dyn FnMut(&str),
) -> Result<FuzzReport, String> {
    let t0 = Instant::now();
    let mut fz = Fuzzer::new(target, link, route, opts.answer_ms);
    // A target that is unwell before the first round is a set-up problem, not a finding.
    if let Err(s) = fz.health() {
        return Err(format!(
            "the target fails its health check before any fuzzing ({}: {})",
            s.kind.name(),
            s.detail
        ));
    }
    fz.kmsg = kmsg;
    let offers = fz.offers();
    let mut gen = mutate::Gen::new(opts.seed, templates);
    let mut report = FuzzReport::default();
    let mut last_progress = Instant::now();
    loop {
        if opts.rounds.is_some_and(|n| report.rounds >= n)
            || opts.duration.is_some_and(|d| t0.elapsed() >= d)
        {
            break;
        }
        report.rounds += 1;
        let mut described = Vec::new();
        let round = report.rounds;
        let a = fz.attempt(&mut |peer, remote| {
            let specs = gen.round(remote, peer.qpn, &offers, opts.max_packets);
            let frames: Vec<Vec<u8>> = specs
                .iter()
                .filter_map(|s| {
                    let f = mutate::build(peer, s)?;
                    described.push(mutate::describe(s));
                    Some(f)
                })
                .collect();
            journal(
                opts,
                round,
                &conn_info(remote, peer.qpn),
                &frames,
                &described,
            );
            frames
        });
        report.packets += a.sent.len() as u64;
        if let Some(symptom) = a.symptom.clone() {
            progress(&format!(
                "round {}: {}: {}",
                report.rounds,
                symptom.kind.name(),
                symptom.detail
            ));
            let finding = settle(
                &mut fz,
                opts,
                report.rounds,
                a,
                described,
                symptom,
                &mut report,
            );
            progress(&finding_text(&finding));
            report.findings.push(finding);
            if report.stopped.is_some() {
                break;
            }
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            let s = t0.elapsed().as_secs_f64();
            progress(&format!(
                "round {}: {} packets, {:.1} rounds/s, {} findings",
                report.rounds,
                report.packets,
                report.rounds as f64 / s,
                report.findings.len()
            ));
        }
    }
    report.elapsed = t0.elapsed();
    report.connections = fz.connections;
    report.transient = fz.transient;
    Ok(report)
}

/// The round about to be sent, on disk before it leaves (`OUT/in-flight.pcapng`): if the
/// target takes the probe down with it (a kernel stack panicking the machine both run
/// on), the round that did it is there to replay.
fn journal(
    opts: &FuzzOptions,
    round: u64,
    conn: &ConnInfo,
    frames: &[Vec<u8>],
    described: &[String],
) {
    let repro = Repro {
        conn: *conn,
        finding: format!(
            "in flight: round {round} of seed {} ({})",
            opts.seed,
            described.join("; ")
        ),
        via: opts.via.clone(),
        frames: frames.iter().map(|f| (Dir::Out, f.clone())).collect(),
    };
    let path = opts.out_dir.join("in-flight.pcapng");
    let written = repro
        .write(&path)
        .and_then(|()| std::fs::File::open(&path)?.sync_all());
    if let Err(e) = written {
        tracing::warn!(error = %e, path = %path.display(), "cannot write the in-flight round");
    }
}

/// After a symptom: waits for the target to come back, cuts the round down to the
/// packets that reproduce it, saves the reproducer.
fn settle(
    fz: &mut Fuzzer<'_>,
    opts: &FuzzOptions,
    round: u64,
    first: Attempt,
    described: Vec<String>,
    symptom: Symptom,
    report: &mut FuzzReport,
) -> Finding {
    let kind = symptom.kind;
    let mut finding = Finding {
        symptom,
        round,
        packets: described,
        kept: (0..first.sent.len()).collect(),
        reproduced: false,
        file: None,
    };
    let mut best = first.clone();
    if !fz.recovered(opts.recover_wait) {
        report.stopped = Some(format!(
            "the target did not pass its health check for {} s after round {round}",
            opts.recover_wait.as_secs()
        ));
    } else if !first.sent.is_empty() {
        // Does it happen again? Then drop packets one by one while it still does.
        let tries = |frames: &[Vec<u8>], fz: &mut Fuzzer<'_>| -> Option<Attempt> {
            let a = fz.replay(frames, &first.conn);
            let same = a.symptom.as_ref().is_some_and(|s| s.kind == kind);
            if a.symptom.is_some() {
                fz.recovered(opts.recover_wait);
            }
            same.then_some(a)
        };
        if let Some(a) = tries(&first.sent, fz) {
            finding.reproduced = true;
            best = a;
            if opts.minimize {
                let mut i = finding.kept.len();
                while i > 0 && finding.kept.len() > 1 {
                    i -= 1;
                    let keep: Vec<usize> = finding
                        .kept
                        .iter()
                        .copied()
                        .filter(|&k| k != finding.kept[i])
                        .collect();
                    let frames: Vec<Vec<u8>> =
                        keep.iter().map(|&k| first.sent[k].clone()).collect();
                    if let Some(a) = tries(&frames, fz) {
                        finding.kept = keep;
                        best = a;
                    }
                }
            }
        }
    }
    let name = format!("finding-{round:06}-{}.pcapng", kind.name());
    let path = opts.out_dir.join(name);
    let mut frames: Vec<(Dir, Vec<u8>)> = best.sent.iter().map(|f| (Dir::Out, f.clone())).collect();
    frames.extend(best.received.iter().map(|f| (Dir::In, f.clone())));
    let repro = Repro {
        conn: best.conn,
        finding: format!("{}: {}", kind.name(), finding.symptom.detail),
        via: opts.via.clone(),
        frames,
    };
    if repro.write(&path).is_ok() {
        finding.file = Some(path);
    }
    finding
}

/// A finding as the report prints it.
pub fn finding_text(f: &Finding) -> String {
    let mut t = format!(
        "FINDING {} (round {}): {}\n",
        f.symptom.kind.name(),
        f.round,
        f.symptom.detail
    );
    let how = if f.reproduced {
        format!(
            "reproduced on a new connection with {} of {} packets",
            f.kept.len(),
            f.packets.len()
        )
    } else {
        "did not happen again on a new connection (all packets kept)".into()
    };
    t.push_str(&format!("  {how}:\n"));
    for &k in &f.kept {
        if let Some(p) = f.packets.get(k) {
            t.push_str(&format!("    {p}\n"));
        }
    }
    if let Some(file) = &f.file {
        t.push_str(&format!("  reproducer: {}\n", file.display()));
    }
    t
}

#[cfg(test)]
mod tests;

//! `ferroce probe`: conformance cases against another RoCE stack (see
//! `ferroce_cli::probe`).

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ferroce::link::{Link, PacketLink};
use ferroce::net::neigh::{KernelResolver, Resolver};
use ferroce::verbs::Device;
use ferroce_cli::probe::cases::{self, Case};
use ferroce_cli::probe::local::LocalTarget;
use ferroce_cli::probe::peer::Addressing;
use ferroce_cli::probe::route::{self, Route};
use ferroce_cli::probe::runner::Verdict;
use ferroce_cli::probe::target::{OobTarget, Target, Via};
use ferroce_cli::probe::{report, run_suite, SuiteOptions};

use super::CliError;

pub const HELP: &str = "\
TARGET is the host where the target's program runs (its out-of-band TCP address), or
`local` for ferroce itself in this process on an in-memory wire (no privileges needed).

Each case runs on a fresh connection: a case may leave the target's QP in the error state,
and the target's program serves one client, so keep it in a loop, e.g. on the target:
  while :; do ib_write_bw -d rxe0 -x 1; done
  while :; do timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -n 1; done
(A case may leave the program waiting for an exchange that never ends; where the probe can
reach it, `--after-case 'pkill -x ibv_rc_pingpong'` ends it instead of its timeout.)
then, on another host (or network namespace), with the target's RoCE address:
  ferroce probe conformance --via write-bw -d eth0 10.0.0.2
  ferroce probe conformance --via pingpong -d eth0 10.0.0.2
With `--via read-bw-client` the target runs an ib_read_bw *client* against the probe's
host (the probe plays its server, and the target is the one reading):
  while :; do ib_read_bw -d rxe0 -x 1 -m 1024 -s 2048 -n 5 -t 1 PROBE_ADDRESS; done
Cases needing what the program does not offer are skipped: run the suite once per
program (pingpong, write-bw, read-bw, atomic-bw, read-bw-client) for full coverage.
Cases are TOML files (`--cases FILE`; the built-in ones are in cli/probe/ of the source).
Exit status: 0 when no case failed or erred, 1 otherwise, 2 on a usage error.";

#[derive(Debug, clap::Subcommand)]
pub enum ProbeCommand {
    /// Run conformance cases against a target stack and print a verdict table.
    #[command(after_long_help = HELP)]
    Conformance(ConformanceArgs),
    /// Fuzz a target inside live connections: mutated packets, a health check after
    /// each round, findings saved as pcapng reproducers.
    #[command(after_long_help = FUZZ_HELP)]
    Fuzz(FuzzArgs),
    /// Send a reproducer's packets again, on a new connection, and check the target.
    #[command(after_long_help = REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Keep only some of a reproducer's packets, in a new file (no target needed).
    #[command(after_long_help = CUT_HELP)]
    Cut(CutArgs),
}

/// How the probe reaches its target (shared by every `probe` command).
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// The target's host (out-of-band address), or `local`.
    pub target: Option<String>,
    /// The program the target runs.
    #[arg(long, value_enum, default_value_t = Via::Pingpong)]
    pub via: Via,
    /// Its TCP port.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Interface to send from.
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// GID index of the probe's address (default: one of the IP version, and scope, of
    /// the GID the target's program announces; first guess: TARGET's version). Needed for
    /// an ibv_rc_pingpong server on a GID of the other version than TARGET's, which hangs
    /// up before announcing it.
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<usize>,
    /// Path MTU (perftest: asked for; pingpong: must match the server's -m).
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Bytes of the target's buffer the probe may touch (default: the program's default).
    #[arg(long)]
    pub size: Option<u64>,
    /// Seconds to keep trying to reach the target's program for each connection.
    #[arg(long, default_value_t = 20)]
    pub connect_wait: u64,
}

#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    #[command(flatten)]
    pub t: TargetArgs,
    /// Case files to run instead of the built-in suite (repeatable).
    #[arg(long = "cases")]
    pub cases: Vec<PathBuf>,
    /// Only cases whose name contains one of these (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// List the cases and exit.
    #[arg(long)]
    pub list: bool,
    /// Write each case's frames to DIR/CASE.pcap.
    #[arg(long, value_name = "DIR")]
    pub pcap: Option<PathBuf>,
    /// The target's stack (e.g. rxe): deviations a case documents for it print as KNOWN
    /// (`local` is ferroce).
    #[arg(long)]
    pub stack: Option<String>,
    /// Also write the verdict table as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also run every case against a second target (`local`, or a host reached with the
    /// same options) and report where the two answer differently.
    #[arg(long, value_name = "TARGET2")]
    pub diff: Option<String>,
    /// Also run the cases known to crash the stack named by --stack (they are skipped
    /// otherwise).
    #[arg(long)]
    pub include_crashing: bool,
    /// Print only the table, not each case's transcript.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// A shell command run after each case that reached the target, before the next one
    /// connects, with the case's name in FERROCE_PROBE_CASE: e.g. to end the target's
    /// program where a case leaves it waiting (Debian's ibv_rc_pingpong waits for the
    /// exchange it was promised until it is killed). Its output goes to stderr; its
    /// failure is reported there and the run goes on.
    #[arg(long, value_name = "CMD")]
    pub after_case: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    #[command(flatten)]
    pub t: TargetArgs,
    /// Stop after N rounds.
    #[arg(long, value_name = "N")]
    pub rounds: Option<u64>,
    /// Stop after this many seconds (default: 60, unless --rounds is given).
    #[arg(long, value_name = "SECONDS")]
    pub time: Option<u64>,
    /// The generator's seed (default: random; printed, so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Packets per round at most.
    #[arg(long, default_value_t = 6)]
    pub max_packets: usize,
    /// Milliseconds to collect answers after a round's last packet.
    #[arg(long, default_value_t = 50)]
    pub answer_ms: u64,
    /// Where reproducers of findings go.
    #[arg(long, value_name = "DIR", default_value = "probe-findings")]
    pub out: PathBuf,
    /// More seed messages: the RoCE requests in these captures (pcap or pcapng).
    #[arg(long = "seeds", value_name = "PCAP")]
    pub seeds: Vec<PathBuf>,
    /// Also watch the kernel log (/dev/kmsg) for warnings, BUGs and oopses: for a
    /// kernel stack (rxe) on this same host or VM. Needs root.
    #[arg(long)]
    pub kmsg: bool,
    /// Keep findings as found, without cutting them down to the packets that matter.
    #[arg(long)]
    pub no_minimize: bool,
    /// Seconds a target that stopped answering may take to come back before the run stops.
    #[arg(long, default_value_t = 60)]
    pub recover_wait: u64,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A reproducer written by `ferroce probe fuzz` (pcapng).
    pub file: PathBuf,
    #[command(flatten)]
    pub t: TargetArgs,
    /// Also replay to a second target (`local`, or a host reached with the same options)
    /// and report whether the two answer differently.
    #[arg(long, value_name = "TARGET2")]
    pub diff: Option<String>,
    /// Milliseconds to collect answers after the last packet.
    #[arg(long, default_value_t = 200)]
    pub answer_ms: u64,
    /// Watch the kernel log (/dev/kmsg) too (root).
    #[arg(long)]
    pub kmsg: bool,
}

#[derive(Debug, clap::Args)]
pub struct CutArgs {
    /// A reproducer written by `ferroce probe fuzz` (pcapng).
    pub file: PathBuf,
    /// The sent packets to keep, numbered from 1 as `ferroce probe replay` lists them.
    #[arg(long, value_delimiter = ',', required = true, value_name = "N,N..")]
    pub keep: Vec<usize>,
    /// The new reproducer.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
}

const CUT_HELP: &str = "\
For findings the fuzzer could not cut down itself: a round that panicked the machine the
target runs on (tests/probe/campaign.sh replays the cut files in fresh VMs), or by hand.
  ferroce probe cut in-flight.pcapng --keep 1,3 -o smaller.pcapng
  ferroce probe replay smaller.pcapng --via write-bw TARGET";

pub fn run(c: ProbeCommand) -> Result<ExitCode, CliError> {
    match c {
        ProbeCommand::Conformance(a) => conformance(a),
        ProbeCommand::Fuzz(a) => fuzz(a),
        ProbeCommand::Replay(a) => replay(a),
        ProbeCommand::Cut(a) => cut(a),
    }
}

fn load_cases(a: &ConformanceArgs) -> Result<Vec<Case>, CliError> {
    let mut all = Vec::new();
    if a.cases.is_empty() {
        all = cases::builtin();
    }
    for path in &a.cases {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read case file '{}': {e}", path.display()))?;
        all.extend(cases::parse(&text, &path.display().to_string())?);
    }
    if !a.only.is_empty() {
        all.retain(|c| a.only.iter().any(|o| c.name.contains(o.as_str())));
        if all.is_empty() {
            return Err(format!(
                "no case matches --only {}: see `ferroce probe conformance --list`",
                a.only.join(",")
            )
            .into());
        }
    }
    Ok(all)
}

type Opened = (Box<dyn Target>, Arc<dyn Link>, Route);

/// The target named `name` (`local`, or a host reached as `t` says).
fn open_target(t: &TargetArgs, name: &str) -> Result<Opened, CliError> {
    if name == "local" {
        let (target, link, addr) = LocalTarget::new()?;
        return Ok((Box::new(target), link, addr.into()));
    }
    let mtu = super::parse_mtu(t.mtu)?;
    let mut target = OobTarget::new(t.via, name.to_string(), t.port, mtu, t.size);
    target.connect_wait = Duration::from_secs(t.connect_wait);
    let (link, route) = open_link(t, name)?;
    Ok((Box::new(target), link, route))
}

fn target_name(t: &TargetArgs) -> Result<String, CliError> {
    Ok(t.target
        .clone()
        .ok_or("no TARGET: give the target's host, or `local` for ferroce itself")?)
}

/// `local` is ferroce: its documented deviations are known without saying so.
fn stack_of(stack: &Option<String>, name: &str) -> Option<String> {
    stack
        .clone()
        .or_else(|| (name == "local").then(|| "ferroce".to_string()))
}

/// Runs `--after-case`'s command for case `name`; a failure is only reported.
fn after_case(cmd: &str, name: &str) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("FERROCE_PROBE_CASE", name)
        .stdin(std::process::Stdio::null())
        .stdout(std::io::stderr())
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => eprintln!("probe: --after-case after {name}: {s}"),
        Err(e) => eprintln!("probe: --after-case after {name}: cannot run sh: {e}"),
    }
}

fn conformance(a: ConformanceArgs) -> Result<ExitCode, CliError> {
    let cases = load_cases(&a)?;
    let mut out = std::io::stdout().lock();
    if a.list {
        for c in &cases {
            writeln!(out, "{:<36} {:<9} {}", c.name, c.needs.name(), c.summary)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = target_name(&a.t)?;
    if let Some(dir) = &a.pcap {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create pcap directory '{}': {e}", dir.display()))?;
    }
    let (mut target, link, route) = open_target(&a.t, &name)?;
    let mut second = match &a.diff {
        Some(n) => Some((n.clone(), open_target(&a.t, n)?)),
        None => None,
    };
    writeln!(
        out,
        "probe: {} cases against {} (probe {} -> target {})",
        cases.len(),
        target.describe(),
        route.addr.ip,
        route.addr.target_ip
    )?;
    if let Some((_, (t2, _, a2))) = &second {
        writeln!(
            out,
            "probe: and against {} ({})",
            t2.describe(),
            a2.addr.target_ip
        )?;
    }
    out.flush()?;
    let opts = SuiteOptions {
        pcap_dir: a.pcap.clone(),
        stack: stack_of(&a.stack, &name),
        include_crashing: a.include_crashing,
    };
    let quiet = a.quiet;
    let outcomes = run_suite(&cases, target.as_mut(), &link, route, &opts, &mut |c, o| {
        let mut out = std::io::stdout().lock();
        if !quiet {
            let _ = report::case_block(&mut out, c, o);
        } else {
            let _ = writeln!(out, "{:<36} {}", c.name, o.verdict.word());
        }
        let _ = out.flush();
        // A skipped case never connected: the target's program still waits for one.
        if let (Some(cmd), false) = (&a.after_case, matches!(o.verdict, Verdict::Skip(_))) {
            after_case(cmd, &c.name);
        }
    });
    writeln!(out)?;
    report::table(&mut out, &cases, &outcomes)?;
    if let Some(path) = &a.markdown {
        let mut f = std::fs::File::create(path)
            .map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
        report::markdown(&mut f, &cases, &outcomes)?;
    }
    let bad = outcomes
        .iter()
        .any(|o| matches!(o.verdict, Verdict::Fail | Verdict::Error(_)));
    let mut differ = false;
    if let Some((n2, (t2, link2, addr2))) = &mut second {
        let opts2 = SuiteOptions {
            pcap_dir: None,
            stack: stack_of(&None, n2),
            include_crashing: a.include_crashing,
        };
        let other = run_suite(
            &cases,
            t2.as_mut(),
            link2,
            addr2.clone(),
            &opts2,
            &mut |_, _| {},
        );
        writeln!(out)?;
        let d = report::diff(&mut out, &cases, (&name, &outcomes), (n2, &other))?;
        differ = d > 0;
    }
    Ok(if bad || differ {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

pub const FUZZ_HELP: &str = "\
Each round takes a fresh connection to the target's program (keep it in a loop, as for
`probe conformance`), sends a well-formed request message built from Linux rxe's own
traffic (or made up for the program's rights) with one to three structure-aware mutations
(header fields, opcode sequences, lengths, PSN jumps, keys and addresses at their edges,
ghost responses, a flipped bit; the ICRC stays valid unless it is the mutation), then
checks the target on a new connection: data written reads back (ferroce), two FETCH_ADDs
return consecutive values (ib_atomic_bw), a READ, WRITE or SEND is answered. A failed check
(after one immediate retry), a malformed frame from the target, or (--kmsg) a kernel
warning is a finding: the round is sent again, cut down to the packets that still cause
it, and saved as OUT/finding-ROUND-KIND.pcapng; `ferroce probe replay FILE TARGET` sends it
again. A run is repeatable from its --seed against the same target.
Exit status: 0 when nothing was found, 1 when something was, 2 on a usage error.";

pub const REPLAY_HELP: &str = "\
The reproducer's packets are moved onto a new connection (QP number, PSNs, buffer address
and key) keeping what was wrong with them, sent, and the target is checked as `probe fuzz`
checks it. With --diff, the same goes to a second target and the answers are compared.
Exit status: 0 when the target stayed healthy (and, with --diff, both answered alike),
1 otherwise, 2 on a usage error.";

fn fuzz(a: FuzzArgs) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    use ferroce_cli::probe::fuzz::{self, mutate, FuzzOptions};
    let name = target_name(&a.t)?;
    if a.max_packets == 0 {
        return Err("--max-packets must be at least 1".into());
    }
    if a.t.via == Via::ReadBwClient {
        return Err("probe fuzz sends requests to a server program: use --via pingpong, write-bw, read-bw or atomic-bw".into());
    }
    let mut templates = mutate::builtin_templates();
    for p in &a.seeds {
        templates.extend(mutate::templates_from_file(p)?);
    }
    let kmsg = if a.kmsg {
        Some(fuzz::kmsg::Kmsg::open()?)
    } else {
        None
    };
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("cannot create '{}': {e}", a.out.display()))?;
    let (mut target, link, route) = open_target(&a.t, &name)?;
    let seed = a.seed.unwrap_or_else(ferroce_cli::probe::random_seed);
    let duration = match (a.time, a.rounds) {
        (Some(s), _) => Some(Duration::from_secs(s)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(60)),
    };
    let via = match (name.as_str(), clap::ValueEnum::to_possible_value(&a.t.via)) {
        ("local", _) | (_, None) => "local".to_string(),
        (_, Some(v)) => v.get_name().to_string(),
    };
    let opts = FuzzOptions {
        rounds: a.rounds,
        duration,
        seed,
        max_packets: a.max_packets,
        out_dir: a.out.clone(),
        answer_ms: a.answer_ms,
        via,
        minimize: !a.no_minimize,
        recover_wait: Duration::from_secs(a.recover_wait),
    };
    let check = fuzz::check_case(target.offers()).name;
    writeln!(
        out,
        "fuzz: {} (probe {} -> target {}); seed {seed}; {} seed messages; check {check}{}",
        target.describe(),
        route.addr.ip,
        route.addr.target_ip,
        templates.len(),
        if a.kmsg { "; watching /dev/kmsg" } else { "" }
    )?;
    let r = fuzz::run(
        target.as_mut(),
        link,
        route,
        &opts,
        templates,
        kmsg,
        // Progress lines: a reader gone away does not stop the run (the summary below
        // then ends it quietly).
        &mut |line| {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        },
    )?;
    let s = r.elapsed.as_secs_f64().max(1e-9);
    if let Some(why) = &r.stopped {
        writeln!(out, "fuzz: stopped early: {why}")?;
    }
    let mut kinds: Vec<&str> = r.findings.iter().map(|f| f.symptom.kind.name()).collect();
    kinds.sort();
    kinds.dedup();
    writeln!(
        out,
        "fuzz: {} rounds, {} packets, {} connections in {:.1} s ({:.2} rounds/s, {:.1} packets/s); {} findings{}; {} transient check failures; seed {seed}",
        r.rounds,
        r.packets,
        r.connections,
        s,
        r.rounds as f64 / s,
        r.packets as f64 / s,
        r.findings.len(),
        if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) },
        r.transient,
    )?;
    Ok(if r.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn replay(a: ReplayArgs) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    use ferroce_cli::probe::fuzz::{self, Fuzzer};
    use ferroce_cli::probe::repro::Repro;
    let repro = Repro::read(&a.file)?;
    let name = target_name(&a.t)?;
    let sent = repro.sent();
    if sent.is_empty() {
        return Err(format!("'{}' holds no frame the probe sent", a.file.display()).into());
    }
    writeln!(out, "replay: {} ({} packets)", a.file.display(), sent.len())?;
    if !repro.finding.is_empty() {
        writeln!(out, "  recorded finding: {}", repro.finding)?;
    }
    // Each frame as `ferroce decode` shows it.
    for (i, f) in sent.iter().enumerate() {
        use ferroce_cli::decode::{classify, summarize, Classified};
        let frame = ferroce::capture::CapturedFrame {
            index: i + 1,
            timestamp: Duration::ZERO,
            link: ferroce::capture::LinkType::Ethernet,
            data: f.clone(),
        };
        let line = match classify(&frame) {
            Classified::Roce(d) => summarize(&frame, &d).line,
            Classified::Corrupt(e) => format!("{:>5} CORRUPT {e}", i + 1),
            Classified::Other => format!("{:>5} not a RoCE v2 frame", i + 1),
        };
        writeln!(out, "  sent (as recorded) {line}")?;
    }
    let run = |target_name: &str, kmsg: bool| -> Result<(String, fuzz::Attempt), CliError> {
        let (mut target, link, route) = open_target(&a.t, target_name)?;
        let describe = target.describe();
        let mut fz = Fuzzer::new(target.as_mut(), link, route, a.answer_ms);
        if kmsg {
            fz.kmsg = Some(fuzz::kmsg::Kmsg::open()?);
        }
        let at = fz.replay(&sent, &repro.conn);
        Ok((describe, at))
    };
    let mut print = |describe: &str, at: &fuzz::Attempt| -> std::io::Result<()> {
        writeln!(out, "against {describe}:")?;
        for ans in &at.answers {
            writeln!(out, "  answer {ans}")?;
        }
        if at.answers.is_empty() {
            writeln!(out, "  no answer")?;
        }
        match &at.symptom {
            Some(s) => writeln!(out, "  REPRODUCED {}: {}", s.kind.name(), s.detail)?,
            None => writeln!(out, "  target healthy after the packets")?,
        }
        Ok(())
    };
    let (d1, first) = run(&name, a.kmsg)?;
    print(&d1, &first)?;
    let mut bad = first.symptom.is_some();
    if let Some(n2) = &a.diff {
        let (d2, second) = run(n2, false)?;
        print(&d2, &second)?;
        let same_answers = first.answers == second.answers;
        let same_health =
            first.symptom.as_ref().map(|s| s.kind) == second.symptom.as_ref().map(|s| s.kind);
        if same_answers && same_health {
            writeln!(out, "diff: {name} and {n2} answered alike")?;
        } else {
            writeln!(
                out,
                "diff: {name} and {n2} differ ({})",
                match (same_answers, same_health) {
                    (false, false) => "answers and health",
                    (false, true) => "answers",
                    _ => "health",
                }
            )?;
            bad = true;
        }
    }
    Ok(if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn cut(a: CutArgs) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    use ferroce_cli::probe::repro::Repro;
    let cut = Repro::read(&a.file)?.cut(&a.keep)?;
    cut.write(&a.output)
        .map_err(|e| format!("cannot write '{}': {e}", a.output.display()))?;
    writeln!(
        out,
        "cut: {} packets of {} -> {}",
        cut.frames.len(),
        a.file.display(),
        a.output.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the interface and makes the first guess at the addresses: the target's RoCE
/// address taken to be TARGET resolved, and the probe's a GID of its IP version (or the one
/// `-g` names). The target's program corrects the guess when it announces its own GID
/// ([`Route::learn`]).
fn open_link(a: &TargetArgs, host: &str) -> Result<(Arc<dyn Link>, Route), CliError> {
    use std::net::ToSocketAddrs;
    let dev = match &a.ib_dev {
        Some(name) => Device::by_name(name)?,
        None => Device::list()
            .into_iter()
            .next()
            .ok_or("no RoCE device: no Ethernet interface with an address")?,
    };
    let target_ip: IpAddr = (host, a.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve target '{host}': {e}"))?
        .map(|s| s.ip())
        .next()
        .ok_or_else(|| format!("cannot resolve target '{host}'"))?;
    let gids = dev.gids();
    let own: Vec<IpAddr> = gids
        .entries()
        .iter()
        .map(|e| ferroce::net::gid::addr_of(e.gid))
        .collect();
    let ip = match a.gid_idx {
        Some(i) => gids
            .get(i)
            .map(|e| ferroce::net::gid::addr_of(e.gid))
            .ok_or_else(|| {
                format!(
                    "GID index {i} does not exist on {}: see `ferroce devinfo -v -d {}`",
                    dev.name(),
                    dev.name()
                )
            })?,
        None => route::pick_own(&own, target_ip).ok_or_else(|| {
            format!(
                "{} has no address of the target's IP version ({target_ip}): add one, or pick another interface with -d",
                dev.name()
            )
        })?,
    };
    let iface = dev.interface().clone();
    let resolver = KernelResolver {
        ifindex: iface.index,
        ifname: iface.name.clone(),
    };
    // The out-of-band address is the first guess where it is of the probe's IP version
    // (`-g` may have picked the other) and reachable on this interface; else the guess is
    // "unknown" and the target's GID says (an unreachable one is reported then).
    let first_guess = (ip.is_ipv4() == target_ip.is_ipv4())
        .then(|| resolver.resolve(target_ip, Duration::from_secs(3)).ok())
        .flatten();
    let (target_ip, target_mac) = match first_guess {
        Some(mac) => (target_ip, mac),
        None if ip.is_ipv4() => (IpAddr::from([0u8; 4]), [0; 6]),
        None => (IpAddr::from([0u16; 8]), [0; 6]),
    };
    let mac = iface.mac;
    let link = PacketLink::open(iface)?;
    let first = Addressing {
        mac,
        ip,
        target_mac,
        target_ip,
    };
    Ok((
        Arc::new(link),
        Route::new(first, own, a.gid_idx.is_some(), Arc::new(resolver)),
    ))
}

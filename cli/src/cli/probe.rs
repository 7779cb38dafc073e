//! `ferroce probe`: conformance cases against another RoCE stack (see
//! `ferroce_cli::probe`).

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ferroce::link::{Link, PacketLink};
use ferroce::verbs::Device;
use ferroce_cli::probe::cases::{self, Case};
use ferroce_cli::probe::local::LocalTarget;
use ferroce_cli::probe::peer::Addressing;
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
then, on another host (or network namespace), with the target's RoCE address:
  ferroce probe conformance --via write-bw -d eth0 10.0.0.2
  ferroce probe conformance --via pingpong -d eth0 10.0.0.2
Cases needing what the program does not offer are skipped: run the suite once per
program (pingpong, write-bw, read-bw, atomic-bw) for full coverage.
Cases are TOML files (`--cases FILE`; the built-in ones are in cli/probe/ of the source).
Exit status: 0 when no case failed or erred, 1 otherwise, 2 on a usage error.";

#[derive(Debug, clap::Subcommand)]
pub enum ProbeCommand {
    /// Run conformance cases against a target stack and print a verdict table.
    #[command(after_long_help = HELP)]
    Conformance(ConformanceArgs),
}

#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
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
    /// GID index of the probe's address (default: the interface's first address of the
    /// target's IP version).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<usize>,
    /// Path MTU (perftest: asked for; pingpong: must match the server's -m).
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Bytes of the target's buffer the cases may touch (default: the program's default).
    #[arg(long)]
    pub size: Option<u64>,
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
    /// Seconds to keep trying to reach the target's program for each case.
    #[arg(long, default_value_t = 20)]
    pub connect_wait: u64,
    /// Print only the table, not each case's transcript.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn run(c: ProbeCommand) -> Result<ExitCode, CliError> {
    match c {
        ProbeCommand::Conformance(a) => conformance(a),
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

fn conformance(a: ConformanceArgs) -> Result<ExitCode, CliError> {
    let cases = load_cases(&a)?;
    let mut out = std::io::stdout().lock();
    if a.list {
        for c in &cases {
            writeln!(out, "{:<36} {:<9} {}", c.name, c.needs.name(), c.summary)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let target_name = a
        .target
        .clone()
        .ok_or("no TARGET: give the target's host, or `local` for ferroce itself")?;
    if let Some(dir) = &a.pcap {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create pcap directory '{}': {e}", dir.display()))?;
    }
    let mtu = super::parse_mtu(a.mtu)?;
    let (mut target, link, addr): (Box<dyn Target>, Arc<dyn Link>, Addressing) =
        if target_name == "local" {
            let (t, link, addr) = LocalTarget::new()?;
            (Box::new(t), link, addr)
        } else {
            let mut t = OobTarget::new(a.via, target_name.clone(), a.port, mtu, a.size);
            t.connect_wait = Duration::from_secs(a.connect_wait);
            let (link, addr) = open_link(&a, &target_name)?;
            (Box::new(t), link, addr)
        };
    writeln!(
        out,
        "probe: {} cases against {} (probe {} -> target {})",
        cases.len(),
        target.describe(),
        addr.ip,
        addr.target_ip
    )?;
    out.flush()?;
    let opts = SuiteOptions {
        pcap_dir: a.pcap.clone(),
        // `local` is ferroce: its documented deviations are known without saying so.
        stack: a
            .stack
            .clone()
            .or_else(|| (target_name == "local").then(|| "ferroce".to_string())),
    };
    let quiet = a.quiet;
    let outcomes = run_suite(&cases, target.as_mut(), &link, addr, &opts, &mut |c, o| {
        let mut out = std::io::stdout().lock();
        if !quiet {
            let _ = report::case_block(&mut out, c, o);
        } else {
            let _ = writeln!(out, "{:<36} {}", c.name, o.verdict.word());
        }
        let _ = out.flush();
    });
    writeln!(out)?;
    report::table(&mut out, &cases, &outcomes)?;
    if let Some(path) = &a.markdown {
        let mut f = std::fs::File::create(path)
            .map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
        report::markdown(&mut f, &cases, &outcomes)?;
    }
    let bad = outcomes.iter().any(|o| {
        matches!(
            o.verdict,
            ferroce_cli::probe::runner::Verdict::Fail
                | ferroce_cli::probe::runner::Verdict::Error(_)
        )
    });
    Ok(if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Opens the interface and finds the addresses: the probe's (its GID index), the target's
/// (TARGET resolved; RoCE packets go to the same address) and its MAC.
fn open_link(a: &ConformanceArgs, host: &str) -> Result<(Arc<dyn Link>, Addressing), CliError> {
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
    let entry = match a.gid_idx {
        Some(i) => gids.get(i).ok_or_else(|| {
            format!(
                "GID index {i} does not exist on {}: see `ferroce devinfo -v -d {}`",
                dev.name(),
                dev.name()
            )
        })?,
        None => gids
            .entries()
            .iter()
            .find(|e| e.addr.is_ipv4() == target_ip.is_ipv4())
            .ok_or_else(|| {
                format!(
                    "{} has no address of the target's IP version ({target_ip}): add one, or pick another interface with -d",
                    dev.name()
                )
            })?,
    };
    let ip = ferroce::net::gid::addr_of(entry.gid);
    if ip.is_ipv4() != target_ip.is_ipv4() {
        return Err(format!(
            "GID index {} is {ip}, the target is {target_ip}: pick a GID of the same IP version with -g",
            entry.index
        )
        .into());
    }
    let iface = dev.interface().clone();
    let target_mac =
        ferroce::net::neigh::resolve(iface.index, &iface.name, target_ip, Duration::from_secs(3))?;
    let mac = iface.mac;
    let link = PacketLink::open(iface)?;
    Ok((
        Arc::new(link),
        Addressing {
            mac,
            ip,
            target_mac,
            target_ip,
        },
    ))
}

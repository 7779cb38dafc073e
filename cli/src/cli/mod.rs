//! Command-line interface: argument definitions and dispatch.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cm_example;
mod decode;
mod devices;
mod exec;
mod mesh;
mod ops;
mod perf;
mod pingpong;
mod probe;
mod ratelog;
mod rping;

/// A user-space RoCE v2 stack.
#[derive(Debug, Parser)]
#[command(name = "ferroce", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode the RoCE v2 packets of a pcap or pcapng capture, one line per packet, and
    /// report requesters that reuse a PSN for a different packet.
    Decode(decode::DecodeArgs),
    /// Like ibv_rc_pingpong: RC SEND ping-pong with the same flags and output.
    RcPingpong(pingpong::PingPongArgs),
    /// Like ibv_uc_pingpong: UC SEND ping-pong.
    UcPingpong(pingpong::PingPongArgs),
    /// Like ibv_ud_pingpong: UD SEND ping-pong.
    UdPingpong(pingpong::PingPongArgs),
    /// Like rdma-core's ucmatose: an RC connection made through rdma_cm's CM (QP1), SENDs
    /// both ways, then a disconnect.
    Ucmatose(cm_example::ExampleArgs),
    /// Like rdma-core's rping: RDMA READ and WRITE pings over an RC connection made
    /// through rdma_cm's CM (QP1), data checked.
    Rping(rping::RpingArgs),
    /// Like rdma-core's udaddy: UD datagrams both ways to a service found with SIDR on
    /// QP1, as rdma_cm's UDP port space finds it.
    Udaddy(cm_example::ExampleArgs),
    /// Every RC operation (SEND, WRITE, READ, atomics, with immediate) against a peer, checked.
    RcOps(ops::OpsArgs),
    /// perftest's ib_*_bw / ib_*_lat tests, same flags, exchange and output.
    #[command(subcommand)]
    Perf(Box<perf::PerfCommand>),
    /// Live demo without privileges: two devices on an in-memory wire run every RC operation.
    Demo(ops::DemoArgs),
    /// List RoCE devices (Ethernet interfaces with an address, then lo), like ibv_devices.
    Devices,
    /// One rank of an all-to-all RC test among processes sharing an interface, checked.
    Mesh(mesh::MeshArgs),
    /// Show device and port attributes, like ibv_devinfo.
    Devinfo(devices::DevinfoArgs),
    /// Run an unmodified RDMA program (ibv_rc_pingpong, ib_write_bw, ...) on ferroce's libibverbs.
    #[command(
        override_usage = "ferroce exec [--] PROGRAM [ARGS]...",
        after_long_help = exec::HELP
    )]
    Exec(exec::ExecArgs),
    /// Test another RoCE stack (rxe, a NIC): scripted conformance cases with spec verdicts.
    #[command(subcommand)]
    Probe(probe::ProbeCommand),
}

/// A user-facing error: printed as one line, exit code 2.
pub type CliError = Box<dyn std::error::Error>;

/// The flags perftest's tools and the ibv_*_pingpong tools share: whom to talk to, and
/// through which device.
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// Server to connect to; without it, start a server and wait for a connection.
    pub server: Option<String>,
    /// Listen on / connect to TCP port PORT.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Use device DEV: a network interface name (default: the first device found).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the device (RoCE devices have one: 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
}

impl PeerArgs {
    /// Refuses device ports other than 1.
    fn check(&self) -> Result<(), CliError> {
        if self.ib_port != 1 {
            return Err(format!(
                "port {} does not exist: RoCE devices have port 1 only",
                self.ib_port
            )
            .into());
        }
        Ok(())
    }
}

/// Opens the device named `ib_dev` (or the first one) and starts `--pcap` recording.
fn open_device(
    ib_dev: Option<&str>,
    pcap: Option<&std::path::Path>,
) -> Result<ferroce::verbs::Context, CliError> {
    use ferroce::verbs::Device;
    let dev = match ib_dev {
        Some(name) => Device::by_name(name)?,
        None => Device::list()
            .into_iter()
            .next()
            .ok_or("No IB devices found: no Ethernet interface with an address")?,
    };
    let ctx = dev.open()?;
    if let Some(p) = pcap {
        ctx.start_pcap(p)
            .map_err(|e| format!("cannot write pcap '{}': {e}", p.display()))?;
    }
    Ok(ctx)
}

/// What the commands over the connection manager (`ucmatose`, `rping`) share.
#[derive(Debug, clap::Args)]
pub struct CmRunArgs {
    /// Record every RoCE packet sent and received to this pcap file.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
    /// Print the device's and the connection manager's counters to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Seconds to wait for the peer at each step.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

/// The name of the device given with `--ib-dev`, or of the one that has address `local`
/// (given with `flag`), or `None` for the first one.
fn device_with(
    ib_dev: Option<&str>,
    local: Option<std::net::IpAddr>,
    flag: &str,
) -> Result<Option<String>, CliError> {
    Ok(match (ib_dev, local) {
        (Some(d), _) => Some(d.to_string()),
        (None, Some(ip)) => Some(
            ferroce::verbs::Device::list()
                .into_iter()
                .find(|d| d.gids().entries().iter().any(|e| e.addr == ip))
                .map(|d| d.name().to_string())
                .ok_or_else(|| format!("{flag} {ip}: no interface has this address"))?,
        ),
        (None, None) => None,
    })
}

/// `--stats`: the connection manager's non-zero counters on one stderr line.
fn print_cm_stats(cm: &ferroce::cm::ConnectionManager) {
    let (c, unsent) = cm.counters();
    let mut v: Vec<String> = c
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if unsent != 0 {
        v.push(format!("cm_tx_no_route={unsent}"));
    }
    v.push(format!("cm_thread_wakeups={}", cm.wakeups()));
    eprintln!("cm: {}", v.join(" "));
}

/// How the device moves frames (see [`ferroce::verbs::Context::link_modes`]).
fn link_modes(ctx: &ferroce::verbs::Context) -> Vec<(&'static str, String)> {
    ctx.link_modes()
}

/// `--stats`: the device's report (link, users, non-zero counters), a line each on stderr.
fn print_stats(ctx: &ferroce::verbs::Context) {
    for line in ctx.stats_report() {
        eprintln!("{line}");
    }
}

/// `--stats`: each QP's DCQCN state on one stderr line (nothing without congestion control).
fn print_rates(ctx: &ferroce::verbs::Context) {
    for (qpn, s) in ctx.qp_rates() {
        eprintln!(
            "dcqcn: qp {qpn:#08x} rate {:.3} Mb/s target {:.3} Mb/s alpha {:.4} limited {}",
            s.current_rate, s.target_rate, s.alpha, s.limited
        );
    }
}

/// Parses a `-m` value.
fn parse_mtu(m: u32) -> Result<ferroce::verbs::Mtu, CliError> {
    Ok(ferroce::verbs::Mtu::from_bytes(m)
        .ok_or_else(|| format!("invalid MTU {m}: use 256, 512, 1024, 2048 or 4096"))?)
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Decode(a) => decode::run(a),
        Command::RcPingpong(a) => pingpong::run(ferroce::verbs::QpType::Rc, a),
        Command::UcPingpong(a) => pingpong::run(ferroce::verbs::QpType::Uc, a),
        Command::UdPingpong(a) => pingpong::run(ferroce::verbs::QpType::Ud, a),
        Command::RcOps(a) => ops::run(a),
        Command::Ucmatose(a) => cm_example::run(cm_example::Example::Ucmatose, a),
        Command::Rping(a) => rping::run(a),
        Command::Udaddy(a) => cm_example::run(cm_example::Example::Udaddy, a),
        Command::Demo(a) => ops::demo(a),
        Command::Perf(c) => perf::run(*c),
        Command::Devices => devices::devices(),
        Command::Devinfo(a) => devices::devinfo(a),
        Command::Exec(a) => exec::run(a),
        Command::Mesh(a) => mesh::run(a),
        Command::Probe(c) => probe::run(c),
    }
}

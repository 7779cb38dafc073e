//! `ferroce perf write-bw | read-bw | send-bw | atomic-bw | write-lat | read-lat | send-lat`:
//! perftest's tools with their flags, TCP exchange and report tables, over ferroce.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use ferroce_cli::apps::perftest::{self, AtomicOp, Conn, Options, Test};
use ferroce_transport::DcqcnConfig;

use super::ratelog::RateLog;
use super::CliError;

#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Like ib_write_bw: RDMA WRITE bandwidth.
    WriteBw(PerfArgs),
    /// Like ib_read_bw: RDMA READ bandwidth.
    ReadBw(PerfArgs),
    /// Like ib_send_bw: SEND bandwidth (RC, UC, UD).
    SendBw(PerfArgs),
    /// Like ib_atomic_bw: atomic operation rate.
    AtomicBw(PerfArgs),
    /// Like ib_write_lat: RDMA WRITE ping-pong latency.
    WriteLat(PerfArgs),
    /// Like ib_read_lat: RDMA READ latency.
    ReadLat(PerfArgs),
    /// Like ib_send_lat: SEND ping-pong latency (RC, UC, UD).
    SendLat(PerfArgs),
}

/// perftest's flags (those ferroce implements); run both sides with the same ones.
#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(flatten)]
    pub peer: super::PeerArgs,
    /// Size of message to exchange (default 65536 for BW, 2 for latency tests).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Number of exchanges (at least 5; default 5000 for write-bw, else 1000).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u64>,
    /// Seconds left out at the start and end of a duration run (default duration / 4).
    #[arg(short = 'f', long = "margin")]
    pub margin: Option<u64>,
    /// Run sizes from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Path MTU: 256 - 4096 (default: the port's active MTU).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// GID index (default: the interface's IPv4 address).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<usize>,
    /// Number of QPs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: usize,
    /// Size of the send queue (default 128 for BW, 1 for latency tests).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<usize>,
    /// Size of the receive queue of SEND tests (default 512).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<usize>,
    /// CQ moderation (accepted; ferroce signals every work request).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<usize>,
    /// Connection type: RC, UC or UD (default RC).
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    pub connection: String,
    /// Atomic operation: CMP_AND_SWAP or FETCH_AND_ADD (default FETCH_AND_ADD).
    #[arg(short = 'A', long = "atomic_type", default_value = "FETCH_AND_ADD")]
    pub atomic_type: String,
    /// Outstanding RDMA READ / atomic requests (default and maximum 16).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// QP timeout exponent: 4.096 µs × 2^timeout.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    pub qp_timeout: u8,
    /// Report bandwidth in Gbit/s instead of MiB/s.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
    /// No peak bandwidth.
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Do not fail on CPU frequency scaling (accepted for compatibility).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Service level (accepted; RoCE v2 carries none).
    #[arg(short = 'S', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Record every RoCE packet sent and received to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Print the device counters (rxe hw_counters names) to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Give up after this many seconds without progress.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Traffic class of the QPs' packets (IP DSCP << 2 | ECN), as ibv's traffic_class.
    #[arg(long = "tclass", default_value_t = 0)]
    pub tclass: u8,
    #[command(flatten)]
    pub cc: CcArgs,
}

/// Congestion control and rate logging (ferroce's own flags, not perftest's).
#[derive(Debug, Args)]
pub struct CcArgs {
    /// Enable DCQCN congestion control: ECN-capable packets, CNPs for CE-marked ones,
    /// and rate limiting on CNPs (on both sides of a run).
    #[arg(long)]
    pub dcqcn: bool,
    /// Set a DCQCN parameter (mlx5 names, e.g. line_rate=100,rpg_ai_rate=1); repeatable.
    #[arg(long = "dcqcn-param", value_name = "NAME=VALUE", value_delimiter = ',')]
    pub dcqcn_params: Vec<String>,
    /// Append a CSV line per QP every --rate-interval to FILE: time, each QP's DCQCN
    /// rate, bytes sent and received, CNP and retransmission counters.
    #[arg(long = "rate-log", value_name = "FILE")]
    pub rate_log: Option<PathBuf>,
    /// Sampling period of --rate-log, milliseconds.
    #[arg(long = "rate-interval", value_name = "MS", default_value_t = 100)]
    pub rate_interval: u64,
}

impl CcArgs {
    /// The DCQCN configuration the flags ask for (`None`: leave the device's alone).
    pub fn dcqcn_config(&self) -> Result<Option<DcqcnConfig>, CliError> {
        if !self.dcqcn && self.dcqcn_params.is_empty() {
            return Ok(None);
        }
        if !self.dcqcn {
            return Err("--dcqcn-param needs --dcqcn".into());
        }
        let mut c = DcqcnConfig {
            enabled: true,
            ..DcqcnConfig::default()
        };
        for kv in &self.dcqcn_params {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--dcqcn-param {kv:?}: write NAME=VALUE"))?;
            c.set(k.trim(), v)
                .map_err(|e| format!("--dcqcn-param: {e}"))?;
        }
        c.validate().map_err(|e| format!("--dcqcn-param: {e}"))?;
        Ok(Some(c))
    }
}

impl PerfCommand {
    fn split(self) -> (Test, PerfArgs) {
        match self {
            PerfCommand::WriteBw(a) => (Test::WRITE_BW, a),
            PerfCommand::ReadBw(a) => (Test::READ_BW, a),
            PerfCommand::SendBw(a) => (Test::SEND_BW, a),
            PerfCommand::AtomicBw(a) => (Test::ATOMIC_BW, a),
            PerfCommand::WriteLat(a) => (Test::WRITE_LAT, a),
            PerfCommand::ReadLat(a) => (Test::READ_LAT, a),
            PerfCommand::SendLat(a) => (Test::SEND_LAT, a),
        }
    }
}

pub fn run(cmd: PerfCommand) -> Result<ExitCode, CliError> {
    let (test, a) = cmd.split();
    a.peer.check()?;
    let mtu = a.mtu.map(super::parse_mtu).transpose()?;
    let o = Options {
        server: a.peer.server,
        port: a.peer.port,
        size: a.size,
        iters: a.iters,
        duration: a.duration,
        margin: a.margin,
        all_sizes: a.all,
        mtu,
        gid_index: a.gid_index,
        num_qps: a.qps,
        tx_depth: a.tx_depth,
        rx_depth: a.rx_depth,
        cq_mod: a.cq_mod,
        conn: Conn::parse(&a.connection)?,
        atomic: AtomicOp::parse(&a.atomic_type)?,
        out_reads: a.outs,
        qp_timeout: a.qp_timeout,
        report_gbits: a.report_gbits,
        no_peak: a.no_peak,
        timeout: Duration::from_secs(a.timeout.max(1)),
        traffic_class: a.tclass,
        ..Options::new(test)
    };
    // Parameter mistakes are usage errors, before any device is opened.
    perftest::Params::derive(&o)?;
    let dcqcn = a.cc.dcqcn_config()?;
    let ctx = super::open_device(a.peer.ib_dev.as_deref(), a.pcap.as_deref())?;
    if let Some(c) = dcqcn {
        ctx.set_dcqcn(c)?;
    }
    let log = match &a.cc.rate_log {
        Some(path) => Some(RateLog::start(
            &ctx,
            path,
            Duration::from_millis(a.cc.rate_interval),
        )?),
        None => None,
    };
    let mut out = std::io::stdout();
    let result = perftest::run(&ctx, &o, &mut out);
    if let Some(log) = log {
        log.stop();
    }
    if a.stats {
        super::print_stats(&ctx);
        super::print_rates(&ctx);
    }
    match result {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("ferroce: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

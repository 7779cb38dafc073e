//! `ferroce rc-pingpong | uc-pingpong | ud-pingpong`: rdma-core's ibv_*_pingpong, same
//! flags and output, over ferroce.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferroce::verbs::QpType;
use ferroce_cli::apps::pingpong::{self, Options};

use super::CliError;

#[derive(Debug, Args)]
pub struct PingPongArgs {
    #[command(flatten)]
    pub peer: super::PeerArgs,
    /// Size of message to exchange (default 4096; 2048 for UD).
    #[arg(short = 's', long = "size")]
    pub size: Option<usize>,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: usize,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: usize,
    /// Service level (accepted for compatibility; RoCE v2 carries none).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on CQ events (ferroce always blocks; accepted for compatibility).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local port GID index (default: the interface's IPv4 address).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<usize>,
    /// Validate the received buffer.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Record every RoCE packet sent and received to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Print the device counters (rxe hw_counters names) to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Give up after this many seconds without a completion.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

pub fn run(qp_type: QpType, a: PingPongArgs) -> Result<ExitCode, CliError> {
    let mtu = super::parse_mtu(a.mtu)?;
    a.peer.check()?;
    if a.rx_depth < 2 {
        return Err("rx-depth must be at least 2".into());
    }
    let ctx = super::open_device(a.peer.ib_dev.as_deref(), a.pcap.as_deref())?;
    let opts = Options {
        qp_type,
        server: a.peer.server,
        port: a.peer.port,
        size: a
            .size
            .unwrap_or(if qp_type == QpType::Ud { 2048 } else { 4096 }),
        mtu,
        rx_depth: a.rx_depth,
        iters: a.iters,
        gid_index: a.gid_idx,
        validate: a.chk,
        timeout: Duration::from_secs(a.timeout),
    };
    let mut out = std::io::stdout();
    let result = pingpong::run(&ctx, &opts, &mut out);
    if a.stats {
        super::print_stats(&ctx);
    }
    match result {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("ferroce: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

//! `ferroce mesh`: one rank of an all-to-all RC test among processes on one interface.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferroce_cli::apps::mesh::{self, Options, PeerOutcome};

use super::CliError;

#[derive(Debug, Args)]
pub struct MeshArgs {
    /// Device (interface) to use.
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// This process's rank, 0-based.
    #[arg(long, default_value_t = 0)]
    pub rank: usize,
    /// How many ranks take part.
    #[arg(long, default_value_t = 2)]
    pub ranks: usize,
    /// Directory the ranks meet in (shared by all of them, empty at the start).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Bytes per message.
    #[arg(short = 's', long, default_value_t = 16384)]
    pub size: usize,
    /// Messages to each peer.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub iters: usize,
    /// Milliseconds between rounds (one message to every peer per round).
    #[arg(long, default_value_t = 10)]
    pub interval_ms: u64,
    /// Local ACK timeout exponent of the QPs (4.096 µs × 2^N).
    #[arg(long, default_value_t = 14)]
    pub qp_timeout: u8,
    /// Transport retries before retry-exceeded.
    #[arg(long, default_value_t = 7)]
    pub retry_cnt: u8,
    /// Local port GID index (default: the interface's IPv4 address).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<usize>,
    /// Give up when nothing completes for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Do not exchange: create one QP per other rank, print their numbers, and wait this
    /// many seconds (a bystander that must receive nothing).
    #[arg(long)]
    pub idle: Option<u64>,
    /// Print the device counters (rxe hw_counters names) to stderr at the end.
    #[arg(long)]
    pub stats: bool,
}

/// Exit code when some peers were lost (their QPs ended in error) but every message that
/// did arrive was intact.
const EXIT_PEERS_LOST: u8 = 3;

pub fn run(a: MeshArgs) -> Result<ExitCode, CliError> {
    let ctx = super::open_device(a.ib_dev.as_deref(), None)?;
    if let Some(secs) = a.idle {
        let r = mesh::idle(
            &ctx,
            a.ranks.saturating_sub(1),
            Duration::from_secs(secs),
            &mut std::io::stdout(),
        );
        if a.stats {
            super::print_stats(&ctx);
        }
        r?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(dir) = a.dir else {
        return Err("--dir is required: the directory where the ranks meet".into());
    };
    let opts = Options {
        rank: a.rank,
        ranks: a.ranks,
        dir,
        size: a.size,
        iters: a.iters,
        interval: Duration::from_millis(a.interval_ms),
        qp_timeout: a.qp_timeout,
        retry_cnt: a.retry_cnt,
        timeout: Duration::from_secs(a.timeout.max(1)),
        gid_index: a.gid_idx,
    };
    let result = mesh::run(&ctx, &opts, &mut std::io::stdout());
    if a.stats {
        super::print_stats(&ctx);
    }
    let outcomes = result?;
    if outcomes.iter().all(|o| *o == PeerOutcome::Ok) {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_PEERS_LOST))
    }
}

//! `ferroce ucmatose`: rdma-core's ucmatose over ferroce's connection manager (QP1), with
//! its flags.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferroce_cli::apps::cmatose::{self, Options};

use super::CliError;

#[derive(Debug, Args)]
pub struct CmatoseArgs {
    /// Server address to connect to; without it, be the server.
    #[arg(short = 's')]
    pub server: Option<IpAddr>,
    /// Local address: picks the device that has it (instead of -d).
    #[arg(short = 'b')]
    pub bind: Option<IpAddr>,
    /// rdma_cm port number.
    #[arg(short = 'p', default_value_t = 7471)]
    pub port: u16,
    /// Connections (ferroce: 1).
    #[arg(short = 'c', default_value_t = 1)]
    pub connections: usize,
    /// Messages to send each way.
    #[arg(short = 'C', default_value_t = 10)]
    pub count: usize,
    /// Bytes per message.
    #[arg(short = 'S', default_value_t = 100)]
    pub size: usize,
    /// Device: a network interface name (default: the one with -b's address, or the first).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Record every RoCE packet sent and received to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Print the device's and the connection manager's counters to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Seconds to wait for the peer at each step.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

pub fn run(a: CmatoseArgs) -> Result<ExitCode, CliError> {
    if a.connections != 1 {
        return Err("-c: ferroce's ucmatose makes one connection; leave -c out".into());
    }
    if a.size > 1 << 30 || a.count > 1 << 16 {
        return Err("-S or -C too large: at most 1 GiB messages, 65536 of them".into());
    }
    let dev = match (&a.ib_dev, a.bind) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(ip)) => Some(
            ferroce::verbs::Device::list()
                .into_iter()
                .find(|d| d.gids().entries().iter().any(|e| e.addr == ip))
                .map(|d| d.name().to_string())
                .ok_or_else(|| format!("-b {ip}: no interface has this address"))?,
        ),
        (None, None) => None,
    };
    let ctx = super::open_device(dev.as_deref(), a.pcap.as_deref())?;
    let opts = Options {
        server: a.server,
        port: a.port,
        count: a.count,
        size: a.size,
        timeout: Duration::from_secs(a.timeout),
    };
    let mut out = std::io::stdout();
    let result = cmatose::run(&ctx, &opts, &mut out);
    println!("test complete");
    if a.stats {
        super::print_stats(&ctx);
    }
    match result {
        Ok(()) => {
            println!("return status 0");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("ferroce: {e}");
            println!("return status 1");
            Ok(ExitCode::from(1))
        }
    }
}

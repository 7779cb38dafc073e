//! `ferroce ucmatose` and `ferroce udaddy`: rdma-core's ucmatose and udaddy over ferroce's
//! connection manager (QP1), with their flags (which they share).

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferroce::cm::ConnectionManager;
use ferroce_cli::apps::{cmatose, udaddy};

use super::CliError;

#[derive(Debug, Args)]
pub struct ExampleArgs {
    /// Server address to connect to (or resolve); without it, be the server.
    #[arg(short = 's')]
    pub server: Option<IpAddr>,
    /// Local address: picks the device that has it (instead of -d).
    #[arg(short = 'b')]
    pub bind: Option<IpAddr>,
    /// rdma_cm port number (ucmatose 7471, udaddy 7174).
    #[arg(short = 'p')]
    pub port: Option<u16>,
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
    #[command(flatten)]
    pub run: super::CmRunArgs,
}

/// Which example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Example {
    /// RC, SENDs both ways (rdma_cm's TCP port space).
    Ucmatose,
    /// UD, datagrams both ways to a service found with SIDR (rdma_cm's UDP port space).
    Udaddy,
}

pub fn run(which: Example, a: ExampleArgs) -> Result<ExitCode, CliError> {
    if a.connections != 1 {
        return Err("-c: ferroce's ucmatose and udaddy make one connection; leave -c out".into());
    }
    if a.size > 1 << 30 || a.count > 1 << 16 {
        return Err("-S or -C too large: at most 1 GiB messages, 65536 of them".into());
    }
    let dev = super::device_with(a.ib_dev.as_deref(), a.bind, "-b")?;
    let ctx = super::open_device(dev.as_deref(), a.run.pcap.as_deref())?;
    let cm = ConnectionManager::open(&ctx)?;
    let opts = cmatose::Options {
        server: a.server,
        port: a.port.unwrap_or(match which {
            Example::Ucmatose => 7471,
            Example::Udaddy => 7174,
        }),
        count: a.count,
        size: a.size,
        timeout: Duration::from_secs(a.run.timeout),
    };
    let mut out = std::io::stdout();
    let result = match which {
        Example::Ucmatose => cmatose::run(&ctx, &cm, &opts, &mut out),
        Example::Udaddy => udaddy::run(&ctx, &cm, &opts, &mut out),
    };
    println!("test complete");
    if a.run.stats {
        super::print_stats(&ctx);
        super::print_cm_stats(&cm);
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

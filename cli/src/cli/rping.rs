//! `ferroce rping`: rdma-core's rping over ferroce's connection manager (QP1), with its
//! flags.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferroce::cm::ConnectionManager;
use ferroce_cli::apps::rping::{self, Options, MIN_SIZE};

use super::CliError;

#[derive(Debug, Args)]
pub struct RpingArgs {
    /// Be the server.
    #[arg(short = 's', conflicts_with = "client")]
    pub server: bool,
    /// Be the client.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address: the server's to connect to (client), or the one to listen on (server).
    #[arg(short = 'a')]
    pub addr: IpAddr,
    /// The client's source address (picks its device).
    #[arg(short = 'I')]
    pub source: Option<IpAddr>,
    /// rdma_cm port.
    #[arg(short = 'p', default_value_t = 7174)]
    pub port: u16,
    /// Pings (client; 0: until stopped).
    #[arg(short = 'C', default_value_t = 0)]
    pub count: usize,
    /// Bytes of each ping buffer.
    #[arg(short = 'S', default_value_t = 64)]
    pub size: usize,
    /// Print each ping's data.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate each ping (ferroce's client always does).
    #[arg(short = 'V')]
    pub validate: bool,
    /// Device: a network interface name (default: the one with -a's address for a server,
    /// -I's for a client, else the first).
    #[arg(long = "ib-dev")]
    pub ib_dev: Option<String>,
    #[command(flatten)]
    pub run: super::CmRunArgs,
}

pub fn run(a: RpingArgs) -> Result<ExitCode, CliError> {
    if a.server == a.client {
        return Err("rping: say -s (server) or -c (client)".into());
    }
    if a.size < MIN_SIZE || a.size > 1 << 30 {
        return Err(format!("-S {}: between {MIN_SIZE} and 1 GiB", a.size).into());
    }
    let local = if a.server { Some(a.addr) } else { a.source };
    let dev = super::device_with(
        a.ib_dev.as_deref(),
        local,
        if a.server { "-a" } else { "-I" },
    )?;
    let ctx = super::open_device(dev.as_deref(), a.run.pcap.as_deref())?;
    let cm = ConnectionManager::open(&ctx)?;
    let opts = Options {
        server: a.client.then_some(a.addr),
        port: a.port,
        count: a.count,
        size: a.size,
        verbose: a.verbose,
        timeout: Duration::from_secs(a.run.timeout),
    };
    let result = rping::run(&ctx, &cm, &opts, &mut std::io::stdout());
    if a.run.stats {
        super::print_stats(&ctx);
        super::print_cm_stats(&cm);
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("ferroce: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

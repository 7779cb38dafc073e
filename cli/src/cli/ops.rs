//! `ferroce rc-ops` (every RC operation against a peer, data checked) and `ferroce demo`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferroce::verbs::{Context, Mtu};
use ferroce_cli::apps::ops::{self, OpsOptions};

use super::CliError;

#[derive(Debug, Args)]
pub struct OpsArgs {
    /// Server to connect to; without it, wait for a client.
    pub server: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18516)]
    pub port: u16,
    /// Device (network interface) to use.
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Bytes per SEND / WRITE / READ.
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    pub size: usize,
    /// Iterations of the whole set of operations.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Path MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Local GID index (default: the interface's IPv4 address).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<usize>,
    /// Seed of the data patterns (client side).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Record every RoCE packet to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Print the device counters at the end.
    #[arg(long)]
    pub stats: bool,
}

pub fn run(a: OpsArgs) -> Result<ExitCode, CliError> {
    let mtu = super::parse_mtu(a.mtu)?;
    let ctx = super::open_device(a.ib_dev.as_deref(), a.pcap.as_deref())?;
    let o = OpsOptions {
        iters: a.iters,
        size: a.size,
        mtu,
        gid_index: a.gid_idx,
        seed: a.seed,
        timeout: Duration::from_secs(30),
    };
    let mut out = std::io::stdout();
    let r = match &a.server {
        Some(s) => ops::client(&ctx, s, a.port, &o, &mut out),
        None => ops::server(&ctx, a.port, &o, &mut out),
    };
    if a.stats {
        super::print_stats(&ctx);
    }
    match r {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("ferroce: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Bytes per SEND / WRITE / READ.
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    pub size: usize,
    /// Iterations of the whole set of operations.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
}

/// Two devices on an in-memory wire in this process: every RC operation, checked.
pub fn demo(a: DemoArgs) -> Result<ExitCode, CliError> {
    let (server_ctx, client_ctx) = Context::memory_pair()?;
    let mut out = std::io::stdout();
    writeln!(
        out,
        "ferroce demo: two RoCE v2 devices joined by an in-memory wire ({} <-> {}),",
        server_ctx.attr().name,
        client_ctx.attr().name
    )?;
    writeln!(out, "every RC operation {} times with {} bytes, checked byte for byte; full frames with ICRC on the wire.\n", a.iters, a.size)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let o = OpsOptions {
        iters: a.iters,
        size: a.size,
        mtu: Mtu::Mtu4096,
        ..OpsOptions::default()
    };
    let so = o.clone();
    let server = std::thread::spawn(move || -> Result<(), String> {
        let (stream, _) = listener.accept().map_err(|e| e.to_string())?;
        ops::serve(&server_ctx, stream, &so, &mut std::io::sink())
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let r = ops::client(&client_ctx, "127.0.0.1", port, &o, &mut out);
    let s = server.join().map_err(|_| "server thread panicked")?;
    r?;
    s?;
    let c: Vec<String> = client_ctx
        .counters()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    writeln!(out, "\nclient counters: {}", c.join(" "))?;
    Ok(ExitCode::SUCCESS)
}

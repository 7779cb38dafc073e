//! The `ferroce` command-line tool.

use std::process::ExitCode;

use clap::Parser;

mod cli;

/// Log filter without `RUST_LOG`: warnings, except netlink-packet-route's about attributes
/// newer than the crate (Linux 6.18's IFLA_INET6_CONF is longer than it knows, and it said
/// so on the first run after an interface came up), which ferroce does not read.
const DEFAULT_LOG: &str = "warn,netlink_packet_route=error";

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG)),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS, // e.g. `ferroce decode x | head`
        Err(e) => {
            eprintln!("ferroce: {e}");
            ExitCode::from(2)
        }
    }
}

/// Whether the error, or one it was caused by, is stdout's reader gone away.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

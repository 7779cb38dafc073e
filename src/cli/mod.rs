//! Command-line interface: argument definitions and dispatch.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;

/// A user-space RoCE v2 stack.
#[derive(Debug, Parser)]
#[command(name = "ferroce", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode the RoCE v2 packets of a pcap or pcapng capture, one line per packet.
    Decode(decode::DecodeArgs),
}

/// A user-facing error: printed as one line, exit code 2.
pub type CliError = Box<dyn std::error::Error>;

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Decode(a) => decode::run(a),
    }
}

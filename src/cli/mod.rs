//! Command-line interface: argument definitions and dispatch.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;
mod devices;
mod ops;
mod pingpong;

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
    /// Like ibv_rc_pingpong: RC SEND ping-pong with the same flags and output.
    RcPingpong(pingpong::PingPongArgs),
    /// Like ibv_uc_pingpong: UC SEND ping-pong.
    UcPingpong(pingpong::PingPongArgs),
    /// Like ibv_ud_pingpong: UD SEND ping-pong.
    UdPingpong(pingpong::PingPongArgs),
    /// Every RC operation (SEND, WRITE, READ, atomics, with immediate) against a peer, checked.
    RcOps(ops::OpsArgs),
    /// Live demo without privileges: two devices on an in-memory wire run every RC operation.
    Demo(ops::DemoArgs),
    /// List RoCE devices (Ethernet interfaces with an address), like ibv_devices.
    Devices,
    /// Show device and port attributes, like ibv_devinfo.
    Devinfo(devices::DevinfoArgs),
}

/// A user-facing error: printed as one line, exit code 2.
pub type CliError = Box<dyn std::error::Error>;

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Decode(a) => decode::run(a),
        Command::RcPingpong(a) => pingpong::run(ferroce::verbs::QpType::Rc, a),
        Command::UcPingpong(a) => pingpong::run(ferroce::verbs::QpType::Uc, a),
        Command::UdPingpong(a) => pingpong::run(ferroce::verbs::QpType::Ud, a),
        Command::RcOps(a) => ops::run(a),
        Command::Demo(a) => ops::demo(a),
        Command::Devices => devices::devices(),
        Command::Devinfo(a) => devices::devinfo(a),
    }
}

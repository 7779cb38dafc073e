//! `ferroce devices` and `ferroce devinfo`, like ibv_devices and ibv_devinfo.

use std::process::ExitCode;

use clap::Args;
use ferroce::verbs::Device;

use super::CliError;

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

pub fn devices() -> Result<ExitCode, CliError> {
    println!("    {:<16}\t   node GUID", "device");
    println!("    {:<16}\t----------------", "------");
    for d in Device::list() {
        println!("    {:<16}\t{:016x}", d.name(), d.node_guid());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct DevinfoArgs {
    /// Only this device.
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Also list the GID table.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

fn mtu_code(m: u32) -> u32 {
    match m {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

pub fn devinfo(a: DevinfoArgs) -> Result<ExitCode, CliError> {
    let devs = match &a.ib_dev {
        Some(n) => vec![Device::by_name(n)?],
        None => Device::list(),
    };
    if devs.is_empty() {
        return Err("No IB devices found: no Ethernet interface with an address".into());
    }
    for d in devs {
        let i = d.interface();
        let mtu = i.ib_mtu();
        println!("hca_id:\t{}", d.name());
        println!("\ttransport:\t\t\tInfiniBand (0)");
        println!("\tfw_ver:\t\t\t\t{}", env!("CARGO_PKG_VERSION"));
        println!("\tnode_guid:\t\t\t{}", guid(d.node_guid()));
        println!("\tsys_image_guid:\t\t\t{}", guid(d.node_guid()));
        println!("\tvendor_id:\t\t\t0x0000");
        println!("\tvendor_part_id:\t\t\t0");
        println!("\thw_ver:\t\t\t\t0x0");
        println!("\tphys_port_cnt:\t\t\t1");
        println!("\t\tport:\t1");
        let (state, code) = if i.up {
            ("PORT_ACTIVE", 4)
        } else {
            ("PORT_DOWN", 1)
        };
        println!("\t\t\tstate:\t\t\t{state} ({code})");
        println!("\t\t\tmax_mtu:\t\t4096 (5)");
        println!("\t\t\tactive_mtu:\t\t{mtu} ({})", mtu_code(mtu));
        println!("\t\t\tsm_lid:\t\t\t0");
        println!("\t\t\tport_lid:\t\t0");
        println!("\t\t\tport_lmc:\t\t0x00");
        println!("\t\t\tlink_layer:\t\tEthernet");
        // Who else uses the interface through ferroce (processes sharing it, their QPs).
        if let Ok(u) = ferroce::link::share::users(i.index) {
            println!("\t\t\tferroce_processes:\t{}", u.processes);
            println!("\t\t\tferroce_qps:\t\t{}", u.qps);
        }
        if a.verbose {
            for e in d.gids().entries() {
                println!("\t\t\tGID[{:>3}]:\t\t{}, RoCE v2", e.index, e.gid);
            }
        }
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

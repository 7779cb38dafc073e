//! `ferroce devices` and `ferroce devinfo`, like ibv_devices and ibv_devinfo.

use std::io::Write;
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

// Output goes through `writeln!`, not `println!`: a reader that closes the pipe early
// (`ferroce devinfo | grep -q`) is an error `main` ends quietly on, not a panic.
pub fn devices() -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "    {:<16}\t   node GUID", "device")?;
    writeln!(out, "    {:<16}\t----------------", "------")?;
    for d in Device::list() {
        writeln!(out, "    {:<16}\t{:016x}", d.name(), d.node_guid())?;
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
    let mut out = std::io::stdout().lock();
    for d in devs {
        let i = d.interface();
        let mtu = i.ib_mtu();
        writeln!(out, "hca_id:\t{}", d.name())?;
        writeln!(out, "\ttransport:\t\t\tInfiniBand (0)")?;
        writeln!(out, "\tfw_ver:\t\t\t\t{}", env!("CARGO_PKG_VERSION"))?;
        writeln!(out, "\tnode_guid:\t\t\t{}", guid(d.node_guid()))?;
        writeln!(out, "\tsys_image_guid:\t\t\t{}", guid(d.node_guid()))?;
        writeln!(out, "\tvendor_id:\t\t\t0x0000")?;
        writeln!(out, "\tvendor_part_id:\t\t\t0")?;
        writeln!(out, "\thw_ver:\t\t\t\t0x0")?;
        writeln!(out, "\tphys_port_cnt:\t\t\t1")?;
        writeln!(out, "\t\tport:\t1")?;
        let (state, code) = if i.up {
            ("PORT_ACTIVE", 4)
        } else {
            ("PORT_DOWN", 1)
        };
        writeln!(out, "\t\t\tstate:\t\t\t{state} ({code})")?;
        writeln!(out, "\t\t\tmax_mtu:\t\t4096 (5)")?;
        writeln!(out, "\t\t\tactive_mtu:\t\t{mtu} ({})", mtu_code(mtu))?;
        writeln!(out, "\t\t\tsm_lid:\t\t\t0")?;
        writeln!(out, "\t\t\tport_lid:\t\t0")?;
        writeln!(out, "\t\t\tport_lmc:\t\t0x00")?;
        writeln!(out, "\t\t\tlink_layer:\t\tEthernet")?;
        // Who else uses the interface through ferroce (processes sharing it, their QPs).
        if let Ok(u) = ferroce::link::share::users(i.index) {
            writeln!(out, "\t\t\tferroce_processes:\t{}", u.processes)?;
            writeln!(out, "\t\t\tferroce_qps:\t\t{}", u.qps)?;
        }
        if a.verbose {
            for e in d.gids().entries() {
                writeln!(out, "\t\t\tGID[{:>3}]:\t\t{}, RoCE v2", e.index, e.gid)?;
            }
            print_link_modes(&mut out, &d)?;
        }
        writeln!(out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `devinfo -v`: how this host would move frames on the device (the list `--stats` prints,
/// [`super::link_modes`]), found by opening it as a program would; a user who may not open
/// it is told why.
fn print_link_modes(out: &mut impl Write, d: &Device) -> std::io::Result<()> {
    let ctx = match d.open() {
        Ok(c) => c,
        Err(e) => return writeln!(out, "\t\t\tferroce_link:\t\tnot opened ({e})"),
    };
    for (what, choice) in super::link_modes(&ctx) {
        let label = format!("ferroce_{}:", what.replace(' ', "_"));
        // Values in one column, as ibv_devinfo's port attributes (tab stops of 8).
        let tabs = if label.len() < 16 { "\t\t" } else { "\t" };
        writeln!(out, "\t\t\t{label}{tabs}{choice}")?;
    }
    Ok(())
}

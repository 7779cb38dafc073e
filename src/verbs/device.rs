//! RoCE devices: every Ethernet interface with an address is one, named like the interface,
//! and `lo` last (processes of one host reaching each other through 127.0.0.1 or ::1).

use std::net::IpAddr;

use crate::link::interface::Interface;
use crate::net::gid::GidTable;

use super::{Context, Error};

/// A network interface usable as a RoCE v2 device.
#[derive(Debug, Clone)]
pub struct Device {
    iface: Interface,
    gids: GidTable,
}

impl Device {
    /// Every usable device of this network namespace: Ethernet interfaces with at least
    /// one address, then `lo`. Loopback comes last so that programs taking the first
    /// device (perftest without `-d`) keep getting a real interface.
    pub fn list() -> Vec<Device> {
        let (mut eth, lo): (Vec<Interface>, Vec<Interface>) = Interface::all()
            .into_iter()
            .filter(|i| (i.mac != [0; 6] || i.loopback) && !i.addrs.is_empty())
            .partition(|i| !i.loopback);
        eth.extend(lo);
        eth.into_iter().map(Device::from_interface).collect()
    }

    /// The device on interface `name`.
    pub fn by_name(name: &str) -> Result<Device, Error> {
        Ok(Device::from_interface(Interface::by_name(name)?))
    }

    fn from_interface(iface: Interface) -> Device {
        let addrs: Vec<IpAddr> = iface.addrs.iter().map(|(a, _)| *a).collect();
        let gids = if iface.loopback {
            GidTable::from_addrs(&addrs)
        } else {
            GidTable::for_ethernet(iface.mac, &addrs)
        };
        Device { gids, iface }
    }

    /// The device (interface) name.
    pub fn name(&self) -> &str {
        &self.iface.name
    }

    /// The device's kernel-side name (`ibv_device.dev_name`, `uverbsN` on a kernel
    /// driver): `ferroce-` and the interface's name. `ferroce exec` puts a node of this
    /// name in the program's `/dev/infiniband`, where UCX looks for one.
    pub fn dev_name(&self) -> String {
        format!("ferroce-{}", self.name())
    }

    /// The interface behind it.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The GID table.
    pub fn gids(&self) -> &GidTable {
        &self.gids
    }

    /// The node GUID, derived from the MAC address as for RoCE NICs (EUI-64).
    pub fn node_guid(&self) -> u64 {
        u64::from_be_bytes(crate::net::gid::eui64(self.iface.mac))
    }

    /// Opens the device: a raw socket on the interface and a driver thread.
    pub fn open(&self) -> Result<Context, Error> {
        Context::open_device(self)
    }
}

//! Network interfaces as ferroce sees them: index, MAC, MTU, addresses.

use std::io;
use std::net::IpAddr;

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (`eth0`).
    pub name: String,
    /// Kernel interface index.
    pub index: u32,
    /// Hardware address.
    pub mac: [u8; 6],
    /// The netdev MTU (IP packet size).
    pub mtu: u32,
    /// Addresses with their prefix lengths, in the kernel's order.
    pub addrs: Vec<(IpAddr, u8)>,
    /// Administratively and operationally up (running, with carrier): the IB port is
    /// ACTIVE then, DOWN otherwise.
    pub up: bool,
    /// The loopback interface (`lo`): no MAC address, every frame sent comes back in.
    pub loopback: bool,
}

/// Why an interface cannot be used.
#[derive(Debug)]
pub enum InterfaceError {
    /// No interface of that name; the names that exist are given.
    Unknown {
        /// The name asked for.
        name: String,
        /// Interfaces that do exist, for the message.
        available: Vec<String>,
    },
    /// The interface has no Ethernet address (tunnels).
    NotEthernet(String),
    /// Listing the interfaces failed.
    Io(io::Error),
}

impl std::fmt::Display for InterfaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InterfaceError::Unknown { name, available } => write!(
                f,
                "no network interface named '{name}' (available: {}); pick one with -d/--ib-dev",
                available.join(", ")
            ),
            InterfaceError::NotEthernet(n) => {
                write!(f, "interface '{n}' is not an Ethernet interface; RoCE needs one (e.g. eth0 or a veth)")
            }
            InterfaceError::Io(e) => write!(f, "cannot read interface information: {e}"),
        }
    }
}

impl std::error::Error for InterfaceError {}

fn mtu_of(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

impl Interface {
    /// Every interface of this network namespace.
    pub fn all() -> Vec<Interface> {
        pnet_datalink::interfaces()
            .into_iter()
            .map(|i| Interface {
                mtu: mtu_of(&i.name),
                mac: i.mac.map(|m| m.octets()).unwrap_or_default(),
                addrs: i.ips.iter().map(|n| (n.ip(), n.prefix())).collect(),
                up: i.is_up() && i.is_running(),
                loopback: i.is_loopback(),
                index: i.index,
                name: i.name,
            })
            .collect()
    }

    /// The interface called `name`: an Ethernet one, or `lo`.
    pub fn by_name(name: &str) -> Result<Interface, InterfaceError> {
        let all = Self::all();
        let found = all.iter().find(|i| i.name == name).cloned();
        match found {
            None => Err(InterfaceError::Unknown {
                name: name.to_string(),
                available: all
                    .into_iter()
                    .filter(|i| i.mac != [0; 6] || i.loopback)
                    .map(|i| i.name)
                    .collect(),
            }),
            Some(i) if i.mac == [0; 6] && !i.loopback => Err(InterfaceError::NotEthernet(i.name)),
            Some(i) => Ok(i),
        }
    }

    /// The RoCE path MTU this interface supports, as rxe derives it: the largest IB MTU
    /// (256..4096) that fits in the netdev MTU less 80 bytes of headers.
    pub fn ib_mtu(&self) -> u32 {
        ib_mtu_for(self.mtu)
    }
}

/// The largest IB MTU that fits a netdev MTU (1500 gives 1024, 9000 gives 4096).
pub fn ib_mtu_for(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(80);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
        .unwrap_or(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_follows_rxe() {
        assert_eq!(ib_mtu_for(1500), 1024);
        assert_eq!(ib_mtu_for(9000), 4096);
        assert_eq!(ib_mtu_for(4200), 4096);
        assert_eq!(ib_mtu_for(2200), 2048);
        assert_eq!(ib_mtu_for(576), 256);
    }

    #[test]
    fn unknown_interface_names_the_alternatives() {
        let e = Interface::by_name("no-such-if0").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("no-such-if0") && text.contains("available"),
            "{text}"
        );
    }
}

//! The GID table: an interface's addresses as RoCE v2 GIDs, indexed as rxe presents them.
//!
//! ferroce uses the interface's own addresses, so there is no second address to configure.
//! IPv4 addresses appear IPv4-mapped (`::ffff:a.b.c.d`). On an Ethernet interface index 0
//! is the default GID, the link-local address the MAC gives (EUI-64), whether or not the
//! kernel has assigned that address yet: as in the kernel's GID cache, which reserves the
//! default entries at registration. The IPv4 address is thus at index 1 from the moment it
//! exists, as on rxe, and does not move when IPv6 comes up a moment after the link (a
//! program that read index 1 from `ibv_devinfo` while the link came up would otherwise
//! name the link-local address). The other addresses follow: IPv4 first, then IPv6.

use std::net::{IpAddr, Ipv6Addr};

/// A GID and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the table (what `-g` / `-x` take).
    pub index: usize,
    /// The GID: an IPv6 address, or IPv4-mapped for an IPv4 address.
    pub gid: Ipv6Addr,
    /// The interface address behind it.
    pub addr: IpAddr,
}

/// The GID table of one interface (IB port 1 of its device).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidTable {
    entries: Vec<GidEntry>,
}

/// The GID form of an IP address.
pub fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The IP address behind a GID (IPv4-mapped GIDs give IPv4).
pub fn addr_of(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// The EUI-64 interface identifier of a MAC address (universal/local bit flipped, `ff:fe`
/// in the middle): the low half of the default GID and the node GUID of RoCE devices.
pub fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// The default GID of an Ethernet port: `fe80::` and the MAC's EUI-64 identifier.
pub fn default_gid(mac: [u8; 6]) -> Ipv6Addr {
    let mut b = [0u8; 16];
    b[0] = 0xfe;
    b[1] = 0x80;
    b[8..].copy_from_slice(&eui64(mac));
    Ipv6Addr::from(b)
}

impl GidTable {
    /// The table of an Ethernet interface with MAC `mac`: the default GID at index 0, then
    /// the interface's addresses, IPv4 before IPv6 (the kernel's link-local address, when
    /// it is the default GID, is not listed twice).
    pub fn for_ethernet(mac: [u8; 6], addrs: &[IpAddr]) -> GidTable {
        let default = IpAddr::V6(default_gid(mac));
        let rest = addrs
            .iter()
            .filter(|a| a.is_ipv4())
            .chain(addrs.iter().filter(|a| a.is_ipv6()))
            .filter(|a| **a != default && !a.is_loopback());
        GidTable::numbered(std::iter::once(&default).chain(rest))
    }

    fn numbered<'a>(addrs: impl Iterator<Item = &'a IpAddr>) -> GidTable {
        let entries = addrs
            .enumerate()
            .map(|(index, a)| GidEntry {
                index,
                gid: gid_of(*a),
                addr: *a,
            })
            .collect();
        GidTable { entries }
    }

    /// Builds the table from addresses alone (`lo`, and in-memory devices): link-local
    /// addresses first, then the others in the order given.
    pub fn from_addrs(addrs: &[IpAddr]) -> GidTable {
        let is_ll = |a: &IpAddr| matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
        let ordered = addrs
            .iter()
            .filter(|a| is_ll(a))
            .chain(addrs.iter().filter(|a| !is_ll(a)));
        // Loopback addresses only on `lo`, where they are all there is.
        let only_loopback = addrs.iter().all(IpAddr::is_loopback);
        GidTable::numbered(ordered.filter(|a| only_loopback || !a.is_loopback()))
    }

    /// Every entry, by index.
    pub fn entries(&self) -> &[GidEntry] {
        &self.entries
    }

    /// The entry at `index`.
    pub fn get(&self, index: usize) -> Option<&GidEntry> {
        self.entries.get(index)
    }

    /// The index of `gid`.
    pub fn index_of(&self, gid: Ipv6Addr) -> Option<usize> {
        self.entries.iter().position(|e| e.gid == gid)
    }

    /// The entry to use when none is named: the first IPv4 address, else the first entry.
    pub fn default_entry(&self) -> Option<&GidEntry> {
        self.entries
            .iter()
            .find(|e| e.addr.is_ipv4())
            .or_else(|| self.entries.first())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_first_then_ipv4_mapped() {
        let addrs: Vec<IpAddr> = vec![
            "10.77.0.1".parse().unwrap(),
            "fe80::1".parse().unwrap(),
            "fd00::5".parse().unwrap(),
        ];
        let t = GidTable::from_addrs(&addrs);
        assert_eq!(
            t.get(0).unwrap().gid,
            "fe80::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            t.get(1).unwrap().gid,
            "::ffff:10.77.0.1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(t.get(2).unwrap().addr, "fd00::5".parse::<IpAddr>().unwrap());
        assert_eq!(t.default_entry().unwrap().index, 1);
        assert_eq!(
            addr_of(t.get(1).unwrap().gid),
            "10.77.0.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(t.index_of("::ffff:10.77.0.1".parse().unwrap()), Some(1));
    }

    /// The IPv4 address keeps index 1 while the link-local address is still missing (the
    /// first moments after link-up, or IPv6 disabled), once it is there, and after a
    /// global IPv6 address arrives.
    #[test]
    fn the_ipv4_index_does_not_move_when_ipv6_comes_up() {
        let mac = [0x16, 0xd1, 0x73, 0x3f, 0x2c, 0x69];
        let ll: IpAddr = "fe80::14d1:73ff:fe3f:2c69".parse().unwrap();
        let v4: IpAddr = "10.66.0.1".parse().unwrap();
        let global: IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(
            default_gid(mac),
            "fe80::14d1:73ff:fe3f:2c69".parse::<Ipv6Addr>().unwrap()
        );
        let before = GidTable::for_ethernet(mac, &[v4]);
        let after = GidTable::for_ethernet(mac, &[v4, ll]);
        let later = GidTable::for_ethernet(mac, &[global, v4, ll]);
        for t in [&before, &after, &later] {
            assert_eq!(t.get(0).unwrap().addr, ll);
            assert_eq!(t.get(1).unwrap().addr, v4);
            assert_eq!(t.default_entry().unwrap().index, 1);
        }
        assert_eq!(before, after);
        assert_eq!(later.entries().len(), 3);
        assert_eq!(later.get(2).unwrap().addr, global);
        // A link-local address that is not the MAC's (stable-privacy addressing) is an
        // address like the others, after the IPv4 one.
        let other_ll: IpAddr = "fe80::1234".parse().unwrap();
        let t = GidTable::for_ethernet(mac, &[other_ll, v4]);
        assert_eq!(t.get(1).unwrap().addr, v4);
        assert_eq!(t.get(2).unwrap().addr, other_ll);
    }
}

//! The GID table: an interface's addresses as RoCE v2 GIDs, indexed as rxe presents them.
//!
//! ferroce uses the interface's own addresses, so there is no second address to configure.
//! IPv4 addresses appear IPv4-mapped (`::ffff:a.b.c.d`). The IPv6 link-local address, when
//! present, takes index 0 and the others follow in the kernel's order, which puts an
//! interface's IPv4 address at index 1 as in rxe's RoCE v2 entries on such a port.

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

impl GidTable {
    /// Builds the table from an interface's addresses.
    pub fn from_addrs(addrs: &[IpAddr]) -> GidTable {
        let is_ll = |a: &IpAddr| matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
        let ordered = addrs
            .iter()
            .filter(|a| is_ll(a))
            .chain(addrs.iter().filter(|a| !is_ll(a)));
        // Loopback addresses only on `lo`, where they are all there is.
        let only_loopback = addrs.iter().all(IpAddr::is_loopback);
        let entries = ordered
            .filter(|a| only_loopback || !a.is_loopback())
            .enumerate()
            .map(|(index, a)| GidEntry {
                index,
                gid: gid_of(*a),
                addr: *a,
            })
            .collect();
        GidTable { entries }
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
}

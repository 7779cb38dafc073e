//! Multicast groups: which UD QPs a packet to a group's GID and the multicast QP reaches.
//!
//! A UD QP attached to a group (`ibv_attach_mcast`) receives, besides what is sent to it,
//! every SEND to the group's GID whose BTH names [`MULTICAST_QPN`]; each attached QP takes
//! one copy, checked against its own Q_Key and receive queue. A RoCE v2 group's GID is a
//! multicast IP address: IPv4 224.0.0.0/4 in IPv4-mapped form, or IPv6 ff00::/8.
//!
//! The table is bounded (as a device's `max_mcast_grp` and `max_mcast_qp_attach` say), so
//! a packet to a group costs at most [`MAX_QPS_PER_GROUP`] deliveries.

use std::collections::BTreeMap;

use core::net::Ipv6Addr;

use crate::error::{Error, Result};

/// The destination QP of every multicast packet (IBA 9.6.1.2.2, "Multicast QP"); never a
/// QP's own number.
pub const MULTICAST_QPN: u32 = 0xff_ffff;
/// Most groups one device has QPs attached to (a device's `max_mcast_grp`).
pub const MAX_GROUPS: usize = 1024;
/// Most QPs attached to one group (`max_mcast_qp_attach`; rxe's value).
pub const MAX_QPS_PER_GROUP: usize = 56;

/// Whether `gid` names a multicast group: an IPv4-mapped 224.0.0.0/4 address, or IPv6
/// ff00::/8.
pub fn is_multicast_gid(gid: Ipv6Addr) -> bool {
    match gid.to_ipv4_mapped() {
        Some(v4) => v4.is_multicast(),
        None => gid.is_multicast(),
    }
}

/// The groups of one device and their QPs.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// Each group's QPs, in attach order; no group is ever empty.
    groups: BTreeMap<Ipv6Addr, Vec<u32>>,
}

impl Groups {
    /// Attaches `qpn` to `gid`. Attaching a QP twice to one group is no error and adds
    /// nothing (as in rxe).
    pub(crate) fn attach(&mut self, gid: Ipv6Addr, qpn: u32) -> Result<()> {
        if !is_multicast_gid(gid) {
            return Err(Error::InvalidAttr("multicast GID"));
        }
        if !self.groups.contains_key(&gid) && self.groups.len() >= MAX_GROUPS {
            return Err(Error::OutOfResources);
        }
        let qps = self.groups.entry(gid).or_default();
        if qps.contains(&qpn) {
            return Ok(());
        }
        if qps.len() >= MAX_QPS_PER_GROUP {
            return Err(Error::OutOfResources);
        }
        qps.push(qpn);
        Ok(())
    }

    /// Detaches `qpn` from `gid`; an error if it was not attached.
    pub(crate) fn detach(&mut self, gid: Ipv6Addr, qpn: u32) -> Result<()> {
        let qps = self
            .groups
            .get_mut(&gid)
            .ok_or(Error::InvalidAttr("multicast GID not attached"))?;
        let at = qps
            .iter()
            .position(|q| *q == qpn)
            .ok_or(Error::InvalidAttr("multicast GID not attached"))?;
        qps.remove(at);
        if qps.is_empty() {
            self.groups.remove(&gid);
        }
        Ok(())
    }

    /// Detaches `qpn` from every group (it is being destroyed); returns the groups it
    /// left.
    pub(crate) fn forget(&mut self, qpn: u32) -> Vec<Ipv6Addr> {
        let mut left = Vec::new();
        self.groups.retain(|gid, qps| {
            if let Some(at) = qps.iter().position(|q| *q == qpn) {
                qps.remove(at);
                left.push(*gid);
            }
            !qps.is_empty()
        });
        left
    }

    /// The groups with QPs attached.
    pub(crate) fn gids(&self) -> Vec<Ipv6Addr> {
        self.groups.keys().copied().collect()
    }

    /// The QPs attached to `gid` (none if it is no group here).
    pub(crate) fn members(&self, gid: Ipv6Addr) -> &[u32] {
        self.groups.get(&gid).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> Ipv6Addr {
        core::net::Ipv4Addr::new(a, b, c, d).to_ipv6_mapped()
    }

    #[test]
    fn only_multicast_addresses_are_groups() {
        assert!(is_multicast_gid(v4(239, 1, 2, 3)));
        assert!(is_multicast_gid(v4(224, 0, 0, 1)));
        assert!(!is_multicast_gid(v4(10, 0, 0, 1)));
        assert!(!is_multicast_gid(v4(240, 0, 0, 1)));
        assert!(is_multicast_gid("ff12::1".parse().unwrap()));
        assert!(!is_multicast_gid("fe80::1".parse().unwrap()));
        let mut g = Groups::default();
        assert!(g.attach(v4(10, 0, 0, 1), 5).is_err());
        assert!(g.members(v4(10, 0, 0, 1)).is_empty());
    }

    #[test]
    fn attach_detach_and_forget() {
        let (a, b) = (v4(239, 0, 0, 1), v4(239, 0, 0, 2));
        let mut g = Groups::default();
        g.attach(a, 7).unwrap();
        g.attach(a, 7).unwrap();
        g.attach(a, 9).unwrap();
        g.attach(b, 7).unwrap();
        assert_eq!(g.members(a), &[7, 9]);
        assert!(g.detach(b, 9).is_err(), "9 is not in b");
        g.detach(a, 9).unwrap();
        assert!(g.detach(a, 9).is_err(), "already detached");
        assert_eq!(g.forget(7), vec![a, b]);
        assert!(g.groups.is_empty(), "empty groups go");
    }

    #[test]
    fn groups_and_members_are_bounded() {
        let mut g = Groups::default();
        let gid = v4(239, 9, 9, 9);
        for q in 0..MAX_QPS_PER_GROUP as u32 {
            g.attach(gid, 100 + q).unwrap();
        }
        assert_eq!(g.attach(gid, 99), Err(Error::OutOfResources));
        for n in 1..MAX_GROUPS as u32 {
            let [_, b, c, d] = n.to_be_bytes();
            g.attach(v4(239, b, c, d), 1).unwrap();
        }
        assert_eq!(g.attach(v4(238, 0, 0, 0), 1), Err(Error::OutOfResources));
        // A full table still takes QPs into its existing groups.
        g.attach(v4(239, 0, 0, 1), 2).unwrap();
    }
}

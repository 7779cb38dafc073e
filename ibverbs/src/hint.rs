//! One line on stderr for the mistakes a C program reports only as "Failed to modify QP
//! to RTR" or "Failed to create AH": the program cannot see the library's tracing, and
//! its user needs to know what to change. Each says what ferroce refused and what to do.

use std::net::Ipv6Addr;

use ferroce::net::neigh::ResolveError;
use ferroce_transport::{AddressVector, Mtu};

use crate::context::Ctx;

/// A path MTU above the port's active MTU: as a RoCE NIC does, ferroce refuses it rather
/// than send packets the interface cannot carry.
pub(crate) fn path_mtu(asked: Mtu, c: Option<&Ctx>) {
    let Some(c) = c else { return };
    let a = c.inner.attr();
    let (asked, active) = (asked.bytes(), a.active_mtu.bytes());
    eprintln!(
        "ferroce: path MTU {asked} is above {}'s active MTU {active} (interface MTU {}): ask for {active} or less (e.g. -m {active}), or raise the interface's MTU",
        a.name, a.netdev_mtu
    );
}

/// A QP connected from a GID of one IP version to a GID of the other, as when the two
/// ends were started with different `-g` / `-x` indexes: no packet could pass between
/// them.
pub(crate) fn gid_families(av: &AddressVector, c: Option<&Ctx>) {
    let Some(c) = c else { return };
    let a = c.inner.attr();
    let version = |g: Ipv6Addr| {
        if g.to_ipv4_mapped().is_some() {
            "IPv4"
        } else {
            "IPv6"
        }
    };
    let theirs = av.dest_gid;
    let Some(ours) = a.gids.get(usize::from(av.sgid_index)) else {
        return;
    };
    eprintln!(
        "ferroce: the remote GID {theirs} is {} but {}'s GID index {} is {} ({}): start both ends with GID indexes of the same IP version (-g / -x; `ibv_devinfo -v -d {}` lists them)",
        version(theirs),
        a.name,
        av.sgid_index,
        version(ours.gid),
        ours.gid,
        a.name
    );
}

/// A remote GID no neighbour answers for. The usual cause beyond a wrong or dead peer: a
/// GID 0, the link-local address its MAC gives, which the peer's kernel does not have
/// when it makes its own link-local address (stable-privacy or random, the default of
/// many distributions); rxe and RoCE NICs list GID 0 all the same.
pub(crate) fn unreachable(gid: Ipv6Addr, e: &ResolveError) {
    eprintln!(
        "ferroce: {e}{}",
        if gid.is_unicast_link_local() {
            " (a peer's GID 0 is its MAC's link-local address, which its kernel lacks when it makes its own, e.g. stable-privacy: use another of its GIDs, -g / -x)"
        } else {
            ""
        }
    );
}

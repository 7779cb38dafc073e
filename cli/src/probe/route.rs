//! Where the probe sends its RoCE packets, and from which of its own addresses.
//!
//! The target is named by its out-of-band address (the TCP address its program listens
//! on), but its RoCE address is the GID its program announces in the exchange, and the two
//! need not be alike: a program run on an IPv6 GID (`-x 0`, the link-local one) is still
//! reached over IPv4; a lab may run the exchange over a management network. So the first guess (the out-of-band address, and a probe GID of its
//! IP version) is corrected by what the target announces: another address of the same IP
//! version and scope only needs its MAC address looked up; another IP version (or IPv6
//! scope) needs a probe GID of that version, which the target must learn, so the probe
//! connects once more. A GID the user chose with `-g` is never changed.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use ferroce::net::gid::{addr_of, gid_of};
use ferroce::net::neigh::{Resolver, StaticResolver};

use super::peer::Addressing;

/// How long a MAC address lookup for a newly learnt target address may take.
const RESOLVE_WAIT: Duration = Duration::from_secs(3);

/// The probe's addressing towards one target, corrected as the target's GID is learnt.
#[derive(Clone)]
pub struct Route {
    /// The addresses in use now.
    pub addr: Addressing,
    /// The probe's own addresses, in its GID table's order.
    own: Vec<IpAddr>,
    /// Whether the probe's address was chosen by the user (`-g`): then it is kept.
    fixed: bool,
    resolver: Arc<dyn Resolver>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("addr", &self.addr)
            .field("own", &self.own)
            .field("fixed", &self.fixed)
            .finish()
    }
}

/// What learning the target's GID changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learnt {
    /// Nothing: the target is where the probe already sent.
    Same,
    /// The target's address (and MAC) changed; the probe's own GID did not, so the
    /// connection just made stands.
    Target,
    /// The probe's own GID changed to the target's IP version: the target holds the old
    /// one, so the connection must be made again.
    Own,
}

impl From<Addressing> for Route {
    /// Fixed addresses on a wire whose two ends are known (the in-process target, tests).
    fn from(addr: Addressing) -> Route {
        Route {
            addr,
            own: vec![addr.ip],
            fixed: true,
            resolver: Arc::new(StaticResolver::new([(addr.target_ip, addr.target_mac)])),
        }
    }
}

impl Route {
    /// A route whose first guess is `addr`; `own` are the probe's addresses (its GID
    /// table), `fixed` whether the user chose `addr.ip`, `resolver` finds MAC addresses.
    pub fn new(
        addr: Addressing,
        own: Vec<IpAddr>,
        fixed: bool,
        resolver: Arc<dyn Resolver>,
    ) -> Route {
        Route {
            addr,
            own,
            fixed,
            resolver,
        }
    }

    /// Takes the GID the target announced as its RoCE address.
    pub fn learn(&mut self, gid: Ipv6Addr) -> Result<Learnt, String> {
        let theirs = addr_of(gid);
        if theirs == self.addr.target_ip {
            return Ok(Learnt::Same);
        }
        let own = if self.fixed && theirs.is_ipv4() == self.addr.ip.is_ipv4() {
            self.addr.ip
        } else if self.fixed {
            return Err(format!(
                "the target's GID is {gid} ({}) and the probe's (-g) is {} ({}): pick a GID of the target's IP version with -g (`ferroce devinfo -v` lists them)",
                version(theirs),
                gid_of(self.addr.ip),
                version(self.addr.ip)
            ));
        } else {
            pick_own(&self.own, theirs).ok_or_else(|| {
                format!(
                    "the target's GID is {gid} ({}) and the probe's interface has no {} address: add one, or run the target's program with a GID of another version",
                    version(theirs),
                    version(theirs)
                )
            })?
        };
        let target_mac = self
            .resolver
            .resolve(theirs, RESOLVE_WAIT)
            .map_err(|e| format!("the target's GID {gid}: {e}"))?;
        let moved_own = own != self.addr.ip;
        tracing::info!(target_gid = %gid, probe = %own, "probe: the target's RoCE address learnt from its exchange");
        self.addr.ip = own;
        self.addr.target_ip = theirs;
        self.addr.target_mac = target_mac;
        Ok(if moved_own {
            Learnt::Own
        } else {
            Learnt::Target
        })
    }
}

fn version(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// Whether `ip` is an IPv6 link-local address (fe80::/10).
fn link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
}

/// The probe's address to talk to `theirs` from: of its IP version, and for IPv6 of its
/// scope (link-local to link-local, else a wider one) where the probe has one, so that
/// the target's answers need no route the link-local address lacks.
pub fn pick_own(own: &[IpAddr], theirs: IpAddr) -> Option<IpAddr> {
    let same_version = || own.iter().filter(|a| a.is_ipv4() == theirs.is_ipv4());
    same_version()
        .find(|a| link_local(**a) == link_local(theirs))
        .or_else(|| same_version().next())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn addressing(own: &str, target: &str) -> Addressing {
        Addressing {
            mac: [2, 0, 0, 0, 0, 1],
            ip: ip(own),
            target_mac: [2, 0, 0, 0, 0, 2],
            target_ip: ip(target),
        }
    }

    fn route(first: Addressing, fixed: bool, macs: &[(&str, [u8; 6])]) -> Route {
        let own = vec![ip("fe80::1"), ip("10.0.0.1"), ip("fd00::1")];
        let resolver = StaticResolver::new(macs.iter().map(|(a, m)| (ip(a), *m)));
        Route::new(first, own, fixed, Arc::new(resolver))
    }

    #[test]
    fn own_address_of_the_targets_version_and_scope() {
        let own = [ip("fe80::1"), ip("10.0.0.1"), ip("fd00::1")];
        assert_eq!(pick_own(&own, ip("fe80::9")), Some(ip("fe80::1")));
        assert_eq!(pick_own(&own, ip("fd00::9")), Some(ip("fd00::1")));
        assert_eq!(pick_own(&own, ip("10.0.0.9")), Some(ip("10.0.0.1")));
        // No global IPv6 address: the link-local one is still IPv6.
        assert_eq!(pick_own(&own[..2], ip("fd00::9")), Some(ip("fe80::1")));
        assert_eq!(pick_own(&own[..1], ip("10.0.0.9")), None);
    }

    #[test]
    fn the_announced_address_is_the_one_used() {
        let mut r = route(addressing("10.0.0.1", "10.0.0.2"), false, &[]);
        assert_eq!(r.learn(gid_of(ip("10.0.0.2"))), Ok(Learnt::Same));
        assert_eq!(r.addr.target_mac, [2, 0, 0, 0, 0, 2]);

        // The same IP version elsewhere: only the target's address and MAC change.
        let mut r = route(
            addressing("10.0.0.1", "10.0.0.2"),
            false,
            &[("10.0.0.3", [2, 0, 0, 0, 0, 3])],
        );
        assert_eq!(r.learn(gid_of(ip("10.0.0.3"))), Ok(Learnt::Target));
        assert_eq!(r.addr.ip, ip("10.0.0.1"));
        assert_eq!(r.addr.target_ip, ip("10.0.0.3"));
        assert_eq!(r.addr.target_mac, [2, 0, 0, 0, 0, 3]);
        // Learnt once, the next connection finds it in place.
        assert_eq!(r.learn(gid_of(ip("10.0.0.3"))), Ok(Learnt::Same));
    }

    #[test]
    fn another_ip_version_moves_the_probes_own_gid() {
        let mut r = route(
            addressing("10.0.0.1", "10.0.0.2"),
            false,
            &[("fe80::2", [2, 0, 0, 0, 0, 2])],
        );
        assert_eq!(r.learn(ip_gid("fe80::2")), Ok(Learnt::Own));
        assert_eq!(r.addr.ip, ip("fe80::1"));
        assert_eq!(r.addr.target_ip, ip("fe80::2"));
        assert_eq!(r.learn(ip_gid("fe80::2")), Ok(Learnt::Same));
    }

    #[test]
    fn a_link_local_target_is_answered_from_the_link_local_gid() {
        let mut r = route(
            addressing("fd00::1", "fd00::2"),
            false,
            &[("fe80::2", [2, 0, 0, 0, 0, 2])],
        );
        assert_eq!(r.learn(ip_gid("fe80::2")), Ok(Learnt::Own));
        assert_eq!(r.addr.ip, ip("fe80::1"));
        // Chosen with -g, the global one stays.
        let mut r = route(
            addressing("fd00::1", "fd00::2"),
            true,
            &[("fe80::2", [2, 0, 0, 0, 0, 2])],
        );
        assert_eq!(r.learn(ip_gid("fe80::2")), Ok(Learnt::Target));
        assert_eq!(r.addr.ip, ip("fd00::1"));
    }

    #[test]
    fn a_gid_chosen_with_g_is_kept_and_the_mismatch_said() {
        let mut r = route(
            addressing("10.0.0.1", "10.0.0.2"),
            true,
            &[("fe80::2", [2, 0, 0, 0, 0, 2])],
        );
        let e = r.learn(ip_gid("fe80::2")).unwrap_err();
        assert!(e.contains("fe80::2 (IPv6)") && e.contains("with -g"), "{e}");
        assert_eq!(r.addr, addressing("10.0.0.1", "10.0.0.2"));
    }

    #[test]
    fn an_unreachable_announced_address_is_an_error_not_a_guess() {
        let mut r = route(addressing("10.0.0.1", "10.0.0.2"), false, &[]);
        let e = r.learn(gid_of(ip("10.0.0.7"))).unwrap_err();
        assert!(e.contains("10.0.0.7"), "{e}");
        assert_eq!(r.addr.target_ip, ip("10.0.0.2"));
    }

    fn ip_gid(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }
}

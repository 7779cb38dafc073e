//! Ethernet addresses of IP multicast groups: where a RoCE v2 group's frames go.

use std::net::IpAddr;

/// The Ethernet address IP multicast group `ip` maps to (RFC 1112 for IPv4: 01:00:5e and
/// the group's low 23 bits; RFC 2464 for IPv6: 33:33 and its low 32 bits), or `None` if
/// `ip` is no multicast address. Frames to a group go there, without ARP or ND.
pub fn multicast_mac(ip: IpAddr) -> Option<[u8; 6]> {
    match ip {
        IpAddr::V4(v4) if v4.is_multicast() => {
            let [_, b, c, d] = v4.octets();
            Some([0x01, 0x00, 0x5e, b & 0x7f, c, d])
        }
        IpAddr::V6(v6) if v6.is_multicast() => {
            let o = v6.octets();
            Some([0x33, 0x33, o[12], o[13], o[14], o[15]])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_map_to_their_ethernet_addresses() {
        let mac = |s: &str| multicast_mac(s.parse().unwrap());
        assert_eq!(mac("239.129.2.3"), Some([1, 0, 0x5e, 1, 2, 3]));
        assert_eq!(mac("224.0.0.251"), Some([1, 0, 0x5e, 0, 0, 251]));
        assert_eq!(
            mac("ff02::1:ff00:1234"),
            Some([0x33, 0x33, 0xff, 0, 0x12, 0x34])
        );
        assert_eq!(mac("10.0.0.1"), None);
        assert_eq!(mac("fe80::1"), None);
    }
}

//! What rdma_cm adds to the CM: service IDs made of a port space and a port number, and a
//! 36-byte header at the start of a REQ's (or SIDR REQ's) private data that carries the IP
//! addresses and the source port, since IB CM itself knows only GIDs. The consumer's own
//! private data follows the header (56 bytes of a REQ's 92). Layout as Linux's `cma.c`
//! and Wireshark's "IP CM" dissector read it.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::field::*;

/// rdma_cm's port spaces: the third and fourth bytes from the bottom of a service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpace(pub u16);

impl PortSpace {
    /// RC connections (`RDMA_PS_TCP`): rping, perftest `-R`, UCX, libfabric.
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// UD (`RDMA_PS_UDP`): udaddy, resolved with SIDR.
    pub const UDP: PortSpace = PortSpace(0x0111);
    /// Either (`RDMA_PS_IB`).
    pub const IB: PortSpace = PortSpace(0x013f);
    /// IPoIB (`RDMA_PS_IPOIB`).
    pub const IPOIB: PortSpace = PortSpace(0x0002);
}

/// The service ID rdma_cm listens on and connects to for a port.
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps.0 as u64) << 16) | port as u64
}

/// The port space and port of an rdma_cm service ID, or `None` if the ID is not one of
/// rdma_cm's (its top 32 bits are not zero).
pub const fn split_service_id(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some((PortSpace((sid >> 16) as u16), sid as u16))
}

mod field {
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const PORT: usize = 2;
    pub const SRC: usize = 4;
    pub const DST: usize = 20;
}

/// Bytes of the header.
pub const LEN: usize = 36;

/// The only header version there is (major 0, minor 0).
pub const VERSION: u8 = 0x00;

/// The IP header rdma_cm puts in front of a connection request's private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpHeader {
    /// The active side's source port (its rdma_cm ID's port, not the service's).
    pub src_port: u16,
    /// The active side's address.
    pub src: IpAddr,
    /// The address the active side connected to.
    pub dst: IpAddr,
}

impl IpHeader {
    /// Reads the header from the start of a REQ's private data. A version other than 0,
    /// or an IP version other than 4 or 6, is refused (Linux drops such a REQ too).
    pub fn parse(private_data: &[u8]) -> crate::Result<IpHeader> {
        if private_data.len() < LEN {
            return Err(crate::Error::Truncated(crate::Layer::Mad));
        }
        let b = private_data;
        let version = b[field::VERSION];
        let ip_version = b[field::IP_VERSION] >> 4;
        let addr = |at: usize| -> IpAddr {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            if ip_version == 4 {
                IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
            } else {
                IpAddr::V6(Ipv6Addr::from(a))
            }
        };
        if version != VERSION || !(ip_version == 4 || ip_version == 6) {
            return Err(crate::Error::BadRdmaCmHeader(version, ip_version));
        }
        Ok(IpHeader {
            src_port: u16_at(b, field::PORT),
            src: addr(field::SRC),
            dst: addr(field::DST),
        })
    }

    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the header at the start of `private_data`. Both addresses must be of one
    /// family; an IPv4 pair takes the last four bytes of each 16-byte slot.
    pub fn emit(&self, private_data: &mut [u8]) -> crate::Result<()> {
        if private_data.len() < LEN {
            return Err(crate::Error::BufferTooSmall);
        }
        let b = &mut private_data[..LEN];
        b.fill(0);
        b[field::VERSION] = VERSION;
        put_u16(b, field::PORT, self.src_port);
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b[field::IP_VERSION] = 4 << 4;
                b[field::SRC + 12..field::SRC + 16].copy_from_slice(&s.octets());
                b[field::DST + 12..field::DST + 16].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b[field::IP_VERSION] = 6 << 4;
                b[field::SRC..field::SRC + 16].copy_from_slice(&s.octets());
                b[field::DST..field::DST + 16].copy_from_slice(&d.octets());
            }
            _ => return Err(crate::Error::HeaderMismatch),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_are_port_space_and_port() {
        assert_eq!(service_id(PortSpace::TCP, 7471), 0x0000_0000_0106_1d2f);
        assert_eq!(
            split_service_id(0x0000_0000_0111_1e1b),
            Some((PortSpace::UDP, 7707))
        );
        assert_eq!(split_service_id(0x0002_c903_0001_0001), None);
    }

    #[test]
    fn header_round_trips_and_refuses_bad_versions() {
        for (s, d) in [
            (IpAddr::from([10, 77, 0, 1]), IpAddr::from([10, 77, 0, 2])),
            ("fe80::1".parse().unwrap(), "2001:db8::77".parse().unwrap()),
        ] {
            let h = IpHeader {
                src_port: 0x93f0,
                src: s,
                dst: d,
            };
            let mut b = [0xffu8; 92];
            h.emit(&mut b).unwrap();
            assert_eq!(IpHeader::parse(&b).unwrap(), h);
            assert_eq!(b[LEN], 0xff, "consumer data untouched");
        }
        let mixed = IpHeader {
            src_port: 1,
            src: IpAddr::from([1, 2, 3, 4]),
            dst: "::1".parse().unwrap(),
        };
        assert_eq!(mixed.emit(&mut [0; 40]), Err(crate::Error::HeaderMismatch));
        let mut b = [0u8; LEN];
        b[1] = 5 << 4;
        assert_eq!(
            IpHeader::parse(&b),
            Err(crate::Error::BadRdmaCmHeader(0, 5))
        );
        b[1] = 4 << 4;
        b[0] = 0x10;
        assert_eq!(
            IpHeader::parse(&b),
            Err(crate::Error::BadRdmaCmHeader(0x10, 4))
        );
        assert_eq!(
            IpHeader::parse(&b[..35]),
            Err(crate::Error::Truncated(crate::Layer::Mad))
        );
    }
}

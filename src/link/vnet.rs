//! The virtio-net header a packet socket with `PACKET_VNET_HDR` puts in front of every
//! frame: how the kernel says that a frame is a GSO super-frame (and of what segment
//! size) on receive, and how a sender asks the kernel to cut one up on transmit.
//!
//! Layout (`struct virtio_net_hdr`, fields in the host's byte order for packet sockets):
//! flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.

/// Bytes of the header.
pub const LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` is partial.
const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_UDP_L4`: UDP segmentation (Linux ≥ 6.2 for packet sockets).
pub const GSO_UDP_L4: u8 = 5;
/// The UDP checksum's offset in its header.
const UDP_CHECK: u16 = 6;

/// A decoded virtio-net header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*` (0: none).
    pub gso_type: u8,
    /// Bytes of headers in front of the first segment's payload.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the partial checksum's coverage starts.
    pub csum_start: u16,
    /// Where the checksum sits, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// A plain frame: no segmentation, no checksum to finish.
    pub const NONE: VnetHdr = VnetHdr {
        flags: 0,
        gso_type: 0,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// A UDP super-frame for the kernel to cut into `gso_size`-byte segments: `headers`
    /// bytes of Ethernet, IP and UDP header, the UDP header at `udp_start`, whose checksum
    /// field holds the pseudo-header sum (the kernel finishes each segment's).
    pub fn udp_gso(headers: usize, udp_start: usize, gso_size: usize) -> VnetHdr {
        VnetHdr {
            flags: NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: headers as u16,
            gso_size: gso_size as u16,
            csum_start: udp_start as u16,
            csum_offset: UDP_CHECK,
        }
    }

    /// The header as the kernel lays it out.
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// Reads a header from the first [`LEN`] bytes of `b` (`None` if shorter).
    pub fn decode(b: &[u8]) -> Option<VnetHdr> {
        let b = b.get(..LEN)?;
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    /// The segment size of a UDP super-frame, `None` for anything else.
    pub fn udp_segment_size(&self) -> Option<usize> {
        (self.gso_type & !0x80 == GSO_UDP_L4 && self.gso_size > 0)
            .then_some(usize::from(self.gso_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes_the_kernel_layout() {
        let h = VnetHdr::udp_gso(42, 34, 1072);
        let b = h.encode();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 5);
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 1072);
        assert_eq!(u16::from_ne_bytes([b[8], b[9]]), 6);
        assert_eq!(VnetHdr::decode(&b), Some(h));
        assert_eq!(h.udp_segment_size(), Some(1072));
        assert_eq!(VnetHdr::NONE.udp_segment_size(), None);
        assert_eq!(VnetHdr::decode(&b[..9]), None);
        assert_eq!(VnetHdr::NONE.encode(), [0; LEN]);
    }
}

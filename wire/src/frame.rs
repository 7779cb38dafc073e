//! Whole RoCE v2 frames: Ethernet (optionally 802.1Q-tagged) / IPv4 or IPv6 / UDP to port
//! 4791 / IB transport packet / ICRC. Ethernet, IP and UDP are handled by etherparse.

use core::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2Header, IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header, Ipv6FlowLabel,
    Ipv6Header, SingleVlanHeader, UdpHeader, VlanId, VlanPcp,
};

use crate::{icrc, packet, Error, Layer, Result};

/// The IANA UDP port of RoCE v2.
pub const ROCE_V2_PORT: u16 = 4791;

/// The IP header of a RoCE v2 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpHeader {
    V4(Ipv4Header),
    V6(Ipv6Header),
}

/// A parsed, length-checked RoCE v2 frame borrowing its bytes.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    pub ethernet: Ethernet2Header,
    pub vlan: Option<SingleVlanHeader>,
    pub ip: IpHeader,
    pub udp: UdpHeader,
    /// From the first byte of the IP header to the end of the ICRC.
    ip_packet: &'a [u8],
    /// Offset of the BTH in `ip_packet`.
    ib_offset: usize,
}

fn ip_err(e: etherparse::err::ipv4::HeaderSliceError) -> Error {
    match e {
        etherparse::err::ipv4::HeaderSliceError::Len(_) => Error::Truncated(Layer::Ip),
        etherparse::err::ipv4::HeaderSliceError::Content(_) => Error::BadIpHeader,
    }
}

fn ip6_err(e: etherparse::err::ipv6::HeaderSliceError) -> Error {
    match e {
        etherparse::err::ipv6::HeaderSliceError::Len(_) => Error::Truncated(Layer::Ip),
        etherparse::err::ipv6::HeaderSliceError::Content(_) => Error::BadIpHeader,
    }
}

impl<'a> Frame<'a> {
    /// Parses an Ethernet frame down to a checked IB transport packet. Trailing bytes past
    /// the IP length (Ethernet padding) are ignored; the ICRC is not verified here.
    pub fn parse(frame: &'a [u8]) -> Result<Frame<'a>> {
        let (ethernet, mut rest) =
            Ethernet2Header::from_slice(frame).map_err(|_| Error::Truncated(Layer::Ethernet))?;
        let mut ether_type = ethernet.ether_type;
        let mut vlan = None;
        if ether_type == EtherType::VLAN_TAGGED_FRAME {
            let (v, r) =
                SingleVlanHeader::from_slice(rest).map_err(|_| Error::Truncated(Layer::Vlan))?;
            ether_type = v.ether_type;
            vlan = Some(v);
            rest = r;
        }
        let (ip, ip_packet) = match ether_type {
            EtherType::IPV4 => {
                let (h, _) = Ipv4Header::from_slice(rest).map_err(ip_err)?;
                let total = usize::from(h.total_len);
                if total < h.header_len() || total > rest.len() {
                    return Err(Error::BadIpLength);
                }
                if h.more_fragments || h.fragment_offset.value() != 0 {
                    return Err(Error::Fragmented);
                }
                if h.protocol != IpNumber::UDP {
                    return Err(Error::NotUdp(h.protocol.0));
                }
                (IpHeader::V4(h), &rest[..total])
            }
            EtherType::IPV6 => {
                let (h, _) = Ipv6Header::from_slice(rest).map_err(ip6_err)?;
                let total = Ipv6Header::LEN + usize::from(h.payload_length);
                if total > rest.len() {
                    return Err(Error::BadIpLength);
                }
                if h.next_header != IpNumber::UDP {
                    return Err(Error::NotUdp(h.next_header.0));
                }
                (IpHeader::V6(h), &rest[..total])
            }
            other => return Err(Error::NotIp(other.0)),
        };
        let ip_len = match &ip {
            IpHeader::V4(h) => h.header_len(),
            IpHeader::V6(_) => Ipv6Header::LEN,
        };
        let (udp, _) = UdpHeader::from_slice(&ip_packet[ip_len..])
            .map_err(|_| Error::Truncated(Layer::Udp))?;
        if usize::from(udp.length) != ip_packet.len() - ip_len {
            return Err(Error::BadUdpLength);
        }
        if udp.destination_port != ROCE_V2_PORT {
            return Err(Error::NotRoce(udp.destination_port));
        }
        let ib_offset = ip_len + UdpHeader::LEN;
        packet::Packet::new_checked(&ip_packet[ib_offset..])?;
        Ok(Frame {
            ethernet,
            vlan,
            ip,
            udp,
            ip_packet,
            ib_offset,
        })
    }

    /// The IB transport packet (BTH through ICRC).
    pub fn ib(&self) -> packet::Packet<&'a [u8]> {
        packet::Packet::new_unchecked(&self.ip_packet[self.ib_offset..])
    }

    /// The IP packet: IP header through ICRC.
    pub fn ip_packet(&self) -> &'a [u8] {
        self.ip_packet
    }

    /// Checks the ICRC trailer.
    pub fn verify_icrc(&self) -> Result<()> {
        icrc::verify(self.ip_packet)
    }

    /// True when the ICRC trailer is correct.
    pub fn icrc_ok(&self) -> bool {
        self.verify_icrc().is_ok()
    }

    /// Source IP address (IPv4 as IPv4-mapped IPv6, the form RoCE GIDs take).
    pub fn src_gid(&self) -> Ipv6Addr {
        match &self.ip {
            IpHeader::V4(h) => Ipv4Addr::from(h.source).to_ipv6_mapped(),
            IpHeader::V6(h) => Ipv6Addr::from(h.source),
        }
    }

    /// The two ECN bits of the IP header (3 = congestion experienced).
    pub fn ecn(&self) -> u8 {
        match &self.ip {
            IpHeader::V4(h) => h.ecn.value(),
            IpHeader::V6(h) => h.traffic_class & 0x3,
        }
    }
}

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// The Ethernet layer of a frame to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    pub src: [u8; 6],
    pub dst: [u8; 6],
    pub vlan: Option<VlanTag>,
}

/// The IP layer of a frame to emit. Lengths and the IPv4 checksum are computed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        /// DSCP (6 bits).
        dscp: u8,
        /// ECN (2 bits): 0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE.
        ecn: u8,
        ttl: u8,
        identification: u16,
        dont_fragment: bool,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        hop_limit: u8,
    },
}

impl IpRepr {
    fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => Ipv4Header::MIN_LEN,
            IpRepr::V6 { .. } => Ipv6Header::LEN,
        }
    }
}

/// A whole RoCE v2 frame to emit: the UDP checksum is 0 (as rxe sends it) and the ICRC
/// is filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    pub ethernet: EthernetRepr,
    pub ip: IpRepr,
    /// UDP source port; rxe derives it from the QP numbers for ECMP entropy.
    pub src_port: u16,
    pub ib: packet::Repr<'a>,
}

impl<'a> FrameRepr<'a> {
    /// The owned form of a parsed frame. IPv4 options are not represented.
    pub fn parse(f: &Frame<'a>) -> Result<FrameRepr<'a>> {
        let ethernet = EthernetRepr {
            src: f.ethernet.source,
            dst: f.ethernet.destination,
            vlan: f.vlan.as_ref().map(|v| VlanTag {
                pcp: v.pcp.value(),
                dei: v.drop_eligible_indicator,
                vid: v.vlan_id.value(),
            }),
        };
        let ip = match &f.ip {
            IpHeader::V4(h) => IpRepr::V4 {
                src: Ipv4Addr::from(h.source),
                dst: Ipv4Addr::from(h.destination),
                dscp: h.dscp.value(),
                ecn: h.ecn.value(),
                ttl: h.time_to_live,
                identification: h.identification,
                dont_fragment: h.dont_fragment,
            },
            IpHeader::V6(h) => IpRepr::V6 {
                src: Ipv6Addr::from(h.source),
                dst: Ipv6Addr::from(h.destination),
                traffic_class: h.traffic_class,
                flow_label: h.flow_label.value(),
                hop_limit: h.hop_limit,
            },
        };
        Ok(FrameRepr {
            ethernet,
            ip,
            src_port: f.udp.source_port,
            ib: packet::Repr::parse(&f.ib())?,
        })
    }

    /// Bytes of the Ethernet (and VLAN) header.
    pub fn link_len(&self) -> usize {
        Ethernet2Header::LEN
            + if self.ethernet.vlan.is_some() {
                SingleVlanHeader::LEN
            } else {
                0
            }
    }

    /// Bytes needed to emit the frame.
    pub fn buffer_len(&self) -> usize {
        self.link_len() + self.ip.header_len() + UdpHeader::LEN + self.ib.buffer_len()
    }

    /// Writes the whole frame with its ICRC; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let link = self.link_len();
        let ip_len = self.ip.header_len();
        let udp_at = link + ip_len;
        let ib_at = udp_at + UdpHeader::LEN;
        self.ib.emit(&mut buf[ib_at..total])?;
        self.emit_lower(&mut buf[..ib_at], total - ib_at)?;
        icrc::fill(&mut buf[link..total])?;
        Ok(total)
    }

    /// Writes Ethernet, IP and UDP headers for an IB packet of `ib_len` bytes (ICRC
    /// included) into `buf`, which must be exactly `link_len() + ip + 8` bytes long.
    pub fn emit_lower(&self, buf: &mut [u8], ib_len: usize) -> Result<()> {
        let mut w = &mut buf[..];
        let io = |_| Error::BufferTooSmall;
        let udp_len = UdpHeader::LEN + ib_len;
        let ip_ether = match self.ip {
            IpRepr::V4 { .. } => EtherType::IPV4,
            IpRepr::V6 { .. } => EtherType::IPV6,
        };
        let eth = Ethernet2Header {
            source: self.ethernet.src,
            destination: self.ethernet.dst,
            ether_type: if self.ethernet.vlan.is_some() {
                EtherType::VLAN_TAGGED_FRAME
            } else {
                ip_ether
            },
        };
        eth.write(&mut w).map_err(io)?;
        if let Some(v) = self.ethernet.vlan {
            let tag = SingleVlanHeader {
                pcp: VlanPcp::try_new(v.pcp & 7).map_err(|_| Error::HeaderMismatch)?,
                drop_eligible_indicator: v.dei,
                vlan_id: VlanId::try_new(v.vid & 0xfff).map_err(|_| Error::HeaderMismatch)?,
                ether_type: ip_ether,
            };
            tag.write(&mut w).map_err(io)?;
        }
        match self.ip {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                identification,
                dont_fragment,
            } => {
                let total = Ipv4Header::MIN_LEN + udp_len;
                let h = Ipv4Header {
                    dscp: IpDscp::try_new(dscp & 0x3f).map_err(|_| Error::HeaderMismatch)?,
                    ecn: IpEcn::try_new(ecn & 3).map_err(|_| Error::HeaderMismatch)?,
                    total_len: u16::try_from(total).map_err(|_| Error::BufferTooSmall)?,
                    identification,
                    dont_fragment,
                    more_fragments: false,
                    fragment_offset: IpFragOffset::ZERO,
                    time_to_live: ttl,
                    protocol: IpNumber::UDP,
                    header_checksum: 0,
                    source: src.octets(),
                    destination: dst.octets(),
                    options: Default::default(),
                };
                h.write(&mut w).map_err(io)?;
            }
            IpRepr::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => {
                let h = Ipv6Header {
                    traffic_class,
                    flow_label: Ipv6FlowLabel::try_new(flow_label & 0xf_ffff)
                        .map_err(|_| Error::HeaderMismatch)?,
                    payload_length: u16::try_from(udp_len).map_err(|_| Error::BufferTooSmall)?,
                    next_header: IpNumber::UDP,
                    hop_limit,
                    source: src.octets(),
                    destination: dst.octets(),
                };
                h.write(&mut w).map_err(io)?;
            }
        }
        let udp = UdpHeader {
            source_port: self.src_port,
            destination_port: ROCE_V2_PORT,
            length: u16::try_from(udp_len).map_err(|_| Error::BufferTooSmall)?,
            checksum: 0,
        };
        udp.write(&mut w).map_err(io)?;
        Ok(())
    }
}

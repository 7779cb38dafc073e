//! Whole RoCE v2 frames: Ethernet (optionally 802.1Q-tagged) / IPv4 or IPv6 / UDP to port
//! 4791 / IB transport packet / ICRC. Ethernet, IP and UDP are handled by etherparse.

use core::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv6FlowLabel, Ipv6Header,
    Ipv6HeaderSlice, SingleVlanHeader, UdpHeader, UdpHeaderSlice, VlanId, VlanPcp,
};

use crate::{icrc, packet, Error, Layer, Result};

/// The IANA UDP port of RoCE v2.
pub const ROCE_V2_PORT: u16 = 4791;

/// The IP header of a RoCE v2 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpHeader {
    /// An IPv4 header.
    V4(Ipv4Header),
    /// An IPv6 header.
    V6(Ipv6Header),
}

/// A parsed, length-checked RoCE v2 IP datagram (IP / UDP / IB packet) borrowing its bytes.
#[derive(Debug, Clone)]
pub struct Datagram<'a> {
    /// The IP header (IPv4 or IPv6).
    pub ip: IpHeader,
    /// The UDP header (destination port 4791).
    pub udp: UdpHeader,
    /// The same datagram read in place: its bytes and where the BTH starts.
    view: DatagramView<'a>,
}

/// A parsed RoCE v2 Ethernet frame: link headers plus the datagram.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// The Ethernet II header.
    pub ethernet: Ethernet2Header,
    /// The 802.1Q tag, if the frame has one.
    pub vlan: Option<SingleVlanHeader>,
    /// The IP datagram the frame carries.
    pub datagram: Datagram<'a>,
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

/// Splits an Ethernet frame (optionally 802.1Q-tagged) into its link headers and the IP
/// packet behind them; only the EtherType is checked, not the IP packet. A receive path
/// hands the IP packet on without parsing it twice.
pub fn split_link(frame: &[u8]) -> Result<(Ethernet2Header, Option<SingleVlanHeader>, &[u8])> {
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
    if ether_type != EtherType::IPV4 && ether_type != EtherType::IPV6 {
        return Err(Error::NotIp(ether_type.0));
    }
    Ok((ethernet, vlan, rest))
}

impl<'a> Frame<'a> {
    /// Parses an Ethernet frame down to a checked IB transport packet. Trailing bytes past
    /// the IP length (Ethernet padding) are ignored; the ICRC is not verified here.
    pub fn parse(frame: &'a [u8]) -> Result<Frame<'a>> {
        let (ethernet, vlan, rest) = split_link(frame)?;
        let ether_type = vlan.as_ref().map_or(ethernet.ether_type, |v| v.ether_type);
        let datagram = Datagram::parse(rest)?;
        let expected_v4 = matches!(datagram.ip, IpHeader::V4(_));
        if expected_v4 != (ether_type == EtherType::IPV4) {
            return Err(Error::BadIpHeader);
        }
        Ok(Frame {
            ethernet,
            vlan,
            datagram,
        })
    }

    /// The IB transport packet (BTH through ICRC).
    pub fn ib(&self) -> packet::Packet<&'a [u8]> {
        self.datagram.ib()
    }

    /// True when the ICRC trailer is correct.
    pub fn icrc_ok(&self) -> bool {
        self.datagram.icrc_ok()
    }
}

/// The IP header of a datagram as a view into its bytes: what the receive path reads of
/// it (addresses, ECN) it reads in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpSlice<'a> {
    V4(Ipv4HeaderSlice<'a>),
    V6(Ipv6HeaderSlice<'a>),
}

/// What [`ip_udp`] found: the IP header, the datagram cut to its IP length, and where the
/// UDP header starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpUdp<'a> {
    pub(crate) ip: IpSlice<'a>,
    pub(crate) ip_packet: &'a [u8],
    pub(crate) ip_len: usize,
    pub(crate) udp_dst_port: u16,
}

/// The IP and UDP layers of a RoCE v2 datagram (or of a UDP GSO super-datagram): IPv4 or
/// IPv6 carrying UDP, not fragmented, with lengths that agree with each other and fit in
/// `bytes`. Bytes past the IP length are ignored; the UDP port is not looked at.
///
/// Runs for every packet received, so it reads the headers in place (etherparse's slice
/// views): decoding them into owned headers, and moving those around, was 4% of all CPU
/// time of a 64 KiB WRITE stream at MTU 1500 (`scripts/bench/profile.sh`).
pub(crate) fn ip_udp(bytes: &[u8]) -> Result<IpUdp<'_>> {
    let version = bytes.first().ok_or(Error::Truncated(Layer::Ip))? >> 4;
    let (ip, ip_packet, ip_len) = match version {
        4 => {
            let h = Ipv4HeaderSlice::from_slice(bytes).map_err(ip_err)?;
            let total = usize::from(h.total_len());
            let ip_len = h.slice().len();
            if total < ip_len || total > bytes.len() {
                return Err(Error::BadIpLength);
            }
            if h.is_fragmenting_payload() {
                return Err(Error::Fragmented);
            }
            if h.protocol() != IpNumber::UDP {
                return Err(Error::NotUdp(h.protocol().0));
            }
            (IpSlice::V4(h), &bytes[..total], ip_len)
        }
        6 => {
            let h = Ipv6HeaderSlice::from_slice(bytes).map_err(ip6_err)?;
            let total = Ipv6Header::LEN + usize::from(h.payload_length());
            if total > bytes.len() {
                return Err(Error::BadIpLength);
            }
            if h.next_header() != IpNumber::UDP {
                return Err(Error::NotUdp(h.next_header().0));
            }
            (IpSlice::V6(h), &bytes[..total], Ipv6Header::LEN)
        }
        _ => return Err(Error::BadIpHeader),
    };
    let udp = UdpHeaderSlice::from_slice(&ip_packet[ip_len..])
        .map_err(|_| Error::Truncated(Layer::Udp))?;
    if usize::from(udp.length()) != ip_packet.len() - ip_len {
        return Err(Error::BadUdpLength);
    }
    Ok(IpUdp {
        ip,
        ip_packet,
        ip_len,
        udp_dst_port: udp.destination_port(),
    })
}

/// A checked RoCE v2 IP datagram (IP / UDP / IB packet) read in place: the receive path's
/// parse. It checks what [`Datagram::parse`] checks but decodes no header; [`Datagram`]
/// gives owned headers, for tools and tests.
#[derive(Debug, Clone, Copy)]
pub struct DatagramView<'a> {
    ip: IpSlice<'a>,
    /// From the first byte of the IP header to the end of the ICRC.
    ip_packet: &'a [u8],
    /// Offset of the BTH in `ip_packet`.
    ib_offset: usize,
}

impl<'a> DatagramView<'a> {
    /// Checks an IPv4 or IPv6 packet down to the IB transport packet's lengths. Bytes past
    /// the IP length are ignored; neither the ICRC nor the IPv4 header checksum is
    /// verified here.
    pub fn new_checked(bytes: &'a [u8]) -> Result<DatagramView<'a>> {
        let d = ip_udp(bytes)?;
        if d.udp_dst_port != ROCE_V2_PORT {
            return Err(Error::NotRoce(d.udp_dst_port));
        }
        let ib_offset = d.ip_len + UdpHeader::LEN;
        packet::Packet::new_checked(&d.ip_packet[ib_offset..])?;
        Ok(DatagramView {
            ip: d.ip,
            ip_packet: d.ip_packet,
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

    /// The IP header's bytes (IPv4 options included).
    pub fn ip_header(&self) -> &'a [u8] {
        &self.ip_packet[..self.ib_offset - UdpHeader::LEN]
    }

    /// Checks the ICRC trailer.
    pub fn verify_icrc(&self) -> Result<()> {
        icrc::verify(self.ip_packet)
    }

    /// Source address as a RoCE GID (IPv4 as IPv4-mapped IPv6).
    pub fn src_gid(&self) -> Ipv6Addr {
        match &self.ip {
            IpSlice::V4(h) => h.source_addr().to_ipv6_mapped(),
            IpSlice::V6(h) => h.source_addr(),
        }
    }

    /// Destination address as a RoCE GID.
    pub fn dst_gid(&self) -> Ipv6Addr {
        match &self.ip {
            IpSlice::V4(h) => h.destination_addr().to_ipv6_mapped(),
            IpSlice::V6(h) => h.destination_addr(),
        }
    }

    /// The two ECN bits of the IP header (3 = congestion experienced).
    pub fn ecn(&self) -> u8 {
        match &self.ip {
            IpSlice::V4(h) => h.ecn().value(),
            IpSlice::V6(h) => h.traffic_class() & 0x3,
        }
    }
}

impl<'a> Datagram<'a> {
    /// Parses an IPv4 or IPv6 packet down to a checked IB transport packet. Bytes past the
    /// IP length are ignored; the ICRC is not verified here.
    pub fn parse(bytes: &'a [u8]) -> Result<Datagram<'a>> {
        let view = DatagramView::new_checked(bytes)?;
        let ip = match view.ip {
            IpSlice::V4(h) => IpHeader::V4(h.to_header()),
            IpSlice::V6(h) => IpHeader::V6(h.to_header()),
        };
        let udp_at = view.ib_offset - UdpHeader::LEN;
        let udp = UdpHeaderSlice::from_slice(&view.ip_packet[udp_at..])
            .map_err(|_| Error::Truncated(Layer::Udp))?
            .to_header();
        Ok(Datagram { ip, udp, view })
    }

    /// The IB transport packet (BTH through ICRC).
    pub fn ib(&self) -> packet::Packet<&'a [u8]> {
        self.view.ib()
    }

    /// The IP packet: IP header through ICRC.
    pub fn ip_packet(&self) -> &'a [u8] {
        self.view.ip_packet()
    }

    /// Checks the ICRC trailer.
    pub fn verify_icrc(&self) -> Result<()> {
        self.view.verify_icrc()
    }

    /// True when the ICRC trailer is correct.
    pub fn icrc_ok(&self) -> bool {
        self.verify_icrc().is_ok()
    }

    /// Source address as a RoCE GID (IPv4 as IPv4-mapped IPv6).
    pub fn src_gid(&self) -> Ipv6Addr {
        match &self.ip {
            IpHeader::V4(h) => Ipv4Addr::from(h.source).to_ipv6_mapped(),
            IpHeader::V6(h) => Ipv6Addr::from(h.source),
        }
    }

    /// Destination address as a RoCE GID.
    pub fn dst_gid(&self) -> Ipv6Addr {
        match &self.ip {
            IpHeader::V4(h) => Ipv4Addr::from(h.destination).to_ipv6_mapped(),
            IpHeader::V6(h) => Ipv6Addr::from(h.destination),
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
    /// Source MAC address.
    pub src: [u8; 6],
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// The 802.1Q tag to add, if any.
    pub vlan: Option<VlanTag>,
}

/// The IP layer of a frame to emit. Lengths and the IPv4 checksum are computed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// An IPv4 header.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// DSCP (6 bits).
        dscp: u8,
        /// ECN (2 bits): 0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE.
        ecn: u8,
        /// Time to live.
        ttl: u8,
        /// The identification field.
        identification: u16,
        /// The don't-fragment flag.
        dont_fragment: bool,
    },
    /// An IPv6 header.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Traffic class (DSCP and ECN).
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
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

/// Completes an emitted IP datagram (IP header through ICRC): fills the ICRC and, for IPv6,
/// the UDP checksum, which IPv6 forbids to be zero (RFC 8200). IPv4 keeps checksum 0, as rxe
/// sends it. The ICRC masks the UDP checksum, so the order does not matter to it.
pub fn finalize(ip_packet: &mut [u8]) -> Result<()> {
    icrc::fill(ip_packet)?;
    if ip_packet.first().map(|b| b >> 4) == Some(6) {
        let len = ip_packet.len();
        if len < Ipv6Header::LEN + UdpHeader::LEN {
            return Err(Error::Truncated(Layer::Udp));
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&ip_packet[8..24]);
        dst.copy_from_slice(&ip_packet[24..40]);
        let (udp, payload) = ip_packet[Ipv6Header::LEN..].split_at_mut(UdpHeader::LEN);
        let mut h = UdpHeader::from_bytes([udp[0], udp[1], udp[2], udp[3], udp[4], udp[5], 0, 0]);
        h.checksum = h
            .calc_checksum_ipv6_raw(src, dst, payload)
            .map_err(|_| Error::BufferTooSmall)?;
        udp[6..8].copy_from_slice(&h.checksum.to_be_bytes());
    }
    Ok(())
}

/// A RoCE v2 IP datagram to emit: for IPv4 the UDP checksum is 0 (as rxe sends it), for IPv6
/// it is computed; the ICRC is filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramRepr<'a> {
    /// The IP header's fields.
    pub ip: IpRepr,
    /// UDP source port; rxe derives it from the QP numbers for ECMP entropy.
    pub src_port: u16,
    /// The IB transport packet inside the UDP datagram.
    pub ib: packet::Repr<'a>,
}

/// A whole RoCE v2 Ethernet frame to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// The Ethernet layer.
    pub ethernet: EthernetRepr,
    /// The IP datagram.
    pub datagram: DatagramRepr<'a>,
}

impl<'a> DatagramRepr<'a> {
    /// The owned form of a parsed datagram. IPv4 options are not represented.
    pub fn parse(d: &Datagram<'a>) -> Result<DatagramRepr<'a>> {
        let ip = match &d.ip {
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
        Ok(DatagramRepr {
            ip,
            src_port: d.udp.source_port,
            ib: packet::Repr::parse(&d.ib())?,
        })
    }

    /// Bytes of IP and UDP headers.
    pub fn header_len(&self) -> usize {
        self.ip.header_len() + UdpHeader::LEN
    }

    /// Bytes needed to emit the datagram.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.ib.buffer_len()
    }

    /// Writes the datagram with its ICRC; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let hl = self.header_len();
        self.ib.emit(&mut buf[hl..total])?;
        self.emit_ip_udp(&mut buf[..hl], total - hl)?;
        finalize(&mut buf[..total])?;
        Ok(total)
    }

    /// Writes the IP and UDP headers for an IB packet of `ib_len` bytes (ICRC included)
    /// into `buf`, which must hold `header_len()` bytes. Lets a caller that writes the IB
    /// packet itself (straight from registered memory) add the lower layers and then call
    /// [`finalize`].
    pub fn emit_ip_udp(&self, buf: &mut [u8], ib_len: usize) -> Result<()> {
        let udp_len = UdpHeader::LEN + ib_len;
        let udp = UdpHeader {
            source_port: self.src_port,
            destination_port: ROCE_V2_PORT,
            length: u16::try_from(udp_len).map_err(|_| Error::BufferTooSmall)?,
            checksum: 0,
        };
        // Every packet sent needs these 28 bytes. Through etherparse's `io::Write` path
        // and its field-by-field checksum they cost 5% of the engine benchmark's time
        // (its byte-array path measured no better): so the IPv4 header is put together
        // here, held to etherparse's bytes by a property test, and summed by
        // `ipv4::fill_header_checksum` as received headers are checked.
        let ip_len = match self.ip {
            IpRepr::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                identification,
                dont_fragment,
            } => {
                let total = u16::try_from(Ipv4Header::MIN_LEN + udp_len)
                    .map_err(|_| Error::BufferTooSmall)?;
                let [t0, t1] = total.to_be_bytes();
                let [i0, i1] = identification.to_be_bytes();
                let [s0, s1, s2, s3] = src.octets();
                let [d0, d1, d2, d3] = dst.octets();
                let flags = if dont_fragment { 0x40 } else { 0 };
                let mut b = [
                    0x45, // version 4, IHL 5 (no options)
                    (dscp & 0x3f) << 2 | (ecn & 3),
                    t0,
                    t1,
                    i0,
                    i1,
                    flags, // fragment offset 0
                    0,
                    ttl,
                    IpNumber::UDP.0,
                    0, // checksum, filled in below
                    0,
                    s0,
                    s1,
                    s2,
                    s3,
                    d0,
                    d1,
                    d2,
                    d3,
                ];
                crate::ipv4::fill_header_checksum(&mut b);
                copy_into(buf, 0, &b)?
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
                copy_into(buf, 0, &h.to_bytes())?
            }
        };
        copy_into(buf, ip_len, &udp.to_bytes())?;
        Ok(())
    }
}

/// Copies `bytes` into `buf` at `at`; returns the offset after them.
fn copy_into(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<usize> {
    let end = at + bytes.len();
    buf.get_mut(at..end)
        .ok_or(Error::BufferTooSmall)?
        .copy_from_slice(bytes);
    Ok(end)
}

impl EthernetRepr {
    /// Bytes of the Ethernet (and VLAN) header.
    pub fn header_len(&self) -> usize {
        Ethernet2Header::LEN
            + if self.vlan.is_some() {
                SingleVlanHeader::LEN
            } else {
                0
            }
    }

    /// Writes the link header for a datagram of the given IP version into `buf`.
    pub fn emit(&self, buf: &mut [u8], ipv6: bool) -> Result<()> {
        let ip_ether = if ipv6 {
            EtherType::IPV6
        } else {
            EtherType::IPV4
        };
        let eth = Ethernet2Header {
            source: self.src,
            destination: self.dst,
            ether_type: if self.vlan.is_some() {
                EtherType::VLAN_TAGGED_FRAME
            } else {
                ip_ether
            },
        };
        // Byte arrays copied in, not etherparse's `io::Write` path: once per packet sent.
        let at = copy_into(buf, 0, &eth.to_bytes())?;
        if let Some(v) = self.vlan {
            let tag = SingleVlanHeader {
                pcp: VlanPcp::try_new(v.pcp & 7).map_err(|_| Error::HeaderMismatch)?,
                drop_eligible_indicator: v.dei,
                vlan_id: VlanId::try_new(v.vid & 0xfff).map_err(|_| Error::HeaderMismatch)?,
                ether_type: ip_ether,
            };
            copy_into(buf, at, &tag.to_bytes())?;
        }
        Ok(())
    }
}

impl<'a> FrameRepr<'a> {
    /// The owned form of a parsed frame.
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
        Ok(FrameRepr {
            ethernet,
            datagram: DatagramRepr::parse(&f.datagram)?,
        })
    }

    /// Bytes needed to emit the frame.
    pub fn buffer_len(&self) -> usize {
        self.ethernet.header_len() + self.datagram.buffer_len()
    }

    /// Writes the whole frame with its ICRC; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let link = self.ethernet.header_len();
        self.datagram.emit(&mut buf[link..total])?;
        self.ethernet.emit(
            &mut buf[..link],
            matches!(self.datagram.ip, IpRepr::V6 { .. }),
        )?;
        Ok(total)
    }
}

//! UDP GSO super-datagrams: consecutive RoCE v2 datagrams of one flow carried as one IP
//! datagram, the way the kernel holds a `UDP_SEGMENT` send (and hands it whole to a packet
//! socket on a veth, or after UDP GRO on a NIC): one IP and UDP header, then the segments'
//! UDP payloads back to back, each `gso_size` bytes but the last, which may be shorter.
//!
//! When the kernel cuts such a datagram up, the segments differ in their headers only: the
//! IPv4 identification counts up from the super-datagram's (base, base+1, …), and the
//! lengths (IPv4 total length and header checksum, IPv6 payload length, UDP length and
//! checksum) are each segment's own. RoCE v2's ICRC masks TTL, TOS, flow label, hop limit
//! and both checksums, but not the identification or the lengths, so each segment's ICRC
//! is that of the segment as it would travel alone. [`split`] rebuilds every segment that
//! way, so that the receiver checks each ICRC as if the segment had arrived by itself;
//! [`merge`] is its inverse, for a sender that built the segments with their own headers.
//!
//! Hostile input: a super-datagram is as untrusted as any frame. Every length is checked
//! against the bytes present, and a segment size below the smallest RoCE packet (BTH and
//! ICRC, 16 bytes) is refused, so the work per super-datagram is bounded by its length.

use crate::{Error, Layer, Result};

mod infer;
pub use infer::{infer_segment_size, longer_than_one_packet, MAX_ICRC_TRIES, MAX_PACKET_PAYLOAD};

/// IPv6's fixed header and the UDP header.
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
/// The smallest RoCE v2 packet: a BTH (12 bytes) and the ICRC (4).
pub const MIN_SEGMENT: usize = 16;
/// The largest IP datagram (IPv4 total length, IPv6 payload length: 16 bits).
const MAX_IP: usize = 65535;

/// Where a super-datagram's parts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// IP header bytes (IPv4 with its options; IPv6's 40).
    ip_len: usize,
    ipv6: bool,
    /// Bytes of UDP payload (all segments together).
    payload: usize,
}

/// The IP and UDP layers are checked as every RoCE datagram's are (`frame::ip_udp`); a
/// super-datagram must also end where its IP length says.
fn layout(ip_packet: &[u8]) -> Result<Layout> {
    let d = crate::frame::ip_udp(ip_packet)?;
    if d.ip_packet.len() != ip_packet.len() {
        return Err(Error::BadIpLength);
    }
    Ok(Layout {
        ip_len: d.ip_len,
        ipv6: matches!(d.ip, crate::frame::IpSlice::V6(_)),
        payload: d.ip_packet.len() - d.ip_len - UDP_LEN,
    })
}

/// The segments of a super-datagram, rebuilt one at a time into the caller's buffer.
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    whole: &'a [u8],
    layout: Layout,
    sum: SegmentSum,
    gso_size: usize,
    next: usize,
}

/// The segments of `ip_packet`, a UDP super-datagram (IP header through the last
/// segment's ICRC) whose segments carry `gso_size` bytes of UDP payload each.
pub fn split(ip_packet: &[u8], gso_size: usize) -> Result<Segments<'_>> {
    let layout = layout(ip_packet)?;
    if gso_size < MIN_SEGMENT || layout.payload == 0 {
        return Err(Error::BadUdpLength);
    }
    let sum = SegmentSum::new(ip_packet, layout)?;
    Ok(Segments {
        whole: ip_packet,
        layout,
        sum,
        gso_size,
        next: 0,
    })
}

impl Segments<'_> {
    /// How many segments the super-datagram holds.
    pub fn count(&self) -> usize {
        self.layout.payload.div_ceil(self.gso_size)
    }

    /// The bytes the largest segment needs (headers and `gso_size` of payload).
    pub fn max_len(&self) -> usize {
        self.layout.ip_len + UDP_LEN + self.gso_size.min(self.layout.payload)
    }

    /// Writes the next segment (IP header through ICRC) into `out` and returns its length;
    /// `None` after the last, or when `out` is shorter than [`Segments::max_len`].
    pub fn next_into(&mut self, out: &mut [u8]) -> Option<usize> {
        let Layout {
            ip_len, payload, ..
        } = self.layout;
        let i = self.next;
        let start = i.checked_mul(self.gso_size)?;
        if start >= payload {
            return None;
        }
        let len = self.gso_size.min(payload - start);
        let headers = ip_len + UDP_LEN;
        let total = headers + len;
        let out = out.get_mut(..total)?;
        out[..headers].copy_from_slice(&self.whole[..headers]);
        out[headers..].copy_from_slice(&self.whole[headers + start..headers + start + len]);
        finish_segment(out, self.layout, i, &self.sum);
        self.next += 1;
        Some(total)
    }
}

/// Gives segment `i` (the IP datagram `seg`, headers copied from the super-datagram) its
/// own lengths and, for IPv4, its identification and header checksum.
fn finish_segment(seg: &mut [u8], layout: Layout, i: usize, sum: &SegmentSum) {
    set_lengths(seg, layout.ip_len, layout.ipv6, seg.len());
    if !layout.ipv6 {
        let id = u16::from_be_bytes([seg[4], seg[5]]).wrapping_add(i as u16);
        seg[4..6].copy_from_slice(&id.to_be_bytes());
        let c = sum.checksum(id, seg.len() as u16);
        seg[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// The IPv4 header checksum of every segment, from one sum over the super-datagram's
/// header: a segment's header differs from it only in the identification and the total
/// length (RFC 1624's incremental update), so splitting sums 20 bytes once, not once per
/// segment. IPv6 has no header checksum.
#[derive(Debug, Clone, Copy)]
struct SegmentSum(u32);

impl SegmentSum {
    /// Checks the super-datagram's own header checksum (a kernel would drop the datagram
    /// for a wrong one, and the ICRC does not cover it) and sums the fields segments share.
    fn new(ip_packet: &[u8], layout: Layout) -> Result<SegmentSum> {
        if layout.ipv6 {
            return Ok(SegmentSum(0));
        }
        let header = &ip_packet[..layout.ip_len];
        if !crate::ipv4::header_checksum_ok(header) {
            return Err(Error::BadIpChecksum);
        }
        let mut shared = [0u8; 60];
        let shared = &mut shared[..layout.ip_len];
        shared.copy_from_slice(header);
        // Total length, identification and checksum are each segment's own.
        shared[2..6].fill(0);
        shared[10..12].fill(0);
        Ok(SegmentSum(u32::from(crate::ipv4::sum(shared))))
    }

    /// The header checksum of a segment with identification `id` and total length `total`.
    fn checksum(&self, id: u16, total: u16) -> u16 {
        let mut s = self.0 + u32::from(id) + u32::from(total);
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }
}

/// Most bytes in front of a super-datagram that [`split_in_place`] copies with it: an
/// Ethernet header with one VLAN tag.
pub const MAX_LINK_HEADER: usize = 18;

/// Splits a received super-frame where it lies: `frame` holds `link` bytes of link-layer
/// header, then a UDP super-datagram whose segments carry `gso_size` bytes of payload
/// each. Each segment is rebuilt in place, as it would have travelled alone (link header,
/// IP and UDP headers with its own identification and lengths, then its payload), and
/// handed to `f` before the next is built; returns how many there were.
///
/// No payload byte moves: segment `i`'s headers are written over the last bytes of
/// segment `i - 1`, which `f` has seen by then. So `f` must not keep what it is given.
pub fn split_in_place(
    frame: &mut [u8],
    link: usize,
    gso_size: usize,
    f: &mut dyn FnMut(&[u8]),
) -> Result<usize> {
    if link > MAX_LINK_HEADER {
        return Err(Error::Truncated(Layer::Ip));
    }
    let layout = layout(frame.get(link..).ok_or(Error::Truncated(Layer::Ip))?)?;
    if gso_size < MIN_SEGMENT || layout.payload == 0 {
        return Err(Error::BadUdpLength);
    }
    let sum = SegmentSum::new(&frame[link..], layout)?;
    let headers = link + layout.ip_len + UDP_LEN;
    let mut saved = [0u8; MAX_LINK_HEADER + 60 + UDP_LEN];
    saved[..headers].copy_from_slice(&frame[..headers]);
    let count = layout.payload.div_ceil(gso_size);
    for i in 0..count {
        let start = headers + i * gso_size;
        let len = gso_size.min(layout.payload - i * gso_size);
        let seg = &mut frame[start - headers..start + len];
        seg[..headers].copy_from_slice(&saved[..headers]);
        finish_segment(&mut seg[link..], layout, i, &sum);
        f(seg);
    }
    Ok(count)
}

/// The first datagram of a run a sender wants to join into one super-datagram (see
/// [`RunHead::accepts`] and [`RunHead::make_super`]).
#[derive(Debug, Clone, Copy)]
pub struct RunHead {
    layout: Layout,
    id: u16,
}

impl RunHead {
    /// `first` (an IP datagram) as the head of a run, or `None` if it cannot be one.
    pub fn new(first: &[u8]) -> Option<RunHead> {
        let layout = layout(first).ok()?;
        (layout.payload >= MIN_SEGMENT).then(|| RunHead {
            layout,
            id: u16::from_be_bytes([first[4], first[5]]),
        })
    }

    /// Bytes of IP and UDP header each segment carries.
    pub fn header_len(&self) -> usize {
        self.layout.ip_len + UDP_LEN
    }

    /// Payload bytes per segment (the `gso_size`).
    pub fn segment_size(&self) -> usize {
        self.layout.payload
    }

    /// Whether `seg` can be segment `index` of the run `first` heads — same flow, every
    /// header field the same but the lengths, checksums and an identification `index`
    /// above the first's — so that cutting the super-datagram gives back `seg` exactly:
    /// `Some(true)` for a segment of full size (the run may go on), `Some(false)` for a
    /// shorter one (it must end the run), `None` if it cannot join.
    pub fn accepts(&self, first: &[u8], seg: &[u8], index: usize) -> Option<bool> {
        // `first` was parsed by `new`; `seg` need not be again (a sender checks every
        // frame of every batch): equal header bytes (version, header length, protocol,
        // fragment fields, addresses, ports) and lengths that agree with its size say the
        // same as the parser would.
        let Layout { ip_len, ipv6, .. } = self.layout;
        let headers = ip_len + UDP_LEN;
        if first.len() < headers || seg.len() <= headers || !same_flow(first, seg, self.layout) {
            return None;
        }
        let field = |at: usize| usize::from(u16::from_be_bytes([seg[at], seg[at + 1]]));
        let ip_length = if ipv6 {
            seg.len() - IPV6_LEN
        } else {
            seg.len()
        };
        let payload = seg.len() - headers;
        if field(if ipv6 { 4 } else { 2 }) != ip_length
            || field(ip_len + 4) != seg.len() - ip_len
            || payload > self.layout.payload
        {
            return None;
        }
        if !ipv6 && field(4) != usize::from(self.id.wrapping_add(index as u16)) {
            return None;
        }
        Some(payload == self.layout.payload)
    }

    /// Rewrites `first`'s IP and UDP headers (in place) into those of a super-datagram with
    /// `payload` bytes of UDP payload in all, as a kernel asked to cut it (UDP GSO with
    /// checksum offload) expects: lengths of the whole, a valid IPv4 header checksum and
    /// in the UDP checksum field the pseudo-header sum, not complemented. `BufferTooSmall`
    /// if the whole would exceed an IP datagram.
    pub fn make_super(&self, first: &mut [u8], payload: usize) -> Result<()> {
        let Layout { ip_len, ipv6, .. } = self.layout;
        let total = ip_len + UDP_LEN + payload;
        let ip_length = if ipv6 { total - IPV6_LEN } else { total };
        if ip_length > MAX_IP || first.len() < ip_len + UDP_LEN {
            return Err(Error::BufferTooSmall);
        }
        set_lengths(first, ip_len, ipv6, total);
        crate::ipv4::fill_header_checksum(first);
        let udp_len = (total - ip_len) as u32;
        let addrs = if ipv6 { &first[8..40] } else { &first[12..20] };
        let mut s = u32::from(crate::ipv4::sum(addrs)) + 17 + (udp_len >> 16) + (udp_len & 0xffff);
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        first[ip_len + 6..ip_len + 8].copy_from_slice(&(s as u16).to_be_bytes());
        Ok(())
    }
}

/// Rewrites the IP and UDP lengths of a datagram of `total` bytes; zeroes the UDP checksum
/// (the ICRC masks it, and no RoCE receiver reads it).
fn set_lengths(d: &mut [u8], ip_len: usize, ipv6: bool, total: usize) {
    if ipv6 {
        d[4..6].copy_from_slice(&((total - IPV6_LEN) as u16).to_be_bytes());
    } else {
        d[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    }
    let udp = &mut d[ip_len..ip_len + UDP_LEN];
    udp[4..6].copy_from_slice(&((total - ip_len) as u16).to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
}

/// Joins `segments`, datagrams of one flow each built with its own headers (IPv4
/// identifications counting up by one), into one super-datagram in `out` that [`split`]
/// with the returned `gso_size` turns back into them; returns `(length, gso_size)`.
///
/// Refused (`HeaderMismatch`): segments whose headers differ in anything but the
/// identification, the lengths and the checksums; identifications that do not count up
/// by one; a segment other than the last whose payload is not the first's size, or a last
/// one larger. `BufferTooSmall`: more than an IP datagram holds, or more than `out` does.
/// The IPv4 header checksum is filled in; the UDP checksum is left zero for the caller (a
/// kernel doing the segmentation computes it).
pub fn merge(segments: &[&[u8]], out: &mut [u8]) -> Result<(usize, usize)> {
    let first = segments.first().ok_or(Error::Truncated(Layer::Ip))?;
    let l0 = layout(first)?;
    let headers = l0.ip_len + UDP_LEN;
    let gso_size = l0.payload;
    if gso_size < MIN_SEGMENT {
        return Err(Error::BadUdpLength);
    }
    let total = segments.iter().try_fold(headers, |acc, s| {
        let l = layout(s)?;
        if l.ip_len != l0.ip_len || l.ipv6 != l0.ipv6 {
            return Err(Error::HeaderMismatch);
        }
        Ok(acc + l.payload)
    })?;
    if total > MAX_IP {
        return Err(Error::BufferTooSmall);
    }
    let head = RunHead {
        layout: l0,
        id: u16::from_be_bytes([first[4], first[5]]),
    };
    for (i, s) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match head.accepts(first, s, i) {
            Some(full) if full || last => {}
            _ => return Err(Error::HeaderMismatch),
        }
    }
    let out = out.get_mut(..total).ok_or(Error::BufferTooSmall)?;
    out[..headers].copy_from_slice(&first[..headers]);
    let mut at = headers;
    for s in segments {
        let p = &s[headers..];
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    set_lengths(out, l0.ip_len, l0.ipv6, total);
    crate::ipv4::fill_header_checksum(out);
    Ok((total, gso_size))
}

/// Whether `s` has `first`'s headers but for the identification, lengths and checksums.
fn same_flow(first: &[u8], s: &[u8], l: Layout) -> bool {
    same_ipv4_flow(first, s, l).unwrap_or_else(|| same_ranges(first, s, l))
}

/// [`same_flow`] for every layout, range by range.
fn same_ranges(first: &[u8], s: &[u8], l: Layout) -> bool {
    let ranges: &[core::ops::Range<usize>] = if l.ipv6 {
        // Version, class, flow label; next header, hop limit, addresses; UDP ports.
        &[0..4, 6..40, 40..44]
    } else {
        // Version to TOS; flags and offset, TTL, protocol; addresses and options; ports.
        &[0..2, 6..10, 12..l.ip_len, l.ip_len..l.ip_len + 4]
    };
    ranges.iter().all(|r| first[r.clone()] == s[r.clone()])
}

/// [`same_flow`] for IPv4 without options, every frame ferroce sends over IPv4: the 24
/// bytes of IP header and ports as three words, the fields a segment has of its own
/// (total length, identification, header checksum) masked out. `None` for other layouts.
/// Why: the ranges of the general case are four calls to `memcmp` per frame of every
/// send batch (1.5% of all CPU with four `ferroce perf write-bw` pairs on one host);
/// these are three compares.
fn same_ipv4_flow(first: &[u8], s: &[u8], l: Layout) -> Option<bool> {
    if l.ipv6 || l.ip_len != 20 {
        return None;
    }
    let a: &[u8; 24] = first.get(..24)?.try_into().ok()?;
    let b: &[u8; 24] = s.get(..24)?.try_into().ok()?;
    // Little-endian words of bytes 0-7, 8-15, 16-23: keep version to TOS (0, 1), flags
    // and offset (6, 7); TTL and protocol (8, 9) and the source address (12-15); the
    // destination address and the ports.
    const KEEP: [u64; 3] = [0xffff_0000_0000_ffff, 0xffff_ffff_0000_ffff, !0];
    let word = |x: &[u8; 24], i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&x[8 * i..8 * i + 8]);
        u64::from_le_bytes(w)
    };
    Some((0..3).all(|i| (word(a, i) ^ word(b, i)) & KEEP[i] == 0))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::{BthRepr, DatagramRepr, IbRepr, IpRepr, Opcode, Psn};
    use std::net::Ipv4Addr;

    #[test]
    fn the_ipv4_fast_compare_is_the_ranges_compare() {
        // Every single-byte difference in the 24 bytes it reads, and none: the three
        // masked words say what the four ranges say.
        let l = Layout {
            ip_len: 20,
            ipv6: false,
            payload: 100,
        };
        let a: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x45).collect();
        let mut differing = 0;
        for at in [None].into_iter().chain((0..24).map(Some)) {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = a.clone();
                if let Some(i) = at {
                    b[i] ^= flip;
                }
                let fast = same_ipv4_flow(&a, &b, l).expect("IPv4 without options");
                assert_eq!(fast, same_ranges(&a, &b, l), "byte {at:?} ^ {flip:#x}");
                differing += usize::from(!fast);
            }
        }
        // Bytes 2-5 and 10-11 are each segment's own: 18 of the 24 must differ.
        assert_eq!(differing, 18 * 3);
        // Not this layout: the general compare.
        assert_eq!(same_ipv4_flow(&a, &a, Layout { ip_len: 24, ..l }), None);
        assert_eq!(same_ipv4_flow(&a, &a, Layout { ipv6: true, ..l }), None);
        assert_eq!(same_ipv4_flow(&a[..23], &a, l), None);
    }

    /// A WRITE_MIDDLE datagram (RC, `payload` bytes) with IPv4 ID `id` or over IPv6.
    fn datagram(psn: u32, payload: usize, id: u16, ipv6: bool) -> Vec<u8> {
        datagram_of(Opcode::RC_RDMA_WRITE_MIDDLE, psn, payload, id, ipv6)
    }

    /// An RC datagram of `op` to QP 0x11 (`payload` bytes, and a RETH for a WRITE ONLY)
    /// with IPv4 ID `id` or over IPv6.
    pub(super) fn datagram_of(
        op: Opcode,
        psn: u32,
        payload: usize,
        id: u16,
        ipv6: bool,
    ) -> Vec<u8> {
        let data: Vec<u8> = (0..payload).map(|i| (i as u32 + psn) as u8).collect();
        let ip = if ipv6 {
            IpRepr::V6 {
                src: "fe80::1".parse().unwrap(),
                dst: "fe80::2".parse().unwrap(),
                traffic_class: 0,
                flow_label: 7,
                hop_limit: 64,
            }
        } else {
            IpRepr::V4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                dscp: 0,
                ecn: 0,
                ttl: 64,
                identification: id,
                dont_fragment: true,
            }
        };
        let mut ext = crate::ExtRepr::default();
        if op == Opcode::RC_RDMA_WRITE_ONLY {
            ext.reth = Some(crate::RethRepr {
                va: 0x1000 * u64::from(psn),
                rkey: 0x55,
                dma_len: payload as u32,
            });
        }
        let repr = DatagramRepr {
            ip,
            src_port: 0xc123,
            ib: IbRepr {
                bth: BthRepr {
                    mig_req: true,
                    ..BthRepr::new(op, 0x11, Psn::new(psn))
                },
                ext,
                payload: &data,
            },
        };
        let mut buf = vec![0; repr.buffer_len()];
        let n = repr.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn segments_of(super_dgram: &[u8], gso: usize) -> Vec<Vec<u8>> {
        let mut s = split(super_dgram, gso).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0; s.max_len()];
        while let Some(n) = s.next_into(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }

    #[test]
    fn merge_then_split_gives_back_every_segment_with_a_valid_icrc() {
        for ipv6 in [false, true] {
            // Three full segments and a shorter last one, IDs wrapping past 0xffff.
            let parts: Vec<Vec<u8>> = (0..4)
                .map(|i| {
                    let len = if i == 3 { 256 } else { 1024 };
                    datagram(100 + i, len, 0xfffe_u16.wrapping_add(i as u16), ipv6)
                })
                .collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let mut whole = vec![0; 8000];
            let (n, gso) = merge(&refs, &mut whole).unwrap();
            whole.truncate(n);
            assert_eq!(gso, 1024 + 12 + 4, "BTH, payload, ICRC");
            let back = segments_of(&whole, gso);
            assert_eq!(split(&whole, gso).unwrap().count(), 4);
            assert_eq!(back.len(), 4);
            for (got, want) in back.iter().zip(&parts) {
                let d = crate::Datagram::parse(got).unwrap();
                assert!(d.icrc_ok(), "ICRC of a rebuilt segment");
                assert!(crate::ipv4::header_checksum_ok(got));
                // Equal to the original but for the UDP checksum (IPv6 fills one).
                let udp = if ipv6 { 40 } else { 20 };
                let mut want = want.clone();
                want[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
                assert_eq!(got, &want);
            }
        }
    }

    #[test]
    fn a_segment_whose_id_is_not_the_next_one_is_refused() {
        let a = datagram(1, 512, 7, false);
        let b = datagram(2, 512, 9, false);
        let mut out = vec![0; 4000];
        assert_eq!(merge(&[&a, &b], &mut out), Err(Error::HeaderMismatch));
        // Another flow (destination QP is in the payload; the port is a header).
        let mut c = datagram(2, 512, 8, false);
        c[20] ^= 1; // UDP source port
        assert_eq!(merge(&[&a, &c], &mut out), Err(Error::HeaderMismatch));
        // A larger last segment.
        let d = datagram(2, 1024, 8, false);
        assert_eq!(merge(&[&a, &d], &mut out), Err(Error::HeaderMismatch));
        assert_eq!(merge(&[], &mut out), Err(Error::Truncated(Layer::Ip)));
    }

    #[test]
    fn a_tampered_segment_fails_its_own_icrc_only() {
        let parts: Vec<Vec<u8>> = (0..3)
            .map(|i| datagram(i, 512, 40 + i as u16, false))
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let mut whole = vec![0; 4000];
        let (n, gso) = merge(&refs, &mut whole).unwrap();
        whole.truncate(n);
        whole[28 + gso + 100] ^= 0x80; // a payload byte of the second segment
        let oks: Vec<bool> = segments_of(&whole, gso)
            .iter()
            .map(|s| crate::Datagram::parse(s).unwrap().icrc_ok())
            .collect();
        assert_eq!(oks, [true, false, true]);
    }

    #[test]
    fn malformed_super_datagrams_are_typed_errors() {
        let parts: Vec<Vec<u8>> = (0..2).map(|i| datagram(i, 512, i as u16, false)).collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let mut whole = vec![0; 4000];
        let (n, gso) = merge(&refs, &mut whole).unwrap();
        whole.truncate(n);
        assert_eq!(split(&whole[..n - 1], gso).err(), Some(Error::BadIpLength));
        assert_eq!(split(&whole, 15).err(), Some(Error::BadUdpLength));
        assert_eq!(split(&[], gso).err(), Some(Error::Truncated(Layer::Ip)));
        assert_eq!(
            split(&[0x45; 10], gso).err(),
            Some(Error::Truncated(Layer::Ip))
        );
        let mut frag = whole.clone();
        frag[6] |= 0x20; // more fragments
        assert_eq!(split(&frag, gso).err(), Some(Error::Fragmented));
        let mut udp_len = whole.clone();
        udp_len[25] ^= 1;
        assert_eq!(split(&udp_len, gso).err(), Some(Error::BadUdpLength));
        // A buffer too small for a segment ends the walk, without a panic.
        let mut s = split(&whole, gso).unwrap();
        assert_eq!(s.next_into(&mut [0; 64]), None);
    }

    /// The pieces as a sender joins them: a run head, every segment accepted, the first's
    /// headers turned into the super header, then the other payloads behind it.
    fn join(parts: &[Vec<u8>]) -> (Vec<u8>, usize) {
        let head = RunHead::new(&parts[0]).unwrap();
        for (i, p) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            assert_eq!(
                head.accepts(&parts[0], p, i),
                Some(!last || p.len() == parts[0].len())
            );
        }
        let mut first = parts[0].clone();
        let h = head.header_len();
        let payload: usize = parts.iter().map(|p| p.len() - h).sum();
        head.make_super(&mut first, payload).unwrap();
        for p in &parts[1..] {
            first.extend_from_slice(&p[h..]);
        }
        (first, head.segment_size())
    }

    #[test]
    fn a_run_joined_by_the_sender_splits_in_place_into_the_original_frames() {
        for ipv6 in [false, true] {
            let parts: Vec<Vec<u8>> = (0..5)
                .map(|i| {
                    let len = if i == 4 { 100 } else { 1024 };
                    datagram(7 + i, len, 0xfffd_u16.wrapping_add(i as u16), ipv6)
                })
                .collect();
            let (whole, gso) = join(&parts);
            // The pseudo-header sum a kernel cutting it up starts from.
            let udp = if ipv6 { 40 } else { 20 };
            let udp_len = (whole.len() - udp) as u32;
            let addrs = if ipv6 { &whole[8..40] } else { &whole[12..20] };
            let mut want = u32::from(crate::ipv4::sum(addrs)) + 17 + udp_len;
            while want > 0xffff {
                want = (want & 0xffff) + (want >> 16);
            }
            assert_eq!(
                u16::from_be_bytes([whole[udp + 6], whole[udp + 7]]),
                want as u16
            );
            assert!(crate::ipv4::header_checksum_ok(&whole));
            // As received: an Ethernet header in front.
            let mut frame = vec![0xee; 14];
            frame.extend_from_slice(&whole);
            let mut got = Vec::new();
            let n = split_in_place(&mut frame, 14, gso, &mut |seg| got.push(seg.to_vec())).unwrap();
            assert_eq!(n, 5);
            for (seg, part) in got.iter().zip(&parts) {
                assert_eq!(&seg[..14], &[0xee; 14]);
                let mut part = part.clone();
                part[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
                assert_eq!(&seg[14..], &part[..]);
                assert!(crate::Datagram::parse(&seg[14..]).unwrap().icrc_ok());
            }
        }
    }

    #[test]
    fn a_run_refuses_what_would_not_split_back() {
        let a = datagram(1, 512, 7, false);
        let head = RunHead::new(&a).unwrap();
        assert_eq!(head.accepts(&a, &datagram(2, 512, 9, false), 1), None);
        assert_eq!(head.accepts(&a, &datagram(2, 1024, 8, false), 1), None);
        assert_eq!(head.accepts(&a, &datagram(2, 512, 8, true), 1), None);
        let mut other = datagram(2, 512, 8, false);
        other[16] ^= 1; // destination address
        assert_eq!(head.accepts(&a, &other, 1), None);
        assert_eq!(
            head.accepts(&a, &datagram(2, 300, 8, false), 1),
            Some(false)
        );
        assert_eq!(head.accepts(&a, &a[..30], 1), None);
        assert!(RunHead::new(&a[..40]).is_none());
        let mut first = a.clone();
        assert_eq!(
            head.make_super(&mut first, 65536),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn splitting_in_place_refuses_malformed_input() {
        let parts: Vec<Vec<u8>> = (0..2).map(|i| datagram(i, 512, i as u16, false)).collect();
        let (whole, gso) = join(&parts);
        let mut frame = vec![0; 14];
        frame.extend_from_slice(&whole);
        let mut calls = 0;
        let mut count = |_: &[u8]| calls += 1;
        assert!(split_in_place(&mut frame.clone(), 14, 15, &mut count).is_err());
        assert!(split_in_place(&mut frame.clone(), 19, gso, &mut count).is_err());
        assert!(split_in_place(&mut frame[..100].to_vec(), 14, gso, &mut count).is_err());
        assert!(split_in_place(&mut [0; 10], 14, gso, &mut count).is_err());
        assert_eq!(calls, 0);
    }

    #[test]
    fn a_super_datagram_with_a_wrong_ipv4_checksum_is_refused_whole() {
        // Its segments get checksums of their own, so nothing after the split would see
        // that the header they came from was one the kernel drops.
        let parts: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 512, i as u16, false)).collect();
        let (mut whole, gso) = join(&parts);
        whole[8] ^= 1; // TTL: covered by neither the ICRC nor the lengths
        assert_eq!(split(&whole, gso).err(), Some(Error::BadIpChecksum));
        let mut frame = vec![0; 14];
        frame.extend_from_slice(&whole);
        let mut calls = 0;
        assert_eq!(
            split_in_place(&mut frame, 14, gso, &mut |_| calls += 1),
            Err(Error::BadIpChecksum)
        );
        assert_eq!(calls, 0);
        // The TTL alone is no reason to refuse: with the checksum fixed, all three come.
        crate::ipv4::fill_header_checksum(&mut frame[14..]);
        assert_eq!(
            split_in_place(&mut frame, 14, gso, &mut |_| calls += 1),
            Ok(3)
        );
        assert_eq!(calls, 3);
    }

    /// Walks every segment of `bytes`, checking the bounds a hostile input must keep.
    fn walk(
        bytes: &[u8],
        gso: usize,
    ) -> std::result::Result<(), proptest::test_runner::TestCaseError> {
        if let Ok(mut s) = split(bytes, gso) {
            let mut buf = vec![0; s.max_len()];
            let (mut n, mut sum) = (0, 0);
            while let Some(len) = s.next_into(&mut buf) {
                n += 1;
                sum += len;
                proptest::prop_assert!(n <= bytes.len() / MIN_SEGMENT + 1);
                // Whatever a segment holds, parsing it is a result, not a panic.
                let _ = crate::Datagram::parse(&buf[..len]).map(|d| d.icrc_ok());
            }
            proptest::prop_assert_eq!(n, s.count());
            proptest::prop_assert!(sum <= n * 68 + bytes.len());
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn a_mutated_super_datagram_splits_or_fails_cleanly(
            flips in proptest::collection::vec((0usize..4000, proptest::num::u8::ANY), 1..8),
            gso_delta in -40i64..40,
            ipv6 in proptest::bool::ANY,
        ) {
            let parts: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 1000, i as u16, ipv6)).collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let mut whole = vec![0; 4000];
            let (n, gso) = merge(&refs, &mut whole).unwrap();
            whole.truncate(n);
            for (at, x) in flips {
                let i = at % whole.len();
                whole[i] ^= x;
            }
            walk(&whole, (gso as i64 + gso_delta).max(0) as usize)?;
        }

        #[test]
        fn splitting_in_place_never_panics_and_stays_within_the_frame(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
            gso in 0usize..2000,
            link in 0usize..20,
        ) {
            let mut frame = bytes.clone();
            let mut total = 0;
            if let Ok(n) = split_in_place(&mut frame, link, gso, &mut |seg| total += seg.len()) {
                proptest::prop_assert!(n <= bytes.len() / MIN_SEGMENT + 1);
                proptest::prop_assert!(total <= n * (MAX_LINK_HEADER + 68) + bytes.len());
            }
        }

        #[test]
        fn split_never_panics_and_stays_within_the_input(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
            gso in 0usize..2000,
        ) {
            walk(&bytes, gso)?;
        }
    }
}

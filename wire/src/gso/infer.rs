//! The segment size of a UDP super-datagram that arrived without one.
//!
//! A packet socket on Linux 6.2 and later says in a virtio-net header that a frame is a
//! GSO super-frame and what its segment size is. Before 6.2 (Debian 12's 6.1, the rxe VM)
//! it has no such header for UDP: a super-datagram sent through a UDP socket with
//! `UDP_SEGMENT` (the only way a 6.1 sender has, see the link's `udp_segment`) crosses a
//! veth whole and reaches the peer's packet socket as one long UDP datagram, lengths of
//! the whole in its headers and nothing saying where one RoCE packet ends and the next
//! begins.
//!
//! The size can be found again because RoCE packets say enough about themselves:
//! - No single RoCE v2 packet has more UDP payload than [`MAX_PACKET_PAYLOAD`], so a
//!   longer datagram is a super-datagram or garbage, never an ordinary packet.
//! - Every RoCE packet is a multiple of 4 bytes long, and every segment of one flow
//!   starts with a BTH of the same transport version and destination QP.
//! - The first segment, rebuilt as the kernel would have cut it (its own lengths), must
//!   carry a valid ICRC for the right size only: the ICRC covers the IP and UDP lengths.
//!
//! So each candidate size (multiples of 4 up to the longest packet) is screened by the
//! BTHs where its segments would start, and the few that pass are settled by the ICRC.
//! Hostile input is bounded: at most [`MAX_ICRC_TRIES`] ICRCs over one segment each, and
//! the screening reads one BTH per candidate segment boundary.

use super::{layout, split, MIN_SEGMENT, UDP_LEN};

/// The most UDP payload one RoCE v2 packet can have: BTH (12 bytes), the longest
/// extension headers of any opcode (an AtomicETH, 28), the largest IB MTU's payload
/// (4096), pad (3) and ICRC (4). Anything longer is not a single packet.
pub const MAX_PACKET_PAYLOAD: usize = 12 + 28 + 4096 + 3 + 4;

// The longest packet with a payload, a WRITE ONLY with immediate of a full 4096 MTU, is
// among the candidates.
const _: () = assert!(12 + 16 + 4 + 4096 + 4 <= MAX_PACKET_PAYLOAD);

/// Whether `ip_packet` (IP header on, as a link hands it over) is longer than any single
/// RoCE v2 packet behind its own IP and UDP headers could be, so that, arriving without a
/// segment size, it can only be a super-datagram or garbage. The headers counted are the
/// ones the packet says it has (IPv6's 40 bytes, IPv4's header length): the longest RoCE
/// packet over IPv6 is 20 bytes longer than over IPv4 and is still one packet.
pub fn longer_than_one_packet(ip_packet: &[u8]) -> bool {
    let ip_len = match ip_packet.first() {
        Some(b) if b >> 4 == 6 => super::IPV6_LEN,
        Some(b) if b >> 4 == 4 => usize::from(b & 0xf) * 4,
        _ => 0,
    };
    ip_packet.len() > ip_len.max(20) + UDP_LEN + MAX_PACKET_PAYLOAD
}

/// Candidate sizes whose first segment's ICRC is computed before giving up.
pub const MAX_ICRC_TRIES: usize = 4;

/// Bytes of a BTH.
const BTH: usize = 12;

/// The segment size (UDP payload bytes per segment, as a `gso_size`) of `ip_packet`, a
/// UDP datagram (IP header through the end) whose payload is longer than any single RoCE
/// packet's; `None` when it is not that long, or when no size cuts it into segments that
/// look like RoCE packets of one flow with a valid first ICRC.
pub fn infer_segment_size(ip_packet: &[u8]) -> Option<usize> {
    infer(ip_packet, &mut |segment| {
        crate::icrc::verify(segment).is_ok()
    })
}

/// [`infer_segment_size`] with `valid` as the ICRC check (tests count its calls).
fn infer(ip_packet: &[u8], valid: &mut dyn FnMut(&[u8]) -> bool) -> Option<usize> {
    let layout = layout(ip_packet).ok()?;
    if layout.payload <= MAX_PACKET_PAYLOAD {
        return None;
    }
    let headers = layout.ip_len + UDP_LEN;
    let udp = &ip_packet[headers..];
    let first = udp.get(..BTH)?;
    let mut scratch = [0u8; 60 + UDP_LEN + MAX_PACKET_PAYLOAD];
    let mut tries = 0;
    for size in (MIN_SEGMENT..=MAX_PACKET_PAYLOAD).step_by(4) {
        if !segments_start_with_bths(udp, size, first) {
            continue;
        }
        tries += 1;
        let mut segments = split(ip_packet, size).ok()?;
        let n = segments.next_into(&mut scratch)?;
        if valid(&scratch[..n]) {
            return Some(size);
        }
        if tries == MAX_ICRC_TRIES {
            return None;
        }
    }
    None
}

/// Whether cutting `udp` (all segments' payloads) every `size` bytes gives at least two
/// segments, none shorter than a RoCE packet, each starting with a BTH of `first`'s
/// flow: the same transport version (the low nibble of byte 1) and destination QP
/// (bytes 5-7), and an opcode of the same service (the top three bits of byte 0).
fn segments_start_with_bths(udp: &[u8], size: usize, first: &[u8]) -> bool {
    let len = udp.len();
    if len <= size || !len.is_multiple_of(4) {
        return false;
    }
    let last = len - (len - 1) / size * size;
    if last < MIN_SEGMENT {
        return false;
    }
    (size..len).step_by(size).all(|at| {
        let b = &udp[at..at + BTH.min(len - at)];
        b.len() == BTH
            && b[0] >> 5 == first[0] >> 5
            && b[1] & 0xf == first[1] & 0xf
            && b[5..8] == first[5..8]
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::datagram_of;
    use super::super::{merge, split};
    use super::*;
    use crate::Opcode;
    use proptest::strategy::Strategy;

    /// `count` datagrams of `payload` bytes each (the last `last` bytes) joined into one.
    fn joined(op: Opcode, count: u32, payload: usize, last: usize, ipv6: bool) -> (Vec<u8>, usize) {
        let parts: Vec<Vec<u8>> = (0..count)
            .map(|i| {
                let len = if i + 1 == count { last } else { payload };
                datagram_of(op, 40 + i, len, 300 + i as u16, ipv6)
            })
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let mut whole = vec![0; 70_000];
        let (n, gso) = merge(&refs, &mut whole).unwrap();
        whole.truncate(n);
        (whole, gso)
    }

    #[test]
    fn one_packet_is_never_longer_than_one_packet_over_either_ip_version() {
        for ipv6 in [false, true] {
            // A WRITE ONLY of a full 4096 MTU: over IPv6 longer than the IPv4 headers and
            // any packet's payload together.
            let one = datagram_of(Opcode::RC_RDMA_WRITE_ONLY, 1, 4096, 1, ipv6);
            assert_eq!(one.len() > 28 + MAX_PACKET_PAYLOAD, ipv6);
            assert!(!longer_than_one_packet(&one), "ipv6: {ipv6}");
            // Padded to the longest any packet's headers allow: still not longer.
            let headers = if ipv6 { 48 } else { 28 };
            let mut most = one.clone();
            most.resize(headers + MAX_PACKET_PAYLOAD, 0);
            assert!(!longer_than_one_packet(&most), "ipv6: {ipv6}");
            most.push(0);
            assert!(longer_than_one_packet(&most), "ipv6: {ipv6}");
        }
        // IPv4 options lengthen the headers the packet may have.
        let mut opts = vec![0x46u8; 24 + 8 + MAX_PACKET_PAYLOAD];
        assert!(!longer_than_one_packet(&opts));
        opts[0] = 0x45;
        assert!(longer_than_one_packet(&opts));
        // Not IP, or nothing at all: the shortest IP header counts.
        assert!(!longer_than_one_packet(&[]));
        assert!(longer_than_one_packet(&vec![0u8; 29 + MAX_PACKET_PAYLOAD]));
    }

    #[test]
    fn the_segment_size_is_found_again_for_every_mtu_and_both_ip_versions() {
        for ipv6 in [false, true] {
            for mtu in [256, 512, 1024, 2048, 4096] {
                let count = (70_000 / (mtu + 80)).min(60) as u32;
                let (whole, gso) = joined(Opcode::RC_RDMA_WRITE_MIDDLE, count, mtu, mtu / 2, ipv6);
                assert_eq!(
                    infer_segment_size(&whole),
                    Some(gso),
                    "mtu {mtu} ipv6 {ipv6}"
                );
            }
        }
    }

    #[test]
    fn every_legal_segment_size_is_within_the_search() {
        // Every payload length up to a 4096 MTU (the longest packet with a payload, a
        // WRITE ONLY with immediate of a full MTU, is checked at compile time above).
        for payload in (4..=4096).step_by(44).chain([4096]) {
            for count in [2, 5] {
                let (whole, gso) =
                    joined(Opcode::RC_RDMA_WRITE_ONLY, count, payload, payload, false);
                if whole.len() - 28 > MAX_PACKET_PAYLOAD {
                    assert_eq!(infer_segment_size(&whole), Some(gso), "{count} x {payload}");
                }
            }
        }
    }

    #[test]
    fn runs_of_small_packets_and_of_split_writes_are_found_too() {
        // 64 WRITE ONLYs of 48 bytes each (RETH in every segment): 5 KiB in all.
        let (whole, gso) = joined(Opcode::RC_RDMA_WRITE_ONLY, 64, 48, 48, false);
        assert_eq!(gso, 12 + 16 + 48 + 4);
        assert_eq!(infer_segment_size(&whole), Some(gso));
        // Split WRITEs of a 1024 MTU, the last segment as long as the others.
        let (whole, gso) = joined(Opcode::RC_RDMA_WRITE_ONLY, 16, 1024, 1024, false);
        assert_eq!(infer_segment_size(&whole), Some(gso));
    }

    #[test]
    fn what_one_packet_can_carry_is_never_taken_for_a_super_datagram() {
        // Four segments of 1 KiB are 4160 bytes of UDP payload: still a super-datagram.
        let (whole, gso) = joined(Opcode::RC_RDMA_WRITE_MIDDLE, 4, 1024, 1024, false);
        assert!(whole.len() - 28 > MAX_PACKET_PAYLOAD);
        assert_eq!(infer_segment_size(&whole), Some(gso));
        // Three are not: they could be one packet, and are left to the ICRC check.
        let (whole, _) = joined(Opcode::RC_RDMA_WRITE_MIDDLE, 3, 1024, 1024, false);
        assert_eq!(infer_segment_size(&whole), None);
        let single = datagram_of(Opcode::RC_RDMA_WRITE_ONLY, 1, 4096, 1, false);
        assert_eq!(infer_segment_size(&single), None);
    }

    #[test]
    fn a_damaged_first_segment_or_a_foreign_qp_gives_no_size() {
        let (whole, gso) = joined(Opcode::RC_RDMA_WRITE_MIDDLE, 8, 1024, 1024, false);
        let mut bad = whole.clone();
        bad[28 + 100] ^= 1; // payload of the first segment
        assert_eq!(infer_segment_size(&bad), None);
        let mut foreign = whole.clone();
        foreign[28 + 3 * gso + 7] ^= 1; // the fourth segment's destination QP
        assert_eq!(infer_segment_size(&foreign), None);
        // A damaged later segment still gives the size: its own ICRC check drops it.
        let mut later = whole;
        later[28 + 5 * gso + 20] ^= 1;
        assert_eq!(infer_segment_size(&later), Some(gso));
        let mut s = split(&later, gso).unwrap();
        let mut buf = vec![0; s.max_len()];
        let mut ok = Vec::new();
        while let Some(n) = s.next_into(&mut buf) {
            ok.push(crate::icrc::verify(&buf[..n]).is_ok());
        }
        assert_eq!(ok, [true, true, true, true, true, false, true, true]);
    }

    #[test]
    fn a_datagram_made_to_look_like_segments_everywhere_costs_bounded_work() {
        // Every 4-byte boundary starts a BTH-looking word of QP 0x11 (opcode 0, version
        // 0): every candidate size passes the screening, and only MAX_ICRC_TRIES of them
        // get an ICRC computed.
        let (mut whole, _) = joined(Opcode::RC_RDMA_WRITE_MIDDLE, 60, 1024, 1024, false);
        for (i, b) in whole[28..].iter_mut().enumerate() {
            *b = if i % 4 == 3 { 0x11 } else { 0 };
        }
        let mut checked = 0;
        assert_eq!(
            infer(&whole, &mut |_| {
                checked += 1;
                false
            }),
            None
        );
        assert_eq!(checked, MAX_ICRC_TRIES);
        assert_eq!(infer_segment_size(&whole), None);
    }

    proptest::proptest! {
        #[test]
        fn a_mutated_super_datagram_gives_a_size_whose_first_segment_is_valid_or_none(
            flips in proptest::collection::vec((0usize..70_000, proptest::num::u8::ANY), 0..8),
            count in 2u32..40,
            payload in (4usize..=1024).prop_map(|p| p * 4),
            ipv6 in proptest::bool::ANY,
        ) {
            // No more than an IP datagram holds.
            let count = count.min(65_000 / (payload as u32 + 60)).max(2);
            let (mut whole, gso) = joined(Opcode::RC_RDMA_WRITE_MIDDLE, count, payload, payload, ipv6);
            let clean = flips.is_empty();
            for (at, x) in flips {
                let i = at % whole.len();
                whole[i] ^= x;
            }
            match infer_segment_size(&whole) {
                Some(size) => {
                    // Whatever was found, its first segment checks out.
                    let mut s = split(&whole, size).unwrap();
                    let mut buf = vec![0; s.max_len()];
                    let n = s.next_into(&mut buf).unwrap();
                    proptest::prop_assert!(crate::icrc::verify(&buf[..n]).is_ok());
                }
                None => proptest::prop_assert!(
                    !clean || whole.len() - 48 <= MAX_PACKET_PAYLOAD,
                    "a clean super-datagram of {} x {} bytes was not recognised", count, gso
                ),
            }
        }
    }
}

//! The bodies of the ferroce-wire fuzz targets: one plain `pub fn <target>(data: &[u8])` per
//! cargo-fuzz target, all listed in [`TARGETS`].
//!
//! This file is the only copy of the bodies, and it is compiled twice:
//!
//! * as the library of the `ferroce-fuzz` package, whose `fuzz_targets/<target>.rs` files
//!   only hand libFuzzer's input to the body (nightly, `cargo fuzz run <target>`);
//! * as a module of the stable test `wire/tests/fuzz_corpus.rs` (through `#[path]`), which
//!   `cargo test` at the workspace root runs over every seed in `fuzz/corpus/<target>/`.
//!
//! So it may use nothing but `std` and `ferroce_wire`, and it carries no crate-level
//! attributes. A body returns quietly on input the parser rejects and panics (an `assert!`)
//! when a property fails.

use ferroce_wire::opcode::HeaderSet;
use ferroce_wire::packet::ICRC_LEN;
use ferroce_wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, cm, cnp, deth, gso, icrc, ieth, immdt, ipv4, mad, reth,
    Datagram, DatagramRepr, Error, Frame, FrameRepr, IbRepr, IpHeader, Packet,
};

/// A fuzz target body.
pub type Body = fn(&[u8]);

/// Every target, by the name of its `[[bin]]`, its `fuzz_targets/<name>.rs` and its corpus
/// directory.
pub const TARGETS: &[(&str, Body)] = &[
    ("frame_parse", frame_parse),
    ("datagram_parse", datagram_parse),
    ("ib_packet_parse", ib_packet_parse),
    ("icrc_verify", icrc_verify),
    ("gso_split", gso_split),
    ("bth", bth),
    ("reth", reth),
    ("aeth", aeth),
    ("deth", deth),
    ("immdt", immdt),
    ("ieth", ieth),
    ("atomic_eth", atomic_eth),
    ("atomic_ack_eth", atomic_ack_eth),
    ("cnp", cnp),
    ("cm_mad", cm_mad),
];

/// Bits of the BTH that survive parse and emit; other bytes survive whole. The reserved bits
/// after FECN/BECN and after AckReq are written as 0. (TVer must be 0 to parse at all.)
const BTH_KEPT: &[(usize, u8)] = &[(4, 0xc0), (8, 0x80)];
/// The DETH's reserved byte is written as 0.
const DETH_KEPT: &[(usize, u8)] = &[(4, 0x00)];

/// `frame_parse`: Ethernet frame → `Frame` → `FrameRepr` → emit → parse again.
pub fn frame_parse(data: &[u8]) {
    let Ok(frame) = Frame::parse(data) else {
        return;
    };
    // Frame::parse is Ethernet (+ VLAN) in front of Datagram::parse.
    let link = 14 + if frame.vlan.is_some() { 4 } else { 0 };
    let inner = Datagram::parse(&data[link..]).expect("a frame's IP packet parses alone");
    assert_eq!(inner.ip_packet(), frame.datagram.ip_packet());
    assert_eq!(frame.icrc_ok(), frame.datagram.icrc_ok());
    inspect_datagram(&frame.datagram);

    let Ok(repr) = FrameRepr::parse(&frame) else {
        return;
    };
    let n = repr.buffer_len();
    let mut out = vec![0u8; n];
    assert_eq!(repr.emit(&mut out[..n - 1]), Err(Error::BufferTooSmall));
    assert_eq!(repr.emit(&mut out), Ok(n), "a parsed frame re-emits");
    let again = Frame::parse(&out).expect("an emitted frame parses");
    assert!(again.icrc_ok(), "emit fills in the ICRC");
    assert_eq!(again.vlan.is_some(), frame.vlan.is_some());
    assert_eq!(
        FrameRepr::parse(&again).expect("an emitted frame's repr parses"),
        repr,
        "parse → emit → parse is the identity on FrameRepr"
    );
    assert_same_ib_headers(frame.ib().as_bytes(), again.ib().as_bytes());
}

/// `datagram_parse`: IP packet → `Datagram` → `DatagramRepr` → emit → parse again.
pub fn datagram_parse(data: &[u8]) {
    let Ok(d) = Datagram::parse(data) else {
        return;
    };
    assert!(data.starts_with(d.ip_packet()));
    inspect_datagram(&d);

    let Ok(repr) = DatagramRepr::parse(&d) else {
        return;
    };
    let n = repr.buffer_len();
    assert_eq!(n, repr.header_len() + repr.ib.buffer_len());
    let mut out = vec![0u8; n];
    assert_eq!(repr.emit(&mut out[..n - 1]), Err(Error::BufferTooSmall));
    assert_eq!(repr.emit(&mut out), Ok(n), "a parsed datagram re-emits");
    let again = Datagram::parse(&out).expect("an emitted datagram parses");
    assert_eq!(again.ip_packet().len(), n);
    assert!(again.icrc_ok(), "emit fills in the ICRC");
    assert_eq!(again.src_gid(), d.src_gid());
    assert_eq!(again.dst_gid(), d.dst_gid());
    assert_eq!(again.ecn(), d.ecn());
    assert_eq!(
        DatagramRepr::parse(&again).expect("an emitted datagram's repr parses"),
        repr,
        "parse → emit → parse is the identity on DatagramRepr"
    );
    assert_same_ib_headers(d.ib().as_bytes(), again.ib().as_bytes());
}

/// `ib_packet_parse`: IB transport packet (BTH through ICRC) → `Packet` → `IbRepr` → emit →
/// parse again.
pub fn ib_packet_parse(data: &[u8]) {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    inspect_packet(&p);
    let Ok(repr) = IbRepr::parse(&p) else {
        return;
    };
    assert_eq!(repr.ext.headers(), repr.bth.opcode.headers());
    assert_eq!(repr.header_len(), p.header_len());
    assert_eq!(repr.payload, p.payload());

    let n = repr.buffer_len();
    let mut out = vec![0xa5u8; n];
    assert_eq!(repr.emit(&mut out[..n - 1]), Err(Error::BufferTooSmall));
    assert_eq!(repr.emit(&mut out), Ok(n), "a parsed packet re-emits");
    let q = Packet::new_checked(&out[..]).expect("an emitted packet passes check");
    assert_eq!(q.icrc(), 0, "Repr::emit leaves the ICRC zero");
    assert!(out[q.payload_range().end..].iter().all(|&b| b == 0));
    assert_eq!(
        IbRepr::parse(&q).expect("an emitted packet's repr parses"),
        repr,
        "parse → emit → parse is the identity on IbRepr"
    );
    assert_same_ib_headers(data, &out);
}

/// `icrc_verify`: `icrc::compute`, `verify` and `fill` never panic; on a datagram, fill then
/// verify succeeds, every single-bit flip of an ICRC-covered bit is caught, and a flip of a
/// masked (variant) bit is not.
pub fn icrc_verify(data: &[u8]) {
    let _ = icrc::compute(data);
    let verified = icrc::verify(data);
    if let Some(body) = data.len().checked_sub(ICRC_LEN) {
        let trailer = u32::from_le_bytes(data[body..].try_into().expect("4 bytes"));
        let expect = icrc::compute(&data[..body]).and_then(|c| {
            if c == trailer {
                Ok(())
            } else {
                Err(Error::IcrcMismatch {
                    computed: c,
                    found: trailer,
                })
            }
        });
        assert_eq!(
            verified, expect,
            "verify is compute over all but the trailer"
        );
    } else {
        assert!(verified.is_err());
    }
    let mut filled = data.to_vec();
    if icrc::fill(&mut filled).is_ok() {
        assert_eq!(icrc::verify(&filled), Ok(()), "fill then verify succeeds");
        assert_eq!(
            filled[..data.len() - ICRC_LEN],
            data[..data.len() - ICRC_LEN]
        );
    }

    let Ok(d) = Datagram::parse(data) else {
        return;
    };
    let mut pkt = d.ip_packet().to_vec();
    icrc::fill(&mut pkt).expect("a datagram has room for its ICRC");
    assert_eq!(icrc::verify(&pkt), Ok(()));
    if d.icrc_ok() {
        assert_eq!(pkt, d.ip_packet(), "fill keeps a correct ICRC");
    }
    let masked = variant_bits(&d);
    for i in flip_positions(pkt.len()) {
        for bit in 0..8 {
            let m = 1u8 << bit;
            pkt[i] ^= m;
            let r = icrc::verify(&pkt);
            pkt[i] ^= m;
            if masked[i] & m != 0 {
                assert_eq!(r, Ok(()), "byte {i} bit {bit} is masked from the ICRC");
            } else {
                assert!(r.is_err(), "flipping byte {i} bit {bit} went unnoticed");
            }
        }
    }
}

/// Link-layer header lengths a `gso_split` input's first byte picks from: none, Ethernet,
/// Ethernet with one VLAN tag (what a packet socket hands over).
const GSO_LINK_HEADERS: [usize; 3] = [0, 14, 18];

/// `gso_split`: a received UDP super-frame cut into its segments, as the link does with
/// what a veth or GRO hands over whole. Input: one byte choosing the link header's length
/// (`GSO_LINK_HEADERS`, by the byte mod 3), the segment size (big-endian `u16`; 0: none
/// given, as before Linux 6.2, so `gso::infer_segment_size` finds one or the frame is
/// refused), then the frame.
///
/// Properties: splitting in place hands over exactly the segments the copying splitter
/// (`gso::split`) builds, each behind the frame's own link header; their UDP payloads put
/// end to end are the super-datagram's; each has its own lengths, a valid IPv4 header
/// checksum and the identification base + i; no more of them than 16-byte segments fit;
/// and `gso::merge` joins them back into the super-datagram (but for the UDP checksum,
/// which it leaves zero). An inferred size is a multiple of 4 within a RoCE packet's
/// bounds whose first segment carries a valid ICRC, and only ever found for a frame
/// longer than one packet behind its own headers could be.
pub fn gso_split(data: &[u8]) {
    let [pick, size_hi, size_lo, frame @ ..] = data else {
        return;
    };
    let link = GSO_LINK_HEADERS[usize::from(*pick % 3)];
    let Some(ip) = frame.get(link..) else {
        return;
    };
    let mut size = usize::from(u16::from_be_bytes([*size_hi, *size_lo]));
    if size == 0 {
        let Some(found) = gso::infer_segment_size(ip) else {
            return;
        };
        // Only what no single packet could be is ever cut up (the link hands anything
        // shorter on as one packet).
        assert!(
            gso::longer_than_one_packet(ip),
            "size {found} for one packet"
        );
        assert!(found >= gso::MIN_SEGMENT && found % 4 == 0);
        assert!(found <= gso::MAX_PACKET_PAYLOAD);
        let mut s = gso::split(ip, found).expect("an inferred size splits");
        let mut first = vec![0; s.max_len()];
        let n = s.next_into(&mut first).expect("a first segment");
        assert_eq!(icrc::verify(&first[..n]), Ok(()), "inferred size {found}");
        size = found;
    }

    let copied: Option<Vec<Vec<u8>>> = gso::split(ip, size).ok().map(|mut s| {
        let mut buf = vec![0; s.max_len()];
        std::iter::from_fn(|| s.next_into(&mut buf).map(|n| buf[..n].to_vec())).collect()
    });
    let mut work = frame.to_vec();
    let mut segments: Vec<Vec<u8>> = Vec::new();
    let result = gso::split_in_place(&mut work, link, size, &mut |seg| {
        segments.push(seg.to_vec())
    });
    let Ok(count) = result else {
        assert!(
            copied.is_none(),
            "split_in_place refused what split took: {result:?}"
        );
        assert!(segments.is_empty(), "segments handed over before a refusal");
        return;
    };
    let copied = copied.expect("split took what split_in_place took");
    assert_eq!(count, segments.len());
    assert_eq!(count, copied.len());
    assert!(count <= ip.len() / gso::MIN_SEGMENT + 1);

    let ipv6 = ip[0] >> 4 == 6;
    let headers = if ipv6 {
        40
    } else {
        usize::from(ip[0] & 0x0f) * 4
    } + 8;
    let mut payload = Vec::with_capacity(ip.len());
    for (i, (whole, seg)) in segments.iter().zip(&copied).enumerate() {
        assert_eq!(&whole[..link], &frame[..link], "segment {i}: link header");
        assert_eq!(
            &whole[link..],
            &seg[..],
            "segment {i}: in place and copied differ"
        );
        assert!(seg.len() > headers && seg.len() - headers <= size);
        let field = |at: usize| field_of(seg, at);
        if ipv6 {
            assert_eq!(field(4), seg.len() - 40);
        } else {
            assert_eq!(field(2), seg.len());
            assert_eq!(
                field(4),
                (field_of(ip, 4) + i) & 0xffff,
                "segment {i}: IPv4 ID"
            );
            assert!(
                ipv4::header_checksum_ok(seg),
                "segment {i}: IPv4 header checksum"
            );
        }
        assert_eq!(
            field(headers - 4),
            seg.len() + 8 - headers,
            "segment {i}: UDP length"
        );
        payload.extend_from_slice(&seg[headers..]);
    }
    assert_eq!(
        payload,
        ip[headers..],
        "the segments' payloads are the whole's"
    );

    if copied[0].len() - headers < gso::MIN_SEGMENT {
        return; // one segment too short to head a run: merge refuses it by design
    }
    let refs: Vec<&[u8]> = copied.iter().map(Vec::as_slice).collect();
    let mut merged = vec![0; ip.len()];
    let (n, merged_size) = gso::merge(&refs, &mut merged).expect("split segments merge back");
    assert_eq!(n, ip.len());
    assert_eq!(merged_size, copied[0].len() - headers);
    assert!(ipv6 || ipv4::header_checksum_ok(&merged));
    let mut original = ip.to_vec();
    for b in [&mut merged, &mut original] {
        b[headers - 2..headers].fill(0); // UDP checksum
        if !ipv6 {
            b[10..12].fill(0); // IPv4 header checksum (both valid; 0 and 0xffff are one)
        }
    }
    assert_eq!(merged, original, "merge(split(x)) is x");
}

/// The big-endian 16-bit field at `at`.
fn field_of(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

/// The bits the ICRC treats as all ones, per byte of `d`'s IP packet, written down from the
/// RoCE v2 annex independently of `icrc.rs`: IPv4 TOS, TTL and header checksum; IPv6 traffic
/// class, flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN, reserved).
fn variant_bits(d: &Datagram) -> Vec<u8> {
    let mut m = vec![0u8; d.ip_packet().len()];
    let ip_len = match &d.ip {
        IpHeader::V4(h) => {
            for i in [1, 8, 10, 11] {
                m[i] = 0xff;
            }
            h.header_len()
        }
        IpHeader::V6(_) => {
            m[0] = 0x0f;
            for i in [1, 2, 3, 7] {
                m[i] = 0xff;
            }
            40
        }
    };
    m[ip_len + 6] = 0xff;
    m[ip_len + 7] = 0xff;
    m[ip_len + 8 + 4] = 0xff;
    m
}

/// The bytes whose bits `icrc_verify` flips one at a time: all of a packet of up to 256 bytes;
/// of a longer one the first 128 (every header: at most 60 + 8 + 12 + 28 bytes), the last 8
/// (pad and ICRC) and 32 spread over the payload, so a 4 KiB input stays cheap.
fn flip_positions(len: usize) -> Vec<usize> {
    if len <= 256 {
        return (0..len).collect();
    }
    let mut v: Vec<usize> = (0..128).collect();
    let middle = len - 8 - 128;
    v.extend((0..32).map(|k| 128 + k * middle / 32));
    v.extend(len - 8..len);
    v
}

/// Calls every accessor of a parsed datagram and checks they agree.
fn inspect_datagram(d: &Datagram) {
    let ip = d.ip_packet();
    let ib = d.ib();
    assert!(ip.ends_with(ib.as_bytes()));
    assert_eq!(d.icrc_ok(), icrc::verify(ip).is_ok());
    assert_eq!(d.verify_icrc().is_ok(), d.icrc_ok());
    assert!(d.ecn() <= 3);
    let (_, _) = (d.src_gid(), d.dst_gid());
    assert_eq!(d.udp.destination_port, ferroce_wire::ROCE_V2_PORT);
    assert!(Packet::new_checked(ib.as_bytes()).is_ok());
    inspect_packet(&ib);
}

/// Calls every accessor of a checked packet and checks they agree with the opcode table.
fn inspect_packet(p: &Packet<&[u8]>) {
    assert_eq!(p.check(), Ok(()));
    let len = p.as_bytes().len();
    let op = p.opcode();
    let headers = op.headers();
    assert_eq!(p.header_len(), 12 + headers.len());
    let b = p.bth();
    assert_eq!(b.opcode_raw(), op.value());
    assert_eq!(b.tver(), 0);
    let _ = (b.solicited(), b.mig_req(), b.pkey(), b.fecn(), b.becn());
    assert!(b.dest_qp() <= 0xff_ffff);
    let _ = (b.ack_req(), b.psn());

    macro_rules! ext {
        ($get:ident, $kind:ident, |$h:ident| $use:expr) => {
            let got = p.$get();
            assert_eq!(got.is_some(), headers.contains(HeaderSet::$kind));
            if let Some($h) = got {
                let _ = $use;
            }
        };
    }
    ext!(reth, RETH, |h| (h.va(), h.rkey(), h.dma_len()));
    ext!(aeth, AETH, |h| (h.syndrome_raw(), h.msn()));
    ext!(deth, DETH, |h| (h.qkey(), h.src_qp()));
    ext!(immdt, IMMDT, |h| h.imm());
    ext!(ieth, IETH, |h| h.rkey());
    ext!(atomic_eth, ATOMIC_ETH, |h| (
        h.va(),
        h.rkey(),
        h.swap_add(),
        h.compare()
    ));
    ext!(atomic_ack_eth, ATOMIC_ACK_ETH, |h| h.orig());
    ext!(cnp, CNP, |h| h.reserved().len());

    let r = p.payload_range();
    assert_eq!(r.start, p.header_len());
    assert!(r.start <= r.end && r.end + usize::from(b.pad_count()) + ICRC_LEN == len);
    assert_eq!(p.payload().len(), r.len());
    if !op.has_payload() {
        assert!(p.payload().is_empty());
    }
    let _ = p.icrc();
}

/// Asserts that two IB packets' BTH and extension headers are equal but for the bits emit
/// writes as 0 (BTH and DETH reserved bits).
fn assert_same_ib_headers(original: &[u8], emitted: &[u8]) {
    let p = Packet::new_unchecked(original);
    let op = p.opcode();
    let hl = p.header_len();
    let mut keep = vec![0xffu8; hl];
    for &(i, m) in BTH_KEPT {
        keep[i] = m;
    }
    if let Some(off) = op.headers().offset_of(HeaderSet::DETH) {
        for &(i, m) in DETH_KEPT {
            keep[12 + off + i] = m;
        }
    }
    for i in 0..hl {
        assert_eq!(
            original[i] & keep[i],
            emitted[i],
            "header byte {i} of {op:?} changed through parse and emit"
        );
    }
}

/// Defines the body of a header target: `new_checked` and `Repr::parse`, and for a header
/// that parses, emit and parse again, and compare bytes but for the bits in `$kept`.
macro_rules! header_target {
    ($(#[$doc:meta])* $name:ident, $module:ident, $kept:expr) => {
        $(#[$doc])*
        pub fn $name(data: &[u8]) {
            type Header<T> = $module::Header<T>;
            const LEN: usize = Header::<&[u8]>::LEN;
            let Ok(h) = Header::new_checked(data) else {
                assert!(data.len() < LEN);
                return;
            };
            assert!(data.len() >= LEN);
            let Ok(repr) = $module::Repr::parse(&h) else {
                return;
            };
            assert_eq!(repr.buffer_len(), LEN);
            let mut out = [0x5au8; LEN];
            repr.emit(&mut Header::new_unchecked(&mut out[..]));
            let again = $module::Repr::parse(&Header::new_checked(&out[..]).expect("LEN bytes"))
                .expect("an emitted header parses");
            assert_eq!(again, repr, "parse → emit → parse is the identity");
            let kept: &[(usize, u8)] = $kept;
            for i in 0..LEN {
                let m = kept.iter().find(|(at, _)| *at == i).map_or(0xff, |(_, m)| *m);
                assert_eq!(data[i] & m, out[i], "byte {i} changed through parse and emit");
            }
        }
    };
}

header_target!(
    /// `bth`: base transport header.
    bth,
    bth,
    BTH_KEPT
);
header_target!(
    /// `reth`: RDMA extended transport header.
    reth,
    reth,
    &[]
);
header_target!(
    /// `aeth`: ACK extended transport header (reserved syndromes are rejected).
    aeth,
    aeth,
    &[]
);
header_target!(
    /// `deth`: datagram extended transport header.
    deth,
    deth,
    DETH_KEPT
);
header_target!(
    /// `immdt`: immediate data.
    immdt,
    immdt,
    &[]
);
header_target!(
    /// `ieth`: invalidate extended transport header.
    ieth,
    ieth,
    &[]
);
header_target!(
    /// `atomic_eth`: atomic extended transport header.
    atomic_eth,
    atomic_eth,
    &[]
);
header_target!(
    /// `atomic_ack_eth`: atomic acknowledge extended transport header.
    atomic_ack_eth,
    atomic_ack_eth,
    &[]
);
header_target!(
    /// `cnp`: the 16 reserved bytes of a congestion notification packet.
    cnp,
    cnp,
    &[]
);

/// `cm_mad`: the 256-byte payload of a MAD to QP1 → `cm::Repr` → emit → parse again. What
/// parses emits one whole MAD that parses to the same message, with the header bytes the
/// parse looked at unchanged; a REQ's or SIDR REQ's rdma_cm header, when it parses, emits
/// back to itself.
pub fn cm_mad(data: &[u8]) {
    let Ok(m) = mad::Mad::new_checked(data) else {
        return;
    };
    let Ok(repr) = cm::Repr::parse(&m) else {
        return;
    };
    let out = repr.to_bytes();
    assert_eq!(out.len(), mad::MAD_LEN);
    assert_eq!(&out[..4], &data[..4], "versions, class, method");
    assert_eq!(&out[8..18], &data[8..18], "transaction and attribute IDs");
    let again = cm::Repr::parse(&mad::Mad::new_checked(&out[..]).expect("a whole MAD"))
        .expect("what ferroce emits parses");
    assert_eq!(again, repr);
    let private: &[u8] = match &repr.msg {
        cm::Message::Req(r) => &r.private_data,
        cm::Message::SidrReq(r) => &r.private_data,
        _ => return,
    };
    if let Ok(h) = cm::rdma_cm::IpHeader::parse(private) {
        let mut b = [0u8; cm::rdma_cm::LEN];
        h.emit(&mut b).expect("a parsed header emits");
        assert_eq!(cm::rdma_cm::IpHeader::parse(&b), Ok(h));
    }
}

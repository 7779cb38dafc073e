//! Property tests over whole RoCE v2 frames: emit then parse is the identity, damaged
//! frames never panic, and the ICRC catches every single-bit error it covers.
//!
//! Each test prints the seed it ran with (`proptest seed N`, shown by `cargo test` when the
//! test fails, or always with `-- --nocapture`). To replay a failure:
//!
//! ```sh
//! PROPTEST_RNG_SEED=N cargo test -p ferroce-wire --test proptest_frames -- NAME
//! ```
//!
//! Cases that failed before are also kept in `proptest_frames.proptest-regressions` (next
//! to this file, committed) and re-run first.

use std::net::{Ipv4Addr, Ipv6Addr};

use ferroce_wire::opcode::HeaderSet;
use ferroce_wire::packet::pad_for;
use ferroce_wire::*;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// This file's proptest configuration: `cases` cases drawn from one seed, printed so that a
/// failure can be replayed. The seed is `PROPTEST_RNG_SEED` when set, else a fresh one from
/// the OS; `cargo test` shows a failing test's stderr, seed included.
fn config(cases: u32) -> ProptestConfig {
    let seed = match std::env::var("PROPTEST_RNG_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .expect("PROPTEST_RNG_SEED must be a decimal u64"),
        Err(_) => {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        }
    };
    eprintln!("proptest seed {seed} (replay: PROPTEST_RNG_SEED={seed})");
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        ..ProptestConfig::default()
    }
}

fn opcode() -> impl Strategy<Value = Opcode> {
    let all: Vec<Opcode> = Opcode::all().collect();
    proptest::sample::select(all)
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        proptest::sample::select(vec![
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ])
        .prop_map(Syndrome::Nak),
    ]
}

/// Extension headers exactly as `op` requires, with random contents.
fn ext_for(op: Opcode) -> impl Strategy<Value = ExtRepr> {
    let h = op.headers();
    (
        any::<(u32, u32)>(),
        any::<(u64, u32, u32)>(),
        any::<(u64, u32, u64, u64)>(),
        (syndrome(), 0u32..1 << 24),
        any::<(u64, u32, u32)>(),
        any::<[u8; 16]>(),
    )
        .prop_map(
            move |(deth, reth, atomic, (syn, msn), (orig, imm, ieth), cnp)| ExtRepr {
                deth: h.contains(HeaderSet::DETH).then_some(DethRepr {
                    qkey: deth.0,
                    src_qp: deth.1 & 0xff_ffff,
                }),
                reth: h.contains(HeaderSet::RETH).then_some(RethRepr {
                    va: reth.0,
                    rkey: reth.1,
                    dma_len: reth.2,
                }),
                atomic_eth: h.contains(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
                    va: atomic.0,
                    rkey: atomic.1,
                    swap_add: atomic.2,
                    compare: atomic.3,
                }),
                aeth: h
                    .contains(HeaderSet::AETH)
                    .then_some(AethRepr { syndrome: syn, msn }),
                atomic_ack_eth: h
                    .contains(HeaderSet::ATOMIC_ACK_ETH)
                    .then_some(AtomicAckEthRepr { orig }),
                immdt: h.contains(HeaderSet::IMMDT).then_some(ImmDtRepr { imm }),
                ieth: h
                    .contains(HeaderSet::IETH)
                    .then_some(IethRepr { rkey: ieth }),
                cnp: h
                    .contains(HeaderSet::CNP)
                    .then_some(CnpRepr { reserved: cnp }),
            },
        )
}

fn ip() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            0u8..64,
            0u8..4,
            any::<u8>(),
            any::<u16>(),
            any::<bool>()
        )
            .prop_map(
                |(s, d, dscp, ecn, ttl, identification, dont_fragment)| IpRepr::V4 {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    dscp,
                    ecn,
                    ttl,
                    identification,
                    dont_fragment,
                }
            ),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u8>(),
            0u32..1 << 20,
            any::<u8>()
        )
            .prop_map(|(s, d, traffic_class, flow_label, hop_limit)| IpRepr::V6 {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                traffic_class,
                flow_label,
                hop_limit,
            }),
    ]
}

/// An owned frame description: everything needed to build a `FrameRepr`.
#[derive(Debug, Clone)]
struct Spec {
    eth: EthernetRepr,
    ip: IpRepr,
    src_port: u16,
    bth: BthRepr,
    ext: ExtRepr,
    payload: Vec<u8>,
}

impl Spec {
    /// A plain IPv4 RC_SEND_ONLY between fixed addresses, for the hand-written cases.
    fn fixed() -> Spec {
        Spec {
            eth: EthernetRepr {
                src: [2; 6],
                dst: [4; 6],
                vlan: None,
            },
            ip: IpRepr::V4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                dscp: 0,
                ecn: 0,
                ttl: 64,
                identification: 1,
                dont_fragment: true,
            },
            src_port: 0xc000,
            bth: BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(5)),
            ext: ExtRepr::default(),
            payload: vec![],
        }
    }

    fn repr(&self) -> FrameRepr<'_> {
        FrameRepr {
            ethernet: self.eth,
            datagram: DatagramRepr {
                ip: self.ip,
                src_port: self.src_port,
                ib: IbRepr {
                    bth: self.bth,
                    ext: self.ext,
                    payload: &self.payload,
                },
            },
        }
    }
    fn bytes(&self) -> Vec<u8> {
        let r = self.repr();
        let mut out = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut out), Ok(out.len()));
        out
    }
}

fn spec(max_payload: usize) -> impl Strategy<Value = Spec> {
    (opcode(), any::<bool>()).prop_flat_map(move |(op, tagged)| {
        let payload_len = if op.has_payload() {
            0..=max_payload
        } else {
            0..=0
        };
        (
            any::<([u8; 6], [u8; 6])>(),
            (0u8..8, any::<bool>(), 0u16..4096),
            ip(),
            any::<u16>(),
            (
                any::<[bool; 5]>(),
                any::<u16>(),
                0u32..1 << 24,
                0u32..1 << 24,
            ),
            ext_for(op),
            proptest::collection::vec(any::<u8>(), payload_len),
        )
            .prop_map(
                move |(mac, vlan, ip, src_port, (flags, pkey, qp, psn), ext, payload)| Spec {
                    eth: EthernetRepr {
                        src: mac.0,
                        dst: mac.1,
                        vlan: tagged.then_some(VlanTag {
                            pcp: vlan.0,
                            dei: vlan.1,
                            vid: vlan.2,
                        }),
                    },
                    ip,
                    src_port,
                    bth: BthRepr {
                        opcode: op,
                        solicited: flags[0],
                        mig_req: flags[1],
                        pad_count: pad_for(payload.len()),
                        pkey,
                        fecn: flags[2],
                        becn: flags[3],
                        dest_qp: qp,
                        ack_req: flags[4],
                        psn: Psn::new(psn),
                    },
                    ext,
                    payload,
                },
            )
    })
}

/// Byte ranges (from the start of the IP header) that the ICRC deliberately does not cover.
fn masked_ranges(s: &Spec) -> Vec<std::ops::Range<usize>> {
    let ip_len = match s.ip {
        IpRepr::V4 { .. } => 20,
        IpRepr::V6 { .. } => 40,
    };
    let mut r = match s.ip {
        IpRepr::V4 { .. } => vec![1..2, 8..9, 10..12],
        IpRepr::V6 { .. } => vec![0..4, 7..8], // version nibble handled by the caller
    };
    r.push(ip_len + 6..ip_len + 8);
    r.push(ip_len + 8 + 4..ip_len + 8 + 5);
    r
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn emit_then_parse_is_identity(s in spec(4096)) {
        let bytes = s.bytes();
        let frame = Frame::parse(&bytes).unwrap();
        prop_assert!(frame.icrc_ok());
        let back = FrameRepr::parse(&frame).unwrap();
        prop_assert_eq!(back, s.repr());
        let ib = frame.ib();
        prop_assert_eq!(ib.payload(), &s.payload[..]);
        prop_assert_eq!(bytes.len() % 2, 0);
        prop_assert_eq!(frame.ib().as_bytes().len() % 4, 0, "IB packets are 4-byte aligned");
    }

    #[test]
    fn the_ip_and_udp_headers_are_the_ones_etherparse_writes(s in spec(64)) {
        // The emitter writes these headers itself (a per-packet cost): they must be,
        // byte for byte, etherparse's for the same fields, checksum included.
        let bytes = s.bytes();
        let l2 = s.eth.header_len();
        let ib_len = s.repr().datagram.ib.buffer_len();
        let udp_len = 8 + ib_len;
        let mut want = Vec::new();
        let ip_len = match s.ip {
            IpRepr::V4 { src, dst, dscp, ecn, ttl, identification, dont_fragment } => {
                let h = etherparse::Ipv4Header {
                    dscp: etherparse::IpDscp::try_new(dscp).unwrap(),
                    ecn: etherparse::IpEcn::try_new(ecn).unwrap(),
                    total_len: (20 + udp_len) as u16,
                    identification,
                    dont_fragment,
                    more_fragments: false,
                    fragment_offset: etherparse::IpFragOffset::ZERO,
                    time_to_live: ttl,
                    protocol: etherparse::IpNumber::UDP,
                    header_checksum: 0,
                    source: src.octets(),
                    destination: dst.octets(),
                    options: Default::default(),
                };
                h.write(&mut want).unwrap();
                prop_assert!(ferroce_wire::ipv4::header_checksum_ok(&bytes[l2..]));
                20
            }
            IpRepr::V6 { .. } => {
                want.extend_from_slice(&bytes[l2..l2 + 40]);
                40
            }
        };
        etherparse::UdpHeader {
            source_port: s.src_port,
            destination_port: 4791,
            length: udp_len as u16,
            checksum: 0,
        }
        .write(&mut want)
        .unwrap();
        // IPv6 requires a UDP checksum, which `finalize` fills in after the ICRC.
        let compared = if ip_len == 20 { 8 } else { 6 };
        prop_assert_eq!(&bytes[l2..l2 + ip_len + compared], &want[..ip_len + compared]);
    }

    #[test]
    fn truncation_is_an_error_never_a_panic(s in spec(600), cut in any::<proptest::sample::Index>()) {
        let bytes = s.bytes();
        let n = cut.index(bytes.len());
        prop_assert!(Frame::parse(&bytes[..n]).is_err());
        let link = s.eth.header_len();
        if n > link {
            prop_assert!(Datagram::parse(&bytes[link..n]).is_err());
            let _ = icrc::verify(&bytes[link..n]);
        }
    }

    #[test]
    fn mutations_never_panic(s in spec(600), edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = s.bytes();
        for (i, v) in edits {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        if let Ok(f) = Frame::parse(&bytes) {
            let _ = f.icrc_ok();
            let p = f.ib();
            let _ = (p.payload().len(), p.icrc(), p.header_len());
            if let Ok(r) = FrameRepr::parse(&f) {
                let mut out = vec![0u8; r.buffer_len()];
                prop_assert!(r.emit(&mut out).is_ok());
            }
        }
    }

    /// The receive path's in-place view (`DatagramView`) checks what the owned parse
    /// checks, and reads the same addresses, ECN and IB packet, on damaged input too.
    #[test]
    fn the_view_and_the_owned_parse_agree(s in spec(600), edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..4), cut in any::<proptest::sample::Index>()) {
        let mut bytes = s.bytes();
        for (i, v) in edits {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        let link = s.eth.header_len();
        let n = link + cut.index(bytes.len() - link + 1);
        let ip = &bytes[link..n];
        match (DatagramView::new_checked(ip), Datagram::parse(ip)) {
            (Ok(v), Ok(d)) => {
                prop_assert_eq!(v.src_gid(), d.src_gid());
                prop_assert_eq!(v.dst_gid(), d.dst_gid());
                prop_assert_eq!(v.ecn(), d.ecn());
                prop_assert_eq!(v.ip_packet(), d.ip_packet());
                let (vib, dib) = (v.ib(), d.ib());
                prop_assert_eq!(vib.as_bytes(), dib.as_bytes());
                let udp = v.ip_packet().len() - vib.as_bytes().len() - 8;
                prop_assert_eq!(v.ip_header(), &v.ip_packet()[..udp]);
                prop_assert_eq!(v.verify_icrc(), d.verify_icrc());
            }
            (v, d) => prop_assert_eq!(v.err(), d.err()),
        }
    }

    #[test]
    fn every_covered_single_bit_flip_is_caught(s in spec(96)) {
        let bytes = s.bytes();
        let link = s.eth.header_len();
        let masked = masked_ranges(&s);
        for i in link..bytes.len() {
            let off = i - link;
            let is_masked = masked.iter().any(|r| r.contains(&off));
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                let verdict = Frame::parse(&b).map(|f| f.icrc_ok());
                if is_masked && !(matches!(s.ip, IpRepr::V6 { .. }) && off == 0 && bit >= 4) {
                    // Fields routers may rewrite are masked: the ICRC must not change.
                    prop_assert_eq!(verdict, Ok(true), "masked byte {} bit {} changed the ICRC", off, bit);
                } else {
                    prop_assert_ne!(verdict, Ok(true), "flip of byte {} bit {} went unnoticed", off, bit);
                }
            }
        }
    }
}

#[test]
fn a_bad_pad_count_and_stray_payload_are_rejected() {
    // RC_ACKNOWLEDGE must carry no payload; RC_SEND_ONLY with pad 3 needs 3 payload bytes.
    let ack = Spec {
        bth: BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x11, Psn::new(5)),
        ext: ExtRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 1,
            }),
            ..Default::default()
        },
        payload: vec![],
        ..Spec::fixed()
    };
    let b = ack.bytes();
    let ib = 14 + 20 + 8;
    // Extend the IB packet by 4 bytes: now there is a payload the opcode does not allow.
    let mut p = b[ib..].to_vec();
    p.extend_from_slice(&[0; 4]);
    assert_eq!(
        Packet::new_checked(&p[..]).unwrap_err(),
        Error::UnexpectedPayload
    );
    // A SEND_ONLY of 0 bytes claiming 3 pad bytes.
    let mut send = ack.clone();
    send.bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(5));
    send.ext = ExtRepr::default();
    let b = send.bytes();
    let mut p = b[ib..].to_vec();
    p[1] |= 0x30;
    assert_eq!(Packet::new_checked(&p[..]).unwrap_err(), Error::BadPad);
    // Emit refuses headers that do not match the opcode.
    let mut wrong = send.clone();
    wrong.ext.reth = Some(RethRepr::default());
    let r = wrong.repr();
    let mut out = vec![0u8; 200];
    assert_eq!(r.emit(&mut out), Err(Error::HeaderMismatch));
}

#[test]
fn foreign_traffic_gets_specific_errors() {
    let mut s = Spec {
        bth: BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(5)),
        ext: ExtRepr::default(),
        payload: vec![1, 2, 3, 4],
        ..Spec::fixed()
    };
    let good = s.bytes();
    let mut b = good.clone();
    b[36..38].copy_from_slice(&4792u16.to_be_bytes());
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::NotRoce(4792));
    let mut b = good.clone();
    b[23] = 6; // TCP
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::NotUdp(6));
    let mut b = good.clone();
    b[12..14].copy_from_slice(&0x0806u16.to_be_bytes()); // ARP
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::NotIp(0x0806));
    let mut b = good.clone();
    b[20] = 0x20; // more fragments
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::Fragmented);
    let mut b = good.clone();
    b[16..18].copy_from_slice(&1000u16.to_be_bytes());
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::BadIpLength);
    let mut b = good.clone();
    b[38..40].copy_from_slice(&9u16.to_be_bytes());
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::BadUdpLength);
    let mut b = good.clone();
    b[43] |= 0x01; // TVer 1
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::BadVersion(1));
    let mut b = good.clone();
    b[42] = 0x40; // RD opcode
    assert_eq!(Frame::parse(&b).unwrap_err(), Error::UnknownOpcode(0x40));
    let mut b = good.clone();
    let n = b.len();
    b[n - 1] ^= 0xff;
    let f = Frame::parse(&b).unwrap();
    assert!(matches!(
        f.datagram.verify_icrc(),
        Err(Error::IcrcMismatch { .. })
    ));
    // Ethernet padding after the IP packet is ignored.
    let mut b = good.clone();
    b.extend_from_slice(&[0; 6]);
    assert!(Frame::parse(&b).unwrap().icrc_ok());
    s.eth.vlan = Some(VlanTag {
        pcp: 3,
        dei: false,
        vid: 100,
    });
    assert!(Frame::parse(&s.bytes()).unwrap().icrc_ok());
}

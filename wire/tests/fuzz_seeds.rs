//! The generator of the fuzz seed corpus `fuzz/corpus/<target>/`, so the seeds are
//! reproducible.
//!
//! * `cargo test -p ferroce-wire --test fuzz_seeds` checks that the committed seeds are
//!   exactly what this file generates (no seed missing, changed or stale).
//! * `FERROCE_WRITE_FUZZ_SEEDS=1 cargo test -p ferroce-wire --test fuzz_seeds` (re)writes
//!   them, removing stale `rxe-*` / `synth-*` files and leaving any other file alone.
//!
//! Seeds come from the Linux rxe captures in `tests/vectors/rxe/*.pcap`: from each capture,
//! the first two RoCE v2 frames of each BTH opcode, named `rxe-<capture>-<frame>` (frame
//! numbers count from 1, as Wireshark does), plus its first non-RoCE frame for the frame and
//! datagram targets. The captures hold no ImmDt, IETH, NAK, CNP, VLAN, IPv6 or IPv4-option
//! packets, so a few `synth-*` frames built with `FrameRepr::emit` add those. Every target gets
//! the layer it parses: whole frames, IP packets, IB packets, or one header's bytes
//! (deduplicated). Names start with `rxe-` or `synth-`, which the `.gitignore` rule for
//! libFuzzer's hash-named files (`fuzz/corpus/*/[0-9a-f]*`) does not match.

use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ferroce_wire::opcode::HeaderSet;
use ferroce_wire::{
    AethRepr, BthRepr, CnpRepr, DatagramRepr, DethRepr, EthernetRepr, ExtRepr, Frame, FrameRepr,
    IbRepr, IethRepr, ImmDtRepr, IpRepr, NakCode, Opcode, Psn, RethRepr, Syndrome, VlanTag,
};

const WRITE_ENV: &str = "FERROCE_WRITE_FUZZ_SEEDS";

/// RoCE v2 frames a capture contributes per BTH opcode.
const PER_OPCODE: usize = 2;

/// Header targets and how to cut their bytes out of an IB packet.
const HEADER_TARGETS: &[(&str, HeaderSet, usize)] = &[
    ("reth", HeaderSet::RETH, 16),
    ("aeth", HeaderSet::AETH, 4),
    ("deth", HeaderSet::DETH, 8),
    ("immdt", HeaderSet::IMMDT, 4),
    ("ieth", HeaderSet::IETH, 4),
    ("atomic_eth", HeaderSet::ATOMIC_ETH, 28),
    ("atomic_ack_eth", HeaderSet::ATOMIC_ACK_ETH, 8),
    ("cnp", HeaderSet::CNP, 16),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// target → file name → bytes.
#[derive(Default)]
struct Seeds(BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>);

impl Seeds {
    fn add(&mut self, target: &'static str, name: &str, bytes: &[u8]) {
        let dir = self.0.entry(target).or_default();
        // Header seeds repeat a lot (e.g. every ACK's AETH); keep the first of each.
        if !dir.values().any(|b| b == bytes) {
            dir.insert(name.to_owned(), bytes.to_vec());
        }
    }

    /// Adds a RoCE v2 frame to every target, each at its own layer.
    fn add_roce_frame(&mut self, name: &str, frame_bytes: &[u8]) {
        let frame = Frame::parse(frame_bytes).expect("a RoCE v2 frame");
        assert!(frame.icrc_ok(), "{name}: ICRC");
        let ip = frame.datagram.ip_packet();
        let ib = frame.ib();
        let ib_bytes = ib.as_bytes();
        self.add("frame_parse", name, frame_bytes);
        self.add("datagram_parse", name, ip);
        self.add("icrc_verify", name, ip);
        self.add("ib_packet_parse", name, ib_bytes);
        self.add("bth", name, &ib_bytes[..12]);
        let headers = ib.opcode().headers();
        for &(target, kind, len) in HEADER_TARGETS {
            if let Some(off) = headers.offset_of(kind) {
                self.add(target, name, &ib_bytes[12 + off..12 + off + len]);
            }
        }
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let file = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("classic pcap");
    let mut frames = Vec::new();
    while let Some(p) = reader.next_packet() {
        frames.push(p.expect("pcap record").data.into_owned());
    }
    frames
}

fn rxe_seeds(seeds: &mut Seeds) {
    let dir = root().join("tests/vectors/rxe");
    let mut pcaps: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("tests/vectors/rxe")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    pcaps.sort();
    assert!(!pcaps.is_empty(), "no capture in {}", dir.display());
    let mut roce = 0;
    for pcap in &pcaps {
        let stem = pcap.file_stem().expect("stem").to_string_lossy();
        let mut per_opcode: BTreeMap<u8, usize> = BTreeMap::new();
        let mut other_taken = false;
        for (i, bytes) in read_pcap(pcap).iter().enumerate() {
            let name = format!("rxe-{stem}-{:03}", i + 1);
            match Frame::parse(bytes) {
                Ok(f) => {
                    roce += 1;
                    let seen = per_opcode.entry(f.ib().opcode().value()).or_default();
                    *seen += 1;
                    if *seen <= PER_OPCODE {
                        seeds.add_roce_frame(&name, bytes);
                    }
                }
                Err(_) if !other_taken => {
                    other_taken = true;
                    seeds.add("frame_parse", &name, bytes);
                    // The IP packet of an IPv4/IPv6 frame (TCP, ICMPv6), not of an ARP.
                    if bytes.len() > 14 && matches!(&bytes[12..14], [0x08, 0x00] | [0x86, 0xdd]) {
                        seeds.add("datagram_parse", &name, &bytes[14..]);
                    }
                }
                Err(_) => {}
            }
        }
    }
    // MANIFEST.md: 320 RoCE v2 packets in all, every one with a valid ICRC.
    assert_eq!(roce, 320, "RoCE v2 frames in tests/vectors/rxe");
}

fn ext_for(op: Opcode, payload_len: usize, syndrome: Syndrome) -> ExtRepr {
    let h = op.headers();
    let has = |k| h.contains(k);
    ExtRepr {
        deth: has(HeaderSet::DETH).then_some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x00_0012,
        }),
        reth: has(HeaderSet::RETH).then_some(RethRepr {
            va: 0x0000_5634_12ab_c000,
            rkey: 0x0000_1a2b,
            dma_len: payload_len as u32,
        }),
        atomic_eth: None,
        aeth: has(HeaderSet::AETH).then_some(AethRepr { syndrome, msn: 7 }),
        atomic_ack_eth: None,
        immdt: has(HeaderSet::IMMDT).then_some(ImmDtRepr { imm: 0xdead_beef }),
        ieth: has(HeaderSet::IETH).then_some(IethRepr { rkey: 0x0000_3c4d }),
        cnp: has(HeaderSet::CNP).then_some(CnpRepr::default()),
    }
}

fn ipv4(dscp: u8, ecn: u8) -> IpRepr {
    ipv4_id(dscp, ecn, 0x1234)
}

fn ipv4_id(dscp: u8, ecn: u8, identification: u16) -> IpRepr {
    IpRepr::V4 {
        src: Ipv4Addr::new(10, 77, 0, 1),
        dst: Ipv4Addr::new(10, 77, 0, 2),
        dscp,
        ecn,
        ttl: 64,
        identification,
        dont_fragment: true,
    }
}

fn ipv6(traffic_class: u8) -> IpRepr {
    IpRepr::V6 {
        src: "fd00:77::1".parse::<Ipv6Addr>().expect("address"),
        dst: "fd00:77::2".parse::<Ipv6Addr>().expect("address"),
        traffic_class,
        flow_label: 0x2_5a5a,
        hop_limit: 64,
    }
}

fn emit_frame(
    op: Opcode,
    ip: IpRepr,
    vlan: Option<VlanTag>,
    payload: &[u8],
    syn: Syndrome,
) -> Vec<u8> {
    let bth = if op == Opcode::CNP {
        ferroce_wire::cnp::bth(0x11)
    } else {
        BthRepr {
            solicited: true,
            ack_req: true,
            ..BthRepr::new(op, 0x11, Psn::new(0x00ab_cdef))
        }
    };
    let repr = FrameRepr {
        ethernet: EthernetRepr {
            src: [0x02, 0x00, 0x0a, 0x4d, 0x00, 0x01],
            dst: [0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02],
            vlan,
        },
        datagram: DatagramRepr {
            ip,
            src_port: 0xc121,
            ib: IbRepr {
                bth,
                ext: ext_for(op, payload.len(), syn),
                payload,
            },
        },
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out).expect("synthetic frame emits");
    out
}

/// Inserts four NOP option bytes into the IPv4 header of an emitted IPv4 frame (IHL 6), fixing
/// the lengths and checksum and refilling the ICRC: the one IP header length rxe never sends.
fn with_ipv4_options(frame: &[u8]) -> Vec<u8> {
    let mut out = frame[..14 + 20].to_vec();
    out.extend_from_slice(&[1, 1, 1, 1]);
    out.extend_from_slice(&frame[14 + 20..]);
    let ip = &mut out[14..];
    ip[0] = 0x46;
    let total = u16::from_be_bytes([ip[2], ip[3]]) + 4;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].fill(0);
    let mut sum: u32 = ip[..24]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    ferroce_wire::icrc::fill(ip).expect("ICRC");
    out
}

fn synth_seeds(seeds: &mut Seeds) {
    let ack = Syndrome::Ack {
        credits: Syndrome::UNLIMITED_CREDITS,
    };
    let vlan = Some(VlanTag {
        pcp: 3,
        dei: false,
        vid: 100,
    });
    let data: Vec<u8> = (0u8..64).collect();
    let frames: Vec<(&str, Vec<u8>)> = vec![
        (
            "rc-send-only-imm-v4",
            emit_frame(
                Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                ipv4(0, 2),
                None,
                &data[..13],
                ack,
            ),
        ),
        (
            "rc-send-only-inv-v6",
            emit_frame(
                Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                ipv6(0x02),
                None,
                &data[..6],
                ack,
            ),
        ),
        (
            "rc-send-last-inv-vlan-v4",
            emit_frame(
                Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                ipv4(26, 2),
                vlan,
                &data[..40],
                ack,
            ),
        ),
        (
            "rc-write-only-imm-v4-ce",
            emit_frame(
                Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                ipv4(26, 3),
                None,
                &data[..1],
                ack,
            ),
        ),
        (
            "uc-write-last-imm-v6",
            emit_frame(
                Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                ipv6(0x6a),
                None,
                &[],
                ack,
            ),
        ),
        (
            "ud-send-only-imm-vlan-v6",
            emit_frame(
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
                ipv6(0),
                vlan,
                &data[..32],
                ack,
            ),
        ),
        (
            "rc-rnr-nak-v4",
            emit_frame(
                Opcode::RC_ACKNOWLEDGE,
                ipv4(0, 2),
                None,
                &[],
                Syndrome::RnrNak { timer: 14 },
            ),
        ),
        (
            "rc-nak-psn-seq-v6",
            emit_frame(
                Opcode::RC_ACKNOWLEDGE,
                ipv6(0),
                None,
                &[],
                Syndrome::Nak(NakCode::PsnSequenceError),
            ),
        ),
        (
            "cnp-vlan-v4",
            emit_frame(Opcode::CNP, ipv4(48, 1), vlan, &[], ack),
        ),
        (
            "cnp-v6",
            emit_frame(Opcode::CNP, ipv6(0xc1), None, &[], ack),
        ),
    ];
    for (name, frame) in &frames {
        seeds.add_roce_frame(&format!("synth-{name}"), frame);
    }
    let options = with_ipv4_options(&frames[0].1);
    seeds.add_roce_frame("synth-rc-send-only-imm-v4-options", &options);
}

/// A super-datagram of `payloads.len()` RC WRITE MIDDLE datagrams to QP 0x11 (IPv4
/// identifications counting up from 0x1234, or IPv6), joined with `gso::merge`; its
/// segment size.
fn super_datagram(v6: bool, payloads: &[usize]) -> (Vec<u8>, usize) {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let parts: Vec<Vec<u8>> = payloads
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let ip = if v6 {
                ipv6(0x02)
            } else {
                ipv4_id(0, 2, 0x1234 + i as u16)
            };
            let repr = DatagramRepr {
                ip,
                src_port: 0xc121,
                ib: IbRepr {
                    bth: BthRepr::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x11, Psn::new(i as u32)),
                    ext: ExtRepr::default(),
                    payload: &data[..len],
                },
            };
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut out).expect("datagram emits");
            out
        })
        .collect();
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let mut whole = vec![0u8; 65535];
    let (n, size) = ferroce_wire::gso::merge(&refs, &mut whole).expect("segments merge");
    whole.truncate(n);
    (whole, size)
}

/// One `gso_split` seed: a super-frame of `payloads` (IPv6 or IPv4), behind the link header
/// `pick` chooses (0: none, 1: Ethernet, 2: Ethernet with a VLAN tag), with its segment size
/// given or left to be inferred.
struct GsoSeed {
    name: &'static str,
    v6: bool,
    pick: u8,
    with_size: bool,
    payloads: &'static [usize],
}

const GSO_SEEDS: [GsoSeed; 4] = [
    GsoSeed {
        name: "v4-3x1024",
        v6: false,
        pick: 1,
        with_size: true,
        payloads: &[1024; 3],
    },
    GsoSeed {
        name: "v6-vlan-3x256-short-last",
        v6: true,
        pick: 2,
        with_size: true,
        payloads: &[256, 256, 256, 64],
    },
    GsoSeed {
        name: "v4-5x1024-size-inferred",
        v6: false,
        pick: 1,
        with_size: false,
        payloads: &[1024; 5],
    },
    GsoSeed {
        name: "v4-no-link-2x512",
        v6: false,
        pick: 0,
        with_size: true,
        payloads: &[512; 2],
    },
];

/// The `gso_split` input of `c` (see its body in `fuzz/src/lib.rs`: the link header's
/// selector, the segment size, 0 to be inferred, then the frame) and its link header's
/// length.
fn gso_input(c: &GsoSeed) -> (Vec<u8>, usize) {
    let (ip, size) = super_datagram(c.v6, c.payloads);
    let size = if c.with_size { size as u16 } else { 0 };
    let mut input = vec![c.pick];
    input.extend_from_slice(&size.to_be_bytes());
    let mut link = Vec::new();
    if c.pick != 0 {
        let eth = EthernetRepr {
            src: [0x02, 0x00, 0x0a, 0x4d, 0x00, 0x01],
            dst: [0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02],
            vlan: (c.pick == 2).then_some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
        };
        link = vec![0u8; eth.header_len()];
        eth.emit(&mut link, c.v6).expect("Ethernet header emits");
    }
    input.extend_from_slice(&link);
    input.extend_from_slice(&ip);
    (input, link.len())
}

fn gso_seeds(seeds: &mut Seeds) {
    for c in &GSO_SEEDS {
        let (input, _) = gso_input(c);
        seeds.add("gso_split", &format!("synth-gso-{}", c.name), &input);
    }
}

/// The `cm_mad` seeds: every CM MAD (the payload of a UD packet to QP1) in the rdma_cm
/// captures of `tests/vectors/rxe-cm/`, named `rxe-<capture>-<frame>`.
fn cm_seeds(seeds: &mut Seeds) {
    let dir = root().join("tests/vectors/rxe-cm");
    let mut pcaps: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("tests/vectors/rxe-cm")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    pcaps.sort();
    for pcap in pcaps {
        let stem = pcap.file_stem().unwrap().to_string_lossy().into_owned();
        for (i, bytes) in read_pcap(&pcap).iter().enumerate() {
            let Ok(frame) = Frame::parse(bytes) else {
                continue;
            };
            let ib = frame.ib();
            if ib.bth().dest_qp() == ferroce_wire::mad::GSI_QPN {
                seeds.add("cm_mad", &format!("rxe-{stem}-{:03}", i + 1), ib.payload());
            }
        }
    }
}

fn generate() -> Seeds {
    let mut seeds = Seeds::default();
    rxe_seeds(&mut seeds);
    cm_seeds(&mut seeds);
    synth_seeds(&mut seeds);
    gso_seeds(&mut seeds);
    seeds
}

fn is_generated(name: &str) -> bool {
    name.starts_with("rxe-") || name.starts_with("synth-")
}

#[test]
fn committed_seeds_match_the_generator() {
    let seeds = generate();
    let write = std::env::var_os(WRITE_ENV).is_some_and(|v| v != "0");
    let corpus = root().join("fuzz/corpus");
    let mut problems = Vec::new();
    let mut total_bytes = 0;
    for (target, files) in &seeds.0 {
        let dir = corpus.join(target);
        if write {
            fs::create_dir_all(&dir).expect("create corpus dir");
        }
        let on_disk: Vec<String> = fs::read_dir(&dir)
            .map(|rd| {
                rd.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .filter(|n| is_generated(n))
                    .collect()
            })
            .unwrap_or_default();
        for name in on_disk.iter().filter(|n| !files.contains_key(n.as_str())) {
            if write {
                fs::remove_file(dir.join(name)).expect("remove stale seed");
            } else {
                problems.push(format!("stale: {target}/{name}"));
            }
        }
        for (name, bytes) in files {
            total_bytes += bytes.len();
            let path = dir.join(name);
            if fs::read(&path).ok().as_deref() != Some(bytes.as_slice()) {
                if write {
                    fs::write(&path, bytes).expect("write seed");
                } else {
                    problems.push(format!("missing or different: {target}/{name}"));
                }
            }
        }
        eprintln!("{target}: {} seeds", files.len());
    }
    eprintln!("{total_bytes} bytes of seeds in all");
    assert!(total_bytes < 2 << 20, "keep the seed corpus under 2 MiB");
    assert!(
        problems.is_empty(),
        "fuzz/corpus is out of date ({} problems, first: {}); rerun with {WRITE_ENV}=1",
        problems.len(),
        problems[0]
    );
}

/// The `gso_split` seeds are super-frames that split (so the fuzzer starts from inputs that
/// reach every property of the body, merge included), into the segments they were made of.
#[test]
fn gso_seeds_split_into_their_segments() {
    assert_eq!(generate().0["gso_split"].len(), GSO_SEEDS.len());
    for c in &GSO_SEEDS {
        let (input, link) = gso_input(c);
        let mut frame = input[3..].to_vec();
        let mut size = usize::from(u16::from_be_bytes([input[1], input[2]]));
        if size == 0 {
            size = ferroce_wire::gso::infer_segment_size(&frame[link..])
                .unwrap_or_else(|| panic!("{}: no segment size found", c.name));
        }
        let mut valid = 0;
        let n = ferroce_wire::gso::split_in_place(&mut frame, link, size, &mut |seg| {
            valid += usize::from(ferroce_wire::icrc::verify(&seg[link..]).is_ok());
        });
        let count = c.payloads.len();
        assert_eq!(n, Ok(count), "{}", c.name);
        assert_eq!(valid, count, "{}: every segment's ICRC", c.name);
    }
}

//! Receive-side cost of a RoCE v2 packet: parse plus ICRC check, against raw CRC-32.
//!
//! For RC_RDMA_WRITE_ONLY frames with 64 B, 1 KiB and 4 KiB of payload (built with
//! `FrameRepr::emit`), three benchmark groups, each with one benchmark per payload size:
//!
//! * `frame_parse_verify/<size>`: `Frame::parse` of the whole Ethernet frame, then
//!   `verify_icrc` — what a receive path does;
//! * `icrc_verify/<size>`: `icrc::verify` alone on the IP packet;
//! * `crc32fast_raw/<size>`: `crc32fast::hash` over the bytes the ICRC is computed over (the
//!   IP packet without its 4-byte ICRC trailer), the reference an ICRC cannot beat.
//!
//! Every group reports `Throughput::Bytes` of that same byte count, so the throughputs compare
//! directly: verify / raw is the fraction of raw CRC speed the ICRC reaches (goal: at least
//! 80 % at 4 KiB). Run with `cargo bench -p ferroce-wire --bench parse_icrc`, then print a
//! table with `wire/benches/report.sh`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferroce_wire::packet::ICRC_LEN;
use ferroce_wire::{
    icrc, BthRepr, DatagramRepr, EthernetRepr, ExtRepr, Frame, FrameRepr, IbRepr, IpRepr, Opcode,
    Psn, RethRepr,
};

/// Payload sizes, in bytes.
const SIZES: [usize; 3] = [64, 1024, 4096];

/// An RC_RDMA_WRITE_ONLY frame as rxe would send it between the golden-vector hosts.
fn write_only_frame(payload: &[u8]) -> Vec<u8> {
    let repr = FrameRepr {
        ethernet: EthernetRepr {
            src: [0x02, 0x00, 0x0a, 0x4d, 0x00, 0x01],
            dst: [0x02, 0x00, 0x0a, 0x4d, 0x00, 0x02],
            vlan: None,
        },
        datagram: DatagramRepr {
            ip: IpRepr::V4 {
                src: Ipv4Addr::new(10, 77, 0, 1),
                dst: Ipv4Addr::new(10, 77, 0, 2),
                dscp: 0,
                ecn: 2,
                ttl: 64,
                identification: 0x1c46,
                dont_fragment: true,
            },
            src_port: 0xc121,
            ib: IbRepr {
                bth: BthRepr {
                    ack_req: true,
                    ..BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, 0x11, Psn::new(0x5e_1a2b))
                },
                ext: ExtRepr {
                    reth: Some(RethRepr {
                        va: 0x0000_55d0_8c21_6000,
                        rkey: 0x0000_1d2e,
                        dma_len: payload.len() as u32,
                    }),
                    ..ExtRepr::default()
                },
                payload,
            },
        },
    };
    let mut frame = vec![0u8; repr.buffer_len()];
    repr.emit(&mut frame).expect("emit");
    frame
}

fn parse_icrc(c: &mut Criterion) {
    let frames: Vec<(usize, Vec<u8>)> = SIZES
        .iter()
        .map(|&n| {
            let payload: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            (n, write_only_frame(&payload))
        })
        .collect();
    let ip_packet = |frame: &[u8]| -> Vec<u8> {
        let f = Frame::parse(frame).expect("parse");
        assert!(f.icrc_ok(), "emitted frame has a valid ICRC");
        f.datagram.ip_packet().to_vec()
    };
    let covered_len = |ip: &[u8]| (ip.len() - ICRC_LEN) as u64;

    let mut g = c.benchmark_group("frame_parse_verify");
    for (n, frame) in &frames {
        g.throughput(Throughput::Bytes(covered_len(&ip_packet(frame))));
        g.bench_with_input(BenchmarkId::from_parameter(n), frame, |b, frame| {
            b.iter(|| {
                let f = Frame::parse(black_box(frame)).expect("parse");
                f.datagram.verify_icrc().expect("ICRC");
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("icrc_verify");
    for (n, frame) in &frames {
        let ip = ip_packet(frame);
        g.throughput(Throughput::Bytes(covered_len(&ip)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &ip, |b, ip| {
            b.iter(|| icrc::verify(black_box(ip)).expect("ICRC"))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("crc32fast_raw");
    for (n, frame) in &frames {
        let ip = ip_packet(frame);
        let covered = &ip[..ip.len() - ICRC_LEN];
        g.throughput(Throughput::Bytes(covered.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), covered, |b, covered| {
            b.iter(|| crc32fast::hash(black_box(covered)))
        });
    }
    g.finish();
}

criterion_group!(benches, parse_icrc);
criterion_main!(benches);

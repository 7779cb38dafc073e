//! Does computing the ICRC "while copying" the payload into the frame pay?
//!
//! The transmit path copies a packet's payload from the application's region into the
//! frame, then runs the ICRC over the frame (still in L1). The alternative with the
//! crc32fast kernel is to interleave: copy a chunk, CRC that chunk, next chunk. Groups,
//! one benchmark per payload size (1 KiB and 4 KiB, the RoCE MTUs ferroce sends at
//! veth MTU 1500 and 9000), payloads taken in turn from a 64 MiB source so that each
//! copy reads memory that is not in cache, as an application's buffer would be:
//!
//! * `copy_then_crc/<size>`: `copy_from_slice` of the payload, then one
//!   `crc32fast::Hasher::update` over header and payload (today's path);
//! * `chunked_copy_crc_256/<size>`, `chunked_copy_crc_1024/<size>`: copy and CRC
//!   interleaved in chunks of 256 B / 1 KiB;
//! * `copy_only/<size>`: the copy alone, for scale.
//!
//! Run with `cargo bench -p ferroce-wire --bench copy_icrc`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SIZES: [usize; 2] = [1024, 4096];
/// Bytes of IP/UDP/IB headers before the payload (IPv4, BTH, RETH).
const HEAD: usize = 56;
const SOURCE: usize = 64 << 20;

fn copy_icrc(c: &mut Criterion) {
    let src: Vec<u8> = (0..SOURCE).map(|i| (i * 31 + 7) as u8).collect();
    let mut groups: Vec<(&str, usize)> = vec![("copy_then_crc", 0)];
    groups.push(("chunked_copy_crc_256", 256));
    groups.push(("chunked_copy_crc_1024", 1024));
    groups.push(("copy_only", usize::MAX));
    for (name, chunk) in groups {
        let mut g = c.benchmark_group(name);
        for &n in &SIZES {
            let mut frame = vec![0u8; HEAD + n];
            let mut k = 0usize;
            let slots = SOURCE / n;
            g.throughput(Throughput::Bytes(n as u64));
            g.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter(|| {
                    k = (k + 1) % slots;
                    let s = &src[k * n..(k + 1) * n];
                    let (head, body) = frame.split_at_mut(HEAD);
                    match chunk {
                        0 => {
                            body.copy_from_slice(s);
                            let mut h = crc32fast::Hasher::new();
                            h.update(head);
                            h.update(body);
                            black_box(h.finalize());
                        }
                        usize::MAX => {
                            body.copy_from_slice(s);
                            black_box(&body[0]);
                        }
                        c => {
                            let mut h = crc32fast::Hasher::new();
                            h.update(head);
                            for (d, s) in body.chunks_mut(c).zip(s.chunks(c)) {
                                d.copy_from_slice(s);
                                h.update(d);
                            }
                            black_box(h.finalize());
                        }
                    }
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, copy_icrc);
criterion_main!(benches);

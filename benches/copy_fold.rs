//! The copy of a payload into a frame with its CRC: copy then crc32fast (the way without
//! a kernel, and with `FERROCE_COPY_FOLD=0`) against each copy-and-fold kernel this CPU
//! runs (`ferroce::link::copy_fold`; the widest is the one used), at the two payload sizes ferroce sends (1 KiB and 4 KiB,
//! RoCE MTU at veth MTU 1500 and 9000). Payloads come in turn from a 64 MiB source, as an
//! application's buffer would (not in cache), into 128 frame slots 9216 bytes apart, as
//! the transmit batch lays them out (1.2 MB: mostly not in L1 or L2 either).
//!
//! A second group times the headers' CRC, which is joined to the payload's (`head_crc`).
//!
//! cargo bench --bench copy_fold

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferroce_wire::icrc;
use ferroce_wire::icrc_fold::{continue_crc, Fold};

const SIZES: [usize; 2] = [1024, 4096];
const SOURCE: usize = 64 << 20;
const SLOTS: usize = 128;
const SLOT: usize = 9216;

fn copy_fold(c: &mut Criterion) {
    let src: Vec<u8> = (0..SOURCE).map(|i| (i * 31 + 7) as u8).collect();
    let mut frames = vec![0u8; SLOTS * SLOT];
    let mut ways: Vec<(&str, Fold)> = vec![("copy_then_crc32fast", Fold::REFERENCE)];
    let kernels = ferroce::link::copy_fold::kernels();
    if kernels.is_empty() {
        eprintln!("no kernel: {}", ferroce::link::copy_fold::missing());
    }
    ways.extend(kernels.iter().map(|k| (k.name, *k)));
    for (name, fold) in ways {
        let mut g = c.benchmark_group(name);
        for &n in &SIZES {
            let (mut k, mut crc) = (0usize, 0u32);
            g.throughput(Throughput::Bytes(n as u64));
            g.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter(|| {
                    k += 1;
                    let s = &src[(k * n) % (SOURCE - n)..][..n];
                    let slot = (k % SLOTS) * SLOT;
                    let d = &mut frames[slot..slot + n];
                    crc = (fold.copy)(d, s, crc);
                    black_box(crc)
                })
            });
        }
        g.finish();
    }
    // Both ways give the same CRC.
    let s = &src[..4096];
    let (mut d1, mut d2) = (vec![0u8; 4096], vec![0u8; 4096]);
    for k in &kernels {
        assert_eq!(
            (k.copy)(&mut d1, s, !0),
            (Fold::REFERENCE.copy)(&mut d2, s, !0)
        );
    }
    assert_eq!(continue_crc(!0, s), (Fold::REFERENCE.copy)(&mut d2, s, !0));
}

/// The CRC of a packet's headers, which the transport joins to its folded payload's: a
/// 1 KiB RDMA WRITE ONLY's 56 bytes (IPv4, UDP, BTH, RETH) hashed by crc32fast after
/// masking (`icrc::compute`, the way without a kernel) against masked into one 64-byte
/// block (`icrc::head_block`) that each kernel's `block` builds in registers and reduces
/// with carry-less multiplications.
fn head_crc(c: &mut Criterion) {
    let mut packet: Vec<u8> = (0..56 + 1024 + 4).map(|i| (i * 29 + 3) as u8).collect();
    packet[0] = 0x45;
    let head = &packet[..56];
    let mut g = c.benchmark_group("head_crc");
    g.bench_function("crc32fast", |b| {
        b.iter(|| icrc::compute(black_box(head)).unwrap())
    });
    for k in ferroce::link::copy_fold::kernels() {
        g.bench_function(k.name, |b| {
            b.iter(|| (k.block)(&icrc::head_block(black_box(&packet), 56).unwrap()))
        });
        // The same CRC either way, once carried past the block's 8 bytes of zeros.
        let block = (k.block)(&icrc::head_block(&packet, 56).unwrap());
        let direct = !continue_crc(icrc::compute(head).unwrap(), &[0; 8]);
        assert_eq!(block, direct, "{}", k.name);
    }
    g.finish();
}

criterion_group!(benches, copy_fold, head_crc);
criterion_main!(benches);

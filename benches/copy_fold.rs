//! The copy of a payload into a frame with its CRC: copy then crc32fast (the way without
//! a kernel, and with `FERROCE_COPY_FOLD=0`) against each copy-and-fold kernel this CPU
//! runs (`ferroce::link::copy_fold`; the widest is the one used), at the two payload sizes ferroce sends (1 KiB and 4 KiB,
//! RoCE MTU at veth MTU 1500 and 9000). Payloads come in turn from a 64 MiB source, as an
//! application's buffer would (not in cache), into 128 frame slots 9216 bytes apart, as
//! the transmit batch lays them out (1.2 MB: mostly not in L1 or L2 either).
//!
//! cargo bench --bench copy_fold

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
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

criterion_group!(benches, copy_fold);
criterion_main!(benches);

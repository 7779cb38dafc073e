//! Copying a payload into a frame and folding it into the ICRC's CRC in the same pass.
//!
//! The kernels behind [`ferroce_wire::icrc_fold`]: each step loads a run of payload bytes
//! once into four vector registers, stores them into the frame and folds them into four
//! running CRC remainders (carry-less multiplications by x^(D+32) and x^(D-32) mod P, the
//! standard fold over the step's D bits); the four are folded into one, the last 128 bits
//! are reduced to the CRC's 32 by Barrett's method, and the tail (under one step) goes
//! through crc32fast. The same reduction hashes a packet's headers as one 64-byte block
//! ([`Fold::block`]). Two widths, the wider the CPU has:
//! - AVX-512 with VPCLMULQDQ, 256 bytes a step. Natively (an Intel host with AVX-512), a
//!   1 KiB payload into a cold frame took 64 ns this way against 92 ns copied then hashed,
//!   4 KiB 172 against 216 (`cargo bench --bench copy_fold`).
//! - AVX2 with VPCLMULQDQ (AMD Zen 3, Intel cores without AVX-512), 128 bytes a step. On
//!   a 2-CPU AMD EPYC host without AVX-512, 1 KiB took 186 ns against 283 copied then
//!   hashed, 4 KiB 650 against 736.
//!
//! On a CPU without VPCLMULQDQ nothing is installed and the transport copies, then
//! hashes, as before. A third kernel, 128-bit PCLMULQDQ alone (64 bytes a step), won in
//! the micro-benchmark on that AMD host (249 and 688 ns) but not in the data path
//! (`ferroce perf write-bw`, alternating runs: 8.25 against 8.77 Gb/s unfolded at veth
//! MTU 1500, 13.1 against 13.2 at 9000), so it was left out.
//!
//! The instructions are reached through `std::arch`'s safe intrinsics inside
//! `#[target_feature]` functions; calling those from code compiled without the features is
//! the one `unsafe` here (besides the stores), made only after the features were detected
//! at run time.

use ferroce_wire::icrc_fold::{continue_crc, Fold};

/// The kernels this CPU runs, widest (fastest) first.
pub fn kernels() -> Vec<Fold> {
    #[cfg(target_arch = "x86_64")]
    {
        x86::KERNELS
            .iter()
            .filter(|(detected, _)| detected())
            .map(|(_, k)| *k)
            .collect()
    }
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}

/// The kernel this CPU runs, if it has one: the widest.
pub fn kernel() -> Option<Fold> {
    kernels().into_iter().next()
}

/// Why [`kernel`] found none, for `--stats`.
pub fn missing() -> &'static str {
    "the CPU lacks VPCLMULQDQ with AVX2 or AVX-512"
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::continue_crc;
    use ferroce_wire::icrc::{HeadBlock, HEAD_BLOCK};
    use ferroce_wire::icrc_fold::Fold;

    /// Each kernel with the check that the CPU runs it, widest first.
    pub(super) const KERNELS: [(fn() -> bool, Fold); 2] = [
        (
            has_512,
            Fold {
                copy: copy_512,
                mul,
                block,
                name: "avx512-vpclmulqdq",
            },
        ),
        (
            has_256,
            Fold {
                copy: copy_256,
                mul,
                block,
                name: "avx2-vpclmulqdq",
            },
        ),
    ];

    /// Fold constants (reflected CRC-32) for a fold over `d` bits: x^(d+32) mod P and
    /// x^(d-32) mod P, bit-reflected and shifted left by one, as the carry-less fold of
    /// the low and high 64 bits of a 128-bit lane needs them.
    const fn fold_k(d: u32) -> (i64, i64) {
        (reflected_x_pow(d + 32), reflected_x_pow(d - 32))
    }

    /// x^n mod P(x), bit-reflected into 32 bits and shifted left by one.
    const fn reflected_x_pow(n: u32) -> i64 {
        let mut r: u64 = 1;
        let mut i = 0;
        while i < n {
            r <<= 1;
            if r & (1 << 32) != 0 {
                r ^= P_NORMAL;
            }
            i += 1;
        }
        ((r as u32).reverse_bits() as i64) << 1
    }

    const K_2048: (i64, i64) = fold_k(2048);
    const K_1024: (i64, i64) = fold_k(1024);
    const K_512: (i64, i64) = fold_k(512);
    const K_256: (i64, i64) = fold_k(256);
    const K_128: (i64, i64) = fold_k(128);
    const K_256_384: [(i64, i64); 2] = [fold_k(256), fold_k(384)];
    /// x^64 mod P, reflected and shifted as the fold constants: the 96-to-64-bit step of
    /// the final reduction.
    const K_64: i64 = reflected_x_pow(64);
    /// P(x) and Barrett's floor(x^64 / P(x)), each bit-reflected over its 33 bits.
    const P_REFLECTED: i64 = reflect33(P_NORMAL);
    const MU_REFLECTED: i64 = reflect33(MU);
    /// P(x) with its x^32 term, in normal bit order.
    const P_NORMAL: u64 = 0x1_04c1_1db7;
    /// floor(x^64 / P(x)): Barrett's constant.
    const MU: u64 = poly_div_x64(P_NORMAL);
    /// How far ahead of the store the frame's lines are asked for (see the kernels).
    const PREFETCH_AHEAD: usize = 512;

    /// The low 33 bits of `v` in reverse order.
    const fn reflect33(v: u64) -> i64 {
        ((v & 0x1_ffff_ffff).reverse_bits() >> 31) as i64
    }

    const fn poly_div_x64(p: u64) -> u64 {
        // Long division of x^64 by p (degree 32) over GF(2).
        let mut rem: u128 = 1 << 64;
        let mut q: u64 = 0;
        let mut i = 64;
        while i >= 32 {
            if rem & (1u128 << i) != 0 {
                rem ^= (p as u128) << (i - 32);
                q |= 1 << (i - 32);
            }
            i -= 1;
        }
        q
    }

    pub(super) fn has_clmul() -> bool {
        is_x86_feature_detected!("pclmulqdq") && is_x86_feature_detected!("sse4.1")
    }

    pub(super) fn has_256() -> bool {
        has_clmul() && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("vpclmulqdq")
    }

    pub(super) fn has_512() -> bool {
        has_clmul() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("vpclmulqdq")
    }

    /// Copy, then crc32fast: what each kernel's [`Fold::copy`] does without its features
    /// or under one step.
    fn copy_then_hash(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        dst.copy_from_slice(src);
        continue_crc(crc, dst)
    }

    /// A kernel's `copy` behind its guard: runs `kernel` on `dst` and `src` (cut to the
    /// shorter) when they hold at least one `step` and `has` finds its features (cached by
    /// std, a few loads), so that the function is sound whoever calls it; else copies,
    /// then hashes. Each caller pairs a kernel with the check of exactly the features its
    /// `#[target_feature]` names.
    fn guarded(
        dst: &mut [u8],
        src: &[u8],
        crc: u32,
        step: usize,
        has: fn() -> bool,
        kernel: unsafe fn(&mut [u8], &[u8], u32) -> u32,
    ) -> u32 {
        let n = dst.len().min(src.len());
        let (dst, src) = (&mut dst[..n], &src[..n]);
        if n < step || !has() {
            return copy_then_hash(dst, src, crc);
        }
        // SAFETY: `kernel` needs the CPU features `has` checked just above (see the
        // callers' pairs); it touches memory only through the two slices.
        unsafe { kernel(dst, src, crc) }
    }

    /// AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.1: what `copy_fold_512` is compiled for.
    pub(super) fn copy_512(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        guarded(dst, src, crc, STEP_512, has_512, copy_fold_512)
    }

    /// AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.1: what `copy_fold_256` is compiled for.
    pub(super) fn copy_256(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        guarded(dst, src, crc, STEP_256, has_256, copy_fold_256)
    }

    /// [`Fold::mul`]: `a · b mod P` in the CRC's reflected order, by one carry-less
    /// multiplication and a Barrett reduction.
    pub(super) fn mul(a: u32, b: u32) -> u32 {
        if !has_clmul() {
            return ferroce_wire::icrc::mul_mod(a, b);
        }
        // SAFETY: `mul_clmul` needs PCLMULQDQ and SSE4.1, checked just above.
        unsafe { mul_clmul(a, b) }
    }

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn clmul(a: u64, b: u64) -> u64 {
        let p = _mm_clmulepi64_si128(_mm_set_epi64x(0, a as i64), _mm_set_epi64x(0, b as i64), 0);
        _mm_cvtsi128_si64(p) as u64
    }

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn mul_clmul(a: u32, b: u32) -> u32 {
        // Reflected order has x^0 in bit 31; reversed, each is an ordinary polynomial.
        let q = clmul(u64::from(a.reverse_bits()), u64::from(b.reverse_bits()));
        let t = clmul(q >> 32, MU) >> 32;
        let r = (q ^ clmul(t, P_NORMAL)) as u32;
        r.reverse_bits()
    }

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn fold128(x: __m128i, k: __m128i) -> __m128i {
        _mm_xor_si128(
            _mm_clmulepi64_si128(x, k, 0x00),
            _mm_clmulepi64_si128(x, k, 0x11),
        )
    }

    /// The CRC register (from zero) of the 16 bytes in `r`, without a table: the first 8
    /// bytes folded onto the last 8 (96 bits left), the first 4 of those onto the rest (64
    /// bits), then Barrett's reduction to 32 bits. crc32fast would hash 16 bytes through
    /// its table, after its CPU check, at 10.6 ns a call on an AVX-512 Xeon.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reduce128(r: __m128i) -> u32 {
        let low32 = _mm_set_epi32(0, 0, 0, -1);
        let k = _mm_set_epi64x(K_128.1, K_64);
        let x = _mm_xor_si128(_mm_clmulepi64_si128(r, k, 0x10), _mm_srli_si128(r, 8));
        let x = _mm_xor_si128(
            _mm_clmulepi64_si128(_mm_and_si128(x, low32), k, 0x00),
            _mm_srli_si128(x, 4),
        );
        let pu = _mm_set_epi64x(MU_REFLECTED, P_REFLECTED);
        let t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), pu, 0x10);
        let t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), pu, 0x00);
        _mm_extract_epi32(_mm_xor_si128(x, t2), 1) as u32
    }

    /// [`Fold::block`]: the block built in four 16-byte registers (bytes OR mask, the
    /// bytes past the headers cleared by a compare with their index, the initial register
    /// XORed in), the first three folded onto the last at once (by 384, 256 and 128 bits:
    /// three independent multiplications), then [`reduce128`].
    pub(super) fn block(head: &HeadBlock) -> u32 {
        if !has_clmul() {
            return !continue_crc(!0, &head.to_bytes());
        }
        // SAFETY: `block_clmul` needs PCLMULQDQ and SSE4.1, checked just above.
        unsafe { block_clmul(head) }
    }

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn block_clmul(head: &HeadBlock) -> u32 {
        let len = _mm_set1_epi8(head.len.min(HEAD_BLOCK) as i8);
        let index = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let lane = |i: usize| {
            let b: __m128i = bytemuck::pod_read_unaligned(&head.bytes[16 * i..16 * i + 16]);
            let m: __m128i = bytemuck::pod_read_unaligned(&head.mask[16 * i..16 * i + 16]);
            let keep = _mm_cmpgt_epi8(len, _mm_add_epi8(index, _mm_set1_epi8(16 * i as i8)));
            _mm_and_si128(_mm_or_si128(b, m), keep)
        };
        let first = _mm_xor_si128(lane(0), _mm_cvtsi32_si128(head.init as i32));
        let [k256, k384] = K_256_384.map(|(lo, hi)| _mm_set_epi64x(hi, lo));
        let k128 = _mm_set_epi64x(K_128.1, K_128.0);
        let r = _mm_xor_si128(
            _mm_xor_si128(fold128(first, k384), fold128(lane(1), k256)),
            _mm_xor_si128(fold128(lane(2), k128), lane(3)),
        );
        reduce128(r)
    }

    /// The 16 bytes left after the folds, which are congruent to the message so far, and
    /// the tail after the last step: their register, complemented, is the running CRC,
    /// which the tail continues.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn finish(r: __m128i, tail_d: &mut [u8], tail_s: &[u8]) -> u32 {
        tail_d.copy_from_slice(tail_s);
        continue_crc(!reduce128(r), tail_d)
    }

    /// Asks for the frame's lines [`PREFETCH_AHEAD`] bytes after `d` for writing while
    /// these are folded: the frame is usually cold, and a store that misses stalls the
    /// fold behind it.
    #[target_feature(enable = "sse")]
    #[inline]
    fn prefetch_frame(d: &mut [u8], lines: usize) {
        let ahead = d.as_mut_ptr().wrapping_add(PREFETCH_AHEAD);
        for line in 0..lines {
            _mm_prefetch::<_MM_HINT_ET0>(ahead.wrapping_add(64 * line).cast::<i8>());
        }
    }

    // ---- 512 bits: four registers of 64 bytes, 256 bytes a step ----

    const STEP_512: usize = 256;

    #[target_feature(enable = "avx512f")]
    fn load512(s: &[u8]) -> __m512i {
        bytemuck::pod_read_unaligned(&s[..64])
    }

    /// Stores `v` into the first 64 bytes of `d` (which has them: a 64-byte chunk).
    #[target_feature(enable = "avx512f")]
    fn store512(d: &mut [u8], v: __m512i) {
        let d = &mut d[..64];
        // SAFETY: `d` is 64 writable bytes (the slice above, bounds-checked); the store is
        // unaligned, and the caller has AVX-512F (this function's feature).
        unsafe { _mm512_storeu_si512(d.as_mut_ptr().cast(), v) }
    }

    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold512(x: __m512i, k: __m512i) -> __m512i {
        _mm512_xor_si512(
            _mm512_clmulepi64_epi128(x, k, 0x00),
            _mm512_clmulepi64_epi128(x, k, 0x11),
        )
    }

    #[target_feature(enable = "avx512f")]
    fn broadcast512(k: (i64, i64)) -> __m512i {
        _mm512_set_epi64(k.1, k.0, k.1, k.0, k.1, k.0, k.1, k.0)
    }

    /// Copies `src` (at least [`STEP_512`] bytes, as long as `dst`) into `dst` and returns
    /// the CRC-32 of `src` continuing `crc`. Each 64-byte block is loaded once; the store
    /// and the fold both use the loaded register, so the compiler cannot split the loop
    /// into a `memcpy` and a second pass.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
    fn copy_fold_512(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        let n = src.len() / STEP_512 * STEP_512;
        let (body_d, tail_d) = dst.split_at_mut(n);
        let (body_s, tail_s) = src.split_at(n);
        let mut x = [_mm512_setzero_si512(); 4];
        let k = broadcast512(K_2048);
        for (i, (d, s)) in body_d
            .chunks_exact_mut(STEP_512)
            .zip(body_s.chunks_exact(STEP_512))
            .enumerate()
        {
            prefetch_frame(d, STEP_512 / 64);
            for (j, (d, s)) in d.chunks_exact_mut(64).zip(s.chunks_exact(64)).enumerate() {
                let v = load512(s);
                store512(d, v);
                x[j] = if i == 0 {
                    v
                } else {
                    _mm512_xor_si512(fold512(x[j], k), v)
                };
            }
            if i == 0 {
                // The running CRC enters as the first 32 bits of the message (reflected).
                let init = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, i64::from(!crc));
                x[0] = _mm512_xor_si512(x[0], init);
            }
        }
        // Four registers into one (fold over 512 bits), then its four 128-bit lanes into
        // one (fold over 128 bits).
        let k = broadcast512(K_512);
        let mut z = _mm512_xor_si512(fold512(x[0], k), x[1]);
        z = _mm512_xor_si512(fold512(z, k), x[2]);
        z = _mm512_xor_si512(fold512(z, k), x[3]);
        let k = _mm_set_epi64x(K_128.1, K_128.0);
        let mut r = fold128(_mm512_extracti32x4_epi32(z, 0), k);
        r = _mm_xor_si128(r, _mm512_extracti32x4_epi32(z, 1));
        r = _mm_xor_si128(fold128(r, k), _mm512_extracti32x4_epi32(z, 2));
        r = _mm_xor_si128(fold128(r, k), _mm512_extracti32x4_epi32(z, 3));
        finish(r, tail_d, tail_s)
    }

    // ---- 256 bits: four registers of 32 bytes, 128 bytes a step ----

    const STEP_256: usize = 128;

    #[target_feature(enable = "avx2")]
    fn load256(s: &[u8]) -> __m256i {
        bytemuck::pod_read_unaligned(&s[..32])
    }

    /// Stores `v` into the first 32 bytes of `d` (which has them: a 32-byte chunk).
    #[target_feature(enable = "avx2")]
    fn store256(d: &mut [u8], v: __m256i) {
        let d = &mut d[..32];
        // SAFETY: `d` is 32 writable bytes (the slice above, bounds-checked); the store is
        // unaligned, and the caller has AVX2 (this function's feature).
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
    }

    #[target_feature(enable = "avx2,vpclmulqdq")]
    fn fold256(x: __m256i, k: __m256i) -> __m256i {
        _mm256_xor_si256(
            _mm256_clmulepi64_epi128(x, k, 0x00),
            _mm256_clmulepi64_epi128(x, k, 0x11),
        )
    }

    #[target_feature(enable = "avx2")]
    fn broadcast256(k: (i64, i64)) -> __m256i {
        _mm256_set_epi64x(k.1, k.0, k.1, k.0)
    }

    /// [`copy_fold_512`] with 256-bit registers: at least [`STEP_256`] bytes.
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1")]
    fn copy_fold_256(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        let n = src.len() / STEP_256 * STEP_256;
        let (body_d, tail_d) = dst.split_at_mut(n);
        let (body_s, tail_s) = src.split_at(n);
        let mut x = [_mm256_setzero_si256(); 4];
        let k = broadcast256(K_1024);
        for (i, (d, s)) in body_d
            .chunks_exact_mut(STEP_256)
            .zip(body_s.chunks_exact(STEP_256))
            .enumerate()
        {
            prefetch_frame(d, STEP_256 / 64);
            for (j, (d, s)) in d.chunks_exact_mut(32).zip(s.chunks_exact(32)).enumerate() {
                let v = load256(s);
                store256(d, v);
                x[j] = if i == 0 {
                    v
                } else {
                    _mm256_xor_si256(fold256(x[j], k), v)
                };
            }
            if i == 0 {
                let init = _mm256_set_epi64x(0, 0, 0, i64::from(!crc));
                x[0] = _mm256_xor_si256(x[0], init);
            }
        }
        // Four registers into one (fold over 256 bits), then its two lanes into one.
        let k = broadcast256(K_256);
        let mut z = _mm256_xor_si256(fold256(x[0], k), x[1]);
        z = _mm256_xor_si256(fold256(z, k), x[2]);
        z = _mm256_xor_si256(fold256(z, k), x[3]);
        let k = _mm_set_epi64x(K_128.1, K_128.0);
        let r = _mm_xor_si128(
            fold128(_mm256_extracti128_si256::<0>(z), k),
            _mm256_extracti128_si256::<1>(z),
        );
        finish(r, tail_d, tail_s)
    }

    #[cfg(test)]
    pub(super) mod constants {
        /// The published constants of the carry-less CRC-32 fold (Intel's paper on CRC
        /// with PCLMULQDQ, and Linux's crc32-pclmul) that `fold_k` must reproduce.
        #[test]
        fn fold_constants_are_the_published_ones() {
            assert_eq!(super::K_128, (0x1_7519_97d0, 0x0_ccaa_009e));
            assert_eq!(super::K_512, (0x1_5444_2bd4, 0x1_c6e4_1596));
            assert_eq!(super::K_2048, (0x1_1542_778a, 0x1_322d_1430));
            assert_eq!(super::K_64, 0x1_63cd_6124);
            assert_eq!(super::P_REFLECTED, 0x1_db71_0641);
            assert_eq!(super::MU_REFLECTED, 0x1_f701_1641);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    //! Each kernel runs where the CPU has its instructions; elsewhere the same function
    //! takes its fallback (copy, then crc32fast), and these tests check that too.
    use super::*;
    use ferroce_wire::icrc::mul_mod;

    fn bytes(len: usize, mut x: u32) -> Vec<u8> {
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn all() -> impl Iterator<Item = Fold> {
        x86::KERNELS.iter().map(|(_, k)| *k)
    }

    #[test]
    fn the_kernels_offered_are_exactly_those_the_cpu_runs_widest_first() {
        let want: Vec<&str> = x86::KERNELS
            .iter()
            .filter(|(has, _)| has())
            .map(|(_, k)| k.name)
            .collect();
        let got: Vec<&str> = kernels().iter().map(|k| k.name).collect();
        assert_eq!(got, want);
        assert_eq!(kernel().map(|k| k.name), want.first().copied());
        // Each width needs the narrower one's instructions too.
        let has: Vec<bool> = x86::KERNELS.iter().map(|(has, _)| has()).collect();
        assert!(has.windows(2).all(|w| !w[0] || w[1]), "{has:?}");
        eprintln!("kernels on this CPU: {got:?}");
    }

    #[test]
    fn every_kernel_copies_and_hashes_as_copy_then_crc32fast() {
        let src = bytes(9000, 0x1234_5678);
        for k in all() {
            for len in [
                0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 1000, 1024, 1027, 4096,
                4099, 8192,
            ] {
                for at in [0, 1, 7, 64] {
                    for init in [0u32, !0, 0xdead_beef] {
                        let s = &src[at..at + len];
                        let mut d = vec![0xa5u8; len + 3];
                        let got = (k.copy)(&mut d[1..1 + len], s, init);
                        assert_eq!(
                            got,
                            continue_crc(init, s),
                            "{} len {len} at {at} init {init:#x}",
                            k.name
                        );
                        assert_eq!(&d[1..1 + len], s, "{}", k.name);
                        assert_eq!((d[0], d[len + 1], d[len + 2]), (0xa5, 0xa5, 0xa5));
                    }
                }
            }
        }
    }

    #[test]
    fn the_multiplication_is_the_bit_serial_definition() {
        let v = bytes(4000, 99);
        for w in v.chunks_exact(8) {
            let a = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let b = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            assert_eq!(x86::mul(a, b), mul_mod(a, b), "{a:#x} * {b:#x}");
        }
        for (a, b) in [(0, 5), (0x8000_0000, 0x1234), (!0, !0), (1, 1)] {
            assert_eq!(x86::mul(a, b), mul_mod(a, b));
        }
    }

    #[test]
    fn a_head_block_s_register_is_crc32fast_s() {
        // Every header length a block takes, over random bytes, behind each IP version's
        // mask, with and without an initial register.
        let v = bytes(64 * 64, 3);
        let mut seen = 0;
        for (n, w) in v.chunks_exact(64).enumerate() {
            for first in [0x45u8, 0x47, 0x60] {
                let mut packet = w.to_vec();
                packet[0] = first;
                let min = if first == 0x60 {
                    60
                } else {
                    usize::from(first & 0xf) * 4 + 20
                };
                let Some(mut head) = ferroce_wire::icrc::head_block(&packet, n.max(min)) else {
                    panic!(
                        "{first:#x}: a block refused headers of {} bytes",
                        n.max(min)
                    );
                };
                for init in [head.init, 0, 0xdead_beef] {
                    head.init = init;
                    let want = !continue_crc(!0, &head.to_bytes());
                    assert_eq!(x86::block(&head), want, "{first:#x} len {}", head.len);
                    for k in all() {
                        assert_eq!((k.block)(&head), want, "{}", k.name);
                    }
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 64 * 3 * 3);
    }

    #[test]
    fn unequal_lengths_copy_the_shorter_without_panicking() {
        let src = bytes(600, 5);
        for k in all() {
            let mut d = vec![0u8; 300];
            assert_eq!((k.copy)(&mut d, &src, !0), continue_crc(!0, &src[..300]));
            let mut d = vec![0u8; 700];
            assert_eq!((k.copy)(&mut d, &src, !0), continue_crc(!0, &src));
        }
    }
}

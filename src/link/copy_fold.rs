//! Copying a payload into a frame and folding it into the ICRC's CRC in the same pass.
//!
//! The kernel behind [`ferroce_wire::icrc_fold`]: with AVX-512 and VPCLMULQDQ, each 256
//! bytes of payload are loaded once into four 512-bit registers, stored into the frame and
//! folded into four running CRC remainders (carry-less multiplications by x^2080 and
//! x^2016 mod P, the standard fold over 2048 bits); the four are folded into one, and the
//! last 128 bits and the tail (under 256 bytes) go through crc32fast. Natively, a 1 KiB
//! payload into a cold frame took 64 ns this way against 92 ns copied then hashed, 4 KiB
//! 172 against 216 (`cargo bench --bench copy_fold`). On a CPU without the instructions nothing is installed and the transport
//! copies, then hashes, as before.
//!
//! The instructions are reached through `std::arch`'s safe intrinsics inside
//! `#[target_feature]` functions; calling those from code compiled without the features is
//! the one `unsafe` here, made only after the features were detected at run time.

use ferroce_wire::icrc_fold::{continue_crc, Fold};

/// The kernel this CPU runs, if it has one.
pub fn kernel() -> Option<Fold> {
    #[cfg(target_arch = "x86_64")]
    if x86::detected() {
        return Some(Fold {
            copy: x86::copy,
            mul: x86::mul,
            name: "avx512-vpclmulqdq",
        });
    }
    None
}

/// Why [`kernel`] found none, for `--stats`.
pub fn missing() -> &'static str {
    "the CPU lacks AVX-512 with VPCLMULQDQ"
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::continue_crc;

    /// Fold constants (reflected CRC-32): x^(D+32) mod P and x^(D-32) mod P, bit-reflected
    /// and shifted as the carry-less fold needs them, for a fold over D bits.
    const K_2048: (i64, i64) = (0x1_1542_778a, 0x1_322d_1430);
    const K_512: (i64, i64) = (0x1_5444_2bd4, 0x1_c6e4_1596);
    const K_128: (i64, i64) = (0x1_7519_97d0, 0x0_ccaa_009e);
    /// P(x) with its x^32 term, in normal bit order.
    const P_NORMAL: u64 = 0x1_04c1_1db7;
    /// floor(x^64 / P(x)): Barrett's constant.
    const MU: u64 = poly_div_x64(P_NORMAL);
    /// Bytes folded per step: four 512-bit registers.
    const STEP: usize = 256;

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

    pub(super) fn detected() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("vpclmulqdq")
            && is_x86_feature_detected!("pclmulqdq")
            && is_x86_feature_detected!("sse4.1")
    }

    /// [`super::Fold::copy`]: checks the features (cached by std, one load) so that the
    /// function is sound whoever calls it, then runs the kernel.
    pub(super) fn copy(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        let n = dst.len().min(src.len());
        let (dst, src) = (&mut dst[..n], &src[..n]);
        if n < STEP || !detected() {
            dst.copy_from_slice(src);
            return continue_crc(crc, dst);
        }
        // SAFETY: `copy_fold_512` needs AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.1, checked
        // at run time just above; it touches memory only through the two slices.
        unsafe { copy_fold_512(dst, src, crc) }
    }

    /// [`super::Fold::mul`]: `a · b mod P` in the CRC's reflected order, by one carry-less
    /// multiplication and a Barrett reduction.
    pub(super) fn mul(a: u32, b: u32) -> u32 {
        if !detected() {
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

    #[target_feature(enable = "avx512f")]
    fn load(s: &[u8]) -> __m512i {
        bytemuck::pod_read_unaligned(&s[..64])
    }

    /// Stores `v` into the first 64 bytes of `d` (which has them: a 64-byte chunk).
    #[target_feature(enable = "avx512f")]
    fn store(d: &mut [u8], v: __m512i) {
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

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn fold128(x: __m128i, k: __m128i) -> __m128i {
        _mm_xor_si128(
            _mm_clmulepi64_si128(x, k, 0x00),
            _mm_clmulepi64_si128(x, k, 0x11),
        )
    }

    #[target_feature(enable = "avx512f")]
    fn broadcast(k: (i64, i64)) -> __m512i {
        _mm512_set_epi64(k.1, k.0, k.1, k.0, k.1, k.0, k.1, k.0)
    }

    /// Copies `src` (at least [`STEP`] bytes, as long as `dst`) into `dst` and returns the
    /// CRC-32 of `src` continuing `crc`. Each 64-byte block is loaded once; the store and
    /// the fold both use the loaded register, so the compiler cannot split the loop into a
    /// `memcpy` and a second pass.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
    fn copy_fold_512(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        let n = src.len() / STEP * STEP;
        let (body_d, tail_d) = dst.split_at_mut(n);
        let (body_s, tail_s) = src.split_at(n);
        let mut x = [_mm512_setzero_si512(); 4];
        let k = broadcast(K_2048);
        for (i, (d, s)) in body_d
            .chunks_exact_mut(STEP)
            .zip(body_s.chunks_exact(STEP))
            .enumerate()
        {
            // Ask for the frame's next lines for writing while these are folded: the frame
            // is usually cold, and a store that misses stalls the fold behind it.
            let ahead = d.as_mut_ptr().wrapping_add(2 * STEP);
            for line in 0..STEP / 64 {
                _mm_prefetch::<_MM_HINT_ET0>(ahead.wrapping_add(64 * line).cast::<i8>());
            }
            for (j, (d, s)) in d.chunks_exact_mut(64).zip(s.chunks_exact(64)).enumerate() {
                let v = load(s);
                store(d, v);
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
        let k = broadcast(K_512);
        let mut z = _mm512_xor_si512(fold512(x[0], k), x[1]);
        z = _mm512_xor_si512(fold512(z, k), x[2]);
        z = _mm512_xor_si512(fold512(z, k), x[3]);
        let k = _mm_set_epi64x(K_128.1, K_128.0);
        let mut r = fold128(_mm512_extracti32x4_epi32(z, 0), k);
        r = _mm_xor_si128(r, _mm512_extracti32x4_epi32(z, 1));
        r = _mm_xor_si128(fold128(r, k), _mm512_extracti32x4_epi32(z, 2));
        r = _mm_xor_si128(fold128(r, k), _mm512_extracti32x4_epi32(z, 3));
        // What is left is congruent to the message so far: hashing its 16 bytes from a
        // zero register (a finished CRC of !0) gives the running CRC.
        let rest: [u8; 16] = bytemuck::cast(r);
        tail_d.copy_from_slice(tail_s);
        continue_crc(continue_crc(!0, &rest), tail_d)
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    //! The kernel runs where the CPU has AVX-512 and VPCLMULQDQ (this project's hosts do);
    //! elsewhere the same functions take their fallback, and these tests check that.
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

    #[test]
    fn the_kernel_is_offered_exactly_where_the_cpu_runs_it() {
        assert_eq!(kernel().is_some(), x86::detected());
        eprintln!("kernel on this CPU: {:?}", kernel().map(|k| k.name));
    }

    #[test]
    fn the_kernel_copies_and_hashes_as_copy_then_crc32fast() {
        let src = bytes(9000, 0x1234_5678);
        for len in [
            0, 1, 63, 255, 256, 257, 511, 512, 1000, 1024, 1027, 4096, 4099, 8192,
        ] {
            for at in [0, 1, 7, 64] {
                for init in [0u32, !0, 0xdead_beef] {
                    let s = &src[at..at + len];
                    let mut d = vec![0xa5u8; len + 3];
                    let got = x86::copy(&mut d[1..1 + len], s, init);
                    assert_eq!(
                        got,
                        continue_crc(init, s),
                        "len {len} at {at} init {init:#x}"
                    );
                    assert_eq!(&d[1..1 + len], s);
                    assert_eq!((d[0], d[len + 1], d[len + 2]), (0xa5, 0xa5, 0xa5));
                }
            }
        }
    }

    #[test]
    fn the_kernel_multiplies_as_the_bit_serial_definition() {
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
    fn unequal_lengths_copy_the_shorter_without_panicking() {
        let src = bytes(600, 5);
        let mut d = vec![0u8; 300];
        assert_eq!(x86::copy(&mut d, &src, !0), continue_crc(!0, &src[..300]));
        let mut d = vec![0u8; 700];
        assert_eq!(x86::copy(&mut d, &src, !0), continue_crc(!0, &src));
    }
}

//! ICRCs whose payload part is computed while the payload is copied into the frame.
//!
//! A sender copies each packet's payload from the application's memory into the frame and
//! then ran the ICRC over the frame a second time. Where the CPU has 256- or 512-bit
//! carry-less multiplication (VPCLMULQDQ with AVX2 or AVX-512), the bytes can be folded
//! into a CRC as they are copied: natively a 1 KiB payload into a cold frame took 64 ns
//! copied and folded in one pass against 92 ns copied then hashed (4 KiB: 172 against
//! 216; AVX-512). The payload comes after the headers, but the transport writes the IP and
//! UDP headers last, so the payload's CRC is taken on its own, from a zero register, and
//! joined to the headers' afterwards: the CRC is linear, so the register after headers and
//! payload is the headers' register carried past the payload (a multiplication by
//! x^(8·len) mod P) XOR the payload's own register ([`fill_folded`]).
//!
//! The kernel needs `std::arch` behind a run-time CPU check, which needs `unsafe`, so it
//! lives in the `ferroce` crate's link layer and is [`install`]ed here as two function
//! pointers; this crate stays free of `unsafe`. Nothing is installed on a CPU without
//! the instructions, and then every ICRC is computed as before.

use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::icrc::{self, Engine, HeadBlock};
use crate::packet::ICRC_LEN;
use crate::{Error, Layer, Result};

/// A copy that folds what it copies into a CRC-32, and the multiplication that joins CRCs.
#[derive(Debug, Clone, Copy)]
pub struct Fold {
    /// Copies `src` into `dst` (the shorter length of the two) and returns the CRC-32
    /// (IEEE) of the copied bytes continuing `crc`, a finished CRC of what came before
    /// (`0xffff_ffff` to start from a zero register), as `crc32fast::Hasher` continues.
    pub copy: fn(dst: &mut [u8], src: &[u8], crc: u32) -> u32,
    /// `a · b mod P` exactly as [`icrc::mul_mod`] computes it.
    pub mul: fn(a: u32, b: u32) -> u32,
    /// The CRC-32 register, from a zero register, of a [`HeadBlock`]'s 64 bytes (no
    /// complement either way: `!continue_crc(!0, &head.to_bytes())`). [`fill_folded`]
    /// hashes a packet's headers this way: crc32fast takes its table for inputs this
    /// short, with a set-up each call, 11 ns for a 56-byte head on an AVX-512 Xeon.
    pub block: fn(head: &HeadBlock) -> u32,
    /// What the kernel is, for `--stats` and `FERROCE_COPY_FOLD` (e.g. `avx512-vpclmulqdq`).
    pub name: &'static str,
}

impl Fold {
    /// Copy, then CRC with crc32fast, and the bit-serial multiplication: the definition
    /// every kernel is tested against, and what a test installs where the CPU has none.
    pub const REFERENCE: Fold = Fold {
        copy: reference_copy,
        mul: icrc::mul_mod,
        block: reference_block,
        name: "reference",
    };
}

/// The CRC-32 of `bytes` continuing `crc` (a finished CRC, as [`Fold::copy`] takes it).
///
/// No bytes is `crc` itself, without crc32fast's set-up (its CPU check and state, about
/// 16 ns a call on an AVX-512 Xeon): a folded packet of 1 KiB asks twice for nothing,
/// once for its pad and once for the tail after the fold's last whole step.
pub fn continue_crc(crc: u32, bytes: &[u8]) -> u32 {
    if bytes.is_empty() {
        return crc;
    }
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

fn reference_copy(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
    continue_crc(crc, &dst[..n])
}

fn reference_block(head: &HeadBlock) -> u32 {
    !continue_crc(!0, &head.to_bytes())
}

static FOLD: OnceLock<Fold> = OnceLock::new();
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Installs the process's kernel; the first call wins (every kernel computes the same
/// CRCs, so which one is a matter of speed). Returns whether this call installed it.
pub fn install(fold: Fold) -> bool {
    FOLD.set(fold).is_ok()
}

/// Turns folding off or back on for this process (`FERROCE_COPY_FOLD=0`, comparisons).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// The kernel to fold payloads with: installed, enabled, and the ICRC engine is the SIMD
/// one (where the table engine wins, under an emulator, the kernel's instructions are
/// slow too).
pub fn active() -> Option<&'static Fold> {
    if !ENABLED.load(Ordering::Relaxed) || icrc::engine() != Engine::Simd {
        return None;
    }
    FOLD.get()
}

/// The kernel to fold a payload of `len` bytes with: [`active`], for payloads of at
/// least [`MIN_PAYLOAD`] bytes.
pub fn for_payload(len: usize) -> Option<&'static Fold> {
    active().filter(|_| len >= MIN_PAYLOAD)
}

/// The installed kernel, enabled or not (for `--stats`).
pub fn installed() -> Option<&'static Fold> {
    FOLD.get()
}

/// Payloads shorter than this are copied and hashed as before: the join costs more than
/// folding saves on a few dozen bytes.
pub const MIN_PAYLOAD: usize = 256;

/// The CRC of a packet's payload and pad, folded while the payload was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadCrc {
    /// Where the payload starts, counted from the start of the bytes the caller names
    /// (the IB packet for the transport, the IP packet for [`fill_folded`]).
    pub start: usize,
    /// The CRC-32 register after the payload and pad, started from zero (the complement
    /// of what [`Fold::copy`] returns when started from `0xffff_ffff`).
    pub register: u32,
}

impl PayloadCrc {
    /// Continues `folded` (what [`Fold::copy`] returned for the whole payload, started from
    /// `0xffff_ffff`) over `pad` zero bytes.
    pub fn new(start: usize, folded: u32, pad: usize) -> PayloadCrc {
        PayloadCrc {
            start,
            register: !continue_crc(folded, &[0u8; 3][..pad.min(3)]),
        }
    }
}

/// The last few x^(8·len) mod P operators, by length: packets of a stream share one or two
/// lengths, and an operator takes about 30 multiplications to compute.
#[derive(Debug, Default, Clone)]
pub struct ShiftOps {
    /// (length, operator); an empty slot matches no length, 0 included.
    ops: [Option<(usize, u32)>; 4],
    next: usize,
}

impl ShiftOps {
    fn get(&mut self, len: usize) -> u32 {
        if let Some((_, op)) = self.ops.iter().flatten().find(|(l, _)| *l == len) {
            return *op;
        }
        let op = icrc::shift_op(len);
        self.ops[self.next] = Some((len, op));
        self.next = (self.next + 1) % self.ops.len();
        op
    }
}

/// Writes the ICRC trailer of `ip_packet` (IP header through ICRC) whose payload's CRC was
/// folded while copying: the headers before `payload.start` are hashed here (masked as
/// [`icrc::compute`] masks them) and joined to the payload's register with `fold.mul`.
///
/// Headers that fit [`icrc::HEAD_BLOCK`] bytes (every IPv4 data packet, IPv6 ones up to an
/// AETH) are hashed as one zero-padded block by `fold.block`; the padding's shift is
/// taken out of the shift past the payload, so no multiplication is added.
pub fn fill_folded(
    ip_packet: &mut [u8],
    payload: PayloadCrc,
    fold: &Fold,
    ops: &mut ShiftOps,
) -> Result<()> {
    let n = ip_packet.len();
    let body = n
        .checked_sub(ICRC_LEN)
        .ok_or(Error::Truncated(Layer::Icrc))?;
    if payload.start > body {
        return Err(Error::Truncated(Layer::Icrc));
    }
    let after = body - payload.start;
    let pad = icrc::HEAD_BLOCK.saturating_sub(payload.start);
    let block = icrc::head_block(ip_packet, payload.start).filter(|_| after >= pad);
    let carried = match block {
        Some(h) => (fold.mul)((fold.block)(&h), ops.get(after - pad)),
        None => {
            let head = icrc::compute(&ip_packet[..payload.start])?;
            (fold.mul)(!head, ops.get(after))
        }
    };
    let icrc = !(carried ^ payload.register);
    ip_packet[body..].copy_from_slice(&icrc.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    /// An IPv4 RoCE datagram of `payload` bytes after a 56-byte head (IP, UDP, BTH,
    /// RETH), its pad and ICRC room, built the way the transport builds one: payload
    /// folded while copied, headers written afterwards.
    fn folded(payload: &[u8], head: &[u8], fold: &Fold) -> Vec<u8> {
        let pad = (4 - payload.len() % 4) % 4;
        let mut p = vec![0u8; head.len() + payload.len() + pad + ICRC_LEN];
        let (h, rest) = p.split_at_mut(head.len());
        let c = (fold.copy)(&mut rest[..payload.len()], payload, !0);
        h.copy_from_slice(head);
        let pc = PayloadCrc::new(head.len(), c, pad);
        fill_folded(&mut p, pc, fold, &mut ShiftOps::default()).unwrap();
        p
    }

    proptest::proptest! {
        /// A folded ICRC is the ICRC, whatever the payload's length and the head's bytes.
        #[test]
        fn a_folded_icrc_is_the_icrc(len in 0usize..5000, seed in proptest::num::u32::ANY) {
            let mut head = bytes(56, seed);
            head[0] = 0x45;
            let payload = bytes(len, seed.rotate_left(7));
            let p = folded(&payload, &head, &Fold::REFERENCE);
            proptest::prop_assert!(icrc::verify(&p).is_ok());
            let mut q = p.clone();
            icrc::fill(&mut q).unwrap();
            proptest::prop_assert_eq!(p, q);
        }
    }

    proptest::proptest! {
        /// Heads of every length, IPv4 with and without options and IPv6, in one block
        /// where they fit and hashed whole where not: the ICRC is the ICRC.
        #[test]
        fn every_head_gives_the_icrc(first in proptest::sample::select(vec![0x45u8, 0x46, 0x4f, 0x60]),
                                     extra in 0usize..40, len in 0usize..600,
                                     seed in proptest::num::u32::ANY) {
            let ip_len = if first >> 4 == 6 { 40 } else { usize::from(first & 0xf) * 4 };
            let mut head = bytes(ip_len + 20 + extra, seed);
            head[0] = first;
            let payload = bytes(len, seed.rotate_left(11));
            let p = folded(&payload, &head, &Fold::REFERENCE);
            let mut q = p.clone();
            icrc::fill(&mut q).unwrap();
            proptest::prop_assert_eq!(p, q);
        }
    }

    #[test]
    fn a_head_block_is_the_masked_head_from_the_lrh_register() {
        let mut head = bytes(56, 7);
        head[0] = 0x45;
        let mut packet = head.clone();
        packet.extend_from_slice(&bytes(100, 9));
        let h = icrc::head_block(&packet, 56).unwrap();
        // Its register is that of the head, from the LRH's, carried past 8 zero bytes.
        let mut masked = head.clone();
        for i in [1, 8, 10, 11, 26, 27, 32] {
            masked[i] = 0xff;
        }
        assert_eq!(
            reference_block(&h),
            !continue_crc(continue_crc(icrc::LRH_CRC, &masked), &[0; 8])
        );
        assert!(icrc::head_block(&packet, 65).is_none(), "too long");
        assert!(icrc::head_block(&packet, 39).is_none(), "no whole BTH");
        assert!(
            icrc::head_block(&packet[..63], 56).is_none(),
            "under a block"
        );
        packet[0] = 0x75;
        assert!(icrc::head_block(&packet, 56).is_none(), "no IP version");
        packet[0] = 0x44;
        assert!(icrc::head_block(&packet, 56).is_none(), "IHL under 5");
    }

    #[test]
    fn continuing_over_nothing_is_what_crc32fast_gives() {
        for crc in [0, 1, 0xffff_ffff, 0x2144_df1c, 0x8000_0000] {
            let h = crc32fast::Hasher::new_with_initial(crc);
            assert_eq!(continue_crc(crc, &[]), h.finalize());
            assert_eq!(continue_crc(crc, &[7]), {
                let mut h = crc32fast::Hasher::new_with_initial(crc);
                h.update(&[7]);
                h.finalize()
            });
        }
    }

    #[test]
    fn an_empty_payload_is_joined_by_the_identity() {
        // x^0 mod P is 1: a fresh cache must compute it, not take an empty slot for it.
        assert_eq!(ShiftOps::default().get(0), icrc::shift_op(0));
        let mut head = bytes(56, 0);
        head[0] = 0x45;
        let p = folded(&[], &head, &Fold::REFERENCE);
        assert!(icrc::verify(&p).is_ok());
    }

    #[test]
    fn a_wrong_payload_register_gives_a_wrong_icrc() {
        // The join really uses the payload's register: one flipped bit fails the check.
        let mut head = bytes(56, 3);
        head[0] = 0x45;
        let payload = bytes(1024, 9);
        let mut p = vec![0u8; 56 + 1024 + ICRC_LEN];
        p[..56].copy_from_slice(&head);
        let c = (Fold::REFERENCE.copy)(&mut p[56..56 + 1024], &payload, !0);
        let mut pc = PayloadCrc::new(56, c, 0);
        pc.register ^= 1;
        fill_folded(&mut p, pc, &Fold::REFERENCE, &mut ShiftOps::default()).unwrap();
        assert!(icrc::verify(&p).is_err());
    }

    #[test]
    fn bad_starts_are_errors_not_panics() {
        let mut p = vec![0x45u8; 100];
        let pc = PayloadCrc::new(97, 0, 0);
        assert!(fill_folded(&mut p, pc, &Fold::REFERENCE, &mut ShiftOps::default()).is_err());
        assert!(fill_folded(&mut p[..3], pc, &Fold::REFERENCE, &mut ShiftOps::default()).is_err());
    }

    #[test]
    fn shift_ops_keep_the_last_lengths() {
        let mut ops = ShiftOps::default();
        for len in [1024, 4096, 1024, 904, 1024, 4096, 17, 33, 1024] {
            assert_eq!(ops.get(len), icrc::shift_op(len));
        }
    }
}

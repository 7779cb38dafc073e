//! The invariant CRC (ICRC) of RoCE v2, computed exactly as Linux rxe does.
//!
//! CRC-32 (IEEE) over eight 0xff bytes (the masked LRH of InfiniBand), then the IP header,
//! UDP header, BTH and the rest of the packet up to the ICRC, with the fields that routers
//! may change masked to all ones: IPv4 TOS, TTL and header checksum; IPv6 traffic class,
//! flow label and hop limit; the UDP checksum; BTH byte 4 (FECN/BECN/reserved). The result
//! is stored little-endian in the last four bytes of the UDP payload.

use core::sync::atomic::{AtomicU8, Ordering};

use crate::packet::ICRC_LEN;
use crate::{Error, Layer, Result};

/// The CRC-32 routine that computes ICRCs. Both give the same results; which is faster
/// depends on the CPU: natively crc32fast's carry-less multiplication (PCLMULQDQ) runs
/// 20 times faster than a table, but under an emulator that translates those
/// instructions into helper calls (qemu TCG, as in the project's rxe VM) a table CRC runs
/// 3 times faster at 1 KiB and 4 times at 64 bytes, and a whole 1 KiB packet's ICRC 1.6
/// times. The library measures both when a device opens and picks one
/// (`ferroce::verbs::Context::icrc_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// crc32fast: carry-less multiplication where the CPU has it, else its own table.
    Simd,
    /// The `crc` crate's slice-by-16 table.
    Table,
}

impl Engine {
    /// Lower-case name, as `FERROCE_ICRC` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Simd => "simd",
            Engine::Table => "table",
        }
    }
}

/// The engine [`compute`], [`verify`], [`fill`] and [`HeadPatch`] use: 0 Simd, 1 Table.
static ENGINE: AtomicU8 = AtomicU8::new(0);

/// Chooses the engine for this process (the default is [`Engine::Simd`]).
pub fn set_engine(engine: Engine) {
    ENGINE.store(engine as u8, Ordering::Relaxed);
}

/// The engine in use.
pub fn engine() -> Engine {
    match ENGINE.load(Ordering::Relaxed) {
        0 => Engine::Simd,
        _ => Engine::Table,
    }
}

/// CRC-32 (IEEE) with the slice-by-16 table, built at compile time.
static TABLE: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// The CRC-32 of `init`'s bytes followed by `a` then `b`, where `init` is the CRC-32 of
/// the bytes before (0 for none).
pub(crate) fn crc_continue(engine: Engine, init: u32, a: &[u8], b: &[u8]) -> u32 {
    match engine {
        Engine::Simd => {
            let mut h = crc32fast::Hasher::new_with_initial(init);
            h.update(a);
            h.update(b);
            h.finalize()
        }
        Engine::Table => {
            // The crate's register is the bit-reversed complement of a finished CRC.
            let mut d = TABLE.digest_with_initial((!init).reverse_bits());
            d.update(a);
            d.update(b);
            d.finalize()
        }
    }
}

/// Bytes of IP + UDP + BTH that may need masking: at most a 60-byte IPv4 header + 8 + 12.
const MAX_MASKED: usize = 60 + 8 + 12;

/// The CRC-32 of the eight 0xff bytes that stand for the masked LRH: the state every ICRC
/// starts from (`crc32fast::hash(&[0xff; 8])`, checked by a test).
pub(crate) const LRH_CRC: u32 = 0x2144_df1c;

/// The CRC-32 of [`IPV4_UDP_HEAD`] zero bytes: the affine part [`HeadPatch`] cancels out of
/// every change's CRC (`crc32fast::hash(&[0; 28])`, checked by a test), computed once
/// instead of once per packet.
const ZERO_HEAD_CRC: u32 = 0x8070_77e9;

/// Index of the IPv6 layout in [`MASKS`]; IPv4 with header length `ihl` words is `ihl - 5`.
const IPV6: usize = 11;

/// For each IP header layout, the bits of the first [`MAX_MASKED`] bytes that the ICRC sets
/// to one (OR-ed in, so whole 16-byte blocks can be masked at once).
static MASKS: [[u8; MAX_MASKED]; 12] = masks();

const fn masks() -> [[u8; MAX_MASKED]; 12] {
    let mut t = [[0u8; MAX_MASKED]; 12];
    let mut k = 0;
    while k < t.len() {
        let m = &mut t[k];
        let ip_len = if k == IPV6 {
            m[0] = 0x0f; // traffic class (high nibble) ...
            m[1] = 0xff; // ... traffic class (low nibble) and flow label
            m[2] = 0xff;
            m[3] = 0xff;
            m[7] = 0xff; // hop limit
            40
        } else {
            m[1] = 0xff; // TOS (DSCP + ECN)
            m[8] = 0xff; // TTL
            m[10] = 0xff; // header checksum
            m[11] = 0xff;
            (k + 5) * 4
        };
        m[ip_len + 6] = 0xff; // UDP checksum
        m[ip_len + 7] = 0xff;
        m[ip_len + 8 + crate::bth::ICRC_MASKED_BYTE] = 0xff;
        k += 1;
    }
    t
}

/// Computes the ICRC of `ip_packet`: an IPv4 or IPv6 packet from its header to the end of
/// the IB pad bytes, without the ICRC trailer.
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    compute_with(engine(), ip_packet)
}

/// The IP header's length and its row of [`MASKS`], from the header's first byte.
fn layout(first: u8) -> Result<(usize, usize)> {
    match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0xf);
            if ihl < 5 {
                return Err(Error::BadIpHeader);
            }
            Ok((ihl * 4, ihl - 5))
        }
        6 => Ok((40, IPV6)),
        _ => Err(Error::BadIpHeader),
    }
}

/// [`compute`] with the given engine (to compare engines, or to test one).
pub fn compute_with(engine: Engine, ip_packet: &[u8]) -> Result<u32> {
    let first = *ip_packet.first().ok_or(Error::Truncated(Layer::Ip))?;
    let (ip_len, layout) = layout(first)?;
    let masked_len = ip_len + 8 + 12;
    if ip_packet.len() < masked_len {
        return Err(Error::Truncated(Layer::Bth));
    }
    // Mask a copy of the leading bytes, then hash the copy and the rest in place: two hasher
    // calls, the first ending on a 16-byte block. The copy is written in whole 16-byte blocks
    // because the hasher reads 16-byte blocks right away, and a block written byte by byte
    // just before cannot be forwarded from the store buffer: that stall cost as much as
    // hashing a kilobyte.
    let head = masked_len.next_multiple_of(16).min(ip_packet.len());
    let mask = &MASKS[layout];
    let mut m = [0u8; MAX_MASKED];
    let blocks = m[..head]
        .chunks_exact_mut(16)
        .zip(ip_packet.chunks_exact(16).zip(mask.chunks_exact(16)));
    for (dst, (src, bits)) in blocks {
        let mut b = [0u8; 16];
        for (b, (s, k)) in b.iter_mut().zip(src.iter().zip(bits)) {
            *b = s | k;
        }
        dst.copy_from_slice(&b);
    }
    for i in head / 16 * 16..head {
        m[i] = ip_packet[i] | mask[i];
    }

    Ok(crc_continue(
        engine,
        LRH_CRC,
        &m[..head],
        &ip_packet[head..],
    ))
}

/// Bytes of a [`HeadBlock`]: an IPv4 header without options, UDP, BTH and up to 16 bytes
/// of extension headers (a RETH), or IPv6 with up to 4 (an AETH, ImmDt).
pub const HEAD_BLOCK: usize = 64;

/// The headers in front of a payload as one zero-padded block: the first `len` bytes of
/// `bytes`, ORed with `mask` (the bits [`compute`] masks), with `init` XORed into their
/// first four, then zeros up to [`HEAD_BLOCK`] bytes ([`HeadBlock::to_bytes`]). The CRC
/// register of that block from a zero register is the headers' register, from the one the
/// ICRC starts with (after the masked LRH's eight 0xff bytes), carried past the zeros
/// (`HEAD_BLOCK - len` bytes): a caller that carries it on past a payload counts those
/// bytes in the payload's shift ([`crate::icrc_fold::fill_folded`]).
///
/// The parts are handed over rather than the block because building it in memory (a copy
/// of a run-time length, a byte loop, then vector loads of what was just stored) took 11
/// ns, three times the CRC: a kernel builds it in registers.
#[derive(Debug, Clone, Copy)]
pub struct HeadBlock<'a> {
    /// The packet's first 64 bytes: the headers, then the start of the payload.
    pub bytes: &'a [u8; HEAD_BLOCK],
    /// The bits the ICRC masks in this IP version's headers.
    pub mask: &'static [u8; HEAD_BLOCK],
    /// Bytes of headers (at most [`HEAD_BLOCK`]).
    pub len: usize,
    /// The CRC register the headers start from, XORed into their first four bytes: for
    /// an ICRC, the register after the masked LRH's eight 0xff bytes (the complement of
    /// their finished CRC).
    pub init: u32,
}

impl HeadBlock<'_> {
    /// The block itself (the definition the kernels are tested against).
    pub fn to_bytes(&self) -> [u8; HEAD_BLOCK] {
        let mut b = [0u8; HEAD_BLOCK];
        for (i, (b, (w, m))) in b
            .iter_mut()
            .zip(self.bytes.iter().zip(self.mask))
            .enumerate()
        {
            if i < self.len {
                *b = w | m;
            }
        }
        for (b, i) in b.iter_mut().zip(self.init.to_le_bytes()) {
            *b ^= i;
        }
        b
    }
}

/// The headers of `ip_packet` before its payload, which starts at `head_len`, as a
/// [`HeadBlock`]. `None` where the headers do not fit, are not IPv4 or IPv6 with a whole
/// BTH, or `ip_packet` is shorter than the block.
pub fn head_block(ip_packet: &[u8], head_len: usize) -> Option<HeadBlock<'_>> {
    let bytes: &[u8; HEAD_BLOCK] = ip_packet.get(..HEAD_BLOCK)?.try_into().ok()?;
    let (ip_len, layout) = layout(bytes[0]).ok()?;
    if head_len > HEAD_BLOCK || head_len < ip_len + 8 + 12 {
        return None;
    }
    // Mask bits lie within the IP, UDP and BTH headers, all before `head_len`.
    let mask = MASKS[layout][..HEAD_BLOCK].try_into().ok()?;
    Some(HeadBlock {
        bytes,
        mask,
        len: head_len,
        init: !LRH_CRC,
    })
}

/// Verifies the ICRC trailer at the end of `ip_packet` (IP header through ICRC).
pub fn verify(ip_packet: &[u8]) -> Result<()> {
    let n = ip_packet.len();
    if n < ICRC_LEN {
        return Err(Error::Truncated(Layer::Icrc));
    }
    let computed = compute(&ip_packet[..n - ICRC_LEN])?;
    let t = &ip_packet[n - ICRC_LEN..];
    let found = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    if computed == found {
        Ok(())
    } else {
        Err(Error::IcrcMismatch { computed, found })
    }
}

/// Computes and writes the ICRC trailer of `ip_packet` (IP header through ICRC).
pub fn fill(ip_packet: &mut [u8]) -> Result<()> {
    let n = ip_packet.len();
    if n < ICRC_LEN {
        return Err(Error::Truncated(Layer::Icrc));
    }
    let icrc = compute(&ip_packet[..n - ICRC_LEN])?;
    ip_packet[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    Ok(())
}

/// Bytes at the front of an IPv4 datagram without options that [`HeadPatch`] may change:
/// the IP and UDP headers.
pub const IPV4_UDP_HEAD: usize = 20 + 8;

/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xedb8_8320;

/// `a · b mod P` for polynomials over GF(2) in the CRC's reflected order (bit 31 is
/// x^0): what a CRC state becomes after a run of zero bytes is such a product.
pub fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    for i in 0..32 {
        if a & (0x8000_0000 >> i) != 0 {
            p ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(8·bytes) mod P: the operator that carries a CRC state past `bytes` zero bytes.
pub(crate) fn shift_op(bytes: usize) -> u32 {
    let mut result = 0x8000_0000; // x^0
    let mut base = 0x0080_0000; // x^8
    let mut n = bytes;
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod(result, base);
        }
        base = mul_mod(base, base);
        n >>= 1;
    }
    result
}

/// Changes the IP and UDP headers of IPv4 datagrams (no options) of one length that carry
/// a valid ICRC, and updates the ICRC to match without reading the rest of the datagram.
///
/// Why: a sender whose packets the kernel will give other headers (a UDP socket's source
/// port, identifications counting from 0) must send the ICRCs of those headers. The CRC
/// is linear: the new ICRC is the old one plus the change's own CRC carried past the
/// unchanged bytes after it, one multiplication by an operator that depends only on the
/// length, computed once for all datagrams of that length. A second pass over the payload
/// would cost as much as the first ICRC (a third of the CPU in an emulated VM).
#[derive(Debug, Clone, Copy)]
pub struct HeadPatch {
    /// Length of the datagrams, ICRC included.
    len: usize,
    /// Carries a CRC state past the bytes after the headers.
    op: u32,
}

impl HeadPatch {
    /// A patch for IPv4 datagrams of `len` bytes (IP header through ICRC).
    pub fn new(len: usize) -> Result<HeadPatch> {
        if len < IPV4_UDP_HEAD + 12 + ICRC_LEN {
            return Err(Error::Truncated(Layer::Bth));
        }
        Ok(HeadPatch {
            len,
            op: shift_op(len - ICRC_LEN - IPV4_UDP_HEAD),
        })
    }

    /// The length the patch is for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the patch is for empty datagrams (never: `new` refuses them).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lets `edit` change the first [`IPV4_UDP_HEAD`] bytes of `ip_packet` (an IPv4
    /// datagram without options, of the patch's length, whose ICRC is right) and rewrites
    /// the ICRC for the result. Fields the ICRC masks may change freely.
    pub fn apply(&self, ip_packet: &mut [u8], edit: impl FnOnce(&mut [u8])) -> Result<()> {
        if ip_packet.len() != self.len {
            return Err(Error::BadIpLength);
        }
        if ip_packet[0] != 0x45 {
            return Err(Error::BadIpHeader);
        }
        let mask = &MASKS[0][..IPV4_UDP_HEAD];
        let mut before = [0u8; IPV4_UDP_HEAD];
        before.copy_from_slice(&ip_packet[..IPV4_UDP_HEAD]);
        edit(&mut ip_packet[..IPV4_UDP_HEAD]);
        if ip_packet[0] != 0x45 {
            return Err(Error::BadIpHeader);
        }
        let mut delta = [0u8; IPV4_UDP_HEAD];
        for (d, ((b, a), m)) in delta
            .iter_mut()
            .zip(before.iter().zip(&ip_packet[..IPV4_UDP_HEAD]).zip(mask))
        {
            *d = (b | m) ^ (a | m);
        }
        // The change's CRC from a zero state (the affine parts of the two hashes cancel).
        let linear = crc_continue(engine(), 0, &delta, &[]) ^ ZERO_HEAD_CRC;
        let change = mul_mod(self.op, linear);
        let n = self.len - ICRC_LEN;
        let t = &mut ip_packet[n..];
        let old = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        t.copy_from_slice(&(old ^ change).to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_patch_gives_the_icrc_of_a_full_recomputation() {
        // The engine is global to the process; every engine gives the same ICRCs, so a
        // test running beside this one is not disturbed by the switch.
        for e in [Engine::Table, Engine::Simd] {
            set_engine(e);
            assert_eq!(engine(), e);
            head_patch_roundtrips();
        }
    }

    fn head_patch_roundtrips() {
        let mut x = 0x9e37_79b9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for len in [44usize, 45, 60, 61, 100, 1024 + 44, 4096 + 60, 9000 - 14] {
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            p[0] = 0x45;
            fill(&mut p).unwrap();
            let patch = HeadPatch::new(len).unwrap();
            for _ in 0..4 {
                let (id, port, tos, ttl) =
                    (next() as u16, next() as u16, next() as u8, next() as u8);
                patch
                    .apply(&mut p, |h| {
                        h[1] = tos;
                        h[4..6].copy_from_slice(&id.to_be_bytes());
                        h[6] = 0x40;
                        h[8] = ttl;
                        h[20..22].copy_from_slice(&port.to_be_bytes());
                    })
                    .unwrap();
                verify(&p).unwrap_or_else(|e| panic!("len {len}: {e}"));
                let mut q = p.clone();
                fill(&mut q).unwrap();
                assert_eq!(p, q);
            }
        }
        let mut p = vec![0x45; 100];
        let patch = HeadPatch::new(100).unwrap();
        assert!(patch.apply(&mut p[..99], |_| ()).is_err());
        assert!(patch.apply(&mut p, |h| h[0] = 0x46).is_err());
        assert!(HeadPatch::new(20).is_err());
    }

    /// The ICRC as the RoCE v2 annex states it, with no shortcut: mask a copy of the whole
    /// packet, prefix eight 0xff bytes, CRC-32 it.
    fn plain_icrc(ip_packet: &[u8]) -> u32 {
        let mut m = ip_packet.to_vec();
        let ip_len = if m[0] >> 4 == 4 {
            for i in [1, 8, 10, 11] {
                m[i] = 0xff;
            }
            usize::from(m[0] & 0xf) * 4
        } else {
            m[0] |= 0x0f;
            for i in [1, 2, 3, 7] {
                m[i] = 0xff;
            }
            40
        };
        for i in [ip_len + 6, ip_len + 7, ip_len + 8 + 4] {
            m[i] = 0xff;
        }
        let mut all = vec![0xff; 8];
        all.extend_from_slice(&m);
        crc32fast::hash(&all)
    }

    proptest::proptest! {
        /// Both engines give every ICRC alike, whatever the packet and the split point
        /// of the masked head.
        #[test]
        fn engines_agree(first in proptest::sample::select(vec![0x45u8, 0x46, 0x4f, 0x60]),
                         bytes in proptest::collection::vec(proptest::num::u8::ANY, 100..1200)) {
            let mut p = bytes;
            p[0] = first;
            let simd = compute_with(Engine::Simd, &p);
            proptest::prop_assert_eq!(simd, compute_with(Engine::Table, &p));
            proptest::prop_assert_eq!(simd, Ok(plain_icrc(&p)));
            for init in [0, LRH_CRC, 0xffff_ffff] {
                proptest::prop_assert_eq!(
                    crc_continue(Engine::Simd, init, &p[..37], &p[37..]),
                    crc_continue(Engine::Table, init, &p[..37], &p[37..])
                );
            }
        }
    }

    #[test]
    fn lrh_crc_is_the_crc_of_eight_ff_bytes() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_CRC);
    }

    #[test]
    fn zero_head_crc_is_the_crc_of_the_zero_headers() {
        assert_eq!(crc32fast::hash(&[0; IPV4_UDP_HEAD]), ZERO_HEAD_CRC);
    }

    #[test]
    fn compute_matches_the_plain_definition_at_every_split() {
        // Every IPv4 header length and IPv6, at lengths around the stack-copy boundary and
        // the 16-byte blocks of the hasher.
        let mut x = 0x1234_5678u32;
        let bytes: Vec<u8> = (0..600)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let mut firsts: Vec<u8> = (5..=15).map(|ihl| 0x40 | ihl).collect();
        firsts.push(0x6a);
        for first in firsts {
            let ip_len = if first >> 4 == 4 {
                usize::from(first & 0xf) * 4
            } else {
                40
            };
            for len in (ip_len + 20..=600).filter(|n| *n < 300 || n % 7 == 0) {
                let mut p = bytes[..len].to_vec();
                p[0] = first;
                assert_eq!(
                    compute(&p),
                    Ok(plain_icrc(&p)),
                    "first byte {first:#x} len {len}"
                );
            }
            assert_eq!(
                compute(
                    &bytes[..ip_len + 19]
                        .iter()
                        .enumerate()
                        .map(|(i, &b)| if i == 0 { first } else { b })
                        .collect::<Vec<u8>>()
                ),
                Err(Error::Truncated(Layer::Bth))
            );
        }
    }
}

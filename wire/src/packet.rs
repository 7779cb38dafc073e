//! The IB transport packet carried in a RoCE v2 UDP datagram: BTH, extension headers,
//! payload, pad and the 4-byte ICRC.
//!
//! Which extension headers are present comes from the opcode table alone.

use crate::opcode::HeaderSet;
use crate::{aeth, atomic_ack_eth, atomic_eth, bth, cnp, deth, ieth, immdt, reth};
use crate::{Error, Layer, Opcode, Result};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Pad bytes that bring a payload of `len` bytes to a multiple of 4.
pub const fn pad_for(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

/// A checked view of an IB transport packet (BTH through ICRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without validation; accessors may panic on a malformed one.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check`](Self::check).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Validates everything the accessors rely on: version, opcode, header lengths, pad.
    pub fn check(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let bth = bth::Header::new_checked(b)?;
        if bth.tver() != 0 {
            return Err(Error::BadVersion(bth.tver()));
        }
        let op = Opcode::new(bth.opcode_raw()).ok_or(Error::UnknownOpcode(bth.opcode_raw()))?;
        let hdr = bth::Header::<&[u8]>::LEN + op.headers().len();
        if b.len() < hdr {
            return Err(Error::Truncated(Layer::Extension));
        }
        if b.len() < hdr + ICRC_LEN {
            return Err(Error::Truncated(Layer::Icrc));
        }
        let body = b.len() - hdr - ICRC_LEN;
        // InfiniBand packets are whole 4-byte words, and so is every header: payload plus
        // pad must be too, which makes the pad count the one `Repr::emit` derives.
        if usize::from(bth.pad_count()) > body || !body.is_multiple_of(4) {
            return Err(Error::BadPad);
        }
        if !op.has_payload() && body != 0 {
            return Err(Error::UnexpectedPayload);
        }
        Ok(())
    }

    /// The whole buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The base transport header.
    pub fn bth(&self) -> bth::Header<&[u8]> {
        bth::Header::new_unchecked(&self.buffer.as_ref()[..12])
    }

    /// The opcode (validated by `check`).
    pub fn opcode(&self) -> Opcode {
        Opcode::new(self.bth().opcode_raw()).expect("checked packet has a known opcode")
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        12 + self.opcode().headers().len()
    }

    fn ext(&self, h: HeaderSet) -> Option<&[u8]> {
        let off = 12 + self.opcode().headers().offset_of(h)?;
        Some(&self.buffer.as_ref()[off..])
    }

    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<reth::Header<&[u8]>> {
        self.ext(HeaderSet::RETH).map(reth::Header::new_unchecked)
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<aeth::Header<&[u8]>> {
        self.ext(HeaderSet::AETH).map(aeth::Header::new_unchecked)
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<deth::Header<&[u8]>> {
        self.ext(HeaderSet::DETH).map(deth::Header::new_unchecked)
    }
    /// The ImmDt, if the opcode carries one.
    pub fn immdt(&self) -> Option<immdt::Header<&[u8]>> {
        self.ext(HeaderSet::IMMDT).map(immdt::Header::new_unchecked)
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<ieth::Header<&[u8]>> {
        self.ext(HeaderSet::IETH).map(ieth::Header::new_unchecked)
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<atomic_eth::Header<&[u8]>> {
        self.ext(HeaderSet::ATOMIC_ETH)
            .map(atomic_eth::Header::new_unchecked)
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<atomic_ack_eth::Header<&[u8]>> {
        self.ext(HeaderSet::ATOMIC_ACK_ETH)
            .map(atomic_ack_eth::Header::new_unchecked)
    }
    /// The CNP's reserved bytes, for a CNP.
    pub fn cnp(&self) -> Option<cnp::Header<&[u8]>> {
        self.ext(HeaderSet::CNP).map(cnp::Header::new_unchecked)
    }

    /// Where the payload lies in the buffer.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        let end = self.buffer.as_ref().len() - ICRC_LEN - usize::from(self.bth().pad_count());
        self.header_len()..end
    }

    /// The payload, without pad and ICRC.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The ICRC trailer as rxe stores it (little-endian).
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let t = &b[b.len() - ICRC_LEN..];
        u32::from_le_bytes([t[0], t[1], t[2], t[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Mutable payload (for scatter into a packet buffer).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        &mut self.buffer.as_mut()[r]
    }
    /// Writes the ICRC trailer.
    pub fn set_icrc(&mut self, icrc: u32) {
        let b = self.buffer.as_mut();
        let n = b.len();
        b[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    }
}

/// The extension headers of one packet; exactly those its opcode carries are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtRepr {
    /// Datagram ETH (UD).
    pub deth: Option<deth::Repr>,
    /// RDMA ETH (first or only WRITE, READ request).
    pub reth: Option<reth::Repr>,
    /// Atomic ETH (atomic requests).
    pub atomic_eth: Option<atomic_eth::Repr>,
    /// ACK ETH (acknowledgements, read responses).
    pub aeth: Option<aeth::Repr>,
    /// Atomic ACK ETH (atomic acknowledgements).
    pub atomic_ack_eth: Option<atomic_ack_eth::Repr>,
    /// Immediate data (`*_WITH_IMMEDIATE`).
    pub immdt: Option<immdt::Repr>,
    /// Invalidate ETH (`SEND_*_WITH_INVALIDATE`).
    pub ieth: Option<ieth::Repr>,
    /// CNP body (congestion notifications).
    pub cnp: Option<cnp::Repr>,
}

impl ExtRepr {
    /// The set of headers present.
    pub fn headers(&self) -> HeaderSet {
        let mut h = HeaderSet::EMPTY;
        let mut add = |present: bool, k: HeaderSet| {
            if present {
                h = h.with(k);
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack_eth.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.immdt.is_some(), HeaderSet::IMMDT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        add(self.cnp.is_some(), HeaderSet::CNP);
        h
    }

    /// Parses the headers `p`'s opcode carries.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<ExtRepr> {
        Ok(ExtRepr {
            deth: p.deth().map(|h| deth::Repr::parse(&h)).transpose()?,
            reth: p.reth().map(|h| reth::Repr::parse(&h)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|h| atomic_eth::Repr::parse(&h))
                .transpose()?,
            aeth: p.aeth().map(|h| aeth::Repr::parse(&h)).transpose()?,
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|h| atomic_ack_eth::Repr::parse(&h))
                .transpose()?,
            immdt: p.immdt().map(|h| immdt::Repr::parse(&h)).transpose()?,
            ieth: p.ieth().map(|h| ieth::Repr::parse(&h)).transpose()?,
            cnp: p.cnp().map(|h| cnp::Repr::parse(&h)).transpose()?,
        })
    }

    /// Writes the headers in wire order into `buf` (which starts right after the BTH).
    fn emit(&self, buf: &mut [u8]) {
        let mut at = 0;
        macro_rules! put {
            ($field:ident, $module:ident) => {
                if let Some(r) = &self.$field {
                    let n = r.buffer_len();
                    r.emit(&mut $module::Header::new_unchecked(&mut buf[at..at + n]));
                    at += n;
                }
            };
        }
        // Same order as HeaderSet::ORDER.
        put!(deth, deth);
        put!(reth, reth);
        put!(atomic_eth, atomic_eth);
        put!(aeth, aeth);
        put!(atomic_ack_eth, atomic_ack_eth);
        put!(immdt, immdt);
        put!(ieth, ieth);
        put!(cnp, cnp);
        debug_assert_eq!(at, self.headers().len());
    }
}

/// An owned IB transport packet with a borrowed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// The base transport header.
    pub bth: bth::Repr,
    /// The extension headers that the opcode carries.
    pub ext: ExtRepr,
    /// The payload, without padding.
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a checked packet.
    pub fn parse(p: &Packet<&'a [u8]>) -> Result<Repr<'a>> {
        p.check()?;
        let bytes: &'a [u8] = p.buffer;
        Ok(Repr {
            bth: bth::Repr::parse(&p.bth())?,
            ext: ExtRepr::parse(p)?,
            payload: &bytes[p.payload_range()],
        })
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        12 + self.bth.opcode.headers().len()
    }

    /// Bytes needed to emit the whole packet including pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        let n = self.payload.len();
        self.header_len() + n + usize::from(pad_for(n)) + ICRC_LEN
    }

    /// Writes BTH and extension headers for a payload of `payload_len` bytes into `buf`;
    /// the pad count follows from the payload length. Returns the header length.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let op = self.bth.opcode;
        if self.ext.headers() != op.headers() || (!op.has_payload() && payload_len != 0) {
            return Err(Error::HeaderMismatch);
        }
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::BufferTooSmall);
        }
        let bth = bth::Repr {
            pad_count: pad_for(payload_len),
            ..self.bth
        };
        bth.emit(&mut bth::Header::new_unchecked(&mut buf[..12]));
        self.ext.emit(&mut buf[12..hl]);
        Ok(hl)
    }

    /// Writes the whole packet into `buf`, with zero pad bytes and a zero ICRC (the ICRC
    /// covers the IP and UDP headers too: see [`crate::icrc`]). Returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let hl = self.emit_headers(buf, self.payload.len())?;
        let end = hl + self.payload.len();
        buf[hl..end].copy_from_slice(self.payload);
        buf[end..total].fill(0);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RC_SEND_ONLY with BTH byte 1 `flags` and `body` bytes of payload plus pad.
    fn send_only(flags: u8, body: usize) -> Vec<u8> {
        let mut v = vec![0x04, flags, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1];
        v.resize(12 + body + ICRC_LEN, 0);
        v
    }

    #[test]
    fn rejects_payload_and_pad_off_a_4_byte_boundary() {
        // Found by fuzz/frame_parse: a 9-byte body with pad count 0 was accepted as a 9-byte
        // payload, and re-emitting its Repr added 3 pad bytes, so parse → emit → parse
        // changed the pad count and the packet length.
        assert_eq!(Packet::new_checked(send_only(0x00, 9)), Err(Error::BadPad));
        assert_eq!(Packet::new_checked(send_only(0x30, 9)), Err(Error::BadPad));
        assert_eq!(Packet::new_checked(send_only(0x10, 2)), Err(Error::BadPad));
        assert_eq!(Packet::new_checked(send_only(0x30, 2)), Err(Error::BadPad));

        let bytes = send_only(0x30, 12);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.payload().len(), 9);
        let repr = Repr::parse(&p).unwrap();
        let mut out = vec![0xa5; repr.buffer_len()];
        assert_eq!(repr.emit(&mut out), Ok(bytes.len()));
        assert_eq!(out, bytes);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
            Ok(repr)
        );
    }
}

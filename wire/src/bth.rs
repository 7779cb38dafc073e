//! Base transport header (BTH): 12 bytes that start every IB transport packet.

use crate::field::*;
use crate::{Error, Layer, Opcode, Psn, Result};

mod field {
    pub const OPCODE: usize = 0;
    /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5:4), TVer (bits 3:0).
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    /// FECN (bit 7), BECN (bit 6), reserved; `resv8a` in rxe, masked by the ICRC.
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: usize = 5;
    /// AckReq (bit 7), reserved (bits 6:0).
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// Offset of the byte that the ICRC masks (FECN/BECN/resv).
pub const ICRC_MASKED_BYTE: usize = field::FECN_BECN;

header_view!(
    /// A view of a base transport header.
    Header,
    12,
    Bth
);

impl<T: AsRef<[u8]>> Header<T> {
    /// Raw opcode byte (possibly not in the opcode table).
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OPCODE]
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    /// Number of pad bytes after the payload (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version; must be 0.
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0xf
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PKEY)
    }
    /// Forward explicit congestion notification (IB; RoCE v2 uses IP ECN instead).
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x40 != 0
    }
    /// Destination queue pair number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::DEST_QP)
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.buffer.as_ref(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Writes every field; reserved bits and the version become 0.
    fn write(&mut self, r: &Repr) {
        let b = self.buffer.as_mut();
        b[field::OPCODE] = r.opcode.value();
        b[field::FLAGS] =
            (u8::from(r.solicited) << 7) | (u8::from(r.mig_req) << 6) | ((r.pad_count & 0x3) << 4);
        put_u16(b, field::PKEY, r.pkey);
        b[field::FECN_BECN] = (u8::from(r.fecn) << 7) | (u8::from(r.becn) << 6);
        put_u24(b, field::DEST_QP, r.dest_qp);
        b[field::ACK_REQ] = u8::from(r.ack_req) << 7;
        put_u24(b, field::PSN, r.psn.value());
    }

    /// Sets the pad count.
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = self.buffer.as_mut();
        b[field::FLAGS] = (b[field::FLAGS] & !0x30) | ((pad & 0x3) << 4);
    }
}

/// A parsed base transport header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The operation code.
    pub opcode: Opcode,
    /// Solicited event: the receiver should raise a completion event.
    pub solicited: bool,
    /// Migration request (automatic path migration).
    pub mig_req: bool,
    /// Number of pad bytes (0-3) after the payload, making it a multiple of 4.
    pub pad_count: u8,
    /// Partition key (the default partition is 0xffff).
    pub pkey: u16,
    /// Forward explicit congestion notification (IB; RoCE v2 uses IP ECN instead).
    pub fecn: bool,
    /// Backward explicit congestion notification (IB; RoCE v2 uses CNPs instead).
    pub becn: bool,
    /// Destination queue pair number (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request: the responder should acknowledge this packet.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: Psn,
}

impl Repr {
    /// The default partition key, as rxe and ibv_*_pingpong use.
    pub const DEFAULT_PKEY: u16 = 0xffff;

    /// Parses a header, rejecting versions other than 0 and unknown opcodes.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Result<Repr> {
        if h.buffer.as_ref().len() < Header::<T>::LEN {
            return Err(Error::Truncated(Layer::Bth));
        }
        if h.tver() != 0 {
            return Err(Error::BadVersion(h.tver()));
        }
        let opcode = Opcode::new(h.opcode_raw()).ok_or(Error::UnknownOpcode(h.opcode_raw()))?;
        Ok(Repr {
            opcode,
            solicited: h.solicited(),
            mig_req: h.mig_req(),
            pad_count: h.pad_count(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            psn: h.psn(),
        })
    }

    /// A header with the default P_Key and every flag clear.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Repr {
        Repr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: Self::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & 0xff_ffff,
            ack_req: false,
            psn,
        }
    }

    /// Bytes needed to emit the header.
    pub const fn buffer_len(&self) -> usize {
        12
    }

    /// Writes the header into `h`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        h.write(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // BTH of an rxe RC_SEND_ONLY to QP 0x11, PSN 0x80bcf8 ... from rc_pingpong_s64.pcap.
    const RXE_BTH: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xbc, 0xf8, 0xa3,
    ];

    #[test]
    fn parses_rxe_bth() {
        let r = Repr::parse(&Header::new_checked(&RXE_BTH[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::RC_SEND_ONLY);
        assert_eq!(r.pkey, 0xffff);
        assert_eq!(r.dest_qp, 0x11);
        assert!(r.ack_req);
        assert_eq!(r.psn, Psn::new(0xbcf8a3));
        let mut out = [0u8; 12];
        r.emit(&mut Header::new_unchecked(&mut out[..]));
        assert_eq!(out, RXE_BTH);
    }

    #[test]
    fn rejects_version_and_opcode() {
        let mut b = RXE_BTH;
        b[1] = 0x01;
        assert_eq!(
            Repr::parse(&Header::new_unchecked(&b[..])),
            Err(Error::BadVersion(1))
        );
        let mut b = RXE_BTH;
        b[0] = 0x15;
        assert_eq!(
            Repr::parse(&Header::new_unchecked(&b[..])),
            Err(Error::UnknownOpcode(0x15))
        );
        assert!(Header::new_checked(&RXE_BTH[..11]).is_err());
    }
}

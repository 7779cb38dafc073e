//! ACK extended transport header (AETH): the syndrome (ACK, RNR NAK or NAK) and the MSN.

use crate::field::*;
use crate::{Error, Result};

header_view!(
    /// A view of an AETH.
    Header,
    4,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// Raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

/// The NAK codes of an AETH (IB spec 9.7.5.2.1, table 43).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder expected an earlier PSN (the requester goes back to it).
    PsnSequenceError,
    /// Invalid request: an opcode, length or header the responder cannot accept.
    InvalidRequest,
    /// Remote access error: the R_Key, address or access rights do not allow the operation.
    RemoteAccessError,
    /// Remote operational error: the responder failed to carry out a valid request.
    RemoteOperationalError,
    /// Invalid RD request (reliable datagram only).
    InvalidRdRequest,
}

impl NakCode {
    const fn value(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a 5-bit end-to-end credit code (31 = no credit limit).
    Ack {
        /// End-to-end credit code (5 bits).
        credits: u8,
    },
    /// Receiver not ready: retry after the time encoded by the 5-bit timer code.
    RnrNak {
        /// RNR timer code (5 bits), an index into the IB spec's table of delays.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// Credit code meaning "no end-to-end flow control", as rxe sends it.
    pub const UNLIMITED_CREDITS: u8 = 0x1f;

    /// Decodes a syndrome byte; reserved encodings are an error.
    pub fn from_byte(b: u8) -> Result<Syndrome> {
        let value = b & 0x1f;
        match b >> 5 {
            0b000 => Ok(Syndrome::Ack { credits: value }),
            0b001 => Ok(Syndrome::RnrNak { timer: value }),
            0b011 => match value {
                0 => Ok(Syndrome::Nak(NakCode::PsnSequenceError)),
                1 => Ok(Syndrome::Nak(NakCode::InvalidRequest)),
                2 => Ok(Syndrome::Nak(NakCode::RemoteAccessError)),
                3 => Ok(Syndrome::Nak(NakCode::RemoteOperationalError)),
                4 => Ok(Syndrome::Nak(NakCode::InvalidRdRequest)),
                _ => Err(Error::BadSyndrome(b)),
            },
            _ => Err(Error::BadSyndrome(b)),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | code.value(),
        }
    }
}

/// RNR NAK timer codes in microseconds (IB spec table 45); code 0 is the longest.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// End-to-end credit codes in receive WQEs (IB spec table 44); code 31 is "invalid".
pub const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Acknowledgement kind: ACK with credits, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// Message sequence number of the last message completed (24 bits).
    pub msn: u32,
}

impl Repr {
    /// Parses an AETH, rejecting reserved syndromes.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Result<Repr> {
        h.check_len()?;
        Ok(Repr {
            syndrome: Syndrome::from_byte(h.syndrome_raw())?,
            msn: h.msn(),
        })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        let b = h.buffer.as_mut();
        b[0] = self.syndrome.to_byte();
        put_u24(b, 1, self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_syndrome_round_trips_and_reserved_ones_fail() {
        let mut valid = 0;
        for b in 0..=255u8 {
            match Syndrome::from_byte(b) {
                Ok(s) => {
                    assert_eq!(s.to_byte(), b);
                    valid += 1;
                }
                Err(e) => assert_eq!(e, Error::BadSyndrome(b)),
            }
        }
        assert_eq!(valid, 32 + 32 + 5);
    }

    #[test]
    fn decodes_rxe_ack_and_naks() {
        // rxe's ACK: syndrome 0x1f (unlimited credits), MSN 1.
        let r = Repr::parse(&Header::new_checked(&[0x1f, 0, 0, 1][..]).unwrap()).unwrap();
        assert_eq!(
            r,
            Repr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 1
            }
        );
        assert_eq!(
            Syndrome::from_byte(0x2e),
            Ok(Syndrome::RnrNak { timer: 14 })
        );
        assert_eq!(
            Syndrome::from_byte(0x60),
            Ok(Syndrome::Nak(NakCode::PsnSequenceError))
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Ok(Syndrome::Nak(NakCode::InvalidRequest))
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Ok(Syndrome::Nak(NakCode::RemoteAccessError))
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Ok(Syndrome::Nak(NakCode::RemoteOperationalError))
        );
        assert_eq!(
            Syndrome::from_byte(0x64),
            Ok(Syndrome::Nak(NakCode::InvalidRdRequest))
        );
        assert_eq!(RNR_TIMER_US[14], 1_280);
    }
}

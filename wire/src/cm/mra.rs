//! MRA: "message received, answer will take longer" (IBA Table 107), which stretches the
//! sender's timeout instead of letting it resend.

use super::{bits, put_bits};
use crate::field::*;

mod field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const MSG: usize = 8;
    pub const TIMEOUT: usize = 9;
    pub const PRIVATE: usize = 10;
}

/// Bytes of private data an MRA carries.
pub const PRIVATE_LEN: usize = 222;

/// Which message an MRA or REJ is about (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MsgKind {
    /// A REQ.
    #[default]
    Req,
    /// A REP.
    Rep,
    /// Anything else (for an MRA: a LAP).
    Other,
    /// The reserved value 3.
    Reserved,
}

impl MsgKind {
    pub(crate) fn from_bits(v: u8) -> MsgKind {
        match v & 3 {
            0 => MsgKind::Req,
            1 => MsgKind::Rep,
            2 => MsgKind::Other,
            _ => MsgKind::Reserved,
        }
    }
    pub(crate) fn to_bits(self) -> u8 {
        match self {
            MsgKind::Req => 0,
            MsgKind::Rep => 1,
            MsgKind::Other => 2,
            MsgKind::Reserved => 3,
        }
    }
}

/// A message receipt acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's.
    pub remote_comm_id: u32,
    /// Which message is acknowledged.
    pub message_mraed: MsgKind,
    /// How much longer the answer may take (5 bits, 4.096 µs × 2^n).
    pub service_timeout: u8,
    /// Private data, whole.
    pub private_data: [u8; PRIVATE_LEN],
}

impl Default for Mra {
    fn default() -> Mra {
        Mra {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_mraed: MsgKind::Req,
            service_timeout: 0,
            private_data: [0; PRIVATE_LEN],
        }
    }
}

impl Mra {
    pub(crate) fn parse(d: &[u8]) -> Mra {
        Mra {
            local_comm_id: u32_at(d, field::LOCAL_COMM_ID),
            remote_comm_id: u32_at(d, field::REMOTE_COMM_ID),
            message_mraed: MsgKind::from_bits(bits(d[field::MSG], 0, 2)),
            service_timeout: bits(d[field::TIMEOUT], 0, 5),
            private_data: super::private(d, field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, field::LOCAL_COMM_ID, self.local_comm_id);
        put_u32(d, field::REMOTE_COMM_ID, self.remote_comm_id);
        put_bits(&mut d[field::MSG], 0, 2, self.message_mraed.to_bits());
        put_bits(&mut d[field::TIMEOUT], 0, 5, self.service_timeout);
        d[field::PRIVATE..field::PRIVATE + PRIVATE_LEN].copy_from_slice(&self.private_data);
    }
}

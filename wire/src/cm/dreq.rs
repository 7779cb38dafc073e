//! DREQ: a request to end a connection (IBA Table 112).

use crate::field::*;

mod field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const REMOTE_QPN: usize = 8;
    pub const PRIVATE: usize = 12;
}

/// Bytes of private data a DREQ carries.
pub const PRIVATE_LEN: usize = 220;

/// A disconnection request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's.
    pub remote_comm_id: u32,
    /// The receiver's QP (or EE context) number the connection used (24 bits): a check
    /// that the DREQ is about the connection the receiver thinks it is.
    pub remote_qpn: u32,
    /// Private data, whole.
    pub private_data: [u8; PRIVATE_LEN],
}

impl Default for Dreq {
    fn default() -> Dreq {
        Dreq {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn: 0,
            private_data: [0; PRIVATE_LEN],
        }
    }
}

impl Dreq {
    pub(crate) fn parse(d: &[u8]) -> Dreq {
        Dreq {
            local_comm_id: u32_at(d, field::LOCAL_COMM_ID),
            remote_comm_id: u32_at(d, field::REMOTE_COMM_ID),
            remote_qpn: u24_at(d, field::REMOTE_QPN),
            private_data: super::private(d, field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, field::LOCAL_COMM_ID, self.local_comm_id);
        put_u32(d, field::REMOTE_COMM_ID, self.remote_comm_id);
        put_u24(d, field::REMOTE_QPN, self.remote_qpn);
        d[field::PRIVATE..field::PRIVATE + PRIVATE_LEN].copy_from_slice(&self.private_data);
    }
}

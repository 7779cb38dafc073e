//! REJ: a refusal of a REQ or REP, or of a connection already half made (IBA Table 108).

use super::mra::MsgKind;
use super::{bits, put_bits};
use crate::field::*;

mod field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const MSG: usize = 8;
    pub const ARI_LEN: usize = 9;
    pub const REASON: usize = 10;
    pub const ARI: usize = 12;
    pub const PRIVATE: usize = 84;
}

/// Bytes of additional rejection information.
pub const ARI_LEN: usize = 72;
/// Bytes of private data a REJ carries.
pub const PRIVATE_LEN: usize = 148;

/// Why a REJ refuses (IBA Table 109); rdma_cm reports it as the event's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RejReason(pub u16);

impl RejReason {
    /// No QP available.
    pub const NO_QP: RejReason = RejReason(1);
    /// No resources.
    pub const NO_RESOURCES: RejReason = RejReason(3);
    /// The CM timed out waiting.
    pub const TIMEOUT: RejReason = RejReason(4);
    /// Unsupported request.
    pub const UNSUPPORTED_REQ: RejReason = RejReason(5);
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: RejReason = RejReason(6);
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: RejReason = RejReason(7);
    /// Nobody listens on the service ID: rdma_cm's "connection refused".
    pub const INVALID_SERVICE_ID: RejReason = RejReason(8);
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: RejReason = RejReason(9);
    /// Stale connection: the QP is still known from an earlier connection.
    pub const STALE_CONN: RejReason = RejReason(10);
    /// Invalid primary GID.
    pub const INVALID_GID: RejReason = RejReason(12);
    /// Invalid path MTU.
    pub const INVALID_MTU: RejReason = RejReason(26);
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: RejReason = RejReason(27);
    /// Refused by the consumer (rdma_reject).
    pub const CONSUMER_DEFINED: RejReason = RejReason(28);
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: RejReason = RejReason(29);
    /// The requester's communication ID is already in use.
    pub const DUPLICATE_LOCAL_COMM_ID: RejReason = RejReason(30);
    /// Unsupported class version.
    pub const INVALID_CLASS_VERSION: RejReason = RejReason(31);
}

/// A reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rej {
    /// The rejecter's communication ID (0 if it never made one).
    pub local_comm_id: u32,
    /// The other side's.
    pub remote_comm_id: u32,
    /// Which message is refused (REQ, REP or other).
    pub message_rejected: MsgKind,
    /// Valid bytes of `ari` (7 bits).
    pub ari_len: u8,
    /// Why.
    pub reason: RejReason,
    /// Additional rejection information (e.g. the GID that is wrong).
    pub ari: [u8; ARI_LEN],
    /// Private data, whole.
    pub private_data: [u8; PRIVATE_LEN],
}

impl Default for Rej {
    fn default() -> Rej {
        Rej {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_rejected: MsgKind::Req,
            ari_len: 0,
            reason: RejReason::default(),
            ari: [0; ARI_LEN],
            private_data: [0; PRIVATE_LEN],
        }
    }
}

impl Rej {
    pub(crate) fn parse(d: &[u8]) -> Rej {
        Rej {
            local_comm_id: u32_at(d, field::LOCAL_COMM_ID),
            remote_comm_id: u32_at(d, field::REMOTE_COMM_ID),
            message_rejected: MsgKind::from_bits(bits(d[field::MSG], 0, 2)),
            ari_len: bits(d[field::ARI_LEN], 0, 7),
            reason: RejReason(u16_at(d, field::REASON)),
            ari: super::private(d, field::ARI),
            private_data: super::private(d, field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, field::LOCAL_COMM_ID, self.local_comm_id);
        put_u32(d, field::REMOTE_COMM_ID, self.remote_comm_id);
        put_bits(&mut d[field::MSG], 0, 2, self.message_rejected.to_bits());
        put_bits(&mut d[field::ARI_LEN], 0, 7, self.ari_len);
        put_u16(d, field::REASON, self.reason.0);
        d[field::ARI..field::ARI + ARI_LEN].copy_from_slice(&self.ari);
        d[field::PRIVATE..field::PRIVATE + PRIVATE_LEN].copy_from_slice(&self.private_data);
    }
}

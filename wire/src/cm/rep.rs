//! REP: the passive side's answer to a REQ (IBA Table 110).

use super::{bits, put_bits};
use crate::field::*;

mod field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const REMOTE_COMM_ID: usize = 4;
    pub const LOCAL_QKEY: usize = 8;
    pub const LOCAL_QPN: usize = 12;
    pub const LOCAL_EECN: usize = 16;
    pub const STARTING_PSN: usize = 20;
    pub const RESPONDER_RESOURCES: usize = 24;
    pub const INITIATOR_DEPTH: usize = 25;
    pub const ACK_DELAY: usize = 26;
    pub const RNR: usize = 27;
    pub const LOCAL_CA_GUID: usize = 28;
    pub const PRIVATE: usize = 36;
}

/// Bytes of private data a REP carries.
pub const PRIVATE_LEN: usize = 196;

/// A reply to a connection request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rep {
    /// The responder's communication ID.
    pub local_comm_id: u32,
    /// The requester's, from its REQ.
    pub remote_comm_id: u32,
    /// The responder's Q_Key (RD only).
    pub local_qkey: u32,
    /// The responder's QP number (24 bits).
    pub local_qpn: u32,
    /// Local EE context (RD only, 24 bits).
    pub local_eecn: u32,
    /// The PSN the responder's QP expects first (24 bits): the requester sends from it.
    pub starting_psn: u32,
    /// RDMA READs and atomics the responder takes in at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the responder will have outstanding.
    pub initiator_depth: u8,
    /// The responder's ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Alternate path failover (2 bits: 0 accepted, 1 rejected, 2 unsupported).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// Retries after an RNR NAK (3 bits).
    pub rnr_retry_count: u8,
    /// Whether the responder's QP takes receives from an SRQ.
    pub srq: bool,
    /// The responder's CA GUID.
    pub local_ca_guid: u64,
    /// Private data, whole.
    pub private_data: [u8; PRIVATE_LEN],
}

impl Default for Rep {
    fn default() -> Rep {
        Rep {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: 0,
            local_eecn: 0,
            starting_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; PRIVATE_LEN],
        }
    }
}

impl Rep {
    pub(crate) fn parse(d: &[u8]) -> Rep {
        let a = d[field::ACK_DELAY];
        let r = d[field::RNR];
        Rep {
            local_comm_id: u32_at(d, field::LOCAL_COMM_ID),
            remote_comm_id: u32_at(d, field::REMOTE_COMM_ID),
            local_qkey: u32_at(d, field::LOCAL_QKEY),
            local_qpn: u24_at(d, field::LOCAL_QPN),
            local_eecn: u24_at(d, field::LOCAL_EECN),
            starting_psn: u24_at(d, field::STARTING_PSN),
            responder_resources: d[field::RESPONDER_RESOURCES],
            initiator_depth: d[field::INITIATOR_DEPTH],
            target_ack_delay: bits(a, 0, 5),
            failover_accepted: bits(a, 5, 2),
            end_to_end_flow_control: bits(a, 7, 1) != 0,
            rnr_retry_count: bits(r, 0, 3),
            srq: bits(r, 3, 1) != 0,
            local_ca_guid: u64_at(d, field::LOCAL_CA_GUID),
            private_data: super::private(d, field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, field::LOCAL_COMM_ID, self.local_comm_id);
        put_u32(d, field::REMOTE_COMM_ID, self.remote_comm_id);
        put_u32(d, field::LOCAL_QKEY, self.local_qkey);
        put_u24(d, field::LOCAL_QPN, self.local_qpn);
        put_u24(d, field::LOCAL_EECN, self.local_eecn);
        put_u24(d, field::STARTING_PSN, self.starting_psn);
        d[field::RESPONDER_RESOURCES] = self.responder_resources;
        d[field::INITIATOR_DEPTH] = self.initiator_depth;
        let a = &mut d[field::ACK_DELAY];
        put_bits(a, 0, 5, self.target_ack_delay);
        put_bits(a, 5, 2, self.failover_accepted);
        put_bits(a, 7, 1, self.end_to_end_flow_control.into());
        let r = &mut d[field::RNR];
        put_bits(r, 0, 3, self.rnr_retry_count);
        put_bits(r, 3, 1, self.srq.into());
        put_u64(d, field::LOCAL_CA_GUID, self.local_ca_guid);
        d[field::PRIVATE..field::PRIVATE + PRIVATE_LEN].copy_from_slice(&self.private_data);
    }
}

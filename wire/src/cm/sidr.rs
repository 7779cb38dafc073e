//! SIDR REQ and SIDR REP (IBA Tables 119 and 120): a UD sender asks which QP and Q_Key
//! serve a service ID; rdma_cm's UDP port space (udaddy) resolves its peers this way.

use crate::field::*;

mod req_field {
    pub const REQUEST_ID: usize = 0;
    pub const PKEY: usize = 4;
    pub const SERVICE_ID: usize = 8;
    pub const PRIVATE: usize = 16;
}

mod rep_field {
    pub const REQUEST_ID: usize = 0;
    pub const STATUS: usize = 4;
    pub const INFO_LEN: usize = 5;
    pub const QPN: usize = 8;
    pub const SERVICE_ID: usize = 12;
    pub const QKEY: usize = 20;
    pub const INFO: usize = 24;
    pub const PRIVATE: usize = 96;
}

/// Bytes of private data a SIDR REQ carries.
pub const REQ_PRIVATE_LEN: usize = 216;
/// Bytes of additional information in a SIDR REP.
pub const INFO_LEN: usize = 72;
/// Bytes of private data a SIDR REP carries.
pub const REP_PRIVATE_LEN: usize = 136;

/// The outcome a SIDR REP reports (IBA Table 121).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    /// The QP and Q_Key are valid.
    pub const OK: SidrStatus = SidrStatus(0);
    /// Nobody serves the service ID.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    /// Refused by the consumer.
    pub const REJECT: SidrStatus = SidrStatus(2);
    /// No QP available.
    pub const NO_QP: SidrStatus = SidrStatus(3);
    /// Redirected elsewhere.
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    /// The class version is not supported.
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);
}

/// A service ID resolution request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReq {
    /// The requester's ID for this request; the reply echoes it.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Private data, whole.
    pub private_data: [u8; REQ_PRIVATE_LEN],
}

impl Default for SidrReq {
    fn default() -> SidrReq {
        SidrReq {
            request_id: 0,
            pkey: 0,
            service_id: 0,
            private_data: [0; REQ_PRIVATE_LEN],
        }
    }
}

impl SidrReq {
    pub(crate) fn parse(d: &[u8]) -> SidrReq {
        SidrReq {
            request_id: u32_at(d, req_field::REQUEST_ID),
            pkey: u16_at(d, req_field::PKEY),
            service_id: u64_at(d, req_field::SERVICE_ID),
            private_data: super::private(d, req_field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, req_field::REQUEST_ID, self.request_id);
        put_u16(d, req_field::PKEY, self.pkey);
        put_u64(d, req_field::SERVICE_ID, self.service_id);
        d[req_field::PRIVATE..req_field::PRIVATE + REQ_PRIVATE_LEN]
            .copy_from_slice(&self.private_data);
    }
}

/// A service ID resolution reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRep {
    /// The request's ID.
    pub request_id: u32,
    /// Outcome.
    pub status: SidrStatus,
    /// Valid bytes of `info`.
    pub info_len: u8,
    /// The QP serving the service (24 bits).
    pub qpn: u32,
    /// The service ID, echoed.
    pub service_id: u64,
    /// The Q_Key to send with.
    pub qkey: u32,
    /// Additional information (e.g. a redirection).
    pub info: [u8; INFO_LEN],
    /// Private data, whole.
    pub private_data: [u8; REP_PRIVATE_LEN],
}

impl Default for SidrRep {
    fn default() -> SidrRep {
        SidrRep {
            request_id: 0,
            status: SidrStatus::OK,
            info_len: 0,
            qpn: 0,
            service_id: 0,
            qkey: 0,
            info: [0; INFO_LEN],
            private_data: [0; REP_PRIVATE_LEN],
        }
    }
}

impl SidrRep {
    pub(crate) fn parse(d: &[u8]) -> SidrRep {
        SidrRep {
            request_id: u32_at(d, rep_field::REQUEST_ID),
            status: SidrStatus(d[rep_field::STATUS]),
            info_len: d[rep_field::INFO_LEN],
            qpn: u24_at(d, rep_field::QPN),
            service_id: u64_at(d, rep_field::SERVICE_ID),
            qkey: u32_at(d, rep_field::QKEY),
            info: super::private(d, rep_field::INFO),
            private_data: super::private(d, rep_field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, rep_field::REQUEST_ID, self.request_id);
        d[rep_field::STATUS] = self.status.0;
        d[rep_field::INFO_LEN] = self.info_len;
        put_u24(d, rep_field::QPN, self.qpn);
        put_u64(d, rep_field::SERVICE_ID, self.service_id);
        put_u32(d, rep_field::QKEY, self.qkey);
        d[rep_field::INFO..rep_field::INFO + INFO_LEN].copy_from_slice(&self.info);
        d[rep_field::PRIVATE..rep_field::PRIVATE + REP_PRIVATE_LEN]
            .copy_from_slice(&self.private_data);
    }
}

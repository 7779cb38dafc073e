//! REQ: the active side's connection request (IBA Table 106). Its private data starts, for
//! rdma_cm, with the IP header of [`super::rdma_cm`].

use super::path::{self, Path};
use super::{bits, put_bits};
use crate::field::*;

mod field {
    pub const LOCAL_COMM_ID: usize = 0;
    pub const SERVICE_ID: usize = 8;
    pub const LOCAL_CA_GUID: usize = 16;
    pub const LOCAL_QKEY: usize = 28;
    pub const LOCAL_QPN: usize = 32;
    pub const RESPONDER_RESOURCES: usize = 35;
    pub const LOCAL_EECN: usize = 36;
    pub const INITIATOR_DEPTH: usize = 39;
    pub const REMOTE_EECN: usize = 40;
    pub const REMOTE_TIMEOUT: usize = 43;
    pub const STARTING_PSN: usize = 44;
    pub const LOCAL_TIMEOUT: usize = 47;
    pub const PKEY: usize = 48;
    pub const MTU: usize = 50;
    pub const MAX_CM_RETRIES: usize = 51;
    pub const PRIMARY: usize = 52;
    pub const ALTERNATE: usize = 96;
    pub const SAP: usize = 139;
    pub const PRIVATE: usize = 140;
}

/// Bytes of private data a REQ carries.
pub const PRIVATE_LEN: usize = 92;

/// The transport service a REQ asks for (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Reliable connection.
    #[default]
    Rc,
    /// Unreliable connection.
    Uc,
    /// Reliable datagram.
    Rd,
    /// The reserved value 3.
    Reserved,
}

impl Transport {
    fn from_bits(v: u8) -> Transport {
        match v & 3 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            _ => Transport::Reserved,
        }
    }
    fn to_bits(self) -> u8 {
        match self {
            Transport::Rc => 0,
            Transport::Uc => 1,
            Transport::Rd => 2,
            Transport::Reserved => 3,
        }
    }
}

/// A connection request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    /// The requester's communication ID; every later message names it.
    pub local_comm_id: u32,
    /// The service asked for (rdma_cm: port space and port, [`super::rdma_cm::service_id`]).
    pub service_id: u64,
    /// The requester's CA GUID.
    pub local_ca_guid: u64,
    /// The requester's Q_Key (RD only).
    pub local_qkey: u32,
    /// The requester's QP number (24 bits).
    pub local_qpn: u32,
    /// RDMA READs and atomics the requester will take in at once.
    pub responder_resources: u8,
    /// Local EE context (RD only, 24 bits).
    pub local_eecn: u32,
    /// RDMA READs and atomics the requester will have outstanding.
    pub initiator_depth: u8,
    /// Remote EE context (RD only, 24 bits).
    pub remote_eecn: u32,
    /// How long the responder's CM may take to answer (5 bits, 4.096 µs × 2^n).
    pub remote_cm_response_timeout: u8,
    /// Transport service.
    pub transport: Transport,
    /// End-to-end flow control (credits in AETHs).
    pub end_to_end_flow_control: bool,
    /// The PSN the requester's QP expects first (24 bits): the responder sends from it.
    /// (Linux and rxe read it so; the captures in `tests/vectors/rxe-cm` show it.)
    pub starting_psn: u32,
    /// How long the requester's CM may take to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retries on timeout (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (4 bits: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RD only.
    pub rdc_exists: bool,
    /// Retries after an RNR NAK (3 bits, 7 = forever).
    pub rnr_retry_count: u8,
    /// How often the CM resends this REQ before giving up (4 bits).
    pub max_cm_retries: u8,
    /// Whether the requester's QP takes receives from an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits: 0 none, 1 XRC).
    pub extended_transport: u8,
    /// The primary path.
    pub primary: Path,
    /// The alternate path (all zero when there is none).
    pub alternate: Path,
    /// Whether the requester supports alternate path migration's SAP.
    pub sap_supported: bool,
    /// Private data, whole.
    pub private_data: [u8; PRIVATE_LEN],
}

impl Default for Req {
    fn default() -> Req {
        Req {
            local_comm_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport: Transport::Rc,
            end_to_end_flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            pkey: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport: 0,
            primary: Path::default(),
            alternate: Path::default(),
            sap_supported: false,
            private_data: [0; PRIVATE_LEN],
        }
    }
}

impl Req {
    pub(crate) fn parse(d: &[u8]) -> Req {
        let t = d[field::REMOTE_TIMEOUT];
        let l = d[field::LOCAL_TIMEOUT];
        let m = d[field::MTU];
        let r = d[field::MAX_CM_RETRIES];
        Req {
            local_comm_id: u32_at(d, field::LOCAL_COMM_ID),
            service_id: u64_at(d, field::SERVICE_ID),
            local_ca_guid: u64_at(d, field::LOCAL_CA_GUID),
            local_qkey: u32_at(d, field::LOCAL_QKEY),
            local_qpn: u24_at(d, field::LOCAL_QPN),
            responder_resources: d[field::RESPONDER_RESOURCES],
            local_eecn: u24_at(d, field::LOCAL_EECN),
            initiator_depth: d[field::INITIATOR_DEPTH],
            remote_eecn: u24_at(d, field::REMOTE_EECN),
            remote_cm_response_timeout: bits(t, 0, 5),
            transport: Transport::from_bits(bits(t, 5, 2)),
            end_to_end_flow_control: bits(t, 7, 1) != 0,
            starting_psn: u24_at(d, field::STARTING_PSN),
            local_cm_response_timeout: bits(l, 0, 5),
            retry_count: bits(l, 5, 3),
            pkey: u16_at(d, field::PKEY),
            path_mtu: bits(m, 0, 4),
            rdc_exists: bits(m, 4, 1) != 0,
            rnr_retry_count: bits(m, 5, 3),
            max_cm_retries: bits(r, 0, 4),
            srq: bits(r, 4, 1) != 0,
            extended_transport: bits(r, 5, 3),
            primary: Path::parse(&d[field::PRIMARY..field::PRIMARY + path::LEN]),
            alternate: Path::parse(&d[field::ALTERNATE..field::ALTERNATE + path::LEN]),
            sap_supported: bits(d[field::SAP], 5, 1) != 0,
            private_data: super::private(d, field::PRIVATE),
        }
    }

    pub(crate) fn emit(&self, d: &mut [u8]) {
        put_u32(d, field::LOCAL_COMM_ID, self.local_comm_id);
        put_u64(d, field::SERVICE_ID, self.service_id);
        put_u64(d, field::LOCAL_CA_GUID, self.local_ca_guid);
        put_u32(d, field::LOCAL_QKEY, self.local_qkey);
        put_u24(d, field::LOCAL_QPN, self.local_qpn);
        d[field::RESPONDER_RESOURCES] = self.responder_resources;
        put_u24(d, field::LOCAL_EECN, self.local_eecn);
        d[field::INITIATOR_DEPTH] = self.initiator_depth;
        put_u24(d, field::REMOTE_EECN, self.remote_eecn);
        let t = &mut d[field::REMOTE_TIMEOUT];
        put_bits(t, 0, 5, self.remote_cm_response_timeout);
        put_bits(t, 5, 2, self.transport.to_bits());
        put_bits(t, 7, 1, self.end_to_end_flow_control.into());
        put_u24(d, field::STARTING_PSN, self.starting_psn);
        let l = &mut d[field::LOCAL_TIMEOUT];
        put_bits(l, 0, 5, self.local_cm_response_timeout);
        put_bits(l, 5, 3, self.retry_count);
        put_u16(d, field::PKEY, self.pkey);
        let m = &mut d[field::MTU];
        put_bits(m, 0, 4, self.path_mtu);
        put_bits(m, 4, 1, self.rdc_exists.into());
        put_bits(m, 5, 3, self.rnr_retry_count);
        let r = &mut d[field::MAX_CM_RETRIES];
        put_bits(r, 0, 4, self.max_cm_retries);
        put_bits(r, 4, 1, self.srq.into());
        put_bits(r, 5, 3, self.extended_transport);
        self.primary
            .emit(&mut d[field::PRIMARY..field::PRIMARY + path::LEN]);
        self.alternate
            .emit(&mut d[field::ALTERNATE..field::ALTERNATE + path::LEN]);
        put_bits(&mut d[field::SAP], 5, 1, self.sap_supported.into());
        d[field::PRIVATE..field::PRIVATE + PRIVATE_LEN].copy_from_slice(&self.private_data);
    }
}

//! The verbs-level vocabulary: QP types and states, attributes, work requests and
//! completions. Names and numeric values follow libibverbs so the app layer can map
//! them one to one.

use core::net::Ipv6Addr;

use crate::flags::flags;
use crate::mr::Access;
pub use crate::sge::{PdId, Sge};

/// Transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

/// QP states of the IB spec (ibv_qp_state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    Reset,
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained: no new message is started.
    Sqd,
    /// Send queue error (UC/UD only): sends are flushed, receives go on.
    Sqe,
    Err,
}

/// Path MTU (ibv_mtu): the largest IB payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    #[default]
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    /// Every MTU, smallest first.
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU for a byte count, if it is one of the five IB MTUs.
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == n)
    }
}

/// Where a QP (RC/UC) or a UD work request sends to: the RoCE v2 part of an ibv_ah_attr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Destination GID; IPv4 peers use the IPv4-mapped form (`::ffff:a.b.c.d`).
    pub dest_gid: Ipv6Addr,
    /// Index into the endpoint's local GIDs of the source address.
    pub sgid_index: u8,
    /// IP traffic class: DSCP in the top 6 bits, ECN in the low 2.
    pub traffic_class: u8,
    /// Kept for the verbs API; like the kernel for RoCE v2, the engine always sends with
    /// TTL / hop limit 64.
    pub hop_limit: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
}

impl Default for AddressVector {
    fn default() -> Self {
        AddressVector {
            dest_gid: Ipv6Addr::UNSPECIFIED,
            sgid_index: 0,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        }
    }
}

impl AddressVector {
    /// An address vector to `dest_gid` from local GID 0.
    pub fn new(dest_gid: Ipv6Addr) -> AddressVector {
        AddressVector {
            dest_gid,
            ..Default::default()
        }
    }
}

flags! {
    /// Which fields of [`QpAttr`] a modify applies (ibv_qp_attr_mask, same bit values).
    QpAttrMask: u32 {
        STATE = 1 << 0;
        CUR_STATE = 1 << 1;
        EN_SQD_ASYNC_NOTIFY = 1 << 2;
        ACCESS_FLAGS = 1 << 3;
        PKEY_INDEX = 1 << 4;
        PORT = 1 << 5;
        QKEY = 1 << 6;
        AV = 1 << 7;
        PATH_MTU = 1 << 8;
        TIMEOUT = 1 << 9;
        RETRY_CNT = 1 << 10;
        RNR_RETRY = 1 << 11;
        RQ_PSN = 1 << 12;
        MAX_QP_RD_ATOMIC = 1 << 13;
        /// Alternate path (automatic path migration): not supported.
        ALT_PATH = 1 << 14;
        MIN_RNR_TIMER = 1 << 15;
        SQ_PSN = 1 << 16;
        MAX_DEST_RD_ATOMIC = 1 << 17;
        /// Path migration state: not supported.
        PATH_MIG_STATE = 1 << 18;
        /// Resizing queues: not supported.
        CAP = 1 << 19;
        DEST_QPN = 1 << 20;
    }
}

/// Queue sizes of a QP (ibv_qp_cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        }
    }
}

/// QP attributes (ibv_qp_attr); a modify reads only the fields its mask names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    pub qp_state: QpState,
    /// Checked against the current state when `CUR_STATE` is in the mask.
    pub cur_qp_state: QpState,
    pub path_mtu: Mtu,
    pub qkey: u32,
    /// First PSN the responder expects (24 bits; higher bits are ignored).
    pub rq_psn: u32,
    /// First PSN the requester sends (24 bits; higher bits are ignored).
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    /// Remote operations the responder allows (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
    pub qp_access_flags: Access,
    /// Only index 0 (P_Key 0xffff) exists.
    pub pkey_index: u16,
    /// Only port 1 exists.
    pub port_num: u8,
    pub av: AddressVector,
    /// Local ACK timeout: 4.096 µs × 2^timeout; 0 waits forever.
    pub timeout: u8,
    /// Transport retries before RetryExcErr; 7 retries forever (as rxe).
    pub retry_cnt: u8,
    /// RNR retries before RnrRetryExcErr; 7 retries forever.
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP's responder sends (index into `aeth::RNR_TIMER_US`).
    pub min_rnr_timer: u8,
    /// RDMA READs and atomics this requester keeps outstanding.
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics this responder accepts at once.
    pub max_dest_rd_atomic: u8,
    pub en_sqd_async_notify: bool,
    /// Reported by `query_qp`; modifying it is not supported.
    pub cap: QpCap,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: Access::empty(),
            pkey_index: 0,
            port_num: 1,
            av: AddressVector::default(),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            en_sqd_async_notify: false,
            cap: QpCap::default(),
        }
    }
}

/// Completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);

/// What `create_qp` needs (ibv_qp_init_attr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpType,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub cap: QpCap,
    /// Every send WR completes with a work completion, signaled or not.
    pub sq_sig_all: bool,
    /// Receive from this shared receive queue instead of the QP's own (RC, UC, UD).
    pub srq: Option<SrqId>,
}

/// A shared receive queue of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqId(pub u32);

/// What `create_srq` needs and `query_srq` reports (ibv_srq_attr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqAttr {
    /// Receive WRs the queue holds at most.
    pub max_wr: u32,
    /// Scatter/gather elements per receive WR at most.
    pub max_sge: u32,
    /// Low-water mark; `query_srq` reports whether the queue fell below it.
    pub srq_limit: u32,
}

/// Send work request opcodes (ibv_wr_opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WrOpcode {
    #[default]
    Send,
    SendWithImm,
    /// SEND that invalidates `invalidate_rkey` at the responder.
    SendWithInv,
    RdmaWrite,
    RdmaWriteWithImm,
    RdmaRead,
    /// 64-bit compare-and-swap at `remote_addr`: swap in `swap` if it equals `compare_add`.
    AtomicCmpSwp,
    /// 64-bit fetch-and-add of `compare_add` at `remote_addr`.
    AtomicFetchAdd,
}

impl WrOpcode {
    /// True for RDMA READ and the atomics (they need responder resources).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd
        )
    }
    /// True for the atomics.
    pub const fn is_atomic(self) -> bool {
        matches!(self, WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd)
    }
}

flags! {
    /// Send flags (ibv_send_flags, same bit values).
    SendFlags: u32 {
        /// Wait until earlier READs and atomics complete before starting.
        FENCE = 1 << 0;
        /// Generate a work completion on success.
        SIGNALED = 1 << 1;
        /// Set the solicited event bit on the last packet.
        SOLICITED = 1 << 2;
        /// Copy the gather list into the WQE at post time.
        INLINE = 1 << 3;
    }
}

/// Destination of a UD send (the ibv_ah plus remote QPN and Q_Key of ibv_send_wr.wr.ud).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    pub av: AddressVector,
    pub dest_qpn: u32,
    /// Q_Key to send; one with the high bit set means "use the QP's own Q_Key".
    pub qkey: u32,
}

impl UdDest {
    /// A destination with a default address vector toward `dest_gid`.
    pub fn new(dest_gid: Ipv6Addr, dest_qpn: u32, qkey: u32) -> UdDest {
        UdDest {
            av: AddressVector::new(dest_gid),
            dest_qpn,
            qkey,
        }
    }
}

/// A send work request (ibv_send_wr).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub sg_list: Vec<Sge>,
    pub flags: SendFlags,
    /// Immediate data for *_WITH_IMM, in the byte order it goes on the wire.
    pub imm_data: u32,
    /// R_Key to invalidate for `SendWithInv`.
    pub invalidate_rkey: u32,
    /// Remote address for RDMA and atomics.
    pub remote_addr: u64,
    pub rkey: u32,
    /// Compare value (CmpSwp) or addend (FetchAdd).
    pub compare_add: u64,
    /// Swap value (CmpSwp).
    pub swap: u64,
    /// UD destination; required on UD QPs, ignored elsewhere.
    pub ud: Option<UdDest>,
}

/// A receive work request (ibv_recv_wr).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: Vec<Sge>,
}

/// Work completion status (ibv_wc_status, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

/// Work completion opcode (ibv_wc_opcode, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

impl From<WrOpcode> for WcOpcode {
    fn from(op: WrOpcode) -> WcOpcode {
        match op {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
        }
    }
}

flags! {
    /// Work completion flags (ibv_wc_flags, same bit values).
    WcFlags: u32 {
        /// The first 40 bytes of a UD receive buffer hold the GRH (or IPv4 header).
        GRH = 1 << 0;
        WITH_IMM = 1 << 1;
        WITH_INV = 1 << 3;
    }
}

/// A work completion (ibv_wc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes transferred (receives: bytes placed, including the 40-byte GRH area on UD).
    pub byte_len: u32,
    /// Immediate data when `wc_flags` has WITH_IMM.
    pub imm_data: u32,
    /// The invalidated R_Key when `wc_flags` has WITH_INV.
    pub invalidated_rkey: u32,
    /// Source QP of a UD receive.
    pub src_qp: u32,
    /// Source GID of a UD receive.
    pub src_gid: Option<Ipv6Addr>,
    /// The local QP the work request was posted to.
    pub qp_num: u32,
    pub wc_flags: WcFlags,
}

impl WorkCompletion {
    pub(crate) fn new(qp_num: u32, wr_id: u64, opcode: WcOpcode, status: WcStatus) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: 0,
            invalidated_rkey: 0,
            src_qp: 0,
            src_gid: None,
            qp_num,
            wc_flags: WcFlags::empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes_match_ibv_mtu() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(1024), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::from_bytes(1500), None);
    }

    #[test]
    fn flags_algebra() {
        let m = QpAttrMask::STATE | QpAttrMask::AV;
        assert!(m.contains(QpAttrMask::AV));
        assert!(!m.contains(QpAttrMask::AV | QpAttrMask::QKEY));
        assert_eq!(m.difference(QpAttrMask::STATE), QpAttrMask::AV);
        assert_eq!(WcStatus::RnrRetryExcErr as u32, 13);
    }
}

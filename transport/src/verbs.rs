//! The verbs-level vocabulary: QP types and states, attributes, work requests and
//! completions. Names and numeric values follow libibverbs so the app layer can map
//! them one to one.

use core::net::Ipv6Addr;

use crate::flags::flags;
use crate::mr::{Access, MwBind};
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
    /// Created: no transport state, nothing can be posted.
    Reset,
    /// Initialized: receives may be posted; nothing is sent or received yet.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained: no new message is started.
    Sqd,
    /// Send queue error (UC/UD only): sends are flushed, receives go on.
    Sqe,
    /// Error: every WQE completes flushed; nothing is sent or received.
    Err,
}

/// Path MTU (ibv_mtu): the largest IB payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    #[default]
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
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
        /// `qp_state`: the state to move to.
        STATE = 1 << 0;
        /// `cur_qp_state`: the state the caller believes current.
        CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`.
        ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        PKEY_INDEX = 1 << 4;
        /// `port_num`.
        PORT = 1 << 5;
        /// `qkey`.
        QKEY = 1 << 6;
        /// `av`: the path to the remote QP.
        AV = 1 << 7;
        /// `path_mtu`.
        PATH_MTU = 1 << 8;
        /// `timeout`: the local ACK timeout.
        TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        RNR_RETRY = 1 << 11;
        /// `rq_psn`: the first PSN the responder expects.
        RQ_PSN = 1 << 12;
        /// `max_rd_atomic`.
        MAX_QP_RD_ATOMIC = 1 << 13;
        /// Alternate path (automatic path migration): not supported.
        ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`: the first PSN the requester sends.
        SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`.
        MAX_DEST_RD_ATOMIC = 1 << 17;
        /// Path migration state: not supported.
        PATH_MIG_STATE = 1 << 18;
        /// Resizing queues: not supported.
        CAP = 1 << 19;
        /// `dest_qp_num`.
        DEST_QPN = 1 << 20;
    }
}

/// Queue sizes of a QP (ibv_qp_cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCap {
    /// Most send WRs outstanding at once.
    pub max_send_wr: u32,
    /// Most receive WRs posted at once.
    pub max_recv_wr: u32,
    /// Most SGEs in one send WR.
    pub max_send_sge: u32,
    /// Most SGEs in one receive WR.
    pub max_recv_sge: u32,
    /// Most bytes of one inline send.
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
    /// The state to move to (with `STATE` in the mask).
    pub qp_state: QpState,
    /// Checked against the current state when `CUR_STATE` is in the mask.
    pub cur_qp_state: QpState,
    /// Path MTU of RC/UC (UD uses the port MTU).
    pub path_mtu: Mtu,
    /// Q_Key of a UD QP: incoming UD sends must carry it.
    pub qkey: u32,
    /// First PSN the responder expects (24 bits; higher bits are ignored).
    pub rq_psn: u32,
    /// First PSN the requester sends (24 bits; higher bits are ignored).
    pub sq_psn: u32,
    /// QP number of the remote QP (RC/UC).
    pub dest_qp_num: u32,
    /// Remote operations the responder allows (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
    pub qp_access_flags: Access,
    /// Only index 0 (P_Key 0xffff) exists.
    pub pkey_index: u16,
    /// Only port 1 exists.
    pub port_num: u8,
    /// The path to the remote QP (RC/UC).
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
    /// Accepted and stored; no asynchronous event is generated.
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
    /// Transport service.
    pub qp_type: QpType,
    /// Completion queue of send WRs.
    pub send_cq: CqId,
    /// Completion queue of receive WRs.
    pub recv_cq: CqId,
    /// Queue sizes.
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
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm,
    /// SEND that invalidates `invalidate_rkey` at the responder.
    SendWithInv,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA WRITE with immediate data (consumes a receive WQE remotely).
    RdmaWriteWithImm,
    /// RDMA READ.
    RdmaRead,
    /// 64-bit compare-and-swap at `remote_addr`: swap in `swap` if it equals `compare_add`.
    AtomicCmpSwp,
    /// 64-bit fetch-and-add of `compare_add` at `remote_addr`.
    AtomicFetchAdd,
    /// Binds the memory window of `bind_mw` (a local operation: no packet).
    BindMw,
    /// Unbinds the type 2 memory window whose R_Key is `invalidate_rkey` (local).
    LocalInv,
    /// Atomic write (RC only; IBA 1.5): the 8 bytes `compare_add.to_ne_bytes()` stored at
    /// once at the 8-byte aligned `remote_addr` (`ibv_wr_atomic_write`). It carries its
    /// value itself: the gather list is ignored. The peer needs REMOTE_WRITE on the QP
    /// and the region; completes as [`WcOpcode::AtomicWrite`].
    AtomicWrite,
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
    /// True for operations on this endpoint's own memory table that send nothing.
    pub const fn is_local(self) -> bool {
        matches!(self, WrOpcode::BindMw | WrOpcode::LocalInv)
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
    /// Path to the destination.
    pub av: AddressVector,
    /// Destination QP number.
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
    /// Caller's identifier, returned in the work completion.
    pub wr_id: u64,
    /// What the WR does.
    pub opcode: WrOpcode,
    /// Local memory to send from (READ/atomics: to place results in).
    pub sg_list: Vec<Sge>,
    /// Signaled, fenced, inline, solicited.
    pub flags: SendFlags,
    /// Immediate data for *_WITH_IMM, in the byte order it goes on the wire.
    pub imm_data: u32,
    /// R_Key to invalidate for `SendWithInv` (at the responder) and `LocalInv` (here).
    pub invalidate_rkey: u32,
    /// Remote address for RDMA and atomics.
    pub remote_addr: u64,
    /// R_Key of the remote memory for RDMA and atomics.
    pub rkey: u32,
    /// Compare value (CmpSwp), addend (FetchAdd), or the value of an AtomicWrite (its
    /// bytes in memory order).
    pub compare_add: u64,
    /// Swap value (CmpSwp).
    pub swap: u64,
    /// UD destination; required on UD QPs, ignored elsewhere.
    pub ud: Option<UdDest>,
    /// The bind of a `BindMw` work request.
    pub bind_mw: Option<MwBind>,
}

impl SendWr {
    /// A signaled BIND_MW work request carrying `bind`.
    pub fn bind_mw(wr_id: u64, bind: MwBind) -> SendWr {
        SendWr {
            wr_id,
            opcode: WrOpcode::BindMw,
            flags: SendFlags::SIGNALED,
            bind_mw: Some(bind),
            ..Default::default()
        }
    }
}

/// A receive work request (ibv_recv_wr).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Caller's identifier, returned in the work completion.
    pub wr_id: u64,
    /// Local memory to place the incoming message in.
    pub sg_list: Vec<Sge>,
}

/// Work completion status (ibv_wc_status, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Completed successfully.
    Success = 0,
    /// Local length error: the message did not fit.
    LocLenErr = 1,
    /// Local QP operation error.
    LocQpOpErr = 2,
    /// Local EE context operation error (unused).
    LocEecOpErr = 3,
    /// Local protection error: a bad lkey or range.
    LocProtErr = 4,
    /// Flushed: the QP entered ERR first.
    WrFlushErr = 5,
    /// Memory window bind error: a bind or local invalidation the spec forbids.
    MwBindErr = 6,
    /// Bad response: unexpected opcode or length.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// Remote invalid request error.
    RemInvReqErr = 9,
    /// Remote access error: a bad R_Key, range or right.
    RemAccessErr = 10,
    /// Remote operational error.
    RemOpErr = 11,
    /// Transport retries exhausted.
    RetryExcErr = 12,
    /// RNR retries exhausted.
    RnrRetryExcErr = 13,
    /// Local RDD violation (unused).
    LocRddViolErr = 14,
    /// Remote invalid RD request.
    RemInvRdReqErr = 15,
    /// Remote aborted (unused).
    RemAbortErr = 16,
    /// Invalid EE context number (unused).
    InvEecnErr = 17,
    /// Invalid EE context state (unused).
    InvEecStateErr = 18,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout.
    RespTimeoutErr = 20,
    /// Other error.
    GeneralErr = 21,
}

/// Work completion opcode (ibv_wc_opcode, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A send WR (SEND variants).
    Send = 0,
    /// An RDMA WRITE.
    RdmaWrite = 1,
    /// An RDMA READ.
    RdmaRead = 2,
    /// A compare-and-swap.
    CompSwap = 3,
    /// A fetch-and-add.
    FetchAdd = 4,
    /// A memory window bind.
    BindMw = 5,
    /// A local invalidation.
    LocalInv = 6,
    /// An atomic write.
    AtomicWrite = 9,
    /// A received SEND.
    Recv = 128,
    /// A received RDMA WRITE with immediate data.
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
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
        }
    }
}

flags! {
    /// Work completion flags (ibv_wc_flags, same bit values).
    WcFlags: u32 {
        /// The first 40 bytes of a UD receive buffer hold the GRH (or IPv4 header).
        GRH = 1 << 0;
        /// `imm_data` is valid.
        WITH_IMM = 1 << 1;
        /// `invalidated_rkey` is valid.
        WITH_INV = 1 << 3;
    }
}

/// A work completion (ibv_wc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What kind of work request it was.
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
    /// Which optional fields are valid (IMM, INV, GRH).
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

/// An asynchronous event: something that happened to a QP or CQ outside any call
/// (`ibv_async_event`; the kinds ferroce raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// The QP moved to the error state by itself: retries exhausted, a NAK or error
    /// response, a request the responder refused (`IBV_EVENT_QP_FATAL`).
    QpFatal(u32),
    /// A completion queue overflowed: completions were lost (`IBV_EVENT_CQ_ERR`).
    CqErr(CqId),
    /// The port's link came up (`IBV_EVENT_PORT_ACTIVE`). Raised by the layer that owns
    /// the link, never by the transport.
    PortActive,
    /// The port's link went down (`IBV_EVENT_PORT_ERR`); raised like [`PortActive`].
    ///
    /// [`PortActive`]: AsyncEvent::PortActive
    PortErr,
    /// The port's interface left for good (deleted, or moved to another network
    /// namespace): the device can never carry traffic again and should be closed
    /// (`IBV_EVENT_DEVICE_FATAL`, as rxe reports when its netdev is unregistered). Raised
    /// once, after [`PortErr`], like [`PortActive`].
    ///
    /// [`PortErr`]: AsyncEvent::PortErr
    /// [`PortActive`]: AsyncEvent::PortActive
    DeviceFatal,
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

//! What the connection manager tells its user, and how it refuses calls and MADs.

use std::net::Ipv6Addr;

use ferroce_wire::cm::{RejReason, Rep, Req, SidrRep, SidrReq};

/// A connection's local communication ID: random, so that an off-path peer cannot name
/// (and so end or hijack) another's connection.
pub type CommId = u32;

/// Something that happened to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service this CM listens on. Answer with `accept` or `reject`.
    ConnectRequest {
        /// The new connection.
        id: CommId,
        /// The requester's GID.
        from: Ipv6Addr,
        /// The request: the requester's QPN, starting PSN, resources, private data.
        req: Box<Req>,
    },
    /// The REP to this side's REQ. Bring the QP to RTR and RTS with its values, then call
    /// `ready` (which sends the RTU).
    Reply {
        /// The connection.
        id: CommId,
        /// The reply: the responder's QPN, starting PSN, resources, private data.
        rep: Box<Rep>,
    },
    /// The passive side got the RTU: the connection is up.
    Established {
        /// The connection.
        id: CommId,
    },
    /// The peer refused (a REJ). The connection is gone.
    Rejected {
        /// The connection.
        id: CommId,
        /// The peer's reason.
        reason: RejReason,
        /// The first bytes of the REJ's private data.
        private_data: Vec<u8>,
    },
    /// The peer never answered a REQ or REP after every resend. The connection is gone
    /// (a REJ with reason "timeout" told the peer).
    Unreachable {
        /// The connection.
        id: CommId,
    },
    /// A SIDR REQ for a service this CM listens on: which UD QP serves it? Answer with
    /// `sidr_reply`.
    SidrRequest {
        /// The request.
        id: CommId,
        /// The requester's GID.
        from: Ipv6Addr,
        /// The request (rdma_cm's IP header at the start of its private data).
        req: Box<SidrReq>,
    },
    /// The answer to this side's SIDR REQ (its status says whether it is a QP and Q_Key).
    SidrReply {
        /// The request.
        id: CommId,
        /// The reply.
        rep: Box<SidrRep>,
    },
    /// A connect request went unanswered by the user for as long as the CM would have
    /// resent it (response timeout × (retries + 1)): refused with a REJ (timeout) and
    /// forgotten.
    RequestExpired {
        /// The connection.
        id: CommId,
    },
    /// The peer asked to disconnect (a DREQ). Move the QP to error and call `disconnect`,
    /// which answers with the DREP.
    DisconnectRequest {
        /// The connection.
        id: CommId,
    },
    /// This side's DREQ was answered (or went unanswered to the end): the connection is in
    /// time-wait, its QP number not to be reused until `TimewaitExit`.
    Disconnected {
        /// The connection.
        id: CommId,
        /// Whether the peer answered (its DREP, or its own DREQ crossing this side's);
        /// false when every resend of the DREQ went unanswered (rdma_cm's DISCONNECTED
        /// then carries -ETIMEDOUT).
        answered: bool,
    },
    /// Time-wait is over: the connection is forgotten.
    TimewaitExit {
        /// The connection.
        id: CommId,
    },
}

/// Why a call on the connection manager was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// No connection has this ID (it ended, or never was).
    UnknownId,
    /// The connection's state does not allow the call (e.g. `accept` on the active side).
    WrongState,
    /// More private data than the message carries.
    PrivateDataTooLong {
        /// What the message holds.
        max: usize,
    },
    /// Something listens on this service ID already.
    ServiceInUse,
    /// The table of connections is full.
    TooManyConnections,
}

impl core::fmt::Display for CmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmError::UnknownId => write!(f, "no such connection"),
            CmError::WrongState => write!(f, "not allowed in the connection's state"),
            CmError::PrivateDataTooLong { max } => {
                write!(
                    f,
                    "private data longer than the {max} bytes the message holds"
                )
            }
            CmError::ServiceInUse => write!(f, "service ID already has a listener"),
            CmError::TooManyConnections => write!(f, "too many connections"),
        }
    }
}

impl std::error::Error for CmError {}

/// Why a received MAD changed nothing (each is counted; none is answered but as said).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not a CM message this CM reads (the wire layer's reason).
    Malformed(ferroce_wire::Error),
    /// It names a communication ID no connection has.
    UnknownCommId,
    /// It came from another GID than the connection's peer.
    Spoofed,
    /// A resend of a message already handled (answered again where IBA says so).
    Duplicate,
    /// The connection's state does not take this message.
    WrongState,
    /// A DREQ naming another QP than the connection's.
    QpnMismatch,
    /// A REQ this CM refused with a REJ (the reason is in the REJ it sent).
    Refused(RejReason),
    /// This CM's own REQ, come back (a shared interface, or lo, returns what it sends).
    Own,
    /// A REQ (or SIDR REQ) for a service nobody here listens on, left for another
    /// process's CM on a shared interface (see `Cm::set_served_elsewhere`).
    NoListener,
    /// A SIDR REQ this CM refused with a SIDR REP of this status.
    RefusedSidr(ferroce_wire::cm::SidrStatus),
}

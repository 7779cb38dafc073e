//! Errors the verbs-level API returns. Packet-level problems never surface here: they
//! are counted (see [`crate::Counters`]) and answered on the wire as the IB spec says.

use core::fmt;

use crate::verbs::{QpAttrMask, QpState};

/// Why a verbs call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No such protection domain.
    InvalidPd,
    /// The protection domain still has regions or QPs.
    PdInUse,
    /// No such completion queue.
    InvalidCq,
    /// The completion queue is still used by a QP.
    CqInUse,
    /// No such shared receive queue.
    InvalidSrq,
    /// The SRQ is still used by a QP.
    SrqInUse,
    /// No such QP.
    InvalidQp(u32),
    /// No such memory region key.
    InvalidKey(u32),
    /// The memory region has memory windows bound to it.
    MrInUse,
    /// No such memory window.
    InvalidMw,
    /// An access flag combination verbs refuses (remote write/atomic need local write).
    InvalidAccess,
    /// The requested state change is not in the QP state table.
    InvalidTransition {
        /// The QP's state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// The transition requires these attributes and the mask lacks them.
    MissingAttr(QpAttrMask),
    /// The mask names attributes the transition does not allow.
    UnexpectedAttr(QpAttrMask),
    /// An attribute value is out of range; the name says which.
    InvalidAttr(&'static str),
    /// A congestion control parameter is out of range; the text says which.
    InvalidDcqcn(&'static str),
    /// `CUR_STATE` was given and is not the QP's state.
    StateMismatch {
        /// The state the caller gave as current.
        expected: QpState,
        /// The QP's actual state.
        actual: QpState,
    },
    /// The QP cannot take work requests in this state.
    InvalidState(QpState),
    /// The work queue is full.
    QueueFull,
    /// More scatter/gather elements than the QP's capability.
    TooManySge,
    /// Inline data larger than `max_inline_data`.
    InlineTooLarge,
    /// The work request is invalid for this QP; the text says why.
    InvalidWr(&'static str),
    /// A message longer than the transport allows (2^31 bytes; one MTU on UD).
    MessageTooLarge,
    /// A feature ferroce does not implement.
    Unsupported(&'static str),
    /// A limit on objects (QPs, regions, CQs) was reached.
    OutOfResources,
    /// No free QP number in the blocks this endpoint owns (see
    /// [`Endpoint::add_qpn_block`](crate::Endpoint::add_qpn_block)).
    NoQpn,
    /// A byte range outside the memory region it names.
    OutOfBounds {
        /// Offset into the region.
        offset: u64,
        /// Length of the range.
        len: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidPd => write!(f, "invalid protection domain"),
            Error::PdInUse => write!(f, "protection domain in use"),
            Error::InvalidCq => write!(f, "invalid completion queue"),
            Error::CqInUse => write!(f, "completion queue in use"),
            Error::InvalidSrq => write!(f, "invalid shared receive queue"),
            Error::SrqInUse => write!(f, "shared receive queue in use by a QP"),
            Error::InvalidQp(n) => write!(f, "no QP {n:#x}"),
            Error::InvalidKey(k) => write!(f, "no memory region with key {k:#x}"),
            Error::MrInUse => write!(f, "memory region has memory windows bound to it"),
            Error::InvalidMw => write!(f, "no such memory window"),
            Error::InvalidAccess => write!(f, "invalid access flags"),
            Error::InvalidTransition { from, to } => {
                write!(f, "invalid QP transition {from:?} -> {to:?}")
            }
            Error::MissingAttr(m) => write!(f, "missing required QP attributes {:#x}", m.0),
            Error::UnexpectedAttr(m) => write!(f, "QP attributes {:#x} not allowed here", m.0),
            Error::InvalidAttr(a) => write!(f, "invalid QP attribute {a}"),
            Error::InvalidDcqcn(a) => write!(f, "invalid DCQCN parameter {a}"),
            Error::StateMismatch { expected, actual } => {
                write!(f, "QP is in {actual:?}, not {expected:?}")
            }
            Error::InvalidState(s) => write!(f, "QP state {s:?} does not allow this"),
            Error::QueueFull => write!(f, "work queue full"),
            Error::TooManySge => write!(f, "too many scatter/gather elements"),
            Error::InlineTooLarge => write!(f, "inline data too large"),
            Error::InvalidWr(w) => write!(f, "invalid work request: {w}"),
            Error::MessageTooLarge => write!(f, "message too large"),
            Error::Unsupported(w) => write!(f, "unsupported: {w}"),
            Error::OutOfResources => write!(f, "out of resources"),
            Error::NoQpn => write!(f, "no free QP number in this process's blocks"),
            Error::OutOfBounds { offset, len } => {
                write!(f, "{len} bytes at offset {offset} are outside the region")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result alias of the verbs API.
pub type Result<T> = core::result::Result<T, Error>;

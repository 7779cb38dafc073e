//! ferroce-transport: a sans-IO InfiniBand transport (RC, UC, UD) for RoCE v2.
//!
//! In the style of quinn-proto: no sockets, threads or clocks. The application feeds
//! received IP datagrams to [`Endpoint::handle_packet`], drains datagrams to send with
//! [`Endpoint::poll_transmit`], and drives timers with [`Endpoint::poll_timeout`] /
//! [`Endpoint::handle_timeout`], passing the current [`Instant`] in.
//!
//! The verbs surface (PDs, MRs, CQs, QPs, work requests and completions) mirrors
//! libibverbs; the wire behaviour follows the IB spec and Linux rxe.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod completer;
mod counters;
mod cq;
mod endpoint;
mod error;
mod mr;
mod qp;
mod requester;
mod responder;
mod time;
mod tx;
mod verbs;

#[doc(hidden)]
pub mod testing;

pub use counters::Counters;
pub use endpoint::{
    Endpoint, EndpointConfig, Transmit, FIRST_QPN, HOP_LIMIT, MAX_CQE, MAX_INLINE, MAX_SGE, MAX_WR,
};
pub use error::{Error, Result};
pub use mr::{Access, MrError, MrInfo};
pub use qp::{rc_src_port, ud_src_port, MAX_RD_ATOMIC};
pub use time::Instant;
pub use tx::MAX_DATAGRAM_LEN;
pub use verbs::{
    AddressVector, CqId, Mtu, PdId, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    SendFlags, SendWr, Sge, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

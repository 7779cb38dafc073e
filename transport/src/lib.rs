//! ferroce-transport: a sans-IO InfiniBand transport (RC, UC, UD) for RoCE v2.
//!
//! In the style of quinn-proto: no sockets, threads or clocks. The application feeds
//! received IP datagrams to [`Endpoint::handle_packet`], drains datagrams to send with
//! [`Endpoint::poll_transmit`], and drives timers with [`Endpoint::poll_timeout`] /
//! [`Endpoint::handle_timeout`], passing the current [`Instant`] in.
//!
//! The verbs surface (PDs, MRs, CQs, QPs, work requests and completions) mirrors
//! libibverbs; the wire behaviour follows the IB spec and Linux rxe.
//!
//! ```
//! use ferroce_transport::testing::{connect, QpOpts, Sim};
//! use ferroce_transport::{Access, Instant, RecvWr, SendFlags, SendWr, Sge, WrOpcode};
//!
//! // Two endpoints with RC QPs brought up to RTS (see `testing::bring_up` for the
//! // modify_qp calls).
//! let mut sim = Sim::new(1, 2, false);
//! let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
//! let src = sim.nodes[0].reg_mr_with(a.pd, b"hello".to_vec(), None, Access::empty())?;
//! let dst = sim.nodes[1].reg_mr(b.pd, 5, Access::LOCAL_WRITE)?;
//! let sge = |m: &ferroce_transport::MrInfo| Sge { addr: m.addr, length: 5, lkey: m.lkey };
//! sim.nodes[1].post_recv(sim.now, b.qpn, &RecvWr { wr_id: 2, sg_list: vec![sge(&dst)] })?;
//! let wr = SendWr {
//!     wr_id: 1,
//!     opcode: WrOpcode::Send,
//!     sg_list: vec![sge(&src)],
//!     flags: SendFlags::SIGNALED,
//!     ..Default::default()
//! };
//! sim.nodes[0].post_send(sim.now, a.qpn, &wr)?;
//!
//! // The I/O loop an application runs: datagrams out of one endpoint into the other.
//! let now = Instant::from_nanos(0);
//! let mut buf = vec![0; ferroce_transport::MAX_DATAGRAM_LEN];
//! for _ in 0..2 {
//!     for (from, to) in [(0, 1), (1, 0)] {
//!         while let Some(t) = sim.nodes[from].poll_transmit(now, &mut buf) {
//!             sim.nodes[to].handle_packet(now, &buf[..t.len]);
//!         }
//!     }
//! }
//! let mut wcs = Vec::new();
//! sim.nodes[0].poll_cq(a.cq, &mut wcs, 8);
//! sim.nodes[1].poll_cq(b.cq, &mut wcs, 8);
//! assert_eq!(wcs.len(), 2);
//! assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), ferroce_transport::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]
#![warn(missing_docs)]

pub mod cm;
mod counters;
mod cq;
mod dcqcn;
mod endpoint;
mod error;
mod flags;
mod mcast;
mod memory;
mod mr;
mod qp;
mod qpn;
mod random;
mod schedule;
mod sge;
mod srq;
mod time;
mod tx;
mod verbs;

#[doc(hidden)]
pub mod testing;

pub use counters::Counters;
pub use dcqcn::{DcqcnConfig, DcqcnState, ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT};
pub use endpoint::{
    Endpoint, EndpointConfig, Transmit, FIRST_QPN, HOP_LIMIT, MAX_CQE, MAX_INLINE, MAX_SGE, MAX_WR,
};
pub use error::{Error, Result};
pub use mcast::{is_multicast_gid, MAX_GROUPS, MAX_QPS_PER_GROUP, MULTICAST_QPN};
pub use memory::{in_bounds, AtomicOp, OwnedMemory, RegionMemory};
pub use mr::{next_rkey, Access, MrError, MrInfo, MwBind, MwId, MwType};
pub use qp::{ack_timeout, rc_src_port, ud_src_port, GID_FAMILIES, MAX_RD_ATOMIC};
pub use qpn::{qpn_block, QPN_BLOCKS, QPN_BLOCK_BITS, QPN_BLOCK_SIZE};
pub use random::{seeded_fill, FillRandom};
pub use time::Instant;
pub use tx::MAX_DATAGRAM_LEN;
pub use verbs::{
    AddressVector, AsyncEvent, CqId, Mtu, PdId, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr, SrqId, UdDest, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

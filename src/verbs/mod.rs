//! A safe, verbs-like API: devices, contexts, protection domains, memory regions,
//! completion queues, queue pairs and address handles.
//!
//! Each object holds the device's driver alive; dropping the last one stops its thread.
//!
//! ```
//! use ferroce::verbs::*;
//! // Two devices joined by an in-memory wire (no privileges needed).
//! let (a, b) = Context::memory_pair()?;
//! let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
//! let mr_a = pd_a.reg_mr(64, Access::LOCAL_WRITE)?;
//! let mr_b = pd_b.reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let qp_a = pd_a.create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())?;
//! let qp_b = pd_b.create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())?;
//! qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 0, 0))?;
//! qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 0, 0))?;
//! mr_a.write(0, b"hello, RDMA")?;
//! qp_a.post_send(&wr::rdma_write(1, mr_a.sge(0, 11), mr_b.addr(), mr_b.rkey()))?;
//! let wc = cq_a.wait_one(std::time::Duration::from_secs(5)).expect("completion");
//! assert_eq!(wc.status, WcStatus::Success);
//! assert_eq!(&mr_b.to_vec()[..11], b"hello, RDMA");
//! # Ok::<(), ferroce::verbs::Error>(())
//! ```

mod channel;
mod context;
mod cq;
mod device;
mod error;
mod mr;
mod mw;
mod pd;
mod qp;
mod random;
pub mod wr;

pub use channel::CompletionChannel;
pub use context::{Context, DeviceAttr, WeakContext};
pub use cq::CompletionQueue;
pub use device::Device;
pub use error::Error;
pub use mr::{BorrowedRegion, MemoryRegion, RawRegion, RegionScope};
pub use mw::MemoryWindow;
pub use pd::{AddressHandle, ProtectionDomain, SharedReceiveQueue};
pub use qp::{QueuePair, RcPath};
pub(crate) use random::os_random;
pub use random::random_psn;

pub use crate::driver::AsyncEventSink;
pub use ferroce_transport::{
    next_rkey, Access, AddressVector, AsyncEvent, CqId, Mtu, MwBind, MwId, MwType, QpAttr,
    QpAttrMask, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

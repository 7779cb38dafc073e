//! Protection domains, memory regions and address handles.

use std::time::Duration;

use ferroce_transport::{
    AddressVector, PdId, QpCap, QpInitAttr, QpType, RecvWr, SrqAttr, SrqId, UdDest,
};

use crate::net::gid::addr_of;

use super::{CompletionQueue, Context, Error, QueuePair};

/// How long to wait for a peer's MAC address (ARP/ND) before giving up.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// A protection domain: memory regions and QPs of one PD may be used together only.
#[derive(Debug)]
pub struct ProtectionDomain {
    ctx: Context,
    id: PdId,
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: Context, id: PdId) -> Self {
        ProtectionDomain { ctx, id }
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The protection domain's id in the transport.
    pub(crate) fn id(&self) -> PdId {
        self.id
    }

    /// Whether regions, QPs or shared receive queues still use this PD: dropping it
    /// now would leave it allocated until the device closes.
    pub fn in_use(&self) -> bool {
        self.ctx.shared().endpoint().pd_in_use(self.id)
    }

    /// Allocates a memory window of `kind` in this PD.
    pub fn alloc_mw(&self, kind: ferroce_transport::MwType) -> Result<super::MemoryWindow, Error> {
        super::MemoryWindow::alloc(self, kind)
    }

    /// Creates a QP of `qp_type` on the given CQs.
    pub fn create_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        qp_type: QpType,
        cap: QpCap,
    ) -> Result<QueuePair, Error> {
        self.create_qp_on_srq(send_cq, recv_cq, qp_type, cap, None)
    }

    /// Creates a QP that receives from `srq` (when given) instead of its own queue.
    pub fn create_qp_on_srq(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        qp_type: QpType,
        cap: QpCap,
        srq: Option<&SharedReceiveQueue>,
    ) -> Result<QueuePair, Error> {
        self.create_qp_with(send_cq, recv_cq, qp_type, cap, srq, false)
    }

    /// Creates a QP with every `ibv_create_qp` option: its shared receive queue, and
    /// `sq_sig_all` (every send completes, whatever its SIGNALED flag says).
    pub fn create_qp_with(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        qp_type: QpType,
        cap: QpCap,
        srq: Option<&SharedReceiveQueue>,
        sq_sig_all: bool,
    ) -> Result<QueuePair, Error> {
        let init = QpInitAttr {
            qp_type,
            send_cq: send_cq.id(),
            recv_cq: recv_cq.id(),
            cap,
            sq_sig_all,
            srq: srq.map(|s| s.id),
        };
        let qpn = self.ctx.shared().create_qp(self.id, init)?;
        Ok(QueuePair::new(self.ctx.clone(), qpn, qp_type))
    }

    /// Creates the device's general services QP: the UD QP numbered 1 where the
    /// communication manager's MADs arrive and leave (see [`crate::cm`]). One per device;
    /// bring it up like any UD QP, with the GSI's Q_Key
    /// ([`ferroce_wire::mad::GSI_QKEY`]).
    pub fn create_gsi_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        cap: QpCap,
    ) -> Result<QueuePair, Error> {
        let init = QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: send_cq.id(),
            recv_cq: recv_cq.id(),
            cap,
            sq_sig_all: false,
            srq: None,
        };
        let qpn = self.ctx.shared().create_gsi_qp(self.id, init)?;
        Ok(QueuePair::new(self.ctx.clone(), qpn, QpType::Ud))
    }

    /// A shared receive queue of `max_wr` WRs of up to `max_sge` elements each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue, Error> {
        let id = self.ctx.shared().endpoint().create_srq(
            self.id,
            SrqAttr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        )?;
        Ok(SharedReceiveQueue {
            ctx: self.ctx.clone(),
            id,
        })
    }

    /// An address handle for UD sends: resolves the destination's MAC address now.
    pub fn create_ah(&self, av: AddressVector) -> Result<AddressHandle, Error> {
        self.ctx
            .shared()
            .resolve(addr_of(av.dest_gid), RESOLVE_TIMEOUT)?;
        Ok(AddressHandle { av })
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // Fails while MRs or QPs still use the PD; they are freed with the device then.
        let _ = self.ctx.shared().endpoint().dealloc_pd(self.id);
    }
}

/// A UD destination whose path has been resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    av: AddressVector,
}

impl AddressHandle {
    /// The address vector.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The UD destination for a send to `qpn` with `qkey`.
    pub fn dest(&self, qpn: u32, qkey: u32) -> UdDest {
        UdDest {
            av: self.av,
            dest_qpn: qpn,
            qkey,
        }
    }
}

/// A shared receive queue: QPs created on it take their receive WQEs from here.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    ctx: Context,
    id: SrqId,
}

impl SharedReceiveQueue {
    /// Posts a receive work request (ibv_post_srq_recv).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), Error> {
        // The transport's clock, as the driver passes it to handle_packet.
        let now = self.ctx.shared().now();
        let mut ep = self.ctx.shared().endpoint();
        ep.post_srq_recv(now, self.id, wr)?;
        self.ctx.shared().kick_recv(ep);
        Ok(())
    }

    /// Receive WQEs waiting in the queue.
    pub fn len(&self) -> usize {
        self.ctx
            .shared()
            .endpoint()
            .query_srq(self.id)
            .map(|(_, n)| n)
            .unwrap_or(0)
    }

    /// True when no receive WQE is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // Fails while QPs still use it; it is freed with the device then.
        let _ = self.ctx.shared().endpoint().destroy_srq(self.id);
    }
}

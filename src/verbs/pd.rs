//! Protection domains, memory regions and address handles.

use std::time::Duration;

use ferroce_transport::{
    Access, AddressVector, PdId, QpCap, QpInitAttr, QpType, RecvWr, Sge, SrqAttr, SrqId, UdDest,
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

    /// Registers a new zeroed region of `len` bytes.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<MemoryRegion, Error> {
        self.reg_mr_with(vec![0; len], access)
    }

    /// Registers `buf` (ownership moves to the device; [`MemoryRegion::into_vec`] gives it back).
    pub fn reg_mr_with(&self, buf: Vec<u8>, access: Access) -> Result<MemoryRegion, Error> {
        let info = self
            .ctx
            .shared()
            .endpoint()
            .reg_mr_with(self.id, buf, None, access)?;
        Ok(MemoryRegion {
            ctx: self.ctx.clone(),
            lkey: info.lkey,
            rkey: info.rkey,
            addr: info.addr,
            len: info.len as usize,
            live: true,
        })
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
        let init = QpInitAttr {
            qp_type,
            send_cq: send_cq.id(),
            recv_cq: recv_cq.id(),
            cap,
            sq_sig_all: false,
            srq: srq.map(|s| s.id),
        };
        let qpn = self.ctx.shared().endpoint().create_qp(self.id, init)?;
        Ok(QueuePair::new(self.ctx.clone(), qpn, qp_type))
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

/// A registered memory region. Its bytes live in the device; read and write them through
/// these methods, which lock out the driver while they copy.
#[derive(Debug)]
pub struct MemoryRegion {
    ctx: Context,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    live: bool,
}

impl MemoryRegion {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// The region's first virtual address (what a peer puts in RETH).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A scatter/gather element covering `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr + offset as u64,
            length: len as u32,
            lkey: self.lkey,
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                region: self.len,
            }),
        }
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.check(offset, data.len())?;
        let mut ep = self.ctx.shared().endpoint();
        let bytes = ep
            .mr_bytes_mut(self.lkey)
            .ok_or(ferroce_transport::Error::InvalidKey(self.lkey))?;
        bytes[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes at `offset` out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.check(offset, out.len())?;
        let ep = self.ctx.shared().endpoint();
        let bytes = ep
            .mr_bytes(self.lkey)
            .ok_or(ferroce_transport::Error::InvalidKey(self.lkey))?;
        out.copy_from_slice(&bytes[offset..offset + out.len()]);
        Ok(())
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        let ep = self.ctx.shared().endpoint();
        ep.mr_bytes(self.lkey)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// Runs `f` on the region's bytes with the driver locked out (no copy).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let ep = self.ctx.shared().endpoint();
        f(ep.mr_bytes(self.lkey).unwrap_or_default())
    }

    /// Deregisters the region and returns its bytes.
    pub fn into_vec(mut self) -> Result<Vec<u8>, Error> {
        self.live = false;
        Ok(self.ctx.shared().endpoint().dereg_mr(self.lkey)?)
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.live {
            let _ = self.ctx.shared().endpoint().dereg_mr(self.lkey);
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
        self.ctx.shared().kick(ep);
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

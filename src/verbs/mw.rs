//! Memory windows: a narrower, revocable remote key over part of a region, bound by a
//! work request (see `ferroce_transport::MwBind` for the two types' rules).

use ferroce_transport::{Access, MwBind, MwId, MwType, SendWr};

use super::{Context, Error, ProtectionDomain};

/// A memory window of a protection domain. Dropping it frees it: its key stops working
/// at once, bound or not.
#[derive(Debug)]
pub struct MemoryWindow {
    ctx: Context,
    id: MwId,
    kind: MwType,
}

impl MemoryWindow {
    pub(crate) fn alloc(pd: &ProtectionDomain, kind: MwType) -> Result<Self, Error> {
        let (id, _) = pd.context().shared().endpoint().alloc_mw(pd.id(), kind)?;
        Ok(MemoryWindow {
            ctx: pd.context().clone(),
            id,
            kind,
        })
    }

    /// The window's id in the transport (what a bind names).
    pub fn id(&self) -> MwId {
        self.id
    }

    /// Type 1 or type 2.
    pub fn kind(&self) -> MwType {
        self.kind
    }

    /// The window's current remote key (a bind changes its low 8 bits).
    pub fn rkey(&self) -> u32 {
        self.ctx
            .shared()
            .endpoint()
            .mw_info(self.id)
            .map_or(0, |(_, _, rkey)| rkey)
    }

    /// A signaled BIND_MW work request: after it completes, `next_rkey`'s key byte
    /// with this window's index opens `len` bytes at `addr` (an address of the region
    /// `mr_lkey`) with the remote rights in `access`. Length 0 unbinds a type 1 window.
    pub fn bind_wr(
        &self,
        wr_id: u64,
        next_rkey: u32,
        mr_lkey: u32,
        addr: u64,
        len: u64,
        access: Access,
    ) -> SendWr {
        SendWr::bind_mw(
            wr_id,
            MwBind {
                mw: self.id,
                rkey: next_rkey,
                mr_lkey,
                addr,
                len,
                access,
            },
        )
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        let _ = self.ctx.shared().endpoint().dealloc_mw(self.id);
    }
}

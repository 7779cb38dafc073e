//! Memory regions: what the device sees of memory the application owns.
//!
//! Three kinds, one registration underneath:
//! - [`MemoryRegion<B>`]: a buffer moved into the region (`Vec<u8>` by default, any
//!   `AsMut<[u8]>` buffer), given back by [`MemoryRegion::into_inner`]. Its bytes sit
//!   behind the region's own lock: reading them after a completion never waits for the
//!   device.
//! - [`BorrowedRegion`]: a `&mut [u8]` lent for a [`ProtectionDomain::scope`]; the scope
//!   deregisters it before the borrow ends, whatever the closure does.
//! - [`RawRegion`]: (address, length) memory registered with `unsafe`, for the C ABI.
//!
//! The transport copies straight between frames and these buffers.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use ferroce_transport::{Access, MrInfo, OwnedMemory, RegionMemory, Sge};

use crate::memory::RawMemory;

use super::{Context, Error, ProtectionDomain};

/// The registration every kind of region shares: keys, address, and deregistration when
/// dropped.
#[derive(Debug)]
struct Registration {
    ctx: Context,
    info: MrInfo,
    live: bool,
}

impl Registration {
    fn new(
        pd: &ProtectionDomain,
        mem: Arc<dyn RegionMemory>,
        iova: Option<u64>,
        access: Access,
    ) -> Result<Self, Error> {
        let info = pd
            .context()
            .shared()
            .endpoint()
            .reg_mr_memory(pd.id(), mem, iova, access)?;
        Ok(Registration {
            ctx: pd.context().clone(),
            info,
            live: true,
        })
    }

    /// Removes the region from the device: afterwards the driver never touches its memory.
    fn dereg(&mut self) -> Result<(), Error> {
        if std::mem::take(&mut self.live) {
            self.ctx.shared().endpoint().dereg_mr(self.info.lkey)?;
        }
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), Error> {
        match offset.checked_add(len) {
            Some(end) if end as u64 <= self.info.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                region: self.info.len as usize,
            }),
        }
    }

    fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            addr: self.info.addr.wrapping_add(offset as u64),
            length: len as u32,
            lkey: self.info.lkey,
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.dereg();
    }
}

/// Accessors every region kind has.
macro_rules! region_accessors {
    () => {
        /// Local key.
        pub fn lkey(&self) -> u32 {
            self.reg.info.lkey
        }
        /// Remote key.
        pub fn rkey(&self) -> u32 {
            self.reg.info.rkey
        }
        /// The region's first virtual address (what a peer puts in RETH).
        pub fn addr(&self) -> u64 {
            self.reg.info.addr
        }
        /// Length in bytes.
        pub fn len(&self) -> usize {
            self.reg.info.len as usize
        }
        /// True for a zero-length region.
        pub fn is_empty(&self) -> bool {
            self.reg.info.len == 0
        }
        /// A scatter/gather element covering `len` bytes at `offset`.
        pub fn sge(&self, offset: usize, len: usize) -> Sge {
            self.reg.sge(offset, len)
        }
        /// Whether a memory window is bound to the region: deregistering it fails
        /// until the window is unbound, invalidated or freed.
        pub fn has_windows(&self) -> bool {
            self.reg
                .ctx
                .shared()
                .endpoint()
                .mr_has_windows(self.reg.info.lkey)
        }
    };
}

/// A registered region over a buffer it owns. The buffer's bytes are behind the region's
/// own lock, not the device's: [`read`](Self::read), [`with_bytes`](Self::with_bytes) and
/// friends never wait for packet processing on other regions.
#[derive(Debug)]
pub struct MemoryRegion<B = Vec<u8>> {
    // Dropped first: the device lets go of the memory before the memory goes.
    reg: Registration,
    mem: Arc<OwnedMemory<B>>,
}

impl<B: AsRef<[u8]> + AsMut<[u8]> + Send + 'static> MemoryRegion<B> {
    pub(crate) fn register(
        pd: &ProtectionDomain,
        buf: B,
        iova: Option<u64>,
        access: Access,
    ) -> Result<Self, Error> {
        let mem = Arc::new(OwnedMemory::new(buf));
        let reg = Registration::new(pd, mem.clone(), iova, access)?;
        Ok(MemoryRegion { reg, mem })
    }

    region_accessors!();

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.reg.check(offset, data.len())?;
        self.mem.lock().as_mut()[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes at `offset` out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.reg.check(offset, out.len())?;
        out.copy_from_slice(&self.mem.lock().as_ref()[offset..offset + out.len()]);
        Ok(())
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        self.mem.lock().as_ref().to_vec()
    }

    /// Runs `f` on the region's bytes (no copy); the driver waits to touch this region
    /// until `f` returns.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.mem.lock().as_ref())
    }

    /// Runs `f` on the region's bytes, writable (no copy).
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(self.mem.lock().as_mut())
    }

    /// Deregisters the region and gives its buffer back.
    pub fn into_inner(self) -> Result<B, Error> {
        let MemoryRegion { mut reg, mem } = self;
        reg.dereg()?;
        // The device held the only other reference and dropped it on deregistration.
        Arc::try_unwrap(mem)
            .map(OwnedMemory::into_inner)
            .map_err(|_| {
                Error::Transport(ferroce_transport::Error::Unsupported(
                    "region memory still shared after deregistration",
                ))
            })
    }
}

impl MemoryRegion<Vec<u8>> {
    /// Deregisters the region and returns its bytes.
    pub fn into_vec(self) -> Result<Vec<u8>, Error> {
        self.into_inner()
    }
}

/// A region over memory registered with `unsafe` (address, length): the C ABI's
/// `ibv_reg_mr`. Dropping it deregisters the region and revokes the memory, after which
/// ferroce never touches it.
#[derive(Debug)]
pub struct RawRegion {
    reg: Registration,
    mem: Arc<RawMemory>,
}

impl RawRegion {
    region_accessors!();

    /// Deregisters the region; the memory is the caller's alone again.
    pub fn dereg(mut self) -> Result<(), Error> {
        self.reg.dereg()
    }
}

impl Drop for RawRegion {
    fn drop(&mut self) {
        let _ = self.reg.dereg();
        self.mem.revoke();
    }
}

impl ProtectionDomain {
    /// Registers a new zeroed region of `len` bytes.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<MemoryRegion, Error> {
        self.reg_mr_with(vec![0; len], access)
    }

    /// Registers `buf` in place: the region owns it until [`MemoryRegion::into_inner`]
    /// gives it back. Any byte buffer works (`Vec<u8>`, `Box<[u8]>`, a memory map).
    pub fn reg_mr_with<B>(&self, buf: B, access: Access) -> Result<MemoryRegion<B>, Error>
    where
        B: AsRef<[u8]> + AsMut<[u8]> + Send + 'static,
    {
        MemoryRegion::register(self, buf, None, access)
    }

    /// Registers `len` bytes at `addr`, addressed by peers as `iova` (`None`: `addr`
    /// itself, as `ibv_reg_mr` does).
    ///
    /// # Safety
    /// Until the returned region is dropped, `addr..addr + len` must stay one valid,
    /// writable allocation, not accessed through Rust references by anyone else. Other
    /// access (a C program's own loads and stores) is allowed: as on any RDMA device, the
    /// bytes of a buffer an operation is using are unspecified while it runs.
    pub unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: Access,
    ) -> Result<RawRegion, Error> {
        // SAFETY: forwarded to our caller's contract; `RawRegion`'s drop revokes the
        // memory, so no access outlives the region.
        let mem = unsafe { RawMemory::new(addr, len) }.ok_or(Error::OutOfBounds {
            offset: addr as usize,
            len,
            region: 0,
        })?;
        let mem = Arc::new(mem);
        let iova = iova.unwrap_or(addr as u64);
        let reg = Registration::new(self, mem.clone(), Some(iova), access)?;
        Ok(RawRegion { reg, mem })
    }

    /// Runs `f` with a scope in which Rust buffers can be registered in place, borrowed
    /// ([`RegionScope::reg_mr`]). Every region of the scope is deregistered before this
    /// returns — also if `f` panics or forgets a region — so the device never touches a
    /// buffer after its borrow ends.
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope RegionScope<'scope, 'env>) -> R,
    ) -> R {
        let scope = RegionScope {
            pd: self,
            regions: Mutex::new(Vec::new()),
            _scope: PhantomData,
        };
        let _end = ScopeEnd(&scope.regions);
        f(&scope)
    }
}

/// Regions registered in a scope, by key, with their memory (to revoke at the end).
type ScopeRegions = Mutex<Vec<(u32, Arc<RawMemory>, Context)>>;

/// Ends a scope: deregisters and revokes whatever is still registered.
struct ScopeEnd<'a>(&'a ScopeRegions);

impl Drop for ScopeEnd<'_> {
    fn drop(&mut self) {
        let regions = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for (lkey, mem, ctx) in regions {
            let _ = ctx.shared().endpoint().dereg_mr(lkey);
            mem.revoke();
        }
    }
}

/// Where borrowed buffers are registered; see [`ProtectionDomain::scope`].
#[derive(Debug)]
pub struct RegionScope<'scope, 'env: 'scope> {
    pd: &'env ProtectionDomain,
    regions: ScopeRegions,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<'scope, 'env> RegionScope<'scope, 'env> {
    /// Registers `buf` in place for the rest of the scope (or until the region is dropped).
    pub fn reg_mr(
        &'scope self,
        buf: &'env mut [u8],
        access: Access,
    ) -> Result<BorrowedRegion<'scope>, Error> {
        // SAFETY: `buf` is borrowed mutably for 'env, which outlives the scope, so nobody
        // else reaches it through a reference; the scope (or the region's drop, whichever
        // comes first) deregisters the region and revokes the memory before 'env ends.
        let mem =
            unsafe { RawMemory::new(buf.as_mut_ptr(), buf.len()) }.ok_or(Error::OutOfBounds {
                offset: 0,
                len: buf.len(),
                region: buf.len(),
            })?;
        let mem = Arc::new(mem);
        let mut reg = Registration::new(self.pd, mem.clone(), None, access)?;
        // The scope owns the deregistration from here on.
        reg.live = false;
        self.regions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((reg.info.lkey, mem.clone(), reg.ctx.clone()));
        Ok(BorrowedRegion {
            reg,
            mem,
            regions: &self.regions,
        })
    }
}

/// A Rust buffer registered in place for a [`ProtectionDomain::scope`].
#[derive(Debug)]
pub struct BorrowedRegion<'scope> {
    reg: Registration,
    mem: Arc<RawMemory>,
    regions: &'scope ScopeRegions,
}

impl BorrowedRegion<'_> {
    region_accessors!();

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.reg.check(offset, data.len())?;
        self.mem.write_at(offset, data);
        Ok(())
    }

    /// Copies bytes at `offset` out of the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.reg.check(offset, out.len())?;
        self.mem.read_at(offset, out);
        Ok(())
    }
}

impl Drop for BorrowedRegion<'_> {
    fn drop(&mut self) {
        let mut regions = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = regions
            .iter()
            .position(|(k, m, _)| *k == self.reg.info.lkey && Arc::ptr_eq(m, &self.mem))
        {
            regions.swap_remove(i);
            drop(regions);
            let _ = self
                .reg
                .ctx
                .shared()
                .endpoint()
                .dereg_mr(self.reg.info.lkey);
            self.mem.revoke();
        }
    }
}

//! The devices rdma_cm IDs bind to: each opened once per process, with its connection
//! manager (QP1), on first use. They stay open until the process ends, as rdma_cm keeps
//! its device contexts, or until their interface goes away: then the IDs on the device
//! hear RDMA_CM_EVENT_DEVICE_REMOVAL (see `super::device_removed`), and the device is
//! forgotten here, so that an interface made again under its name is opened afresh.

use std::ffi::c_int;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use ferroce::cm::ConnectionManager;
use ferroce::net::gid::gid_of;
use ferroce::verbs::{AsyncEventSink, Device};
use ferroce_transport::AsyncEvent;

use crate::context::ctx_of;
use crate::device::device_for;
use crate::ffi::{ibv_context, ibv_pd};
use crate::guard::errno_of;
use crate::per_process::PerProcess;

/// An open device and its connection manager.
pub(crate) struct CmDevice {
    pub name: String,
    /// Its interface's index.
    pub index: u32,
    /// The `ibv_context *` programs see as `cm_id->verbs`.
    ctx: usize,
    /// The device's PD, every ID's `pd` on it (as rdma_cm gives each device one; UCX
    /// finds the context through `cm_id->pd`).
    pd: usize,
    pub cm: ConnectionManager,
    /// Hears the device's DEVICE_FATAL (subscribed weakly, so held here).
    _removal: Arc<dyn AsyncEventSink>,
    /// Its interface is gone (set once, before its IDs hear of it).
    pub removed: AtomicBool,
}

/// Turns a device's DEVICE_FATAL (its interface left) into its removal from rdma_cm.
struct Removal {
    dev: Weak<CmDevice>,
}

impl AsyncEventSink for Removal {
    fn async_event(&self, event: AsyncEvent) {
        if event != AsyncEvent::DeviceFatal {
            return;
        }
        // Called by the driver thread, perhaps with the endpoint locked, where an ID's
        // lock must not be taken (it comes before the endpoint's): the IDs hear it from
        // a thread of its own.
        let dev = self.dev.clone();
        let spawned = ferroce::link::threads::spawn("ferroce-rdma-removal", move || {
            if let Some(d) = dev.upgrade() {
                d.removed.store(true, Ordering::Relaxed);
                forget(&d);
                super::device_removed(&d);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(%e, "no thread for a device removal: its IDs hear nothing");
        }
    }
}

impl CmDevice {
    pub(crate) fn verbs(&self) -> *mut ibv_context {
        self.ctx as *mut ibv_context
    }

    pub(crate) fn pd(&self) -> *mut ibv_pd {
        self.pd as *mut ibv_pd
    }
}

/// A child of fork() opens its own (see [`PerProcess`]).
static OPEN: PerProcess<Arc<CmDevice>> = PerProcess::new();

/// The device named `name`, opened (with its CM) on first use.
fn open(d: &Device) -> Result<Arc<CmDevice>, c_int> {
    let mut open = OPEN.lock();
    // By index too: an interface made again under a name is another device, even before
    // the old one's removal ran.
    let index = d.interface().index;
    if let Some(o) = open.iter().find(|o| o.name == d.name() && o.index == index) {
        return Ok(o.clone());
    }
    // SAFETY: `device_for` gives a live `ibv_device` of this library (never freed).
    let verbs = unsafe { crate::open::ibv_open_device(device_for(d)) };
    let c = ctx_of(verbs).ok_or_else(|| {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENODEV)
    })?;
    let cm = ConnectionManager::open(&c.inner).map_err(|e| errno_of(&e))?;
    // SAFETY: `verbs` is live (checked above).
    let pd = unsafe { crate::pd::ibv_alloc_pd(verbs) };
    if pd.is_null() {
        return Err(libc::ENOMEM);
    }
    let o = Arc::new_cyclic(|me| CmDevice {
        name: d.name().to_string(),
        index,
        ctx: verbs as usize,
        pd: pd as usize,
        cm,
        _removal: Arc::new(Removal { dev: me.clone() }),
        removed: AtomicBool::new(false),
    });
    c.inner.subscribe_async_events(&o._removal);
    if c.inner.device_fatal() {
        // Gone before the subscription: nothing would tell.
        o._removal.async_event(AsyncEvent::DeviceFatal);
    }
    open.push(o.clone());
    Ok(o)
}

/// Forgets `dev` (its interface is gone): the next ID on an interface of its name opens
/// that one.
fn forget(dev: &Arc<CmDevice>) {
    OPEN.lock().retain(|o| !Arc::ptr_eq(o, dev));
}

/// The device that holds address `ip` (ENODEV: none does).
pub(crate) fn with_address(ip: IpAddr) -> Result<Arc<CmDevice>, c_int> {
    let gid = gid_of(ip);
    let d = Device::list()
        .into_iter()
        .find(|d| d.gids().index_of(gid).is_some())
        .ok_or(libc::ENODEV)?;
    open(&d)
}

/// The device named `name`, opened on first use (ENODEV: no such device).
pub(crate) fn by_name(name: &str) -> Result<Arc<CmDevice>, c_int> {
    open(&Device::by_name(name).map_err(|_| libc::ENODEV)?)
}

/// Every device (a wildcard listen): those that open.
pub(crate) fn all() -> Vec<Arc<CmDevice>> {
    Device::list().iter().filter_map(|d| open(d).ok()).collect()
}

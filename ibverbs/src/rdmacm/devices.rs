//! The devices rdma_cm IDs bind to: each opened once per process, with its connection
//! manager (QP1), on first use. They stay open until the process ends, as rdma_cm keeps
//! its device contexts.

use std::ffi::c_int;
use std::net::IpAddr;
use std::sync::Arc;

use ferroce::cm::ConnectionManager;
use ferroce::net::gid::gid_of;
use ferroce::verbs::Device;

use crate::context::ctx_of;
use crate::device::device_for;
use crate::ffi::{ibv_context, ibv_pd};
use crate::guard::errno_of;
use crate::per_process::PerProcess;

/// An open device and its connection manager.
pub(crate) struct CmDevice {
    pub name: String,
    /// The `ibv_context *` programs see as `cm_id->verbs`.
    ctx: usize,
    /// The device's PD, every ID's `pd` on it (as rdma_cm gives each device one; UCX
    /// finds the context through `cm_id->pd`).
    pd: usize,
    pub cm: ConnectionManager,
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
    if let Some(o) = open.iter().find(|o| o.name == d.name()) {
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
    let o = Arc::new(CmDevice {
        name: d.name().to_string(),
        ctx: verbs as usize,
        pd: pd as usize,
        cm,
    });
    open.push(o.clone());
    Ok(o)
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

/// Every device (a wildcard listen): those that open.
pub(crate) fn all() -> Vec<Arc<CmDevice>> {
    Device::list().iter().filter_map(|d| open(d).ok()).collect()
}

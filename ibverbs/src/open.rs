//! Opening and closing devices: `ibv_open_device` starts ferroce's driver on the
//! interface and gives the context the ops table the header's inline verbs call through,
//! inside a `verbs_context` for the extended ones (`ibv_query_port`,
//! `ibv_query_device_ex`).

use std::ffi::c_int;
use std::mem::size_of;

use ferroce::link::LinkError;
use std::sync::Arc;

use ferroce::verbs::{AsyncEventSink, Context, Device, Error, WeakContext};

use crate::context::{c_ptr, ctx_of, Ctx, CtxEvents};
use crate::device::{dev_of, device_name};
use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};
use crate::per_process::PerProcess;

fn open_failed(name: &str, e: &Error) {
    // One line that says what to do: the program's own message follows with errno.
    match e {
        Error::Link(LinkError::Permission) => eprintln!(
            "ferroce: opening {name} needs CAP_NET_RAW: run as root, or once `sudo setcap cap_net_raw+p $(which ferroce)` and start the program with `ferroce exec -- PROGRAM`"
        ),
        other => eprintln!("ferroce: cannot open device {name}: {other}"),
    }
}

/// The devices this process has open, by name: a second `ibv_open_device` of one device
/// (a client and a server in one test program) shares the first one's driver, as
/// contexts of one kernel device share it, instead of failing on the interface's UDP
/// port, which the first holds. A child of fork() opens its own (see [`PerProcess`]).
/// Each entry is the interface's name and index: an interface made again under a name
/// (a new index) is a new device, opened afresh, as is one whose interface went away
/// (DEVICE_FATAL) and is still listed under its old index.
static OPEN: PerProcess<(String, u32, WeakContext)> = PerProcess::new();

/// The open device to share for interface `name` with index `index`, if any.
fn shared_open(name: &str, index: u32) -> Option<Context> {
    OPEN.lock()
        .iter()
        .find(|(n, i, _)| n == name && *i == index)
        .and_then(|(_, _, w)| w.upgrade())
        .filter(|c| !c.device_fatal())
}

fn remember_open(name: &str, index: u32, c: &Context) {
    if crate::stats::enabled() {
        crate::exit_hooks::add(report_at_exit);
    }
    let mut open = OPEN.lock();
    open.retain(|(n, _, w)| n != name && w.upgrade().is_some());
    open.push((name.to_string(), index, c.downgrade()));
}

/// `FERROCE_STATS`: the report of each device still open when the process exits.
fn report_at_exit() {
    let open: Vec<Context> = OPEN
        .lock()
        .iter()
        .filter_map(|(_, _, w)| w.upgrade())
        .collect();
    for c in open {
        crate::stats::report(&c, "at exit");
    }
}

#[export_name = "__ferroce_ibv_open_device"]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    catch("ibv_open_device", std::ptr::null_mut(), || {
        let Some(dev) = dev_of(device) else {
            return null_with(libc::EINVAL);
        };
        let name = device_name(dev);
        // The interface under the name now (the device pointer may be from an older
        // listing).
        let current = Device::by_name(&name);
        let index = current
            .as_ref()
            .map_or(dev.ifindex(), |d| d.interface().index);
        let opened = match shared_open(&name, index) {
            Some(c) => Ok(c),
            None => current.and_then(|d| d.open()),
        };
        if let Ok(c) = &opened {
            remember_open(&name, index, c);
        }
        let inner = match opened {
            Ok(c) => c,
            Err(e) => {
                open_failed(&name, &e);
                return null_with(errno_of(&e));
            }
        };
        match wrap(inner, device) {
            Ok(c) => {
                tracing::debug!(device = %name, "opened");
                c
            }
            Err(e) => null_with(e),
        }
    })
}

/// Gives an open ferroce device its C face: the `verbs_context` with the ops tables, and
/// the asynchronous event descriptor.
pub(crate) fn wrap(inner: Context, device: *mut ibv_device) -> Result<*mut ibv_context, c_int> {
    let events = Arc::new(CtxEvents::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?);
    let sink: Arc<dyn AsyncEventSink> = events.clone();
    inner.subscribe_async_events(&sink);
    // SAFETY: verbs_context is plain C data (pointers, ints, a pthread mutex); zero is
    // valid for each, and a zeroed pthread mutex is PTHREAD_MUTEX_INITIALIZER.
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    vctx.sz = size_of::<verbs_context>();
    vctx.query_port = Some(crate::query::query_port_ex);
    vctx.query_device_ex = Some(crate::query::query_device_ex);
    vctx.create_cq_ex = Some(crate::cq_ex::create_cq_ex);
    vctx.create_qp_ex = Some(crate::qp_ex::create_qp_ex);
    vctx.context.device = device;
    vctx.context.ops = crate::ops::context_ops();
    let cmd_fd: std::os::fd::OwnedFd = std::fs::File::open("/dev/null")
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?
        .into();
    vctx.context.cmd_fd = std::os::fd::AsRawFd::as_raw_fd(&cmd_fd);
    vctx.context.num_comp_vectors = 1;
    vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut _;
    let ctx = Box::new(Ctx {
        vctx,
        inner,
        events,
        cmd_fd,
    });
    let p = handles::insert(ctx, Kind::Context);
    // SAFETY: just made live; C sees the context inside it.
    let c = unsafe { &mut *p };
    c.vctx.context.async_fd = std::os::fd::AsRawFd::as_raw_fd(&c.events.fd);
    Ok(c_ptr(c))
}

#[export_name = "__ferroce_ibv_close_device"]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    catch("ibv_close_device", libc::EIO, || {
        let Some(c) = ctx_of(context) else {
            return libc::EINVAL;
        };
        if crate::stats::enabled() {
            crate::stats::report(&c.inner, "closed");
        }
        let base = c as *const Ctx as *mut Ctx;
        // The driver stops once the last object of the device is gone.
        drop(handles::remove(base, Kind::Context));
        0
    })
}

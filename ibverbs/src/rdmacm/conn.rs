//! Connections: `rdma_listen`, `rdma_connect`, `rdma_accept`, `rdma_reject`,
//! `rdma_disconnect`, `rdma_establish`, `rdma_get_request`, `rdma_init_qp_attr`.
//!
//! The Rust connection manager's calls block until the peer answers; rdma_cm's return at
//! once. So each wait runs on a thread of its own that posts the outcome as the event
//! rdma_cm would: a listener's thread turns requests into new IDs and
//! CONNECT_REQUEST events, a connect's thread posts ESTABLISHED, REJECTED or
//! UNREACHABLE, an accept's thread waits for the RTU, and a connected ID's thread waits
//! for the peer's DREQ to post DISCONNECTED.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use std::mem::ManuallyDrop;

use ferroce::cm::CmFailure;
use ferroce::net::gid::addr_of;
use ferroce_wire::cm::rdma_cm;

use super::addr::fill;
use super::channel::Event;
use super::devices::{self, CmDevice};
use super::id::{self, api, complete, id_of, last_errno, own_event, Pending, Shared};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::guard::{catch, set_errno};
use crate::handles::{self, Kind};
use crate::per_process::{PerProcess, PerProcessGuard};
use crate::qp::{ah_attr_of, qp_of};

/// How often a listener's thread looks whether its ID still lives.
const LISTEN_POLL: Duration = Duration::from_millis(200);
/// How long a port stays listened on after its listening ID went (see `stop_listening`):
/// perftest -R destroys its first listening ID, sleeps a second, syncs with its client
/// and only then listens again, while the client connects as soon as it is synced. Half
/// a second (as before) let that request find no listener and be refused (reason 8),
/// which perftest 4.5-0.17's retry cannot survive (it reuses the IDs it destroyed).
const LINGER: Duration = Duration::from_secs(2);
/// How long a REP (or an RTU after accepting) may take: the CM's own resends give up
/// sooner (UNREACHABLE), so this only bounds a thread's life.
const ANSWER: Duration = Duration::from_secs(60);
/// How long rdma_disconnect's DREQ waits for the DREP.
const DREP: Duration = Duration::from_secs(5);

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), c_int> {
    ferroce::link::threads::spawn(name, f)
        .map(|_| ())
        .map_err(|_| libc::EAGAIN)
}

#[export_name = "__ferroce_rdma_listen"]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    api("rdma_listen", || {
        let id = id_of(id).ok_or(libc::EINVAL)?;
        let sh = id.shared.clone();
        let mut st = sh.lock();
        let src = st.src.ok_or(libc::EINVAL)?;
        if !st.listening.is_empty() {
            return Err(libc::EINVAL);
        }
        let devs = match &st.dev {
            Some(d) => vec![d.clone()],
            None => devices::all(),
        };
        if devs.is_empty() {
            return Err(libc::ENODEV);
        }
        let ud = st.ps == RDMA_PS_UDP;
        let port = src.port();
        sh.backlog.set_limit(backlog);
        {
            let mut l = listeners();
            for d in &devs {
                if let Err(e) = listen_device(&mut l, &sh, d, ud, port) {
                    tracing::info!(dev = %d.name, port, %e, "rdma_listen refused");
                    // The hold's own errno where its socket could not be made (EMFILE);
                    // else the port is taken.
                    let errno = match &e {
                        CmFailure::Verbs(v) => crate::guard::errno_of(v),
                        _ => libc::EADDRINUSE,
                    };
                    drop(l);
                    for d in st.listening.drain(..) {
                        stop_listening(d, ud, port);
                    }
                    return Err(errno);
                }
                st.listening.push(d.clone());
            }
        }
        let wildcard = st.dev.is_none();
        drop(st);
        for d in devs {
            let sh = sh.clone();
            spawn("ferroce-rdma-listen", move || listener(sh, d, port, ud))?;
        }
        if wildcard {
            spawn("ferroce-rdma-devices", move || watch_devices(sh, port, ud))?;
        }
        Ok(())
    })
}

/// Listens on `port` on `d` for the listening ID `sh`: a port this process still listens
/// on there (lingering) is taken over; else the CM listens, which refuses a port another
/// process holds there (`ferroce::cm::ports`) as well as one this process listens on.
fn listen_device(
    l: &mut Vec<(ListenKey, Weak<Shared>)>,
    sh: &Arc<Shared>,
    d: &CmDevice,
    ud: bool,
    port: u16,
) -> Result<(), CmFailure> {
    let key = key_of(d, ud, port);
    if !take_over(l, &key) {
        if ud {
            d.cm.listen_ud(port)?;
        } else {
            d.cm.listen(port)?;
        }
    }
    record_listen(l, key, Arc::downgrade(sh));
    Ok(())
}

/// The CM of `d` stops listening on `port` (what [`listen_device`] began).
fn unlisten_device(d: &CmDevice, ud: bool, port: u16) {
    if ud {
        d.cm.unlisten_ud(port);
    } else {
        d.cm.unlisten(port);
    }
}

/// How often a listen on every device looks for new ones.
const DEVICE_POLL: Duration = Duration::from_secs(1);

/// A listen on every device (a wildcard address) takes in the devices that appear after
/// it (an interface made, or moved into the namespace), as the kernel's rdma_cm listens
/// on each device as it is added, until the ID goes. Each interface is tried once (a
/// device that does not open, or whose port another process holds, is not asked again
/// every second); one made again under a name has a new index, and is tried again.
fn watch_devices(sh: Arc<Shared>, port: u16, ud: bool) {
    let listed = || -> Vec<(String, u32)> {
        ferroce::verbs::Device::list()
            .iter()
            .map(|d| (d.name().to_owned(), d.interface().index))
            .collect()
    };
    // Nothing seen yet: a device that appeared between `rdma_listen`'s listing and this
    // thread's first is taken in too; those listened on already are passed over.
    let mut seen: Vec<(String, u32)> = Vec::new();
    loop {
        let until = std::time::Instant::now() + DEVICE_POLL;
        while std::time::Instant::now() < until {
            if !sh.lock().alive {
                return;
            }
            std::thread::sleep(LISTEN_POLL);
        }
        let now = listed();
        for (name, index) in now.iter().filter(|n| !seen.contains(n)) {
            let on = |st: &id::St| {
                st.listening
                    .iter()
                    .any(|d| d.name == *name && d.index == *index)
            };
            if on(&sh.lock()) {
                continue;
            }
            let Ok(d) = devices::by_name(name) else {
                continue;
            };
            let mut st = sh.lock();
            if !st.alive {
                return;
            }
            if on(&st) || d.index != *index {
                continue;
            }
            let mut l = listeners();
            if let Err(e) = listen_device(&mut l, &sh, &d, ud, port) {
                tracing::info!(dev = %d.name, port, %e, "a new device's listen refused");
                continue;
            }
            drop(l);
            st.listening.push(d.clone());
            drop(st);
            tracing::info!(dev = %d.name, port, "a wildcard listen takes in a new device");
            let sh = sh.clone();
            if spawn("ferroce-rdma-listen", move || listener(sh, d, port, ud)).is_err() {
                tracing::warn!(port, "no thread for a new device's listen");
            }
        }
        seen = now;
    }
}

/// The listening ID of each (device, UDP port space?, port): a request goes to the one
/// listening when it is taken, whichever thread takes it (an ID destroyed and made again
/// on the same port, as perftest does between its two connections, leaves its thread
/// running for up to `LISTEN_POLL`). A device is its interface's name and index: one made
/// again under a name is another (see `device_removed`).
type ListenKey = (String, u32, bool, u16);

fn key_of(d: &CmDevice, ud: bool, port: u16) -> ListenKey {
    (d.name.clone(), d.index, ud, port)
}
/// A child of fork() starts with none (see [`PerProcess`]): its parent's listen in the
/// parent only.
static LISTENERS: PerProcess<(ListenKey, Weak<Shared>)> = PerProcess::new();

fn listeners() -> PerProcessGuard<'static, (ListenKey, Weak<Shared>)> {
    LISTENERS.lock()
}

/// Records that `w` listens on `key`, in place of the key's previous listener. Only that
/// key's entry goes: another key's entry whose ID is gone may still be lingering, its port
/// still listened on in the CM, and its linger thread removes it. Pruning such entries
/// here (as before) made the next listen on that key miss the take-over and fail with
/// EADDRINUSE: a wildcard listen covers every device, and pruned the first device's
/// lingering entry before it came to it (perftest -R's second listen on one port, when
/// the first ID's threads had already ended: a flaky CI failure).
fn record_listen(l: &mut Vec<(ListenKey, Weak<Shared>)>, key: ListenKey, w: Weak<Shared>) {
    l.retain(|(k, _)| *k != key);
    l.push((key, w));
}

/// Whether `key` is still listened on for an ID gone within `LINGER` (the new ID takes
/// the listen over, and the requests that came meanwhile).
fn take_over(l: &mut [(ListenKey, Weak<Shared>)], key: &ListenKey) -> bool {
    l.iter()
        .any(|(k, w)| k == key && w.upgrade().is_none_or(|sh| !sh.lock().alive))
}

/// A listening ID went: its port stays listened on for `LINGER`, so that requests
/// arriving while the program makes the next listening ID on it (perftest's second
/// connection follows its first a second later) wait for that one instead of being
/// refused.
/// Then, if no ID listens on it, the requests still queued are refused. The port stays
/// held from other processes as long (the CM holds what it listens on).
pub(crate) fn stop_listening(dev: Arc<CmDevice>, ud: bool, port: u16) {
    let key = key_of(&dev, ud, port);
    let unlisten = move || {
        let mut l = listeners();
        if current_in(&l, &key).is_some() {
            return; // taken over
        }
        l.retain(|(k, _)| *k != key);
        unlisten_device(&dev, ud, port);
    };
    let _ = spawn("ferroce-rdma-linger", move || {
        std::thread::sleep(LINGER);
        unlisten();
    });
}

/// `dev`'s interface is gone (its device raised DEVICE_FATAL), as when the kernel's
/// rdma_cm loses a device: each ID bound to it (by address, by a connection through it,
/// or a listen on it alone) hears RDMA_CM_EVENT_DEVICE_REMOVAL, then nothing more; a
/// listen on every device (a wildcard address) only stops listening on this one, as the
/// kernel drops its internal listener there without an event. What the device's CM
/// listened on is let go at once, so that an interface made again under its name serves
/// the same ports (nothing can reach the dead one).
pub(crate) fn device_removed(dev: &Arc<CmDevice>) {
    let on_dev = |d: &Arc<CmDevice>| Arc::ptr_eq(d, dev);
    let mut told = 0;
    for sh in id::all_ids() {
        let mut st = sh.lock();
        if !st.alive {
            continue;
        }
        let ud = st.ps == RDMA_PS_UDP;
        let port = st.src.map_or(0, |a| a.port());
        if let Some(i) = st.listening.iter().position(on_dev) {
            unlisten_device(&st.listening.remove(i), ud, port);
        }
        if st.dev.as_ref().is_some_and(on_dev) && !st.removed {
            let e = Event::new(RDMA_CM_EVENT_DEVICE_REMOVAL, sh.me, 0);
            told += usize::from(sh.post_locked(&st, e));
            st.removed = true;
        }
    }
    // Lingering listens on the dead device have nothing left to take over (those of an
    // interface already made again under its name have another index).
    listeners().retain(|(k, _)| (&k.0, k.1) != (&dev.name, dev.index));
    tracing::info!(dev = %dev.name, ids = told, "rdma_cm device removed");
}

fn current_in(l: &[(ListenKey, Weak<Shared>)], key: &ListenKey) -> Option<Arc<Shared>> {
    l.iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, w)| w.upgrade())
        .filter(|sh| sh.lock().alive)
}

/// Whoever listens on `key` now, or within `LINGER` (a request taken just as its
/// listener went waits for the next one).
fn successor(key: &ListenKey) -> Option<Arc<Shared>> {
    let until = std::time::Instant::now() + LINGER;
    loop {
        if let Some(l) = current(key) {
            return Some(l);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whoever listens on `key` now.
fn current(key: &ListenKey) -> Option<Arc<Shared>> {
    current_in(&listeners(), key)
}

/// Turns the requests for `port` on `dev` into new IDs and CONNECT_REQUEST events, while
/// the listening ID `sh` lives.
fn listener(sh: Arc<Shared>, dev: Arc<CmDevice>, port: u16, ud: bool) {
    let key = key_of(&dev, ud, port);
    // Until the ID goes, or the device (`device_removed`).
    while sh.lock().alive && !dev.removed.load(std::sync::atomic::Ordering::Relaxed) {
        let pending = if ud {
            dev.cm
                .get_ud_request(port, LISTEN_POLL)
                .map(|r| (r.from, r.ip, Vec::new(), Pending::Ud(r)))
        } else {
            dev.cm.get_request(port, LISTEN_POLL).map(|r| {
                let skip = if r.ip.is_some() { rdma_cm::LEN } else { 0 };
                let data = r.req.private_data[skip..].to_vec();
                (r.from, r.ip, data, Pending::Rc(r))
            })
        };
        let Some((from, ip, data, pending)) = pending else {
            continue;
        };
        match successor(&key) {
            Some(l) => new_request(&l, &dev, port, from, ip, data, pending),
            None => refuse(&dev, pending),
        }
    }
}

/// A passive-side ID for a request, and its CONNECT_REQUEST event on the listener's
/// channel, holding a place in the listener's backlog until read; with the backlog
/// full, the request is dropped unanswered (its sender resends it), as Linux does.
fn new_request(
    listen: &Arc<Shared>,
    dev: &Arc<CmDevice>,
    port: u16,
    from: std::net::Ipv6Addr,
    ip: Option<rdma_cm::IpHeader>,
    data: Vec<u8>,
    pending: Pending,
) {
    let Some(slot) = listen.backlog.take() else {
        tracing::info!(port, "listen backlog full: a connect request dropped");
        let _ = match &pending {
            Pending::Rc(r) => dev.cm.drop_request(r),
            Pending::Ud(r) => dev.cm.drop_ud_request(r),
        };
        return;
    };
    let st = listen.lock();
    let mut st = st;
    let ps = st.ps;
    let Some(lc) = listen.c(&mut st) else {
        return refuse(dev, pending);
    };
    let child = if listen.own_channel().is_some() {
        // A synchronous listener's requests are synchronous IDs too, each with a
        // channel of its own (their CONNECT_REQUEST still goes to the listener's).
        let Ok(ch) = super::channel::create() else {
            return refuse(dev, pending);
        };
        // SAFETY: just made live.
        let events = unsafe { (*ch).events.clone() };
        id::create(events, ch.cast(), Some(ch as usize), lc.context, ps)
    } else {
        id::create(listen.events(), lc.channel, None, lc.context, ps)
    };
    drop(st);
    // SAFETY: just made live; only this thread knows it yet.
    let csh = unsafe { &(*child).shared };
    let (remote, rport, local) = match ip {
        Some(h) => (h.src, h.src_port, Some(h.dst)),
        None => (addr_of(from), 0, None),
    };
    let mut e = Event::new(RDMA_CM_EVENT_CONNECT_REQUEST, child as usize, 0);
    e.c.listen_id = listen.me as *mut rdma_cm_id;
    {
        let mut cst = csh.lock();
        cst.dev = Some(dev.clone());
        cst.src = local.map(|l| SocketAddr::new(l, port));
        cst.dst = Some(SocketAddr::new(remote, rport));
        // The path a QP answering it needs, known now (rdma_init_qp_attr may ask before
        // rdma_accept).
        let path = match &pending {
            Pending::Rc(r) => Some(dev.cm.path_for(r)),
            Pending::Ud(_) => None,
        };
        if let Some(Err(f)) = &path {
            tracing::info!(%f, "a connect request with no way back; refused");
            drop(cst);
            refuse(dev, pending);
            // SAFETY: `child` is live and nobody outside knows it.
            unsafe { rdma_destroy_id(child.cast()) };
            return;
        }
        cst.path = path.and_then(Result::ok).map(|p| cst.path_as_set(p));
        if let Pending::Rc(r) = &pending {
            e.c.param.conn = ManuallyDrop::new(rdma_conn_param {
                responder_resources: r.req.responder_resources,
                initiator_depth: r.req.initiator_depth,
                flow_control: r.req.end_to_end_flow_control as u8,
                retry_count: r.req.retry_count,
                rnr_retry_count: r.req.rnr_retry_count,
                srq: r.req.srq as u8,
                qp_num: r.req.local_qpn,
                ..zero_conn_param()
            });
        }
        cst.request = Some(pending);
        fill(csh, &mut cst);
    }
    e.private = data;
    let lst = listen.lock();
    if !lst.alive {
        drop(lst);
        // SAFETY: `child` is live and nobody outside knows it.
        unsafe { rdma_destroy_id(child.cast()) };
        return;
    }
    e.unacked = Some(csh.unacked.clone());
    e.slot = Some(slot);
    listen.events().post(Box::new(e));
}

/// Refuses a request nobody listens for any more, as one for an unknown service.
fn refuse(dev: &CmDevice, pending: Pending) {
    let _ = match &pending {
        Pending::Rc(r) => dev.cm.refuse_unserved(r),
        Pending::Ud(r) => dev.cm.reject_ud(r),
    };
}

/// An all-zero `rdma_conn_param`.
fn zero_conn_param() -> rdma_conn_param {
    // SAFETY: plain C data (a pointer and integers); zero is valid.
    unsafe { std::mem::zeroed() }
}

/// The private data a program passed in `conn_param`.
fn private_of(p: *const rdma_conn_param) -> Vec<u8> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: non-NULL `conn_param`, the caller's; its private data is
    // `private_data_len` bytes when non-NULL (the API's contract).
    unsafe {
        let c = &*p;
        if c.private_data.is_null() || c.private_data_len == 0 {
            return Vec::new();
        }
        std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len as usize)
            .to_vec()
    }
}

/// The event for a failed connect or accept.
fn failure_event(me: usize, f: &CmFailure) -> Event {
    match f {
        CmFailure::Rejected {
            reason,
            private_data,
        } => {
            // The REJ's private data, as rdma_cm gives it (all of it: 148 bytes).
            let mut e = Event::new(RDMA_CM_EVENT_REJECTED, me, reason.0 as c_int);
            e.private = private_data.clone();
            e
        }
        CmFailure::Unreachable | CmFailure::TimedOut => {
            Event::new(RDMA_CM_EVENT_UNREACHABLE, me, -libc::ETIMEDOUT)
        }
        CmFailure::SidrRefused(_) => Event::new(RDMA_CM_EVENT_UNREACHABLE, me, -libc::ECONNREFUSED),
        CmFailure::Verbs(e) => {
            Event::new(RDMA_CM_EVENT_CONNECT_ERROR, me, -crate::guard::errno_of(e))
        }
        _ => Event::new(RDMA_CM_EVENT_CONNECT_ERROR, me, -libc::EPROTO),
    }
}

/// Once connected: posts DISCONNECTED when the peer's DREQ comes, unless this side
/// began the disconnect.
fn watch_disconnect(sh: Arc<Shared>, dev: Arc<CmDevice>, conn: ferroce_transport::cm::CommId) {
    let _ = spawn("ferroce-rdma-conn", move || loop {
        {
            let st = sh.lock();
            if !st.alive || st.closing || st.disconnected {
                return;
            }
        }
        if dev.cm.wait_disconnect_request(conn, LISTEN_POLL) {
            let st = sh.lock();
            if st.closing {
                return;
            }
            drop(st);
            sh.post_disconnected();
            return;
        }
    });
}

#[export_name = "__ferroce_rdma_connect"]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    api("rdma_connect", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        let sh = cid.shared.clone();
        let st = sh.lock();
        let (dev, dst) = match (&st.dev, st.dst) {
            (Some(d), Some(a)) => (d.clone(), a),
            _ => return Err(libc::EINVAL),
        };
        let ud = st.ps == RDMA_PS_UDP;
        drop(st);
        let data = private_of(conn_param);
        let waiter = sh.clone();
        if ud {
            spawn("ferroce-rdma-connect", move || {
                let e = match dev.cm.resolve_ud(dst.ip(), dst.port(), ANSWER) {
                    Ok(svc) => {
                        let mut e = Event::new(RDMA_CM_EVENT_ESTABLISHED, sh.me, 0);
                        match dev.cm.address_vector(svc.remote) {
                            Ok(av) => {
                                e.c.param.ud = ManuallyDrop::new(rdma_ud_param {
                                    private_data: std::ptr::null(),
                                    private_data_len: 0,
                                    ah_attr: ah_attr_of(&av),
                                    qp_num: svc.qpn,
                                    qkey: svc.qkey,
                                });
                                e
                            }
                            Err(err) => Event::new(
                                RDMA_CM_EVENT_ADDR_ERROR,
                                sh.me,
                                -crate::guard::errno_of(&err),
                            ),
                        }
                    }
                    Err(f) => failure_event(sh.me, &f),
                };
                sh.post(e);
            })?;
            return complete(&waiter, RDMA_CM_EVENT_ESTABLISHED);
        }
        // With a QP on the ID, the library brings it to RTS and sends the RTU; without
        // one (rping -q, UCX), the REQ names the program's `qp_num`, the REP becomes
        // CONNECT_RESPONSE, and rdma_establish sends the RTU once the program has
        // brought its QP up (rdma_init_qp_attr gives the attributes).
        let qp = match qp_of(cid.qp()) {
            Some(q) => Some(q.inner.clone()),
            None if !conn_param.is_null() => None,
            None => return Err(libc::EINVAL),
        };
        let qpn = match &qp {
            Some(q) => q.qpn(),
            // SAFETY: non-NULL, the caller's rdma_conn_param.
            None => unsafe { (*conn_param).qp_num },
        };
        spawn("ferroce-rdma-connect", move || {
            let (conn, path) = match dev.cm.request_rc(qpn, dst.ip(), dst.port(), &data, ANSWER) {
                Ok((c, p)) => (c, sh.lock().path_as_set(p)),
                Err(f) => {
                    sh.post(failure_event(sh.me, &f));
                    return;
                }
            };
            if let Some(q) = &qp {
                let up = q.connect(&path).map_err(CmFailure::from);
                if let Err(f) = up.and_then(|()| dev.cm.establish(conn.id)) {
                    let _ = dev.cm.disconnect(conn.id, Duration::ZERO);
                    sh.post(failure_event(sh.me, &f));
                    return;
                }
            }
            let mut st = sh.lock();
            st.conn = Some(conn.id);
            super::hang_up::track(&sh);
            st.path = Some(path);
            st.awaiting_establish = qp.is_none();
            let kind = if qp.is_some() {
                RDMA_CM_EVENT_ESTABLISHED
            } else {
                RDMA_CM_EVENT_CONNECT_RESPONSE
            };
            let mut e = Event::new(kind, sh.me, 0);
            e.c.param.conn = ManuallyDrop::new(rdma_conn_param {
                qp_num: conn.remote_qpn,
                ..zero_conn_param()
            });
            e.private = conn.private_data;
            let posted = sh.post_locked(&st, e);
            drop(st);
            if posted && qp.is_some() {
                watch_disconnect(sh, dev, conn.id);
            }
        })?;
        complete(&waiter, RDMA_CM_EVENT_ESTABLISHED)
    })
}

#[export_name = "__ferroce_rdma_accept"]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    api("rdma_accept", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        let sh = cid.shared.clone();
        let qp = qp_of(cid.qp());
        let mut st = sh.lock();
        let dev = st.dev.clone().ok_or(libc::EINVAL)?;
        let data = private_of(conn_param);
        // The QP: the ID's, else the program's own, named in `conn_param` (its
        // program brings it up with rdma_init_qp_attr).
        let qpn = match (&qp, conn_param.is_null()) {
            (Some(q), _) => q.inner.qpn(),
            // SAFETY: non-NULL, the caller's rdma_conn_param.
            (None, false) => unsafe { (*conn_param).qp_num },
            (None, true) => return Err(libc::EINVAL),
        };
        match st.request.take() {
            Some(Pending::Ud(r)) => {
                let qkey = RDMA_UDP_QKEY;
                dev.cm.accept_ud(&r, qpn, qkey).map_err(|_| libc::EINVAL)?;
                Ok(())
            }
            Some(Pending::Rc(r)) => {
                let Some(path) = st.path else {
                    return Err(libc::EINVAL);
                };
                let up = match &qp {
                    Some(q) => q.inner.connect(&path).map_err(CmFailure::from),
                    None => Ok(()),
                };
                let conn = match up.and_then(|()| dev.cm.accept_with(&r, qpn, &path, &data)) {
                    Ok(c) => c,
                    Err(f) => {
                        tracing::info!(%f, "rdma_accept failed");
                        st.request = Some(Pending::Rc(r));
                        return Err(match f {
                            CmFailure::Verbs(e) => crate::guard::errno_of(&e),
                            _ => libc::EINVAL,
                        });
                    }
                };
                st.conn = Some(conn.id);
                drop(st);
                super::hang_up::track(&sh);
                let sh2 = sh.clone();
                spawn("ferroce-rdma-accept", move || {
                    match dev.cm.wait_established(conn.id, ANSWER) {
                        Ok(()) => {
                            let e = Event::new(RDMA_CM_EVENT_ESTABLISHED, sh2.me, 0);
                            if sh2.post(e) {
                                watch_disconnect(sh2, dev, conn.id);
                            }
                        }
                        Err(f) => {
                            sh2.post(failure_event(sh2.me, &f));
                        }
                    }
                })?;
                complete(&sh, RDMA_CM_EVENT_ESTABLISHED)
            }
            None => Err(libc::EINVAL),
        }
    })
}

#[export_name = "__ferroce_rdma_reject"]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    api("rdma_reject", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        let mut st = cid.shared.lock();
        let dev = st.dev.clone().ok_or(libc::EINVAL)?;
        let data = if private_data.is_null() {
            Vec::new()
        } else {
            // SAFETY: `private_data_len` bytes at a non-NULL pointer, the caller's.
            unsafe {
                std::slice::from_raw_parts(private_data.cast::<u8>(), private_data_len as usize)
            }
            .to_vec()
        };
        match st.request.take() {
            Some(Pending::Rc(r)) => dev.cm.reject(&r, &data).map_err(|_| libc::EINVAL),
            Some(Pending::Ud(r)) => dev.cm.reject_ud(&r).map_err(|_| libc::EINVAL),
            None => Err(libc::EINVAL),
        }
    })
}

#[export_name = "__ferroce_rdma_disconnect"]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    api("rdma_disconnect", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        let sh = cid.shared.clone();
        let qp = qp_of(cid.qp());
        let mut st = sh.lock();
        let (Some(conn), Some(dev)) = (st.conn, st.dev.clone()) else {
            return Err(libc::EINVAL);
        };
        if st.closing {
            return Ok(());
        }
        st.closing = true;
        let peer_asked = st.disconnected;
        drop(st);
        // What the QP still holds completes with a flush, as with rdma_cm.
        if let Some(q) = qp {
            to_error(&q.inner);
        }
        // The DREQ (or the DREP to the peer's) leaves now, as from rdma_cm: a program
        // that exits right after rdma_disconnect still tells its peer.
        let answered = dev.cm.begin_disconnect(conn).map_err(|_| libc::EINVAL)?;
        if peer_asked || answered {
            // The DREP to the peer's DREQ; DISCONNECTED was (or is now) posted.
            sh.post_disconnected();
            return Ok(());
        }
        spawn("ferroce-rdma-disconnect", move || {
            // Unanswered: the peer is gone, or exited without a word (before ferroce's
            // peers ended their connections on exit, see `hang_up`).
            let status = match dev.cm.wait_disconnected(conn, DREP) {
                Ok(()) => 0,
                Err(_) => -libc::ETIMEDOUT,
            };
            sh.post_disconnected_status(status);
        })
    })
}

/// Moves `qp` to ERROR: its outstanding work completes with a flush.
fn to_error(qp: &ferroce::verbs::QueuePair) {
    if let Ok(mut a) = qp.query() {
        a.qp_state = ferroce_transport::QpState::Err;
        let _ = qp.modify(&a, ferroce_transport::QpAttrMask::STATE);
    }
}

#[export_name = "__ferroce_rdma_establish"]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    api("rdma_establish", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        let sh = cid.shared.clone();
        let mut st = sh.lock();
        let (Some(conn), Some(dev), true) = (st.conn, st.dev.clone(), st.awaiting_establish) else {
            return Err(libc::EINVAL);
        };
        // The RTU: the program has brought its QP to RTS.
        dev.cm.establish(conn).map_err(|_| libc::EINVAL)?;
        st.awaiting_establish = false;
        drop(st);
        watch_disconnect(sh, dev, conn);
        Ok(())
    })
}

/// `ibv_mtu` of a path MTU (the same codes).
fn ibv_mtu_of(m: ferroce_transport::Mtu) -> ibv_mtu {
    m as ibv_mtu
}

#[export_name = "__ferroce_rdma_init_qp_attr"]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    api("rdma_init_qp_attr", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: non-NULL, the caller's whole ibv_qp_attr; `qp_state` says which.
        let a = unsafe { &mut *qp_attr };
        let st = cid.shared.lock();
        let ud = st.ps == RDMA_PS_UDP;
        let mut mask = IBV_QP_STATE;
        match (a.qp_state, st.path) {
            (IBV_QPS_INIT, _) => mask |= super::qp::init_attr(ud, a),
            (IBV_QPS_RTR, _) if ud => {}
            (IBV_QPS_RTS, _) if ud => {
                a.sq_psn = 0;
                mask |= IBV_QP_SQ_PSN;
            }
            (IBV_QPS_RTR, Some(p)) => {
                a.path_mtu = ibv_mtu_of(p.mtu);
                a.dest_qp_num = p.dest_qpn;
                a.rq_psn = p.rq_psn;
                a.max_dest_rd_atomic = p.max_dest_rd_atomic;
                a.min_rnr_timer = p.min_rnr_timer;
                let av = ferroce_transport::AddressVector {
                    sgid_index: p.sgid_index,
                    traffic_class: p.traffic_class,
                    ..ferroce_transport::AddressVector::new(p.dest_gid)
                };
                a.ah_attr = ah_attr_of(&av);
                mask |= IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER;
            }
            (IBV_QPS_RTS, Some(p)) => {
                a.sq_psn = p.sq_psn;
                a.timeout = p.timeout;
                a.retry_cnt = p.retry_cnt;
                a.rnr_retry = p.rnr_retry;
                a.max_rd_atomic = p.max_rd_atomic;
                mask |= IBV_QP_SQ_PSN
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_MAX_QP_RD_ATOMIC;
            }
            // RTR and RTS need the peer: a request taken, or a reply come.
            _ => return Err(libc::EINVAL),
        }
        // SAFETY: non-NULL, the caller's.
        unsafe { *qp_attr_mask = mask as c_int };
        Ok(())
    })
}

#[export_name = "__ferroce_rdma_get_request"]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    api("rdma_get_request", || {
        let l = id_of(listen).ok_or(libc::EINVAL)?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let ch = l.shared.own_channel().ok_or(libc::EINVAL)?;
        let (kind, status, child) = own_event(ch)?;
        match kind {
            RDMA_CM_EVENT_CONNECT_REQUEST => {}
            RDMA_CM_EVENT_REJECTED => return Err(libc::ECONNREFUSED),
            _ if status < 0 => return Err(-status),
            _ => return Err(libc::EINVAL),
        }
        let ep_qp = l.shared.lock().ep_qp;
        if let Some(mut ep) = ep_qp {
            // SAFETY: `child` is the request's live ID; `attr` a copy.
            if unsafe { super::qp::rdma_create_qp(child, ep.pd, &mut ep.attr) } != 0 {
                return Err(last_errno());
            }
        }
        // SAFETY: non-NULL, the caller's to write.
        unsafe { *id = child };
        Ok(())
    })
}

#[export_name = "__ferroce_rdma_destroy_id"]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    catch("rdma_destroy_id", -1, || {
        let Some(b) = handles::remove(id as *mut id::Id, Kind::CmId) else {
            tracing::debug!(?id, "rdma_destroy_id: not a live ID");
            set_errno(libc::EINVAL);
            return -1;
        };
        tracing::debug!(?id, "rdma_destroy_id");
        let sh = b.shared.clone();
        let mut st = sh.lock();
        st.alive = false;
        let port = st.src.map_or(0, |a| a.port());
        let ud = st.ps == RDMA_PS_UDP;
        for d in st.listening.drain(..) {
            stop_listening(d, ud, port);
        }
        let dev = st.dev.clone();
        match (st.request.take(), &dev) {
            (Some(Pending::Rc(r)), Some(d)) if st.conn.is_none() => {
                let _ = d.cm.reject(&r, &[]);
            }
            (Some(Pending::Ud(r)), Some(d)) => {
                let _ = d.cm.reject_ud(&r);
            }
            _ => {}
        }
        if let (Some(conn), Some(d), false) = (st.conn, dev, st.closing) {
            // Destroyed while connected: the peer hears a DREQ, as from rdma_cm; destroyed
            // after the peer's DREQ, unanswered (DISCONNECTED seen, rdma_disconnect never
            // called), the DREP, as the kernel's CM sends it for an ID destroyed then.
            // Before, the peer waited out its DREQ's resends (`hang_up`).
            st.closing = true;
            let _ = spawn("ferroce-rdma-drep", move || {
                let _ = d.cm.disconnect(conn, Duration::from_secs(2));
            });
        }
        drop(st);
        // As rdma_cm's (which ends the ID in the kernel, then waits for the events the
        // kernel reported): no event is posted about it now (`alive`), those unread go, and
        // those handed out are acknowledged first (bounded here, for a program that never
        // acknowledges). An event taken meanwhile was counted as it left the queue.
        sh.events().forget(sh.me);
        sh.unacked.wait(Duration::from_secs(5));
        if let Some(ch) = sh.own_channel() {
            super::channel::release_own(ch);
        }
        drop(b);
        0
    })
}

#[cfg(test)]
mod listen_table_tests {
    use super::*;

    /// A lingering listen on one key survives a listen on another: the next listen on it
    /// still takes it over instead of asking the CM again (which says EADDRINUSE).
    #[test]
    fn a_listen_keeps_other_keys_lingering() {
        let a: ListenKey = ("vethP".into(), 7, false, 18602);
        let b: ListenKey = ("lo".into(), 1, false, 18602);
        // Both IDs gone, their threads ended: dead weak references, ports lingering.
        let mut l = vec![(a.clone(), Weak::new()), (b.clone(), Weak::new())];
        assert!(take_over(&mut l, &a) && take_over(&mut l, &b));
        record_listen(&mut l, a.clone(), Weak::new());
        assert!(take_over(&mut l, &b), "b's lingering listen was dropped");
        assert_eq!(l.iter().filter(|(k, _)| *k == a).count(), 1);
    }
}

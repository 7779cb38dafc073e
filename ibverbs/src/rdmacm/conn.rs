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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use std::mem::ManuallyDrop;

use ferroce::cm::CmFailure;
use ferroce::net::gid::addr_of;
use ferroce_wire::cm::rdma_cm;

use super::addr::{fill, ret};
use super::channel::Event;
use super::devices::{self, CmDevice};
use super::id::{self, id_of, Pending, Shared};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::guard::catch;
use crate::qp::{ah_attr_of, qp_of};

/// How often a listener's thread looks whether its ID still lives.
const LISTEN_POLL: Duration = Duration::from_millis(200);
/// How long a port stays listened on after its listening ID went (see `stop_listening`).
const LINGER: Duration = Duration::from_millis(500);
/// How long a REP (or an RTU after accepting) may take: the CM's own resends give up
/// sooner (UNREACHABLE), so this only bounds a thread's life.
const ANSWER: Duration = Duration::from_secs(60);
/// How long rdma_disconnect's DREQ waits for the DREP.
const DREP: Duration = Duration::from_secs(5);

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), c_int> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|_| libc::EAGAIN)
}

/// For an ID without a channel of its own (synchronous rdma_cm): waits for the event
/// the step just started and fails with its status unless it is `ok`.
pub(crate) fn complete(sh: &Shared, ok: rdma_cm_event_type) -> Result<(), c_int> {
    let Some(ch) = sh.own_channel else {
        return Ok(());
    };
    let mut e: *mut rdma_cm_event = std::ptr::null_mut();
    // SAFETY: `ch` is the ID's own live channel; `e` is a local to write.
    if unsafe { super::channel::rdma_get_cm_event(ch as *mut rdma_event_channel, &mut e) } != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    // SAFETY: just returned by rdma_get_cm_event, live until acked below.
    let (kind, status) = unsafe { ((*e).event, (*e).status) };
    // SAFETY: as above.
    unsafe { super::channel::rdma_ack_cm_event(e) };
    if kind == ok {
        Ok(())
    } else if status < 0 {
        Err(-status)
    } else {
        Err(libc::ECONNREFUSED)
    }
}

#[export_name = "__ferroce_rdma_listen"]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    catch("rdma_listen", -1, || {
        let r = (|| {
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
            {
                let mut l = listeners();
                for d in &devs {
                    let key = (d.name.clone(), ud, port);
                    if !take_over(&mut l, &key) {
                        let r = if ud {
                            d.cm.listen_ud(port)
                        } else {
                            d.cm.listen(port)
                        };
                        if r.is_err() {
                            drop(l);
                            for d in st.listening.drain(..) {
                                stop_listening(d, ud, port);
                            }
                            return Err(libc::EADDRINUSE);
                        }
                    }
                    l.retain(|(k, w)| *k != key && w.strong_count() > 0);
                    l.push((key, Arc::downgrade(&sh)));
                    st.listening.push(d.clone());
                }
            }
            drop(st);
            for d in devs {
                let sh = sh.clone();
                spawn("ferroce-rdma-listen", move || listener(sh, d, port, ud))?;
            }
            Ok(())
        })();
        ret(r)
    })
}

/// The listening ID of each (device, UDP port space?, port): a request goes to the one
/// listening when it is taken, whichever thread takes it (an ID destroyed and made again
/// on the same port, as perftest does between its two connections, leaves its thread
/// running for up to `LISTEN_POLL`).
type ListenKey = (String, bool, u16);
static LISTENERS: Mutex<Vec<(ListenKey, Weak<Shared>)>> = Mutex::new(Vec::new());

fn listeners() -> MutexGuard<'static, Vec<(ListenKey, Weak<Shared>)>> {
    LISTENERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `key` is still listened on for an ID gone within `LINGER` (the new ID takes
/// the listen over, and the requests that came meanwhile).
fn take_over(l: &mut [(ListenKey, Weak<Shared>)], key: &ListenKey) -> bool {
    l.iter()
        .any(|(k, w)| k == key && w.upgrade().is_none_or(|sh| !sh.lock().alive))
}

/// A listening ID went: its port stays listened on for `LINGER`, so that requests
/// arriving while the program makes the next listening ID on it (perftest's second
/// connection follows its first at once) wait for that one instead of being refused.
/// Then, if no ID listens on it, the requests still queued are refused.
pub(crate) fn stop_listening(dev: Arc<CmDevice>, ud: bool, port: u16) {
    let key = (dev.name.clone(), ud, port);
    let unlisten = move || {
        let mut l = listeners();
        if current_in(&l, &key).is_some() {
            return; // taken over
        }
        l.retain(|(k, _)| *k != key);
        if ud {
            dev.cm.unlisten_ud(port);
        } else {
            dev.cm.unlisten(port);
        }
    };
    let _ = spawn("ferroce-rdma-linger", move || {
        std::thread::sleep(LINGER);
        unlisten();
    });
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
    let key = (dev.name.clone(), ud, port);
    while sh.lock().alive {
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
/// channel.
fn new_request(
    listen: &Arc<Shared>,
    dev: &Arc<CmDevice>,
    port: u16,
    from: std::net::Ipv6Addr,
    ip: Option<rdma_cm::IpHeader>,
    data: Vec<u8>,
    pending: Pending,
) {
    let st = listen.lock();
    let mut st = st;
    let ps = st.ps;
    let Some(lc) = listen.c(&mut st) else {
        return refuse(dev, pending);
    };
    let child = if listen.own_channel.is_some() {
        // A synchronous listener's requests are synchronous IDs too, each with a
        // channel of its own (their CONNECT_REQUEST still goes to the listener's).
        let Ok(ch) = super::channel::create() else {
            return refuse(dev, pending);
        };
        // SAFETY: just made live.
        let events = unsafe { (*ch).events.clone() };
        id::create(events, ch.cast(), Some(ch as usize), lc.context, ps)
    } else {
        id::create(listen.events.clone(), lc.channel, None, lc.context, ps)
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
        unsafe { id::rdma_destroy_id(child.cast()) };
        return;
    }
    listen.events.post(Box::new(e));
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
        CmFailure::Rejected(reason) => Event::new(RDMA_CM_EVENT_REJECTED, me, reason.0 as c_int),
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
    catch("rdma_connect", -1, || {
        let r = (|| {
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
            let q = qp_of(cid.qp()).ok_or(libc::EINVAL)?;
            // The QP outlives the wait: rdma_destroy_qp before the outcome is the
            // program's mistake, and the transport then refuses the transition.
            let qp = q.inner.clone();
            spawn("ferroce-rdma-connect", move || {
                match dev.cm.connect_rc(&qp, dst.ip(), dst.port(), &data, ANSWER) {
                    Ok(c) => {
                        let mut st = sh.lock();
                        st.conn = Some(c.id);
                        let mut e = Event::new(RDMA_CM_EVENT_ESTABLISHED, sh.me, 0);
                        e.c.param.conn = ManuallyDrop::new(rdma_conn_param {
                            qp_num: c.remote_qpn,
                            ..zero_conn_param()
                        });
                        e.private = c.private_data;
                        let posted = sh.post_locked(&st, e);
                        drop(st);
                        if posted {
                            watch_disconnect(sh, dev, c.id);
                        }
                    }
                    Err(f) => {
                        sh.post(failure_event(sh.me, &f));
                    }
                }
            })?;
            complete(&waiter, RDMA_CM_EVENT_ESTABLISHED)
        })();
        ret(r)
    })
}

#[export_name = "__ferroce_rdma_accept"]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    catch("rdma_accept", -1, || {
        let r = (|| {
            let cid = id_of(id).ok_or(libc::EINVAL)?;
            let sh = cid.shared.clone();
            let qp = qp_of(cid.qp());
            let mut st = sh.lock();
            let dev = st.dev.clone().ok_or(libc::EINVAL)?;
            let data = private_of(conn_param);
            match st.request.take() {
                Some(Pending::Ud(r)) => {
                    let q = qp.ok_or(libc::EINVAL)?;
                    let qkey = RDMA_UDP_QKEY;
                    dev.cm
                        .accept_ud(&r, q.inner.qpn(), qkey)
                        .map_err(|_| libc::EINVAL)?;
                    Ok(())
                }
                Some(Pending::Rc(r)) => {
                    let Some(q) = qp else {
                        st.request = Some(Pending::Rc(r));
                        return Err(libc::EINVAL);
                    };
                    let conn = match dev.cm.begin_accept_rc(&r, &q.inner, &data) {
                        Ok(c) => c,
                        Err(f) => {
                            tracing::info!(%f, "rdma_accept failed");
                            return Err(match f {
                                CmFailure::Verbs(e) => crate::guard::errno_of(&e),
                                _ => libc::EINVAL,
                            });
                        }
                    };
                    st.conn = Some(conn.id);
                    drop(st);
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
        })();
        ret(r)
    })
}

#[export_name = "__ferroce_rdma_reject"]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    catch("rdma_reject", -1, || {
        let r = (|| {
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
        })();
        ret(r)
    })
}

#[export_name = "__ferroce_rdma_disconnect"]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    catch("rdma_disconnect", -1, || {
        let r = (|| {
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
                let _ = dev.cm.wait_disconnected(conn, DREP);
                sh.post_disconnected();
            })
        })();
        ret(r)
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
    catch("rdma_establish", -1, || {
        // CONNECT_RESPONSE (a connect without a QP) is not offered: rdma_connect needs
        // the ID's QP, so there is nothing to establish by hand.
        ret(id_of(id).map_or(Err(libc::EINVAL), |_| Err(libc::EOPNOTSUPP)))
    })
}

#[export_name = "__ferroce_rdma_init_qp_attr"]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    catch("rdma_init_qp_attr", -1, || {
        // QPs made outside rdma_create_qp are not connected by ferroce's rdma_cm.
        let _ = (qp_attr, qp_attr_mask);
        ret(id_of(id).map_or(Err(libc::EINVAL), |_| Err(libc::EOPNOTSUPP)))
    })
}

#[export_name = "__ferroce_rdma_get_request"]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    catch("rdma_get_request", -1, || {
        let r = (|| {
            let l = id_of(listen).ok_or(libc::EINVAL)?;
            if id.is_null() {
                return Err(libc::EINVAL);
            }
            let ch = l.shared.own_channel.ok_or(libc::EINVAL)?;
            let mut e: *mut rdma_cm_event = std::ptr::null_mut();
            // SAFETY: the listener's own live channel; `e` a local.
            if unsafe { super::channel::rdma_get_cm_event(ch as *mut rdma_event_channel, &mut e) }
                != 0
            {
                return Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO));
            }
            // SAFETY: live until acked.
            let (kind, child) = unsafe { ((*e).event, (*e).id) };
            // SAFETY: as above.
            unsafe { super::channel::rdma_ack_cm_event(e) };
            if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
                return Err(libc::EINVAL);
            }
            let ep_qp = l.shared.lock().ep_qp;
            if let Some(mut ep) = ep_qp {
                // SAFETY: `child` is the request's live ID; `attr` a copy.
                if unsafe { super::qp::rdma_create_qp(child, ep.pd, &mut ep.attr) } != 0 {
                    return Err(std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO));
                }
            }
            // SAFETY: non-NULL, the caller's to write.
            unsafe { *id = child };
            Ok(())
        })();
        ret(r)
    })
}

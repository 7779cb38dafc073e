//! rdma_cm IDs: `rdma_create_id`, `rdma_destroy_id`, and the state behind each.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use ferroce::cm::{Request, UdRequest};
use ferroce_transport::cm::CommId;

use super::channel::{self, channel_of, Backlog, Event, Events, Unacked};
use super::devices::CmDevice;
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::guard::{catch, set_errno};
use crate::handles::{self, Kind};
use crate::per_process::PerProcess;

/// An ID as C sees it.
#[repr(C)]
pub(crate) struct Id {
    /// Must come first: C's `rdma_cm_id *` points at it. Written (under `Shared::st`)
    /// by threads of this library while the program reads it.
    pub c: std::cell::UnsafeCell<rdma_cm_id>,
    pub shared: Arc<Shared>,
}

impl Id {
    /// `cm_id->qp`.
    pub(crate) fn qp(&self) -> *mut ibv_qp {
        let mut st = self.shared.lock();
        self.shared
            .c(&mut st)
            .map_or(std::ptr::null_mut(), |c| c.qp)
    }
}

// SAFETY: the raw pointers inside are C handles, compared and handed back; the C struct
// is written only under `Shared::st`.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

/// What the ID's threads share with it.
pub(crate) struct Shared {
    /// The C `rdma_cm_id *`.
    pub me: usize,
    /// The channel's events (rdma_migrate_id moves the ID to another channel).
    events: std::sync::RwLock<Arc<Events>>,
    /// The channel made for an ID created without one (rdma_cm's synchronous use), 0 for
    /// none: rdma_migrate_id moves an ID between the two uses.
    own_channel: AtomicUsize,
    /// Its events handed out and not yet acknowledged.
    pub unacked: Arc<Unacked>,
    /// A listening ID's connect requests posted and not yet read.
    pub backlog: Arc<Backlog>,
    pub st: Mutex<St>,
}

/// A connection request a passive-side ID was made for, until accepted or rejected.
pub(crate) enum Pending {
    Rc(Request),
    Ud(UdRequest),
}

/// An ID's state.
pub(crate) struct St {
    /// False once rdma_destroy_id began: no event is posted about it after that.
    pub alive: bool,
    pub ps: rdma_port_space,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The device it is bound to (an address of it, or a connection through it).
    pub dev: Option<Arc<CmDevice>>,
    /// Where it listens (one device, or all for a wildcard address); each device's CM
    /// holds the port there from other processes (`ferroce::cm::ports`).
    pub listening: Vec<Arc<CmDevice>>,
    pub request: Option<Pending>,
    /// The connection, once requested or accepted.
    pub conn: Option<CommId>,
    /// rdma_disconnect was called.
    pub closing: bool,
    /// RDMA_CM_EVENT_DISCONNECTED was posted.
    pub disconnected: bool,
    /// rdma_create_ep's PD and QP attributes for the QP of each request (a passive ID).
    pub ep_qp: Option<EpQp>,
    /// What a QP of this connection needs to reach RTS (rdma_init_qp_attr): known from
    /// the request on the passive side, from the reply on the active side.
    pub path: Option<ferroce::verbs::RcPath>,
    /// Connected with no QP on the ID: the RTU waits for rdma_establish.
    pub awaiting_establish: bool,
    /// The QP's local ACK timeout set with RDMA_OPTION_ID_ACK_TIMEOUT, for its RTS.
    pub ack_timeout: Option<u8>,
    /// The multicast groups it joined.
    pub groups: Vec<Group>,
    /// RDMA_CM_EVENT_DEVICE_REMOVAL was posted: its device is gone, and as from the
    /// kernel's rdma_cm no event about it follows (the program is to destroy it).
    pub removed: bool,
}

impl St {
    /// `path` with what the program set on the ID (its ACK timeout), as the QP takes it.
    pub(crate) fn path_as_set(&self, mut path: ferroce::verbs::RcPath) -> ferroce::verbs::RcPath {
        if let Some(t) = self.ack_timeout {
            path.timeout = t;
        }
        path
    }
}

/// A multicast group an ID joined (see `mcast`).
pub(crate) struct Group {
    /// The group's address, as the program gave it.
    pub addr: std::net::IpAddr,
    pub mgid: std::net::Ipv6Addr,
    /// The QP attached at the join (its `ibv_qp *` and number), if any.
    pub qp: Option<(usize, u32)>,
    /// The host's IP-level membership (IGMP), held while the socket is open: never
    /// read, dropped with the group.
    pub _igmp: Option<std::net::UdpSocket>,
}

/// The QP attributes of `rdma_create_ep` for a passive ID's requests.
#[derive(Clone, Copy)]
pub(crate) struct EpQp {
    pub pd: *mut ibv_pd,
    pub attr: ibv_qp_init_attr,
}

// SAFETY: the pointers inside are C handles, handed back to ibv_create_qp, which checks
// them; nothing dereferences them here.
unsafe impl Send for EpQp {}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// The channel made for this ID when it was created without one, while it is
    /// synchronous: rdma_cm's calls on it wait for their own events there.
    pub(crate) fn own_channel(&self) -> Option<usize> {
        Some(self.own_channel.load(Ordering::Acquire)).filter(|&c| c != 0)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, St> {
        relock(&self.st)
    }

    /// The events of the channel the ID is on now.
    pub(crate) fn events(&self) -> Arc<Events> {
        self.events
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Posts an event about this ID, unless it is being destroyed.
    pub(crate) fn post(&self, e: Event) -> bool {
        let st = self.lock();
        self.post_locked(&st, e)
    }

    pub(crate) fn post_locked(&self, st: &St, mut e: Event) -> bool {
        if !st.alive || st.removed {
            return false;
        }
        e.unacked = Some(self.unacked.clone());
        self.events().post(Box::new(e));
        true
    }

    /// The C struct, to fill in, while the ID lives (`st` held is the proof).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn c(&self, st: &mut St) -> Option<&mut rdma_cm_id> {
        // SAFETY: `me` is the Id's C struct, freed only by rdma_destroy_id after it
        // clears `alive` under the lock the caller holds.
        st.alive
            .then(|| unsafe { &mut *(self.me as *mut rdma_cm_id) })
    }

    /// Posts DISCONNECTED once, whoever ends the connection first.
    pub(crate) fn post_disconnected(&self) {
        self.post_disconnected_status(0);
    }

    /// [`Shared::post_disconnected`] with the event's status: -ETIMEDOUT when this
    /// side's DREQ went unanswered, as from rdma_cm.
    pub(crate) fn post_disconnected_status(&self, status: c_int) {
        let mut st = self.lock();
        if st.disconnected {
            return;
        }
        st.disconnected = true;
        let e = Event::new(RDMA_CM_EVENT_DISCONNECTED, self.me, status);
        self.post_locked(&st, e);
    }
}

/// An rdma_cm call: `f`'s error reported as rdma_cm does (-1 and errno), and no panic
/// into C.
pub(crate) fn api(function: &'static str, f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    catch(function, -1, || ret(f()))
}

/// The verbs convention of rdma_cm: 0, or -1 with errno.
pub(crate) fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// For an ID without a channel of its own (synchronous rdma_cm): waits for the event
/// the step just started and fails with its status unless it is `ok`.
pub(crate) fn complete(sh: &Shared, ok: rdma_cm_event_type) -> Result<(), c_int> {
    let Some(ch) = sh.own_channel() else {
        return Ok(());
    };
    let (kind, status, _) = own_event(ch)?;
    if kind == ok {
        Ok(())
    } else if status < 0 {
        Err(-status)
    } else {
        Err(libc::ECONNREFUSED)
    }
}

/// The next event on a synchronous ID's own channel `ch`, read and acknowledged: its
/// kind, status and ID.
pub(crate) fn own_event(ch: usize) -> Result<(rdma_cm_event_type, c_int, *mut rdma_cm_id), c_int> {
    let mut e: *mut rdma_cm_event = std::ptr::null_mut();
    // SAFETY: `ch` is an ID's own live channel; `e` is a local to write.
    if unsafe { channel::rdma_get_cm_event(ch as *mut rdma_event_channel, &mut e) } != 0 {
        return Err(last_errno());
    }
    // SAFETY: just returned by rdma_get_cm_event, live until acked below.
    let r = unsafe { ((*e).event, (*e).status, (*e).id) };
    // SAFETY: as above.
    unsafe { channel::rdma_ack_cm_event(e) };
    Ok(r)
}

/// The errno the call just made left.
pub(crate) fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Every ID of this process, for a device's removal to find those on it (held weakly: an
/// ID's `Shared` goes with it, and entries of destroyed IDs are pruned as IDs are made).
/// A child of fork() starts with none, as with the devices (see [`PerProcess`]).
static IDS: PerProcess<Weak<Shared>> = PerProcess::new();

fn remember(sh: &Arc<Shared>) {
    let mut ids = IDS.lock();
    // Pruned each time its length reaches a power of two from 64: it stays under twice
    // the most IDs alive at once (or 64), for a cost spread over the IDs made.
    if ids.len() >= 64 && ids.len().is_power_of_two() {
        ids.retain(|w| w.strong_count() > 0);
    }
    ids.push(Arc::downgrade(sh));
}

/// The IDs of this process not yet destroyed.
pub(crate) fn all_ids() -> Vec<Arc<Shared>> {
    let mut ids = IDS.lock();
    ids.retain(|w| w.strong_count() > 0);
    ids.iter().filter_map(Weak::upgrade).collect()
}

/// The ID behind `p`, if live.
pub(crate) fn id_of(p: *const rdma_cm_id) -> Option<&'static Id> {
    // SAFETY: live (checked), freed only by rdma_destroy_id.
    handles::get(p as *const Id, Kind::CmId).map(|p| unsafe { &*p })
}

/// A new live ID on `events`; `context` and `ps` as rdma_create_id takes them.
pub(crate) fn create(
    events: Arc<Events>,
    channel: *mut rdma_event_channel,
    own_channel: Option<usize>,
    context: *mut c_void,
    ps: rdma_port_space,
) -> *mut Id {
    // SAFETY: plain C data (pointers, integers, unions of them); zero is valid.
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = ps;
    c.qp_type = if ps == RDMA_PS_UDP {
        IBV_QPT_UD
    } else {
        IBV_QPT_RC
    };
    let shared = Arc::new(Shared {
        me: 0,
        events: std::sync::RwLock::new(events),
        own_channel: AtomicUsize::new(own_channel.unwrap_or(0)),
        unacked: Arc::default(),
        backlog: Arc::default(),
        st: Mutex::new(St {
            alive: true,
            ps,
            src: None,
            dst: None,
            dev: None,
            listening: Vec::new(),
            request: None,
            conn: None,
            closing: false,
            disconnected: false,
            ep_qp: None,
            path: None,
            awaiting_establish: false,
            ack_timeout: None,
            groups: Vec::new(),
            removed: false,
        }),
    });
    let p = handles::insert(
        Box::new(Id {
            c: std::cell::UnsafeCell::new(c),
            shared,
        }),
        Kind::CmId,
    );
    // SAFETY: just made live; nothing else has seen it yet.
    let id = unsafe { &mut *p };
    // `me` is set before any thread can see the Arc.
    Arc::get_mut(&mut id.shared).expect("not shared yet").me = p as usize;
    remember(&id.shared);
    tracing::debug!(id = ?p, ps, "rdma_create_id");
    p
}

#[export_name = "__ferroce_rdma_create_id"]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    catch("rdma_create_id", -1, || {
        if id.is_null() || (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP) {
            // RDMA_PS_IPOIB and RDMA_PS_IB (AF_IB addresses) need InfiniBand.
            set_errno(if id.is_null() {
                libc::EINVAL
            } else {
                libc::EPROTONOSUPPORT
            });
            return -1;
        }
        let (channel, own) = if channel.is_null() {
            match channel::create() {
                Ok(ch) => (ch.cast::<rdma_event_channel>(), Some(ch as usize)),
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            }
        } else {
            (channel, None)
        };
        let Some(ch) = channel_of(channel) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let p = create(ch.events.clone(), channel, own, context, ps);
        // SAFETY: `id` is non-NULL and the caller's to write.
        unsafe { *id = p.cast() };
        0
    })
}

/// Moves an ID to `channel`, as rdma_cm's does: its unread events go with it. An ID made
/// without a channel (synchronous) may move onto one, and its own channel goes (libfabric's
/// verbs provider makes every ID that way, then moves it to its event queue's channel); an
/// ID on a channel may become synchronous (a NULL `channel`), with a channel of its own
/// made for it. A synchronous ID cannot move to NULL (EINVAL).
#[export_name = "__ferroce_rdma_migrate_id"]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    api("rdma_migrate_id", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        let sh = &cid.shared;
        let was_own = sh.own_channel();
        if was_own == Some(channel as usize) {
            return Ok(());
        }
        let (channel, own) = if channel.is_null() {
            if was_own.is_some() {
                return Err(libc::EINVAL);
            }
            let ch = channel::create()?;
            (ch.cast::<rdma_event_channel>(), Some(ch as usize))
        } else {
            (channel, None)
        };
        let Some(ch) = channel_of(channel) else {
            return Err(libc::EINVAL);
        };
        let mut st = sh.lock();
        let old = sh.events();
        *sh.events.write().unwrap_or_else(PoisonError::into_inner) = ch.events.clone();
        sh.own_channel.store(own.unwrap_or(0), Ordering::Release);
        if let Some(c) = sh.c(&mut st) {
            c.channel = channel;
        }
        drop(st);
        // Events not read yet follow the ID.
        for e in old.take_of(sh.me) {
            ch.events.post(e);
        }
        if let Some(was) = was_own {
            channel::release_own(was);
        }
        Ok(())
    })
}

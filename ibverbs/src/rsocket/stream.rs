//! A stream rsocket: its rdma_cm ID on an event channel of its own (the channel's fd is
//! the socket's number, as in rdma-core), the steps of connecting and accepting driven by
//! that channel's events, and sending and receiving over [`Ep`] by the rules of
//! [`Flow`].

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::ep::{set_nonblocking, Ep, RECV_WR};
use super::flow::{Flow, Sizes};
use super::proto::{parse_msg, ConnData, Op, CONN_DATA_LEN, CTRL_DISCONNECT, CTRL_SHUTDOWN};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::rdmacm as cm;

/// Defaults of rdma-core's rsockets (`/etc/rdma/rsocket/*` are not read), but for the
/// rings: 1 MiB each way rather than 128 KiB, as a receiver publishes half its ring at a
/// time. iperf3 under librspreload.so, which sets no buffer size, moved 2.6 Gb/s with
/// 128 KiB and 7.1-7.8 with 1 MiB (veth, 2026-12-03).
pub(crate) const DEFAULT_QUEUE: u16 = 384;
pub(crate) const DEFAULT_BUF: u32 = 1 << 20;
pub(crate) const DEFAULT_INLINE: u16 = 64;
/// Resolve timeouts, as rdma-core's first try.
const RESOLVE_MS: c_int = 2000;
/// A connected socket's progress reads its CM channel (a syscall) only when a wait saw it
/// readable, or once in this many calls (for a program that never waits).
const CM_EVERY: u32 = 64;
/// How long a blocking call polls before it sleeps (rdma-core's rsockets: 10 µs).
const SPIN: std::time::Duration = std::time::Duration::from_micros(SPIN_US);
const SPIN_US: u64 = 10;
/// A blocked call re-checks at least this often, should another thread have taken the
/// wake-up it waited for.
const RECHECK_MS: c_int = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Init,
    Bound,
    Listening,
    ResolvingAddr,
    ResolvingRoute,
    Connecting,
    Connected,
    /// Both directions ended (by either end), the connection is gone.
    Disconnected,
    /// A connect failed, or the connection broke (`err`).
    Failed,
}

impl Phase {
    pub(crate) fn opening(self) -> bool {
        matches!(
            self,
            Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting
        )
    }
}

/// Options a program may set before connecting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opts {
    pub sq: u16,
    pub rq: u16,
    pub sbuf: u32,
    pub rbuf: u32,
    pub inline: u16,
    pub nodelay: bool,
    pub keepalive: bool,
    pub keepidle: c_int,
    pub reuseaddr: bool,
    pub v6only: bool,
    pub linger: libc::linger,
    pub oobinline: bool,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            sq: DEFAULT_QUEUE,
            rq: DEFAULT_QUEUE,
            sbuf: DEFAULT_BUF,
            rbuf: DEFAULT_BUF,
            inline: DEFAULT_INLINE,
            nodelay: false,
            keepalive: false,
            keepidle: 7200,
            reuseaddr: false,
            v6only: false,
            linger: libc::linger {
                l_onoff: 0,
                l_linger: 0,
            },
            oobinline: false,
        }
    }
}

pub(crate) struct Inner {
    pub id: *mut rdma_cm_id,
    pub phase: Phase,
    pub readable: bool,
    pub writable: bool,
    pub err: c_int,
    pub nonblock: bool,
    pub opts: Opts,
    pub ep: Option<Ep>,
    pub flow: Option<Flow>,
    /// A completion event was asked for and not yet taken.
    armed: bool,
    /// Where a non-blocking connect goes.
    dst: Option<(libc::sockaddr_storage, libc::socklen_t)>,
    /// The CM channel was seen readable: look at its events at the next progress.
    pub cm_pending: bool,
    /// Progress calls since the CM channel was last read (a connected socket reads it
    /// every [`CM_EVERY`] calls even when no wait saw it readable).
    cm_skipped: u32,
    pub domain: c_int,
}

// SAFETY: `id` is an rdma_cm ID of this library (thread-safe calls), used only under the
// socket's mutex.
unsafe impl Send for Inner {}

pub(crate) struct RSocket {
    /// The socket's number: its event channel's fd.
    pub fd: c_int,
    channel: usize,
    inner: Mutex<Inner>,
    /// Held by the one thread waiting on the completion channel (others wait for it).
    wait_lock: Mutex<()>,
}

/// The event channel of `fd`'s socket, as a pointer.
fn chan(c: usize) -> *mut rdma_event_channel {
    c as *mut rdma_event_channel
}

impl RSocket {
    /// A new unconnected socket of `domain`.
    pub(crate) fn new(domain: c_int, nonblock: bool) -> Result<RSocket, c_int> {
        // SAFETY: plain calls into this library's rdma_cm; out-pointers are locals.
        unsafe {
            let ch = cm::rdma_create_event_channel();
            if ch.is_null() {
                return Err(cm::last_errno());
            }
            let mut id = null_mut();
            if cm::rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP) != 0 {
                let e = cm::last_errno();
                cm::rdma_destroy_event_channel(ch);
                return Err(e);
            }
            Self::around(ch, id, domain, nonblock)
        }
    }

    /// A socket around an ID already on channel `ch`.
    ///
    /// # Safety
    /// `ch` is a live event channel of this library and `id` a live ID on it, both
    /// handed to the socket (it destroys them).
    unsafe fn around(
        ch: *mut rdma_event_channel,
        id: *mut rdma_cm_id,
        domain: c_int,
        nonblock: bool,
    ) -> Result<RSocket, c_int> {
        // SAFETY: `ch` is live (the caller's).
        let fd = unsafe { (*ch).fd };
        let s = RSocket {
            fd,
            channel: ch as usize,
            inner: Mutex::new(Inner {
                id,
                phase: Phase::Init,
                readable: false,
                writable: false,
                err: 0,
                nonblock,
                opts: Opts::default(),
                ep: None,
                flow: None,
                armed: false,
                dst: None,
                cm_pending: false,
                cm_skipped: 0,
                domain,
            }),
            wait_lock: Mutex::new(()),
        };
        // The channel is only ever read without blocking; waits poll its fd.
        if let Err(e) = set_nonblocking(fd) {
            s.destroy();
            return Err(e);
        }
        Ok(s)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Frees everything; the socket must be out of the table.
    pub(crate) fn destroy(&self) {
        let mut st = self.lock();
        // SAFETY: the socket's own ID and channel, destroyed once (the table no longer
        // hands the socket out).
        unsafe {
            if st.phase == Phase::Connected || st.phase == Phase::Disconnected {
                cm::rdma_disconnect(st.id);
            }
            st.ep = None; // the QP, CQ and buffers, before the ID
            cm::rdma_destroy_id(st.id);
            cm::rdma_destroy_event_channel(chan(self.channel));
        }
        // A thread still in a call on this socket (it holds its own reference) finds it
        // closed when it next looks, and returns EBADF.
        st.phase = Phase::Failed;
        st.err = libc::EBADF;
        st.readable = false;
        st.writable = false;
        st.flow = None;
    }

    pub(crate) fn bind(&self, addr: *const libc::sockaddr) -> Result<(), c_int> {
        let mut st = self.lock();
        if st.phase != Phase::Init {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller checked `addr` non-NULL and long enough for its family.
        if unsafe { cm::rdma_bind_addr(st.id, addr as *mut _) } != 0 {
            return Err(cm::last_errno());
        }
        st.phase = Phase::Bound;
        Ok(())
    }

    pub(crate) fn listen(&self, backlog: c_int) -> Result<(), c_int> {
        let mut st = self.lock();
        match st.phase {
            Phase::Listening => return Ok(()),
            Phase::Bound => {}
            _ => return Err(libc::EINVAL),
        }
        // SAFETY: the socket's live ID.
        if unsafe { cm::rdma_listen(st.id, backlog) } != 0 {
            return Err(cm::last_errno());
        }
        st.phase = Phase::Listening;
        Ok(())
    }

    /// Starts connecting to `addr`; finishes when blocking.
    pub(crate) fn connect(
        &self,
        addr: &libc::sockaddr_storage,
        len: libc::socklen_t,
    ) -> Result<(), c_int> {
        let mut st = self.lock();
        match st.phase {
            Phase::Init | Phase::Bound => {}
            Phase::Connected => return Err(libc::EISCONN),
            p if p.opening() => return Err(libc::EALREADY),
            _ => return Err(libc::EINVAL),
        }
        st.dst = Some((*addr, len));
        let dst = addr as *const libc::sockaddr_storage as *mut libc::sockaddr;
        // SAFETY: the live ID; `dst` lives across the call (it is copied).
        if unsafe { cm::rdma_resolve_addr(st.id, null_mut(), dst, RESOLVE_MS) } != 0 {
            return Err(cm::last_errno());
        }
        st.phase = Phase::ResolvingAddr;
        if st.nonblock {
            return Err(libc::EINPROGRESS);
        }
        drop(st);
        loop {
            let mut st = self.lock();
            self.drive(&mut st);
            match st.phase {
                Phase::Connected => return Ok(()),
                Phase::Failed => return Err(st.err),
                p if p.opening() => {}
                _ => return Err(libc::ECONNABORTED),
            }
            drop(st);
            wait_fds(&[self.fd], -1);
        }
    }

    /// Takes the next connect request and accepts it: the new socket, connected.
    pub(crate) fn accept(&self) -> Result<RSocket, c_int> {
        let nonblock = {
            let st = self.lock();
            if st.phase != Phase::Listening {
                return Err(libc::EINVAL);
            }
            st.nonblock
        };
        loop {
            {
                let st = self.lock();
                if st.phase != Phase::Listening {
                    // Closed by another thread meanwhile.
                    return Err(if st.err != 0 { st.err } else { libc::EINVAL });
                }
            }
            let (kind, _, child, data) = match self.next_event(RDMA_CM_EVENT_CONNECT_REQUEST) {
                Ok(e) => e,
                Err(libc::EAGAIN) if !nonblock => {
                    wait_fds(&[self.fd], -1);
                    continue;
                }
                Err(err) => return Err(err),
            };
            if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
                continue;
            }
            match self.take_request(child, &data) {
                Ok(s) => return Ok(s),
                Err(err) => {
                    tracing::info!(err, "rsocket: connect request refused");
                    // Refused requests do not end the accept: take the next.
                    if nonblock {
                        return Err(libc::EAGAIN);
                    }
                }
            }
        }
    }

    fn take_request(&self, child: *mut rdma_cm_id, data: &[u8]) -> Result<RSocket, c_int> {
        let (opts, domain, nonblock) = {
            let st = self.lock();
            (st.opts, st.domain, st.nonblock)
        };
        let refuse = |e: c_int| {
            // SAFETY: the request's live ID, refused and destroyed once.
            unsafe {
                cm::rdma_reject(child, std::ptr::null(), 0);
                cm::rdma_destroy_id(child);
            }
            e
        };
        let peer = match ConnData::parse(data) {
            Ok(p) => p,
            Err(why) => {
                super::count_protocol_error();
                tracing::warn!(%why, "rsocket: connect request refused");
                return Err(refuse(libc::EPROTO));
            }
        };
        // SAFETY: plain calls; the child moves onto a channel of its own.
        let ch = unsafe { cm::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(refuse(cm::last_errno()));
        }
        // SAFETY: the child is live and ours; `ch` just made.
        if unsafe { cm::rdma_migrate_id(child, ch) } != 0 {
            let e = cm::last_errno();
            // SAFETY: made above, unused.
            unsafe { cm::rdma_destroy_event_channel(ch) };
            return Err(refuse(e));
        }
        // SAFETY: `ch` carries `child`.
        let s = unsafe { RSocket::around(ch, child, domain, nonblock) }?;
        let r = {
            let mut st = s.lock();
            st.opts = opts;
            s.accept_on(&mut st, &peer)
        };
        match r {
            Ok(()) => Ok(s),
            Err(e) => {
                // SAFETY: the child, not yet accepted.
                unsafe { cm::rdma_reject(child, std::ptr::null(), 0) };
                s.destroy();
                Err(e)
            }
        }
    }

    fn accept_on(&self, st: &mut Inner, peer: &ConnData) -> Result<(), c_int> {
        let (ep, mut flow) = make_ep(st)?;
        let first = flow.peer(peer);
        ep.set_target(0, first);
        let mine = flow
            .conn_data(
                (ep.tgt.addr(), Ep::rkey(ep.tmr)),
                (ep.rbuf.addr(), Ep::rkey(ep.rmr)),
            )
            .emit();
        let mut param = conn_param(&mine);
        st.ep = Some(ep);
        st.flow = Some(flow);
        // SAFETY: the live ID with its QP; `param` and `mine` live across the call.
        if unsafe { cm::rdma_accept(st.id, &mut param) } != 0 {
            return Err(cm::last_errno());
        }
        st.phase = Phase::Connected;
        st.readable = true;
        st.writable = true;
        Ok(())
    }

    /// Takes every waiting CM event and moves the socket on by it.
    pub(crate) fn drive(&self, st: &mut Inner) {
        if st.phase == Phase::Listening {
            return; // its events are connect requests, for accept
        }
        while let Ok((kind, status, _, data)) = self.next_event(RDMA_CM_EVENT_ESTABLISHED) {
            self.on_event(st, kind, status, &data);
        }
    }

    /// The next event on the socket's channel (never blocking), read and acknowledged:
    /// its kind, status, ID, and a copy of its private data if it is of kind `with_data`.
    /// Err: errno, EAGAIN when none waits.
    fn next_event(
        &self,
        with_data: rdma_cm_event_type,
    ) -> Result<(rdma_cm_event_type, c_int, *mut rdma_cm_id, Vec<u8>), c_int> {
        let mut e: *mut rdma_cm_event = null_mut();
        // SAFETY: the socket's channel (checked by the call; live while the socket is);
        // `e` a local.
        if unsafe { cm::rdma_get_cm_event(chan(self.channel), &mut e) } != 0 {
            return Err(cm::last_errno());
        }
        // SAFETY: a live event until acked below; its private data as long.
        let r = unsafe {
            let c = &*e;
            let data = if c.event == with_data {
                private_data(&c.param.conn)
            } else {
                Vec::new()
            };
            (c.event, c.status, c.id, data)
        };
        // SAFETY: the event just taken.
        unsafe { cm::rdma_ack_cm_event(e) };
        Ok(r)
    }

    fn on_event(&self, st: &mut Inner, kind: rdma_cm_event_type, status: c_int, data: &[u8]) {
        let fail = |st: &mut Inner, e: c_int| {
            st.phase = Phase::Failed;
            st.err = e;
            st.readable = false;
            st.writable = false;
        };
        match (kind, st.phase) {
            (RDMA_CM_EVENT_ADDR_RESOLVED, Phase::ResolvingAddr) => {
                // SAFETY: the live ID.
                if unsafe { cm::rdma_resolve_route(st.id, RESOLVE_MS) } != 0 {
                    fail(st, cm::last_errno());
                } else {
                    st.phase = Phase::ResolvingRoute;
                }
            }
            (RDMA_CM_EVENT_ROUTE_RESOLVED, Phase::ResolvingRoute) => match self.send_request(st) {
                Ok(()) => st.phase = Phase::Connecting,
                Err(e) => fail(st, e),
            },
            (RDMA_CM_EVENT_ESTABLISHED, Phase::Connecting) => match ConnData::parse(data) {
                Ok(peer) => {
                    let (Some(flow), Some(ep)) = (st.flow.as_mut(), st.ep.as_ref()) else {
                        return fail(st, libc::EINVAL);
                    };
                    let first = flow.peer(&peer);
                    ep.set_target(0, first);
                    st.phase = Phase::Connected;
                    st.readable = true;
                    st.writable = true;
                }
                Err(why) => {
                    super::count_protocol_error();
                    tracing::warn!(%why, "rsocket: connect reply refused");
                    fail(st, libc::EPROTO);
                }
            },
            (RDMA_CM_EVENT_REJECTED, p) if p.opening() => fail(st, libc::ECONNREFUSED),
            (
                RDMA_CM_EVENT_ADDR_ERROR
                | RDMA_CM_EVENT_ROUTE_ERROR
                | RDMA_CM_EVENT_UNREACHABLE
                | RDMA_CM_EVENT_CONNECT_ERROR,
                p,
            ) if p.opening() => {
                let e = if status < 0 {
                    -status
                } else {
                    libc::EHOSTUNREACH
                };
                fail(st, e)
            }
            (RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL, Phase::Connected) => {
                // The peer is gone without a word of the rsocket protocol (killed, or its
                // device went): what arrived can still be read, nothing more comes.
                st.phase = Phase::Disconnected;
                st.readable = false;
                st.writable = false;
            }
            _ => {}
        }
    }

    fn send_request(&self, st: &mut Inner) -> Result<(), c_int> {
        let (ep, flow) = make_ep(st)?;
        let mine = flow
            .conn_data(
                (ep.tgt.addr(), Ep::rkey(ep.tmr)),
                (ep.rbuf.addr(), Ep::rkey(ep.rmr)),
            )
            .emit();
        st.ep = Some(ep);
        st.flow = Some(flow);
        let mut param = conn_param(&mine);
        // SAFETY: the live ID with its QP; `param` and `mine` live across the call.
        errno_result(unsafe { cm::rdma_connect(st.id, &mut param) })
    }

    /// Polls the CQ and the CM: completions taken, receives reposted, the peer's messages
    /// applied, a credit update sent when due.
    pub(crate) fn progress(&self, st: &mut Inner) {
        st.cm_skipped += 1;
        if st.phase != Phase::Connected || st.cm_pending || st.cm_skipped >= CM_EVERY {
            st.cm_pending = false;
            st.cm_skipped = 0;
            self.drive(st);
        }
        let connected = matches!(st.phase, Phase::Connected);
        let Some(ep) = st.ep.as_ref() else { return };
        let Some(flow) = st.flow.as_mut() else { return };
        // SAFETY: ibv_wc is plain C data.
        let mut wcs: [ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let mut budget = u32::from(ep.sizes.sq) + u32::from(ep.sizes.rq);
        let mut reposts = 0u32;
        let mut broke: Option<c_int> = None;
        let mut disconnect_sent = false;
        while budget > 0 {
            // SAFETY: the Ep's live CQ; `wcs` holds 32 entries.
            let n = unsafe { crate::cq::poll_cq(ep.cq, 32, wcs.as_mut_ptr()) };
            if n <= 0 {
                break;
            }
            budget = budget.saturating_sub(n as u32);
            for wc in &wcs[..n as usize] {
                tracing::trace!(
                    wr_id = wc.wr_id,
                    status = wc.status,
                    flags = wc.wc_flags,
                    "rsocket completion"
                );
                if wc.wr_id & RECV_WR != 0 {
                    if wc.status != IBV_WC_SUCCESS {
                        continue; // flushed
                    }
                    reposts += 1;
                    if wc.wc_flags & IBV_WC_WITH_IMM == 0 {
                        // A SEND: rsockets' iWARP form, which this library never asks for.
                        super::count_protocol_error();
                        broke.get_or_insert(libc::EPROTO);
                        continue;
                    }
                    // SAFETY: WITH_IMM says the union holds the immediate.
                    let m = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
                    tracing::trace!(msg = format_args!("{m:#010x}"), "rsocket message");
                    if let Err(why) = flow.received(m) {
                        super::count_protocol_error();
                        tracing::warn!(%why, "rsocket: connection ended");
                        broke.get_or_insert(libc::ECONNRESET);
                    }
                } else {
                    let m = wc.wr_id as u32;
                    flow.sent(m);
                    if parse_msg(m) == (Op::Ctrl, CTRL_DISCONNECT) {
                        disconnect_sent = true;
                    }
                    if wc.status != IBV_WC_SUCCESS && connected {
                        broke.get_or_insert(libc::EIO);
                    }
                }
            }
        }
        if let Some(e) = broke {
            st.phase = Phase::Failed;
            st.err = e;
            st.readable = false;
            st.writable = false;
            return;
        }
        if connected {
            for _ in 0..reposts {
                if let Err(e) = ep.post_recv() {
                    st.phase = Phase::Failed;
                    st.err = e;
                    return;
                }
            }
        }
        if flow.peer_disconnect || disconnect_sent {
            st.phase = Phase::Disconnected;
            st.readable = false;
            st.writable = false;
        } else if flow.peer_shutdown {
            if st.writable {
                st.readable = false;
            } else {
                st.phase = Phase::Disconnected;
                st.readable = false;
            }
        }
        self.give_credit(st);
    }

    /// Sends the peer a credit update if one is due.
    fn give_credit(&self, st: &mut Inner) {
        if st.phase != Phase::Connected {
            return;
        }
        let (Some(ep), Some(flow)) = (st.ep.as_ref(), st.flow.as_mut()) else {
            return;
        };
        if !flow.wants_credit() {
            return;
        }
        let swap = flow.swap();
        let c = flow.credit((ep.rbuf.addr(), Ep::rkey(ep.rmr)));
        let r = match c.publish {
            Some((sge, at, rkey)) => {
                let bytes = sge.to_peer_bytes(swap);
                let inline = ep.inline as usize >= bytes.len();
                let addr = if inline {
                    bytes.as_ptr() as u64
                } else {
                    let off = ep.ctrl_slot(c.slot);
                    ep.fill_sbuf(off, &bytes);
                    ep.sbuf.addr() + u64::from(off)
                };
                let mut sges = [ibv_sge {
                    addr,
                    length: bytes.len() as u32,
                    lkey: Ep::lkey(ep.smr),
                }];
                ep.post_write_imm(&mut sges, c.imm, inline, at, rkey)
            }
            None => ep.post_write_imm(&mut [], c.imm, false, 0, 0),
        };
        if let Err(e) = r {
            st.phase = Phase::Failed;
            st.err = e;
        }
    }

    /// Waits until `test` holds (or the connection ended, which `test` must accept), or
    /// fails with EAGAIN at once when `nonblock`.
    pub(crate) fn wait(
        &self,
        nonblock: bool,
        test: impl Fn(&Inner) -> bool,
    ) -> Result<MutexGuard<'_, Inner>, c_int> {
        let spin_until = std::time::Instant::now() + SPIN;
        loop {
            let mut st = self.lock();
            self.progress(&mut st);
            if test(&st) {
                return Ok(st);
            }
            if nonblock {
                return Err(libc::EAGAIN);
            }
            if st.ep.is_some() && std::time::Instant::now() < spin_until {
                // What is waited for is often a few microseconds away (a credit update,
                // the next transfer): looking again costs less than sleeping for it.
                drop(st);
                std::hint::spin_loop();
                continue;
            }
            let Some(ep) = st.ep.as_ref() else {
                // Not connected and not yet: only CM events move it.
                drop(st);
                wait_fds(&[self.fd], RECHECK_MS);
                continue;
            };
            if !st.armed {
                // SAFETY: the Ep's live CQ.
                unsafe { crate::cq::req_notify_cq(ep.cq, 0) };
                st.armed = true;
                continue; // what completed before the arming is seen by the next poll
            }
            let comp_fd = {
                // SAFETY: the Ep's live channel.
                unsafe { (*ep.comp).fd }
            };
            drop(st);
            let _w = self
                .wait_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !self.lock().armed {
                continue; // another waiter took the event: look again
            }
            let woke = poll_fds(&[comp_fd, self.fd], RECHECK_MS);
            let mut st = self.lock();
            st.cm_pending |= woke & 2 != 0;
            self.take_cq_event(&mut st);
        }
    }

    /// Takes a completion event if one is there (the CQ is then no longer armed).
    pub(crate) fn take_cq_event(&self, st: &mut Inner) {
        let Some(ep) = st.ep.as_ref() else { return };
        let mut cq = null_mut();
        let mut ctx: *mut c_void = null_mut();
        // SAFETY: the Ep's live channel, non-blocking; out-pointers are locals.
        if unsafe { crate::cq::ibv_get_cq_event(ep.comp, &mut cq, &mut ctx) } == 0 {
            // SAFETY: the CQ the event named, ours.
            unsafe { crate::cq::ibv_ack_cq_events(cq, 1) };
            st.armed = false;
        }
    }

    /// Arms the socket for a kernel poll: the fds to watch, or none if it is ready (or
    /// never will be by itself) after arming.
    pub(crate) fn arm(&self, st: &mut Inner) -> Vec<c_int> {
        match st.ep.as_ref() {
            Some(ep) if matches!(st.phase, Phase::Connected | Phase::Disconnected) => {
                if !st.armed {
                    // SAFETY: the Ep's live CQ.
                    unsafe { crate::cq::req_notify_cq(ep.cq, 0) };
                    st.armed = true;
                }
                // SAFETY: the Ep's live channel.
                vec![unsafe { (*ep.comp).fd }, self.fd]
            }
            _ => vec![self.fd],
        }
    }

    /// What a poll of this socket for `events` reports now.
    pub(crate) fn revents(&self, st: &mut Inner, events: i16) -> i16 {
        let mut r = 0;
        match st.phase {
            Phase::Listening if events & libc::POLLIN != 0 && wait_fds(&[self.fd], 0) => {
                r |= libc::POLLIN;
            }
            Phase::Connected | Phase::Disconnected => {
                self.progress(st);
                if events & libc::POLLIN != 0 && (has_data(st) || !st.readable) {
                    r |= libc::POLLIN;
                }
                if events & libc::POLLOUT != 0 && can_send(st) {
                    r |= libc::POLLOUT;
                }
                // The hang-up shows once what arrived before it is read, as a TCP
                // socket's: a program that stops at POLLHUP loses nothing (raised at
                // once, it failed rstream -T a, whose peer closes right after its last
                // send, while the last transfers were still unread).
                match st.phase {
                    Phase::Disconnected if !has_data(st) => r |= libc::POLLHUP,
                    Phase::Failed => r |= libc::POLLERR,
                    _ => {}
                }
            }
            p if p.opening() => {
                self.drive(st);
                if st.phase != p {
                    return self.revents(st, events);
                }
            }
            Phase::Failed => {
                r |= libc::POLLERR | (events & (libc::POLLIN | libc::POLLOUT));
                if st.ep.is_some() {
                    r |= libc::POLLHUP;
                }
            }
            _ => {}
        }
        r
    }

    /// Sends `buf` (all of it when blocking); the bytes sent.
    pub(crate) fn send(&self, bufs: &[&[u8]], flags: c_int) -> Result<usize, c_int> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut st = self.lock();
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        self.past_connect(&mut st)?;
        match st.phase {
            Phase::Connected => {}
            Phase::Failed if st.err != 0 => return Err(st.err),
            Phase::Disconnected | Phase::Failed => return Err(libc::EPIPE),
            _ => return Err(libc::ENOTCONN),
        }
        let mut done = 0usize;
        let mut olen = 0u32;
        let (mut bi, mut boff) = (0usize, 0usize);
        while done < total {
            if !can_send(&st) {
                drop(st);
                st = match self.wait(nonblock, |s| can_send(s) || !s.writable) {
                    Ok(s) => s,
                    Err(e) if done == 0 => return Err(e),
                    Err(_) => return Ok(done),
                };
                if !st.writable {
                    return if done == 0 {
                        Err(libc::ECONNRESET)
                    } else {
                        Ok(done)
                    };
                }
            }
            let inner = &mut *st;
            let (Some(ep), Some(flow)) = (inner.ep.as_ref(), inner.flow.as_mut()) else {
                return Err(libc::ENOTCONN);
            };
            let ti = flow.target_index();
            let entry = ep.target(ti);
            let n = flow.transfer_size(total - done, &mut olen, entry.length);
            let (to, rest, imm) = flow.take(n, entry);
            // The entry is rewritten before the post: once the data lands, the peer may
            // publish a new buffer into it.
            ep.set_target(ti, rest);
            let r = if n <= ep.inline {
                // Inline data is copied by the post: point at the caller's bytes when they
                // lie in one piece (every rsend), and gather them only across iovecs.
                let mut tmp = Vec::new();
                let mut at: Option<*const u8> = None;
                if bufs.get(bi).is_some_and(|b| b.len() - boff >= n as usize) {
                    at = Some(bufs[bi][boff..].as_ptr());
                }
                gather(bufs, &mut bi, &mut boff, n as usize, |s| {
                    if at.is_none() {
                        tmp.extend_from_slice(s)
                    }
                });
                let mut sges = [ibv_sge {
                    addr: at.unwrap_or(tmp.as_ptr()) as u64,
                    length: n,
                    lkey: 0,
                }];
                ep.post_write_imm(&mut sges[..usize::from(n > 0)], imm, true, to.addr, to.key)
            } else {
                let pieces = flow.sbuf_pieces(n);
                let mut sges = [ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey: Ep::lkey(ep.smr),
                }; 2];
                let mut k = 0;
                for (off, len) in pieces {
                    if len == 0 {
                        continue;
                    }
                    let mut at = off;
                    gather(bufs, &mut bi, &mut boff, len as usize, |s| {
                        ep.fill_sbuf(at, s);
                        at += s.len() as u32;
                    });
                    sges[k].addr = ep.sbuf.addr() + u64::from(off);
                    sges[k].length = len;
                    k += 1;
                }
                ep.post_write_imm(&mut sges[..k], imm, false, to.addr, to.key)
            };
            if let Err(e) = r {
                inner.phase = Phase::Failed;
                inner.err = e;
                return if done == 0 { Err(e) } else { Ok(done) };
            }
            done += n as usize;
        }
        Ok(done)
    }

    /// Receives into `bufs`; 0 at the end of the stream.
    pub(crate) fn recv(&self, bufs: &[(*mut u8, usize)], flags: c_int) -> Result<usize, c_int> {
        let total: usize = bufs.iter().map(|b| b.1).sum();
        let mut st = self.lock();
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        self.past_connect(&mut st)?;
        if st.ep.is_none() {
            return Err(if st.phase == Phase::Failed {
                st.err
            } else {
                libc::ENOTCONN
            });
        }
        let mut done = 0usize;
        loop {
            if !has_data(&st) {
                drop(st);
                st = match self.wait(nonblock, |s| has_data(s) || !s.readable) {
                    Ok(s) => s,
                    Err(e) if done == 0 => return Err(e),
                    Err(_) => return Ok(done),
                };
            }
            if !has_data(&st) && st.phase == Phase::Failed && st.err != 0 && done == 0 {
                // A broken connection reads as reset, not as an orderly end.
                return Err(st.err);
            }
            let inner = &mut *st;
            let (Some(ep), Some(flow)) = (inner.ep.as_ref(), inner.flow.as_mut()) else {
                return Err(libc::ENOTCONN);
            };
            if flags & libc::MSG_PEEK != 0 {
                let (mut bi, mut boff) = (0usize, 0usize);
                for (off, n) in flow.peek(total) {
                    scatter(bufs, &mut bi, &mut boff, n as usize, |dst, k, at| {
                        ep.read_rbuf(off + at as u32, dst, k as u32)
                    });
                    done += n as usize;
                }
                return Ok(done);
            }
            while done < total {
                let Some((off, n)) = flow.read(total - done) else {
                    break;
                };
                let (mut bi, mut boff) = locate(bufs, done);
                scatter(bufs, &mut bi, &mut boff, n as usize, |dst, k, at| {
                    ep.read_rbuf(off + at as u32, dst, k as u32)
                });
                done += n as usize;
            }
            self.give_credit(&mut st);
            if done == total || flags & libc::MSG_WAITALL == 0 || !st.readable {
                return Ok(done);
            }
        }
    }

    /// For a send or receive: moves a non-blocking connect on, and fails with EAGAIN
    /// while it is still under way (as rdma-core's rsockets do).
    fn past_connect(&self, st: &mut Inner) -> Result<(), c_int> {
        if st.phase.opening() {
            self.drive(st);
            if st.phase.opening() {
                return Err(libc::EAGAIN);
            }
        }
        Ok(())
    }

    /// Ends one or both directions, telling the peer.
    pub(crate) fn shutdown(&self, how: c_int) -> Result<(), c_int> {
        let mut st = self.lock();
        if st.phase != Phase::Connected {
            return if st.phase == Phase::Disconnected {
                Ok(())
            } else {
                Err(libc::ENOTCONN)
            };
        }
        let ctrl = match how {
            libc::SHUT_RDWR => {
                st.readable = false;
                st.writable = false;
                CTRL_DISCONNECT
            }
            libc::SHUT_WR => {
                st.writable = false;
                if st.readable {
                    CTRL_SHUTDOWN
                } else {
                    CTRL_DISCONNECT
                }
            }
            libc::SHUT_RD => {
                st.readable = false;
                if st.writable {
                    return Ok(());
                }
                CTRL_DISCONNECT
            }
            _ => return Err(libc::EINVAL),
        };
        drop(st);
        let ctrl_free = |s: &Inner| {
            s.phase != Phase::Connected || s.flow.as_ref().is_some_and(Flow::ctrl_avail)
        };
        let mut st = self.wait(false, ctrl_free)?;
        if st.phase == Phase::Connected {
            let imm = st.flow.as_mut().map(|f| f.ctrl(ctrl)).unwrap_or(0);
            if let Some(ep) = st.ep.as_ref() {
                if let Err(e) = ep.post_write_imm(&mut [], imm, false, 0, 0) {
                    st.phase = Phase::Failed;
                    st.err = e;
                }
            }
        }
        drop(st);
        let all_sent =
            |s: &Inner| s.phase != Phase::Connected || s.flow.as_ref().is_some_and(Flow::all_sent);
        drop(self.wait(false, all_sent)?);
        Ok(())
    }

    /// Sets O_NONBLOCK.
    pub(crate) fn set_nonblock(&self, on: bool) {
        self.lock().nonblock = on;
    }

    /// The connect error (and clears it), driving a non-blocking connect first.
    pub(crate) fn take_error(&self) -> c_int {
        let mut st = self.lock();
        if st.phase.opening() {
            self.drive(&mut st);
        }
        std::mem::take(&mut st.err)
    }
}

fn has_data(st: &Inner) -> bool {
    st.flow.as_ref().is_some_and(Flow::has_data)
}

fn can_send(st: &Inner) -> bool {
    if st.phase != Phase::Connected || !st.writable {
        return false;
    }
    match (st.ep.as_ref(), st.flow.as_ref()) {
        (Some(ep), Some(f)) => f.can_send(ep.target(f.target_index()).length),
        _ => false,
    }
}

fn make_ep(st: &Inner) -> Result<(Ep, Flow), c_int> {
    let o = &st.opts;
    let sizes = Sizes {
        sq: o.sq.max(16),
        rq: o.rq.max(16),
        sbuf: o.sbuf,
        rbuf: o.rbuf,
    };
    let ep = Ep::new(st.id, sizes, u32::from(o.inline))?;
    Ok((ep, Flow::new(sizes)))
}

fn conn_param(data: &[u8; CONN_DATA_LEN]) -> rdma_conn_param {
    rdma_conn_param {
        private_data: data.as_ptr().cast(),
        private_data_len: CONN_DATA_LEN as u8,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}

/// A copy of an event's private data.
///
/// # Safety
/// `c` is a live event's parameters.
unsafe fn private_data(c: &rdma_conn_param) -> Vec<u8> {
    if c.private_data.is_null() {
        return Vec::new();
    }
    // SAFETY: the event's own data of the length it gives, live until the ack.
    unsafe {
        std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len))
    }
    .to_vec()
}

/// The verbs convention (0, or -1 and errno) as a Result.
fn errno_result(r: c_int) -> Result<(), c_int> {
    if r == 0 {
        Ok(())
    } else {
        Err(cm::last_errno())
    }
}

/// Waits up to `ms` (-1: forever) for any of `fds` to be readable; whether one was.
pub(crate) fn wait_fds(fds: &[c_int], ms: c_int) -> bool {
    poll_fds(fds, ms) != 0
}

/// Waits up to `ms` (-1: forever) for any of `fds` to be readable; bit `i` set for each
/// `fds[i]` that is (the first 32), 0 on timeout or error.
pub(crate) fn poll_fds(fds: &[c_int], ms: c_int) -> u32 {
    let timeout = u64::try_from(ms).ok().map(std::time::Duration::from_millis);
    ferroce::link::eventfd::poll_readable(fds, timeout).unwrap_or(0)
}

/// Hands `n` bytes of `bufs` from (`bi`, `boff`) on to `f`, piece by piece.
fn gather(
    bufs: &[&[u8]],
    bi: &mut usize,
    boff: &mut usize,
    mut n: usize,
    mut f: impl FnMut(&[u8]),
) {
    while n > 0 && *bi < bufs.len() {
        let b = bufs[*bi];
        let k = n.min(b.len() - *boff);
        f(&b[*boff..*boff + k]);
        n -= k;
        *boff += k;
        if *boff == b.len() {
            *bi += 1;
            *boff = 0;
        }
    }
}

/// The buffer and offset of byte `at` of `bufs`.
fn locate(bufs: &[(*mut u8, usize)], mut at: usize) -> (usize, usize) {
    for (i, b) in bufs.iter().enumerate() {
        if at < b.1 {
            return (i, at);
        }
        at -= b.1;
    }
    (bufs.len(), 0)
}

/// Fills `n` bytes of `bufs` from (`bi`, `boff`) on: `f(dst, len, offset within the n)`.
fn scatter(
    bufs: &[(*mut u8, usize)],
    bi: &mut usize,
    boff: &mut usize,
    n: usize,
    mut f: impl FnMut(*mut u8, usize, usize),
) {
    let mut at = 0;
    while at < n && *bi < bufs.len() {
        let (p, len) = bufs[*bi];
        let k = (n - at).min(len - *boff);
        f(p.wrapping_add(*boff), k, at);
        at += k;
        *boff += k;
        if *boff == len {
            *bi += 1;
            *boff = 0;
        }
    }
}

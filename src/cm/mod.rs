//! Connection management for the Rust API: what rdma_cm does for C programs. A
//! [`ConnectionManager`] runs the device's general services QP (QP1) and the sans-IO
//! [`ferroce_transport::cm::Cm`] over it on a thread of its own, so that RC connections
//! are made the way Linux's rdma_cm and RoCE NICs make them: a REQ, REP and RTU on QP1
//! carrying the QP numbers and PSNs, then a DREQ and DREP to end.
//!
//! ```
//! use ferroce::cm::ConnectionManager;
//! use ferroce::verbs::*;
//! use std::time::Duration;
//! let (a, b) = Context::memory_pair()?;
//! let (cm_a, cm_b) = (ConnectionManager::open(&a)?, ConnectionManager::open(&b)?);
//! cm_b.listen(7471)?;
//! let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (cq_a, cq_b) = (a.create_cq(8)?, b.create_cq(8)?);
//! let qp_a = pd_a.create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())?;
//! let qp_b = pd_b.create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())?;
//! let t = Duration::from_secs(5);
//! let server = std::thread::spawn(move || {
//!     let req = cm_b.get_request(7471, t).expect("a request");
//!     cm_b.accept_rc(&req, &qp_b, b"welcome", t).expect("accepted")
//! });
//! let to = b.gid(0).unwrap();
//! let conn = cm_a.connect_rc(&qp_a, to.into(), 7471, b"hello", t)?;
//! assert_eq!(&conn.private_data[..7], b"welcome");
//! let accepted = server.join().unwrap();
//! assert_eq!(&accepted.private_data[..5], b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod ports;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};

use ferroce_transport::cm::{
    Cm, CmConfig, CmCounters, CmError, CmEvent, CmTransmit, CommId, ServedElsewhere,
};
use ferroce_transport::Instant;
use ferroce_wire::cm::rdma_cm::{self, IpHeader, PortSpace};
use ferroce_wire::cm::{RejReason, Rep, Req, SidrReq, SidrStatus, Transport};
use ferroce_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};

use crate::verbs::{
    random_psn, Access, AddressHandle, AddressVector, CompletionChannel, CompletionQueue, Context,
    Error, MemoryRegion, ProtectionDomain, QpCap, QueuePair, RcPath, RecvWr, SendFlags, SendWr,
    WcStatus, WorkCompletion, WrOpcode,
};

/// Receive buffers kept posted on QP1.
const RECV_SLOTS: usize = 64;
/// MADs in flight at once.
const SEND_SLOTS: usize = 32;
/// One receive buffer: the 40-byte GRH area and a MAD.
const SLOT: usize = 40 + MAD_LEN;
/// How long a MAD waits for its peer's MAC address (the verbs' own resolve timeout).
const RESOLVE_WAIT: Duration = Duration::from_secs(3);
/// MADs waiting for a MAC address at once; more are not sent (counted as unsent).
const PARKED: usize = 64;
/// Address handles kept, one per peer answered.
const MAX_AHS: usize = 256;
/// What this side offers for RDMA READ and atomics, both ways (rdma_cm's users ask for
/// what they need; `RcPath`'s defaults are these).
const RD_ATOMIC: u8 = 16;

/// Why making or ending a connection failed.
#[derive(Debug)]
pub enum CmFailure {
    /// The device refused a verbs call.
    Verbs(Error),
    /// The connection manager refused the call.
    Cm(ferroce_transport::cm::CmError),
    /// The peer refused: its REJ's reason and private data (148 bytes, zero-padded).
    Rejected {
        /// The REJ's reason.
        reason: RejReason,
        /// The REJ's private data, as rdma_cm hands it to the program.
        private_data: Vec<u8>,
    },
    /// The peer never answered (every resend went unanswered).
    Unreachable,
    /// Nothing happened within the time given.
    TimedOut,
    /// The peer's message made no sense (an event this step does not expect).
    Unexpected(CmEvent),
    /// The peer answered a UD service request with this status.
    SidrRefused(SidrStatus),
}

impl std::fmt::Display for CmFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmFailure::Verbs(e) => write!(f, "{e}"),
            CmFailure::Cm(CmError::ServiceInUse) => write!(
                f,
                "port in use: another listener on this interface has it; pick another port"
            ),
            CmFailure::Cm(e) => write!(f, "{e}"),
            CmFailure::Rejected { reason: r, .. } if *r == RejReason::INVALID_SERVICE_ID => {
                write!(f, "connection refused: nothing listens on that port")
            }
            CmFailure::Rejected { reason: r, .. } => {
                write!(f, "connection rejected (IB CM reason {})", r.0)
            }
            CmFailure::Unreachable => write!(f, "the peer's connection manager never answered"),
            CmFailure::TimedOut => write!(f, "timed out"),
            CmFailure::Unexpected(e) => write!(f, "unexpected connection event {e:?}"),
            CmFailure::SidrRefused(st) if *st == SidrStatus::UNSUPPORTED => {
                write!(f, "connection refused: nothing listens on that port")
            }
            CmFailure::SidrRefused(st) => write!(f, "UD service refused (SIDR status {})", st.0),
        }
    }
}

impl std::error::Error for CmFailure {}

impl From<Error> for CmFailure {
    fn from(e: Error) -> Self {
        CmFailure::Verbs(e)
    }
}

impl From<ferroce_transport::cm::CmError> for CmFailure {
    fn from(e: ferroce_transport::cm::CmError) -> Self {
        CmFailure::Cm(e)
    }
}

/// A connection request waiting for [`ConnectionManager::accept_rc`] or
/// [`ConnectionManager::reject`].
#[derive(Debug, Clone)]
pub struct Request {
    /// The connection.
    pub id: CommId,
    /// The requester's GID.
    pub from: Ipv6Addr,
    /// The REQ.
    pub req: Box<Req>,
    /// rdma_cm's addresses and source port, if the REQ has its header.
    pub ip: Option<IpHeader>,
}

/// A UD service request waiting for [`ConnectionManager::accept_ud`].
#[derive(Debug, Clone)]
pub struct UdRequest {
    /// The request.
    pub id: CommId,
    /// The requester's GID.
    pub from: Ipv6Addr,
    /// rdma_cm's addresses and source port, if the request has its header.
    pub ip: Option<IpHeader>,
}

/// Where a UD service is: send to this QP with this Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdService {
    /// The server's GID.
    pub remote: Ipv6Addr,
    /// Its QP.
    pub qpn: u32,
    /// The Q_Key to send with.
    pub qkey: u32,
}

/// A connection made.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The connection (for [`ConnectionManager::disconnect`]).
    pub id: CommId,
    /// The peer's GID.
    pub remote: Ipv6Addr,
    /// The peer's QP number.
    pub remote_qpn: u32,
    /// The peer's private data (whole: the wire does not say how much was meant), after
    /// rdma_cm's header on the passive side.
    pub private_data: Vec<u8>,
}

struct State {
    cm: Cm,
    free_send: Vec<usize>,
    /// MADs waiting for a send slot.
    pending: VecDeque<CmTransmit>,
    ahs: HashMap<Ipv6Addr, AddressHandle>,
    /// Events of each connection, but connect requests.
    events: HashMap<CommId, VecDeque<CmEvent>>,
    /// Connect requests by service ID.
    requests: HashMap<u64, VecDeque<CmEvent>>,
    /// MADs waiting for their peer's MAC address, and until when.
    parked: VecDeque<(StdInstant, CmTransmit)>,
    /// MADs that could not be sent (no route to the peer).
    unsent: u64,
    /// On a real interface, the hold of each service listened on, which keeps it from
    /// the host's other processes (`ports`).
    holds: HashMap<u64, ports::ServiceHold>,
}

struct Inner {
    ctx: Context,
    // Field order is drop order: the QP before the CQ, buffers and PD it uses.
    qp: QueuePair,
    cq: CompletionQueue,
    /// `cq`'s completion channel, what the thread sleeps on (`None`: no descriptor for
    /// it; the thread then wakes with the device's completions).
    channel: Option<CompletionChannel>,
    recv: MemoryRegion,
    send: MemoryRegion,
    pd: ProtectionDomain,
    state: Mutex<State>,
    changed: Condvar,
    /// Times the thread woke from a wait (`cm_thread_wakeups`).
    wakeups: AtomicU64,
    stop: AtomicBool,
    epoch: StdInstant,
    /// Whether listens hold their services from the host's other processes (a real
    /// interface; see `ports`).
    host_wide: bool,
}

/// The connection manager of one device.
pub struct ConnectionManager {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ConnectionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionManager")
            .field("device", &self.inner.ctx.attr().name)
            .finish()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ConnectionManager {
    /// Starts the device's connection manager: creates QP1 and its buffers, and the
    /// thread that answers on it. One per device ([`Error`] if QP1 exists already).
    pub fn open(ctx: &Context) -> Result<ConnectionManager, Error> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(RECV_SLOTS + SEND_SLOTS)?;
        let cap = QpCap {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            ..QpCap::default()
        };
        let qp = pd.create_gsi_qp(&cq, &cq, cap)?;
        qp.ready_ud(GSI_QKEY, 0)?;
        let recv = pd.reg_mr(RECV_SLOTS * SLOT, Access::LOCAL_WRITE)?;
        let send = pd.reg_mr(SEND_SLOTS * MAD_LEN, Access::empty())?;
        for slot in 0..RECV_SLOTS {
            post_recv_slot(&qp, &recv, slot)?;
        }
        let config = CmConfig {
            ca_guid: ctx.attr().node_guid,
            ..CmConfig::default()
        };
        let fill = crate::verbs::os_random()?;
        let mut cm = Cm::new(config, fill);
        // A real interface, which other processes may use too: services are held
        // host-wide, and a request for one nobody here listens on is refused only if no
        // process holds it. (A memory link is this process's alone.)
        let host_wide = ctx.link_users().is_some();
        if host_wide {
            let iface = ctx.attr().name.clone();
            cm.set_served_elsewhere(Some(ServedElsewhere(Box::new(move |sid| {
                ports::is_held(&iface, sid)
            }))));
        }
        let channel = CompletionChannel::new().ok();
        if let Some(ch) = &channel {
            cq.attach_channel(ch, 1);
        }
        let inner = Arc::new(Inner {
            ctx: ctx.clone(),
            qp,
            cq,
            channel,
            recv,
            send,
            pd,
            state: Mutex::new(State {
                cm,
                free_send: (0..SEND_SLOTS).collect(),
                pending: VecDeque::new(),
                ahs: HashMap::new(),
                parked: VecDeque::new(),
                events: HashMap::new(),
                requests: HashMap::new(),
                unsent: 0,
                holds: HashMap::new(),
            }),
            changed: Condvar::new(),
            wakeups: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            epoch: StdInstant::now(),
            host_wide,
        });
        let t = inner.clone();
        let thread = crate::link::threads::spawn("ferroce-cm", move || t.run())
            .map_err(|_| Error::Transport(ferroce_transport::Error::OutOfResources))?;
        Ok(ConnectionManager {
            inner,
            thread: Some(thread),
        })
    }

    /// The connection manager's counters (Linux's `cm_rx_msgs.*` names and ferroce's
    /// drops), and MADs that found no route to their peer.
    pub fn counters(&self) -> (CmCounters, u64) {
        let s = relock(&self.inner.state);
        (s.cm.counters().clone(), s.unsent)
    }

    /// Times the connection manager's thread woke from a wait: for a MAD, a timer, or
    /// its 100 ms look at whether it should stop; not for the device's other work.
    pub fn wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// Takes connection requests for `port` in rdma_cm's TCP port space (what rping,
    /// perftest's `-R` and rdma_cm's RC users connect to).
    ///
    /// A port another process on the host listens on through this interface is refused
    /// (`CmError::ServiceInUse`), as the kernel's rdma_cm refuses a taken port.
    pub fn listen(&self, port: u16) -> Result<(), CmFailure> {
        self.inner.listen(rdma_cm::service_id(PortSpace::TCP, port))
    }

    /// The next connection request for `port`.
    pub fn get_request(&self, port: u16, timeout: Duration) -> Option<Request> {
        let sid = rdma_cm::service_id(PortSpace::TCP, port);
        match self.inner.next_request(sid, timeout)? {
            CmEvent::ConnectRequest { id, from, req } => Some(Request {
                id,
                from,
                ip: IpHeader::parse(&req.private_data).ok(),
                req,
            }),
            _ => None,
        }
    }

    /// Connects `qp` (an RC QP in RESET, or in INIT with receives posted) to whoever listens on `port` at `remote`, the
    /// way rdma_cm does: a REQ with rdma_cm's IP header and up to 56 bytes of
    /// `private_data`, then, on the REP, the QP brought to RTS and the RTU sent.
    pub fn connect_rc(
        &self,
        qp: &QueuePair,
        remote: IpAddr,
        port: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Connection, CmFailure> {
        let (conn, path) = self.request_rc(qp.qpn(), remote, port, private_data, timeout)?;
        if let Err(e) = qp.connect(&path) {
            let _ = self
                .inner
                .with_cm(|cm, _| cm.reject(conn.id, RejReason::CONSUMER_DEFINED, &[]));
            return Err(e.into());
        }
        self.establish(conn.id)?;
        Ok(conn)
    }

    /// [`ConnectionManager::connect_rc`] for a QP this side does not bring up itself
    /// (rdma_cm's connect without a QP on the ID): the REQ names QP `qpn`; returns, on
    /// the REP, the connection and the path the QP must be given (to RTS) before
    /// [`ConnectionManager::establish`] sends the RTU.
    pub fn request_rc(
        &self,
        qpn: u32,
        remote: IpAddr,
        port: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(Connection, RcPath), CmFailure> {
        let ctx = &self.inner.ctx;
        let remote_gid = gid_of(remote);
        let remote = ip_of(remote_gid); // an IPv4-mapped IPv6 address is IPv4 to rdma_cm
        let (sgid_index, local_gid) = source_for(ctx, remote_gid)?;
        let my_psn = random_psn()?;
        let mut req = Req {
            service_id: rdma_cm::service_id(PortSpace::TCP, port),
            local_qpn: qpn,
            starting_psn: my_psn,
            transport: Transport::Rc,
            responder_resources: RD_ATOMIC,
            initiator_depth: RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            pkey: 0xffff,
            path_mtu: mtu_code(ctx.attr().active_mtu),
            ..Req::default()
        };
        req.primary.local_lid = 0xffff;
        req.primary.remote_lid = 0xffff;
        req.primary.local_gid = local_gid.octets();
        req.primary.remote_gid = remote_gid.octets();
        req.primary.hop_limit = 64;
        req.primary.local_ack_timeout = 14;
        let header = IpHeader {
            src_port: (random_psn()? as u16) | 0x8000,
            src: ip_of(local_gid),
            dst: remote,
        };
        header
            .emit(&mut req.private_data)
            .map_err(|_| CmFailure::Verbs(Error::NoSuchGid(sgid_index)))?;
        let room = req.private_data.len() - rdma_cm::LEN;
        if private_data.len() > room {
            return Err(CmFailure::Cm(
                ferroce_transport::cm::CmError::PrivateDataTooLong { max: room },
            ));
        }
        req.private_data[rdma_cm::LEN..rdma_cm::LEN + private_data.len()]
            .copy_from_slice(private_data);
        let id = self
            .inner
            .with_cm(|cm, now| cm.connect(now, remote_gid, req.clone()))?;
        let rep = match self.inner.next_event(id, timeout) {
            Some(CmEvent::Reply { rep, .. }) => rep,
            other => return Err(self.failed(id, other)),
        };
        let path = RcPath {
            mtu: ctx.attr().active_mtu,
            sgid_index: sgid_index as u8,
            max_rd_atomic: rep.responder_resources.min(RD_ATOMIC),
            max_dest_rd_atomic: RD_ATOMIC,
            rnr_retry: rep.rnr_retry_count,
            ..RcPath::new(remote_gid, rep.local_qpn, my_psn, rep.starting_psn)
        };
        let conn = Connection {
            id,
            remote: remote_gid,
            remote_qpn: rep.local_qpn,
            private_data: rep.private_data.to_vec(),
        };
        Ok((conn, path))
    }

    /// Sends the RTU of a connection [`ConnectionManager::request_rc`] made: it is
    /// established.
    pub fn establish(&self, id: CommId) -> Result<(), CmFailure> {
        self.inner.with_cm(|cm, _| cm.ready(id))?;
        Ok(())
    }

    /// Accepts a request with `qp` (an RC QP in RESET, or in INIT with receives posted): brings it to RTS with the
    /// requester's QP number and PSN, sends the REP with `private_data` (up to 196
    /// bytes), and waits for the RTU.
    pub fn accept_rc(
        &self,
        request: &Request,
        qp: &QueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Connection, CmFailure> {
        let conn = self.begin_accept_rc(request, qp, private_data)?;
        self.wait_established(conn.id, timeout)?;
        Ok(conn)
    }

    /// [`ConnectionManager::accept_rc`] without the wait: `qp` is in RTS and the REP on
    /// its way when this returns (what rdma_accept does); the RTU is
    /// [`ConnectionManager::wait_established`]'s.
    pub fn begin_accept_rc(
        &self,
        request: &Request,
        qp: &QueuePair,
        private_data: &[u8],
    ) -> Result<Connection, CmFailure> {
        let path = self.path_for(request)?;
        qp.connect(&path)?;
        self.accept_with(request, qp.qpn(), &path, private_data)
    }

    /// The path a QP answering `request` needs (to RTS), with a fresh random PSN of its
    /// own: for a QP this side does not bring up itself (rdma_cm's accept without a QP
    /// on the ID), before [`ConnectionManager::accept_with`].
    pub fn path_for(&self, request: &Request) -> Result<RcPath, CmFailure> {
        let ctx = &self.inner.ctx;
        let (sgid_index, _) = source_for(ctx, request.from)?;
        let q = &request.req;
        let my_psn = random_psn()?;
        let mtu = ctx.attr().active_mtu;
        Ok(RcPath {
            mtu: mtu_from_code(q.path_mtu).map_or(mtu, |m| m.min(mtu)),
            sgid_index: sgid_index as u8,
            max_rd_atomic: q.responder_resources.min(RD_ATOMIC),
            max_dest_rd_atomic: RD_ATOMIC,
            rnr_retry: q.rnr_retry_count,
            retry_cnt: q.retry_count,
            ..RcPath::new(request.from, q.local_qpn, my_psn, q.starting_psn)
        })
    }

    /// Sends the REP for `request`: QP `qpn`, starting at `path`'s receive PSN (the path
    /// [`ConnectionManager::path_for`] gave), with `private_data` (up to 196 bytes).
    pub fn accept_with(
        &self,
        request: &Request,
        qpn: u32,
        path: &RcPath,
        private_data: &[u8],
    ) -> Result<Connection, CmFailure> {
        let q = &request.req;
        let mut rep = Rep {
            local_qpn: qpn,
            starting_psn: path.rq_psn,
            responder_resources: RD_ATOMIC,
            initiator_depth: q.responder_resources.min(RD_ATOMIC),
            target_ack_delay: 15,
            rnr_retry_count: 7,
            ..Rep::default()
        };
        if private_data.len() > rep.private_data.len() {
            return Err(CmFailure::Cm(
                ferroce_transport::cm::CmError::PrivateDataTooLong {
                    max: rep.private_data.len(),
                },
            ));
        }
        rep.private_data[..private_data.len()].copy_from_slice(private_data);
        let id = request.id;
        self.inner.with_cm(|cm, now| cm.accept(now, id, rep))?;
        let skip = if request.ip.is_some() {
            rdma_cm::LEN
        } else {
            0
        };
        Ok(Connection {
            id,
            remote: request.from,
            remote_qpn: q.local_qpn,
            private_data: q.private_data[skip..].to_vec(),
        })
    }

    /// Waits for the RTU of an accepted connection (or for the first packet on its QP,
    /// which the CM hears of as the same).
    pub fn wait_established(&self, id: CommId, timeout: Duration) -> Result<(), CmFailure> {
        match self.inner.next_event(id, timeout) {
            Some(CmEvent::Established { .. }) => Ok(()),
            other => Err(self.failed(id, other)),
        }
    }

    /// Stops taking connection requests for `port` (TCP port space); requests already
    /// queued for it are refused.
    pub fn unlisten(&self, port: u16) {
        self.inner
            .unlisten(rdma_cm::service_id(PortSpace::TCP, port));
    }

    /// Stops taking UD service requests for `port` (UDP port space).
    pub fn unlisten_ud(&self, port: u16) {
        self.inner
            .unlisten(rdma_cm::service_id(PortSpace::UDP, port));
    }

    /// Takes UD service requests (SIDR) for `port` in rdma_cm's UDP port space (what
    /// udaddy and rdma_cm's UD users resolve).
    pub fn listen_ud(&self, port: u16) -> Result<(), CmFailure> {
        self.inner.listen(rdma_cm::service_id(PortSpace::UDP, port))
    }

    /// The next UD service request for `port`.
    pub fn get_ud_request(&self, port: u16, timeout: Duration) -> Option<UdRequest> {
        let sid = rdma_cm::service_id(PortSpace::UDP, port);
        match self.inner.next_request(sid, timeout)? {
            CmEvent::SidrRequest { id, from, req } => Some(UdRequest {
                id,
                from,
                ip: IpHeader::parse(&req.private_data).ok(),
            }),
            _ => None,
        }
    }

    /// Answers a UD service request: QP `qpn` with Q_Key `qkey` serves it.
    pub fn accept_ud(&self, request: &UdRequest, qpn: u32, qkey: u32) -> Result<(), CmFailure> {
        self.inner
            .with_cm(|cm, now| cm.sidr_reply(now, request.id, SidrStatus::OK, qpn, qkey))?;
        Ok(())
    }

    /// Asks `remote` which UD QP and Q_Key serve `port` in rdma_cm's UDP port space (a
    /// SIDR REQ with rdma_cm's IP header), as rdma_connect does for a UD rdma_cm ID.
    pub fn resolve_ud(
        &self,
        remote: IpAddr,
        port: u16,
        timeout: Duration,
    ) -> Result<UdService, CmFailure> {
        let remote_gid = gid_of(remote);
        let remote = ip_of(remote_gid);
        let (_, local_gid) = source_for(&self.inner.ctx, remote_gid)?;
        let mut req = SidrReq {
            service_id: rdma_cm::service_id(PortSpace::UDP, port),
            pkey: 0xffff,
            ..SidrReq::default()
        };
        IpHeader {
            src_port: (random_psn()? as u16) | 0x8000,
            src: ip_of(local_gid),
            dst: remote,
        }
        .emit(&mut req.private_data)
        .map_err(|_| CmFailure::Verbs(Error::NoSuchGid(0)))?;
        let id = self
            .inner
            .with_cm(|cm, now| cm.sidr_request(now, remote_gid, req))?;
        match self.inner.next_event(id, timeout) {
            Some(CmEvent::SidrReply { rep, .. }) if rep.status == SidrStatus::OK => Ok(UdService {
                remote: remote_gid,
                qpn: rep.qpn,
                qkey: rep.qkey,
            }),
            Some(CmEvent::SidrReply { rep, .. }) => Err(CmFailure::SidrRefused(rep.status)),
            None => Err(CmFailure::TimedOut),
            Some(CmEvent::Unreachable { .. }) => Err(CmFailure::Unreachable),
            Some(e) => Err(CmFailure::Unexpected(e)),
        }
    }

    /// Finds `remote`'s link-layer address (ARP or neighbour discovery), as rdma_cm's
    /// address resolution does before anything is sent to a peer: an error when nothing
    /// answers within `timeout`.
    pub fn resolve_neighbor(&self, remote: IpAddr, timeout: Duration) -> Result<(), Error> {
        self.inner
            .ctx
            .shared()
            .resolve(remote, timeout)
            .map(|_| ())
            .map_err(Error::Resolve)
    }

    /// The address vector to reach `remote` from this device: from the local GID of its
    /// family (IPv4-mapped for IPv4, link-local for a link-local peer), as rdma_cm picks
    /// its source. For a UD peer found with [`ConnectionManager::resolve_ud`], or one
    /// that sent a datagram.
    pub fn address_vector(&self, remote: Ipv6Addr) -> Result<AddressVector, Error> {
        let (sgid_index, _) = source_for(&self.inner.ctx, remote)?;
        Ok(AddressVector {
            sgid_index: sgid_index as u8,
            ..AddressVector::new(remote)
        })
    }

    /// Drops a request unanswered (a full listen backlog): the peer's CM resends its REQ,
    /// which comes as a new request then. Counted as `cm_rx_dropped_backlog`.
    pub fn drop_request(&self, request: &Request) -> Result<(), CmFailure> {
        self.inner.with_cm(|cm, _| cm.drop_request(request.id))?;
        Ok(())
    }

    /// [`ConnectionManager::drop_request`] for a UD service request.
    pub fn drop_ud_request(&self, request: &UdRequest) -> Result<(), CmFailure> {
        self.inner.with_cm(|cm, _| cm.drop_request(request.id))?;
        Ok(())
    }

    /// Refuses a request as one for a service nobody here listens on (REJ reason 8), as
    /// when its listener went away before taking it.
    pub fn refuse_unserved(&self, request: &Request) -> Result<(), CmFailure> {
        self.inner
            .with_cm(|cm, _| cm.reject(request.id, RejReason::INVALID_SERVICE_ID, &[]))?;
        Ok(())
    }

    /// Refuses a UD service request (rdma_reject on a UD ID): a SIDR REP with status
    /// REJECT.
    pub fn reject_ud(&self, request: &UdRequest) -> Result<(), CmFailure> {
        self.inner
            .with_cm(|cm, now| cm.sidr_reply(now, request.id, SidrStatus::REJECT, 0, 0))?;
        Ok(())
    }

    /// Refuses a request (rdma_reject).
    pub fn reject(&self, request: &Request, private_data: &[u8]) -> Result<(), CmFailure> {
        self.inner
            .with_cm(|cm, _| cm.reject(request.id, RejReason::CONSUMER_DEFINED, private_data))?;
        Ok(())
    }

    /// Ends a connection: sends the DREQ (or, when the peer asked first, the DREP) and
    /// waits up to `timeout` for the peer's answer. Move the QP to error first, so that
    /// what it still holds completes with a flush.
    pub fn disconnect(&self, id: CommId, timeout: Duration) -> Result<(), CmFailure> {
        if self.begin_disconnect(id)? {
            return Ok(()); // the DREP answered the peer's DREQ
        }
        self.wait_disconnected(id, timeout)
    }

    /// [`ConnectionManager::disconnect`] without the wait (what rdma_disconnect does):
    /// the DREQ, or the DREP to the peer's DREQ, is queued on QP1 when this returns.
    /// True when it was the DREP: the connection is over.
    pub fn begin_disconnect(&self, id: CommId) -> Result<bool, CmFailure> {
        let asked = self.inner.wait(Duration::ZERO, |s| {
            let q = s.events.get_mut(&id)?;
            let i = q
                .iter()
                .position(|e| matches!(e, CmEvent::DisconnectRequest { .. }))?;
            q.remove(i)
        });
        self.inner.with_cm(|cm, now| cm.disconnect(now, id))?;
        Ok(asked.is_some())
    }

    /// Waits for the DREP to [`ConnectionManager::begin_disconnect`]'s DREQ: the
    /// connection is over either way, and [`CmFailure::Unreachable`] says every resend of
    /// the DREQ went unanswered (rdma_cm's DISCONNECTED carries -ETIMEDOUT then).
    pub fn wait_disconnected(&self, id: CommId, timeout: Duration) -> Result<(), CmFailure> {
        match self.inner.next_event(id, timeout) {
            Some(CmEvent::Disconnected { answered: true, .. }) => Ok(()),
            Some(CmEvent::Disconnected {
                answered: false, ..
            }) => Err(CmFailure::Unreachable),
            // Both sides asked at once: answer it, and it is over.
            Some(CmEvent::DisconnectRequest { .. }) => {
                self.inner.with_cm(|cm, now| cm.disconnect(now, id))?;
                Ok(())
            }
            other => Err(self.failed(id, other)),
        }
    }

    /// Waits for the peer's DREQ on connection `id`: true when it came (answer it with
    /// [`ConnectionManager::disconnect`]).
    pub fn wait_disconnect_request(&self, id: CommId, timeout: Duration) -> bool {
        self.inner
            .wait(timeout, |s| {
                let q = s.events.get(&id)?;
                q.iter()
                    .any(|e| matches!(e, CmEvent::DisconnectRequest { .. }))
                    .then_some(())
            })
            .is_some()
    }

    fn failed(&self, id: CommId, ev: Option<CmEvent>) -> CmFailure {
        match ev {
            None => {
                // Give up on it: a REJ tells the peer, and nothing of it stays here.
                let _ = self.inner.with_cm(|cm, now| cm.disconnect(now, id));
                CmFailure::TimedOut
            }
            Some(CmEvent::Rejected {
                reason,
                private_data,
                ..
            }) => CmFailure::Rejected {
                reason,
                private_data,
            },
            Some(CmEvent::Unreachable { .. }) => CmFailure::Unreachable,
            Some(e) => CmFailure::Unexpected(e),
        }
    }
}

impl Drop for ConnectionManager {
    fn drop(&mut self) {
        // The thread sees it within its longest wait (100 ms).
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Inner {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Runs `f` on the CM, then sends what it queued and files its events.
    fn with_cm<R>(&self, f: impl FnOnce(&mut Cm, Instant) -> R) -> R {
        let now = self.now();
        let mut s = relock(&self.state);
        let r = f(&mut s.cm, now);
        self.settle(&mut s);
        r
    }

    /// Waits until `take` finds something in the state, or `timeout` passes.
    fn wait<T>(
        &self,
        timeout: Duration,
        mut take: impl FnMut(&mut State) -> Option<T>,
    ) -> Option<T> {
        let deadline = StdInstant::now() + timeout;
        let mut s = relock(&self.state);
        loop {
            if let Some(t) = take(&mut s) {
                return Some(t);
            }
            let now = StdInstant::now();
            if now >= deadline {
                return None;
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Holds `sid` from the host's other processes (on a real interface), then listens
    /// on it.
    fn listen(&self, sid: u64) -> Result<(), CmFailure> {
        let mut s = relock(&self.state);
        // The hold refuses a service this process listens on already, as the CM does.
        let hold = if self.host_wide {
            let h = ports::hold(&self.ctx.attr().name, sid).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    tracing::info!(sid, "another listener here has that service");
                    CmFailure::Cm(CmError::ServiceInUse)
                } else {
                    CmFailure::Verbs(Error::Io(e))
                }
            })?;
            Some(h)
        } else {
            None
        };
        s.cm.listen(sid)?;
        if let Some(h) = hold {
            s.holds.insert(sid, h);
        }
        Ok(())
    }

    /// Stops listening on `sid`, lets its hold go and refuses what is queued for it.
    fn unlisten(&self, sid: u64) {
        let now = self.now();
        let mut s = relock(&self.state);
        s.cm.unlisten(sid);
        s.holds.remove(&sid);
        for ev in s.requests.remove(&sid).unwrap_or_default() {
            match ev {
                CmEvent::ConnectRequest { id, .. } => {
                    let _ = s.cm.reject(id, RejReason::INVALID_SERVICE_ID, &[]);
                }
                CmEvent::SidrRequest { id, .. } => {
                    let _ = s.cm.sidr_reply(now, id, SidrStatus::REJECT, 0, 0);
                }
                _ => {}
            }
        }
        self.settle(&mut s);
    }

    /// The next request (connect or SIDR) for service `sid`.
    fn next_request(&self, sid: u64, timeout: Duration) -> Option<CmEvent> {
        self.wait(timeout, |s| {
            s.requests.get_mut(&sid).and_then(VecDeque::pop_front)
        })
    }

    /// The next event of connection `id`.
    fn next_event(&self, id: CommId, timeout: Duration) -> Option<CmEvent> {
        self.wait(timeout, |s| {
            let q = s.events.get_mut(&id)?;
            let e = q.pop_front();
            if q.is_empty() {
                // A connection that ended without time-wait (rejected, unreachable) leaves
                // nothing behind.
                s.events.remove(&id);
            }
            e
        })
    }

    /// Sends what the CM queued (as far as send slots allow) and files its events.
    fn settle(&self, s: &mut State) {
        while let Some(ev) = s.cm.poll_event() {
            match &ev {
                CmEvent::ConnectRequest { req, .. } => {
                    s.requests.entry(req.service_id).or_default().push_back(ev)
                }
                CmEvent::SidrRequest { req, .. } => {
                    s.requests.entry(req.service_id).or_default().push_back(ev)
                }
                CmEvent::TimewaitExit { id } => {
                    s.events.remove(id);
                }
                CmEvent::RequestExpired { id } => {
                    for q in s.requests.values_mut() {
                        q.retain(|e| {
                            !matches!(e, CmEvent::ConnectRequest { id: i, .. }
                                | CmEvent::SidrRequest { id: i, .. } if i == id)
                        });
                    }
                }
                CmEvent::Reply { id, .. }
                | CmEvent::Established { id }
                | CmEvent::Rejected { id, .. }
                | CmEvent::Unreachable { id }
                | CmEvent::DisconnectRequest { id }
                | CmEvent::Disconnected { id, .. }
                | CmEvent::SidrReply { id, .. } => {
                    s.events.entry(*id).or_default().push_back(ev.clone())
                }
            }
            self.changed.notify_all();
        }
        while let Some(t) = s.cm.poll_transmit() {
            s.pending.push_back(t);
        }
        // MADs to peers whose MAC address was unknown: again once it is known (the
        // network was asked), until their time is up.
        let now = StdInstant::now();
        for (until, t) in std::mem::take(&mut s.parked) {
            if self.neighbour_known(t.to) {
                s.pending.push_back(t);
            } else if now < until {
                s.parked.push_back((until, t));
            } else {
                s.unsent += 1;
            }
        }
        while !s.pending.is_empty() {
            let Some(slot) = s.free_send.pop() else {
                break; // a send completion frees one
            };
            let t = s.pending.pop_front().expect("not empty");
            match self.send_mad(s, slot, &t) {
                Ok(true) => {}
                Ok(false) => {
                    s.free_send.push(slot);
                    if s.parked.len() >= PARKED {
                        s.unsent += 1; // a flood from addresses nobody answers for
                    } else {
                        s.parked.push_back((now + RESOLVE_WAIT, t));
                    }
                }
                Err(_) => {
                    s.unsent += 1;
                    s.free_send.push(slot);
                }
            }
        }
    }

    /// Whether `gid`'s MAC address is known; asks the network when it is not, without
    /// waiting: the CM thread must not stall under its lock for a peer that never
    /// answers (a REQ from a spoofed address is answered with a REJ to it).
    fn neighbour_known(&self, gid: Ipv6Addr) -> bool {
        self.ctx
            .shared()
            .resolve(crate::net::gid::addr_of(gid), Duration::ZERO)
            .is_ok()
    }

    /// Sends `t` from send slot `slot`: false when its peer's MAC address is not known
    /// yet (park it and try again).
    fn send_mad(&self, s: &mut State, slot: usize, t: &CmTransmit) -> Result<bool, Error> {
        let dest = match s.ahs.get(&t.to) {
            Some(ah) => ah.dest(GSI_QPN, GSI_QKEY),
            None => {
                if !self.neighbour_known(t.to) {
                    return Ok(false);
                }
                if s.ahs.len() >= MAX_AHS {
                    // Bounded: one peer's handle goes (made again when it is needed).
                    let old = *s.ahs.keys().next().expect("not empty");
                    s.ahs.remove(&old);
                }
                let (sgid_index, _) = source_for(&self.ctx, t.to)?;
                let ah = self.pd.create_ah(AddressVector {
                    sgid_index: sgid_index as u8,
                    ..AddressVector::new(t.to)
                })?;
                s.ahs.entry(t.to).or_insert(ah).dest(GSI_QPN, GSI_QKEY)
            }
        };
        self.send.write(slot * MAD_LEN, &t.mad)?;
        let wr = SendWr {
            wr_id: (RECV_SLOTS + slot) as u64,
            opcode: WrOpcode::Send,
            sg_list: vec![self.send.sge(slot * MAD_LEN, MAD_LEN)],
            flags: SendFlags::SIGNALED,
            ud: Some(dest),
            ..Default::default()
        };
        self.qp.post_send(&wr).map(|()| true)
    }

    /// The thread: takes in MADs, fires timers, sends answers.
    fn run(&self) {
        let shared = self.ctx.shared().clone();
        let mut wcs = Vec::new();
        let mut mad = vec![0u8; MAD_LEN];
        while !self.stop.load(Ordering::Relaxed) {
            wcs.clear();
            if self.cq.poll(&mut wcs, 16) == 0 {
                let next = relock(&self.state).cm.poll_timeout();
                let now = self.now();
                let wait = next
                    .map_or(Duration::from_millis(100), |t| t - now)
                    .min(Duration::from_millis(100));
                if !wait.is_zero() {
                    self.wait_for_qp1(&shared, wait, &mut wcs);
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
            }
            let now = self.now();
            let mut s = relock(&self.state);
            for wc in &wcs {
                let id = wc.wr_id as usize;
                if id >= RECV_SLOTS {
                    s.free_send.push(id - RECV_SLOTS);
                    continue;
                }
                if wc.status == WcStatus::Success && wc.byte_len as usize >= SLOT {
                    if let (Some(from), Ok(())) =
                        (wc.src_gid, self.recv.read(id * SLOT + 40, &mut mad))
                    {
                        if let Err(d) = s.cm.handle_mad(now, from, &mad) {
                            tracing::debug!(?d, %from, "CM MAD dropped");
                        }
                    }
                }
                if wc.status != WcStatus::WrFlushErr {
                    if let Err(e) = post_recv_slot(&self.qp, &self.recv, id) {
                        tracing::warn!(error = %e, "cannot repost a QP1 receive");
                    }
                }
            }
            s.cm.handle_timeout(now);
            self.settle(&mut s);
        }
    }
}

impl Inner {
    /// Sleeps until QP1's CQ completes something (taken into `wcs`) or `wait` passes.
    ///
    /// On QP1's own completion channel, not on the device's completion generation: that
    /// one moves with every data completion, and its waiters take the link back from
    /// an application thread in poll mode. Woken at each, this thread turned a busy-polling
    /// ping-pong over a connection rdma_cm made into one that sleeps: `ib_send_lat -R`
    /// took 28 us typical against 3.3 us without `-R`.
    fn wait_for_qp1(
        &self,
        shared: &crate::driver::Shared,
        wait: Duration,
        wcs: &mut Vec<WorkCompletion>,
    ) {
        let Some(ch) = &self.channel else {
            shared.wait_completions(shared.completion_generation(), wait);
            return;
        };
        if self.cq.req_notify(false).is_err() || self.cq.poll(wcs, 16) != 0 {
            return; // a completion came before the request: no event for it
        }
        if let Ok(1..) = crate::link::eventfd::poll_readable(&[ch.fd()], Some(wait)) {
            let _ = ch.get_event();
            self.cq.poll(wcs, 16);
        }
    }
}

fn post_recv_slot(qp: &QueuePair, mr: &MemoryRegion, slot: usize) -> Result<(), Error> {
    qp.post_recv(&RecvWr {
        wr_id: slot as u64,
        sg_list: vec![mr.sge(slot * SLOT, SLOT)],
    })
}

/// The GID of an IP address (IPv4-mapped for IPv4).
fn gid_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn ip_of(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// The local GID to reach `remote` from: of its family, link-local for a link-local peer.
fn source_for(ctx: &Context, remote: Ipv6Addr) -> Result<(usize, Ipv6Addr), Error> {
    let v4 = remote.to_ipv4_mapped().is_some();
    let link_local = |g: &Ipv6Addr| g.segments()[0] & 0xffc0 == 0xfe80;
    ctx.attr()
        .gids
        .entries()
        .iter()
        .find(|e| {
            (e.gid.to_ipv4_mapped().is_some() == v4)
                && (v4 || link_local(&e.gid) == link_local(&remote))
        })
        .map(|e| (e.index, e.gid))
        .ok_or(Error::NoSuchGid(0))
}

/// IBA's MTU code (1 = 256 ... 5 = 4096).
fn mtu_code(m: crate::verbs::Mtu) -> u8 {
    m as u8
}

fn mtu_from_code(c: u8) -> Option<crate::verbs::Mtu> {
    crate::verbs::Mtu::ALL
        .get(usize::from(c).checked_sub(1)?)
        .copied()
}

//! The communication manager (IBA vol. 1 ch. 12), sans-IO: how two ends agree on QP
//! numbers and PSNs before an RC or UC connection carries data, and end it after. It is
//! what rdma_cm runs on; Linux's CM answers it over QP1, so a ferroce device that feeds
//! its QP1 MADs here connects with rxe and RoCE NICs.
//!
//! Like the transport's [`crate::Endpoint`] it does no I/O and reads no clock: the caller
//! hands in received MADs with [`Cm::handle_mad`], sends what [`Cm::poll_transmit`] gives
//! (a MAD and the GID to send it to, on QP1 with the GSI's Q_Key), reads what happened
//! with [`Cm::poll_event`], and drives the resend and time-wait timers with
//! [`Cm::poll_timeout`] / [`Cm::handle_timeout`].
//!
//! The connection states are IBA's (figure 137): an active side goes REQ sent → REP
//! received (the user brings its QP up, then [`Cm::ready`] sends the RTU) → established; a
//! passive side REQ received (the user decides: [`Cm::accept`] or [`Cm::reject`]) → REP
//! sent → established on the RTU. A DREQ and its DREP lead to time-wait, during which the
//! QP number must not carry a new connection. Every MAD from the network is hostile: it
//! must name a live connection by its random communication ID and come from that
//! connection's peer, or it is dropped and counted ([`Dropped`], [`CmCounters`]); the
//! number of connections and the time any of them waits are bounded by [`CmConfig`].

mod counters;
mod event;

pub use counters::{CmCounters, KINDS};
pub use event::{CmError, CmEvent, CommId, Dropped};

use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;

use ferroce_wire::cm::{
    Drep, Dreq, Message, MsgKind, Rej, RejReason, Rep, Repr, Req, Rtu, SidrRep, SidrReq,
    SidrStatus, Transport,
};
use ferroce_wire::mad::Mad;

use crate::random::{FillRandom, Random};
use crate::Instant;

/// How long a CM timeout exponent stands for: 4.096 µs × 2^`exp` (IBA's encoding of every
/// CM and transport timeout; 20 is about 4.3 s).
pub fn cm_time(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// Limits and identity of one connection manager.
#[derive(Debug, Clone)]
pub struct CmConfig {
    /// The CA GUID this CM puts in REQs and REPs (Linux: the device's node GUID).
    pub ca_guid: u64,
    /// How long this CM waits for an answer before resending, as an exponent (also sent in
    /// REQs as both response timeouts). rdma_cm's default is 20, about 4.3 s. A peer's
    /// longer response timeout is cut to this.
    pub response_timeout: u8,
    /// Resends before giving up (4 bits in a REQ; rdma_cm's default 15). A peer's larger
    /// count is cut to this.
    pub max_retries: u8,
    /// How long a connection stays in time-wait after its DREQ/DREP.
    pub timewait: Duration,
    /// Most connections in any state at once; a REQ beyond it is refused with
    /// "no resources".
    pub max_connections: usize,
}

impl Default for CmConfig {
    fn default() -> CmConfig {
        CmConfig {
            ca_guid: 0,
            response_timeout: 20,
            max_retries: 15,
            timewait: Duration::from_secs(1),
            max_connections: 4096,
        }
    }
}

/// A MAD to send: on QP1 to `to`, with the GSI's Q_Key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmTransmit {
    /// The peer's GID.
    pub to: Ipv6Addr,
    /// The 256-byte MAD.
    pub mad: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ReqSent,
    RepRcvd,
    ReqRcvd,
    RepSent,
    Established,
    DreqSent,
    DreqRcvd,
    TimeWait,
    /// A SIDR REQ sent, waiting for its SIDR REP.
    SidrSent,
    /// A SIDR REQ received, waiting for the user's answer.
    SidrRcvd,
}

/// One connection, seen from this side.
#[derive(Debug)]
struct Conn {
    state: State,
    active: bool,
    remote_gid: Ipv6Addr,
    /// 0 until the peer has named its own (REP, or the REQ's).
    remote_comm_id: u32,
    local_qpn: u32,
    remote_qpn: u32,
    /// The service a SIDR REQ asked for (0 otherwise).
    service_id: u64,
    tid: u64,
    /// The last message sent: resent on a timeout, or to answer a duplicate.
    last: Option<Repr>,
    retries_left: u8,
    deadline: Option<Instant>,
    /// Time between resends.
    wait: Duration,
}

impl Conn {
    /// A connection in `state` with `remote_gid`, named by no peer ID or QP yet, with no
    /// message sent and no timer armed. The active states are the ones that send first.
    fn new(state: State, remote_gid: Ipv6Addr, tid: u64, wait: Duration, retries: u8) -> Conn {
        Conn {
            state,
            active: matches!(state, State::ReqSent | State::SidrSent),
            remote_gid,
            remote_comm_id: 0,
            local_qpn: 0,
            remote_qpn: 0,
            service_id: 0,
            tid,
            last: None,
            retries_left: retries,
            deadline: None,
            wait,
        }
    }
}

/// A connection manager for one port.
#[derive(Debug)]
pub struct Cm {
    config: CmConfig,
    random: Random,
    conns: HashMap<CommId, Conn>,
    /// (peer GID, peer's communication ID) → ours, for passive connections: how a resent
    /// REQ is known.
    by_remote: HashMap<(Ipv6Addr, u32), CommId>,
    listeners: HashMap<u64, ()>,
    out: VecDeque<CmTransmit>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
    /// On a shared interface, whether another process listens on a service ID (see
    /// [`Cm::set_served_elsewhere`]); `None` where this CM is the only one.
    elsewhere: Option<ServedElsewhere>,
}

/// Answers whether another process on the host listens on a service ID: how a CM on a
/// shared interface tells a request that is another's from one nobody serves.
pub struct ServedElsewhere(pub Box<dyn FnMut(u64) -> bool + Send>);

impl std::fmt::Debug for ServedElsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServedElsewhere")
    }
}

impl Cm {
    /// A connection manager drawing communication IDs and transaction IDs from `random`
    /// (a cryptographic source on a real network).
    pub fn new(config: CmConfig, random: FillRandom) -> Cm {
        Cm {
            config,
            random: Random::new(random),
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            listeners: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
            elsewhere: None,
        }
    }

    /// How this CM learns whether another process on the host listens on a service ID
    /// it does not; `None` (the default) where it is the only CM taking QP1's MADs on its
    /// port. Where processes share an interface, each has a CM of its own and sees every
    /// MAD to QP1, so a REQ or SIDR REQ for a service this one does not listen on may be
    /// another's. It is left to them (dropped, counted as `cm_rx_no_listener`) if `f`
    /// says one of them serves it, and refused as on a sole interface if not, so a
    /// client learns at once that nothing listens there, as from the kernel's rdma_cm.
    /// Each process that sees such a request refuses it, and the client takes the first
    /// REJ. The I/O is the caller's: the library asks the host-wide port holds, which
    /// cost a system call, so `f` is asked only about requests this CM does not serve.
    pub fn set_served_elsewhere(&mut self, f: Option<ServedElsewhere>) {
        self.elsewhere = f;
    }

    /// Whether a request for `service_id`, which nobody here listens on, is to be left
    /// to another process (dropped) rather than refused.
    fn leave_to_others(&mut self, service_id: u64) -> bool {
        self.elsewhere.as_mut().is_some_and(|f| (f.0)(service_id))
    }

    /// The counters.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// Connections in any state, time-wait included.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Takes REQs for `service_id` from now on.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if self.listeners.insert(service_id, ()).is_some() {
            return Err(CmError::ServiceInUse);
        }
        Ok(())
    }

    /// Stops taking REQs for `service_id` (connections already made stay).
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    /// Sends a REQ to `remote_gid`. `req` holds what the user decides (service ID, QPN,
    /// starting PSN, path, resources, private data); this CM fills in its communication
    /// ID, CA GUID, response timeouts and retry count.
    pub fn connect(
        &mut self,
        now: Instant,
        remote_gid: Ipv6Addr,
        mut req: Req,
    ) -> Result<CommId, CmError> {
        if self.conns.len() >= self.config.max_connections {
            return Err(CmError::TooManyConnections);
        }
        let id = self.new_id();
        req.local_comm_id = id;
        req.local_ca_guid = self.config.ca_guid;
        req.remote_cm_response_timeout = self.config.response_timeout;
        req.local_cm_response_timeout = self.config.response_timeout;
        req.max_cm_retries = self.config.max_retries.min(15);
        let tid = self.random.u64();
        let wait = cm_time(self.config.response_timeout);
        let conn = Conn {
            local_qpn: req.local_qpn,
            ..Conn::new(State::ReqSent, remote_gid, tid, wait, req.max_cm_retries)
        };
        self.conns.insert(id, conn);
        self.send_and_wait(now, id, Message::Req(req));
        Ok(id)
    }

    /// Answers a connection request with a REP. `rep` holds the user's QPN, starting PSN,
    /// resources and private data; the IDs and CA GUID are filled in.
    pub fn accept(&mut self, now: Instant, id: CommId, mut rep: Rep) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::UnknownId)?;
        if c.state != State::ReqRcvd {
            return Err(CmError::WrongState);
        }
        rep.local_comm_id = id;
        rep.remote_comm_id = c.remote_comm_id;
        rep.local_ca_guid = self.config.ca_guid;
        c.local_qpn = rep.local_qpn;
        c.state = State::RepSent;
        self.send_and_wait(now, id, Message::Rep(rep));
        Ok(())
    }

    /// Refuses a connection request (or, on the active side, the REP) with a REJ of
    /// `reason` (rdma_reject's is [`RejReason::CONSUMER_DEFINED`]), and forgets it.
    pub fn reject(
        &mut self,
        id: CommId,
        reason: RejReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let max = ferroce_wire::cm::Rej::default().private_data.len();
        if private_data.len() > max {
            return Err(CmError::PrivateDataTooLong { max });
        }
        let c = self.conns.get(&id).ok_or(CmError::UnknownId)?;
        let rejected = match c.state {
            State::ReqRcvd => MsgKind::Req,
            State::RepRcvd => MsgKind::Rep,
            _ => return Err(CmError::WrongState),
        };
        self.reject_and_forget(id, rejected, reason, private_data);
        Ok(())
    }

    /// Drops a connection or service request not yet answered, sending nothing: its
    /// sender resends it after its response timeout, and the resend is taken as a new
    /// request. What Linux's CM does when the listener's backlog is full.
    pub fn drop_request(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conns.get(&id).ok_or(CmError::UnknownId)?;
        if !matches!(c.state, State::ReqRcvd | State::SidrRcvd) {
            return Err(CmError::WrongState);
        }
        self.counters.rx_dropped_backlog += 1;
        self.forget(id);
        Ok(())
    }

    /// The active side's QP is ready (RTR and RTS with the REP's values): sends the RTU,
    /// and the connection is established.
    pub fn ready(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::UnknownId)?;
        if c.state != State::RepRcvd {
            return Err(CmError::WrongState);
        }
        c.state = State::Established;
        c.deadline = None;
        let rtu = Rtu {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            ..Rtu::default()
        };
        let (to, tid) = (c.remote_gid, c.tid);
        let repr = Repr {
            tid,
            msg: Message::Rtu(rtu),
        };
        self.transmit(to, &repr);
        if let Some(c) = self.conns.get_mut(&id) {
            c.last = Some(repr); // answers a resent REP
        }
        Ok(())
    }

    /// The passive side saw the peer's data before its RTU (IBA's "communication
    /// established"): the connection is established as if the RTU had come.
    pub fn established(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::UnknownId)?;
        match c.state {
            State::RepSent => {
                c.state = State::Established;
                c.deadline = None;
                self.events.push_back(CmEvent::Established { id });
                Ok(())
            }
            State::Established => Ok(()),
            _ => Err(CmError::WrongState),
        }
    }

    /// Ends a connection: a DREQ from an established one, the DREP to the peer's DREQ,
    /// and a REJ from one not yet established. Calling it again during the disconnection
    /// changes nothing.
    pub fn disconnect(&mut self, now: Instant, id: CommId) -> Result<(), CmError> {
        let c = self.conns.get(&id).ok_or(CmError::UnknownId)?;
        match c.state {
            State::Established => {
                let dreq = Dreq {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    ..Dreq::default()
                };
                let c = self.conns.get_mut(&id).expect("looked up above");
                c.state = State::DreqSent;
                c.retries_left = self.config.max_retries;
                c.wait = cm_time(self.config.response_timeout);
                self.send_and_wait(now, id, Message::Dreq(dreq));
            }
            State::DreqRcvd => self.answer_dreq(now, id),
            State::ReqSent | State::RepRcvd | State::ReqRcvd | State::RepSent => {
                let rejected = if c.active { MsgKind::Rep } else { MsgKind::Req };
                self.reject_and_forget(id, rejected, RejReason::CONSUMER_DEFINED, &[]);
            }
            State::DreqSent | State::TimeWait => {}
            // A UD service request: the asking side stops waiting, the asked one refuses.
            State::SidrSent => self.forget(id),
            State::SidrRcvd => {
                let _ = self.sidr_reply(now, id, SidrStatus::REJECT, 0, 0);
            }
        }
        Ok(())
    }

    /// Asks `remote_gid` which UD QP and Q_Key serve `req.service_id` (a SIDR REQ; the
    /// request ID is filled in). The answer comes as [`CmEvent::SidrReply`], or
    /// [`CmEvent::Unreachable`] after every resend.
    pub fn sidr_request(
        &mut self,
        now: Instant,
        remote_gid: Ipv6Addr,
        mut req: SidrReq,
    ) -> Result<CommId, CmError> {
        if self.conns.len() >= self.config.max_connections {
            return Err(CmError::TooManyConnections);
        }
        let id = self.new_id();
        req.request_id = id;
        let tid = self.random.u64();
        let wait = cm_time(self.config.response_timeout);
        let retries = self.config.max_retries;
        self.conns.insert(
            id,
            Conn {
                service_id: req.service_id,
                ..Conn::new(State::SidrSent, remote_gid, tid, wait, retries)
            },
        );
        self.send_and_wait(now, id, Message::SidrReq(req));
        Ok(id)
    }

    /// Answers a SIDR request: `status` OK with the serving QP and its Q_Key, or a refusal
    /// ([`SidrStatus::REJECT`], ...) with both 0. The answer is kept for a while, to send
    /// again should the request come again.
    pub fn sidr_reply(
        &mut self,
        now: Instant,
        id: CommId,
        status: SidrStatus,
        qpn: u32,
        qkey: u32,
    ) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::UnknownId)?;
        if c.state != State::SidrRcvd {
            return Err(CmError::WrongState);
        }
        let repr = Repr {
            tid: c.tid,
            msg: Message::SidrRep(SidrRep {
                request_id: c.remote_comm_id,
                status,
                qpn,
                qkey,
                service_id: c.service_id,
                ..SidrRep::default()
            }),
        };
        c.last = Some(repr.clone());
        let to = c.remote_gid;
        self.transmit(to, &repr);
        self.enter_timewait(now, id);
        Ok(())
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<CmTransmit> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When [`Cm::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns.values().filter_map(|c| c.deadline).min()
    }

    /// Resends what went unanswered, gives up on what was resent enough, ends time-waits.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<CommId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                State::ReqSent | State::RepSent | State::DreqSent | State::SidrSent
                    if c.retries_left > 0 =>
                {
                    c.retries_left -= 1;
                    c.deadline = Some(now + c.wait);
                    let (to, last) = (c.remote_gid, c.last.clone());
                    if let Some(repr) = last {
                        self.counters.tx_retries[counters::kind(&repr.msg)] += 1;
                        self.transmit(to, &repr);
                    }
                }
                State::ReqSent | State::RepSent | State::ReqRcvd => {
                    // Given up: a REJ (timeout) tells the peer.
                    self.counters.timeouts += 1;
                    let (rejected, ev) = match c.state {
                        State::ReqSent => (MsgKind::Req, CmEvent::Unreachable { id }),
                        State::RepSent => (MsgKind::Rep, CmEvent::Unreachable { id }),
                        _ => (MsgKind::Req, CmEvent::RequestExpired { id }),
                    };
                    self.reject_and_forget(id, rejected, RejReason::TIMEOUT, &[]);
                    self.events.push_back(ev);
                }
                State::SidrSent => {
                    self.counters.timeouts += 1;
                    self.forget(id);
                    self.events.push_back(CmEvent::Unreachable { id });
                }
                State::SidrRcvd => {
                    self.counters.timeouts += 1;
                    let _ = self.sidr_reply(now, id, SidrStatus::REJECT, 0, 0);
                    self.forget(id);
                    self.events.push_back(CmEvent::RequestExpired { id });
                }
                State::DreqSent => {
                    self.counters.timeouts += 1;
                    self.enter_timewait(now, id);
                    self.events.push_back(CmEvent::Disconnected {
                        id,
                        answered: false,
                    });
                }
                State::TimeWait => {
                    self.forget(id);
                    self.events.push_back(CmEvent::TimewaitExit { id });
                }
                _ => c.deadline = None,
            }
        }
    }

    /// Takes in a MAD received on QP1 from `from`. Whatever it is, the result says whether
    /// it changed anything; a refusal the IBA asks for (a REJ for a REQ nobody listens for,
    /// the answer to a duplicate) has been queued for sending.
    pub fn handle_mad(&mut self, now: Instant, from: Ipv6Addr, mad: &[u8]) -> Result<(), Dropped> {
        let repr = match Mad::new_checked(mad).and_then(|m| Repr::parse(&m)) {
            Ok(r) => r,
            Err(e) => {
                self.counters.rx_malformed += 1;
                return Err(Dropped::Malformed(e));
            }
        };
        self.counters.rx_msgs[counters::kind(&repr.msg)] += 1;
        let tid = repr.tid;
        let r = match repr.msg {
            Message::Req(q) => self.on_req(now, from, tid, q),
            Message::Rep(p) => self.on_rep(from, p),
            Message::Rtu(u) => self.on_rtu(from, u),
            Message::Rej(j) => self.on_rej(from, j),
            Message::Mra(m) => self.on_mra(now, from, m),
            Message::Dreq(d) => self.on_dreq(now, from, d),
            Message::Drep(d) => self.on_drep(now, from, d),
            Message::SidrReq(q) => self.on_sidr_req(now, from, tid, q),
            Message::SidrRep(p) => self.on_sidr_rep(from, p),
        };
        if let Err(d) = r {
            self.count_drop(d);
        }
        r
    }

    fn count_drop(&mut self, d: Dropped) {
        let c = &mut self.counters;
        match d {
            Dropped::UnknownCommId => c.rx_unknown_comm_id += 1,
            Dropped::Spoofed => c.rx_spoofed += 1,
            Dropped::WrongState => c.rx_wrong_state += 1,
            Dropped::QpnMismatch => c.rx_qpn_mismatch += 1,
            Dropped::NoListener => c.rx_no_listener += 1,
            Dropped::Own => c.rx_own += 1,
            Dropped::Malformed(_)
            | Dropped::Duplicate
            | Dropped::Refused(_)
            | Dropped::RefusedSidr(_) => {}
        }
    }

    fn on_req(&mut self, now: Instant, from: Ipv6Addr, tid: u64, q: Req) -> Result<(), Dropped> {
        if let Some(&id) = self.by_remote.get(&(from, q.local_comm_id)) {
            self.counters.rx_duplicates[0] += 1;
            let c = &self.conns[&id];
            if c.state == State::TimeWait {
                // The peer reuses an ID of a connection still in time-wait: stale.
                let rej = Rej {
                    local_comm_id: id,
                    remote_comm_id: q.local_comm_id,
                    message_rejected: MsgKind::Req,
                    reason: RejReason::STALE_CONN,
                    ..Rej::default()
                };
                self.send(from, tid, Message::Rej(rej));
            }
            return Err(Dropped::Duplicate);
        }
        let listened = self.listeners.contains_key(&q.service_id);
        if !listened && self.leave_to_others(q.service_id) {
            // On a shared interface and on lo, what this CM sends comes back to it too:
            // its own REQ is a connection to itself when it listens on the service, left
            // to the process that serves it here, or refused below when none does, as a
            // peer's is.
            let own = q.local_ca_guid == self.config.ca_guid
                && self.conns.get(&q.local_comm_id).is_some_and(|c| c.active);
            return Err(if own {
                Dropped::Own
            } else {
                Dropped::NoListener
            });
        }
        let refuse = if !listened {
            self.counters.rej_no_listener += 1;
            Some(RejReason::INVALID_SERVICE_ID)
        } else if !matches!(q.transport, Transport::Rc | Transport::Uc) {
            self.counters.rej_unsupported += 1;
            Some(RejReason::INVALID_TRANSPORT_TYPE)
        } else if !(1..=5).contains(&q.path_mtu) {
            self.counters.rej_unsupported += 1;
            Some(RejReason::INVALID_MTU)
        } else if self.conns.len() >= self.config.max_connections {
            self.counters.rej_no_resources += 1;
            Some(RejReason::NO_RESOURCES)
        } else {
            None
        };
        if let Some(reason) = refuse {
            let rej = Rej {
                local_comm_id: 0,
                remote_comm_id: q.local_comm_id,
                message_rejected: MsgKind::Req,
                reason,
                ..Rej::default()
            };
            self.send(from, tid, Message::Rej(rej));
            return Err(Dropped::Refused(reason));
        }
        let id = self.new_id();
        // The peer's timeouts set how long this side waits for its RTU, within this CM's
        // own bounds: a REQ cannot make a connection wait for hours.
        let wait = cm_time(
            q.local_cm_response_timeout
                .min(self.config.response_timeout),
        );
        self.conns.insert(
            id,
            Conn {
                remote_comm_id: q.local_comm_id,
                remote_qpn: q.local_qpn,
                // The user has as long to answer as this CM would resend for: a flood of
                // REQs nobody answers does not hold the table for ever.
                deadline: Some(now + self.request_wait()),
                ..Conn::new(
                    State::ReqRcvd,
                    from,
                    tid,
                    wait,
                    q.max_cm_retries.min(self.config.max_retries),
                )
            },
        );
        self.by_remote.insert((from, q.local_comm_id), id);
        self.events.push_back(CmEvent::ConnectRequest {
            id,
            from,
            req: Box::new(q),
        });
        Ok(())
    }

    fn on_sidr_req(
        &mut self,
        now: Instant,
        from: Ipv6Addr,
        tid: u64,
        q: SidrReq,
    ) -> Result<(), Dropped> {
        if let Some(&id) = self.by_remote.get(&(from, q.request_id)) {
            // Asked again: the answer again, if there is one yet.
            self.counters.rx_duplicates[7] += 1;
            let last = self.conns.get(&id).and_then(|c| c.last.clone());
            if let Some(last) = last {
                self.transmit(from, &last);
            }
            return Err(Dropped::Duplicate);
        }
        let listened = self.listeners.contains_key(&q.service_id);
        if !listened && self.leave_to_others(q.service_id) {
            return Err(Dropped::NoListener);
        }
        let refuse = if !listened {
            self.counters.rej_no_listener += 1;
            Some(SidrStatus::UNSUPPORTED)
        } else if self.conns.len() >= self.config.max_connections {
            self.counters.rej_no_resources += 1;
            Some(SidrStatus::NO_QP)
        } else {
            None
        };
        if let Some(status) = refuse {
            let rep = SidrRep {
                request_id: q.request_id,
                status,
                service_id: q.service_id,
                ..SidrRep::default()
            };
            self.send(from, tid, Message::SidrRep(rep));
            return Err(Dropped::RefusedSidr(status));
        }
        let id = self.new_id();
        let wait = cm_time(self.config.response_timeout);
        self.conns.insert(
            id,
            Conn {
                remote_comm_id: q.request_id,
                service_id: q.service_id,
                deadline: Some(now + self.request_wait()),
                ..Conn::new(State::SidrRcvd, from, tid, wait, 0)
            },
        );
        self.by_remote.insert((from, q.request_id), id);
        self.events.push_back(CmEvent::SidrRequest {
            id,
            from,
            req: Box::new(q),
        });
        Ok(())
    }

    fn on_sidr_rep(&mut self, from: Ipv6Addr, p: SidrRep) -> Result<(), Dropped> {
        let id = p.request_id;
        let c = self.named(from, id)?;
        if c.state != State::SidrSent || p.service_id != c.service_id {
            return Err(Dropped::WrongState);
        }
        self.forget(id);
        self.events.push_back(CmEvent::SidrReply {
            id,
            rep: Box::new(p),
        });
        Ok(())
    }

    /// The connection a message names, if it came from that connection's peer.
    fn named(&mut self, from: Ipv6Addr, id: u32) -> Result<&mut Conn, Dropped> {
        let c = self.conns.get_mut(&id).ok_or(Dropped::UnknownCommId)?;
        if c.remote_gid != from {
            return Err(Dropped::Spoofed);
        }
        Ok(c)
    }

    /// [`Cm::named`] for a message that also names the peer's own ID, which must be the
    /// one the connection knows.
    fn named_by_both(&mut self, from: Ipv6Addr, id: u32, peer: u32) -> Result<&mut Conn, Dropped> {
        let c = self.named(from, id)?;
        if peer != c.remote_comm_id {
            return Err(Dropped::Spoofed);
        }
        Ok(c)
    }

    fn on_rep(&mut self, from: Ipv6Addr, p: Rep) -> Result<(), Dropped> {
        let id = p.remote_comm_id;
        let c = self.named(from, id)?;
        if !c.active {
            return Err(Dropped::WrongState);
        }
        match c.state {
            State::ReqSent => {
                c.state = State::RepRcvd;
                c.remote_comm_id = p.local_comm_id;
                c.remote_qpn = p.local_qpn;
                c.deadline = None;
                self.events.push_back(CmEvent::Reply {
                    id,
                    rep: Box::new(p),
                });
                Ok(())
            }
            State::RepRcvd | State::Established if p.local_comm_id == c.remote_comm_id => {
                // The peer missed the RTU: send it again.
                let resend = (c.state == State::Established)
                    .then(|| c.last.clone())
                    .flatten();
                self.counters.rx_duplicates[3] += 1;
                if let Some(last) = resend {
                    self.transmit(from, &last);
                }
                Err(Dropped::Duplicate)
            }
            _ => Err(Dropped::WrongState),
        }
    }

    fn on_rtu(&mut self, from: Ipv6Addr, u: Rtu) -> Result<(), Dropped> {
        let id = u.remote_comm_id;
        let c = self.named(from, id)?;
        if c.active || u.local_comm_id != c.remote_comm_id {
            return Err(Dropped::WrongState);
        }
        match c.state {
            State::RepSent => {
                c.state = State::Established;
                c.deadline = None;
                self.events.push_back(CmEvent::Established { id });
                Ok(())
            }
            State::Established => {
                self.counters.rx_duplicates[4] += 1;
                Err(Dropped::Duplicate)
            }
            _ => Err(Dropped::WrongState),
        }
    }

    fn on_rej(&mut self, from: Ipv6Addr, j: Rej) -> Result<(), Dropped> {
        let id = j.remote_comm_id;
        let c = self.named(from, id)?;
        // A REJ of a REQ may come before the peer had an ID; after that it must name it.
        if c.remote_comm_id != 0 && j.local_comm_id != c.remote_comm_id {
            return Err(Dropped::Spoofed);
        }
        match c.state {
            State::ReqSent | State::RepRcvd | State::RepSent | State::ReqRcvd => {
                self.forget(id);
                let n = j.private_data.len().min(148);
                self.events.push_back(CmEvent::Rejected {
                    id,
                    reason: j.reason,
                    private_data: j.private_data[..n].to_vec(),
                });
                Ok(())
            }
            _ => Err(Dropped::WrongState),
        }
    }

    fn on_mra(
        &mut self,
        now: Instant,
        from: Ipv6Addr,
        m: ferroce_wire::cm::Mra,
    ) -> Result<(), Dropped> {
        let cap = self.config.response_timeout;
        let c = self.named(from, m.remote_comm_id)?;
        match (c.state, m.message_mraed) {
            (State::ReqSent, MsgKind::Req) | (State::RepSent, MsgKind::Rep) => {
                // The peer needs longer: wait that much more without spending a resend.
                c.deadline = Some(now + c.wait + cm_time(m.service_timeout.min(cap)));
                Ok(())
            }
            _ => Err(Dropped::WrongState),
        }
    }

    fn on_dreq(&mut self, now: Instant, from: Ipv6Addr, d: Dreq) -> Result<(), Dropped> {
        let id = d.remote_comm_id;
        let c = self.named_by_both(from, id, d.local_comm_id)?;
        if d.remote_qpn != c.local_qpn {
            return Err(Dropped::QpnMismatch);
        }
        match c.state {
            State::Established | State::RepSent => {
                c.state = State::DreqRcvd;
                c.deadline = None;
                self.events.push_back(CmEvent::DisconnectRequest { id });
                Ok(())
            }
            State::DreqSent => {
                // Both ended at once: answer, and this side's DREQ is as good as answered.
                self.answer_dreq(now, id);
                self.events
                    .push_back(CmEvent::Disconnected { id, answered: true });
                Ok(())
            }
            State::DreqRcvd | State::TimeWait => {
                let last = c.last.clone();
                self.counters.rx_duplicates[5] += 1;
                if let Some(last) = last.filter(|l| matches!(l.msg, Message::Drep(_))) {
                    self.transmit(from, &last);
                }
                Err(Dropped::Duplicate)
            }
            _ => Err(Dropped::WrongState),
        }
    }

    fn on_drep(&mut self, now: Instant, from: Ipv6Addr, d: Drep) -> Result<(), Dropped> {
        let id = d.remote_comm_id;
        let c = self.named_by_both(from, id, d.local_comm_id)?;
        match c.state {
            State::DreqSent => {
                self.enter_timewait(now, id);
                self.events
                    .push_back(CmEvent::Disconnected { id, answered: true });
                Ok(())
            }
            State::TimeWait => {
                self.counters.rx_duplicates[6] += 1;
                Err(Dropped::Duplicate)
            }
            _ => Err(Dropped::WrongState),
        }
    }

    /// Sends connection `id`'s peer a REJ (`private_data` fits: checked by the caller) and
    /// forgets the connection.
    fn reject_and_forget(
        &mut self,
        id: CommId,
        rejected: MsgKind,
        reason: RejReason,
        private_data: &[u8],
    ) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let mut rej = Rej {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            message_rejected: rejected,
            reason,
            ..Rej::default()
        };
        rej.private_data[..private_data.len()].copy_from_slice(private_data);
        let (to, tid) = (c.remote_gid, c.tid);
        self.send(to, tid, Message::Rej(rej));
        self.forget(id);
    }

    /// Sends the DREP to the peer's DREQ (kept to answer its resends) and enters
    /// time-wait.
    fn answer_dreq(&mut self, now: Instant, id: CommId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let repr = Repr {
            tid: c.tid,
            msg: Message::Drep(Drep {
                local_comm_id: id,
                remote_comm_id: c.remote_comm_id,
                ..Drep::default()
            }),
        };
        c.last = Some(repr.clone());
        let to = c.remote_gid;
        self.transmit(to, &repr);
        self.enter_timewait(now, id);
    }

    /// How long a connection request waits for the user's accept or reject.
    fn request_wait(&self) -> Duration {
        cm_time(self.config.response_timeout) * (u32::from(self.config.max_retries) + 1)
    }

    fn enter_timewait(&mut self, now: Instant, id: CommId) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::TimeWait;
            c.deadline = Some(now + self.config.timewait);
        }
    }

    fn forget(&mut self, id: CommId) {
        if let Some(c) = self.conns.remove(&id) {
            if !c.active {
                self.by_remote.remove(&(c.remote_gid, c.remote_comm_id));
            }
        }
    }

    /// A fresh communication ID: random, non-zero, not in use.
    fn new_id(&mut self) -> CommId {
        loop {
            let id = self.random.u32();
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Sends `msg` for connection `id` and arms its resend timer.
    fn send_and_wait(&mut self, now: Instant, id: CommId, msg: Message) {
        let c = self.conns.get_mut(&id).expect("a live connection");
        let repr = Repr { tid: c.tid, msg };
        c.deadline = Some(now + c.wait);
        c.last = Some(repr.clone());
        let to = c.remote_gid;
        self.transmit(to, &repr);
    }

    fn send(&mut self, to: Ipv6Addr, tid: u64, msg: Message) {
        self.transmit(to, &Repr { tid, msg });
    }

    fn transmit(&mut self, to: Ipv6Addr, repr: &Repr) {
        self.counters.tx_msgs[counters::kind(&repr.msg)] += 1;
        tracing::debug!(msg = repr.msg.name(), %to, "cm send");
        self.out.push_back(CmTransmit {
            to,
            mad: repr.to_bytes(),
        });
    }
}

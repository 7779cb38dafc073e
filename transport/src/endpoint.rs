//! The device: memory regions, completion queues, QPs, and the sans-IO surface
//! (`handle_packet`, `poll_transmit`, `poll_timeout`, `handle_timeout`).

use std::collections::BTreeMap;
use std::sync::Arc;

use core::net::{IpAddr, Ipv6Addr};

use ferroce_wire::icrc_fold::{self, PayloadCrc, ShiftOps};
use ferroce_wire::{
    icrc, BthRepr, DatagramRepr, DatagramView, ExtRepr, IbRepr, IpRepr, Opcode, Psn, Service,
};

use crate::counters::Counters;
use crate::cq::CqTable;
use crate::dcqcn::{DcqcnConfig, DcqcnState, ECN_CE};
use crate::error::{Error, Result};
use crate::mcast::{is_multicast_gid, Groups, MULTICAST_QPN};
use crate::memory::{OwnedMemory, RegionMemory};
use crate::mr::{Access, MrInfo, MrTable, MwId, MwType};
use crate::qp::{CnpOut, Ctx, Qp, Rx};
use crate::qpn::QpnSpace;
use crate::random::{seeded_fill, FillRandom, Random};
use crate::schedule::Schedule;
use crate::srq::SrqTable;
use crate::time::Instant;
use crate::tx::{ip_udp_len, TxMeta, MAX_DATAGRAM_LEN};
use crate::verbs::AsyncEvent;
use crate::verbs::{
    CqId, Mtu, PdId, QpAttr, QpAttrMask, QpInitAttr, QpState, QpType, RecvWr, SendWr, SrqAttr,
    SrqId, WorkCompletion,
};

/// Lowest QP number handed out: 0 and 1 are the special QPs (SMI, GSI). QP numbers
/// are drawn at random from `FIRST_QPN..0xff_ffff` (0xffffff is the multicast QP), so a
/// peer cannot guess a live one from the order of creation.
pub const FIRST_QPN: u32 = 2;
/// Seed of the generator behind [`Endpoint::new`] (deterministic, for simulations).
const SIM_SEED: u64 = 0x5eed_f0ce;
/// Most work requests per queue.
pub const MAX_WR: u32 = 16384;
/// Most scatter/gather elements per work request.
pub const MAX_SGE: u32 = 32;
/// Most inline bytes per send work request.
pub const MAX_INLINE: u32 = 512;
/// Deepest completion queue.
pub const MAX_CQE: usize = 1 << 20;
/// TTL / hop limit of every packet (the kernel's RoCE v2 default).
pub const HOP_LIMIT: u8 = 64;
/// Datagrams one QP may send in a row while others wait (see
/// [`Endpoint::poll_transmit`]): as many as a super-packet holds.
const TX_BURST: u32 = 64;

/// Device configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// The GID table; IPv4 addresses in IPv4-mapped form. Packets to other addresses are
    /// dropped.
    pub local_gids: Vec<Ipv6Addr>,
    /// The port's active MTU: the largest path MTU allowed, and the MTU of UD QPs.
    pub port_mtu: Mtu,
    /// Send each packet of a multi-packet RDMA WRITE without immediate as a WRITE ONLY
    /// of its own (see [`Endpoint::set_split_writes`]).
    pub split_writes: bool,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            local_gids: Vec::new(),
            port_mtu: Mtu::Mtu4096,
            split_writes: false,
        }
    }
}

/// One datagram written by [`Endpoint::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written at the start of the buffer (IP header through ICRC).
    pub len: usize,
    /// Destination IP address (IPv4 for IPv4-mapped GIDs).
    pub dst: IpAddr,
    /// Source IP address.
    pub src: IpAddr,
    /// The ECN bits written in the IP header.
    pub ecn: u8,
    /// The QP that sent it.
    pub qpn: u32,
    /// The destination QP (from the BTH).
    pub dst_qpn: u32,
    /// How many times in a row the peer went silent over what this packet repeats: 0 for
    /// a packet sent for the first time, or again after a NAK (which names its loss); n
    /// for a request sent after n local ACK timeouts with no progress between, or for a
    /// response of the nth replay of one READ. A link that joins packets into
    /// super-packets may take silences in a row as a sign that the path or the peer does
    /// not take them whole (a receiver that cannot split them loses each one entire).
    pub silences: u8,
}

/// A RoCE v2 device in user space, without I/O.
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    mrs: MrTable,
    srqs: SrqTable,
    cqs: CqTable,
    qps: BTreeMap<u32, Qp>,
    /// The QPs that may have something to send, and their timers.
    sched: Schedule,
    counters: Counters,
    /// Asynchronous events (a QP that failed, a CQ that overflowed) not yet taken.
    events: Vec<AsyncEvent>,
    /// DCQCN parameters (congestion control is off unless enabled here or per QP).
    dcqcn: DcqcnConfig,
    /// Where keys, default iovas and QP numbers come from.
    random: Random,
    /// Round-robin cursor: the QP number to try first.
    rr: u32,
    /// The QP that sent the last datagram and how many it has sent in a row: it keeps
    /// the turn for up to [`TX_BURST`] (see [`Endpoint::poll_transmit`]).
    burst: Option<(u32, u32)>,
    /// The QP numbers this endpoint may hand out.
    qpn_space: QpnSpace,
    ip_id: u16,
    /// Operators that carry a header's CRC past a folded payload, by payload length.
    shift_ops: ShiftOps,
    /// Multicast groups and their UD QPs.
    groups: Groups,
}

/// True when `ip_packet` is long enough to carry an ICRC as its IP length says, and the
/// ICRC does not match.
fn icrc_bad(ip_packet: &[u8]) -> bool {
    let len = match ip_packet.first().map(|b| b >> 4) {
        Some(4) if ip_packet.len() >= 20 => {
            usize::from(u16::from_be_bytes([ip_packet[2], ip_packet[3]]))
        }
        Some(6) if ip_packet.len() >= 40 => {
            40 + usize::from(u16::from_be_bytes([ip_packet[4], ip_packet[5]]))
        }
        _ => return false,
    };
    match ip_packet.get(..len) {
        Some(p) if len >= 20 + 8 + 12 + 4 => {
            matches!(
                icrc::verify(p),
                Err(ferroce_wire::Error::IcrcMismatch { .. })
            )
        }
        _ => false,
    }
}

fn to_ip(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

impl Endpoint {
    /// A device with the given GIDs and port MTU whose keys, default iovas and QP
    /// numbers come from a fixed-seed generator: reproducible, and therefore guessable.
    /// For simulations and tests; a device on a network uses [`Endpoint::with_random`].
    pub fn new(config: EndpointConfig) -> Endpoint {
        Endpoint::with_random(config, seeded_fill(SIM_SEED))
    }

    /// A device whose keys, default iovas and QP numbers come from `fill`, which must be
    /// a cryptographic source (the OS's) for a device a peer can reach: RoCE v2 has no
    /// authentication, and these values are all a blind attacker has to guess.
    pub fn with_random(config: EndpointConfig, fill: FillRandom) -> Endpoint {
        Endpoint {
            random: Random::new(fill),
            config,
            mrs: MrTable::default(),
            srqs: SrqTable::default(),
            cqs: CqTable::default(),
            qps: BTreeMap::new(),
            sched: Schedule::default(),
            counters: Counters::default(),
            events: Vec::new(),
            dcqcn: DcqcnConfig::default(),
            rr: 0,
            burst: None,
            qpn_space: QpnSpace::Any,
            ip_id: 0,
            shift_ops: ShiftOps::default(),
            groups: Groups::default(),
        }
    }

    /// Whether RC QPs send every packet of a multi-packet RDMA WRITE without
    /// immediate as an RDMA WRITE ONLY of its own, each with its RETH (address, key and
    /// length of that packet's share), instead of FIRST, MIDDLE..., LAST.
    ///
    /// The peer's memory ends up the same, in the same order, with the same checks: a
    /// WRITE without immediate consumes nothing at the responder and completes nowhere
    /// there, so nothing can tell one message from several. AckReq is still set only on
    /// the work request's last packet (and every `MAX_PKTS_PER_ACK`th). What it buys:
    /// every packet of a run of WRITEs then has the same length (a FIRST carries 16 bytes
    /// more than a MIDDLE), so a link that joins equal packets into UDP GSO super-frames
    /// can join them across messages: 4 KiB WRITEs at MTU 1024 leave in one super-frame
    /// per burst instead of two frames per message. Off by default; the driver turns it on
    /// where its link joins frames.
    pub fn set_split_writes(&mut self, on: bool) {
        self.config.split_writes = on;
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Counters since creation.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Sets the DCQCN parameters, and whether QPs without their own setting
    /// ([`Endpoint::set_qp_dcqcn`]) use congestion control. Every QP's rate state starts
    /// over.
    pub fn set_dcqcn(&mut self, config: DcqcnConfig) -> Result<()> {
        config.validate()?;
        self.dcqcn = config;
        for qp in self.qps.values_mut() {
            qp.reset_cc();
            self.sched.touch(qp);
        }
        Ok(())
    }

    /// The DCQCN parameters.
    pub fn dcqcn(&self) -> &DcqcnConfig {
        &self.dcqcn
    }

    /// Turns congestion control on or off for one QP (`None`: follow
    /// [`DcqcnConfig::enabled`]). With it, the QP's packets leave ECN-capable, CE-marked
    /// packets it receives make it send CNPs, and CNPs it receives drive its pacer.
    pub fn set_qp_dcqcn(&mut self, qpn: u32, enabled: Option<bool>) -> Result<()> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::InvalidQp(qpn))?;
        qp.set_cc_enabled(enabled);
        self.sched.touch(qp);
        Ok(())
    }

    /// The reaction point of a QP with congestion control as of `now` (timer stages and
    /// α decay up to `now` applied to a copy); `None` for an unknown QP or one without
    /// congestion control.
    pub fn qp_rate(&self, qpn: u32, now: Instant) -> Option<DcqcnState> {
        self.qps.get(&qpn)?.rate(&self.dcqcn, now)
    }

    /// The numbers of the QPs that exist, in ascending order.
    pub fn qp_numbers(&self) -> Vec<u32> {
        self.qps.keys().copied().collect()
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        self.mrs.alloc_pd()
    }

    /// Frees a protection domain that has no regions and no QPs.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<()> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::InvalidPd);
        }
        if self.mrs.pd_in_use(pd) || self.qps.values().any(|q| q.pd == pd) || self.srqs.uses_pd(pd)
        {
            return Err(Error::PdInUse);
        }
        self.mrs.dealloc_pd(pd);
        Ok(())
    }

    /// Whether regions, QPs or SRQs still use `pd` (so [`Endpoint::dealloc_pd`] would
    /// fail with `PdInUse`).
    pub fn pd_in_use(&self, pd: PdId) -> bool {
        self.mrs.pd_in_use(pd) || self.qps.values().any(|q| q.pd == pd) || self.srqs.uses_pd(pd)
    }

    /// Registers a zero-filled region of `len` bytes at an automatic iova.
    pub fn reg_mr(&mut self, pd: PdId, len: usize, access: Access) -> Result<MrInfo> {
        self.reg_mr_with(pd, vec![0; len], None, access)
    }

    /// Registers `bytes` (the region owns them, as an [`OwnedMemory`]) at `iova`, or an
    /// automatic iova.
    pub fn reg_mr_with(
        &mut self,
        pd: PdId,
        bytes: Vec<u8>,
        iova: Option<u64>,
        access: Access,
    ) -> Result<MrInfo> {
        self.reg_mr_memory(pd, Arc::new(OwnedMemory::new(bytes)), iova, access)
    }

    /// Registers a view of `mem` at `iova`, or an automatic iova: the general form, for
    /// memory the application owns. The endpoint keeps a reference until the region is
    /// deregistered and touches the memory only through checked ranges.
    pub fn reg_mr_memory(
        &mut self,
        pd: PdId,
        mem: Arc<dyn RegionMemory>,
        iova: Option<u64>,
        access: Access,
    ) -> Result<MrInfo> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::InvalidPd);
        }
        let all = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC
            | Access::MW_BIND;
        if !access.difference(all).is_empty()
            || (access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                && !access.contains(Access::LOCAL_WRITE))
        {
            return Err(Error::InvalidAccess);
        }
        self.mrs
            .register(pd, mem, iova, access, &mut self.random)
            .ok_or(Error::OutOfResources)
    }

    /// Deregisters a region: from now on the endpoint never touches its memory, which is
    /// returned. A region a memory window is bound to stays (`MrInUse`), as in rxe.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<Arc<dyn RegionMemory>> {
        self.mrs.deregister(lkey).ok_or_else(|| {
            if self.mrs.has_windows(lkey) {
                Error::MrInUse
            } else {
                Error::InvalidKey(lkey)
            }
        })
    }

    /// Whether a bound memory window opens onto region `lkey` (then `dereg_mr` refuses).
    pub fn mr_has_windows(&self, lkey: u32) -> bool {
        self.mrs.has_windows(lkey)
    }

    /// Allocates a memory window in `pd`: its id and first R_Key (see [`MwBind`]).
    ///
    /// [`MwBind`]: crate::MwBind
    pub fn alloc_mw(&mut self, pd: PdId, kind: MwType) -> Result<(MwId, u32)> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::InvalidPd);
        }
        self.mrs
            .alloc_mw(pd, kind, &mut self.random)
            .ok_or(Error::OutOfResources)
    }

    /// Frees a memory window, bound or not: its R_Key stops working at once.
    pub fn dealloc_mw(&mut self, mw: MwId) -> Result<()> {
        if self.mrs.dealloc_mw(mw) {
            Ok(())
        } else {
            Err(Error::InvalidMw)
        }
    }

    /// The protection domain, type and current R_Key of a memory window.
    pub fn mw_info(&self, mw: MwId) -> Option<(PdId, MwType, u32)> {
        self.mrs.mw_info(mw)
    }

    /// Registration info of a region.
    pub fn mr_info(&self, lkey: u32) -> Option<MrInfo> {
        self.mrs.info(lkey)
    }

    /// The memory a region is a view of.
    pub fn mr_memory(&self, lkey: u32) -> Option<Arc<dyn RegionMemory>> {
        self.mrs.memory(lkey).cloned()
    }

    /// A copy of a region's bytes (for tests and tools; applications keep a handle to
    /// their memory instead).
    pub fn mr_bytes(&self, lkey: u32) -> Option<Vec<u8>> {
        let mem = self.mrs.memory(lkey)?;
        let mut out = vec![0; mem.len()];
        mem.read_at(0, &mut out).then_some(out)
    }

    /// Copies `data` into a region at byte `offset` (for tests and tools).
    pub fn mr_write(&self, lkey: u32, offset: usize, data: &[u8]) -> Result<()> {
        let mem = self.mrs.memory(lkey).ok_or(Error::InvalidKey(lkey))?;
        if mem.write_at(offset, data) {
            Ok(())
        } else {
            Err(Error::OutOfBounds {
                offset: offset as u64,
                len: data.len() as u64,
            })
        }
    }

    /// Creates a completion queue of `depth` entries.
    pub fn create_cq(&mut self, depth: usize) -> Result<CqId> {
        if depth == 0 || depth > MAX_CQE {
            return Err(Error::InvalidCq);
        }
        Ok(self.cqs.create(depth))
    }

    /// Destroys a completion queue no QP uses.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        if !self.cqs.exists(cq) {
            return Err(Error::InvalidCq);
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(Error::CqInUse);
        }
        self.cqs.destroy(cq);
        Ok(())
    }

    /// Whether a QP still uses `cq` (so [`Endpoint::destroy_cq`] would fail).
    pub fn cq_in_use(&self, cq: CqId) -> bool {
        self.qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
    }

    /// ibv_resize_cq: `depth` entries from now on (at least those it holds).
    pub fn resize_cq(&mut self, cq: CqId, depth: usize) -> Result<()> {
        if depth == 0 || depth > MAX_CQE || !self.cqs.resize(cq, depth) {
            return Err(Error::InvalidCq);
        }
        Ok(())
    }

    /// Moves up to `max` completions of `cq` into `out`; returns how many.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        self.cqs.poll(cq, out, max)
    }

    /// Completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs.len(cq)
    }

    /// ibv_req_notify_cq: one event (see [`Endpoint::take_cq_events`]) at the next
    /// completion added to `cq`, or with `solicited_only` the next one of a message sent
    /// with the solicited-event bit, or an error.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<()> {
        if self.cqs.arm(cq, solicited_only) {
            Ok(())
        } else {
            Err(Error::InvalidCq)
        }
    }

    /// Moves the asynchronous events raised since the last call into `out`, oldest first
    /// (what `ibv_get_async_event` reports).
    pub fn take_async_events(&mut self, out: &mut Vec<AsyncEvent>) {
        out.append(&mut self.events);
        let mut overflowed = Vec::new();
        self.cqs.take_errors(&mut overflowed);
        out.extend(overflowed.into_iter().map(AsyncEvent::CqErr));
    }

    /// Whether asynchronous events wait in [`Endpoint::take_async_events`].
    pub fn has_async_events(&self) -> bool {
        !self.events.is_empty() || self.cqs.has_errors()
    }

    /// Whether requested CQ notifications fired and wait in [`Endpoint::take_cq_events`].
    pub fn has_cq_events(&self) -> bool {
        self.cqs.has_events()
    }

    /// Moves the CQs whose requested notification fired into `out`, oldest first.
    pub fn take_cq_events(&mut self, out: &mut Vec<CqId>) {
        self.cqs.take_events(out);
    }

    /// Creates a QP in RESET; returns its number.
    pub fn create_qp(&mut self, pd: PdId, init: QpInitAttr) -> Result<u32> {
        self.create_qp_numbered(pd, init, None)
    }

    /// Creates the general services QP: a UD QP numbered 1, where management datagrams
    /// (the CM's) arrive and leave. Give it the GSI's Q_Key
    /// ([`ferroce_wire::mad::GSI_QKEY`]) when moving it to INIT. One per endpoint:
    /// [`Error::InvalidAttr`] while it exists, or for another QP type than UD.
    pub fn create_gsi_qp(&mut self, pd: PdId, init: QpInitAttr) -> Result<u32> {
        if init.qp_type != QpType::Ud {
            return Err(Error::InvalidAttr("the GSI QP is a UD QP"));
        }
        if self.qps.contains_key(&ferroce_wire::mad::GSI_QPN) {
            return Err(Error::InvalidAttr("the GSI QP exists already"));
        }
        self.create_qp_numbered(pd, init, Some(ferroce_wire::mad::GSI_QPN))
    }

    fn create_qp_numbered(&mut self, pd: PdId, init: QpInitAttr, qpn: Option<u32>) -> Result<u32> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::InvalidPd);
        }
        if !self.cqs.exists(init.send_cq) || !self.cqs.exists(init.recv_cq) {
            return Err(Error::InvalidCq);
        }
        let c = init.cap;
        if c.max_send_wr > MAX_WR || c.max_recv_wr > MAX_WR {
            return Err(Error::InvalidAttr("max_send_wr/max_recv_wr"));
        }
        if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
            return Err(Error::InvalidAttr("max_send_sge/max_recv_sge"));
        }
        if c.max_inline_data > MAX_INLINE {
            return Err(Error::InvalidAttr("max_inline_data"));
        }
        if let Some(id) = init.srq {
            self.srqs.get(id).ok_or(Error::InvalidSrq)?;
        }
        let qpn = match qpn {
            Some(q) => q,
            None => self.alloc_qpn().ok_or(Error::NoQpn)?,
        };
        let mut qp = Qp::new(
            qpn,
            init.qp_type,
            pd,
            init.send_cq,
            init.recv_cq,
            c,
            init.sq_sig_all,
        );
        if init.qp_type == QpType::Ud {
            qp.attr.path_mtu = self.config.port_mtu;
        }
        if let Some(id) = init.srq {
            qp.srq = Some(id);
            if let Some(s) = self.srqs.get_mut(id) {
                s.users += 1;
            }
        }
        self.sched.touch(&mut qp);
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// A random QP number no live QP has, in `FIRST_QPN..0xff_ffff` or in the blocks
    /// given with [`Endpoint::add_qpn_block`].
    fn alloc_qpn(&mut self) -> Option<u32> {
        self.qpn_space.alloc(&mut self.random, &self.qps, FIRST_QPN)
    }

    /// Confines QP numbers to blocks of [`QPN_BLOCK_SIZE`](crate::QPN_BLOCK_SIZE): the
    /// first call leaves none (`create_qp` fails with [`Error::NoQpn`] until a block is
    /// added), each call adds `block`. For an interface several processes share, where the
    /// layer above claims blocks for this process from the host.
    pub fn add_qpn_block(&mut self, block: u16) {
        match &mut self.qpn_space {
            QpnSpace::Blocks(b) if !b.contains(&block) => b.push(block),
            QpnSpace::Blocks(_) => {}
            s @ QpnSpace::Any => *s = QpnSpace::Blocks(vec![block]),
        }
    }

    /// Confines QP numbers to blocks (see [`Endpoint::add_qpn_block`]) without adding one.
    pub fn restrict_qpns(&mut self) {
        if let QpnSpace::Any = self.qpn_space {
            self.qpn_space = QpnSpace::Blocks(Vec::new());
        }
    }

    /// How many QPs exist.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// Whether a QP with number `qpn` exists (a datagram to it stays inside the endpoint).
    pub fn has_qp(&self, qpn: u32) -> bool {
        self.qps.contains_key(&(qpn & Psn::MASK))
    }

    /// A random 24-bit PSN from the endpoint's source, for a QP's initial SQ_PSN (a
    /// peer that knows it can inject requests the responder executes in sequence).
    pub fn random_psn(&mut self) -> Psn {
        Psn::new(self.random.u32())
    }

    /// Destroys a QP; its outstanding work requests are dropped without completions.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        let mut qp = self.qps.remove(&qpn).ok_or(Error::InvalidQp(qpn))?;
        self.sched.forget(&mut qp);
        // As the kernel's uverbs does when a process destroys an attached QP.
        self.groups.forget(qpn);
        if let Some(s) = qp.srq.and_then(|id| self.srqs.get_mut(id)) {
            s.users -= 1;
        }
        Ok(())
    }

    /// ibv_attach_mcast: UD QP `qpn` receives, from now on, the SENDs to group `gid` (a
    /// multicast IP address as a GID) and the multicast QP.
    pub fn attach_mcast(&mut self, qpn: u32, gid: Ipv6Addr) -> Result<()> {
        let qp = self.qps.get(&qpn).ok_or(Error::InvalidQp(qpn))?;
        if qp.qp_type != QpType::Ud {
            return Err(Error::Unsupported("multicast on a QP other than UD"));
        }
        self.groups.attach(gid, qpn)
    }

    /// ibv_detach_mcast: undoes [`Endpoint::attach_mcast`].
    pub fn detach_mcast(&mut self, qpn: u32, gid: Ipv6Addr) -> Result<()> {
        if !self.qps.contains_key(&qpn) {
            return Err(Error::InvalidQp(qpn));
        }
        self.groups.detach(gid, qpn)
    }

    /// The multicast groups some QP here is attached to: those whose packets the link
    /// must let in.
    pub fn mcast_groups(&self) -> Vec<Ipv6Addr> {
        self.groups.gids()
    }

    /// Whether some QP here is attached to group `gid`.
    pub fn in_mcast_group(&self, gid: Ipv6Addr) -> bool {
        !self.groups.members(gid).is_empty()
    }

    /// ibv_create_srq: a shared receive queue in `pd`.
    pub fn create_srq(&mut self, pd: PdId, attr: SrqAttr) -> Result<SrqId> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::InvalidPd);
        }
        if attr.max_wr == 0 || attr.max_wr > MAX_WR || attr.max_sge == 0 || attr.max_sge > MAX_SGE {
            return Err(Error::InvalidAttr("max_wr/max_sge"));
        }
        Ok(self.srqs.create(pd, attr))
    }

    /// ibv_destroy_srq: fails while a QP still receives from it.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        self.srqs.destroy(srq)
    }

    /// ibv_post_srq_recv.
    /// `now` is taken like every other call that can change transport state.
    pub fn post_srq_recv(&mut self, _now: Instant, srq: SrqId, wr: &RecvWr) -> Result<()> {
        self.srqs.post(srq, wr)
    }

    /// ibv_query_srq: the attributes and the receive WQEs posted now.
    pub fn query_srq(&self, srq: SrqId) -> Result<(SrqAttr, usize)> {
        let s = self.srqs.get(srq).ok_or(Error::InvalidSrq)?;
        Ok((s.attr, s.queue.len()))
    }

    /// ibv_modify_qp: applies the attributes in `mask`, checking the transition table.
    pub fn modify_qp(
        &mut self,
        now: Instant,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<()> {
        self.with_qp(qpn, now, |qp, ctx, cfg| {
            qp.modify(ctx, attr, mask, &cfg.local_gids, cfg.port_mtu)
        })?
    }

    /// ibv_query_qp: the current attributes (state included) and the creation attributes.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpInitAttr)> {
        let qp = self.qps.get(&qpn).ok_or(Error::InvalidQp(qpn))?;
        let mut attr = qp.attr;
        attr.cur_qp_state = attr.qp_state;
        Ok((
            attr,
            QpInitAttr {
                qp_type: qp.qp_type,
                send_cq: qp.send_cq,
                recv_cq: qp.recv_cq,
                cap: qp.cap,
                sq_sig_all: qp.sq_sig_all,
                srq: qp.srq,
            },
        ))
    }

    /// The state of a QP.
    pub fn qp_state(&self, qpn: u32) -> Result<QpState> {
        self.qps
            .get(&qpn)
            .map(Qp::state)
            .ok_or(Error::InvalidQp(qpn))
    }

    /// Send WQEs posted and not completed yet.
    pub fn sq_outstanding(&self, qpn: u32) -> Result<usize> {
        self.qps
            .get(&qpn)
            .map(Qp::sq_outstanding)
            .ok_or(Error::InvalidQp(qpn))
    }

    fn with_qp<T>(
        &mut self,
        qpn: u32,
        now: Instant,
        f: impl FnOnce(&mut Qp, &mut Ctx<'_>, &EndpointConfig) -> T,
    ) -> Result<T> {
        let Endpoint {
            qps,
            mrs,
            srqs,
            cqs,
            counters,
            events,
            config,
            sched,
            ..
        } = self;
        let qp = qps.get_mut(&qpn).ok_or(Error::InvalidQp(qpn))?;
        let mut ctx = Ctx {
            mrs,
            srqs,
            cqs,
            counters,
            events,
            now,
        };
        let out = f(qp, &mut ctx, config);
        sched.touch(qp);
        Ok(out)
    }

    /// ibv_post_send. Inline data is copied now; everything else is read when sent.
    pub fn post_send(&mut self, now: Instant, qpn: u32, wr: &SendWr) -> Result<()> {
        self.with_qp(qpn, now, |qp, ctx, cfg| {
            qp.post_send(ctx, wr, &cfg.local_gids, cfg.port_mtu)
        })?
    }

    /// ibv_post_recv.
    pub fn post_recv(&mut self, now: Instant, qpn: u32, wr: &RecvWr) -> Result<()> {
        self.with_qp(qpn, now, |qp, ctx, _| qp.post_recv(ctx, wr))?
    }

    /// Takes in one RoCE v2 IP datagram (IPv4 or IPv6 header through ICRC). Anything
    /// malformed, corrupted or unauthorized is counted and dropped or NAKed; nothing
    /// here panics or allocates per packet beyond bounded queues.
    pub fn handle_packet(&mut self, now: Instant, ip_packet: &[u8]) {
        let dg = match DatagramView::new_checked(ip_packet) {
            Ok(d) => d,
            Err(e) => {
                // A flipped bit in the IB headers shows up as a parse error; report it as
                // the ICRC error it is when the trailer disagrees.
                if icrc_bad(ip_packet) {
                    self.counters.rx_icrc_err += 1;
                } else {
                    self.counters.rx_malformed += 1;
                }
                tracing::trace!(%e, "malformed datagram");
                return;
            }
        };
        if !ferroce_wire::ipv4::header_checksum_ok(ip_packet) {
            // The ICRC masks the IPv4 checksum (and TTL, TOS), so it does not protect the
            // IP header: a datagram the kernel would drop must not be accepted here.
            self.counters.rx_ip_csum_err += 1;
            tracing::trace!("IPv4 header checksum error");
            return;
        }
        if let Err(e) = dg.verify_icrc() {
            self.counters.rx_icrc_err += 1;
            tracing::trace!(%e, "ICRC error");
            return;
        }
        let ib = dg.ib();
        let repr = match IbRepr::parse(&ib) {
            Ok(r) => r,
            Err(e) => {
                self.counters.rx_malformed += 1;
                tracing::trace!(%e, "malformed IB headers");
                return;
            }
        };
        let bth = repr.bth;
        let dst_gid = dg.dst_gid();
        let multicast = is_multicast_gid(dst_gid);
        if multicast != (bth.dest_qp == MULTICAST_QPN) {
            // A group's packets name the multicast QP, and only they may.
            self.counters.rx_bad_mcast += 1;
            return;
        }
        if !multicast && !self.config.local_gids.contains(&dst_gid) {
            self.counters.rx_unknown_gid += 1;
            return;
        }
        if bth.pkey & 0x7fff != BthRepr::DEFAULT_PKEY & 0x7fff {
            self.counters.rx_bad_pkey += 1;
            return;
        }
        let op = bth.opcode;
        let src_gid = dg.src_gid();
        if op.service() == Service::Cnp {
            self.counters.rx_cnp += 1;
            self.handle_cnp(now, bth.dest_qp, src_gid);
            return;
        }
        let ip_header = dg.ip_header();
        if multicast {
            let rx = Rx {
                bth,
                ext: repr.ext,
                payload: repr.payload,
                src_gid,
                ip_header,
            };
            self.handle_multicast(now, dst_gid, &rx);
            return;
        }
        let Endpoint {
            qps,
            mrs,
            srqs,
            cqs,
            counters,
            events,
            dcqcn,
            sched,
            ..
        } = self;
        let Some(qp) = qps.get_mut(&bth.dest_qp) else {
            counters.rx_unknown_qp += 1;
            return;
        };
        let service_ok = matches!(
            (qp.qp_type, op.service()),
            (QpType::Rc, Service::Rc) | (QpType::Uc, Service::Uc) | (QpType::Ud, Service::Ud)
        );
        if !service_ok {
            counters.rx_bad_opcode += 1;
            return;
        }
        if qp.qp_type != QpType::Ud {
            if qp.state() < QpState::Rtr {
                counters.rx_bad_state += 1;
                return;
            }
            if src_gid != qp.attr.av.dest_gid {
                counters.rx_bad_src += 1;
                return;
            }
        }
        counters.rcvd_pkts += 1;
        if dg.ecn() == ECN_CE {
            // Notification point: tell the sender of the marked packet.
            counters.np_ecn_marked_roce_packets += 1;
            let dest_qp = if qp.qp_type == QpType::Ud {
                repr.ext.deth.map(|d| d.src_qp)
            } else {
                Some(qp.attr.dest_qp_num)
            };
            if let Some(dest_qp) = dest_qp {
                let out = CnpOut {
                    dst: src_gid,
                    src: dst_gid,
                    dest_qp,
                    flow_label: if qp.qp_type == QpType::Ud {
                        0
                    } else {
                        qp.attr.av.flow_label
                    },
                };
                qp.on_ce_marked(dcqcn, now, out);
            }
        }
        let rx = Rx {
            bth,
            ext: repr.ext,
            payload: repr.payload,
            src_gid,
            ip_header,
        };
        let mut ctx = Ctx {
            mrs,
            srqs,
            cqs,
            counters,
            events,
            now,
        };
        if op.info().is_response() {
            qp.handle_response(&mut ctx, &rx);
        } else {
            qp.handle_request(&mut ctx, &rx);
        }
        sched.touch(qp);
    }

    /// A packet to multicast group `gid`: one copy to each attached QP, which checks it as
    /// any UD packet (state, Q_Key, receive queue). Only UD SENDs go to groups.
    fn handle_multicast(&mut self, now: Instant, gid: Ipv6Addr, rx: &Rx<'_>) {
        if rx.bth.opcode.service() != Service::Ud {
            self.counters.rx_bad_opcode += 1;
            return;
        }
        let Endpoint {
            qps,
            mrs,
            srqs,
            cqs,
            counters,
            events,
            sched,
            groups,
            ..
        } = self;
        let members = groups.members(gid);
        if members.is_empty() {
            // Another process's group, or one this device left.
            counters.rx_mcast_no_group += 1;
            return;
        }
        counters.mcast_rcv_packets += 1;
        for qpn in members {
            let Some(qp) = qps.get_mut(qpn) else {
                continue;
            };
            counters.rcvd_pkts += 1;
            let mut ctx = Ctx {
                mrs,
                srqs,
                cqs,
                counters,
                events,
                now,
            };
            qp.handle_request(&mut ctx, rx);
            sched.touch(qp);
        }
    }

    /// Reaction point: a CNP for `qpn` from `src_gid`.
    fn handle_cnp(&mut self, now: Instant, qpn: u32, src_gid: Ipv6Addr) {
        let cfg = &self.dcqcn;
        let qp = match self.qps.get_mut(&qpn) {
            Some(qp)
                if qp.cc_enabled(cfg)
                    && (qp.qp_type == QpType::Ud || qp.attr.av.dest_gid == src_gid) =>
            {
                qp
            }
            _ => {
                self.counters.rp_cnp_ignored += 1;
                return;
            }
        };
        qp.on_cnp(cfg, now);
        self.sched.touch(qp);
        self.counters.rp_cnp_handled += 1;
    }

    /// Writes the next datagram to send into `buf` (which must hold
    /// [`MAX_DATAGRAM_LEN`] bytes), serving QPs round-robin in turns of up to
    /// [`TX_BURST`] datagrams; responder packets of a QP go before its requests.
    ///
    /// Why turns and not one datagram each: the link joins consecutive packets of one
    /// QP into a super-packet, and packets of two busy QPs taken in alternation never
    /// are consecutive. Each then crossed the kernel alone: 64 KiB WRITEs on two QPs ran
    /// at 5.6-6.8 Gb/s against 14.7-15.2 on one (`ferroce perf write-bw -q 2`, veth MTU
    /// 1500). rxe's requester, too, runs one QP's send queue until it stops.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if buf.len() < MAX_DATAGRAM_LEN {
            self.counters.tx_buf_too_small += 1;
            return None;
        }
        let Endpoint {
            qps,
            mrs,
            srqs,
            cqs,
            counters,
            events,
            config,
            dcqcn,
            rr,
            sched,
            ..
        } = self;
        let mut ctx = Ctx {
            mrs,
            srqs,
            cqs,
            counters,
            events,
            now,
        };
        let (gids, split) = (&config.local_gids[..], config.split_writes);
        // The QP whose turn it is first, while its turn lasts.
        if let Some((qpn, n)) = self.burst.filter(|&(_, n)| n < TX_BURST) {
            if let Some(qp) = qps.get_mut(&qpn) {
                match qp.transmit(&mut ctx, gids, split, dcqcn, buf) {
                    Some(m) => {
                        sched.retime(qp);
                        self.burst = Some((qpn, n + 1));
                        return self.finish_datagram(qpn, m, buf);
                    }
                    None => sched.settle(qp),
                }
            }
        }
        // Then the ready QPs in turn, from the round-robin cursor on and around; each
        // that has nothing to send leaves the ready set.
        let start = *rr;
        let (mut from, mut wrapped) = (start, false);
        let mut sent = None;
        loop {
            let qpn = match sched.next_ready(from) {
                Some(q) if !wrapped || q < start => q,
                _ if !wrapped && start > 0 => {
                    (from, wrapped) = (0, true);
                    continue;
                }
                _ => break,
            };
            from = qpn + 1;
            let Some(qp) = qps.get_mut(&qpn) else {
                continue;
            };
            match qp.transmit(&mut ctx, gids, split, dcqcn, buf) {
                Some(m) => {
                    sched.retime(qp);
                    sent = Some((qpn, m));
                    break;
                }
                None => sched.settle(qp),
            }
        }
        let Some((qpn, meta)) = sent else {
            self.burst = None;
            return None;
        };
        *rr = qpn.wrapping_add(1);
        self.burst = Some((qpn, 1));
        self.finish_datagram(qpn, meta, buf)
    }

    /// Adds IP and UDP headers and the ICRC to the IB packet a QP wrote.
    fn finish_datagram(&mut self, qpn: u32, m: TxMeta, buf: &mut [u8]) -> Option<Transmit> {
        let hl = ip_udp_len(&m.dst);
        let ecn = m.ecn.unwrap_or(m.traffic_class) & 3;
        let ip = match (m.dst.to_ipv4_mapped(), m.src.to_ipv4_mapped()) {
            (Some(dst), Some(src)) => {
                self.ip_id = self.ip_id.wrapping_add(1);
                IpRepr::V4 {
                    src,
                    dst,
                    dscp: m.traffic_class >> 2,
                    ecn,
                    ttl: HOP_LIMIT,
                    identification: self.ip_id,
                    dont_fragment: true,
                }
            }
            _ => IpRepr::V6 {
                src: m.src,
                dst: m.dst,
                traffic_class: (m.traffic_class & !3) | ecn,
                flow_label: m.flow_label & 0xf_ffff,
                hop_limit: HOP_LIMIT,
            },
        };
        let d = DatagramRepr {
            ip,
            src_port: m.sport,
            ib: IbRepr {
                bth: BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0, Psn::new(0)),
                ext: ExtRepr::default(),
                payload: &[],
            },
        };
        let total = hl + m.ib_len;
        if d.emit_ip_udp(&mut buf[..hl], m.ib_len).is_err() {
            self.counters.tx_buf_too_small += 1;
            return None;
        }
        let filled = match (m.payload_crc, icrc_fold::active()) {
            (Some(p), Some(fold)) => {
                let p = PayloadCrc {
                    start: hl + p.start,
                    ..p
                };
                let r = icrc_fold::fill_folded(&mut buf[..total], p, fold, &mut self.shift_ops);
                self.counters.tx_icrc_folded += u64::from(r.is_ok());
                r
            }
            _ => icrc::fill(&mut buf[..total]),
        };
        if filled.is_err() {
            self.counters.tx_buf_too_small += 1;
            return None;
        }
        self.counters.sent_pkts += 1;
        self.counters.sent_bytes += total as u64;
        Some(Transmit {
            len: total,
            dst: to_ip(m.dst),
            src: to_ip(m.src),
            ecn,
            qpn,
            dst_qpn: u32::from_be_bytes([0, buf[hl + 5], buf[hl + 6], buf[hl + 7]]),
            silences: m.silences,
        })
    }

    /// Whether [`Endpoint::poll_transmit`] may have a datagram: false only when it would
    /// return `None` without looking at a QP (none is ready; a QP that sends stays ready,
    /// so one holding the turn is among them). A driver skips its whole transmit step on
    /// false: on the receiving end of a WRITE stream, which answers one packet in
    /// hundreds, lending a transmit batch, framing nothing and giving it back took 7% of
    /// the driver's CPU.
    pub fn may_transmit(&self) -> bool {
        self.sched.any_ready()
    }

    /// The earliest instant at which `handle_timeout` has work (retransmit or RNR timer),
    /// or at which a QP held back by its DCQCN pacer may send again (`poll_transmit` has
    /// work then).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sched.earliest()
    }

    /// The schedule of QPs to look at (for tests).
    #[cfg(test)]
    pub(crate) fn schedule(&self) -> &Schedule {
        &self.sched
    }

    /// Runs every timer that expired at `now`. This is the only place timers fire:
    /// `poll_transmit` sends what is ready and nothing else.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Endpoint {
            qps,
            mrs,
            srqs,
            cqs,
            counters,
            events,
            sched,
            ..
        } = self;
        let mut ctx = Ctx {
            mrs,
            srqs,
            cqs,
            counters,
            events,
            now,
        };
        let mut after = None;
        while let Some(due) = sched.due(now, after) {
            after = Some(due);
            if let Some(qp) = qps.get_mut(&due.1) {
                qp.handle_timeout(&mut ctx);
                sched.touch(qp);
            }
        }
    }
}

//! An open device: the driver thread plus what the device reports about itself.

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::sync::Arc;

use ferroce_transport::{Endpoint, EndpointConfig, Mtu};

use crate::driver::{Driver, DriverCounters, Shared};
use crate::link::{Link, MemoryLink, PacketLink};
use crate::net::gid::GidTable;
use crate::net::neigh::{KernelResolver, Resolver, StaticResolver};

use super::{CompletionQueue, Device, Error, ProtectionDomain};

/// What `ferroce devinfo` shows about an open device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Device name (the interface's).
    pub name: String,
    /// Node GUID, derived from the MAC address as rxe does.
    pub node_guid: u64,
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// The interface's MTU.
    pub netdev_mtu: u32,
    /// The active RoCE MTU.
    pub active_mtu: Mtu,
    /// The GID table.
    pub gids: GidTable,
}

/// An open RoCE device. Cheap to clone; every clone shares one driver.
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) driver: Arc<Driver>,
    attr: Arc<DeviceAttr>,
}

/// A handle to an open device that does not keep it open: for sharing one device among
/// several users of a process (the C ABI's `ibv_open_device` called twice).
#[derive(Debug, Clone)]
pub struct WeakContext {
    driver: std::sync::Weak<Driver>,
    attr: Arc<DeviceAttr>,
}

impl WeakContext {
    /// The device, if something still holds it open.
    pub fn upgrade(&self) -> Option<Context> {
        Some(Context {
            driver: self.driver.upgrade()?,
            attr: self.attr.clone(),
        })
    }
}

/// MAC addresses of the in-memory pair's two ends.
const MEM_MAC_A: [u8; 6] = [2, 0, 10, 0, 0, 1];
const MEM_MAC_B: [u8; 6] = [2, 0, 10, 0, 0, 2];

impl Context {
    /// A handle that finds this device again while it is open, without keeping it open.
    pub fn downgrade(&self) -> WeakContext {
        WeakContext {
            driver: Arc::downgrade(&self.driver),
            attr: self.attr.clone(),
        }
    }

    /// Opens the device on interface `name`.
    pub fn open(name: &str) -> Result<Context, Error> {
        Device::by_name(name)?.open()
    }

    pub(crate) fn open_device(dev: &Device) -> Result<Context, Error> {
        let link = PacketLink::open(dev.interface().clone())?;
        let resolver = KernelResolver {
            ifindex: dev.interface().index,
            ifname: dev.interface().name.clone(),
        };
        let attr = DeviceAttr {
            name: dev.name().to_string(),
            node_guid: dev.node_guid(),
            mac: dev.interface().mac,
            netdev_mtu: dev.interface().mtu,
            active_mtu: Mtu::from_bytes(dev.interface().ib_mtu()).unwrap_or(Mtu::Mtu1024),
            gids: dev.gids().clone(),
        };
        Context::with_link(attr, Arc::new(link), Arc::new(resolver))
    }

    /// Two devices joined by an in-memory wire, with GIDs `::ffff:10.0.0.1` and
    /// `::ffff:10.0.0.2` and MTU 4096: for tests and demos without privileges.
    pub fn memory_pair() -> Result<(Context, Context), Error> {
        let (la, lb) = MemoryLink::pair(MEM_MAC_A, MEM_MAC_B)?;
        Context::memory_pair_on(la, lb)
    }

    /// Like [`Context::memory_pair`], on a wire that carries runs of packets as UDP GSO
    /// super-frames (as a veth does), each passed through its sender's hook first (see
    /// [`MemoryLink::gso_pair`]): for tests of the GSO path under loss, duplication and
    /// reordering.
    pub fn memory_gso_pair(
        fault_a: crate::link::SuperFault,
        fault_b: crate::link::SuperFault,
    ) -> Result<(Context, Context), Error> {
        let (la, lb) = MemoryLink::gso_pair(MEM_MAC_A, MEM_MAC_B, fault_a, fault_b)?;
        Context::memory_pair_on(la, lb)
    }

    fn memory_pair_on(la: MemoryLink, lb: MemoryLink) -> Result<(Context, Context), Error> {
        let ip_a: IpAddr = [10, 0, 0, 1].into();
        let ip_b: IpAddr = [10, 0, 0, 2].into();
        let (mac_a, mac_b) = (MEM_MAC_A, MEM_MAC_B);
        let wire = Arc::new(StaticResolver::new([(ip_a, mac_a), (ip_b, mac_b)]));
        let attr = |name: &str, mac: [u8; 6], ip: IpAddr| DeviceAttr {
            name: name.to_string(),
            node_guid: u64::from_be_bytes(crate::net::gid::eui64(mac)),
            mac,
            netdev_mtu: 9000,
            active_mtu: Mtu::Mtu4096,
            gids: GidTable::from_addrs(&[ip]),
        };
        Ok((
            Context::with_link(attr("mem0", mac_a, ip_a), Arc::new(la), wire.clone())?,
            Context::with_link(attr("mem1", mac_b, ip_b), Arc::new(lb), wire)?,
        ))
    }

    /// A device on any [`Link`]: a custom link, or one end of a [`MemoryLink`] whose
    /// other end a test drives by hand; `resolver` finds peers' MAC addresses.
    pub fn with_link(
        attr: DeviceAttr,
        link: Arc<dyn Link>,
        resolver: Arc<dyn Resolver>,
    ) -> Result<Context, Error> {
        let config = EndpointConfig {
            local_gids: attr.gids.entries().iter().map(|e| e.gid).collect(),
            port_mtu: attr.active_mtu,
            split_writes: split_writes(link.joins_frames()),
        };
        crate::driver::icrc_engine::choice();
        let endpoint = Endpoint::with_random(config, super::random::os_random()?);
        let driver = Driver::start(endpoint, link, resolver)?;
        Ok(Context {
            driver: Arc::new(driver),
            attr: Arc::new(attr),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.driver.shared()
    }

    /// The device's attributes.
    pub fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    /// The GID at `index`.
    pub fn gid(&self, index: usize) -> Option<Ipv6Addr> {
        self.attr.gids.get(index).map(|e| e.gid)
    }

    /// The GID at `index`, or the default entry (the interface's IPv4 address) for `None`,
    /// with its index.
    pub fn source_gid(&self, index: Option<usize>) -> Result<(usize, Ipv6Addr), Error> {
        let index = match index {
            Some(i) => i,
            None => self
                .attr
                .gids
                .default_entry()
                .map(|e| e.index)
                .ok_or(Error::NoSuchGid(0))?,
        };
        Ok((index, self.gid(index).ok_or(Error::NoSuchGid(index))?))
    }

    /// Hands the device's asynchronous events (a QP that failed by itself, a CQ that
    /// overflowed) to `sink` while it lives.
    pub fn subscribe_async_events(&self, sink: &Arc<dyn crate::driver::AsyncEventSink>) {
        self.shared().subscribe_async_events(sink);
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, Error> {
        let id = self.shared().endpoint().alloc_pd();
        Ok(ProtectionDomain::new(self.clone(), id))
    }

    /// Creates a completion queue of `depth` entries.
    pub fn create_cq(&self, depth: usize) -> Result<CompletionQueue, Error> {
        let id = self.shared().endpoint().create_cq(depth)?;
        Ok(CompletionQueue::new(self.clone(), id))
    }

    /// Sets the device's DCQCN congestion control parameters, among them whether QPs use
    /// it (off by default; see [`ferroce_transport::DcqcnConfig`] for the parameters,
    /// their mlx5 names and defaults). Set `line_rate` to the link speed.
    pub fn set_dcqcn(&self, config: ferroce_transport::DcqcnConfig) -> Result<(), Error> {
        let shared = self.shared();
        let mut ep = shared.endpoint();
        ep.set_dcqcn(config)?;
        shared.kick(ep);
        Ok(())
    }

    /// The device's DCQCN parameters.
    pub fn dcqcn(&self) -> ferroce_transport::DcqcnConfig {
        self.shared().endpoint().dcqcn().clone()
    }

    /// The DCQCN reaction point state (current and target rate, α, ...) of every QP with
    /// congestion control, by QP number, as it is now.
    pub fn qp_rates(&self) -> Vec<(u32, ferroce_transport::DcqcnState)> {
        let shared = self.shared();
        let now = shared.now();
        let ep = shared.endpoint();
        ep.qp_numbers()
            .into_iter()
            .filter_map(|qpn| ep.qp_rate(qpn, now).map(|s| (qpn, s)))
            .collect()
    }

    /// Busy-polling progress: receives and processes on this thread whatever the link
    /// holds (unless the driver thread is at it), sparing a wake-up of the driver; returns
    /// whether frames came. [`CompletionQueue::poll`] does this by itself when the CQ is
    /// empty; loops that wait on memory instead (as perftest's WRITE latency test does)
    /// call it.
    ///
    /// [`CompletionQueue::poll`]: crate::verbs::CompletionQueue::poll
    pub fn progress(&self) -> bool {
        self.shared().poll_rx()
    }

    /// Whether the port is ACTIVE: its interface is up with carrier. Changes raise
    /// [`AsyncEvent::PortActive`] and [`AsyncEvent::PortErr`] to subscribers.
    ///
    /// [`AsyncEvent::PortActive`]: super::AsyncEvent::PortActive
    /// [`AsyncEvent::PortErr`]: super::AsyncEvent::PortErr
    pub fn port_active(&self) -> bool {
        self.shared().port_active()
    }

    /// Whether the device is dead for good: its interface was deleted or moved to another
    /// network namespace, and [`AsyncEvent::DeviceFatal`] was raised. Close it; a device
    /// opened again on an interface of that name is a new one.
    ///
    /// [`AsyncEvent::DeviceFatal`]: super::AsyncEvent::DeviceFatal
    pub fn device_fatal(&self) -> bool {
        self.shared().device_fatal()
    }

    /// A descriptor that polls readable once the driver signals completions after
    /// [`Context::req_notify`]: for `poll`/`epoll` loops and the C ABI's completion
    /// channels. [`Context::ack_notify`] resets it.
    pub fn completion_fd(&self) -> std::os::fd::RawFd {
        self.shared().completions().fd()
    }

    /// Arms [`Context::completion_fd`]: the next completion signal makes it readable.
    /// Arm, then poll the CQ, then wait on the descriptor: no completion slips between.
    pub fn req_notify(&self) {
        let c = self.shared().completions();
        c.arm_fd(c.generation());
    }

    /// Resets [`Context::completion_fd`] so a poll blocks again.
    pub fn ack_notify(&self) {
        self.shared().completions().drain_fd();
    }

    /// How frames move between this device and its link ("rx=ring tx=sendmmsg", ...).
    pub fn link_io(&self) -> &'static str {
        self.shared().link().io_mode()
    }

    /// The link's choices and why (see [`crate::link::Link::details`]), for `--stats`.
    pub fn link_details(&self) -> Vec<(&'static str, String)> {
        self.shared().link().details()
    }

    /// How frames other processes on this host send reach this one ("ignored" until a QP
    /// talks to this host); `None` for the in-memory wire.
    pub fn link_same_host(&self) -> Option<&'static str> {
        self.shared().link().same_host()
    }

    /// The CRC-32 routine computing ICRCs in this process (`simd` or `table`) and why:
    /// chosen by timing both when the first device opened, or by `FERROCE_ICRC`; then
    /// whether payloads are folded into the ICRC as they are copied, and why.
    pub fn icrc_engine(&self) -> String {
        let c = crate::driver::icrc_engine::choice();
        format!("{} ({}), copy fold {}", c.engine.name(), c.why, c.fold)
    }

    /// Whether RC RDMA WRITEs leave as one WRITE ONLY packet each (see
    /// [`Endpoint::set_split_writes`]).
    pub fn split_writes(&self) -> bool {
        self.shared().endpoint().config().split_writes
    }

    /// How many processes (this one included) and QPs use the interface, when processes
    /// share it (a real interface); `None` for a link this process has alone.
    pub fn link_users(&self) -> Option<crate::link::LinkUsers> {
        self.shared().link_users()
    }

    /// The QP number blocks this process owns on a shared interface (`None`: all of them).
    pub fn qpn_blocks(&self) -> Option<Vec<u16>> {
        self.shared().link().qpn_blocks()
    }

    /// How the device moves frames, as (what, choice): the link's I/O (`link`), its other
    /// choices with their reasons (super-packet layout, the guard), the ICRC engine
    /// (`icrc`). `--stats` and `devinfo -v` print the same list.
    pub fn link_modes(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![("link", self.link_io().to_string())];
        v.extend(self.link_details());
        v.push(("icrc", self.icrc_engine()));
        v
    }

    /// What `--stats` prints, one line each: [`Context::link_modes`], how writes leave,
    /// same-host frames, the interface's users, and the non-zero [`Context::counters`]
    /// (last, as `counters: name=value ...`). The CLI's commands and the C library
    /// (`FERROCE_STATS`, `ferroce exec --stats`) print these lines.
    pub fn stats_report(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .link_modes()
            .into_iter()
            .map(|(what, choice)| format!("{what}: {choice}"))
            .collect();
        if self.split_writes() {
            lines.push("writes: split (each packet a WRITE ONLY of its own)".into());
        }
        if let Some(s) = self.link_same_host() {
            lines.push(format!("same-host frames: {s}"));
        }
        if let Some(u) = self.link_users() {
            let blocks: Vec<String> = self
                .qpn_blocks()
                .unwrap_or_default()
                .iter()
                .map(|b| format!("{b:#06x}"))
                .collect();
            lines.push(format!(
                "interface users: processes={} qps={} (this process: pid={} qpn_blocks={})",
                u.processes,
                u.qps,
                std::process::id(),
                blocks.join(",")
            ));
        }
        let c: Vec<String> = self
            .counters()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        lines.push(format!("counters: {}", c.join(" ")));
        lines
    }

    /// Transport counters (named like rxe's hw_counters) and driver counters.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = self.shared().endpoint().counters().iter().collect();
        let d: DriverCounters = self.shared().driver_counters();
        v.push(("rx_not_roce", d.rx_not_roce));
        v.push(("tx_no_neighbour", d.tx_no_neighbour));
        v.push(("link_send_err", d.send_err));
        v.push(("link_errors", d.link_errors));
        v.push(("loopback_pkts", d.loopback));
        v.push(("link_tx_batches", d.tx_batches));
        v.push(("rx_socket_drops", self.shared().link_rx_drops()));
        v.extend(self.shared().linger_counters());
        v.push(("driver_wakeups", self.shared().driver_wakeups()));
        v.push((
            "driver_wakeups_merged",
            self.shared().driver_wakeups_merged(),
        ));
        v.push(("driver_sleeps", self.shared().driver_sleeps()));
        v.push(("driver_naps", self.shared().driver_naps()));
        v.push(("posts_left_to_driver", self.shared().posts_left_to_driver()));
        v.extend(self.shared().tx_counters());
        v.extend(self.shared().link().counters());
        v
    }

    /// Records every RoCE frame sent and received from now on to a pcap file.
    pub fn start_pcap(&self, path: &Path) -> Result<(), Error> {
        Ok(self.shared().start_pcap(path)?)
    }
}

/// Whether RDMA WRITEs leave as WRITE ONLY packets (see
/// [`Endpoint::set_split_writes`]): where the link joins equal-length frames into
/// super-frames, which they then join across messages; `FERROCE_SPLIT_WRITES=0` or `1`
/// decides instead (`1`: to test a peer with them where the link joins nothing).
fn split_writes(link_joins_frames: bool) -> bool {
    match std::env::var("FERROCE_SPLIT_WRITES").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => link_joins_frames,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::verbs::{wr, Access, QpCap, QpType, RcPath, WcStatus};
    use ferroce_transport::DcqcnConfig;

    /// An RC QP on each side (its one CQ for both queues), connected to the other.
    fn connected_rc(
        (a, pd_a, cq_a): (
            &Context,
            &crate::verbs::ProtectionDomain,
            &crate::verbs::CompletionQueue,
        ),
        (b, pd_b, cq_b): (
            &Context,
            &crate::verbs::ProtectionDomain,
            &crate::verbs::CompletionQueue,
        ),
    ) -> (crate::verbs::QueuePair, crate::verbs::QueuePair) {
        let qp = |pd: &crate::verbs::ProtectionDomain, cq| {
            pd.create_qp(cq, cq, QpType::Rc, QpCap::default()).unwrap()
        };
        let (qp_a, qp_b) = (qp(pd_a, cq_a), qp(pd_b, cq_b));
        qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 0, 0))
            .unwrap();
        qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 0, 0))
            .unwrap();
        (qp_a, qp_b)
    }

    fn counter(ctx: &Context, name: &str) -> u64 {
        ctx.counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |c| c.1)
    }

    /// Two devices on the in-memory wire that joins frames (see
    /// [`Context::memory_gso_pair`]), an RC QP on each, connected. A's region is twice
    /// `data` long and holds it in its first half; B's, `data` long, is open to remote
    /// WRITE and READ. (Fields drop in order: QPs, regions, CQs, PDs, devices.)
    struct GsoRig {
        qp_a: crate::verbs::QueuePair,
        _qp_b: crate::verbs::QueuePair,
        mr_a: crate::verbs::MemoryRegion,
        mr_b: crate::verbs::MemoryRegion,
        cq_a: crate::verbs::CompletionQueue,
        _cq_b: crate::verbs::CompletionQueue,
        _pds: [crate::verbs::ProtectionDomain; 2],
        a: Context,
        b: Context,
    }

    impl GsoRig {
        fn new(
            fault_a: crate::link::SuperFault,
            fault_b: crate::link::SuperFault,
            data: &[u8],
        ) -> GsoRig {
            let (a, b) = Context::memory_gso_pair(fault_a, fault_b).unwrap();
            let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
            let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
            let mr_a = pd_a.reg_mr(2 * data.len(), Access::LOCAL_WRITE).unwrap();
            let mr_b = pd_b
                .reg_mr(
                    data.len(),
                    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
                )
                .unwrap();
            let (qp_a, qp_b) = connected_rc((&a, &pd_a, &cq_a), (&b, &pd_b, &cq_b));
            mr_a.write(0, data).unwrap();
            GsoRig {
                qp_a,
                _qp_b: qp_b,
                mr_a,
                mr_b,
                cq_a,
                _cq_b: cq_b,
                _pds: [pd_a, pd_b],
                a,
                b,
            }
        }
    }

    /// The UDP GSO path end to end on the in-memory wire: WRITEs one way and READ
    /// responses the other cross as super-frames, some lost whole, duplicated, held back
    /// behind the next, or with one segment damaged (its ICRC fails: a packet lost from
    /// the middle of a super-frame). Go-back-N must deliver every byte exactly.
    #[test]
    fn gso_super_frames_survive_loss_duplication_reordering_and_damage() {
        use crate::link::{Fate, SuperFault};
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        let seen = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        // Each block of 12 super-frames holds one of each fault, at places turned by a
        // hash of the block. A fixed pattern would repeat with any retransmission of 12
        // super-frames (a full send window of 512 packets is 12 at MTU 1024), so every
        // go-back-N retry would meet the same fault at its head and none could succeed.
        let spin = |block: u64| ferroce_transport::testing::Rng::new(block).below(12);
        let hook = |end: usize| -> SuperFault {
            let seen = seen.clone();
            Box::new(move |n, f: &mut Vec<u8>| {
                seen[end].fetch_add(1, Relaxed);
                match (n + spin(n / 12)) % 12 {
                    2 => Fate::Drop,
                    4 => Fate::Duplicate,
                    6 => Fate::Hold,
                    9 => {
                        // In the last segment's ICRC: a flip in the middle could land in
                        // a field the ICRC masks (a super-frame of two ACKs is 82 bytes).
                        let at = f.len() - 2;
                        f[at] ^= 0xff;
                        Fate::Deliver
                    }
                    _ => Fate::Deliver,
                }
            })
        };
        let len = 1 << 20;
        let data: Vec<u8> = (0..len).map(|i| (i * 13 + i / 4096) as u8).collect();
        let rig = GsoRig::new(hook(0), hook(1), &data);
        let GsoRig {
            a,
            b,
            cq_a,
            qp_a,
            mr_a,
            mr_b,
            ..
        } = &rig;
        let msg = 64 << 10;
        // Posts one 64 KiB work request per message of the buffer, then waits for each.
        let run = |make: &dyn Fn(usize) -> ferroce_transport::SendWr, what: &str| {
            for k in 0..len / msg {
                qp_a.post_send(&make(k)).unwrap();
            }
            for k in 0..len / msg {
                let wc = cq_a.wait_one(Duration::from_secs(30)).expect(what);
                assert_eq!((wc.wr_id, wc.status), (k as u64, WcStatus::Success));
            }
        };
        let remote = |k: usize| mr_b.addr() + (k * msg) as u64;
        run(
            &|k| wr::rdma_write(k as u64, mr_a.sge(k * msg, msg), remote(k), mr_b.rkey()),
            "write completion",
        );
        assert!(mr_b.to_vec() == data, "written data differs");
        run(
            &|k| {
                wr::rdma_read(
                    k as u64,
                    mr_a.sge(len + k * msg, msg),
                    remote(k),
                    mr_b.rkey(),
                )
            },
            "read completion",
        );
        assert!(mr_a.to_vec()[len..] == data[..], "read data differs");
        // The faults were real, and both directions carried super-frames.
        assert!(
            seen[0].load(Relaxed) >= 12 && seen[1].load(Relaxed) >= 12,
            "{seen:?}"
        );
        // Exactly the damaged segments fail their ICRC: every other segment of every
        // super-frame was rebuilt with the identification and lengths it was sent with.
        let damaged = |end: usize| seen[end].load(Relaxed).div_ceil(12);
        for (ctx, end) in [(b, 0), (a, 1)] {
            let bad = counter(ctx, "rx_icrc_err");
            assert!(
                bad > 0 && bad <= damaged(end),
                "{bad} ICRC errors, {} damaged",
                damaged(end)
            );
        }
        assert!(counter(a, "retransmitted_pkts") > 0);
        assert!(counter(b, "duplicate_request") > 0);
    }

    /// A peer that loses every super-frame whole (one that cannot split them: a packet
    /// socket without a receive ring sized for them, an older ferroce, a stack reading at
    /// most an MTU per frame) still gets every byte: after a silence (an ACK timeout, a
    /// READ asked for again) its sender stops joining toward it for a while
    /// (`gso_peer_pauses`). Before, WRITEs ended in retry-exceeded: each resend was joined
    /// and lost again.
    #[test]
    fn a_peer_that_loses_every_super_frame_gets_single_packets() {
        use crate::link::{Fate, SuperFault};
        let lose = || -> SuperFault { Box::new(|_, _: &mut Vec<u8>| Fate::Drop) };
        let len = 256 << 10;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 1000) as u8).collect();
        let rig = GsoRig::new(lose(), lose(), &data);
        let GsoRig {
            a,
            b,
            cq_a,
            qp_a,
            mr_a,
            mr_b,
            ..
        } = &rig;
        let msg = 64 << 10;
        let wait = |what: &str, n: usize| {
            for k in 0..n {
                let wc = cq_a.wait_one(Duration::from_secs(30)).expect(what);
                assert_eq!(
                    (wc.wr_id, wc.status),
                    (k as u64, WcStatus::Success),
                    "{what}"
                );
            }
        };
        for k in 0..len / msg {
            let w = wr::rdma_write(
                k as u64,
                mr_a.sge(k * msg, msg),
                mr_b.addr() + (k * msg) as u64,
                mr_b.rkey(),
            );
            qp_a.post_send(&w).unwrap();
        }
        wait("write completion", len / msg);
        assert!(mr_b.to_vec() == data, "written data differs");
        // The writer paused; the reader had not sent a super-frame yet.
        assert!(counter(a, "gso_peer_pauses") >= 1);
        assert_eq!(counter(b, "gso_peer_pauses"), 0);
        // READ responses: the responder hears the READ again (a replay) and pauses.
        let r = wr::rdma_read(0, mr_a.sge(len, len), mr_b.addr(), mr_b.rkey());
        qp_a.post_send(&r).unwrap();
        wait("read completion", 1);
        assert!(mr_a.to_vec()[len..] == data[..], "read data differs");
        assert!(counter(b, "gso_peer_pauses") >= 1);
        // Super-frames did leave (and were all lost) before each pause.
        assert!(counter(a, "gso_tx_frames") > 0 && counter(b, "gso_tx_frames") > 0);
    }

    /// On a link that joins frames, 4 KiB WRITEs at MTU 1024 go as equal WRITE ONLY
    /// packets, so a burst of them leaves in super-frames spanning messages. As FIRST,
    /// MIDDLE, MIDDLE, LAST (the FIRST 16 bytes longer) each message was two frames: the
    /// FIRST alone and a super-frame of three, at most 3 packets per frame.
    #[test]
    fn a_burst_of_small_writes_joins_across_messages() {
        let (frames, pkts) = burst_of_writes(4096, 48);
        assert!(
            frames > 0 && pkts >= 16 * frames,
            "{pkts} packets in {frames} super-frames"
        );
    }

    /// A burst of 64 KiB WRITEs at MTU 1024 leaves in super-frames of 61 packets (the
    /// IPv4 length limit) and a remainder per transmit batch. With batches of 64 frames
    /// every 64 packets were cut into 61 and 3, 32 packets per super-frame on average;
    /// batches of 128 make that at least 42.
    #[test]
    fn a_burst_of_large_writes_fills_super_frames() {
        let (frames, pkts) = burst_of_writes(64 << 10, 16);
        assert!(
            frames > 0 && pkts >= 40 * frames,
            "{pkts} packets in {frames} super-frames"
        );
    }

    /// Posts `writes` RDMA WRITEs of `msg` bytes on an RC QP over the in-memory wire that
    /// joins frames, all waiting when the QP starts to send, and checks that they land;
    /// returns the sender's super-frames and the packets they carried.
    fn burst_of_writes(msg: usize, writes: usize) -> (u64, u64) {
        use crate::link::{Fate, SuperFault};
        let deliver = || -> SuperFault { Box::new(|_, _: &mut Vec<u8>| Fate::Deliver) };
        let (a, b) = Context::memory_gso_pair(deliver(), deliver()).unwrap();
        let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
        let mr_a = pd_a.reg_mr(msg * writes, Access::LOCAL_WRITE).unwrap();
        let mr_b = pd_b
            .reg_mr(msg * writes, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let (qp_a, _qp_b) = connected_rc((&a, &pd_a, &cq_a), (&b, &pd_b, &cq_b));
        let data: Vec<u8> = (0..msg * writes)
            .map(|i| (i * 31 + i / 777) as u8)
            .collect();
        mr_a.write(0, &data).unwrap();
        // Posted while the send queue drains (SQD), so that all are waiting when the QP
        // returns to RTS, as behind a full send window.
        let state = |s| {
            let attr = ferroce_transport::QpAttr {
                qp_state: s,
                ..Default::default()
            };
            qp_a.modify(&attr, ferroce_transport::QpAttrMask::STATE)
                .unwrap();
        };
        state(ferroce_transport::QpState::Sqd);
        for k in 0..writes {
            let at = k * msg;
            let w = wr::rdma_write(
                k as u64,
                mr_a.sge(at, msg),
                mr_b.addr() + at as u64,
                mr_b.rkey(),
            );
            qp_a.post_send(&w).unwrap();
        }
        state(ferroce_transport::QpState::Rts);
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while out.len() < writes {
            cq_a.poll(&mut out, 16);
            assert!(
                Instant::now() < deadline,
                "{} of {writes} completed",
                out.len()
            );
        }
        for (k, wc) in out.iter().enumerate() {
            assert_eq!((wc.wr_id, wc.status), (k as u64, WcStatus::Success));
        }
        assert!(mr_b.to_vec() == data, "written data differs");
        (counter(&a, "gso_tx_frames"), counter(&a, "gso_tx_pkts"))
    }

    /// The driver honours the DCQCN pacer: a QP paced at 20 Mb/s cannot move 512 KiB
    /// faster than that (unpaced, the in-memory pair takes a fraction of the time).
    #[test]
    fn dcqcn_paces_qps_through_the_driver() {
        let (a, b) = Context::memory_pair().unwrap();
        assert!(!a.dcqcn().enabled);
        let cfg = DcqcnConfig {
            enabled: true,
            line_rate: 20,
            ..DcqcnConfig::default()
        };
        a.set_dcqcn(cfg.clone()).unwrap();
        assert_eq!(a.dcqcn(), cfg);
        let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
        let len = 512 << 10;
        let mr_a = pd_a.reg_mr(len, Access::LOCAL_WRITE).unwrap();
        let mr_b = pd_b
            .reg_mr(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let (qp_a, _qp_b) = connected_rc((&a, &pd_a, &cq_a), (&b, &pd_b, &cq_b));
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        mr_a.write(0, &data).unwrap();
        let start = Instant::now();
        qp_a.post_send(&wr::rdma_write(
            1,
            mr_a.sge(0, len),
            mr_b.addr(),
            mr_b.rkey(),
        ))
        .unwrap();
        let wc = cq_a.wait_one(Duration::from_secs(20)).expect("completion");
        let took = start.elapsed();
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(mr_b.to_vec(), data);
        // 512 packets of 1024 bytes plus 48 of headers at 20 Mb/s, less the 64 KiB the
        // pacer may send at once: at least 193 ms.
        assert!(took >= Duration::from_millis(193), "{took:?}");
        let sent = a
            .counters()
            .into_iter()
            .find(|(n, _)| *n == "sent_pkts")
            .unwrap()
            .1;
        assert!(sent >= 512);
    }
}

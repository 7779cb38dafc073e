//! The driver: one thread per device that moves frames between a [`Link`] and the sans-IO
//! transport, and runs its timers.
//!
//! API calls lock the shared endpoint, change it, and send what it made ready on their
//! own thread ([`Shared::kick`]); the driver thread receives frames, hands them to the
//! transport, transmits what the transport has to send, and sleeps in poll() until a frame
//! arrives, an API call wakes it, or the next timer is due.
//!
//! [`Shared`] is split by concern, one file each: the link's I/O ([`io`]: frame batches,
//! neighbours, counters), wake-ups ([`wakeups`]: the eventfd, the timerfd, poll mode's
//! bookkeeping), lingering ([`linger`]: polls that wait a little for the peer's next
//! frame), completion signalling ([`completions`]: condvar, async notify, and an
//! eventfd for completion channels and epoll users), and recording ([`recorder`]: pcap).
//! The thread's loop is in [`thread`].
//!
//! # Lock order
//!
//! A thread holding one of these locks takes only locks further down the list:
//!
//! 1. `io.rx` — the receive batch, held from the receive call until the transport has
//!    the frames, so frames reach the transport in link order whoever receives;
//! 2. `endpoint` — the transport;
//! 3. `io.neighbours` — the MAC address table;
//! 4. leaves, never held while taking another lock: `io.tx` (the transmit batches and
//!    their send order; a thread waits there for a batch with the endpoint locked, and
//!    for its turn to send without it: see `tx_pipe`), `io.counters`, `io.loopback`,
//!    `recorder.pcap`,
//!    `completions.generation`, `cq_events.sinks`, `async_events.sinks` (and the queue
//!    each sink locks inside it).
//!
//! [`Link`]: crate::link::Link

mod async_events;
mod completions;
mod cq_events;
mod endpoint_lock;
mod fatal;
pub(crate) mod icrc_engine;
mod io;
mod linger;
mod recorder;
mod thread;
mod tx_pipe;
mod wakeups;

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ferroce_transport::{Endpoint, Instant, PdId, QpInitAttr};

use crate::link::Link;
use crate::net::gid::addr_of;
use crate::net::neigh::{ResolveError, Resolver};

pub use async_events::AsyncEventSink;
use async_events::AsyncEvents;
pub use completions::CompletionSignal;
pub use cq_events::CqEventSink;
use cq_events::CqEvents;
pub use endpoint_lock::{EndpointGuard, PollMark};
pub use io::DriverCounters;
use io::LinkIo;
use recorder::Recorder;
use wakeups::Wakeups;

/// The link's slots must hold the largest datagram the transport emits, behind an
/// Ethernet header (the link layer states its size without importing the transport).
const _: () = assert!(crate::link::MIN_SLOT >= 14 + ferroce_transport::MAX_DATAGRAM_LEN);
/// The link's socket filter and the transport cut QP numbers into the same blocks.
const _: () = assert!(crate::link::bpf::QPN_BLOCK_BITS == ferroce_transport::QPN_BLOCK_BITS);

/// Frames received per lock of the endpoint, so API calls are not starved.
const RX_BATCH: usize = 64;
/// Frames transmitted per lock of the endpoint (fewer when they are large: see
/// [`crate::link::BATCH_BYTES`]).
const TX_BATCH: usize = 128;

/// State shared by the API and the driver thread, grouped by concern (see the module
/// docs for the lock order).
pub struct Shared {
    /// The transport.
    endpoint: Mutex<Endpoint>,
    /// Locks of the endpoint released so far (see [`endpoint_lock`]).
    endpoint_changes: std::sync::atomic::AtomicU64,
    /// Frames in and out, neighbours, driver counters.
    io: LinkIo,
    /// What wakes the driver thread, and poll mode's bookkeeping.
    wake: Wakeups,
    /// Whether polls that found a completion should keep taking in the link.
    linger: linger::Linger,
    /// Tells waiting API threads that completions may have arrived.
    completions: CompletionSignal,
    /// The optional pcap of every frame.
    recorder: Recorder,
    /// The completion channel of each CQ that has one.
    cq_events: CqEvents,
    /// Who hears asynchronous events.
    async_events: AsyncEvents,
    /// Transport time zero.
    epoch: std::time::Instant,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// The transport's notion of now.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The link.
    pub fn link(&self) -> &Arc<dyn Link> {
        &self.io.link
    }

    /// Records the MAC address for `ip`, resolving it if unknown.
    pub fn resolve(&self, ip: IpAddr, timeout: Duration) -> Result<[u8; 6], ResolveError> {
        self.io.resolve(ip, timeout)
    }

    /// Frames the link dropped on receive (see [`Link::rx_drops`]).
    pub fn link_rx_drops(&self) -> u64 {
        self.io.link.rx_drops()
    }

    /// Driver counters.
    pub fn driver_counters(&self) -> DriverCounters {
        self.io.counters()
    }

    /// Times a thread waited for a free transmit batch and for an earlier batch's send
    /// (`tx_batch_waits`, `tx_turn_waits`).
    pub fn tx_counters(&self) -> [(&'static str, u64); 2] {
        self.io.tx_counters()
    }

    /// Starts recording every frame sent and received to `path`.
    pub fn start_pcap(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.recorder.start(path)
    }

    /// Completion signalling (condvar, async, eventfd).
    pub fn completions(&self) -> &CompletionSignal {
        &self.completions
    }

    /// Blocks until the driver signals completions or `timeout` passes; returns at once if
    /// the generation moved past `seen`.
    pub fn wait_completions(&self, seen: u64, timeout: Duration) -> u64 {
        self.stop_polling();
        self.completions.wait(seen, timeout)
    }

    /// The current completion generation.
    pub fn completion_generation(&self) -> u64 {
        self.completions.generation()
    }

    /// Creates a QP. On an interface other processes share, QP numbers come from this
    /// process's blocks; when those are full, one more block is claimed from the host
    /// (which also lets its frames through the link's filter).
    pub fn create_qp(&self, pd: PdId, init: QpInitAttr) -> ferroce_transport::Result<u32> {
        use ferroce_transport::Error;
        if init.qp_type == ferroce_transport::QpType::Ud {
            // A UD QP takes datagrams from anyone, so also from processes on this host,
            // whether or not it ever sends to one.
            self.io.link.serve_same_host();
        }
        let mut ep = self.endpoint();
        loop {
            match ep.create_qp(pd, init) {
                Err(Error::NoQpn) => match self.io.link.claim_qpn_block() {
                    Ok(Some(b)) => ep.add_qpn_block(b),
                    Ok(None) => return Err(Error::OutOfResources),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim a QP number block");
                        return Err(Error::OutOfResources);
                    }
                },
                r => {
                    self.io.link.report_qps(ep.qp_count());
                    return r;
                }
            }
        }
    }

    /// Creates the GSI QP (QP1, see [`Endpoint::create_gsi_qp`]) and lets QP1's frames in
    /// from the link.
    pub fn create_gsi_qp(&self, pd: PdId, init: QpInitAttr) -> ferroce_transport::Result<u32> {
        if let Err(e) = self.io.link.serve_gsi() {
            tracing::warn!(error = %e, "cannot take in frames for QP1");
            return Err(ferroce_transport::Error::OutOfResources);
        }
        // The CM's peers may be other processes on this host.
        self.io.link.serve_same_host();
        let mut ep = self.endpoint();
        // Hold a block of QP numbers from the start, so that the host's census counts this
        // process among the interface's users (connection managers use it to know whether
        // others may listen) before it has any QP of its own.
        if self.io.link.qpn_blocks().is_some_and(|b| b.is_empty()) {
            if let Ok(Some(b)) = self.io.link.claim_qpn_block() {
                ep.add_qpn_block(b);
            }
        }
        let r = ep.create_gsi_qp(pd, init);
        self.io.link.report_qps(ep.qp_count());
        r
    }

    /// Destroys a QP (see [`Endpoint::destroy_qp`]) and tells the host the new count.
    pub fn destroy_qp(&self, ep: &mut Endpoint, qpn: u32) -> ferroce_transport::Result<()> {
        let r = ep.destroy_qp(qpn);
        self.io.link.report_qps(ep.qp_count());
        // It may have been the last QP of a multicast group.
        if let Err(e) = self.sync_multicast(ep) {
            tracing::debug!(error = %e, "cannot update the link's multicast addresses");
        }
        r
    }

    /// ibv_attach_mcast (`attach`) or ibv_detach_mcast of UD QP `qpn` and group `gid`
    /// (see [`Endpoint::attach_mcast`]); the link then takes in the frames of exactly the
    /// groups some QP here is in.
    pub fn set_mcast(
        &self,
        qpn: u32,
        gid: std::net::Ipv6Addr,
        attach: bool,
    ) -> ferroce_transport::Result<()> {
        let mut ep = self.endpoint();
        if attach {
            ep.attach_mcast(qpn, gid)?;
        } else {
            ep.detach_mcast(qpn, gid)?;
        }
        if let Err(e) = self.sync_multicast(&ep) {
            tracing::warn!(error = %e, %gid, "cannot take in the multicast group's frames");
            if attach {
                let _ = ep.detach_mcast(qpn, gid);
                let _ = self.sync_multicast(&ep);
                return Err(ferroce_transport::Error::OutOfResources);
            }
        }
        Ok(())
    }

    /// Tells the link the endpoint's multicast groups.
    fn sync_multicast(&self, ep: &Endpoint) -> std::io::Result<()> {
        let groups = ep.mcast_groups().into_iter().map(addr_of).collect();
        self.io.link.set_multicast(&groups)
    }

    /// How many processes and QPs use the interface, when other processes may share it.
    pub fn link_users(&self) -> Option<crate::link::LinkUsers> {
        self.io.link.users()
    }
}

/// The running driver; dropping it stops the thread.
#[derive(Debug)]
pub struct Driver {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    /// Starts the driver thread for `endpoint` on `link`, finding MAC addresses with
    /// `resolver`.
    pub fn start(
        mut endpoint: Endpoint,
        link: Arc<dyn Link>,
        resolver: Arc<dyn Resolver>,
    ) -> std::io::Result<Driver> {
        if let Some(blocks) = link.qpn_blocks() {
            endpoint.restrict_qpns();
            for b in blocks {
                endpoint.add_qpn_block(b);
            }
        }
        let local = endpoint
            .config()
            .local_gids
            .iter()
            .map(|g| crate::net::gid::addr_of(*g))
            .collect();
        let port_up = link.is_up();
        let shared = Arc::new(Shared {
            endpoint: Mutex::new(endpoint),
            endpoint_changes: Default::default(),
            io: LinkIo::new(link, resolver, RX_BATCH, TX_BATCH, local),
            wake: Wakeups::new()?,
            linger: Default::default(),
            completions: CompletionSignal::new()?,
            recorder: Recorder::default(),
            cq_events: CqEvents::default(),
            async_events: AsyncEvents::new(port_up),
            epoch: std::time::Instant::now(),
        });
        let s = shared.clone();
        let thread = crate::link::threads::spawn("ferroce-driver", move || {
            fatal::abort_on_panic("the driver thread", || thread::run(&s))
        })?;
        Ok(Driver {
            shared,
            thread: Some(thread),
        })
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Answers poll mode left for later (a last ACK) still go out.
        self.shared.send_pending(&mut self.shared.endpoint());
        self.shared.wake.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.recorder.finish();
    }
}

//! The driver: one thread per device that moves frames between a [`Port`] and the sans-IO
//! transport, and runs its timers.
//!
//! API calls lock the shared endpoint, change it, and wake the thread; the thread receives
//! frames, hands them to the transport, transmits what the transport has to send, and
//! sleeps in poll() until a frame arrives, an API call wakes it, or the next timer is due.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use ferroce_transport::{Endpoint, Instant};
use ferroce_wire::{split_link, EthernetRepr};

use crate::capture::PcapSink;
use crate::net::eventfd::{poll_readable, EventFd};
use crate::net::timerfd::{monotonic_nanos, TimerFd};
use crate::port::Port;

/// Largest frame handled: a 4096-byte IB MTU plus all headers, with room for jumbo frames.
pub const MAX_FRAME: usize = 9216;
/// Frames received per lock of the endpoint, so API calls are not starved.
const RX_BATCH: usize = 64;
/// How long the driver keeps looking for work after the last activity before it sleeps.
const BUSY_POLL: Duration = Duration::from_micros(50);
/// Frames transmitted per lock of the endpoint.
const TX_BATCH: usize = 64;

/// Counters of the driver itself (frames the transport never saw).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DriverCounters {
    /// Received frames that are not IPv4/IPv6 over Ethernet (the transport counts the rest).
    pub rx_not_roce: u64,
    /// Transmissions dropped because the destination's MAC address is unknown.
    pub tx_no_neighbour: u64,
    /// Send errors from the link.
    pub send_err: u64,
}

/// State shared by the API and the driver thread.
pub struct Shared {
    endpoint: Mutex<Endpoint>,
    /// The MAC address for each destination IP, filled when QPs and AHs are given a path.
    neighbours: Mutex<HashMap<IpAddr, [u8; 6]>>,
    port: Arc<dyn Port>,
    waker: EventFd,
    /// Signalled after the driver may have produced completions.
    completions: Condvar,
    completions_lock: Mutex<u64>,
    /// For async waiters (tokio users).
    pub(crate) notify: tokio::sync::Notify,
    stop: AtomicBool,
    epoch: std::time::Instant,
    pcap: Mutex<Option<PcapSink<io::BufWriter<std::fs::File>>>>,
    /// Whether `pcap` holds a sink: spares the lock on every frame when not recording.
    recording: AtomicBool,
    counters: Mutex<DriverCounters>,
    /// Frame buffer for transmission; only used with the endpoint locked.
    tx_buf: Mutex<Vec<u8>>,
    /// The transport's next timer, as armed on `timer` (transport nanoseconds; 0 while the
    /// driver runs, `u64::MAX` when it waits for I/O only). Changed with the endpoint locked.
    planned_wakeup: AtomicU64,
    /// Wakes the driver when the transport's next timer is due.
    timer: TimerFd,
    /// CLOCK_MONOTONIC at `epoch`: converts transport time to the timer's clock.
    epoch_monotonic: u64,
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

    /// Locks the endpoint for an API call.
    pub fn endpoint(&self) -> MutexGuard<'_, Endpoint> {
        self.endpoint.lock().expect("endpoint lock poisoned")
    }

    /// Wakes the driver thread.
    pub fn wake(&self) {
        self.waker.wake();
    }

    /// After an API call changed the endpoint (posted work, modified a QP): sends what it
    /// made ready right here, on the caller's thread, sparing a wake-up of the driver. A
    /// timer that now falls before the sleeping driver's is moved on its timerfd, which
    /// wakes the driver only when it is due; leftover work wakes it at once.
    pub fn kick(&self, mut ep: MutexGuard<'_, Endpoint>) {
        let sent = self.transmit(&mut ep, TX_BATCH);
        let timer = ep.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        if timer < self.planned_wakeup.load(Ordering::SeqCst) {
            self.arm(timer);
        }
        drop(ep);
        if sent == TX_BATCH {
            self.waker.wake();
        }
    }

    /// Arms the driver's timer for transport time `nanos` (`u64::MAX` disarms); called
    /// with the endpoint locked.
    fn arm(&self, nanos: u64) {
        self.planned_wakeup.store(nanos, Ordering::SeqCst);
        self.timer
            .set((nanos != u64::MAX).then(|| self.epoch_monotonic + nanos));
    }

    /// Hands up to `max` datagrams from the transport to the link; returns how many.
    fn transmit(&self, ep: &mut Endpoint, max: usize) -> usize {
        let mut tx = self.tx_buf.lock().expect("tx buffer lock");
        let mut sent = 0;
        while sent < max {
            let Some(t) = ep.poll_transmit(self.now(), &mut tx[14..]) else {
                break;
            };
            sent += 1;
            let mac = self
                .neighbours
                .lock()
                .expect("neighbour lock")
                .get(&t.dst)
                .copied();
            let Some(dst) = mac else {
                tracing::debug!(dst = %t.dst, "no MAC address for destination; dropped");
                self.counters.lock().expect("counter lock").tx_no_neighbour += 1;
                continue;
            };
            let eth = EthernetRepr {
                src: self.port.mac(),
                dst,
                vlan: None,
            };
            if eth.emit(&mut tx[..14], t.dst.is_ipv6()).is_err() {
                continue;
            }
            let frame = &tx[..14 + t.len];
            self.record(frame);
            match self.port.send(frame) {
                Ok(true) => {}
                // A full or failing link is a loss on the wire: go-back-N recovers.
                Ok(false) | Err(_) => self.counters.lock().expect("counter lock").send_err += 1,
            }
        }
        sent
    }

    /// The link.
    pub fn port(&self) -> &Arc<dyn Port> {
        &self.port
    }

    /// Records the MAC address for `ip`, resolving it through the port if unknown.
    pub fn resolve(
        &self,
        ip: IpAddr,
        timeout: Duration,
    ) -> Result<[u8; 6], crate::net::neigh::ResolveError> {
        if let Some(mac) = self.neighbours.lock().expect("neighbour lock").get(&ip) {
            return Ok(*mac);
        }
        let mac = self.port.resolve(ip, timeout)?;
        self.neighbours
            .lock()
            .expect("neighbour lock")
            .insert(ip, mac);
        Ok(mac)
    }

    /// Driver counters.
    /// Frames the link dropped on receive (see [`Port::rx_drops`]).
    pub fn port_rx_drops(&self) -> u64 {
        self.port.rx_drops()
    }

    pub fn driver_counters(&self) -> DriverCounters {
        *self.counters.lock().expect("counter lock")
    }

    /// Starts recording every frame sent and received to `path`.
    pub fn start_pcap(&self, path: &Path) -> io::Result<()> {
        *self.pcap.lock().expect("pcap lock") = Some(PcapSink::create(path)?);
        self.recording.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Blocks until the driver signals completions or `timeout` passes; returns at once if
    /// the generation moved past `seen`.
    pub fn wait_completions(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.completions_lock.lock().expect("completion lock");
        let (g, _) = self
            .completions
            .wait_timeout_while(g, timeout, |gen| *gen == seen)
            .expect("completion lock");
        *g
    }

    /// The current completion generation.
    pub fn completion_generation(&self) -> u64 {
        *self.completions_lock.lock().expect("completion lock")
    }

    fn signal_completions(&self) {
        *self.completions_lock.lock().expect("completion lock") += 1;
        self.completions.notify_all();
        self.notify.notify_waiters();
    }

    fn record(&self, frame: &[u8]) {
        if !self.recording.load(Ordering::Relaxed) {
            return;
        }
        let mut p = self.pcap.lock().expect("pcap lock");
        if let Some(sink) = p.as_mut() {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            if let Err(e) = sink.write(ts, frame) {
                tracing::warn!(error = %e, "pcap write failed; recording stopped");
                *p = None;
                self.recording.store(false, Ordering::SeqCst);
            }
        }
    }
}

/// The running driver; dropping it stops the thread.
#[derive(Debug)]
pub struct Driver {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    /// Starts the driver thread for `endpoint` on `port`.
    pub fn start(endpoint: Endpoint, port: Arc<dyn Port>) -> io::Result<Driver> {
        let shared = Arc::new(Shared {
            endpoint: Mutex::new(endpoint),
            neighbours: Mutex::new(HashMap::new()),
            port,
            waker: EventFd::new()?,
            completions: Condvar::new(),
            completions_lock: Mutex::new(0),
            notify: tokio::sync::Notify::new(),
            stop: AtomicBool::new(false),
            epoch: std::time::Instant::now(),
            pcap: Mutex::new(None),
            recording: AtomicBool::new(false),
            counters: Mutex::new(DriverCounters::default()),
            tx_buf: Mutex::new(vec![0u8; MAX_FRAME]),
            planned_wakeup: AtomicU64::new(0),
            timer: TimerFd::new()?,
            epoch_monotonic: monotonic_nanos(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ferroce-driver".into())
            .spawn(move || run(&s))?;
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
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(sink) = self.shared.pcap.lock().expect("pcap lock").take() {
            let _ = io::Write::flush(&mut sink.into_inner());
        }
    }
}

fn run(s: &Shared) {
    let span = tracing::info_span!("driver");
    let _enter = span.enter();
    let mut rx = vec![0u8; MAX_FRAME];
    let fds = [s.port.fd(), s.waker.as_raw_fd(), s.timer.as_raw_fd()];
    let mut last_activity = std::time::Instant::now();
    while !s.stop.load(Ordering::SeqCst) {
        let mut progressed = false;

        // Receive: each batch is handed to the transport under one lock, and whatever it
        // answers (ACKs, read responses) goes out before the next batch.
        loop {
            let mut ep = s.endpoint();
            let mut n = 0;
            while n < RX_BATCH {
                match s.port.recv(&mut rx) {
                    Ok(Some(len)) => {
                        n += 1;
                        let frame = &rx[..len];
                        s.record(frame);
                        // The transport parses, verifies and counts the datagram itself.
                        match split_link(frame) {
                            Ok((_, _, ip)) => ep.handle_packet(s.now(), ip),
                            Err(e) => {
                                tracing::trace!(error = %e, "dropped a non-RoCE frame");
                                s.counters.lock().expect("counter lock").rx_not_roce += 1;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "receive failed");
                        break;
                    }
                }
            }
            if n > 0 {
                progressed = true;
                s.transmit(&mut ep, TX_BATCH);
            }
            if n < RX_BATCH {
                break;
            }
        }

        // Timers and transmit.
        let mut ep = s.endpoint();
        let now = s.now();
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
            progressed = true;
        }
        let sent = s.transmit(&mut ep, TX_BATCH);
        progressed |= sent > 0;
        if progressed {
            // Cheap when nobody waits; precise tracking would cost more than it saves.
            s.signal_completions();
            last_activity = std::time::Instant::now();
            continue;
        }
        if last_activity.elapsed() < BUSY_POLL {
            // Traffic tends to come in bursts and answers follow within microseconds:
            // look again before paying for a sleep and a wake-up.
            drop(ep);
            std::thread::yield_now();
            continue;
        }
        s.arm(ep.poll_timeout().map_or(u64::MAX, |t| t.as_nanos()));
        drop(ep);
        if let Err(e) = poll_readable(&fds, None) {
            tracing::error!(error = %e, "poll failed; driver stops");
            return;
        }
        s.waker.drain();
        s.timer.drain();
        let _held = s.endpoint();
        s.planned_wakeup.store(0, Ordering::SeqCst);
    }
}

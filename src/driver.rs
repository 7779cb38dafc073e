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
use crate::port::{FrameBatch, Port, TxOutcome};

/// Largest frame handled: a 4096-byte IB MTU plus all headers, with room for jumbo frames.
pub const MAX_FRAME: usize = 9216;
/// Frames received per lock of the endpoint, so API calls are not starved.
const RX_BATCH: usize = 64;
/// How long the driver keeps looking for work after the last activity before it sleeps.
const BUSY_POLL: Duration = Duration::from_micros(50);
/// Frames transmitted per lock of the endpoint.
const TX_BATCH: usize = 64;
/// How often the driver looks at the link while API threads poll it (in case they stop
/// without saying so).
const APP_POLL_RECHECK: Duration = Duration::from_millis(1);

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
    /// Frames being transmitted; only used with the endpoint locked.
    tx: Mutex<FrameBatch>,
    /// Frames being received. Held from the receive call until the transport has them, so
    /// that frames reach the transport in link order whichever thread receives (the
    /// driver, or an API thread polling an empty CQ).
    rx: Mutex<FrameBatch>,
    /// Counts API threads' polls of the link (odd/even does not matter; 0 after
    /// `stop_polling`). While it moves, the driver leaves the link to them and sleeps.
    /// (A counter, not a time: reading the clock on every poll costs a system call where
    /// the clock source is not the TSC, as in the VM.)
    app_polls: AtomicU64,
    /// Poll mode received frames whose answers have not been sent yet (set and cleared
    /// with the endpoint locked).
    answers_pending: AtomicBool,
    /// The driver sleeps until the link, a wake-up or its timer wakes it (not a nap of at
    /// most APP_POLL_RECHECK). Changed with the endpoint locked.
    driver_asleep: AtomicBool,
    /// Threads blocked in `wait_completions`: without any, signalling costs no syscall.
    completion_waiters: std::sync::atomic::AtomicUsize,
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
        self.arm_if_sooner(&ep);
        drop(ep);
        if sent.filled == TX_BATCH || sent.ring_full {
            self.waker.wake();
        }
    }

    /// Moves the sleeping driver's timer forward when the transport's next one is sooner.
    fn arm_if_sooner(&self, ep: &Endpoint) {
        let timer = ep.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        if timer < self.planned_wakeup.load(Ordering::SeqCst) {
            self.arm(timer);
        }
    }

    /// Receives one batch of frames and hands it to the transport under one lock, then
    /// transmits what it answered (ACKs, READ responses). Returns how many frames came.
    /// With `defer_answers` (poll mode), what the transport answers is left for the next
    /// transmission instead (see [`Shared::poll_rx`]).
    fn receive(&self, rx: &mut FrameBatch, defer_answers: bool) -> usize {
        // The endpoint is locked at the first frame, and held for the whole batch.
        let mut ep: Option<MutexGuard<'_, Endpoint>> = None;
        let mut now = None;
        let got = self.port.recv_each(rx, &mut |frame| {
            let ep = ep.get_or_insert_with(|| self.endpoint());
            let now = *now.get_or_insert_with(|| self.now());
            if frame.is_empty() {
                return; // our own frame, looped back by an old kernel
            }
            self.record(frame);
            // The transport parses, verifies and counts the datagram itself.
            match split_link(frame) {
                Ok((_, _, ip)) => ep.handle_packet(now, ip),
                Err(e) => {
                    tracing::trace!(error = %e, "dropped a non-RoCE frame");
                    self.counters.lock().expect("counter lock").rx_not_roce += 1;
                }
            }
        });
        let n = got.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "receive failed");
            0
        });
        if let Some(mut ep) = ep {
            // Only while the driver naps: it looks at the link again within a millisecond
            // and sends them then if the caller has not. A driver asleep until the link
            // wakes it might sleep on: the caller took the frames that would have.
            if defer_answers && !self.driver_asleep.load(Ordering::Relaxed) {
                self.answers_pending.store(true, Ordering::Relaxed);
            } else {
                self.transmit(&mut ep, TX_BATCH);
            }
            self.arm_if_sooner(&ep);
        }
        n
    }

    /// Poll mode for API threads: a thread that found its CQ empty receives whatever the
    /// link holds itself, sparing the driver thread's wake-up (unless the driver is
    /// receiving right now). Returns whether frames came.
    ///
    /// The transport's answers to those frames (ACKs, READ responses) are not sent before
    /// returning: the caller sees its data or completion first, and the answers leave with
    /// its next post (one system call for both), or at its next poll that finds nothing.
    /// A ping-pong's critical path thus carries one system call per message, not two.
    pub fn poll_rx(&self) -> bool {
        self.app_polls.fetch_add(1, Ordering::Relaxed);
        let Ok(mut rx) = self.rx.try_lock() else {
            return false;
        };
        let n = self.receive(&mut rx, true);
        drop(rx);
        if n > 0 {
            self.signal_completions();
        } else if self.answers_pending.load(Ordering::Relaxed) {
            let mut ep = self.endpoint();
            self.transmit(&mut ep, TX_BATCH);
            self.arm_if_sooner(&ep);
        }
        n > 0
    }

    /// Sends what poll mode left for later (see [`Shared::poll_rx`]) before a change that
    /// would lose it: a QP being destroyed takes its unsent ACKs with it.
    pub fn send_pending(&self, ep: &mut Endpoint) {
        if self.answers_pending.load(Ordering::Relaxed) {
            self.transmit(ep, TX_BATCH);
        }
    }

    /// Arms the driver's timer for transport time `nanos` (`u64::MAX` disarms); called
    /// with the endpoint locked.
    fn arm(&self, nanos: u64) {
        self.planned_wakeup.store(nanos, Ordering::SeqCst);
        self.timer
            .set((nanos != u64::MAX).then(|| self.epoch_monotonic + nanos));
    }

    /// Hands up to `max` datagrams from the transport to the link, built in place in the
    /// link's buffers and sent in batches.
    fn transmit(&self, ep: &mut Endpoint, max: usize) -> TxOutcome {
        // Whatever poll mode left for later goes now.
        self.answers_pending.store(false, Ordering::Relaxed);
        let mut tx = self.tx.lock().expect("tx lock");
        let now = self.now();
        let src = self.port.mac();
        let neighbours = self.neighbours.lock().expect("neighbour lock");
        let mut no_neighbour = 0;
        let out = self.port.send_each(&mut tx, max, &mut |slot| {
            let t = ep.poll_transmit(now, &mut slot[14..])?;
            let Some(&dst) = neighbours.get(&t.dst) else {
                tracing::debug!(dst = %t.dst, "no MAC address for destination; dropped");
                no_neighbour += 1;
                return Some(0);
            };
            let eth = EthernetRepr {
                src,
                dst,
                vlan: None,
            };
            if eth.emit(&mut slot[..14], t.dst.is_ipv6()).is_err() {
                return Some(0);
            }
            self.record(&slot[..14 + t.len]);
            Some(14 + t.len)
        });
        drop(neighbours);
        if out.refused > 0 || no_neighbour > 0 {
            let mut c = self.counters.lock().expect("counter lock");
            // A full or failing link is a loss on the wire: go-back-N recovers.
            c.send_err += out.refused as u64;
            c.tx_no_neighbour += no_neighbour;
        }
        out
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
        self.stop_polling();
        let g = self.completions_lock.lock().expect("completion lock");
        self.completion_waiters.fetch_add(1, Ordering::SeqCst);
        let (g, _) = self
            .completions
            .wait_timeout_while(g, timeout, |gen| *gen == seen)
            .expect("completion lock");
        self.completion_waiters.fetch_sub(1, Ordering::SeqCst);
        *g
    }

    /// An API thread that polled the link goes to sleep: the driver watches the link
    /// again from now on.
    pub fn stop_polling(&self) {
        if self.app_polls.swap(0, Ordering::Relaxed) != 0 {
            self.waker.wake();
        }
    }

    /// The current completion generation.
    pub fn completion_generation(&self) -> u64 {
        *self.completions_lock.lock().expect("completion lock")
    }

    fn signal_completions(&self) {
        *self.completions_lock.lock().expect("completion lock") += 1;
        // Waiters register under the lock before they sleep, so none is missed.
        if self.completion_waiters.load(Ordering::SeqCst) > 0 {
            self.completions.notify_all();
        }
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
            tx: Mutex::new(FrameBatch::new(TX_BATCH)),
            rx: Mutex::new(FrameBatch::new(RX_BATCH)),
            app_polls: AtomicU64::new(0),
            answers_pending: AtomicBool::new(false),
            driver_asleep: AtomicBool::new(false),
            completion_waiters: std::sync::atomic::AtomicUsize::new(0),
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
        // Answers poll mode left for later (a last ACK) still go out.
        self.shared.send_pending(&mut self.shared.endpoint());
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
    let fds = [s.port.fd(), s.waker.as_raw_fd(), s.timer.as_raw_fd()];
    let mut last_activity = std::time::Instant::now();
    let mut seen_polls = 0;
    while !s.stop.load(Ordering::SeqCst) {
        let mut progressed = false;

        // Receive: each batch is handed to the transport under one lock, and whatever it
        // answers (ACKs, read responses) goes out before the next batch.
        {
            let mut rx = s.rx.lock().expect("rx lock");
            loop {
                let n = s.receive(&mut rx, false);
                progressed |= n > 0;
                if n < RX_BATCH {
                    break;
                }
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
        // (A full transmit ring empties by itself; the busy-poll below looks again soon.)
        progressed |= sent.filled > 0;
        if progressed {
            // Cheap when nobody waits; precise tracking would cost more than it saves.
            s.signal_completions();
            last_activity = std::time::Instant::now();
            continue;
        }
        // API threads polling the link (poll mode) since the last look?
        let polls = s.app_polls.load(Ordering::Relaxed);
        let app = polls != 0 && polls != seen_polls;
        seen_polls = polls;
        if !app && last_activity.elapsed() < BUSY_POLL {
            // Traffic tends to come in bursts and answers follow within microseconds:
            // look again before paying for a sleep and a wake-up.
            drop(ep);
            std::thread::yield_now();
            continue;
        }
        let next = ep.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        let nap_end = now
            .as_nanos()
            .saturating_add(APP_POLL_RECHECK.as_nanos() as u64);
        if app && next >= nap_end {
            // The nap ends before the timer is due: no need to arm it (a system call).
            s.planned_wakeup.store(nap_end, Ordering::SeqCst);
        } else {
            s.arm(next);
        }
        // Nothing is pending: `transmit` above ran under this same lock.
        s.driver_asleep.store(!app, Ordering::Relaxed);
        drop(ep);
        // While API threads poll the link, the driver sleeps on its timer and wake-ups only
        // (a frame would otherwise wake two threads), looking again now and then.
        let ready = if app {
            poll_readable(&fds[1..], Some(APP_POLL_RECHECK)).map(|r| r << 1)
        } else {
            poll_readable(&fds, None)
        };
        let ready = match ready {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "poll failed; driver stops");
                return;
            }
        };
        if ready & 0b010 != 0 {
            s.waker.drain();
        }
        if ready & 0b100 != 0 {
            s.timer.drain();
        }
        let _held = s.endpoint();
        s.planned_wakeup.store(0, Ordering::SeqCst);
        s.driver_asleep.store(false, Ordering::Relaxed);
    }
}

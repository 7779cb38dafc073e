//! Frames between the link and the transport: receiving batches into the endpoint,
//! transmitting what it has to send with Ethernet headers from the neighbour table, and
//! poll mode (API threads receiving for themselves).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferroce_transport::{Endpoint, MULTICAST_QPN};
use ferroce_wire::{split_link, EthernetRepr};

use crate::link::{fill_batch, multicast_mac, send_or_lose, FrameBatch, Link, TxOutcome};
use crate::net::gid::gid_of;
use crate::net::neigh::{ResolveError, Resolver};

use super::tx_pipe::TxPipe;
use super::{EndpointGuard, Shared, TX_BATCH};

/// Counters of the driver itself (frames the transport never saw).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DriverCounters {
    /// Received frames that are not IPv4/IPv6 over Ethernet (the transport counts the rest).
    pub rx_not_roce: u64,
    /// Transmissions dropped because the destination's MAC address is unknown.
    pub tx_no_neighbour: u64,
    /// Send errors from the link.
    pub send_err: u64,
    /// Datagrams to one of the device's own QPs, handed straight back to the transport
    /// (two QPs of one device talking to each other; those for another process's QPs on
    /// this host go out on the link).
    pub loopback: u64,
    /// Transmissions that handed frames to the link: one system call each (`sendmmsg`, a
    /// ring's `send`). Against messages, what a message costs the kernel; a ping-pong
    /// that sends each ACK with its reply makes one per message.
    pub tx_batches: u64,
    /// Errors the kernel left pending on the link's socket, read and cleared (ENETDOWN:
    /// its interface went down or away).
    pub link_errors: u64,
}

/// Loopback rounds one transmission runs (each delivers what the previous one sent, and
/// sends the answers); what is left waits for the driver thread, so one call stays bounded.
const LOOPBACK_ROUNDS: usize = 8;

/// The link and what moving frames over it needs.
pub(super) struct LinkIo {
    pub(super) link: Arc<dyn Link>,
    resolver: Arc<dyn Resolver>,
    /// The MAC address for each destination IP, filled when QPs and AHs are given a path.
    neighbours: Mutex<HashMap<IpAddr, [u8; 6]>>,
    /// Frames being transmitted: built with the endpoint locked, sent without.
    tx: TxPipe,
    /// Frames being received. Held from the receive call until the transport has them, so
    /// that frames reach the transport in link order whichever thread receives (the
    /// driver, or an API thread polling an empty CQ).
    pub(super) rx: Mutex<FrameBatch>,
    /// A leaf lock.
    counters: Mutex<DriverCounters>,
    /// [`DriverCounters::tx_batches`], counted without a lock on every transmission.
    tx_batches: AtomicU64,
    /// The device's own addresses: datagrams to them for this process's own QPs never
    /// reach the wire.
    local: HashSet<IpAddr>,
    /// Datagrams to the device itself, waiting for the transport (a leaf lock, taken with
    /// the endpoint locked).
    loopback: Mutex<VecDeque<Vec<u8>>>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data: a panic elsewhere cannot leave it half-changed in a way that matters.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LinkIo {
    pub(super) fn new(
        link: Arc<dyn Link>,
        resolver: Arc<dyn Resolver>,
        rx_batch: usize,
        tx_batch: usize,
        local: HashSet<IpAddr>,
    ) -> Self {
        LinkIo {
            local,
            loopback: Mutex::new(VecDeque::new()),
            link,
            resolver,
            neighbours: Mutex::new(HashMap::new()),
            tx: TxPipe::new(tx_batch),
            rx: Mutex::new(FrameBatch::new(rx_batch)),
            counters: Mutex::new(DriverCounters::default()),
            tx_batches: AtomicU64::new(0),
        }
    }

    /// Records the MAC address for `ip`, resolving it if unknown.
    pub(super) fn resolve(&self, ip: IpAddr, timeout: Duration) -> Result<[u8; 6], ResolveError> {
        if self.local.contains(&ip) {
            // Looped back inside the driver, or sent to the interface's own address for
            // another process here, which then takes in what this one sends (and this one
            // its answers): no neighbour needed.
            self.link.serve_same_host();
            return Ok(self.link.mac());
        }
        if let Some(mac) = multicast_mac(ip) {
            // A group's address: no neighbour to ask.
            return Ok(mac);
        }
        if let Some(mac) = relock(&self.neighbours).get(&ip) {
            return Ok(*mac);
        }
        let mac = self.resolver.resolve(ip, timeout)?;
        relock(&self.neighbours).insert(ip, mac);
        Ok(mac)
    }

    /// Reads and clears an error pending on the link's socket, counting it (see
    /// [`Link::take_error`]).
    pub(super) fn clear_link_error(&self) {
        if let Some(e) = self.link.take_error() {
            tracing::info!(error = %e, "the link's socket reported an error; cleared");
            relock(&self.counters).link_errors += 1;
        }
    }

    pub(super) fn counters(&self) -> DriverCounters {
        DriverCounters {
            tx_batches: self.tx_batches.load(Ordering::Relaxed),
            ..*relock(&self.counters)
        }
    }

    /// How often building and sending transmit batches overlapped (see `tx_pipe`).
    pub(super) fn tx_counters(&self) -> [(&'static str, u64); 2] {
        self.tx.counters()
    }
}

impl Shared {
    /// Receives one batch of frames and hands it to the transport under one lock, then
    /// transmits what it answered (ACKs, READ responses). Returns how many frames came.
    /// With `defer_answers` (poll mode), what the transport answers is left for the next
    /// transmission instead (see [`Shared::poll_rx`]).
    pub(super) fn receive(&self, rx: &mut FrameBatch, defer_answers: bool) -> usize {
        // The endpoint is locked at the first frame, and held for the whole batch.
        let mut ep: Option<super::EndpointGuard<'_>> = None;
        let mut now = None;
        // A panic in the link or the transport aborts the process, whichever thread
        // receives (see `fatal`): never a device that silently stopped.
        let got = super::fatal::abort_on_panic("packet handling", || {
            self.io.link.recv_each(rx, &mut |frame| {
                let ep = ep.get_or_insert_with(|| self.endpoint());
                let now = *now.get_or_insert_with(|| self.now());
                if frame.is_empty() {
                    return; // nothing to parse
                }
                self.recorder.record(frame);
                // The transport parses, verifies and counts the datagram itself.
                match split_link(frame) {
                    Ok((_, _, ip)) => ep.handle_packet(now, ip),
                    Err(e) => {
                        tracing::trace!(error = %e, "dropped a non-RoCE frame");
                        relock(&self.io.counters).rx_not_roce += 1;
                    }
                }
            })
        });
        let n = got.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "receive failed");
            0
        });
        if let Some(mut ep) = ep {
            self.linger.set_requests(ep.counters().rdma_recvs);
            self.deliver_cq_events(&mut ep);
            // Only while the driver naps: it looks at the link again within a millisecond
            // and sends them then if the caller has not. A driver asleep until the link
            // wakes it might sleep on: the caller took the frames that would have.
            if defer_answers && !self.wake.driver_asleep() {
                self.wake.answers_pending.store(true, Ordering::Relaxed);
            } else if defer_answers {
                self.transmit_handing_on(&mut ep);
            } else {
                self.transmit(&mut ep, TX_BATCH);
            }
            self.wake.arm_if_sooner(&ep);
        }
        n
    }

    /// Poll mode for API threads: a thread that found its CQ empty receives whatever the
    /// link holds itself, sparing the driver thread's wake-up (unless the driver is
    /// receiving right now). Returns whether frames came.
    ///
    /// The transport's answers to those frames (ACKs, READ responses) are not sent before
    /// returning: the caller sees its data or completion first, and the answers leave with
    /// its next post (one system call for both), or at a later poll. A ping-pong's
    /// critical path thus carries one system call per message, not two.
    ///
    /// At most the poll after next, whatever it finds: a program that keeps polling a
    /// stream of WRITEs (UCX's put_bw server) may find frames at every poll, and its ACKs,
    /// held until a poll found nothing or the driver's nap ended, stalled the sender's
    /// window (UCX put_bw 64 KiB fell from 1.4 GB/s to 0.5-0.7 once posted receives
    /// stopped sending them by the way). Not the very next poll: the flag is set by any
    /// frame taken in, an ACK with nothing to answer too, and a ping-pong over SENDs often
    /// takes in the peer's ACK and its message in two polls; sending at the second sent
    /// the message's own ACK alone, ahead of the reply.
    pub fn poll_rx(&self) -> bool {
        self.wake.polled();
        self.poll_rx_answering(true)
    }

    /// A poll of a CQ that found completions without looking at the link: the thread
    /// polls all the same (poll mode), so the driver naps instead of racing it for frames,
    /// and the thread's polls may learn to linger for the peer's answer (see `linger`).
    ///
    /// Why: a UC send completes as it leaves, so a ping-pong over UC WRITEs (`ib_write_lat
    /// -c UC`) finds its completion at the first poll and never looked at the link. The
    /// driver then slept on the link alone, and each WRITE from the peer waited for it to
    /// get a CPU from the programs spinning on their memory: 2 ms typical on a 2-CPU host
    /// (perftest's figure, half a round trip), against 7 µs over RC (README, "Latency: UC
    /// WRITEs").
    pub fn polled_completions(&self) {
        self.wake.polled();
    }

    /// [`Shared::poll_rx`] for a thread lingering before it returns completions (see
    /// `linger`): the answers wait for what the program does next, however many polls the
    /// linger takes. Sending them at its next poll sent a SEND's ACK alone, ahead of the
    /// program's reply, on every message of a ping-pong over SENDs.
    pub(super) fn poll_rx_lingering(&self) -> bool {
        self.wake.polled();
        self.poll_rx_answering(false)
    }

    /// [`Shared::poll_rx`] for a thread that waits on a completion channel when its polls
    /// find nothing: it takes in what the link holds, but is not in poll mode, and a
    /// driver napping because of earlier polls is woken to watch the link again.
    ///
    /// Why: such a thread sleeps on the channel next, and only the driver can fire the
    /// event it sleeps for. Counted as polling, its polls sent the driver into naps in
    /// which it did not look at the link, and each message waited out a nap before the
    /// event came: rsockets (rdma-core's `rstream`, 1 MiB transfers between two
    /// namespaces) left 31% of both CPUs idle (README, "rsockets").
    pub fn poll_rx_before_waiting(&self) -> bool {
        self.stop_polling();
        self.poll_rx_answering(true)
    }

    fn poll_rx_answering(&self, answer: bool) -> bool {
        let Ok(mut rx) = self.io.rx.try_lock() else {
            return false;
        };
        // Answers left by the poll before the last one: they go now.
        let held = self.wake.answers_pending.load(Ordering::Relaxed)
            && self.wake.answers_age.fetch_add(1, Ordering::Relaxed) >= 1;
        let n = self.receive(&mut rx, true);
        drop(rx);
        if n > 0 {
            self.completions.signal();
        }
        // Deferred posts go at the poster's next poll; answers at the second, or at one
        // that found nothing.
        let posts = self.wake.deferred_bytes.load(Ordering::Relaxed) != 0;
        let answers = held || (n == 0 && self.wake.answers_pending.load(Ordering::Relaxed));
        // While the driver spins on a stream of large posts, it sends them: see
        // [`Shared::kick_post`].
        if (posts || (answer && answers)) && !self.tx_left_to_driver() {
            let mut ep = self.endpoint();
            self.transmit_handing_on(&mut ep);
            self.wake.arm_if_sooner(&ep);
        }
        n > 0
    }

    /// Sends what poll mode left for later (see [`Shared::poll_rx`]) before a change that
    /// would lose it: a QP being destroyed takes its unsent ACKs with it.
    pub fn send_pending(&self, ep: &mut EndpointGuard<'_>) {
        if self.tx_pending() {
            self.transmit_handing_on(ep);
        }
    }

    /// One transmit batch from a thread other than the driver (a poller, an API call);
    /// what a full batch may have left behind is the driver's, which is woken for it.
    ///
    /// Why: the rest of a READ's responses (1 MiB at MTU 1024 is 1,024 of them, eight
    /// batches) has no frame or timer of its own to send it. A poller that took the
    /// request in while the driver slept sent one batch, and the other seven waited
    /// for whatever woke the driver next: the driver, woken by the same request, had
    /// found the link already empty and slept on. A UCX rendezvous of 1 MiB
    /// (`ucx_perftest -t tag_bw`, whose receiver READs the message) stalled 1.07 s in
    /// about half the runs, until an unrelated timer fired.
    fn transmit_handing_on(&self, ep: &mut EndpointGuard<'_>) {
        let sent = self.transmit(ep, TX_BATCH);
        if sent.filled >= TX_BATCH || sent.ring_full {
            self.wake.wake();
        }
    }

    /// Hands up to `max` datagrams from the transport to the link, built in place in the
    /// link's buffers and sent in batches. Datagrams to the device's own addresses go
    /// back to the transport instead, for a bounded number of rounds.
    pub(super) fn transmit(&self, ep: &mut EndpointGuard<'_>, max: usize) -> TxOutcome {
        self.transmit_at(ep, max, self.now())
    }

    /// [`Shared::transmit`] at a time the caller read already (the driver's loop reads the
    /// clock once a round: on a virtual machine without a fast clock, every read is a
    /// system call and an emulated timer read).
    pub(super) fn transmit_at(
        &self,
        ep: &mut EndpointGuard<'_>,
        max: usize,
        now: ferroce_transport::Instant,
    ) -> TxOutcome {
        let out = self.transmit_once(ep, max, now);
        // A UC or UD send completes as its last packet leaves: its notification goes now,
        // not with the next frame or timer to come in (after a program's last message
        // none does, and it waited in `ibv_get_cq_event` for good).
        self.deliver_cq_events(ep);
        if self.io.local.is_empty() {
            return out;
        }
        for _ in 0..LOOPBACK_ROUNDS {
            let frames: Vec<Vec<u8>> = relock(&self.io.loopback).drain(..).collect();
            if frames.is_empty() {
                return out;
            }
            let now = self.now();
            relock(&self.io.counters).loopback += frames.len() as u64;
            for f in &frames {
                ep.handle_packet(now, f);
            }
            self.transmit_once(ep, max, now);
            // What the looped-back frames and this round's sends completed.
            self.deliver_cq_events(ep);
        }
        if !relock(&self.io.loopback).is_empty() {
            self.wake.wake();
        }
        out
    }

    /// Datagrams looped back and not yet handed to the transport.
    pub(super) fn loopback_pending(&self) -> bool {
        !relock(&self.io.loopback).is_empty()
    }

    fn transmit_once(
        &self,
        ep: &mut EndpointGuard<'_>,
        max: usize,
        now: ferroce_transport::Instant,
    ) -> TxOutcome {
        // Whatever poll mode left for later goes now.
        self.wake.answers_pending.store(false, Ordering::Relaxed);
        self.wake.answers_age.store(0, Ordering::Relaxed);
        self.wake.deferred_bytes.store(0, Ordering::Relaxed);
        if !ep.may_transmit() {
            return TxOutcome::default();
        }
        let link = &*self.io.link;
        let mut framer = Framer {
            shared: self,
            now,
            src: link.mac(),
            last: None,
            no_neighbour: 0,
        };
        let mut batch = self.io.tx.lend();
        let mut out = TxOutcome::default();
        // Congestion control keeps the locked send. With the unlocked one the DCQCN test
        // (tests/dcqcn) once failed its queue check in CI (161 KB mean against 19-75 KB
        // before), and in one VM boot the queue was longer with it (mean of 4 runs 86 KB
        // against 45 KB locked; in another boot 64 against 77): not settled, so the paced
        // path stays as proven. A paced QP's rate, not the CPU, bounds its throughput, so
        // it loses little by it.
        if link.sends_from_ring() || ep.dcqcn().enabled {
            // Built and sent in one step, under the lock (in the ring itself, if the link
            // builds there).
            let neighbours = relock(&self.io.neighbours);
            out = link.send_each(&mut batch, max, &mut |slot| {
                framer.frame(ep, &neighbours, slot)
            });
            if out.queued + out.refused > 0 {
                self.io.tx_batches.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            // Built under the lock, sent without it (see `tx_pipe`).
            loop {
                let neighbours = relock(&self.io.neighbours);
                batch.set_packed(link.packs_frames());
                let (filled, more) = fill_batch(&mut batch, max - out.filled, &mut |slot| {
                    framer.frame(ep, &neighbours, slot)
                });
                drop(neighbours);
                out.filled += filled;
                if batch.is_empty() {
                    // Nothing more, or all `max` skipped.
                    break;
                }
                let done = !more || out.filled >= max;
                let turn = self.io.tx.turn();
                let n = batch.len();
                self.io.tx_batches.fetch_add(1, Ordering::Relaxed);
                let sent = ep.unlocked(|| {
                    turn.wait();
                    let sent = send_or_lose(link, &mut batch);
                    // The next turn may go, and the batch is back, before this thread
                    // waits for the endpoint again (see `tx_pipe`).
                    drop(turn);
                    drop(batch);
                    sent
                });
                out.add_sent(n, sent);
                if done {
                    break;
                }
                batch = self.io.tx.lend();
            }
        }
        if out.refused > 0 || framer.no_neighbour > 0 {
            let mut c = relock(&self.io.counters);
            // A full or failing link is a loss on the wire: go-back-N recovers.
            c.send_err += out.refused as u64;
            c.tx_no_neighbour += framer.no_neighbour;
        }
        out
    }
}

/// Puts what the transport has to send into link slots, behind Ethernet headers.
struct Framer<'a> {
    shared: &'a Shared,
    now: ferroce_transport::Instant,
    src: [u8; 6],
    /// The last destination looked up: a batch is mostly one flow, and two hash lookups
    /// per packet showed in profiles (1.5% of all CPU at 64 KiB, MTU 1500).
    last: Option<(IpAddr, bool, Option<[u8; 6]>)>,
    no_neighbour: u64,
}

impl Framer<'_> {
    /// One datagram of the transport's in `slot` (see [`Link::send_each`]'s `fill`).
    fn frame(
        &mut self,
        ep: &mut Endpoint,
        neighbours: &HashMap<IpAddr, [u8; 6]>,
        slot: &mut [u8],
    ) -> Option<usize> {
        let io = &self.shared.io;
        let t = ep.poll_transmit(self.now, &mut slot[14..])?;
        if t.silences > 0 {
            // Its peer lost what went before without a word: perhaps super-frames it
            // cannot split (the link may send to it packet by packet for a while).
            io.link.resending_to(t.dst, t.silences);
        }
        // To this host: frames for this process's own QPs go straight back to the
        // transport; those for another process's go to the interface's own MAC
        // address, where its socket sees them go out (or, on lo, come back in).
        let (local, dst) = match self.last {
            Some((ip, local, dst)) if ip == t.dst => (local, dst),
            _ => {
                let local = io.local.contains(&t.dst);
                let dst = if local {
                    Some(self.src)
                } else {
                    multicast_mac(t.dst).or_else(|| neighbours.get(&t.dst).copied())
                };
                self.last = Some((t.dst, local, dst));
                (local, dst)
            }
        };
        let Some(dst) = dst else {
            tracing::debug!(dst = %t.dst, "no MAC address for destination; dropped");
            self.no_neighbour += 1;
            return Some(0);
        };
        let eth = EthernetRepr {
            src: self.src,
            dst,
            vlan: None,
        };
        if eth.emit(&mut slot[..14], t.dst.is_ipv6()).is_err() {
            return Some(0);
        }
        self.shared.recorder.record(&slot[..14 + t.len]);
        if local && t.dst_qpn == ferroce_wire::mad::GSI_QPN {
            // Every process here with a connection manager has a QP1: this one's takes the
            // MAD too, the others' see it on the link. A packet socket never sees what it
            // sent itself, except on lo, where the frame comes back in to everyone.
            if !io.link.sees_own_frames() {
                relock(&io.loopback).push_back(slot[14..14 + t.len].to_vec());
            }
            return Some(14 + t.len);
        }
        if t.dst_qpn == MULTICAST_QPN {
            // To a group: it goes out, and this process's own QPs in the group take a copy
            // too, as from a NIC, which loops a group's packets back to its port. Other
            // processes here see it go out (on lo, come back in, to this one as well).
            if !io.link.sees_own_frames() && ep.in_mcast_group(gid_of(t.dst)) {
                relock(&io.loopback).push_back(slot[14..14 + t.len].to_vec());
            }
            return Some(14 + t.len);
        }
        if local && ep.has_qp(t.dst_qpn) {
            relock(&io.loopback).push_back(slot[14..14 + t.len].to_vec());
            return Some(0);
        }
        Some(14 + t.len)
    }
}

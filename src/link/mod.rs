//! The link layer: where Ethernet frames go in and out, and nothing else.
//!
//! The bottom of the library: it imports nothing from the layers above (driver, verbs), so
//! a link can be tested, swapped or batched differently without touching the transport.
//! [`Link`] is the frame-I/O interface; [`FrameBatch`] and [`TxOutcome`] move several frames
//! per system call. Two links implement it: [`PacketLink`] (AF_PACKET on a real interface,
//! with an optional PACKET_MMAP ring, the RoCE socket filter and the UDP 4791 guard) and
//! [`MemoryLink`] (an in-memory wire for tests and demos). Finding a neighbour's MAC
//! address is not a link's job: see [`crate::net::neigh`].
//!
//! All `unsafe` of the library's I/O lives in this module's system-call wrappers
//! (`af_packet`, `packet_ring`, `udp_guard`, `eventfd`, `timerfd`, `interface`, `sched`),
//! and the CPU-specific kernel that copies payloads into frames (`copy_fold`),
//! each block with its `// SAFETY:` argument.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;

pub mod af_packet;
mod batch;
pub mod bpf;
pub mod copy_fold;
pub mod eventfd;
pub mod gso;
pub mod gso_layout;
pub mod interface;
pub mod join_pause;
mod memory;
mod multicast;
pub mod oper_state;
mod packet;
pub mod packet_ring;
pub mod sched;
pub mod share;
pub mod threads;
pub mod timerfd;
pub mod udp_guard;
pub mod udp_segment;
pub mod vnet;

pub use batch::{FrameBatch, Packed, Piece, TxOutcome, BATCH_BYTES, MAX_FRAME, MIN_SLOT, TAIL};
pub use memory::{Fate, MemoryLink, SuperFault};
pub use multicast::multicast_mac;
pub use packet::{LinkError, PacketLink};
pub use share::LinkUsers;

/// A link that carries Ethernet frames.
pub trait Link: Send + Sync + 'static {
    /// The link's own MAC address.
    fn mac(&self) -> [u8; 6];
    /// Sends one frame; `Ok(false)` when the link is momentarily full.
    fn send(&self, frame: &[u8]) -> io::Result<bool>;
    /// Receives one frame into `buf`, `Ok(None)` when none is queued.
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// A descriptor that polls readable when frames are queued.
    fn fd(&self) -> RawFd;
    /// Frames the link dropped on receive since the link opened: a full socket buffer, or
    /// a frame longer than the ring frame or buffer it came into (a super-frame at a link
    /// that cannot take it whole), dropped rather than handed on cut short.
    fn rx_drops(&self) -> u64 {
        0
    }
    /// The QP number blocks this process owns on a shared interface, or `None` when the
    /// link is this process's alone and every QP number is usable (see [`share`]).
    fn qpn_blocks(&self) -> Option<Vec<u16>> {
        None
    }
    /// Claims one more QP number block and lets its frames in; `Ok(None)` when none is
    /// left. Only for links whose [`Link::qpn_blocks`] is `Some`.
    fn claim_qpn_block(&self) -> io::Result<Option<u16>> {
        Ok(None)
    }
    /// Tells other processes how many QPs this one has on the link.
    fn report_qps(&self, _qps: usize) {}
    /// This process runs a general services QP (QP1, where the CM's MADs arrive): a
    /// shared interface's filter lets frames for QP1 in too. Every process with one gets
    /// them; each takes only what names its own connections.
    fn serve_gsi(&self) -> io::Result<()> {
        Ok(())
    }
    /// Whether the frames this link sends come back to it (lo does that; a packet socket
    /// on any other interface never sees its own).
    fn sees_own_frames(&self) -> bool {
        false
    }
    /// A QP of this process talks to an address of this host: from now on the link also
    /// takes in the frames other processes here send to the interface's own address. Until
    /// then a shared interface does not show a process the others' outgoing frames at all.
    fn serve_same_host(&self) {}
    /// How frames from other processes on this host reach this one, for `--stats`; `None`
    /// when the link is not a host's interface (the in-memory wire).
    fn same_host(&self) -> Option<&'static str> {
        None
    }
    /// Reads and clears an error the kernel left pending on the link's socket (ENETDOWN
    /// when its interface went down or was deleted), which makes the socket poll ready
    /// with nothing to receive until it is read. The driver asks when a poll said the link
    /// was ready and no frame came.
    fn take_error(&self) -> Option<io::Error> {
        None
    }
    /// A descriptor that polls readable when the link may have gone up or down, or `None`
    /// for a link whose state never changes (the in-memory one).
    fn state_fd(&self) -> Option<RawFd> {
        None
    }
    /// Whether the link carries frames (administratively up, with carrier), after reading
    /// what changed since the last call.
    fn is_up(&self) -> bool {
        true
    }
    /// Whether the interface left for good (deleted, or moved to another network
    /// namespace), as of the last [`Link::is_up`]: the link can never carry frames again.
    fn is_gone(&self) -> bool {
        false
    }
    /// The multicast groups (IP addresses) whose frames to the multicast QP the link takes
    /// in from now on, those other processes here send to them included: the groups some
    /// QP of this process is in. An empty set leaves the multicast QP's frames out again.
    fn set_multicast(&self, _groups: &BTreeSet<IpAddr>) -> io::Result<()> {
        Ok(())
    }
    /// Choices the link made at open or since, each with why, for `--stats`: `(what,
    /// choice)` pairs such as `("guard", "takes super-frames whole (GRO off on eth0)")`.
    fn details(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// The transport resends to `dst` what its peer lost without a word, after `silences`
    /// in a row (ACK timeouts, a READ asked for again): a link that joins frames into
    /// super-frames may stop joining toward `dst` for a while, in case the peer cannot
    /// split them ([`join_pause`]).
    fn resending_to(&self, _dst: IpAddr, _silences: u8) {}
    /// How many processes and QPs use the link's interface, if it is shared.
    fn users(&self) -> Option<LinkUsers> {
        None
    }
    /// The link's own counters (super-frames sent and split, ...), for `--stats`.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Whether consecutive equal-length frames of one flow may leave joined into one
    /// super-frame (UDP GSO): then it pays to send frames of equal length.
    fn joins_frames(&self) -> bool {
        false
    }
    /// Whether [`Link::send_batch`] takes packed batches ([`FrameBatch::set_packed`]); a
    /// sender that fills batches itself packs them when this says so.
    fn packs_frames(&self) -> bool {
        false
    }
    /// Whether [`Link::send_each`] builds frames in memory it shares with the kernel (a
    /// transmit ring), so building and sending are one step. Otherwise it is
    /// [`fill_batch`] then [`Link::send_batch`], and a caller may build a batch under its
    /// own lock and send it after releasing that lock.
    fn sends_from_ring(&self) -> bool {
        false
    }
    /// How frames move, for `--stats` and logs: "rx=… tx=…".
    fn io_mode(&self) -> &'static str {
        "rx=memory tx=memory"
    }
    /// Receives as many queued frames as `batch` holds; returns how many (0: none).
    fn recv_batch(&self, batch: &mut FrameBatch) -> io::Result<usize> {
        batch.count = 0;
        while batch.count < batch.capacity() {
            let i = batch.count;
            match self.recv(batch.slot_mut(i))? {
                Some(len) => {
                    batch.lens[i] = len;
                    batch.count += 1;
                }
                None => break,
            }
        }
        Ok(batch.count)
    }
    /// Sends the frames of `batch`; returns how many the link took.
    fn send_batch(&self, batch: &mut FrameBatch) -> io::Result<usize> {
        for i in 0..batch.len() {
            if !self.send(batch.frame(i))? {
                return Ok(i);
            }
        }
        Ok(batch.len())
    }
    /// Hands the queued frames, up to `batch`'s capacity, to `f` in arrival order; returns
    /// how many came (0: none). Links with a ring shared with the kernel hand them in
    /// place; the others receive into `batch` first.
    fn recv_each(&self, batch: &mut FrameBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        recv_each_batched(self, batch, f)
    }
    /// Sends up to `max` frames that `fill` builds in place: given a slot of at least
    /// [`MIN_SLOT`] bytes, it writes a frame and returns its length, `Some(0)` to produce
    /// nothing this time, or `None` when it has nothing more. Frames the link refuses or
    /// fails to send are lost, as on a wire, and counted in [`TxOutcome::refused`].
    fn send_each(
        &self,
        batch: &mut FrameBatch,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> TxOutcome {
        send_each_batched(self, batch, max, fill)
    }
}

/// [`Link::recv_each`] through `batch` and [`Link::recv_batch`].
pub(crate) fn recv_each_batched<L: Link + ?Sized>(
    link: &L,
    batch: &mut FrameBatch,
    f: &mut dyn FnMut(&[u8]),
) -> io::Result<usize> {
    let n = link.recv_batch(batch)?;
    for i in 0..n {
        f(batch.frame(i));
    }
    Ok(n)
}

/// Empties `batch` and fills it through `fill` (as in [`Link::send_each`]) until it is
/// full, `max` calls produced something, or `fill` has nothing more. Returns how many calls
/// produced something and whether `fill` may have more.
pub fn fill_batch(
    batch: &mut FrameBatch,
    max: usize,
    fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
) -> (usize, bool) {
    batch.clear();
    let mut filled = 0;
    while filled < max && !batch.is_full() {
        let Some(len) = fill(batch.begin()) else {
            batch.abandon();
            return (filled, false);
        };
        filled += 1;
        if len > 0 {
            batch.push(len);
        } else {
            batch.abandon();
        }
    }
    (filled, true)
}

/// [`Link::send_each`] through `batch` and [`Link::send_batch`].
pub(crate) fn send_each_batched<L: Link + ?Sized>(
    link: &L,
    batch: &mut FrameBatch,
    max: usize,
    fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
) -> TxOutcome {
    let mut out = TxOutcome::default();
    let mut more = true;
    batch.set_packed(link.packs_frames());
    while more && out.filled < max {
        let (filled, left) = fill_batch(batch, max - out.filled, fill);
        out.filled += filled;
        more = left;
        if batch.is_empty() {
            continue;
        }
        out.add_sent(batch.len(), send_or_lose(link, batch));
    }
    out
}

/// [`Link::send_batch`], where a failed send is a loss like any other (as on a wire:
/// go-back-N recovers): returns how many frames the link took.
pub fn send_or_lose<L: Link + ?Sized>(link: &L, batch: &mut FrameBatch) -> usize {
    link.send_batch(batch).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "send failed");
        0
    })
}

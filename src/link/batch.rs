//! Frames in flight between the driver and a link: batches and what a send did.

use super::af_packet::{MmsgHeaders, MAX_BATCH};
use super::gso::Run;

/// Largest frame handled: a 4096-byte IB MTU plus all headers, with room for jumbo frames.
pub const MAX_FRAME: usize = 9216;

/// The smallest slot [`Link::send_each`] hands out: an Ethernet header and the largest
/// datagram the transport emits.
/// (The transport's `MAX_DATAGRAM_LEN`; the driver checks at compile time that they agree,
/// so this layer needs nothing from the layers above.)
pub const MIN_SLOT: usize = 14 + 40 + 8 + 12 + 28 + 4096 + 4 + 4 + 32;

/// Bytes of frames a transmit batch stops at, whatever its slots: 64 IPv4 WRITE packets
/// of a 4096-byte IB MTU. Frames of a 1024-byte IB MTU (Ethernet MTU 1500) fill all the slots
/// instead, so a 64 KiB WRITE's packets are not cut into UDP GSO super-frames of 61 and
/// 3 at a 64-slot boundary (measured: 32 packets per super-frame on average, 42 with 128
/// slots, and 10% more 64 KiB WRITE bandwidth); large frames keep the batch as large as
/// before, within the CPU's caches (with 256 slots at MTU 9000, 10% less).
pub const BATCH_BYTES: usize = 64 * (14 + 20 + 8 + 12 + 16 + 4096 + 4);

/// Bytes of a packed frame that the next frame's headers overwrite (see
/// [`FrameBatch::set_packed`]): Ethernet, IPv4 and UDP headers, what a super-frame leaves
/// out of every segment but the first.
pub const TAIL: usize = 14 + 20 + 8;

/// Where the frames of a transmit batch lie: frame `i` is `data[offsets[i]..][..lens[i]]`,
/// except that when `aside[i]` its last [`TAIL`] bytes are `tails[i]` (in a packed batch
/// the next frame's headers lie where they were).
#[derive(Debug, Clone, Copy)]
pub struct Packed<'a> {
    /// Where each frame starts in the batch's buffer.
    pub offsets: &'a [usize],
    /// The ends of frames that the next frame's headers overwrote.
    pub tails: &'a [[u8; TAIL]],
    /// Whether a frame's end is in `tails`.
    pub aside: &'a [bool],
}

/// A piece of memory a message is sent from (see [`Packed::pieces`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// `data[start..end]` of the batch.
    Data {
        /// First byte.
        start: usize,
        /// One past the last.
        end: usize,
    },
    /// `tails[frame][from..]`.
    Tail {
        /// The frame whose end it is.
        frame: usize,
        /// Where in the end the piece starts.
        from: usize,
    },
}

impl Packed<'_> {
    /// Hands `f` the pieces of the message `run` makes of frames of `lens` bytes, in
    /// order: its first frame whole, the others without their first `run.skip` bytes;
    /// pieces of the buffer that follow each other come as one.
    pub fn pieces(&self, lens: &[usize], run: &Run, f: &mut dyn FnMut(Piece)) {
        /// Adds `start..end` to the pending buffer piece, or hands that to `f` and starts
        /// another.
        fn data(
            pending: &mut Option<(usize, usize)>,
            start: usize,
            end: usize,
            f: &mut dyn FnMut(Piece),
        ) {
            match *pending {
                Some((s, e)) if e == start => *pending = Some((s, end)),
                _ => {
                    if let Some((s, e)) = pending.replace((start, end)) {
                        f(Piece::Data { start: s, end: e });
                    }
                }
            }
        }
        let mut pending: Option<(usize, usize)> = None;
        for (k, &len) in lens.iter().enumerate().skip(run.first).take(run.count) {
            let skip = if k == run.first { 0 } else { run.skip.min(len) };
            let (start, end) = (self.offsets[k] + skip, self.offsets[k] + len);
            if self.aside[k] && len >= TAIL {
                let tail_at = end - TAIL;
                if start < tail_at {
                    data(&mut pending, start, tail_at, f);
                }
                if let Some((s, e)) = pending.take() {
                    f(Piece::Data { start: s, end: e });
                }
                f(Piece::Tail {
                    frame: k,
                    from: start.max(tail_at) - tail_at,
                });
            } else if start < end {
                data(&mut pending, start, end, f);
            }
        }
        if let Some((s, e)) = pending {
            f(Piece::Data { start: s, end: e });
        }
    }
}

/// What one [`Link::send_each`] call did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxOutcome {
    /// Times `fill` produced something (a frame or a skip).
    pub filled: usize,
    /// Frames handed to the link.
    pub queued: usize,
    /// Frames the link refused (full); lost, as on a wire.
    pub refused: usize,
    /// Stopped because the link's transmit ring is full: worth trying again soon.
    pub ring_full: bool,
}

impl TxOutcome {
    /// Counts a batch of `frames` of which the link took `sent`.
    pub fn add_sent(&mut self, frames: usize, sent: usize) {
        self.queued += sent;
        self.refused += frames - sent;
    }
}

/// Frame buffers for moving several frames per system call: `capacity` slots of
/// [`MAX_FRAME`] bytes, the first `len()` holding frames.
pub struct FrameBatch {
    pub(super) data: Vec<u8>,
    pub(super) lens: Vec<usize>,
    pub(super) count: usize,
    /// Bytes of the frames pushed since the last `clear` (transmit batches).
    bytes: usize,
    /// System call headers pointing into `data` (whose heap buffer never moves).
    pub(super) headers: MmsgHeaders,
    /// How a link that joins frames into super-frames grouped the batch (see
    /// [`super::gso::plan`]).
    pub(super) runs: Vec<Run>,
    /// Where each frame starts in `data`.
    pub(super) offsets: Vec<usize>,
    /// Packed batches: the overwritten ends of frames (see [`Packed`]).
    tails: Vec<[u8; TAIL]>,
    aside: Vec<bool>,
    packed: bool,
    /// Where the frame being built starts.
    next_at: usize,
}

impl FrameBatch {
    /// Buffers for `capacity` frames (at most a system call's batch).
    pub fn new(capacity: usize) -> FrameBatch {
        let capacity = capacity.min(MAX_BATCH);
        let mut data = vec![0; capacity * MAX_FRAME];
        let headers = MmsgHeaders::new(&mut data, MAX_FRAME);
        FrameBatch {
            data,
            lens: vec![0; capacity],
            count: 0,
            bytes: 0,
            headers,
            runs: vec![Run::default(); capacity],
            offsets: (0..capacity).map(|i| i * MAX_FRAME).collect(),
            tails: vec![[0; TAIL]; capacity],
            aside: vec![false; capacity],
            packed: false,
            next_at: 0,
        }
    }
    /// Builds the next frames packed (`on`) or in slots of [`MAX_FRAME`]. Packed, each
    /// frame starts [`TAIL`] bytes before the end of the one before, which puts the UDP
    /// payloads of consecutive IPv4 frames end to end: a super-frame of them reaches the
    /// kernel as one piece of memory instead of one per packet, and the kernel's copy of
    /// it runs faster (the bytes each frame's headers overwrite are kept aside and put
    /// back by [`FrameBatch::restore_runs`]). Only for links that send through
    /// [`FrameBatch::layout`]. Empties the batch.
    pub fn set_packed(&mut self, on: bool) {
        self.clear();
        self.packed = on;
    }
    /// Whether the batch is packed.
    pub fn is_packed(&self) -> bool {
        self.packed
    }
    /// Where the frames lie (packed or not).
    pub fn layout(&self) -> Packed<'_> {
        Packed {
            offsets: &self.offsets[..self.count],
            tails: &self.tails[..self.count],
            aside: &self.aside[..self.count],
        }
    }
    /// What a send needs at once: the buffer, the system call headers, the frames'
    /// lengths and where they lie.
    pub(super) fn send_parts(&mut self) -> (&[u8], &mut MmsgHeaders, &[usize], Packed<'_>) {
        let n = self.count;
        (
            &self.data,
            &mut self.headers,
            &self.lens[..n],
            Packed {
                offsets: &self.offsets[..n],
                tails: &self.tails[..n],
                aside: &self.aside[..n],
            },
        )
    }
    /// Where the next frame goes: its slot, or in a packed batch the [`TAIL`] bytes
    /// before the end of the last frame (those bytes are kept aside first). Follow with
    /// [`FrameBatch::push`] or [`FrameBatch::abandon`].
    pub fn begin(&mut self) -> &mut [u8] {
        let i = self.count;
        self.next_at = if !self.packed || i == 0 {
            i * MAX_FRAME
        } else {
            let end = self.offsets[i - 1] + self.lens[i - 1];
            if self.lens[i - 1] >= TAIL {
                let at = end - TAIL;
                self.tails[i - 1].copy_from_slice(&self.data[at..end]);
                self.aside[i - 1] = true;
                at
            } else {
                end
            }
        };
        // A frame starts at most where its slot does (each frame before is at most a slot
        // long), so a whole slot's room follows it.
        &mut self.data[self.next_at..][..MAX_FRAME]
    }
    /// No frame was built after [`FrameBatch::begin`]: the last frame gets its end back.
    pub fn abandon(&mut self) {
        let i = self.count;
        if self.packed && i > 0 && self.aside[i - 1] {
            let at = self.next_at;
            self.data[at..at + TAIL].copy_from_slice(&self.tails[i - 1]);
            self.aside[i - 1] = false;
        }
    }
    /// Puts the ends of the frames inside each run of more than one frame back in place
    /// (over the headers of the frame that follows, which a super-frame leaves out): a
    /// run's frames then lie end to end, all but the last one's end, which the next run's
    /// first frame still needs. A run whose `skip` is shorter than [`TAIL`] (none that
    /// [`super::gso::plan`] makes) is left as it is: its pieces then take the ends from
    /// the side.
    pub fn restore_runs(&mut self, runs: &[Run]) {
        if !self.packed {
            return;
        }
        for r in runs.iter().filter(|r| r.count > 1 && r.skip >= TAIL) {
            for k in r.first + 1..r.first + r.count {
                if self.aside[k - 1] {
                    let at = self.offsets[k];
                    self.data[at..at + TAIL].copy_from_slice(&self.tails[k - 1]);
                    self.aside[k - 1] = false;
                }
            }
        }
    }
    /// Slots in the batch.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }
    /// Frames held.
    pub fn len(&self) -> usize {
        self.count
    }
    /// True when no frame is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// True when a transmit batch should take no more frames: every slot holds one, or
    /// the frames add up to [`BATCH_BYTES`].
    pub fn is_full(&self) -> bool {
        self.count == self.capacity() || self.bytes >= BATCH_BYTES
    }
    /// Forgets the frames held.
    pub fn clear(&mut self) {
        self.count = 0;
        self.bytes = 0;
    }
    /// Frame `i` (`i < len()`) of a batch that is not packed.
    pub fn frame(&self, i: usize) -> &[u8] {
        debug_assert!(!self.packed, "a packed batch's frames are not whole");
        &self.data[i * MAX_FRAME..][..self.lens[i]]
    }
    /// The whole buffer of slot `i`.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i * MAX_FRAME..][..MAX_FRAME]
    }
    /// Makes slot `len()` (or where [`FrameBatch::begin`] put it) a frame of `len` bytes.
    pub fn push(&mut self, len: usize) {
        let i = self.count;
        self.offsets[i] = if self.packed {
            self.next_at
        } else {
            i * MAX_FRAME
        };
        self.aside[i] = false;
        self.lens[self.count] = len.min(MAX_FRAME);
        self.bytes += self.lens[self.count];
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame `k` of `len` bytes, every byte telling its frame and place.
    fn frame(k: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (k * 31 + i * 7 + i / 256) as u8).collect()
    }

    fn fill(b: &mut FrameBatch, frames: &[Vec<u8>]) {
        for f in frames {
            let slot = b.begin();
            slot[..f.len()].copy_from_slice(f);
            // What a builder leaves behind it is not part of the frame.
            let end = (f.len() + 8).min(slot.len());
            slot[f.len()..end].fill(0xee);
            b.push(f.len());
        }
    }

    /// The bytes of the message `run` makes, from its pieces.
    fn message(b: &FrameBatch, run: &Run) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut data_pieces = 0;
        b.layout()
            .pieces(&b.lens[..b.len()], run, &mut |p| match p {
                Piece::Data { start, end } => {
                    data_pieces += 1;
                    out.extend_from_slice(&b.data[start..end]);
                }
                Piece::Tail { frame, from } => out.extend_from_slice(&b.tails[frame][from..]),
            });
        (out, data_pieces)
    }

    fn run(first: usize, count: usize, skip: usize) -> Run {
        Run {
            first,
            count,
            skip,
            ..Run::default()
        }
    }

    #[test]
    fn packed_frames_come_back_whole_and_runs_end_to_end() {
        let lens = [1100, 1100, 1100, 700, 30, 1100, 1100, 9216, 64];
        let frames: Vec<Vec<u8>> = lens.iter().enumerate().map(|(k, &l)| frame(k, l)).collect();
        let mut b = FrameBatch::new(16);
        b.set_packed(true);
        fill(&mut b, &frames);
        // Each frame starts TAIL bytes before the end of one at least TAIL long.
        let l = b.layout();
        assert_eq!(l.offsets[1], 1100 - TAIL);
        assert_eq!(
            l.offsets[5],
            l.offsets[4] + 30,
            "a 30-byte frame is not overlapped"
        );
        for (k, f) in frames.iter().enumerate() {
            assert_eq!(&message(&b, &run(k, 1, 0)).0, f, "frame {k} alone");
        }
        // Runs of frames 0-3 and 5-6, skipping the headers of all but the first, and of
        // 7-8 skipping fewer bytes than were overwritten: that one is not restored over
        // bytes it sends, but put together from the side.
        let runs = [
            run(0, 4, TAIL),
            run(4, 1, 0),
            run(5, 2, TAIL + 20),
            run(7, 2, 10),
        ];
        b.restore_runs(&runs);
        for r in &runs {
            let mut want = frames[r.first].clone();
            for f in &frames[r.first + 1..r.first + r.count] {
                want.extend_from_slice(&f[r.skip..]);
            }
            let (got, pieces) = message(&b, r);
            assert_eq!(got, want, "run {r:?}");
            if r.count > 1 && r.skip == TAIL {
                assert_eq!(pieces, 1, "one piece of the buffer for run {r:?}");
            }
        }
    }

    #[test]
    fn an_abandoned_frame_gives_the_last_its_end_back() {
        let frames = [frame(0, 500), frame(1, 600)];
        let mut b = FrameBatch::new(4);
        b.set_packed(true);
        fill(&mut b, &frames);
        b.begin().fill(0x55);
        b.abandon();
        assert_eq!(b.len(), 2);
        assert_eq!(&message(&b, &run(1, 1, 0)).0, &frames[1]);
        assert!(!b.layout().aside[1]);
        fill(&mut b, &[frame(2, 800)]);
        for k in 0..3 {
            assert_eq!(message(&b, &run(k, 1, 0)).0, frame(k, [500, 600, 800][k]));
        }
    }

    #[test]
    fn slots_are_pieces_of_their_own() {
        let frames = [frame(0, 1100), frame(1, 1100)];
        let mut b = FrameBatch::new(4);
        fill(&mut b, &frames);
        assert!(!b.is_packed());
        assert_eq!(b.layout().offsets, &[0, MAX_FRAME]);
        let r = run(0, 2, TAIL);
        b.restore_runs(&[r]);
        let (got, pieces) = message(&b, &r);
        assert_eq!(pieces, 2);
        assert_eq!(got, [&frames[0][..], &frames[1][TAIL..]].concat());
        assert_eq!(b.frame(1), &frames[1][..]);
    }

    #[test]
    fn a_batch_is_full_at_its_slots_or_its_bytes() {
        // Frames of an IB MTU of 1024 fill every slot.
        let mut b = FrameBatch::new(MAX_BATCH);
        while !b.is_full() {
            b.push(1024 + 78);
        }
        assert_eq!(b.len(), MAX_BATCH);
        // WRITE ONLY frames of an IB MTU of 4096 (Ethernet, IPv4, UDP, BTH, RETH, ICRC)
        // stop at the byte budget: 64 of them.
        b.clear();
        assert!(b.is_empty() && !b.is_full());
        while !b.is_full() {
            b.push(14 + 20 + 8 + 12 + 16 + 4096 + 4);
        }
        assert_eq!(b.len(), 64);
    }
}

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
    /// Frame `i` (`i < len()`).
    pub fn frame(&self, i: usize) -> &[u8] {
        &self.data[i * MAX_FRAME..][..self.lens[i]]
    }
    /// The whole buffer of slot `i`.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i * MAX_FRAME..][..MAX_FRAME]
    }
    /// Makes slot `len()` a frame of `len` bytes.
    pub fn push(&mut self, len: usize) {
        self.lens[self.count] = len.min(MAX_FRAME);
        self.bytes += self.lens[self.count];
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

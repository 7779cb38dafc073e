//! An rsocket connection's bookkeeping, sans I/O: what may be sent (send queue entries,
//! send-buffer bytes, the peer's receive credits, its published buffers), what has
//! arrived and where it lies in the receive ring, and when to grant the peer more.
//!
//! The rules are those of rdma-core's rsockets, so that either end may be rdma-core's:
//! data goes as RDMA WRITE with immediate into the half of the receiver's ring the
//! receiver last published; each message uses one of the receiver's posted receives
//! (credits); a credit update names the sender's new message limit and, when a half of
//! the ring is free again, publishes it by writing its address into the sender's target
//! list. Unlike rdma-core, nothing a peer says is trusted: a peer that writes more
//! messages or bytes than it was granted is caught ([`ProtocolError`]) before any byte of
//! it is read out.

use std::collections::VecDeque;

use super::proto::{
    msg, parse_msg, ConnData, Op, Sge, CTRL_DISCONNECT, CTRL_KEEPALIVE, CTRL_SHUTDOWN, SGE_LEN,
};

/// Send-buffer bytes that must be free before anything is sent (rsockets' `RS_SNDLOWAT`).
pub(crate) const SNDLOWAT: u32 = 2048;
/// Send queue entries kept for control messages (credit updates, shutdown).
pub(crate) const CTRL_SLOTS: u32 = 4;
/// Entries in each end's target list.
pub(crate) const SGL_ENTRIES: usize = 2;
/// The first transfer of a send, doubled for each next one up to [`MAX_TRANSFER`], so
/// that a large send starts moving before it is all copied.
const FIRST_TRANSFER: u32 = 2048;
/// The largest single transfer.
const MAX_TRANSFER: u32 = 65536;

/// Queue and buffer sizes of one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    pub sq: u16,
    pub rq: u16,
    pub sbuf: u32,
    pub rbuf: u32,
}

/// A peer that broke the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProtocolError {
    /// More data messages outstanding than receive credits were granted.
    TooManyMessages,
    /// More data bytes than the receive buffers published to it hold.
    BeyondGrant { len: u32, room: u32 },
    /// A message of a reserved kind.
    Reserved(u32),
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooManyMessages => write!(f, "peer sent more messages than its credits"),
            Self::BeyondGrant { len, room } => {
                write!(f, "peer wrote {len} bytes where {room} were granted")
            }
            Self::Reserved(op) => write!(f, "peer sent a message of reserved kind {op}"),
        }
    }
}

/// A credit update to post: its immediate, and the target entry to write with it (to
/// `remote_addr` with `rkey`), if a half of the ring is published by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Credit {
    pub imm: u32,
    pub publish: Option<(Sge, u64, u32)>,
    /// Its control slot (the place in the send buffer's control area for the entry).
    pub slot: u32,
}

#[derive(Debug)]
pub(crate) struct Flow {
    sizes: Sizes,
    // Sending.
    sseq_no: u16,
    sseq_comp: u16,
    sqe_avail: u32,
    sbuf_avail: u32,
    sbuf_head: u32,
    ctrl_seqno: u32,
    ctrl_max: u32,
    target_sge: usize,
    remote_sgl: Sge,
    remote_sge: u32,
    swap: bool,
    // Receiving.
    rseq_no: u16,
    rseq_comp: u16,
    rbuf_avail: u32,
    rbuf_free: u32,
    rbuf_off: u32,
    rmsg: VecDeque<u32>,
    unread: u32,
    /// The peer said it will send no more.
    pub peer_shutdown: bool,
    /// The peer said it is gone.
    pub peer_disconnect: bool,
}

impl Flow {
    pub(crate) fn new(sizes: Sizes) -> Flow {
        let half = sizes.rbuf / 2;
        Flow {
            sizes,
            sseq_no: 0,
            sseq_comp: 0,
            sqe_avail: u32::from(sizes.sq).saturating_sub(CTRL_SLOTS),
            sbuf_avail: sizes.sbuf,
            sbuf_head: 0,
            ctrl_seqno: 0,
            ctrl_max: CTRL_SLOTS,
            target_sge: 0,
            remote_sgl: Sge::default(),
            remote_sge: 0,
            swap: false,
            rseq_no: 0,
            rseq_comp: sizes.rq / 2,
            // The first half goes to the peer in the connection data.
            rbuf_avail: half,
            rbuf_free: half,
            rbuf_off: 0,
            rmsg: VecDeque::with_capacity(usize::from(sizes.rq)),
            unread: 0,
            peer_shutdown: false,
            peer_disconnect: false,
        }
    }

    /// This end's connection data (`rbuf`: the receive ring's address and key;
    /// `target`: the target list's).
    pub(crate) fn conn_data(&self, target: (u64, u32), rbuf: (u64, u32)) -> ConnData {
        ConnData {
            big_endian: cfg!(target_endian = "big"),
            credits: self.sizes.rq,
            target_sgl: Sge {
                addr: target.0,
                key: target.1,
                length: SGL_ENTRIES as u32,
            },
            data_buf: Sge {
                addr: rbuf.0,
                key: rbuf.1,
                length: self.sizes.rbuf / 2,
            },
        }
    }

    /// Takes in the peer's connection data; returns the entry to put first in this end's
    /// target list (the peer's first receive buffer).
    pub(crate) fn peer(&mut self, c: &ConnData) -> Sge {
        self.remote_sgl = c.target_sgl;
        self.remote_sge = 1 % c.target_sgl.length.max(1);
        self.swap = c.big_endian != cfg!(target_endian = "big");
        self.sseq_comp = c.credits;
        c.data_buf
    }

    /// The target list entry the next data goes to.
    pub(crate) fn target_index(&self) -> usize {
        self.target_sge
    }

    /// Whether a transfer may start now, given the current target entry's length.
    pub(crate) fn can_send(&self, target_len: u32) -> bool {
        self.sqe_avail > 0
            && self.sbuf_avail >= SNDLOWAT.min(self.sizes.sbuf)
            && self.sseq_no != self.sseq_comp
            && target_len != 0
    }

    /// The size of the next transfer of a send with `left` bytes to go; `olen` is the
    /// send's growing transfer size, starting at 0.
    ///
    /// Every send starts with [`FIRST_TRANSFER`] bytes, so that its first bytes leave
    /// while the rest is still being copied, as rdma-core's do. rdma-core then doubles
    /// each next transfer up to [`MAX_TRANSFER`]; here, once transfers are in flight (the
    /// link busy anyway), the rest of the send goes in transfers as large as allowed. A 64
    /// KiB send is then two messages, not six (each one a receive, a completion at both
    /// ends and, where the receiver sleeps, a wake-up): `rstream -S 64 KiB` between two
    /// namespaces 9.4-11.8 Gb/s with rdma-core's rule, 16.8-19.6 with this one, iperf3
    /// under `librspreload.so` (128 KiB sends) 11.2-15.2 and 18.4-19.6. Sending a 4 KiB
    /// send whole as well lost 5-15% (two 2 KiB transfers let the driver send the first
    /// while the second is copied).
    pub(crate) fn transfer_size(&self, left: usize, olen: &mut u32, target_len: u32) -> u32 {
        let left = u32::try_from(left).unwrap_or(u32::MAX);
        if *olen == 0 {
            *olen = FIRST_TRANSFER;
        } else if self.sbuf_avail < self.sizes.sbuf {
            // Transfers in flight: the rest goes as large as allowed.
            *olen = MAX_TRANSFER;
        }
        let x = if *olen < left {
            let x = *olen;
            if *olen < MAX_TRANSFER {
                *olen <<= 1;
            }
            x
        } else {
            left
        };
        x.min(self.sbuf_avail).min(target_len)
    }

    /// A transfer of `len` bytes is posted; the current target entry shrinks by it (the
    /// caller writes the returned entry back, and moves on when it is used up). Returns
    /// the entry as it was (where the data goes), the entry to write back, and the
    /// message.
    pub(crate) fn take(&mut self, len: u32, entry: Sge) -> (Sge, Sge, u32) {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_avail -= len;
        let rest = Sge {
            addr: entry.addr.wrapping_add(u64::from(len)),
            key: entry.key,
            length: entry.length - len,
        };
        if rest.length == 0 {
            self.target_sge = (self.target_sge + 1) % SGL_ENTRIES;
        }
        (entry, rest, msg(Op::Data, len))
    }

    /// Where in the send buffer a copied transfer of `len` bytes goes: one or two pieces
    /// (offset, length), the second from the start when the ring wraps.
    pub(crate) fn sbuf_pieces(&mut self, len: u32) -> [(u32, u32); 2] {
        let to_end = self.sizes.sbuf - self.sbuf_head;
        if len < to_end {
            let p = [(self.sbuf_head, len), (0, 0)];
            self.sbuf_head += len;
            p
        } else {
            let p = [(self.sbuf_head, to_end), (0, len - to_end)];
            self.sbuf_head = len - to_end;
            p
        }
    }

    /// A send completed (its work request carried message `m`).
    pub(crate) fn sent(&mut self, m: u32) {
        match parse_msg(m) {
            (Op::Sgl, _) | (Op::Ctrl, _) => self.ctrl_max = self.ctrl_max.wrapping_add(1),
            (Op::Data, len) => {
                self.sqe_avail += 1;
                self.sbuf_avail = (self.sbuf_avail + len).min(self.sizes.sbuf);
            }
            _ => self.sqe_avail += 1,
        }
    }

    /// Whether a control message may be posted now.
    pub(crate) fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max
    }

    /// Every send has completed.
    pub(crate) fn all_sent(&self) -> bool {
        self.ctrl_max.wrapping_sub(self.ctrl_seqno) + self.sqe_avail == u32::from(self.sizes.sq)
    }

    /// Takes a control slot for a control message; returns its immediate.
    pub(crate) fn ctrl(&mut self, what: u32) -> u32 {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        msg(Op::Ctrl, what)
    }

    /// A message arrived in immediate data.
    pub(crate) fn received(&mut self, m: u32) -> Result<(), ProtocolError> {
        match parse_msg(m) {
            (Op::Sgl, n) => self.sseq_comp = n as u16,
            (Op::IomapSgl, _) => {}
            (Op::Ctrl, CTRL_DISCONNECT) => self.peer_disconnect = true,
            (Op::Ctrl, CTRL_SHUTDOWN) => self.peer_shutdown = true,
            (Op::Ctrl, CTRL_KEEPALIVE) | (Op::Ctrl, _) => {}
            (Op::Data, len) => {
                if self.rmsg.len() >= usize::from(self.sizes.rq) {
                    return Err(ProtocolError::TooManyMessages);
                }
                // A transfer fills at most one published buffer (half the ring), and
                // all that waits fits in what was published.
                let room =
                    (self.sizes.rbuf - self.rbuf_avail - self.unread).min(self.sizes.rbuf / 2);
                if len > room {
                    return Err(ProtocolError::BeyondGrant { len, room });
                }
                self.unread += len;
                self.rmsg.push_back(len);
            }
            (Op::Reserved(c), _) => return Err(ProtocolError::Reserved(c)),
        }
        Ok(())
    }

    /// Bytes received and not yet read.
    #[cfg(test)]
    fn unread(&self) -> u32 {
        self.unread
    }

    /// Whether a data message waits (perhaps of no bytes).
    pub(crate) fn has_data(&self) -> bool {
        !self.rmsg.is_empty()
    }

    /// Reads up to `left` bytes: the next contiguous piece (offset into the ring, length),
    /// accounted as read; `None` when nothing waits.
    pub(crate) fn read(&mut self, left: usize) -> Option<(u32, u32)> {
        let front = self.rmsg.front_mut()?;
        let left = u32::try_from(left).unwrap_or(u32::MAX);
        let n = left.min(*front).min(self.sizes.rbuf - self.rbuf_off);
        let off = self.rbuf_off;
        *front -= n;
        if *front == 0 {
            self.rmsg.pop_front();
            self.rseq_no = self.rseq_no.wrapping_add(1);
        }
        self.rbuf_off = (self.rbuf_off + n) % self.sizes.rbuf;
        self.unread -= n;
        self.rbuf_avail += n;
        Some((off, n))
    }

    /// The pieces a read of up to `left` bytes would return, without reading them
    /// (MSG_PEEK).
    pub(crate) fn peek(&self, mut left: usize) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut off = self.rbuf_off;
        for &len in &self.rmsg {
            let mut m = len;
            while m > 0 && left > 0 {
                let n = (left.min(m as usize) as u32).min(self.sizes.rbuf - off);
                out.push((off, n));
                off = (off + n) % self.sizes.rbuf;
                m -= n;
                left -= n as usize;
            }
            if left == 0 {
                break;
            }
        }
        out
    }

    /// Whether to send the peer a credit update now.
    pub(crate) fn wants_credit(&self) -> bool {
        let half = self.sizes.rbuf / 2;
        (self.rbuf_avail >= half || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
    }

    /// Makes a credit update (`rbuf`: the ring's address and key).
    pub(crate) fn credit(&mut self, rbuf: (u64, u32)) -> Credit {
        let slot = self.ctrl_seqno % CTRL_SLOTS;
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add(self.sizes.rq / 2);
        let imm = msg(Op::Sgl, u32::from(self.rseq_no) + u32::from(self.sizes.rq));
        let half = self.sizes.rbuf / 2;
        let publish = (self.rbuf_avail >= half).then(|| {
            let sge = Sge {
                addr: rbuf.0.wrapping_add(u64::from(self.rbuf_free)),
                key: rbuf.1,
                length: half,
            };
            let at = self
                .remote_sgl
                .addr
                .wrapping_add(u64::from(self.remote_sge) * SGE_LEN as u64);
            self.rbuf_avail -= half;
            self.rbuf_free = (self.rbuf_free + half) % self.sizes.rbuf;
            self.remote_sge = (self.remote_sge + 1) % self.remote_sgl.length.max(1);
            (sge, at, self.remote_sgl.key)
        });
        Credit { imm, publish, slot }
    }

    /// Whether target entries written to the peer need their bytes swapped.
    pub(crate) fn swap(&self) -> bool {
        self.swap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: Sizes = Sizes {
        sq: 16,
        rq: 8,
        sbuf: 8192,
        rbuf: 8192,
    };

    /// Two flows connected back to back, with each end's target list as plain memory.
    struct Pair {
        a: Flow,
        b: Flow,
        a_targets: [Sge; 2],
        b_targets: [Sge; 2],
        /// b's receive ring, as written by a.
        b_ring: Vec<u8>,
    }

    const A_TGT: u64 = 0x1000;
    const B_TGT: u64 = 0x2000;
    const B_RING: u64 = 0x10_0000;
    const A_RING: u64 = 0x20_0000;

    fn pair() -> Pair {
        let mut a = Flow::new(SIZES);
        let mut b = Flow::new(SIZES);
        let ca = a.conn_data((A_TGT, 1), (A_RING, 2));
        let cb = b.conn_data((B_TGT, 3), (B_RING, 4));
        let mut p = Pair {
            a_targets: [Sge::default(); 2],
            b_targets: [Sge::default(); 2],
            b_ring: vec![0; SIZES.rbuf as usize],
            a: Flow::new(SIZES),
            b: Flow::new(SIZES),
        };
        p.a_targets[0] = a.peer(&cb);
        p.b_targets[0] = b.peer(&ca);
        p.a = a;
        p.b = b;
        p
    }

    impl Pair {
        /// a sends `data` as far as it can; the WRITEs land in b's ring and b takes the
        /// messages. Returns the bytes sent.
        fn a_sends(&mut self, data: &[u8]) -> usize {
            let mut done = 0;
            let mut olen = 0;
            while done < data.len() {
                let i = self.a.target_index();
                if !self.a.can_send(self.a_targets[i].length) {
                    break;
                }
                let n =
                    self.a
                        .transfer_size(data.len() - done, &mut olen, self.a_targets[i].length);
                let (to, rest, m) = self.a.take(n, self.a_targets[i]);
                self.a_targets[i] = rest;
                assert_eq!(to.key, 4);
                let off = (to.addr - B_RING) as usize;
                self.b_ring[off..off + n as usize].copy_from_slice(&data[done..done + n as usize]);
                self.b.received(m).unwrap();
                self.a.sent(m); // the WRITE completes
                done += n as usize;
            }
            done
        }

        /// b reads everything waiting.
        fn b_reads(&mut self) -> Vec<u8> {
            let mut out = Vec::new();
            while let Some((off, n)) = self.b.read(usize::MAX) {
                out.extend_from_slice(&self.b_ring[off as usize..(off + n) as usize]);
            }
            out
        }

        /// b grants a credit if it wants to; a takes it.
        fn b_credits(&mut self) -> bool {
            if !self.b.wants_credit() {
                return false;
            }
            let c = self.b.credit((B_RING, 4));
            if let Some((sge, at, key)) = c.publish {
                assert_eq!(key, 1);
                let idx = ((at - A_TGT) / SGE_LEN as u64) as usize;
                self.a_targets[idx] = sge;
            }
            self.a.received(c.imm).unwrap();
            self.b.sent(c.imm);
            true
        }
    }

    #[test]
    fn a_stream_crosses_the_ring_many_times_through_credit_updates() {
        let mut p = pair();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut sent = 0;
        let mut got = Vec::new();
        let mut rounds = 0;
        while got.len() < data.len() {
            sent += p.a_sends(&data[sent..]);
            got.extend(p.b_reads());
            p.b_credits();
            rounds += 1;
            assert!(
                rounds < 10_000,
                "no progress: sent {sent}, got {}",
                got.len()
            );
        }
        assert_eq!(got, data);
        assert_eq!(p.a.sbuf_avail, SIZES.sbuf);
        assert!(p.a.all_sent());
    }

    #[test]
    fn a_sender_stops_at_the_published_half_and_at_its_credits() {
        let mut p = pair();
        // Only the first half (4096 bytes) is published.
        assert_eq!(p.a_sends(&[1u8; 10_000]), 4096);
        // Credits: 8 messages of one byte each at most, however much room.
        let mut p = pair();
        let mut n = 0;
        while p.a_sends(&[9u8]) == 1 {
            n += 1;
        }
        assert_eq!(n, 8);
    }

    #[test]
    fn reads_wrap_at_the_end_of_the_ring_and_peek_does_not_consume() {
        let mut f = Flow::new(SIZES);
        f.rbuf_avail = 0; // all of the ring published
        f.rbuf_off = 8000;
        f.received(msg(Op::Data, 100)).unwrap();
        f.received(msg(Op::Data, 50)).unwrap();
        assert_eq!(f.peek(120), vec![(8000, 100), (8100, 20)]);
        assert_eq!(f.unread(), 150);
        assert_eq!(f.read(usize::MAX), Some((8000, 100)));
        assert_eq!(f.read(10), Some((8100, 10)));
        assert_eq!(f.read(usize::MAX), Some((8110, 40)));
        assert_eq!(f.read(usize::MAX), None);
        assert_eq!(f.rseq_no, 2);
        // A message across the end comes in two pieces.
        f.rbuf_off = 8150;
        f.received(msg(Op::Data, 100)).unwrap();
        assert_eq!(f.read(usize::MAX), Some((8150, 42)));
        assert_eq!(f.read(usize::MAX), Some((0, 58)));
    }

    #[test]
    fn a_peer_beyond_its_grant_is_caught_before_anything_is_read() {
        let mut f = Flow::new(SIZES);
        // Granted: the first half, 4096 bytes.
        f.received(msg(Op::Data, 4000)).unwrap();
        assert_eq!(
            f.received(msg(Op::Data, 97)),
            Err(ProtocolError::BeyondGrant { len: 97, room: 96 })
        );
        assert_eq!(f.unread(), 4000);
        // With both halves published, one transfer still fills at most one.
        let mut f = Flow::new(SIZES);
        let _ = f.credit((0, 0));
        assert_eq!(
            f.received(msg(Op::Data, 4097)),
            Err(ProtocolError::BeyondGrant {
                len: 4097,
                room: 4096
            })
        );
        f.received(msg(Op::Data, 4096)).unwrap();
        f.received(msg(Op::Data, 4096)).unwrap();
        assert_eq!(
            f.received(msg(Op::Data, 1)),
            Err(ProtocolError::BeyondGrant { len: 1, room: 0 })
        );
        let mut f = Flow::new(SIZES);
        for _ in 0..8 {
            f.received(msg(Op::Data, 1)).unwrap();
        }
        assert_eq!(
            f.received(msg(Op::Data, 1)),
            Err(ProtocolError::TooManyMessages)
        );
        assert_eq!(f.received(0x2000_0001), Err(ProtocolError::Reserved(1)));
        assert_eq!(f.received(0xa000_0000), Err(ProtocolError::Reserved(5)));
    }

    #[test]
    fn control_messages_and_slots() {
        let mut f = Flow::new(SIZES);
        f.received(msg(Op::Ctrl, CTRL_KEEPALIVE)).unwrap();
        assert!(!f.peer_shutdown && !f.peer_disconnect);
        f.received(msg(Op::Ctrl, CTRL_SHUTDOWN)).unwrap();
        assert!(f.peer_shutdown);
        f.received(msg(Op::Ctrl, CTRL_DISCONNECT)).unwrap();
        assert!(f.peer_disconnect);
        for _ in 0..CTRL_SLOTS {
            assert!(f.ctrl_avail());
            f.ctrl(CTRL_SHUTDOWN);
        }
        assert!(!f.ctrl_avail());
        assert!(!f.all_sent());
        f.sent(msg(Op::Ctrl, CTRL_SHUTDOWN));
        assert!(f.ctrl_avail());
    }

    #[test]
    fn a_send_starts_small_and_goes_whole_behind_transfers_in_flight() {
        let sizes = Sizes {
            sq: 64,
            rq: 64,
            sbuf: 1 << 20,
            rbuf: 1 << 20,
        };
        let mut f = Flow::new(sizes);
        f.sseq_comp = 64;
        let target = Sge {
            addr: 0x1000,
            key: 1,
            length: 1 << 19,
        };
        // Nothing in flight: 2 KiB first, doubling.
        let mut olen = 0;
        assert_eq!(f.transfer_size(65536, &mut olen, target.length), 2048);
        let (_, rest, m) = f.take(2048, target);
        // Behind it, the rest of the send goes whole.
        assert_eq!(f.transfer_size(63488, &mut olen, rest.length), 63488);
        // The next send starts small again, then goes whole.
        let mut olen = 0;
        assert_eq!(f.transfer_size(4096, &mut olen, rest.length), 2048);
        assert_eq!(f.transfer_size(2048, &mut olen, rest.length), 2048);
        let mut olen = 0;
        assert_eq!(f.transfer_size(1 << 20, &mut olen, rest.length), 2048);
        assert_eq!(
            f.transfer_size(1 << 20, &mut olen, rest.length),
            MAX_TRANSFER
        );
        // Never past the published buffer or the free send buffer.
        assert_eq!(f.transfer_size(1 << 20, &mut olen, 3000), 3000);
        // All completed: rdma-core's doubling again.
        f.sent(m);
        let mut olen = 0;
        assert_eq!(f.transfer_size(65536, &mut olen, rest.length), 2048);
        assert_eq!(f.transfer_size(63488, &mut olen, rest.length), 4096);
    }

    #[test]
    fn the_send_ring_wraps_in_two_pieces() {
        let mut f = Flow::new(SIZES);
        assert_eq!(f.sbuf_pieces(8000), [(0, 8000), (0, 0)]);
        assert_eq!(f.sbuf_pieces(500), [(8000, 192), (0, 308)]);
        assert_eq!(f.sbuf_pieces(7884), [(308, 7884), (0, 0)]);
        // Exactly to the end: the head is back at the start.
        assert_eq!(f.sbuf_pieces(10), [(0, 10), (0, 0)]);
    }
}

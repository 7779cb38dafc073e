//! PACKET_MMAP rings (TPACKET_V2) of an AF_PACKET socket: frames are received and sent
//! through memory shared with the kernel.
//!
//! Why: a thread polling an idle link reads one status word instead of making a system
//! call; a received frame is handed to the transport where the kernel put it; frames to
//! send are built in their ring slots and leave with one send(2) per batch, without the
//! per-message header copies of sendmmsg. See packet_mmap.rst in the kernel's docs.
//!
//! Each ring is an array of fixed-size frames whose first word (`tp_status`) says who owns
//! the frame: the kernel or user space. Ownership moves with a release store after the
//! owner has finished with the frame, and is checked with an acquire load before use.

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::vnet::{self, VnetHdr};
use super::TxOutcome;

/// Ring block size: frames never straddle blocks, and each block is one allocation.
const BLOCK: usize = 128 << 10;
/// Bytes of receive and transmit ring (rounded down to whole blocks).
const RX_RING_BYTES: usize = 8 << 20;
const TX_RING_BYTES: usize = 4 << 20;
/// Where the frame starts in a transmit slot: after the tpacket2 header (the kernel's
/// `tp_hdrlen - sizeof(struct sockaddr_ll)` without PACKET_TX_HAS_OFF).
const TX_DATA: usize = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();
/// Space before a received frame's MAC header: the header, the sockaddr_ll, alignment (the
/// kernel puts the network header at a 16-byte boundary) and the virtio-net header.
const RX_HEADROOM: usize = 96;
/// The largest frame that comes through the socket's queue instead of the ring: a
/// virtio-net header, an Ethernet header with a VLAN tag and a whole IP datagram.
const COPY_FRAME: usize = vnet::LEN + 18 + 65535;

/// Layout of one ring.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    /// Offset of the ring in the mapping.
    start: usize,
    frame_size: usize,
    frames_per_block: usize,
    frames: usize,
}

impl Geometry {
    fn new(start: usize, frame_size: usize, bytes: usize) -> Geometry {
        let frames_per_block = BLOCK / frame_size;
        let blocks = (bytes / BLOCK).max(1);
        Geometry {
            start,
            frame_size,
            frames_per_block,
            frames: frames_per_block * blocks,
        }
    }
    fn blocks(&self) -> usize {
        self.frames / self.frames_per_block
    }
    fn bytes(&self) -> usize {
        self.blocks() * BLOCK
    }
    /// Offset of frame `i` in the mapping.
    fn offset(&self, i: usize) -> usize {
        self.start
            + (i / self.frames_per_block) * BLOCK
            + (i % self.frames_per_block) * self.frame_size
    }
    fn request(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: BLOCK as u32,
            tp_block_nr: self.blocks() as u32,
            tp_frame_size: self.frame_size as u32,
            tp_frame_nr: self.frames as u32,
        }
    }
}

/// The receive and transmit rings of one socket, mapped into this process.
pub struct Rings {
    fd: RawFd,
    map: NonNull<u8>,
    len: usize,
    rx: Geometry,
    /// No transmit ring: frames leave through sendmmsg instead.
    tx: Option<Geometry>,
    /// Next frame to look at in each ring (and, for receive, the buffer frames too large
    /// for the ring are read into). The locks also make sure only one thread at a time
    /// holds references into user-owned frames.
    rx_next: Mutex<RxState>,
    tx_next: Mutex<usize>,
    /// Received frames longer than a ring frame (cut short by the kernel): dropped.
    truncated: std::sync::atomic::AtomicU64,
    /// Frames larger than a ring frame are queued whole on the socket (PACKET_COPY_THRESH).
    whole: bool,
    /// Frames carry a virtio-net header in front of the MAC header.
    vnet: bool,
}

#[derive(Debug)]
struct RxState {
    next: usize,
    /// Frames larger than a ring frame, read from the queue (when the kernel queues them).
    copy: Vec<u8>,
}

// SAFETY: the mapping is owned by this value and only unmapped in Drop; every access to
// frame memory happens under `rx_next` / `tx_next`, so sharing between threads is sound.
unsafe impl Send for Rings {}
// SAFETY: as above.
unsafe impl Sync for Rings {}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings")
            .field("rx", &self.rx)
            .field("tx", &self.tx)
            .finish_non_exhaustive()
    }
}

fn setsockopt<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of exactly the size passed; the kernel copies it.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Rings {
    /// Sets up both rings on the (not yet bound) packet socket `fd` for frames of up to
    /// `max_frame` bytes, and maps them. `fd` must outlive the returned value. `whole`: the
    /// socket has PACKET_COPY_THRESH set; `vnet`: and PACKET_VNET_HDR.
    pub fn new(
        fd: RawFd,
        max_frame: usize,
        with_tx: bool,
        whole: bool,
        vnet: bool,
    ) -> io::Result<Rings> {
        setsockopt(
            fd,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V2 as i32),
        )?;
        // A frame the kernel cannot send is skipped instead of stopping the ring.
        setsockopt(fd, libc::PACKET_LOSS, &1i32)?;
        let frame_size = (RX_HEADROOM + max_frame).next_multiple_of(libc::TPACKET_ALIGNMENT);
        if frame_size > BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame too large",
            ));
        }
        let rx = Geometry::new(0, frame_size, RX_RING_BYTES);
        setsockopt(fd, libc::PACKET_RX_RING, &rx.request())?;
        let tx = with_tx.then(|| Geometry::new(rx.bytes(), frame_size, TX_RING_BYTES));
        if let Some(tx) = &tx {
            setsockopt(fd, libc::PACKET_TX_RING, &tx.request())?;
        }
        let len = rx.bytes() + tx.map_or(0, |t| t.bytes());
        // SAFETY: maps the socket's rings (receive first, then transmit, as the kernel
        // lays them out); the result is checked before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Rings {
            fd,
            map: NonNull::new(map.cast()).expect("mmap returned null"),
            len,
            rx,
            tx,
            rx_next: Mutex::new(RxState {
                next: 0,
                copy: if whole {
                    vec![0; COPY_FRAME]
                } else {
                    Vec::new()
                },
            }),
            tx_next: Mutex::new(0),
            truncated: Default::default(),
            whole,
            vnet,
        })
    }

    /// Whether frames are sent through a ring too.
    pub fn has_tx(&self) -> bool {
        self.tx.is_some()
    }

    /// Frames dropped because they did not fit a ring frame.
    pub fn truncated(&self) -> u64 {
        self.truncated.load(Ordering::Relaxed)
    }

    /// The status word of the frame at `offset`.
    fn status(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is a frame start inside the mapping (Geometry::offset), 16-byte
        // aligned, and tp_status is the frame's first u32; the kernel accesses it
        // atomically too (READ_ONCE/WRITE_ONCE with barriers).
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The tpacket2 header of the frame at `offset`, copied out. Only valid while user
    /// space owns the frame.
    fn header(&self, offset: usize) -> libc::tpacket2_hdr {
        // SAFETY: the header lies inside the mapping at a 16-byte aligned frame start; user
        // space owns the frame (checked by the caller), so the kernel does not write it.
        unsafe { std::ptr::read_volatile(self.map.as_ptr().add(offset).cast()) }
    }

    /// Whether a received frame is waiting (one load; no system call).
    pub fn rx_ready(&self) -> bool {
        let next = self.rx_next.lock().expect("rx ring lock").next;
        self.status(self.rx.offset(next)).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Hands up to `max` received frames to `f`, in arrival order and in place, with their
    /// virtio-net header ([`VnetHdr::NONE`] without one), and gives their slots back to the
    /// kernel. `f` may change the frame (it is this process's until then). A frame larger
    /// than a ring frame is read from the socket's queue, where the kernel put it whole
    /// (with PACKET_COPY_THRESH), or else skipped and counted. Returns how many frames
    /// were taken from the ring.
    pub fn recv_each(&self, max: usize, f: &mut dyn FnMut(&mut [u8], VnetHdr)) -> usize {
        let mut rx = self.rx_next.lock().expect("rx ring lock");
        let mut taken = 0;
        while taken < max {
            let off = self.rx.offset(rx.next);
            let status = self.status(off);
            let st = status.load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            let h = self.header(off);
            let mac = usize::from(h.tp_mac);
            let len = h.tp_snaplen as usize;
            if self.whole && st & libc::TP_STATUS_COPY != 0 {
                match self.recv_copy(&mut rx.copy) {
                    Some(n) => {
                        let (hdr, frame) = rx.copy[..n].split_at_mut(self.vnet_len());
                        f(frame, VnetHdr::decode(hdr).unwrap_or_default());
                    }
                    None => {
                        self.truncated.fetch_add(1, Ordering::Relaxed);
                    }
                }
            } else if h.tp_len as usize > len
                || mac + len > self.rx.frame_size
                || mac < self.vnet_len()
            {
                self.truncated.fetch_add(1, Ordering::Relaxed);
            } else {
                let at = mac - self.vnet_len();
                // SAFETY: [off + at, off + mac + len) lies inside this frame (checked just
                // above) and user space owns the frame until the store below, after `f`
                // has returned and the slice is gone; nothing else refers to it meanwhile.
                let bytes = unsafe {
                    std::slice::from_raw_parts_mut(self.map.as_ptr().add(off + at), mac - at + len)
                };
                let (hdr, frame) = bytes.split_at_mut(mac - at);
                f(frame, VnetHdr::decode(hdr).unwrap_or_default());
            }
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            rx.next = (rx.next + 1) % self.rx.frames;
            taken += 1;
        }
        taken
    }

    /// Reads the frame the kernel queued on the socket because it did not fit a ring frame
    /// (TP_STATUS_COPY), virtio-net header (if any) first; its length, `None` if there was
    /// none or it did not fit `buf`.
    fn recv_copy(&self, buf: &mut [u8]) -> Option<usize> {
        loop {
            // SAFETY: `buf` is writable for its length; no address is asked for.
            let ret = unsafe {
                libc::recv(
                    self.fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if ret < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let n = usize::try_from(ret).ok()?;
            return (n >= self.vnet_len() && n <= buf.len()).then_some(n);
        }
    }

    /// Bytes of virtio-net header in front of each frame.
    fn vnet_len(&self) -> usize {
        if self.vnet {
            vnet::LEN
        } else {
            0
        }
    }

    /// Builds up to `max` frames in free transmit slots with `fill` — which writes a frame
    /// into the slot it is given and returns its length, `Some(0)` to produce nothing this
    /// time, `None` when it has nothing more — then asks the kernel to send them. Without
    /// a transmit ring ([`Rings::has_tx`]) nothing is sent.
    pub fn send_each(
        &self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> TxOutcome {
        let mut out = TxOutcome::default();
        let Some(tx) = self.tx else {
            return out;
        };
        let mut next = self.tx_next.lock().expect("tx ring lock");
        while out.filled < max {
            let off = tx.offset(*next);
            let status = self.status(off);
            if status.load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
                out.ring_full = true;
                break;
            }
            let room = tx.frame_size - TX_DATA;
            // SAFETY: the slot's data area lies inside this frame and user space owns the
            // frame (status AVAILABLE) until the SEND_REQUEST store below; the slice ends
            // before that store.
            let slot = unsafe {
                std::slice::from_raw_parts_mut(self.map.as_ptr().add(off + TX_DATA), room)
            };
            let Some(len) = fill(slot) else { break };
            out.filled += 1;
            if len == 0 {
                continue;
            }
            let tp_len = self.map.as_ptr().wrapping_add(off + 4).cast::<u32>();
            // SAFETY: tp_len is the header's second u32, inside the user-owned frame.
            unsafe { std::ptr::write_volatile(tp_len, len.min(room) as u32) };
            status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            *next = (*next + 1) % tx.frames;
            out.queued += 1;
        }
        if out.queued > 0 || out.ring_full {
            if let Err(e) = self.flush() {
                // The frames stay in the ring for the next flush; until then they count
                // as the link's failures.
                tracing::debug!(error = %e, "send failed");
                out.refused = out.queued;
                out.queued = 0;
            }
        }
        out
    }

    /// Asks the kernel to send every frame marked for sending, without waiting.
    fn flush(&self) -> io::Result<()> {
        loop {
            // SAFETY: a send(2) with no buffer: the kernel reads the frames from the ring.
            let ret = unsafe { libc::send(self.fd, std::ptr::null(), 0, libc::MSG_DONTWAIT) };
            if ret >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The socket's send budget is spent: the frames stay queued in the ring
                // and leave with the next flush.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => return Ok(()),
                _ => return Err(e),
            }
        }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference into it outlives
        // `self` (slices handed out never escape the callbacks).
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_never_straddle_blocks() {
        for mtu in [1500usize, 4200, 9000] {
            let g = Geometry::new(0, (RX_HEADROOM + mtu + 18).next_multiple_of(16), 8 << 20);
            assert!(g.frames > 0);
            for i in [0, g.frames_per_block - 1, g.frames_per_block, g.frames - 1] {
                let o = g.offset(i);
                assert_eq!(
                    o / BLOCK,
                    (o + g.frame_size - 1) / BLOCK,
                    "frame {i} at {o}"
                );
                assert_eq!(o % 16, 0);
            }
            assert!(g.offset(g.frames - 1) + g.frame_size <= g.bytes());
        }
    }
}

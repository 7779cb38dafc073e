//! An AF_PACKET raw socket on one network interface, filtered in the kernel to RoCE v2.
//!
//! The socket is created with protocol 0 (it receives nothing), gets the BPF filter, and
//! only then is bound to the interface with ETH_P_ALL, so no unfiltered frame is ever queued.
//! Frames then move through PACKET_MMAP rings ([`Rings`]) where the kernel allows, else
//! through recvmmsg/sendmmsg.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::bpf::SockFilter;
use super::gso::Run;
use super::packet_ring::Rings;
use super::vnet::{self, VnetHdr};
use super::{Packed, Piece, TAIL};

/// Which PACKET_MMAP rings a socket asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingUse {
    /// Plain recvmmsg/sendmmsg, no ring.
    None,
    /// A receive ring; sends with sendmmsg.
    Rx,
    /// Receive and transmit rings.
    Both,
}

fn attach_filter(fd: RawFd, filter: &[SockFilter]) -> io::Result<()> {
    const _: () =
        assert!(std::mem::size_of::<SockFilter>() == std::mem::size_of::<libc::sock_filter>());
    let len = u16::try_from(filter.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "socket filter too long"))?;
    let prog = libc::sock_fprog {
        len,
        // The kernel only reads the program; SockFilter has sock_filter's layout.
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
}

/// A non-blocking raw Ethernet socket bound to one interface.
#[derive(Debug)]
pub struct RawSocket {
    /// Declared before `fd`: unmapped before the socket closes.
    rings: Option<Rings>,
    fd: OwnedFd,
    ifindex: u32,
    /// Every frame in and out carries a virtio-net header (PACKET_VNET_HDR).
    vnet: bool,
    /// Frames received without a ring that were longer than the buffer given for them (a
    /// super-frame at a peer that has no ring to split it in): dropped, not handed on cut
    /// short, where they failed to parse and were counted as malformed.
    truncated: AtomicU64,
}

/// `PACKET_VNET_HDR` and `PACKET_COPY_THRESH` (linux/if_packet.h).
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_COPY_THRESH: libc::c_int = 7;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, Linux 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Asks for a [`SOCKET_BUFFER`] buffer: through `force` (past net.core.[rw]mem_max, with
/// CAP_NET_ADMIN), else through `plain` (capped there); best effort.
pub(super) fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int) {
    if setsockopt(fd, libc::SOL_SOCKET, force, &SOCKET_BUFFER).is_err() {
        let _ = setsockopt(fd, libc::SOL_SOCKET, plain, &SOCKET_BUFFER);
    }
}

pub(super) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of exactly the size passed; the kernel copies it.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(ret).map(|_| ())
}

/// PACKET_IGNORE_OUTGOING on `fd`: see [`RawSocket::set_ignore_outgoing`].
fn set_ignore_outgoing(fd: RawFd, ignore: bool) -> io::Result<()> {
    setsockopt(
        fd,
        libc::SOL_PACKET,
        PACKET_IGNORE_OUTGOING,
        &i32::from(ignore),
    )
}

/// A new non-blocking, close-on-exec AF_PACKET raw socket, bound to nothing yet.
fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds packet socket `fd` to interface `ifindex` for `protocol` (network byte order;
/// 0: the socket receives nothing).
fn bind_interface(fd: RawFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
    check(unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Requested receive and send buffer size (the kernel doubles it for bookkeeping).
pub(super) const SOCKET_BUFFER: i32 = 16 << 20;

impl RawSocket {
    /// Opens a raw socket on interface `ifindex` that receives the frames `filter` accepts
    /// (see [`super::bpf::roce_filter`]), of up to `max_frame` bytes. With `rings`, frames
    /// move through PACKET_MMAP rings when the kernel grants them; with a receive ring and
    /// no transmit ring, super-frames larger than a ring frame come through the socket's
    /// queue instead of being cut short. With `vnet` (only then), every frame carries a
    /// virtio-net header if the kernel allows it ([`RawSocket::has_vnet`]).
    pub fn open(
        ifindex: u32,
        max_frame: usize,
        rings: RingUse,
        filter: &[SockFilter],
        vnet: bool,
    ) -> io::Result<RawSocket> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        attach_filter(raw, filter)?;
        // Outgoing frames are ignored until a QP of this process talks to this host (see
        // `set_ignore_outgoing`): each one shown to the socket is a clone and a filter run
        // in the sender's system call. A kernel without the option (before 4.20) shows
        // them all, and the filter drops them.
        if let Err(e) = set_ignore_outgoing(raw, true) {
            tracing::debug!(error = %e, "outgoing frames cannot be ignored");
        }
        // Room for bursts: a 64 KiB message at MTU 1024 is 64 frames, and a peer may have
        // 128 of them (or a 4 MiB READ response) in flight. SO_RCVBUF is capped at
        // net.core.rmem_max (often 208 KiB, ~190 frames); with CAP_NET_ADMIN the FORCE
        // variants are not.
        set_buffer(raw, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
        set_buffer(raw, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);

        // Before the rings, which fix the frame layout. A frame too large for a ring frame
        // is queued whole on the socket (the ring slot says TP_STATUS_COPY).
        // Without a virtio-net header too (Linux before 6.2): a super-frame sent through
        // a peer's UDP socket arrives whole all the same, and is split by its length.
        let whole = rings == RingUse::Rx
            && setsockopt(raw, libc::SOL_PACKET, PACKET_COPY_THRESH, &1i32).is_ok();
        let vnet = vnet
            && whole
            && setsockopt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &1i32)
                .map_err(|e| tracing::debug!(error = %e, "no virtio-net header"))
                .is_ok();
        // Rings are set up before bind, so the first frame already lands in one.
        let rings = if rings != RingUse::None {
            Rings::new(raw, max_frame, rings == RingUse::Both, whole, vnet)
                .map_err(|e| tracing::debug!(error = %e, "no PACKET_MMAP rings; using recvmmsg/sendmmsg"))
                .ok()
        } else {
            None
        };

        bind_interface(raw, ifindex, (libc::ETH_P_ALL as u16).to_be())?;
        if vnet && rings.is_none() {
            return Err(io::Error::other(
                "a virtio-net header needs the receive ring",
            ));
        }
        Ok(RawSocket {
            rings,
            fd,
            ifindex,
            vnet,
            truncated: AtomicU64::new(0),
        })
    }

    /// Opens a socket on interface `ifindex` that only sends, each frame behind a
    /// virtio-net header, so that the header's `hdr_len` can put a whole frame in the skb's
    /// linear head (`FERROCE_GSO=linear`). For kernels before 6.2, where the receiving
    /// socket goes without the header (with it they drop received UDP super-frames).
    /// Bound with protocol 0, so the kernel hands it no frames and runs no filter for it.
    pub fn open_sender(ifindex: u32) -> io::Result<RawSocket> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        set_buffer(raw, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
        setsockopt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &1i32)?;
        bind_interface(raw, ifindex, 0)?;
        Ok(RawSocket {
            rings: None,
            fd,
            ifindex,
            vnet: true,
            truncated: AtomicU64::new(0),
        })
    }

    /// Sets whether the kernel hides from the socket the frames other sockets of this host
    /// send on the interface (PACKET_IGNORE_OUTGOING). Frames another process on this host
    /// sends to the interface's own address reach this one only while they are not hidden.
    pub fn set_ignore_outgoing(&self, ignore: bool) -> io::Result<()> {
        set_ignore_outgoing(self.fd.as_raw_fd(), ignore)
    }

    /// Whether the kernel currently hides outgoing frames from the socket (read back from
    /// the kernel, so `--stats` shows what is, not what was asked); `false` on a kernel
    /// without the option.
    pub fn ignores_outgoing(&self) -> bool {
        let mut v: i32 = 0;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: `v` is a writable i32 and `len` holds its exact size.
        let ret = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                (&mut v as *mut i32).cast(),
                &mut len,
            )
        };
        ret == 0 && v != 0
    }

    /// Joins or leaves multicast MAC address `mac` on the socket's interface
    /// (PACKET_ADD_MEMBERSHIP): while joined, the NIC takes frames sent to it in. The
    /// kernel keeps the membership with the socket and drops it when the socket closes,
    /// so a process that dies leaves none behind.
    pub fn set_multicast_membership(&self, mac: [u8; 6], member: bool) -> io::Result<()> {
        let mut address = [0u8; 8];
        address[..6].copy_from_slice(&mac);
        let mreq = libc::packet_mreq {
            mr_ifindex: self.ifindex as libc::c_int,
            mr_type: libc::PACKET_MR_MULTICAST as libc::c_ushort,
            mr_alen: 6,
            mr_address: address,
        };
        let opt = if member {
            libc::PACKET_ADD_MEMBERSHIP
        } else {
            libc::PACKET_DROP_MEMBERSHIP
        };
        setsockopt(self.fd.as_raw_fd(), libc::SOL_PACKET, opt, &mreq)
    }

    /// Replaces the socket's filter; the kernel swaps it atomically, so no frame is judged
    /// by neither program.
    pub fn set_filter(&self, filter: &[SockFilter]) -> io::Result<()> {
        attach_filter(self.fd.as_raw_fd(), filter)
    }

    /// Frames the kernel dropped because the receive buffer was full since the last call
    /// (PACKET_STATISTICS, which resets on reading).
    pub fn take_drops(&self) -> io::Result<u64> {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` is a writable tpacket_stats and `len` holds its exact size.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        })?;
        Ok(u64::from(st.tp_drops))
    }

    /// Frames received without a ring that did not fit their buffer and were dropped.
    pub fn truncated(&self) -> u64 {
        self.truncated.load(Ordering::Relaxed)
    }

    /// The socket's PACKET_MMAP rings, if it has them.
    pub fn rings(&self) -> Option<&Rings> {
        self.rings.as_ref()
    }

    /// Whether frames carry a virtio-net header ([`super::vnet`]).
    pub fn has_vnet(&self) -> bool {
        self.vnet
    }

    /// Reads and clears the error the kernel left on the socket (SO_ERROR), if any:
    /// ENETDOWN when the interface went down or away. Until it is read, poll(2) reports
    /// the socket ready (POLLERR) however often it is asked, with nothing to receive.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        Ok(rustix::net::sockopt::socket_error(&self.fd)?
            .err()
            .map(|e| io::Error::from_raw_os_error(e.raw_os_error())))
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends one Ethernet frame. `Ok(false)` when the socket buffer is full (try later).
    pub fn send(&self, frame: &[u8]) -> io::Result<bool> {
        let none = VnetHdr::NONE.encode();
        let mut iov = [
            libc::iovec {
                iov_base: none.as_ptr() as *mut libc::c_void,
                iov_len: none.len(),
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        let skip = usize::from(!self.vnet);
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov[skip..].as_mut_ptr();
        msg.msg_iovlen = 2 - skip;
        // SAFETY: `msg` points to one or two iovecs over live buffers (the header and
        // `frame`) that the kernel only reads.
        let ret = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
        if ret < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(false),
                _ => Err(e),
            };
        }
        Ok(true)
    }

    /// Receives one frame into `buf`; `Ok(None)` when nothing is queued. A frame longer
    /// than `buf` is dropped and counted ([`RawSocket::truncated`]): `Ok(Some(0))`.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` is writable for its length; `from`/`len` describe a valid buffer.
            let ret = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    // The frame's own length, however much of it fits.
                    libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if ret < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            if ret as usize > buf.len() {
                self.truncated.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(0));
            }
            return Ok(Some(ret as usize));
        }
    }
}

/// Most frames one `recv_many` / `send_many` call moves.
pub const MAX_BATCH: usize = 128;

/// The recvmmsg/sendmmsg(2) headers for [`MAX_BATCH`] frame slots of one buffer, built
/// once (they point into boxes that never move): zeroing 6 KiB of headers on every call
/// was 14% of all samples of a 2-byte latency run in the rxe VM. A call only rewrites
/// what the kernel or the other direction changes: lengths and the address fields.
pub struct MmsgHeaders {
    iov: Box<[libc::iovec; MAX_BATCH]>,
    /// Transmit with virtio-net headers: each message's header, then its pieces (at most
    /// two per frame: see [`super::Packed::pieces`]).
    tx_iov: Box<[libc::iovec; 3 * MAX_BATCH]>,
    vnet: Box<[[u8; vnet::LEN]; MAX_BATCH]>,
    from: Box<[libc::sockaddr_ll; MAX_BATCH]>,
    msgs: Box<[libc::mmsghdr; MAX_BATCH]>,
    /// Start and slot size of the buffer the headers point into.
    base: *mut u8,
    slot: usize,
    slots: usize,
}

// SAFETY: the raw pointers only refer to the heap buffers owned by this value and by the
// `FrameBatch` that owns it together with the frame buffer; they are only dereferenced by
// the kernel during a call made through `&mut self` (receive) or `&self` while the owner
// is borrowed (send), so moving the value between threads is sound.
unsafe impl Send for MmsgHeaders {}

impl MmsgHeaders {
    /// Headers for `data`, split into slots of `slot` bytes (at most [`MAX_BATCH`]).
    /// `data` must stay where it is for as long as the headers are used.
    pub fn new(data: &mut [u8], slot: usize) -> MmsgHeaders {
        // SAFETY: plain old data; all-zero is a valid value for each array.
        let mut h = unsafe {
            MmsgHeaders {
                iov: Box::new(std::mem::zeroed()),
                tx_iov: Box::new(std::mem::zeroed()),
                vnet: Box::new([[0; vnet::LEN]; MAX_BATCH]),
                from: Box::new(std::mem::zeroed()),
                msgs: Box::new(std::mem::zeroed()),
                base: data.as_mut_ptr(),
                slot,
                slots: (data.len() / slot.max(1)).min(MAX_BATCH),
            }
        };
        for i in 0..h.slots {
            h.iov[i] = libc::iovec {
                // SAFETY: slot `i` lies inside `data` (i < data.len() / slot).
                iov_base: unsafe { h.base.add(i * slot) }.cast(),
                iov_len: slot,
            };
            h.msgs[i].msg_hdr.msg_iov = &mut h.iov[i];
            h.msgs[i].msg_hdr.msg_iovlen = 1;
        }
        h
    }
}

impl RawSocket {
    /// Receives up to `lens.len()` frames with one recvmmsg(2) into the slots `headers`
    /// describe (the caller's `data`, which the caller holds mutably); frame `i`'s length
    /// goes to `lens[i]`. Returns how many arrived (0: none queued). Our own outgoing
    /// frames (kernels without PACKET_IGNORE_OUTGOING) come back with length 0.
    pub fn recv_many(
        &self,
        data: &mut [u8],
        headers: &mut MmsgHeaders,
        lens: &mut [usize],
    ) -> io::Result<usize> {
        assert!(
            std::ptr::eq(data.as_mut_ptr(), headers.base)
                && data.len() >= headers.slots * headers.slot
        );
        let n = lens.len().min(headers.slots);
        if n == 0 {
            return Ok(0);
        }
        for i in 0..n {
            headers.iov[i].iov_len = headers.slot;
            let m = &mut headers.msgs[i];
            m.msg_hdr.msg_iov = &mut headers.iov[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (&mut headers.from[i] as *mut libc::sockaddr_ll).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            m.msg_hdr.msg_flags = 0;
        }
        let ret = loop {
            // SAFETY: `msgs[..n]` point to `n` iovecs over disjoint, writable slots of
            // `data` (checked above to be the buffer the headers were built for, borrowed
            // mutably for the call) and to `n` sockaddr_ll buffers.
            let ret = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    headers.msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if ret >= 0 {
                break ret as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        };
        for (i, len) in lens.iter_mut().enumerate().take(ret) {
            let m = &headers.msgs[i];
            *len = if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                // Cut short: dropped here (an empty frame), counted.
                self.truncated.fetch_add(1, Ordering::Relaxed);
                0
            } else {
                m.msg_len as usize
            };
        }
        Ok(ret)
    }

    /// Sends the first `lens.len()` slots of `data` (frame `i` is `lens[i]` bytes) with one
    /// sendmmsg(2) through `headers`; returns how many the kernel took (0 when the socket
    /// buffer is full).
    pub fn send_many(
        &self,
        data: &[u8],
        headers: &mut MmsgHeaders,
        lens: &[usize],
    ) -> io::Result<usize> {
        self.send_slots(data, headers, lens, 0)
    }

    /// [`RawSocket::send_many`] of the slots from `first` on: frame `first + i` is
    /// `lens[i]` bytes.
    pub fn send_slots(
        &self,
        data: &[u8],
        headers: &mut MmsgHeaders,
        lens: &[usize],
        first: usize,
    ) -> io::Result<usize> {
        assert!(
            std::ptr::eq(data.as_ptr(), headers.base) && data.len() >= headers.slots * headers.slot
        );
        let n = lens.len().min(headers.slots.saturating_sub(first));
        if n == 0 {
            return Ok(0);
        }
        for (i, &len) in lens.iter().enumerate().take(n) {
            headers.iov[first + i].iov_len = len.min(headers.slot);
            let m = &mut headers.msgs[i];
            m.msg_hdr.msg_iov = &mut headers.iov[first + i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = std::ptr::null_mut();
            m.msg_hdr.msg_namelen = 0;
        }
        // SAFETY: `msgs[..n]` point to iovecs over slots of `data` (checked above to be the
        // buffer the headers were built for), which the kernel only reads.
        unsafe { self.sendmmsg(headers, n) }
    }

    /// Sends the frames of `data` (frame `i` is `lens[i]` bytes of slot `i`) as the
    /// messages `runs` describe, each with its virtio-net header: a run of one frame as it
    /// is, a longer one as one super-frame made of the first frame (whose headers
    /// [`super::gso::plan`] rewrote) and the payloads of the others. Returns how many
    /// frames went (0 when the socket buffer is full); an error if the first message was
    /// refused.
    pub fn send_runs(
        &self,
        data: &[u8],
        headers: &mut MmsgHeaders,
        lens: &[usize],
        layout: Packed<'_>,
        runs: &[Run],
    ) -> io::Result<usize> {
        assert!(
            self.vnet
                && std::ptr::eq(data.as_ptr(), headers.base)
                && data.len() >= headers.slots * headers.slot
                && lens.len() <= headers.slots
                && layout.offsets.len() >= lens.len()
                && layout.tails.len() >= lens.len()
                && layout.aside.len() >= lens.len()
                && runs.len() <= lens.len()
        );
        let mut at = 0;
        for (m, run) in runs.iter().enumerate() {
            headers.vnet[m] = run.vnet.encode();
            let first_iov = at;
            headers.tx_iov[at] = libc::iovec {
                iov_base: headers.vnet[m].as_mut_ptr().cast(),
                iov_len: vnet::LEN,
            };
            at += 1;
            let tx_iov = &mut headers.tx_iov;
            let base = headers.base;
            layout.pieces(lens, run, &mut |p| {
                tx_iov[at] = match p {
                    Piece::Data { start, end } => {
                        assert!(start < end && end <= data.len());
                        libc::iovec {
                            // SAFETY: `start..end` lies inside `data` (checked just above),
                            // which starts at `base`.
                            iov_base: unsafe { base.add(start) }.cast(),
                            iov_len: end - start,
                        }
                    }
                    Piece::Tail { frame, from } => {
                        let tail = &layout.tails[frame][from.min(TAIL)..];
                        libc::iovec {
                            iov_base: tail.as_ptr() as *mut libc::c_void,
                            iov_len: tail.len(),
                        }
                    }
                };
                at += 1;
            });
            let msg = &mut headers.msgs[m].msg_hdr;
            msg.msg_iov = &mut headers.tx_iov[first_iov];
            msg.msg_iovlen = at - first_iov;
            msg.msg_name = std::ptr::null_mut();
            msg.msg_namelen = 0;
        }
        // SAFETY: `msgs[..runs.len()]` point to iovecs over the message headers in
        // `headers.vnet`, over parts of `data` (checked above to be the buffer the headers
        // were built for) and over `layout.tails`, all borrowed for this call; the kernel
        // only reads them. Runs cover disjoint frames, so at most one header and two
        // pieces per frame: `at <= 3 * MAX_BATCH`.
        let sent = unsafe { self.sendmmsg(headers, runs.len())? };
        Ok(runs[..sent].iter().map(|r| r.count).sum())
    }

    /// sendmmsg(2) of the first `n` messages of `headers`; how many the kernel took (0
    /// when the socket buffer is full).
    ///
    /// # Safety
    /// Each of those messages must point to iovecs over live, readable memory.
    unsafe fn sendmmsg(&self, headers: &mut MmsgHeaders, n: usize) -> io::Result<usize> {
        loop {
            // SAFETY: the caller vouches for the messages' buffers.
            let ret = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    headers.msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    0,
                )
            };
            if ret >= 0 {
                return Ok(ret as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }
}

impl AsRawFd for RawSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

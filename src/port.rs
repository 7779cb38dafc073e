//! Where frames go in and out: a real interface (AF_PACKET) or an in-memory wire.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::driver::MAX_FRAME;
use crate::net::af_packet::{MmsgHeaders, RawSocket, RingUse, MAX_BATCH};
use crate::net::eventfd::EventFd;
use crate::net::interface::Interface;
use crate::net::neigh;
use crate::net::packet_ring::Rings;
use crate::net::port_guard::PortGuard;

/// A link that carries Ethernet frames.
pub trait Port: Send + Sync + 'static {
    /// The port's own MAC address.
    fn mac(&self) -> [u8; 6];
    /// Sends one frame; `Ok(false)` when the link is momentarily full.
    fn send(&self, frame: &[u8]) -> io::Result<bool>;
    /// Receives one frame into `buf`, `Ok(None)` when none is queued.
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// A descriptor that polls readable when frames are queued.
    fn fd(&self) -> RawFd;
    /// The MAC address to send packets for `ip` to.
    fn resolve(&self, ip: IpAddr, timeout: Duration) -> Result<[u8; 6], neigh::ResolveError>;
    /// Frames the link dropped on receive (a full socket buffer) since the port opened.
    fn rx_drops(&self) -> u64 {
        0
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

/// [`Port::recv_each`] through `batch` and [`Port::recv_batch`].
fn recv_each_batched<P: Port + ?Sized>(
    port: &P,
    batch: &mut FrameBatch,
    f: &mut dyn FnMut(&[u8]),
) -> io::Result<usize> {
    let n = port.recv_batch(batch)?;
    for i in 0..n {
        f(batch.frame(i));
    }
    Ok(n)
}

/// [`Port::send_each`] through `batch` and [`Port::send_batch`].
fn send_each_batched<P: Port + ?Sized>(
    port: &P,
    batch: &mut FrameBatch,
    max: usize,
    fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
) -> TxOutcome {
    let mut out = TxOutcome::default();
    let mut more = true;
    while more && out.filled < max {
        batch.clear();
        while out.filled < max && batch.len() < batch.capacity() {
            let i = batch.len();
            let Some(len) = fill(batch.slot_mut(i)) else {
                more = false;
                break;
            };
            out.filled += 1;
            if len > 0 {
                batch.push(len);
            }
        }
        if batch.is_empty() {
            continue;
        }
        let sent = port.send_batch(batch).unwrap_or_else(|e| {
            tracing::debug!(error = %e, "send failed");
            0
        });
        out.queued += sent;
        out.refused += batch.len() - sent;
    }
    out
}

/// The smallest slot [`Port::send_each`] hands out: an Ethernet header and the largest
/// datagram the transport emits.
pub const MIN_SLOT: usize = 14 + ferroce_transport::MAX_DATAGRAM_LEN;

/// What one [`Port::send_each`] call did.
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

/// Frame buffers for moving several frames per system call: `capacity` slots of
/// [`MAX_FRAME`] bytes, the first `len()` holding frames.
pub struct FrameBatch {
    data: Vec<u8>,
    lens: Vec<usize>,
    count: usize,
    /// System call headers pointing into `data` (whose heap buffer never moves).
    headers: MmsgHeaders,
}

impl FrameBatch {
    pub fn new(capacity: usize) -> FrameBatch {
        let capacity = capacity.min(MAX_BATCH);
        let mut data = vec![0; capacity * MAX_FRAME];
        let headers = MmsgHeaders::new(&mut data, MAX_FRAME);
        FrameBatch {
            data,
            lens: vec![0; capacity],
            count: 0,
            headers,
        }
    }
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }
    /// Frames held.
    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    pub fn clear(&mut self) {
        self.count = 0;
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
        self.count += 1;
    }
}

/// A real interface: AF_PACKET raw socket plus the UDP port guard.
#[derive(Debug)]
pub struct PacketPort {
    iface: Interface,
    socket: RawSocket,
    _guards: Vec<PortGuard>,
    /// Receive drops read so far (the kernel's counter resets on reading).
    rx_drops: AtomicU64,
}

/// Why a real port could not be opened.
#[derive(Debug)]
pub enum PortError {
    /// Raw sockets need CAP_NET_RAW.
    Permission,
    /// UDP port 4791 is taken (by rdma_rxe or another RoCE stack) in this namespace.
    PortInUse(IpAddr),
    Io(io::Error),
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortError::Permission => write!(
                f,
                "no permission to open a raw socket: run as root or grant CAP_NET_RAW (sudo setcap cap_net_raw+ep $(which ferroce))"
            ),
            PortError::PortInUse(a) => write!(
                f,
                "UDP port 4791 on {a} is already in use (is the kernel's rdma_rxe or another ferroce running in this network namespace?); stop it or use another namespace"
            ),
            PortError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PortError {}

impl PacketPort {
    /// Opens `iface` for RoCE v2.
    pub fn open(iface: Interface) -> Result<PacketPort, PortError> {
        // Frames up to the interface's MTU, and always room for the largest datagram the
        // transport may build (a 4096-byte IB MTU).
        let max_frame = (iface.mtu as usize + 18).max(MIN_SLOT);
        let rings = match std::env::var("FERROCE_PACKET_RINGS").as_deref() {
            Ok("0") | Ok("none") => RingUse::None,
            Ok("both") => RingUse::Both,
            _ => RingUse::Rx,
        };
        let socket =
            RawSocket::open(iface.index, max_frame, rings).map_err(|e| match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => PortError::Permission,
                _ => PortError::Io(e),
            })?;
        let mut guards = Vec::new();
        for (addr, _) in &iface.addrs {
            if let IpAddr::V6(v6) = addr {
                if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    continue; // binding link-local needs a scope id; nothing routes RoCE there
                }
            }
            match PortGuard::bind(*addr) {
                Ok(g) => guards.push(g),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(PortError::PortInUse(*addr))
                }
                Err(e) => tracing::warn!(%addr, error = %e, "cannot bind UDP 4791 guard"),
            }
        }
        let port = PacketPort {
            iface,
            socket,
            _guards: guards,
            rx_drops: AtomicU64::new(0),
        };
        tracing::info!(iface = %port.iface.name, io = port.io_mode(), "port open");
        Ok(port)
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }
}

impl Port for PacketPort {
    fn mac(&self) -> [u8; 6] {
        self.iface.mac
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        let Some(rings) = self.socket.rings().filter(|r| r.has_tx()) else {
            return self.socket.send(frame);
        };
        let mut once = Some(frame);
        let out = rings.send_each(1, &mut |slot| {
            let f = once.take()?;
            let n = f.len().min(slot.len());
            slot[..n].copy_from_slice(&f[..n]);
            Some(n)
        });
        Ok(out.queued == 1)
    }
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(rings) = self.socket.rings() else {
            return self.socket.recv(buf);
        };
        let mut got = None;
        while got.is_none() {
            let taken = rings.recv_each(1, &mut |f| {
                let n = f.len().min(buf.len());
                buf[..n].copy_from_slice(&f[..n]);
                got = Some(n);
            });
            if taken == 0 {
                break;
            }
        }
        Ok(got)
    }
    fn recv_each(&self, batch: &mut FrameBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        match self.socket.rings() {
            Some(rings) => Ok(rings.recv_each(batch.capacity(), f)),
            None => recv_each_batched(self, batch, f),
        }
    }
    fn send_each(
        &self,
        batch: &mut FrameBatch,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> TxOutcome {
        match self.socket.rings().filter(|r| r.has_tx()) {
            Some(rings) => rings.send_each(max, fill),
            None => send_each_batched(self, batch, max, fill),
        }
    }
    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
    fn resolve(&self, ip: IpAddr, timeout: Duration) -> Result<[u8; 6], neigh::ResolveError> {
        neigh::resolve(self.iface.index, &self.iface.name, ip, timeout)
    }
    fn recv_batch(&self, batch: &mut FrameBatch) -> io::Result<usize> {
        let b = batch;
        let n = self
            .socket
            .recv_many(&mut b.data, &mut b.headers, &mut b.lens)?;
        b.count = n;
        Ok(n)
    }
    fn send_batch(&self, batch: &mut FrameBatch) -> io::Result<usize> {
        let b = batch;
        let n = b.count;
        self.socket.send_many(&b.data, &mut b.headers, &b.lens[..n])
    }
    fn io_mode(&self) -> &'static str {
        match self.socket.rings() {
            Some(r) if r.has_tx() => "rx=ring tx=ring",
            Some(_) => "rx=ring tx=sendmmsg",
            None => "rx=recvmmsg tx=sendmmsg",
        }
    }
    fn rx_drops(&self) -> u64 {
        let new = self.socket.take_drops().unwrap_or(0);
        let truncated = self.socket.rings().map_or(0, Rings::truncated);
        self.rx_drops.fetch_add(new, Ordering::Relaxed) + new + truncated
    }
}

/// One end of an in-memory wire: frames sent on one end queue at the other.
pub struct MemoryPort {
    mac: [u8; 6],
    inbox: Arc<Inbox>,
    peer: Arc<Inbox>,
    /// IP address to MAC address of every end on the wire.
    neighbours: Arc<Mutex<HashMap<IpAddr, [u8; 6]>>>,
}

struct Inbox {
    frames: Mutex<VecDeque<Vec<u8>>>,
    ready: EventFd,
}

/// Frames queued per direction before the wire drops (like a full NIC ring).
const MEMORY_QUEUE: usize = 4096;

impl MemoryPort {
    /// Two ends of a wire, with the given MACs and the IP addresses each end owns.
    pub fn pair(
        a: ([u8; 6], &[IpAddr]),
        b: ([u8; 6], &[IpAddr]),
    ) -> io::Result<(MemoryPort, MemoryPort)> {
        let ia = Arc::new(Inbox {
            frames: Mutex::new(VecDeque::new()),
            ready: EventFd::new()?,
        });
        let ib = Arc::new(Inbox {
            frames: Mutex::new(VecDeque::new()),
            ready: EventFd::new()?,
        });
        let mut n = HashMap::new();
        for ip in a.1 {
            n.insert(*ip, a.0);
        }
        for ip in b.1 {
            n.insert(*ip, b.0);
        }
        let n = Arc::new(Mutex::new(n));
        Ok((
            MemoryPort {
                mac: a.0,
                inbox: ia.clone(),
                peer: ib.clone(),
                neighbours: n.clone(),
            },
            MemoryPort {
                mac: b.0,
                inbox: ib,
                peer: ia,
                neighbours: n,
            },
        ))
    }
}

impl Port for MemoryPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        let mut q = self.peer.frames.lock().expect("inbox lock");
        if q.len() < MEMORY_QUEUE {
            q.push_back(frame.to_vec());
        }
        // A full queue drops the frame, as a wire would; retransmission recovers.
        drop(q);
        self.peer.ready.wake();
        Ok(true)
    }
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut q = self.inbox.frames.lock().expect("inbox lock");
        match q.pop_front() {
            Some(f) => {
                let n = f.len().min(buf.len());
                buf[..n].copy_from_slice(&f[..n]);
                Ok(Some(n))
            }
            None => {
                self.inbox.ready.drain();
                Ok(None)
            }
        }
    }
    fn fd(&self) -> RawFd {
        self.inbox.ready.as_raw_fd()
    }
    fn resolve(&self, ip: IpAddr, _timeout: Duration) -> Result<[u8; 6], neigh::ResolveError> {
        self.neighbours
            .lock()
            .expect("neighbour lock")
            .get(&ip)
            .copied()
            .ok_or(neigh::ResolveError::Unreachable {
                ip,
                ifname: "memory".into(),
            })
    }
}

//! A real interface: an AF_PACKET socket (with its PACKET_MMAP ring) that sees the RoCE v2
//! frames, and the UDP 4791 guard that keeps the kernel from answering them.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::af_packet::{RawSocket, RingUse};
use super::bpf::{roce_filter, FilterSpec};
use super::interface::Interface;
use super::oper_state::OperState;
use super::packet_ring::Rings;
use super::share::{LinkUsers, Share};
use super::udp_guard::UdpGuard;
use super::{recv_each_batched, send_each_batched, FrameBatch, Link, TxOutcome, MIN_SLOT};

/// A real interface: AF_PACKET raw socket plus the UDP port guard.
#[derive(Debug)]
pub struct PacketLink {
    iface: Interface,
    socket: RawSocket,
    _guards: Vec<UdpGuard>,
    /// This process's QP number blocks on the interface; `None` if the registry could not
    /// be joined (every frame to any QP is then taken, as by a process alone).
    share: Option<Share>,
    /// Receive drops read so far (the kernel's counter resets on reading).
    rx_drops: AtomicU64,
    /// The interface's state; `None` if rtnetlink could not be joined (the link then
    /// counts as up, as before).
    oper: Option<OperState>,
}

/// Why a real interface could not be opened for RoCE.
#[derive(Debug)]
pub enum LinkError {
    /// Raw sockets need CAP_NET_RAW.
    Permission,
    /// UDP port 4791 is taken (by rdma_rxe or another RoCE stack) in this namespace.
    PortInUse(IpAddr),
    /// Another system error.
    Io(io::Error),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Permission => write!(
                f,
                "no permission to open a raw socket: run as root or grant CAP_NET_RAW (sudo setcap cap_net_raw+ep $(which ferroce))"
            ),
            LinkError::PortInUse(a) => write!(
                f,
                "UDP port 4791 on {a} is already in use (is the kernel's rdma_rxe or another ferroce running in this network namespace?); stop it or use another namespace"
            ),
            LinkError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LinkError {}

impl PacketLink {
    /// Opens `iface` for RoCE v2.
    pub fn open(iface: Interface) -> Result<PacketLink, LinkError> {
        // Frames up to the interface's MTU (but no jumbo beyond what Ethernet carries: lo
        // says 65536), and always room for the largest datagram the transport may build.
        let max_frame = (iface.mtu as usize + 18).clamp(MIN_SLOT, super::MAX_FRAME);
        let rings = match std::env::var("FERROCE_PACKET_RINGS").as_deref() {
            Ok("0") | Ok("none") => RingUse::None,
            Ok("both") => RingUse::Both,
            _ => RingUse::Rx,
        };
        let share = match Share::join(iface.index) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, iface = %iface.name, "cannot join the host's QP number registry; taking frames for every QP (other processes on this interface will not work)");
                None
            }
        };
        let filter = roce_filter(&filter_spec(&iface, share.as_ref()));
        let socket =
            RawSocket::open(iface.index, max_frame, rings, &filter).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::EPERM) | Some(libc::EACCES) => LinkError::Permission,
                    _ => LinkError::Io(e),
                }
            })?;
        let mut guards = Vec::new();
        for (addr, _) in &iface.addrs {
            if let IpAddr::V6(v6) = addr {
                if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    continue; // binding link-local needs a scope id; nothing routes RoCE there
                }
            }
            match UdpGuard::bind(*addr) {
                Ok(g) => guards.push(g),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(LinkError::PortInUse(*addr))
                }
                Err(e) => tracing::warn!(%addr, error = %e, "cannot bind UDP 4791 guard"),
            }
        }
        let oper = OperState::watch(iface.index)
            .map_err(|e| tracing::warn!(error = %e, iface = %iface.name, "cannot watch the interface's state; its port stays ACTIVE"))
            .ok();
        let link = PacketLink {
            oper,
            iface,
            socket,
            _guards: guards,
            share,
            rx_drops: AtomicU64::new(0),
        };
        tracing::info!(iface = %link.iface.name, io = link.io_mode(), "link open");
        Ok(link)
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }
}

/// The socket filter for `iface`: this process's blocks if it shares the interface.
fn filter_spec(iface: &Interface, share: Option<&Share>) -> FilterSpec {
    FilterSpec {
        own_mac: iface.mac,
        outgoing_to_self: !iface.loopback,
        blocks: share.map(Share::blocks),
    }
}

impl Link for PacketLink {
    fn state_fd(&self) -> Option<RawFd> {
        self.oper.as_ref().map(OperState::fd)
    }
    fn is_up(&self) -> bool {
        self.oper.as_ref().is_none_or(OperState::refresh)
    }
    fn qpn_blocks(&self) -> Option<Vec<u16>> {
        self.share.as_ref().map(Share::blocks)
    }
    fn claim_qpn_block(&self) -> io::Result<Option<u16>> {
        let Some(share) = &self.share else {
            return Ok(None);
        };
        let Some(b) = share.claim()? else {
            return Ok(None);
        };
        self.socket
            .set_filter(&roce_filter(&filter_spec(&self.iface, Some(share))))?;
        Ok(Some(b))
    }
    fn report_qps(&self, qps: usize) {
        if let Some(s) = &self.share {
            s.report_qps(qps);
        }
    }
    fn users(&self) -> Option<LinkUsers> {
        self.share.as_ref().and_then(|s| s.users().ok())
    }
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

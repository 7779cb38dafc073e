//! A real interface: an AF_PACKET socket (with its PACKET_MMAP ring) that sees the RoCE v2
//! frames, and the UDP 4791 guard that keeps the kernel from answering them.

use std::collections::BTreeSet;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::af_packet::{RawSocket, RingUse};
use super::bpf::{roce_filter, FilterSpec, Groups};
use super::gso::{GsoOff, GsoState, Received, Run, UdpWhy};
use super::gso_layout::{self, Layout, LayoutChoice};
use super::interface::Interface;
use super::join_pause::JoinPauses;
use super::multicast::multicast_mac;
use super::oper_state::OperState;
use super::packet_ring::Rings;
use super::share::{LinkUsers, Share};
use super::udp_guard::UdpGuard;
use super::udp_segment::{self, UdpSegmentSocket};
use super::vnet::VnetHdr;
use super::{recv_each_batched, send_each_batched, FrameBatch, Link, TxOutcome, MIN_SLOT};
use ferroce_wire::icrc::HeadPatch;

/// UDP-socket way sockets per IPv4 address (each an ephemeral source port): a QP's frames
/// take the one its own source port picks, so QPs still spread over several ports.
pub const UDP_SOCKETS: usize = 8;

/// A real interface: AF_PACKET raw socket plus the UDP port guard.
#[derive(Debug)]
pub struct PacketLink {
    /// What the UDP 4791 guards do with super-frames, for `--stats`.
    guard_mode: &'static str,
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
    /// Whether frames of one flow leave joined into UDP GSO super-frames.
    gso: GsoState,
    /// Whether super-frames go to the kernel in a linear head or in page fragments.
    layout: LayoutChoice,
    /// With `FERROCE_GSO=linear` where the receiving socket has no virtio-net header
    /// (before Linux 6.2): a send-only packet socket with one, for
    /// [`PacketLink::send_batch_linear`].
    linear_tx: Option<RawSocket>,
    /// The UDP-socket way's sockets (`FERROCE_GSO=udp`): [`UDP_SOCKETS`] per IPv4
    /// address, each group bound to one.
    udp_segment: Vec<Vec<UdpSegmentSocket>>,
    /// Why the UDP-socket way was chosen (when its sockets opened, [`GsoState::udp`]).
    udp_way: Option<UdpWhy>,
    gso_counters: GsoCounters,
    /// Destinations frames are not joined toward for now (peers that lost them whole).
    pauses: JoinPauses,
    /// Segments of a super-frame that [`Link::recv`] has not handed out yet.
    pending: Mutex<std::collections::VecDeque<Vec<u8>>>,
    /// Set once [`Link::serve_same_host`] has run: the socket takes in the frames other
    /// processes on this host send (it never goes back; see there).
    serving_same_host: AtomicBool,
    /// A GSI QP runs here: the filter takes QP1's frames too (see [`Link::serve_gsi`]).
    serving_gsi: AtomicBool,
    /// The multicast groups the filter lets in (see [`Link::set_multicast`]); the socket
    /// has joined their MAC addresses.
    multicast: Mutex<BTreeSet<IpAddr>>,
}

/// What the GSO data path did, for `--stats`.
#[derive(Debug, Default)]
struct GsoCounters {
    /// Super-frames sent, and the frames they carried.
    tx_super: AtomicU64,
    tx_super_pkts: AtomicU64,
    /// Super-frames sent with their bytes in one linear head ([`Layout::Linear`]).
    tx_linear: AtomicU64,
    /// Frames sent each in one linear skb (`FERROCE_GSO=linear`).
    linear_tx_pkts: AtomicU64,
    /// Super-frames received and split, the packets they held, and those refused as
    /// malformed (dropped whole).
    rx_super: AtomicU64,
    rx_super_pkts: AtomicU64,
    rx_super_err: AtomicU64,
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
        let filter = roce_filter(&filter_spec(&iface, share.as_ref(), false, Groups::None));
        let socket = RawSocket::open(iface.index, max_frame, rings, &filter, vnet_wanted())
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => LinkError::Permission,
                _ => LinkError::Io(e),
            })?;
        // Without a virtio-net header (Linux before 6.2), only where the interface joins
        // nothing itself (see `UdpGuard::bind`).
        let (whole_super_frames, guard_mode) = if socket.has_vnet() {
            (
                true,
                "takes super-frames whole (virtio-net headers say which frames are)",
            )
        } else if !iface.loopback && super::udp_guard::gro_off(&iface.name) {
            (
                true,
                "takes super-frames whole (GRO is off on the interface: nothing joins packets)",
            )
        } else {
            (false, "has the kernel cut super-frames for it (GRO may join short packets here, which a socket without virtio-net headers cannot tell apart)")
        };
        tracing::debug!(
            iface = %iface.name,
            whole_super_frames,
            "UDP 4791 guard takes super-frames whole (else the kernel cuts them for it)"
        );
        let mut guards = Vec::new();
        for (addr, _) in &iface.addrs {
            if let IpAddr::V6(v6) = addr {
                if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    continue; // binding link-local needs a scope id; nothing routes RoCE there
                }
            }
            match UdpGuard::bind(*addr, whole_super_frames) {
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
        let mut udp_segment = Vec::new();
        let udp_way = super::gso::udp_way(socket.rings().is_some_and(|r| !r.has_tx()))
            .filter(|_| !iface.loopback);
        if udp_way.is_some() {
            for (addr, _) in &iface.addrs {
                if let IpAddr::V4(v4) = addr {
                    let group: io::Result<Vec<_>> = (0..UDP_SOCKETS)
                        .map(|_| UdpSegmentSocket::open(&iface.name, *v4))
                        .collect();
                    match group {
                        Ok(g) => udp_segment.push(g),
                        Err(e) => {
                            tracing::warn!(%addr, error = %e, "no UDP_SEGMENT socket");
                        }
                    }
                }
            }
        }
        let gso = GsoState::new(socket.has_vnet(), !udp_segment.is_empty());
        // Before Linux 6.2 the receiving socket has no virtio-net header, so frames that
        // go one per linear skb leave through a socket of their own.
        let linear_tx = (gso.linear() && !socket.has_vnet())
            .then(|| RawSocket::open_sender(iface.index))
            .and_then(|r| {
                r.map_err(|e| tracing::warn!(error = %e, "FERROCE_GSO=linear: no send-only packet socket with a virtio-net header; frames go as the kernel lays them out"))
                    .ok()
            });
        let link = PacketLink {
            guard_mode,
            linear_tx,
            gso,
            udp_way,
            layout: LayoutChoice::new(gso_layout::fixed_layout()),
            udp_segment,
            gso_counters: GsoCounters::default(),
            pauses: JoinPauses::default(),
            pending: Mutex::default(),
            oper,
            iface,
            socket,
            _guards: guards,
            share,
            rx_drops: AtomicU64::new(0),
            serving_same_host: AtomicBool::new(false),
            serving_gsi: AtomicBool::new(false),
            multicast: Mutex::new(BTreeSet::new()),
        };
        tracing::info!(iface = %link.iface.name, io = link.io_mode(), "link open");
        Ok(link)
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The socket's transmit ring, if frames leave through one (`FERROCE_PACKET_RINGS=both`).
    fn tx_ring(&self) -> Option<&super::packet_ring::Rings> {
        self.socket.rings().filter(|r| r.has_tx())
    }

    /// [`Link::send_batch`] the UDP-socket way: every frame it can take (IPv4 to another
    /// host's unicast address) through the UDP sockets of its source address, runs as
    /// super-packets and the rest one by one, and the others through the packet socket,
    /// in order. A QP's frames all go through one socket, picked by the QP's own UDP source
    /// port, so they share one 5-tuple: an ECMP fabric sends them down one path, in order
    /// (single packets through the packet socket, with the QP's port, could take another
    /// path than its runs and overtake them), and different QPs still spread over
    /// [`UDP_SOCKETS`] source ports. A datagram the kernel refuses is lost, as on a wire,
    /// and turns the way off.
    fn send_batch_udp(&self, b: &mut FrameBatch) -> io::Result<usize> {
        let n = b.count;
        let join = self.pauses.joinable();
        let m = super::gso::plan_udp(
            &b.data,
            &b.offsets[..n],
            &b.lens[..n],
            self.iface.mac,
            &join,
            &mut b.runs,
        );
        // Each run's socket, found once.
        let mut socks = [None; super::af_packet::MAX_BATCH];
        for (r, s) in socks.iter_mut().enumerate().take(m) {
            *s = self.udp_socket_for(b, r);
        }
        let mut sent = 0;
        let mut r = 0;
        while r < m {
            if let Some(s) = socks[r] {
                // The runs after it through the same socket go in the same system call.
                let mut end = r + 1;
                while end < m && end - r < udp_segment::MAX_DATAGRAMS && socks[end] == Some(s) {
                    end += 1;
                }
                match self.send_runs_udp(&self.udp_segment[s.0][s.1], b, r, end) {
                    Ok(done) => {
                        let c = &self.gso_counters;
                        for run in &b.runs[r..r + done] {
                            sent += run.count;
                            if run.count > 1 {
                                c.tx_super.fetch_add(1, Ordering::Relaxed);
                                c.tx_super_pkts
                                    .fetch_add(run.count as u64, Ordering::Relaxed);
                            }
                        }
                        if done < end - r {
                            return Ok(sent);
                        }
                        r = end;
                        continue;
                    }
                    Err(e) => {
                        self.gso.refused(&e);
                        return Ok(sent);
                    }
                }
            }
            // The frames up to the next run that goes through a UDP socket.
            let first = b.runs[r].first;
            let mut end = r + 1;
            while end < m && socks[end].is_none() {
                end += 1;
            }
            let last = b.runs[end - 1];
            let count = last.first + last.count - first;
            let took = if self.socket.has_vnet() {
                let plain = one_by_one(first..first + count, None);
                let (data, headers, lens, frames) = b.send_parts();
                self.socket
                    .send_runs(data, headers, lens, frames, &plain[..count])?
            } else {
                self.socket.send_slots(
                    &b.data,
                    &mut b.headers,
                    &b.lens[first..first + count],
                    first,
                )?
            };
            sent += took;
            if took < count {
                return Ok(sent);
            }
            r = end;
        }
        Ok(sent)
    }

    /// `FERROCE_GSO=linear`: every frame of the batch in one linear skb, through a packet
    /// socket with a virtio-net header whose `hdr_len` is the whole frame. Without one, a
    /// packet socket puts a frame longer than a page (a 4096 MTU's) behind its Ethernet
    /// header in page fragments, and so does the kernel with a UDP super-packet's
    /// segments.
    ///
    /// Why: a receiver that needs each packet linear pays an allocation, its zeroing and a
    /// copy per packet for fragments. rxe does (`rxe_udp_encap_recv` linearizes every
    /// skb), and on a veth it pays inside the sender's own send call. In the rxe VM (Linux
    /// 6.1, qemu TCG) ferroce→rxe 64 KiB WRITEs at MTU 9000 moved more this way than
    /// joined through the UDP-socket way, its default there (README, "Each frame in one
    /// linear skb"). Towards a ferroce, which takes super-frames whole, joining moves far
    /// more, and a sender cannot tell its peers apart: hence a setting, not a default.
    fn send_batch_linear(&self, sock: &RawSocket, b: &mut FrameBatch) -> io::Result<usize> {
        let n = b.count;
        let plain = one_by_one(0..n, Some(&b.lens));
        let (data, headers, lens, frames) = b.send_parts();
        let sent = sock.send_runs(data, headers, lens, frames, &plain[..n])?;
        self.gso_counters
            .linear_tx_pkts
            .fetch_add(sent as u64, Ordering::Relaxed);
        Ok(sent)
    }

    /// The packet socket that sends [`PacketLink::send_batch_linear`]'s frames, if
    /// `FERROCE_GSO=linear` asked for it: the receiving socket where it has a virtio-net
    /// header (Linux 6.2 on), else the send-only one.
    fn linear_socket(&self) -> Option<&RawSocket> {
        if !self.gso.linear() {
            return None;
        }
        self.linear_tx
            .as_ref()
            .or(self.socket.has_vnet().then_some(&self.socket))
    }

    /// The UDP socket (address group, index) that sends run `r` of `b`, if one does: runs
    /// [`super::gso::plan_udp`] joined, and single frames it could have joined (IPv4 to
    /// another host's unicast MAC), from an address with sockets.
    fn udp_socket_for(&self, b: &FrameBatch, r: usize) -> Option<(usize, usize)> {
        let run = b.runs[r];
        let at = run.first * super::MAX_FRAME;
        let f = &b.data[at..at + b.lens[run.first]];
        if run.count == 1 && !super::gso::udp_way_takes(f, self.iface.mac) {
            return None;
        }
        let src = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]);
        let group = self.udp_segment.iter().position(|g| g[0].addr() == src)?;
        // The QP's own source port picks the socket (RoCE v2 spreads QPs over ports).
        let port = u16::from_be_bytes([f[34], f[35]]);
        Some((group, port as usize % self.udp_segment[group].len()))
    }

    /// Rewrites the frames of runs `r..end` into what the kernel will send for them
    /// ([`udp_segment::prepare_segment`]: each run's segments numbered from 0, `sock`'s
    /// port) and sends their payloads through `sock`, a datagram or super-packet per run.
    /// Returns how many runs the kernel took.
    fn send_runs_udp(
        &self,
        sock: &UdpSegmentSocket,
        b: &mut FrameBatch,
        r: usize,
        end: usize,
    ) -> io::Result<usize> {
        let slot = super::MAX_FRAME;
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        // Each frame's UDP payload offset. The frames of a run but its last have the
        // first's length: one patch serves them (and consecutive single frames of one
        // length, such as ACKs).
        let mut offsets = [0usize; super::af_packet::MAX_BATCH];
        let mut patch: Option<HeadPatch> = None;
        for run in &b.runs[r..end] {
            for k in 0..run.count {
                let i = run.first + k;
                let len = b.lens[i] - 14;
                if patch.as_ref().is_none_or(|p| p.len() != len) {
                    patch = Some(HeadPatch::new(len).map_err(|_| einval())?);
                }
                let frame = &mut b.data[i * slot..i * slot + b.lens[i]];
                let p = patch.as_ref().expect("set above");
                offsets[i] = udp_segment::prepare_segment(frame, k as u16, sock.port(), p)
                    .ok_or_else(einval)?;
            }
        }
        let mut iov = [io::IoSlice::new(&[]); super::af_packet::MAX_BATCH];
        let mut at = 0;
        let mut spans = [(0usize, 0usize); udp_segment::MAX_DATAGRAMS];
        for (span, run) in spans.iter_mut().zip(&b.runs[r..end]) {
            *span = (at, run.count);
            let frames = run.first..run.first + run.count;
            for (i, (&offset, &len)) in frames
                .clone()
                .zip(offsets[frames.clone()].iter().zip(&b.lens[frames]))
            {
                iov[at] = io::IoSlice::new(&b.data[i * slot + offset..i * slot + len]);
                at += 1;
            }
        }
        let mut datagrams = Vec::with_capacity(end - r);
        for (&(start, count), run) in spans.iter().zip(&b.runs[r..end]) {
            let f = &b.data[run.first * slot..];
            datagrams.push(udp_segment::Datagram {
                dst: std::net::Ipv4Addr::new(f[30], f[31], f[32], f[33]),
                tos: f[15],
                segment: (count > 1).then(|| (b.lens[run.first] - offsets[run.first]) as u16),
                payload: &iov[start..start + count],
            });
        }
        sock.send_many(&datagrams)
    }

    /// Hands a received frame to `f`, or, for a UDP super-frame, each of its segments.
    fn deliver(&self, frame: &mut [u8], vnet: VnetHdr, f: &mut dyn FnMut(&[u8])) {
        let c = &self.gso_counters;
        match super::gso::split_received(frame, vnet, f) {
            Received::Frame => {}
            Received::Split(n) => {
                c.rx_super.fetch_add(1, Ordering::Relaxed);
                c.rx_super_pkts.fetch_add(n as u64, Ordering::Relaxed);
            }
            Received::Malformed => {
                c.rx_super_err.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Whether to ask for the virtio-net header: from Linux 6.2 on, where packet sockets both
/// report UDP super-frames (older kernels drop them from a socket with the header) and
/// send them. Before, frames move exactly as they did without the GSO path.
/// `FERROCE_VNET_HDR=0` does without it on any kernel, as before 6.2: the older kernels'
/// receive path (super-frames split by their length) can then be tested on a new one.
fn vnet_wanted() -> bool {
    std::env::var("FERROCE_VNET_HDR").as_deref() != Ok("0") && super::gso::kernel_at_least(6, 2)
}

/// Errors with which a kernel or device refuses a UDP GSO super-frame it cannot take.
fn refuses_offload(e: &io::Error) -> bool {
    const ENOTSUPP: i32 = 524;
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::EPROTONOSUPPORT | libc::EMSGSIZE | ENOTSUPP)
    )
}

/// The socket filter for `iface`: this process's blocks if it shares the interface,
/// block 0 (QP1's; the registry never hands it out) when it runs a GSI QP, and the
/// multicast QP when a QP here is in a group.
fn filter_spec(
    iface: &Interface,
    share: Option<&Share>,
    gsi: bool,
    multicast: Groups,
) -> FilterSpec {
    FilterSpec {
        own_mac: iface.mac,
        outgoing_to_self: !iface.loopback,
        blocks: share.map(|s| {
            let mut b = s.blocks();
            if gsi {
                b.push(0);
            }
            b
        }),
        multicast,
    }
}

impl PacketLink {
    /// Installs the filter for what the link serves now (blocks, QP1, multicast).
    fn refilter(&self) -> io::Result<()> {
        let gsi = self.serving_gsi.load(Ordering::Relaxed);
        let multicast = Groups::of(relock(&self.multicast).iter().copied());
        self.socket.set_filter(&roce_filter(&filter_spec(
            &self.iface,
            self.share.as_ref(),
            gsi,
            multicast,
        )))
    }
}

fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Link for PacketLink {
    fn state_fd(&self) -> Option<RawFd> {
        self.oper.as_ref().map(OperState::fd)
    }
    fn is_up(&self) -> bool {
        self.oper.as_ref().is_none_or(OperState::refresh)
    }
    fn is_gone(&self) -> bool {
        self.oper.as_ref().is_some_and(OperState::is_gone)
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
        self.refilter()?;
        Ok(Some(b))
    }
    fn sees_own_frames(&self) -> bool {
        self.iface.loopback
    }
    fn serve_gsi(&self) -> io::Result<()> {
        if self.share.is_none() {
            return Ok(()); // the filter takes every QP's frames already
        }
        if self.serving_gsi.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        self.refilter()
    }
    fn set_multicast(&self, groups: &BTreeSet<IpAddr>) -> io::Result<()> {
        let mut joined = relock(&self.multicast);
        if *joined == *groups {
            return Ok(());
        }
        let was_member = !joined.is_empty();
        let macs = |g: &BTreeSet<IpAddr>| -> BTreeSet<[u8; 6]> {
            g.iter().filter_map(|ip| multicast_mac(*ip)).collect()
        };
        let (had, want) = (macs(&joined), macs(groups));
        // lo has no multicast filter: every frame sent comes back in.
        let membership = |mac: [u8; 6], on: bool| {
            if self.iface.loopback {
                Ok(())
            } else {
                self.socket.set_multicast_membership(mac, on)
            }
        };
        // Joined first: on a failure nothing changes but the addresses joined so far,
        // which are left again.
        let mut added = Vec::new();
        for mac in want.difference(&had) {
            if let Err(e) = membership(*mac, true) {
                for m in added {
                    let _ = membership(m, false);
                }
                return Err(e);
            }
            added.push(*mac);
        }
        for mac in had.difference(&want) {
            if let Err(e) = membership(*mac, false) {
                tracing::debug!(error = %e, "cannot leave a multicast MAC address");
            }
        }
        *joined = groups.clone();
        let member = !joined.is_empty();
        drop(joined);
        if member && !was_member {
            // Other processes here may send to the group: their frames go out on the
            // interface, and this socket must see them.
            self.serve_same_host();
        }
        tracing::debug!(iface = %self.iface.name, groups = groups.len(), "multicast groups");
        self.refilter()
    }
    fn report_qps(&self, qps: usize) {
        if let Some(s) = &self.share {
            s.report_qps(qps);
        }
    }
    fn users(&self) -> Option<LinkUsers> {
        self.share.as_ref().and_then(|s| s.users().ok())
    }
    fn serve_same_host(&self) {
        // On lo every frame sent comes back in as an incoming one: nothing to take. Called
        // for every UD send to this host, hence the plain load first.
        if self.iface.loopback
            || self.serving_same_host.load(Ordering::Relaxed)
            || self.serving_same_host.swap(true, Ordering::Relaxed)
        {
            return;
        }
        if !self.socket.ignores_outgoing() {
            // A kernel without the option (before 4.20): the socket sees them already.
            return;
        }
        match self.socket.set_ignore_outgoing(false) {
            Ok(()) => tracing::info!(
                iface = %self.iface.name,
                "a QP talks to this host: taking in frames other processes here send"
            ),
            Err(e) => tracing::warn!(
                iface = %self.iface.name,
                error = %e,
                "cannot take in frames other processes on this host send"
            ),
        }
    }
    fn same_host(&self) -> Option<&'static str> {
        Some(if self.iface.loopback {
            "in (lo returns every frame sent)"
        } else if self.socket.ignores_outgoing() {
            "ignored (no QP of this process talks to this host)"
        } else {
            "in (outgoing frames to this interface's address)"
        })
    }
    fn mac(&self) -> [u8; 6] {
        self.iface.mac
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        let Some(rings) = self.tx_ring() else {
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
        let mut pending = self.pending.lock().expect("pending segments lock");
        while pending.is_empty() {
            let taken = rings.recv_each(1, &mut |frame, vnet| {
                self.deliver(frame, vnet, &mut |seg| pending.push_back(seg.to_vec()))
            });
            if taken == 0 {
                break;
            }
        }
        Ok(pending.pop_front().map(|f| {
            let n = f.len().min(buf.len());
            buf[..n].copy_from_slice(&f[..n]);
            n
        }))
    }
    fn recv_each(&self, batch: &mut FrameBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        match self.socket.rings() {
            Some(rings) => Ok(rings.recv_each(batch.capacity(), &mut |frame, vnet| {
                self.deliver(frame, vnet, f)
            })),
            None => recv_each_batched(self, batch, f),
        }
    }
    fn send_each(
        &self,
        batch: &mut FrameBatch,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> TxOutcome {
        match self.tx_ring() {
            Some(rings) => rings.send_each(max, fill),
            None => send_each_batched(self, batch, max, fill),
        }
    }
    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
    fn take_error(&self) -> Option<io::Error> {
        self.socket.take_error().unwrap_or_else(|e| {
            tracing::debug!(error = %e, "cannot read the packet socket's SO_ERROR");
            None
        })
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
        if self.gso.udp() {
            return self.send_batch_udp(b);
        }
        if let Some(sock) = self.linear_socket() {
            return self.send_batch_linear(sock, b);
        }
        if !self.socket.has_vnet() {
            return self.socket.send_many(&b.data, &mut b.headers, &b.lens[..n]);
        }
        let join = self.gso.on();
        let mut runs = std::mem::take(&mut b.runs);
        let may = self.pauses.joinable();
        let m = super::gso::plan(
            &mut b.data,
            &b.offsets[..n],
            &b.lens[..n],
            &|f| join && may(f),
            &mut runs,
        );
        // A packed batch's runs now lie end to end (`skip` is at least the headers).
        b.restore_runs(&runs[..m]);
        let layout = if join {
            self.layout.layout()
        } else {
            Layout::Fragments
        };
        if layout == Layout::Linear {
            for r in runs[..m].iter_mut().filter(|r| r.count > 1) {
                r.vnet.hdr_len = run_len(r, &b.lens).min(gso_layout::LINEAR_MAX) as u16;
            }
        }
        let started = std::time::Instant::now();
        let (data, headers, lens, frames) = b.send_parts();
        let result = self
            .socket
            .send_runs(data, headers, lens, frames, &runs[..m]);
        let nanos = started.elapsed().as_nanos() as u64;
        let out = match result {
            Ok(sent) => {
                if join {
                    let c = &self.gso_counters;
                    let mut left = sent;
                    let mut joined_bytes = 0;
                    for r in &runs[..m] {
                        if r.count > left {
                            break;
                        }
                        left -= r.count;
                        if r.count > 1 {
                            c.tx_super.fetch_add(1, Ordering::Relaxed);
                            c.tx_super_pkts.fetch_add(r.count as u64, Ordering::Relaxed);
                            if layout == Layout::Linear {
                                c.tx_linear.fetch_add(1, Ordering::Relaxed);
                            }
                            joined_bytes += run_len(r, &b.lens);
                        }
                    }
                    self.layout.record(layout, nanos, joined_bytes);
                }
                Ok(sent)
            }
            // No memory for a linear head (or a queue dropped it): fragments for a while.
            Err(e) if layout == Layout::Linear && e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.layout.linear_failed(false);
                Err(e)
            }
            // A kernel that takes super-frames but not with a linear head: those frames
            // are lost, as on a wire, and heads stay in fragments from now on.
            Err(e) if layout == Layout::Linear && refuses_offload(&e) => {
                tracing::warn!(error = %e, "the kernel refused a super-frame with a linear head; sending fragments");
                self.layout.linear_failed(true);
                Ok(0)
            }
            // A kernel that takes packet sockets' virtio-net headers but not UDP GSO (or
            // a device that refuses it): those frames are lost, as on a wire, and from
            // now on frames go one by one.
            Err(e) if runs[0].count > 1 && refuses_offload(&e) => {
                self.gso.refused(&e);
                Ok(0)
            }
            Err(e) => Err(e),
        };
        b.runs = runs;
        out
    }
    fn sends_from_ring(&self) -> bool {
        self.tx_ring().is_some()
    }
    fn packs_frames(&self) -> bool {
        // Only the packet-socket way sends through `FrameBatch::layout`; joining may stop
        // later (`GsoState::refused`), which that way still sends.
        self.socket.has_vnet() && self.gso.on() && self.tx_ring().is_none()
    }
    fn joins_frames(&self) -> bool {
        // Not the UDP-socket way: it serves rxe peers (Linux 6.1), where split WRITEs
        // are not proven.
        self.gso.on() && self.tx_ring().is_none()
    }
    fn io_mode(&self) -> &'static str {
        if self.gso.udp() {
            return match (self.socket.rings().is_some(), self.udp_way) {
                (true, Some(UdpWhy::OldKernel)) => "rx=ring tx=sendmmsg+udp gso=udp-socket (the default before Linux 6.2, whose packet sockets send no UDP GSO; FERROCE_GSO=1 sends packet by packet)",
                (true, _) => "rx=ring tx=sendmmsg+udp gso=udp-socket (FERROCE_GSO=udp)",
                (false, _) => "rx=recvmmsg tx=sendmmsg+udp gso=udp-socket (FERROCE_GSO=udp)",
            };
        }
        match (self.socket.rings(), self.gso.off()) {
            (Some(r), _) if r.has_tx() => "rx=ring tx=ring gso=off (not with the transmit ring)",
            (Some(_), None) => "rx=ring tx=sendmmsg gso=on",
            (Some(_), Some(GsoOff::Disabled)) => "rx=ring tx=sendmmsg gso=off (FERROCE_GSO=0)",
            (Some(_), Some(GsoOff::OldKernel)) => {
                "rx=ring tx=sendmmsg gso=off (packet sockets take UDP GSO from Linux 6.2; FERROCE_GSO=udp sends super-packets through UDP sockets)"
            }
            (Some(_), Some(GsoOff::NoVnetHeader)) => {
                "rx=ring tx=sendmmsg gso=off (no virtio-net header on the socket)"
            }
            (Some(_), Some(GsoOff::Refused)) => {
                "rx=ring tx=sendmmsg gso=off (the kernel refused a super-frame)"
            }
            (Some(_), Some(GsoOff::Linear)) if self.linear_socket().is_some() => {
                "rx=ring tx=sendmmsg gso=off (FERROCE_GSO=linear: each frame in one linear skb)"
            }
            (Some(_), Some(GsoOff::Linear)) => {
                "rx=ring tx=sendmmsg gso=off (FERROCE_GSO=linear, but no packet socket with a virtio-net header to send so)"
            }
            (None, Some(GsoOff::Linear)) if self.linear_socket().is_some() => {
                "rx=recvmmsg tx=sendmmsg gso=off (FERROCE_GSO=linear: each frame in one linear skb)"
            }
            (None, _) => "rx=recvmmsg tx=sendmmsg gso=off (needs the receive ring)",
        }
    }
    fn details(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if self.gso.on() {
            v.push(("gso layout", self.layout.describe()));
        }
        if !self._guards.is_empty() {
            v.push(("guard", self.guard_mode.to_string()));
        }
        v
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.gso_counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("gso_tx_frames", get(&c.tx_super)),
            ("gso_tx_pkts", get(&c.tx_super_pkts)),
            ("gso_tx_linear", get(&c.tx_linear)),
            ("linear_tx_pkts", get(&c.linear_tx_pkts)),
            ("gso_layout_switches", self.layout.switches()),
            ("gso_rx_frames", get(&c.rx_super)),
            ("gso_rx_pkts", get(&c.rx_super_pkts)),
            ("gso_rx_malformed", get(&c.rx_super_err)),
            ("gso_peer_pauses", self.pauses.started()),
        ]
    }
    fn resending_to(&self, dst: IpAddr, silences: u8) {
        // The clock only for a silence that may start a pause.
        if self.gso.off().is_none() && silences >= super::join_pause::SILENCES {
            self.pauses
                .resending_to(dst, silences, std::time::Instant::now());
        }
    }
    fn rx_drops(&self) -> u64 {
        let new = self.socket.take_drops().unwrap_or(0);
        let truncated = self.socket.rings().map_or(0, Rings::truncated) + self.socket.truncated();
        self.rx_drops.fetch_add(new, Ordering::Relaxed) + new + truncated
    }
}

/// Runs of one frame each for `frames` (as [`RawSocket::send_runs`] takes them, from
/// index 0), each whole frame in the kernel's linear head when `linear` gives the frames'
/// lengths.
fn one_by_one(
    frames: std::ops::Range<usize>,
    linear: Option<&[usize]>,
) -> [Run; super::af_packet::MAX_BATCH] {
    let mut runs = [Run::default(); super::af_packet::MAX_BATCH];
    for (r, i) in runs.iter_mut().zip(frames) {
        r.first = i;
        r.count = 1;
        if let Some(lens) = linear {
            r.vnet.hdr_len = lens[i] as u16;
        }
    }
    runs
}

/// Bytes of the super-frame `r` makes of the batch's frames (its first frame whole, the
/// others without their headers).
fn run_len(r: &Run, lens: &[usize]) -> usize {
    lens[r.first..r.first + r.count]
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            if k == 0 {
                len
            } else {
                len.saturating_sub(r.skip)
            }
        })
        .sum()
}

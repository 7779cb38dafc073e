//! UDP GSO on a packet socket: consecutive frames of one flow leave as one super-frame that
//! the kernel (or the NIC) cuts back into them, and super-frames that arrive whole are cut
//! up here. One trip through the kernel's per-frame path (packet taps, qdisc, veth) per
//! super-frame instead of per RoCE packet is what the issue measured TCP winning by.
//!
//! The transport builds every packet with its own headers and ICRC, IPv4 identifications
//! counting up by one; a run is only joined when cutting it up gives back exactly those
//! frames ([`ferroce_wire::gso::RunHead::accepts`]), so the ICRCs stay right.

use std::sync::atomic::{AtomicU8, Ordering};

use ferroce_wire::gso::{RunHead, MAX_PACKET_PAYLOAD};

use super::vnet::VnetHdr;

/// Most segments in one super-frame (the kernel's `UDP_MAX_SEGMENTS` is 64 on older
/// kernels).
pub const MAX_SEGMENTS: usize = 64;
/// Ethernet header of the frames ferroce sends (no VLAN tag).
const ETH: usize = 14;

/// One message of a batch: frames `first .. first + count` sent as one, with `vnet`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    /// The run's first frame in the batch.
    pub first: usize,
    /// Frames in the run.
    pub count: usize,
    /// The message's virtio-net header.
    pub vnet: VnetHdr,
    /// Bytes of each later frame that are headers (left out of the super-frame).
    pub skip: usize,
}

/// Groups the frames of a batch — frame `i` is `data[offsets[i]..][..lens[i]]`, of which
/// only the headers are read — into runs
/// written to `out` (which has room for `lens.len()`), returns how many. A run starts only
/// at a frame `join` says may head one (false for every frame: each is a run of its own;
/// see [`super::join_pause`]). Each run of more than one frame has its first
/// frame's headers rewritten in place into the super-frame's.
pub fn plan(
    data: &mut [u8],
    offsets: &[usize],
    lens: &[usize],
    join: &dyn Fn(&[u8]) -> bool,
    out: &mut [Run],
) -> usize {
    let mut runs = 0;
    let mut i = 0;
    while i < lens.len() {
        let mut run = Run {
            first: i,
            count: 1,
            vnet: VnetHdr::NONE,
            skip: 0,
        };
        if join(&data[offsets[i]..][..lens[i]]) {
            if let Some((count, vnet, skip)) = join_from(data, offsets, lens, i) {
                run = Run {
                    first: i,
                    count,
                    vnet,
                    skip,
                };
            }
        }
        out[runs] = run;
        runs += 1;
        i += run.count;
    }
    runs
}

/// The longest run starting at frame `i` (at least two frames), its header and the
/// header bytes of each frame; the first frame becomes the super-frame's head.
fn join_from(
    data: &mut [u8],
    offsets: &[usize],
    lens: &[usize],
    i: usize,
) -> Option<(usize, VnetHdr, usize)> {
    let first = &data[offsets[i]..][..lens[i]];
    if first.len() < ETH || !matches!([first[12], first[13]], [0x08, 0x00] | [0x86, 0xdd]) {
        return None;
    }
    let (head, count, payload) = longest_run(data, offsets, lens, i)?;
    let headers = ETH + head.header_len();
    let start = offsets[i];
    head.make_super(&mut data[start + ETH..start + lens[i]], payload)
        .ok()?;
    let vnet = VnetHdr::udp_gso(headers, headers - 8, head.segment_size());
    Some((count, vnet, headers))
}

/// The longest run of frames of one flow starting at frame `i` that cutting up gives back
/// exactly (at least two frames): its head, how many frames, and its UDP payload bytes in
/// all. `None` when frame `i` goes alone.
fn longest_run(
    data: &[u8],
    offsets: &[usize],
    lens: &[usize],
    i: usize,
) -> Option<(RunHead, usize, usize)> {
    let frame = |k: usize| &data[offsets[k]..][..lens[k]];
    let first = frame(i);
    let head = RunHead::new(first.get(ETH..)?)?;
    let headers = ETH + head.header_len();
    let mut payload = head.segment_size();
    let mut count = 1;
    while i + count < lens.len() && count < MAX_SEGMENTS {
        let next = frame(i + count);
        if next.len() < ETH || next[..ETH] != first[..ETH] {
            break;
        }
        let Some(full) = head.accepts(&first[ETH..], &next[ETH..], count) else {
            break;
        };
        // A head larger than what follows (a WRITE_FIRST with its RETH before MIDDLEs)
        // goes alone rather than end a run of two: the others then join each other.
        if !full && count == 1 && i + 2 < lens.len() && lens[i + 2] == lens[i + 1] {
            return None;
        }
        let more = next.len() - headers;
        if head.header_len() + payload + more > 65535 - 40 {
            break;
        }
        payload += more;
        count += 1;
        if !full {
            break;
        }
    }
    (count >= 2).then_some((head, count, payload))
}

/// Whether the UDP-socket way can send `frame`: IPv4 without options, UDP, long enough
/// for a RoCE packet, to another host's unicast MAC (frames to `own_mac` reach other
/// processes on this host through the packet socket's outgoing tap, which a UDP socket's
/// routing would bypass; multicast stays with the packet socket's groups).
pub fn udp_way_takes(frame: &[u8], own_mac: [u8; 6]) -> bool {
    frame.len() >= ETH + ferroce_wire::icrc::IPV4_UDP_HEAD + 12 + 4
        && frame[12..14] == [0x08, 0x00]
        && frame[ETH] == 0x45
        && frame[ETH + 9] == 17
        && frame[0] & 1 == 0
        && frame[..6] != own_mac
}

/// Groups the frames of a batch into runs as [`plan`] does, for the UDP-socket way
/// ([`super::udp_segment`]): only IPv4 runs (the socket is IPv4) to another host's MAC
/// (frames to `own_mac` reach other processes on this host through the packet socket's
/// outgoing tap, which a UDP socket's routing would bypass), and no header rewritten
/// (the kernel builds the super-packet's). Runs of one frame go through the packet
/// socket, and so do runs no longer than a single RoCE packet can be: a peer on a kernel
/// before 6.2 gets the super-packet whole on a veth with nothing saying it is one, and
/// tells it by its length ([`split_received`]). As with [`plan`], a run starts only at a
/// frame `join` says may head one.
pub fn plan_udp(
    data: &[u8],
    offsets: &[usize],
    lens: &[usize],
    own_mac: [u8; 6],
    join: &dyn Fn(&[u8]) -> bool,
    out: &mut [Run],
) -> usize {
    let mut runs = 0;
    let mut i = 0;
    while i < lens.len() {
        let first = &data[offsets[i]..][..lens[i]];
        let count = (udp_way_takes(first, own_mac) && join(first))
            .then(|| longest_run(data, offsets, lens, i))
            .flatten()
            .filter(|&(_, _, payload)| payload > MAX_PACKET_PAYLOAD)
            .map_or(1, |(_, count, _)| count);
        out[runs] = Run {
            first: i,
            count,
            vnet: VnetHdr::NONE,
            skip: if count > 1 { ETH + 28 } else { 0 },
        };
        runs += 1;
        i += count;
    }
    runs
}

/// What [`split_received`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// An ordinary frame, handed on as it is.
    Frame,
    /// A super-frame, split into this many packets.
    Split(usize),
    /// A malformed super-frame, dropped whole.
    Malformed,
}

/// Hands a received frame to `f`, or, if it is a UDP super-frame, each of its segments
/// (rebuilt in place). The virtio-net header says so where the kernel gives one; a frame
/// without (Linux before 6.2) that is longer than any single RoCE packet is one whose
/// segment size is found from the packets themselves
/// ([`ferroce_wire::gso::infer_segment_size`]), or a malformed frame.
pub fn split_received(frame: &mut [u8], vnet: VnetHdr, f: &mut dyn FnMut(&[u8])) -> Received {
    let link = match frame.get(12..14) {
        Some([0x81, 0x00]) => 18,
        _ => ETH,
    };
    let gso_size = match vnet.udp_segment_size() {
        Some(size) => size,
        // No longer than one packet behind its own IP and UDP headers: no super-frame.
        None if !ferroce_wire::gso::longer_than_one_packet(frame.get(link..).unwrap_or(&[])) => {
            f(frame);
            return Received::Frame;
        }
        None => match ferroce_wire::gso::infer_segment_size(&frame[link..]) {
            Some(size) => size,
            None => {
                tracing::debug!(len = frame.len(), "dropped a frame too long for one packet");
                return Received::Malformed;
            }
        },
    };
    match ferroce_wire::gso::split_in_place(frame, link, gso_size, f) {
        Ok(n) => Received::Split(n),
        Err(e) => {
            tracing::debug!(error = %e, "dropped a malformed super-frame");
            Received::Malformed
        }
    }
}

/// Whether frames leave joined, and if not, why.
#[derive(Debug)]
pub struct GsoState(AtomicU8);

/// Why transmit GSO is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoOff {
    /// `FERROCE_GSO=0`.
    Disabled,
    /// Packet sockets take UDP GSO from Linux 6.2 on.
    OldKernel,
    /// The socket has no virtio-net header (PACKET_VNET_HDR refused, or no receive ring).
    NoVnetHeader,
    /// The kernel refused a super-frame; frames go one by one since.
    Refused,
    /// `FERROCE_GSO=linear`: none joined, each frame in one linear skb (see
    /// `PacketLink::send_batch_linear`).
    Linear,
}

const ON: u8 = 0;
/// Super-packets leave through a UDP socket ([`super::udp_segment`]).
const UDP: u8 = 100;

/// Why super-packets leave the UDP-socket way ([`super::udp_segment`]), if they do:
/// `FERROCE_GSO=udp` asks for it; by default, kernels before 6.2 (whose packet sockets
/// cannot send UDP GSO) use it where the link has a receive ring and no transmit ring
/// (`receive_ring_only`): without a receive ring a link cannot split super-frames itself,
/// so it sends none either, as on the packet-socket way, and a transmit ring
/// (`FERROCE_PACKET_RINGS=both`) was asked for to send from. `FERROCE_GSO=0` sends no
/// super-packets, `linear` none either and each frame in one linear skb, `1` (or anything
/// else) the packet-socket way where the kernel has it.
pub fn udp_way(receive_ring_only: bool) -> Option<UdpWhy> {
    match std::env::var("FERROCE_GSO").as_deref() {
        Ok("udp") => Some(UdpWhy::Asked),
        Ok(_) => None,
        Err(_) => (receive_ring_only && !kernel_at_least(6, 2)).then_some(UdpWhy::OldKernel),
    }
}

/// Why the UDP-socket way is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpWhy {
    /// `FERROCE_GSO=udp`.
    Asked,
    /// The default before Linux 6.2.
    OldKernel,
}

impl GsoState {
    /// The state for a socket that has a virtio-net header or not, on this kernel, and
    /// whether the UDP-socket way is in use instead (`udp`: its sockets are open).
    pub fn new(vnet: bool, udp: bool) -> GsoState {
        if udp {
            return GsoState(AtomicU8::new(UDP));
        }
        let off = if std::env::var("FERROCE_GSO").as_deref() == Ok("0") {
            Some(GsoOff::Disabled)
        } else if std::env::var("FERROCE_GSO").as_deref() == Ok("linear") {
            Some(GsoOff::Linear)
        } else if !kernel_at_least(6, 2) {
            Some(GsoOff::OldKernel)
        } else if !vnet {
            Some(GsoOff::NoVnetHeader)
        } else {
            None
        };
        GsoState(AtomicU8::new(off.map_or(ON, |o| o as u8 + 1)))
    }
    /// Whether frames are joined into super-frames on the packet socket.
    pub fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed) == ON
    }
    /// Whether runs of frames leave as super-packets through the UDP socket.
    pub fn udp(&self) -> bool {
        self.0.load(Ordering::Relaxed) == UDP
    }
    /// Why not, if not (`None` for either way on).
    pub fn off(&self) -> Option<GsoOff> {
        match self.0.load(Ordering::Relaxed) {
            ON | UDP => None,
            1 => Some(GsoOff::Disabled),
            2 => Some(GsoOff::OldKernel),
            3 => Some(GsoOff::NoVnetHeader),
            5 => Some(GsoOff::Linear),
            _ => Some(GsoOff::Refused),
        }
    }
    /// Whether every frame goes in one linear skb (`FERROCE_GSO=linear`).
    pub fn linear(&self) -> bool {
        self.off() == Some(GsoOff::Linear)
    }
    /// Turns joining off for good after the kernel refused a super-frame.
    pub fn refused(&self, error: &std::io::Error) {
        if matches!(
            self.0.swap(GsoOff::Refused as u8 + 1, Ordering::Relaxed),
            ON | UDP
        ) {
            tracing::warn!(%error, "the kernel refused a UDP GSO super-frame; sending frames one by one");
        }
    }
}

/// Whether the running kernel is at least `major.minor`.
pub(super) fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut num = || {
        parts
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
    };
    (num(), num()) >= (major, minor)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ferroce_wire::{BthRepr, DatagramRepr, EthernetRepr, IbRepr, IpRepr, Opcode, Psn};
    use std::net::Ipv4Addr;

    const SLOT: usize = 2048;

    /// A WRITE_MIDDLE of `payload` bytes to QP 0x11 from 10.0.0.1 to 10.0.0.`dst` with IPv4
    /// identification `id` (consecutive identifications of one size join).
    pub(crate) fn frame(psn: u32, payload: usize, id: u16, dst: u8) -> Vec<u8> {
        let bth = BthRepr {
            mig_req: true,
            ..BthRepr::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x11, Psn::new(psn))
        };
        build(
            ipv4(id, dst),
            bth,
            Default::default(),
            &vec![psn as u8; payload],
        )
    }

    /// The UDP way takes IPv4 RoCE frames to another host's unicast MAC, nothing else.
    #[test]
    fn the_udp_way_takes_ipv4_unicast_to_other_hosts() {
        let own = [2; 6]; // `build` sends from [2; 6] to [4; 6]
        let f = frame(1, 256, 7, 2);
        assert!(udp_way_takes(&f, [9; 6]));
        assert!(!udp_way_takes(&f, [4; 6]), "to this host's own MAC");
        assert!(udp_way_takes(&f, own));
        let mut m = f.clone();
        m[0] = 0x01; // an IPv4 multicast MAC begins 01:00:5e
        assert!(!udp_way_takes(&m, own), "multicast");
        let mut o = f.clone();
        o[14] = 0x46; // IHL 6: options
        assert!(!udp_way_takes(&o, own), "IPv4 options");
        let mut t = f.clone();
        t[14 + 9] = 6;
        assert!(!udp_way_takes(&t, own), "not UDP");
        assert!(
            !udp_way_takes(&f[..14 + 28 + 15], own),
            "shorter than BTH and ICRC"
        );
        assert!(udp_way_takes(&f[..14 + 28 + 16], own));
        let v6 = build(
            IpRepr::V6 {
                src: std::net::Ipv6Addr::LOCALHOST,
                dst: std::net::Ipv6Addr::LOCALHOST,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            },
            BthRepr::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x11, Psn::new(1)),
            Default::default(),
            &[0; 64],
        );
        assert!(!udp_way_takes(&v6, own), "IPv6");
    }

    /// An IPv4 header from 10.0.0.1 to 10.0.0.`dst` with identification `id`, DF set.
    fn ipv4(id: u16, dst: u8) -> IpRepr {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, dst),
            dscp: 0,
            ecn: 0,
            ttl: 64,
            identification: id,
            dont_fragment: true,
        }
    }

    /// The Ethernet frame of one datagram.
    fn build(ip: IpRepr, bth: BthRepr, ext: ferroce_wire::ExtRepr, data: &[u8]) -> Vec<u8> {
        let ipv6 = matches!(ip, IpRepr::V6 { .. });
        let repr = DatagramRepr {
            ip,
            src_port: 0xc000,
            ib: IbRepr {
                bth,
                ext,
                payload: data,
            },
        };
        let mut f = vec![0; 14 + repr.buffer_len()];
        let eth = EthernetRepr {
            src: [2; 6],
            dst: [4; 6],
            vlan: None,
        };
        eth.emit(&mut f[..14], ipv6).unwrap();
        let n = repr.emit(&mut f[14..]).unwrap();
        f.truncate(14 + n);
        f
    }

    fn slots(n: usize) -> Vec<usize> {
        (0..n).map(|i| i * SLOT).collect()
    }

    fn batch(frames: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
        let mut data = vec![0; frames.len() * SLOT];
        for (i, f) in frames.iter().enumerate() {
            data[i * SLOT..][..f.len()].copy_from_slice(f);
        }
        (data, frames.iter().map(Vec::len).collect())
    }

    #[test]
    fn consecutive_frames_of_one_flow_join_and_the_rest_go_alone() {
        let frames = vec![
            frame(1, 1024, 10, 2),
            frame(2, 1024, 11, 2),
            frame(3, 500, 12, 2), // shorter: ends the run
            frame(4, 1024, 13, 2),
            frame(5, 1024, 14, 3), // another destination
            frame(6, 1024, 16, 3), // identification skips one
        ];
        let (mut data, lens) = batch(&frames);
        let mut runs = [Run::default(); 6];
        let n = plan(&mut data, &slots(lens.len()), &lens, &|_| true, &mut runs);
        let shape: Vec<(usize, usize)> = runs[..n].iter().map(|r| (r.first, r.count)).collect();
        assert_eq!(shape, [(0, 3), (3, 1), (4, 1), (5, 1)]);
        assert_eq!(runs[0].vnet.udp_segment_size(), Some(lens[0] - 42));
        assert_eq!(runs[0].skip, 42);
        assert_eq!(runs[1].vnet, VnetHdr::NONE);
        // What the kernel receives, cut up, is what the transport built.
        let mut whole = data[..lens[0]].to_vec();
        for k in 1..3 {
            whole.extend_from_slice(&data[k * SLOT + 42..k * SLOT + lens[k]]);
        }
        let mut got = Vec::new();
        ferroce_wire::gso::split_in_place(&mut whole, 14, lens[0] - 42, &mut |s| {
            got.push(s.to_vec())
        })
        .unwrap();
        assert_eq!(got.len(), 3);
        for (g, f) in got.iter().zip(&frames) {
            let mut f = f.clone();
            f[40..42].copy_from_slice(&[0, 0]); // UDP checksum: the kernel's to fill
            assert_eq!(g, &f);
        }
    }

    #[test]
    fn udp_socket_runs_carry_the_icrcs_of_the_segments_the_kernel_builds() {
        // Four full frames and a shorter one that ends the run (4.8 KiB of UDP payload),
        // then three full ones: no longer than one packet could be, so they go alone.
        let mut frames: Vec<Vec<u8>> = (0..5)
            .map(|k| frame(1 + k, if k == 4 { 700 } else { 1024 }, 10 + k as u16, 2))
            .collect();
        frames.extend((5..8).map(|k| frame(1 + k, 1024, 10 + k as u16, 2)));
        let (mut data, lens) = batch(&frames);
        let mut runs = [Run::default(); 8];
        let plan = |own_mac, join: &dyn Fn(&[u8]) -> bool, runs: &mut [Run]| {
            plan_udp(&data, &slots(lens.len()), &lens, own_mac, join, runs)
        };
        // Frames to this host's own MAC (another process here) never take the UDP way.
        let n = plan([4; 6], &|_| true, &mut runs);
        assert!(runs[..n].iter().all(|r| r.count == 1), "{:?}", &runs[..n]);
        let n = plan([9; 6], &|_| true, &mut runs);
        let shape: Vec<(usize, usize)> = runs[..n].iter().map(|r| (r.first, r.count)).collect();
        assert_eq!(shape, [(0, 5), (5, 1), (6, 1), (7, 1)]);
        // Toward a destination whose joining is paused (`join_pause`), every frame alone.
        let mut alone = [Run::default(); 8];
        let n = plan([9; 6], &|_| false, &mut alone);
        assert!(alone[..n].iter().all(|r| r.count == 1) && n == 8);
        // Nothing rewritten by planning.
        assert_eq!(&data[..lens[0]], &frames[0][..]);

        // The sender's rewrite, then the super-packet the kernel builds from the payloads:
        // identification 0, lengths of the whole, the socket's source port.
        let port = 4321;
        let mut at = [0; 5];
        for k in 0..5 {
            let patch = ferroce_wire::icrc::HeadPatch::new(lens[k] - 14).unwrap();
            at[k] = super::super::udp_segment::prepare_segment(
                &mut data[k * SLOT..k * SLOT + lens[k]],
                k as u16,
                port,
                &patch,
            )
            .unwrap();
        }
        let mut whole = data[..at[0]].to_vec();
        for k in 0..5 {
            whole.extend_from_slice(&data[k * SLOT + at[k]..k * SLOT + lens[k]]);
        }
        let total = whole.len() - 14;
        whole[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        whole[18..20].copy_from_slice(&[0, 0]);
        whole[38..40].copy_from_slice(&((total - 20) as u16).to_be_bytes());
        ferroce_wire::ipv4::fill_header_checksum(&mut whole[14..]);
        // With a wrong IPv4 header checksum (its TTL changed after it was summed; the ICRC
        // masks both), it is dropped whole: no segment is handed on with a checksum of
        // its own that would hide it.
        let mut bad = whole.clone();
        bad[14 + 8] ^= 1;
        let mut handed = 0;
        let r = split_received(&mut bad, VnetHdr::NONE, &mut |_| handed += 1);
        assert_eq!((r, handed), (Received::Malformed, 0));
        // As a packet socket before Linux 6.2 hands it over: no virtio-net header.
        let mut got = Vec::new();
        let r = split_received(&mut whole, VnetHdr::NONE, &mut |s| got.push(s.to_vec()));
        assert_eq!(r, Received::Split(5));
        for (k, g) in got.iter().enumerate() {
            let ip = &g[14..];
            ferroce_wire::icrc::verify(ip).unwrap_or_else(|e| panic!("segment {k}: {e}"));
            assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), k as u16);
            assert_eq!(u16::from_be_bytes([ip[20], ip[21]]), port);
            assert_eq!(ip[6] & 0x40, 0x40, "DF");
            // The transport's payload, untouched.
            assert_eq!(&g[42..g.len() - 4], &frames[k][42..frames[k].len() - 4]);
        }
    }

    /// Each reason for sending frames one by one reads back as itself.
    #[test]
    fn every_off_reason_reads_back() {
        for off in [
            GsoOff::Disabled,
            GsoOff::OldKernel,
            GsoOff::NoVnetHeader,
            GsoOff::Refused,
            GsoOff::Linear,
        ] {
            let s = GsoState(AtomicU8::new(off as u8 + 1));
            assert_eq!(s.off(), Some(off));
            assert!(!s.on() && !s.udp());
            assert_eq!(s.linear(), off == GsoOff::Linear);
        }
    }

    /// An RDMA WRITE ONLY with immediate of a full 4096 MTU, the longest packet with a
    /// payload, over IPv4 or IPv6.
    fn longest(ipv6: bool) -> Vec<u8> {
        let ip = if ipv6 {
            IpRepr::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            }
        } else {
            ipv4(1, 2)
        };
        let ext = ferroce_wire::ExtRepr {
            reth: Some(ferroce_wire::reth::Repr {
                va: 0x1000,
                rkey: 0x1234,
                dma_len: 4096,
            }),
            immdt: Some(ferroce_wire::immdt::Repr { imm: 5 }),
            ..Default::default()
        };
        let bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0x11, Psn::new(1));
        build(ip, bth, ext, &vec![7; 4096])
    }

    #[test]
    fn without_a_virtio_net_header_only_what_no_packet_could_be_is_split() {
        // An ordinary packet: handed on as it is, even at the longest a packet can be,
        // over IPv4 and over IPv6 (whose headers are 20 bytes longer).
        let mut got = 0;
        for ipv6 in [false, true] {
            let mut one = longest(ipv6);
            assert_eq!(
                one.len(),
                14 + if ipv6 { 48 } else { 28 } + 12 + 20 + 4096 + 4
            );
            let r = split_received(&mut one, VnetHdr::NONE, &mut |_| got += 1);
            assert_eq!(r, Received::Frame, "ipv6: {ipv6}");
        }
        assert_eq!(got, 2);
        let mut one = frame(1, 4096, 1, 2);
        got = 0;
        let r = split_received(&mut one, VnetHdr::NONE, &mut |_| got += 1);
        assert_eq!((r, got), (Received::Frame, 1));
        // Longer than any packet, and no segment size makes RoCE packets of it: dropped
        // whole, nothing handed on.
        let mut junk = frame(1, 6000, 1, 2);
        let r = split_received(&mut junk, VnetHdr::NONE, &mut |_| got += 1);
        assert_eq!((r, got), (Received::Malformed, 1));
    }

    #[test]
    fn a_larger_head_goes_alone_so_the_rest_join() {
        let frames = vec![
            frame(1, 1040, 10, 2), // like a WRITE_FIRST: 16 more bytes
            frame(2, 1024, 11, 2),
            frame(3, 1024, 12, 2),
            frame(4, 1024, 13, 2),
        ];
        let (mut data, lens) = batch(&frames);
        let mut runs = [Run::default(); 4];
        let n = plan(&mut data, &slots(lens.len()), &lens, &|_| true, &mut runs);
        let shape: Vec<(usize, usize)> = runs[..n].iter().map(|r| (r.first, r.count)).collect();
        assert_eq!(shape, [(0, 1), (1, 3)]);
    }

    #[test]
    fn without_joining_every_frame_is_its_own_message() {
        let frames = vec![frame(1, 1024, 10, 2), frame(2, 1024, 11, 2)];
        let (mut data, lens) = batch(&frames);
        let before = data.clone();
        let mut runs = [Run::default(); 2];
        assert_eq!(
            plan(&mut data, &slots(lens.len()), &lens, &|_| false, &mut runs),
            2
        );
        assert_eq!(data, before);
    }

    #[test]
    fn a_run_stops_at_the_ip_length_limit_and_at_max_segments() {
        let frames: Vec<Vec<u8>> = (0..70).map(|i| frame(i, 1024, i as u16, 2)).collect();
        let mut data = vec![0; frames.len() * SLOT];
        for (i, f) in frames.iter().enumerate() {
            data[i * SLOT..][..f.len()].copy_from_slice(f);
        }
        let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
        let mut runs = [Run::default(); 70];
        let n = plan(&mut data, &slots(lens.len()), &lens, &|_| true, &mut runs);
        let seg = lens[0] - 42;
        assert!(runs[..n].iter().all(|r| 28 + r.count * seg <= 65535));
        assert_eq!(runs[..n].iter().map(|r| r.count).sum::<usize>(), 70);
        assert!(runs[0].count > 50, "{:?}", runs[0]);
    }

    #[test]
    fn kernel_versions_compare() {
        assert!(kernel_at_least(2, 6));
        assert!(!kernel_at_least(999, 0));
    }
}

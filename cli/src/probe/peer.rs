//! The probe's side of a connection: raw RoCE v2 frames on a link, built field by field
//! with `ferroce-wire` (so any of them may be wrong on purpose), and every frame sent or
//! received kept with its time for the case's pcap.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ferroce::capture::PcapSink;
use ferroce::link::{Link, MAX_FRAME};
use ferroce_wire::frame::{finalize, DatagramRepr, EthernetRepr, Frame, FrameRepr, IpRepr};
use ferroce_wire::{BthRepr, ExtRepr, IbRepr, Opcode, Syndrome};

/// The two ends' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addressing {
    /// The probe's MAC and IP.
    pub mac: [u8; 6],
    /// The probe's IP address.
    pub ip: IpAddr,
    /// The target's MAC address (its next hop's).
    pub target_mac: [u8; 6],
    /// The target's IP address.
    pub target_ip: IpAddr,
}

/// Changes applied to a built frame before it leaves: the deliberate mistakes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tweak {
    /// Replace the opcode byte (the headers stay those of the built opcode).
    pub opcode: Option<u8>,
    /// BTH transport header version.
    pub tver: Option<u8>,
    /// BTH pad count.
    pub pad: Option<u8>,
    /// UDP destination port.
    pub udp_dport: Option<u16>,
    /// The IP header's ECN field (default 2, ECT(0), as RoCE senders mark theirs; 3 is
    /// Congestion Experienced, as a congested switch would leave it).
    pub ecn: Option<u8>,
    /// Flip the ICRC.
    pub bad_icrc: bool,
    /// Bytes cut off the end after everything else.
    pub truncate: usize,
}

/// A frame from the target, decoded.
#[derive(Debug, Clone)]
pub struct Reply {
    /// When it arrived.
    pub at: Instant,
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH PSN.
    pub psn: u32,
    /// AETH syndrome, if the packet has one.
    pub syndrome: Option<Syndrome>,
    /// AETH MSN.
    pub msn: Option<u32>,
    /// AtomicAckETH original value.
    pub orig: Option<u64>,
    /// Payload bytes.
    pub payload_len: usize,
    /// The payload (data checks: READ responses).
    pub payload: Vec<u8>,
    /// Whether its ICRC was right.
    pub icrc_ok: bool,
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} psn={:#08x}", self.opcode.name(), self.psn)?;
        if let Some(s) = self.syndrome {
            write!(f, " {}", syndrome_name(s))?;
        }
        if let Some(m) = self.msn {
            write!(f, " msn={m}")?;
        }
        if let Some(o) = self.orig {
            write!(f, " orig={o:#x}")?;
        }
        if self.payload_len > 0 {
            write!(f, " len={}", self.payload_len)?;
        }
        if !self.icrc_ok {
            write!(f, " BAD-ICRC")?;
        }
        Ok(())
    }
}

impl Reply {
    /// The answer without the connection's own numbers: opcode, syndrome, and (for
    /// responses) the PSN relative to `epsn`, the probe's first PSN — comparable across
    /// connections and targets (`--diff`).
    pub fn describe(&self, epsn: u32) -> String {
        let mut t = self.opcode.name().to_string();
        if let Some(s) = self.syndrome {
            t.push(' ');
            t.push_str(&syndrome_name(s));
        }
        if self.opcode.info().is_response() {
            let d = self.psn.wrapping_sub(epsn) & ferroce_wire::Psn::MASK;
            if d < 1 << 23 {
                t.push_str(&format!(" psn=first+{d}"));
            } else {
                t.push_str(&format!(" psn=first-{}", (1 << 24) - d));
            }
        }
        if self.payload_len > 0 {
            t.push_str(&format!(" len={}", self.payload_len));
        }
        if !self.icrc_ok {
            t.push_str(" BAD-ICRC");
        }
        t
    }
}

/// A short name for an AETH syndrome.
pub fn syndrome_name(s: Syndrome) -> String {
    match s {
        Syndrome::Ack { .. } => "ACK".into(),
        Syndrome::RnrNak { timer } => format!("RNR_NAK(timer {timer})"),
        Syndrome::Nak(code) => format!("NAK({code:?})"),
    }
}

/// Which way a logged frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the probe.
    Out,
    /// From the target.
    In,
}

/// The raw endpoint.
pub struct Peer {
    link: Arc<dyn Link>,
    addr: Addressing,
    /// The probe's QP number (the target's destination QP).
    pub qpn: u32,
    src_port: u16,
    ip_id: u16,
    log: Vec<(SystemTime, Dir, Vec<u8>)>,
    buf: Vec<u8>,
    /// Frames from the target that could not be decoded (counted, kept in the pcap).
    pub undecodable: u64,
    /// Frames not kept in the log once it held [`MAX_LOG`].
    pub log_dropped: u64,
    /// Packets to the probe's QP that [`Peer::drain`] found, oldest first, for `recv`.
    held: VecDeque<Reply>,
}

/// Frames one case keeps for its pcap: a target that floods cannot make the probe's
/// memory grow without bound (about 90 MB of 9 KiB frames at most).
pub const MAX_LOG: usize = 10_000;
/// Frames [`Peer::drain`] discards at most: a target that never stops sending cannot hold
/// the probe there.
pub const MAX_DRAIN: usize = 4096;
/// Packets to the probe's own QP that [`Peer::drain`] keeps at most (the first ones; a
/// target's send queue is far shallower).
pub const MAX_HELD: usize = 256;

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("addr", &self.addr)
            .field("qpn", &self.qpn)
            .finish()
    }
}

impl Peer {
    /// An endpoint with QP number `qpn` on `link`.
    pub fn new(link: Arc<dyn Link>, addr: Addressing, qpn: u32) -> Peer {
        Peer {
            link,
            addr,
            qpn,
            // In the dynamic range, varying with the QP as rxe's is.
            src_port: 0xc000 | (qpn as u16 & 0x3fff),
            ip_id: 1,
            log: Vec::new(),
            buf: vec![0; MAX_FRAME.max(64 * 1024)],
            undecodable: 0,
            log_dropped: 0,
            held: VecDeque::new(),
        }
    }

    /// The addresses in use.
    pub fn addressing(&self) -> &Addressing {
        &self.addr
    }

    /// The probe's GID (its IP address as a GID).
    pub fn gid(&self) -> Ipv6Addr {
        ferroce::net::gid::gid_of(self.addr.ip)
    }

    /// Builds the frame for one IB packet and applies `tweak`.
    pub fn build(
        &mut self,
        bth: BthRepr,
        ext: ExtRepr,
        payload: &[u8],
        tweak: &Tweak,
    ) -> io::Result<Vec<u8>> {
        let ecn = tweak.ecn.unwrap_or(ferroce_transport::ECN_ECT0) & 3;
        let ip = match (self.addr.ip, self.addr.target_ip) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4 {
                src,
                dst,
                dscp: 0,
                ecn,
                ttl: 64,
                identification: self.ip_id,
                dont_fragment: true,
            },
            (src, dst) => IpRepr::V6 {
                src: ferroce::net::gid::gid_of(src),
                dst: ferroce::net::gid::gid_of(dst),
                traffic_class: ecn,
                flow_label: 0,
                hop_limit: 64,
            },
        };
        self.ip_id = self.ip_id.wrapping_add(1);
        let repr = FrameRepr {
            ethernet: EthernetRepr {
                src: self.addr.mac,
                dst: self.addr.target_mac,
                vlan: None,
            },
            datagram: DatagramRepr {
                ip,
                src_port: self.src_port,
                ib: IbRepr { bth, ext, payload },
            },
        };
        let mut frame = vec![0u8; repr.buffer_len()];
        repr.emit(&mut frame).map_err(invalid)?;
        let ip_off = repr.ethernet.header_len();
        let udp_off = ip_off
            + match ip {
                IpRepr::V4 { .. } => 20,
                IpRepr::V6 { .. } => 40,
            };
        let bth_off = udp_off + 8;
        let mut changed = false;
        if let Some(op) = tweak.opcode {
            frame[bth_off] = op;
            changed = true;
        }
        if let Some(pad) = tweak.pad {
            frame[bth_off + 1] = (frame[bth_off + 1] & !0x30) | ((pad & 3) << 4);
            changed = true;
        }
        if let Some(tver) = tweak.tver {
            frame[bth_off + 1] = (frame[bth_off + 1] & 0xf0) | (tver & 0xf);
            changed = true;
        }
        if let Some(port) = tweak.udp_dport {
            frame[udp_off + 2..udp_off + 4].copy_from_slice(&port.to_be_bytes());
            changed = true;
        }
        if changed {
            finalize(&mut frame[ip_off..]).map_err(invalid)?;
        }
        if tweak.bad_icrc {
            let n = frame.len();
            frame[n - 1] ^= 0xff;
        }
        let keep = frame.len().saturating_sub(tweak.truncate).max(ip_off);
        frame.truncate(keep);
        Ok(frame)
    }

    /// Sends one frame (logged).
    pub fn send(&mut self, frame: Vec<u8>) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self.link.send(&frame)? {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the link stayed full for 1 s",
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        self.keep(Dir::Out, frame);
        Ok(())
    }

    /// The next RoCE packet from the target to the probe's QP, waiting until `deadline`.
    /// Other frames (other hosts, other QPs) are skipped; undecodable ones from the target
    /// are counted and logged.
    pub fn recv(&mut self, deadline: Instant) -> io::Result<Option<Reply>> {
        if let Some(reply) = self.held.pop_front() {
            return Ok(Some(reply));
        }
        loop {
            match self.next_frame()? {
                Some(Some(reply)) => return Ok(Some(reply)),
                // Frames that are not answers do not extend the wait.
                Some(None) if Instant::now() < deadline => {}
                Some(None) => return Ok(None),
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(100)),
                None => return Ok(None),
            }
        }
    }

    /// One frame from the link: `Some(Some(reply))` for a RoCE packet from the target to
    /// the probe's QP (logged), `Some(None)` for any other frame (undecodable ones from the
    /// target counted and logged), `None` when nothing is queued.
    fn next_frame(&mut self) -> io::Result<Option<Option<Reply>>> {
        let Some(n) = self.link.recv(&mut self.buf)? else {
            return Ok(None);
        };
        let at = Instant::now();
        let frame = &self.buf[..n];
        match Frame::parse(frame) {
            Ok(f) => {
                let from = ferroce::net::gid::addr_of(f.datagram.src_gid());
                let ib = f.ib();
                if from == self.addr.target_ip && ib.bth().dest_qp() == self.qpn {
                    let reply = decode(&f, at);
                    let frame = frame.to_vec();
                    self.keep(Dir::In, frame);
                    return Ok(Some(Some(reply)));
                }
            }
            Err(_) => {
                if frame_from(frame, self.addr.target_ip) {
                    self.undecodable += 1;
                    let frame = frame.to_vec();
                    self.keep(Dir::In, frame);
                }
            }
        }
        Ok(Some(None))
    }

    /// Empties the receive queue of frames for earlier connections' QPs, at most
    /// [`MAX_DRAIN`] frames: a target program of the last case that still resends its
    /// unanswered SEND while the next one starts can send many, and a receive ring they
    /// fill drops the new target's first packets, which are never sent again. Packets to
    /// the probe's own (fresh) QP are the case's, not leftovers: a target that sends of its
    /// own accord once connected (an `ib_read_bw` client) may have sent its first request
    /// already, so the first [`MAX_HELD`] are kept for [`Peer::recv`]. Returns how many
    /// frames were dropped.
    pub fn drain(&mut self) -> io::Result<usize> {
        let (mut read, mut dropped) = (0, 0);
        while read < MAX_DRAIN {
            match self.next_frame()? {
                None => break,
                Some(Some(reply)) if self.held.len() < MAX_HELD => self.held.push_back(reply),
                Some(_) => dropped += 1,
            }
            read += 1;
        }
        Ok(dropped)
    }

    /// Logs a frame for the pcap, unless the log is full.
    fn keep(&mut self, dir: Dir, frame: Vec<u8>) {
        if self.log.len() < MAX_LOG {
            self.log.push((SystemTime::now(), dir, frame));
        } else {
            self.log_dropped += 1;
        }
    }

    /// Frames logged so far.
    pub fn log_len(&self) -> usize {
        self.log.len()
    }

    /// Writes the frames logged since `from` as a pcap.
    pub fn write_pcap(&self, path: &Path, from: usize) -> io::Result<()> {
        let mut sink = PcapSink::create(path)?;
        for (t, _, frame) in &self.log[from.min(self.log.len())..] {
            let ts = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            sink.write(ts, frame)?;
        }
        Ok(())
    }

    /// The logged frames since `from`, with their direction.
    pub fn frames(&self, from: usize) -> impl Iterator<Item = (Dir, &[u8])> {
        self.log[from.min(self.log.len())..]
            .iter()
            .map(|(_, d, f)| (*d, f.as_slice()))
    }
}

fn decode(f: &Frame<'_>, at: Instant) -> Reply {
    let ib = f.ib();
    let bth = ib.bth();
    let aeth = ib.aeth();
    Reply {
        at,
        opcode: ib.opcode(),
        psn: bth.psn().value(),
        syndrome: aeth
            .as_ref()
            .and_then(|a| Syndrome::from_byte(a.syndrome_raw()).ok()),
        msn: aeth.as_ref().map(|a| a.msn()),
        orig: ib.atomic_ack_eth().map(|a| a.orig()),
        payload_len: ib.payload().len(),
        payload: ib.payload().to_vec(),
        icrc_ok: f.icrc_ok(),
    }
}

/// Whether an undecodable frame still comes from `ip` (IPv4 or IPv6, untagged).
fn frame_from(frame: &[u8], ip: IpAddr) -> bool {
    match (frame.get(12..14), ip) {
        (Some([0x08, 0x00]), IpAddr::V4(a)) => frame.get(26..30) == Some(&a.octets()[..]),
        (Some([0x86, 0xdd]), IpAddr::V6(a)) => frame.get(22..38) == Some(&a.octets()[..]),
        _ => false,
    }
}

fn invalid(e: ferroce_wire::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("cannot build the frame: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::os::fd::RawFd;
    use std::sync::Mutex;

    /// A link holding the frames queued on it (like a receive ring nobody read for a
    /// while) and then, if `endless`, one more frame every time, always the same one.
    struct Queued {
        frames: Mutex<VecDeque<Vec<u8>>>,
        endless: Option<Vec<u8>>,
    }

    impl Link for Queued {
        fn mac(&self) -> [u8; 6] {
            [2, 0, 0, 0, 0, 1]
        }
        fn send(&self, _frame: &[u8]) -> io::Result<bool> {
            Ok(true)
        }
        fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            let queued = self.frames.lock().unwrap().pop_front();
            Ok(queued.or_else(|| self.endless.clone()).map(|f| {
                buf[..f.len()].copy_from_slice(&f);
                f.len()
            }))
        }
        fn fd(&self) -> RawFd {
            -1
        }
    }

    impl Queued {
        fn new(frames: VecDeque<Vec<u8>>, endless: Option<Vec<u8>>) -> Arc<Queued> {
            Arc::new(Queued {
                frames: Mutex::new(frames),
                endless,
            })
        }
    }

    fn addr(ip: IpAddr, target_ip: IpAddr) -> Addressing {
        Addressing {
            mac: [2, 0, 0, 0, 0, 1],
            ip,
            target_mac: [2, 0, 0, 0, 0, 2],
            target_ip,
        }
    }

    const PROBE: [u8; 4] = [10, 0, 0, 1];
    const TARGET: [u8; 4] = [10, 0, 0, 2];

    /// A SEND that `from` sends to the probe's host for QP `qpn` (the probe's own QP is
    /// 0x42 in these tests), built by a peer standing in for the sender.
    fn frame_to(from: IpAddr, qpn: u32) -> Vec<u8> {
        let mut sender = Peer::new(
            Queued::new(VecDeque::new(), None),
            addr(from, PROBE.into()),
            0x99,
        );
        let bth = BthRepr {
            ack_req: false,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, qpn, ferroce_wire::Psn::new(1))
        };
        sender
            .build(bth, ExtRepr::default(), &[0; 8], &Tweak::default())
            .unwrap()
    }

    /// A probe (QP 0x42) on a link that always has one more frame from `from` queued: to
    /// the probe's QP if `answers`, to another QP of its host if not.
    fn flood(from: IpAddr, answers: bool) -> Peer {
        let frame = frame_to(from, if answers { 0x42 } else { 0x43 });
        let link = Queued::new(VecDeque::new(), Some(frame));
        Peer::new(link, addr(PROBE.into(), TARGET.into()), 0x42)
    }

    /// Draining drops frames for other QPs: the target program of a case just ended may
    /// still be resending to the probe's last QP, and a receive ring full of that drops
    /// the next target's first packets, never sent again. What came for the probe's own
    /// QP is kept: a target that sends by itself once connected may have sent already (CI
    /// once failed `target-read-implied-nak` against an `ferroce perf read-bw` client when
    /// the drain took its first READ: the probe then saw only the READ's retransmission,
    /// and the target, rightly, started no second retry for the implied NAK).
    #[test]
    fn drain_empties_the_queue_of_frames_for_other_qps() {
        let target: IpAddr = TARGET.into();
        let mut queued: VecDeque<_> = (0..100).map(|_| frame_to(target, 0x43)).collect();
        queued.push_back(frame_to(target, 0x42));
        queued.extend((0..100).map(|_| frame_to(target, 0x44)));
        let link = Queued::new(queued, None);
        let mut p = Peer::new(link.clone(), addr(PROBE.into(), target), 0x42);
        assert_eq!(p.drain().unwrap(), 200);
        assert!(link.frames.lock().unwrap().is_empty());
        // The case gets the packet to its QP that came before the drain, then the next.
        link.frames
            .lock()
            .unwrap()
            .push_back(frame_to(target, 0x42));
        let deadline = Instant::now() + Duration::from_secs(1);
        assert!(p.recv(deadline).unwrap().is_some());
        assert!(p.recv(deadline).unwrap().is_some());
        assert!(p.recv(Instant::now()).unwrap().is_none());
    }

    /// A stream of frames that are not answers ends a wait at its deadline, and draining
    /// a stream that never stops ends.
    #[test]
    fn endless_frames_do_not_hold_the_probe() {
        // On a thread: a regression fails here instead of hanging the test run.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let other: IpAddr = [10, 0, 0, 9].into();
            let mut p = flood(other, false);
            let t0 = Instant::now();
            let waited = p.recv(t0 + Duration::from_millis(20)).unwrap().is_none();
            let target: IpAddr = [10, 0, 0, 2].into();
            let mut p = flood(target, true);
            let drained = p.drain().unwrap();
            // The pcap log stops growing at its cap; the rest is counted.
            for _ in 0..MAX_LOG {
                p.recv(Instant::now()).unwrap();
            }
            let _ = tx.send((waited, drained, p.log_len(), p.log_dropped));
        });
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the probe was held by an endless stream of frames");
        // The first MAX_HELD answers are kept for the case, the rest dropped; the log
        // holds every frame read until its cap.
        let read = MAX_DRAIN + MAX_LOG - MAX_HELD;
        let expected = (true, MAX_DRAIN - MAX_HELD, MAX_LOG, (read - MAX_LOG) as u64);
        assert_eq!(got, expected);
    }
}

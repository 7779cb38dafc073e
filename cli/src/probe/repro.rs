//! Reproducers: the frames of a fuzz round (or any probe exchange) saved as pcapng, with
//! the connection they were sent on, so that they can be sent again on a *new* connection
//! (`ferroce probe replay`): each connection has its own QP number, PSNs, buffer address
//! and key, so replaying means moving every frame onto the new connection while keeping
//! exactly what was wrong with it.
//!
//! The connection is written in the section header's comment (Wireshark shows it under
//! Statistics > Capture File Properties); each frame's comment says whether the probe sent
//! it or received it. Only sent frames are replayed; received ones are for reading.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::{Block, PcapNgReader, PcapNgWriter};
use pcap_file::{DataLink, Endianness};

use ferroce_wire::icrc;
use ferroce_wire::{HeaderSet, Opcode, Psn};

use super::peer::{Addressing, Dir};

/// What a frame's connection-specific fields were relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnInfo {
    /// The target's QP number.
    pub tqpn: u32,
    /// The PSN the target expected first.
    pub epsn: u32,
    /// The target's buffer.
    pub va: u64,
    /// Its R_Key.
    pub rkey: u32,
    /// The probe's QP number.
    pub pqpn: u32,
}

/// A saved exchange.
#[derive(Debug, Clone)]
pub struct Repro {
    /// The connection the frames were sent on.
    pub conn: ConnInfo,
    /// What was found (one line), or empty.
    pub finding: String,
    /// The program the target ran (`write-bw`, ...), as the probe reached it.
    pub via: String,
    /// The frames, in order, with their direction.
    pub frames: Vec<(Dir, Vec<u8>)>,
}

const MAGIC: &str = "ferroce-probe-repro 1";

impl Repro {
    /// Writes the reproducer as pcapng.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let e = |e: pcap_file::PcapError| std::io::Error::other(e.to_string());
        let c = &self.conn;
        let comment = format!(
            "{MAGIC}\nvia={}\ntqpn={:#x}\nepsn={:#x}\nva={:#x}\nrkey={:#x}\npqpn={:#x}\nfinding={}\nreplay: ferroce probe replay FILE --via {} TARGET",
            self.via, c.tqpn, c.epsn, c.va, c.rkey, c.pqpn, self.finding.replace('\n', " "), self.via
        );
        let shb = SectionHeaderBlock {
            endianness: Endianness::native(),
            major_version: 1,
            minor_version: 0,
            section_length: -1,
            options: vec![
                SectionHeaderOption::Comment(comment.into()),
                SectionHeaderOption::UserApplication("ferroce probe".into()),
            ],
        };
        let file = BufWriter::new(File::create(path)?);
        let mut w = PcapNgWriter::with_section_header(file, shb).map_err(e)?;
        // The timestamps below are nanoseconds (pcap-file writes a `Duration` so); without
        // saying so, readers take pcapng's default, microseconds (Wireshark showed the
        // year 58865).
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        })
        .map_err(e)?;
        let t0 = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        for (i, (dir, frame)) in self.frames.iter().enumerate() {
            let what = match dir {
                Dir::Out => "sent",
                Dir::In => "received",
            };
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: t0 + Duration::from_micros(i as u64),
                original_len: frame.len() as u32,
                data: frame.as_slice().into(),
                options: vec![EnhancedPacketOption::Comment(what.into())],
            })
            .map_err(e)?;
        }
        // On disk before going on: the target may take this machine down next.
        let mut file = w.into_inner();
        std::io::Write::flush(&mut file)?;
        file.get_ref().sync_all()
    }

    /// The frames the probe sent (the ones a replay sends again).
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.frames
            .iter()
            .filter(|(d, _)| *d == Dir::Out)
            .map(|(_, f)| f.clone())
            .collect()
    }

    /// A reproducer with only the sent frames numbered in `keep` (1-based, in the order
    /// [`Repro::sent`] lists them; received frames are dropped, as they belonged to the
    /// whole exchange). For cutting a reproducer down by hand or by a harness that must
    /// reboot the target between tries (a kernel panic cannot be minimized in-process).
    pub fn cut(&self, keep: &[usize]) -> Result<Repro, String> {
        let sent = self.sent();
        let mut frames = Vec::with_capacity(keep.len());
        for &k in keep {
            let f = k.checked_sub(1).and_then(|i| sent.get(i)).ok_or_else(|| {
                format!("there is no sent packet {k} (the file has {})", sent.len())
            })?;
            frames.push((Dir::Out, f.clone()));
        }
        if frames.is_empty() {
            return Err("keep at least one packet".into());
        }
        let list: Vec<String> = keep.iter().map(|k| k.to_string()).collect();
        Ok(Repro {
            conn: self.conn,
            finding: format!(
                "{} [packets {} of {}]",
                self.finding,
                list.join(","),
                sent.len()
            ),
            via: self.via.clone(),
            frames,
        })
    }

    /// Reads a reproducer written by [`Repro::write`].
    pub fn read(path: &Path) -> Result<Repro, String> {
        let file =
            File::open(path).map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
        let not_ours = || {
            format!(
                "'{}' is not a ferroce probe reproducer (a pcapng file written by `ferroce probe fuzz`)",
                path.display()
            )
        };
        let mut r = PcapNgReader::new(BufReader::new(file)).map_err(|_| not_ours())?;
        let comment = r
            .section()
            .options
            .iter()
            .find_map(|o| match o {
                SectionHeaderOption::Comment(c) => Some(c.to_string()),
                _ => None,
            })
            .filter(|c| c.starts_with(MAGIC))
            .ok_or_else(not_ours)?;
        let mut conn = ConnInfo::default();
        let mut finding = String::new();
        let mut via = String::new();
        for line in comment.lines().skip(1) {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let num = || {
                u64::from_str_radix(v.trim_start_matches("0x"), 16)
                    .map_err(|_| format!("{}: bad {k} '{v}'", path.display()))
            };
            match k {
                "tqpn" => conn.tqpn = num()? as u32,
                "epsn" => conn.epsn = num()? as u32,
                "va" => conn.va = num()?,
                "rkey" => conn.rkey = num()? as u32,
                "pqpn" => conn.pqpn = num()? as u32,
                "finding" => finding = v.to_string(),
                "via" => via = v.to_string(),
                _ => {}
            }
        }
        let mut frames = Vec::new();
        while let Some(block) = r.next_block() {
            let block = block.map_err(|e| format!("{}: {e}", path.display()))?;
            if let Block::EnhancedPacket(p) = block {
                let received = p
                    .options
                    .iter()
                    .any(|o| matches!(o, EnhancedPacketOption::Comment(c) if c == "received"));
                let dir = if received { Dir::In } else { Dir::Out };
                frames.push((dir, p.data.to_vec()));
            }
        }
        Ok(Repro {
            conn,
            finding,
            via,
            frames,
        })
    }
}

/// Moves `frame`, sent on connection `from`, onto connection `to` between the ends in
/// `addr`: Ethernet and IP addresses; the BTH destination QP and PSN; the DETH source QP;
/// the address and key in a RETH, AtomicETH or IETH. Each keeps its distance from the
/// connection's value (a PSN 5 past the expected one stays 5 past it, a key one bit off
/// stays one bit off), and the ICRC stays as right or as wrong as it was. Fields a
/// truncated frame lacks are left alone.
pub fn rebase(frame: &[u8], from: &ConnInfo, to: &ConnInfo, addr: &Addressing) -> Vec<u8> {
    let mut f = frame.to_vec();
    if f.len() < 14 {
        return f;
    }
    f[0..6].copy_from_slice(&addr.target_mac);
    f[6..12].copy_from_slice(&addr.mac);
    let ip_off = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
    let ip_ok = match (f.get(ip_off).map(|b| b >> 4), addr.ip, addr.target_ip) {
        (Some(4), IpAddr::V4(s), IpAddr::V4(d)) if f.len() >= ip_off + 20 => {
            f[ip_off + 12..ip_off + 16].copy_from_slice(&s.octets());
            f[ip_off + 16..ip_off + 20].copy_from_slice(&d.octets());
            true
        }
        (Some(6), s, d) if f.len() >= ip_off + 40 => {
            let g = |ip: IpAddr| ferroce::net::gid::gid_of(ip).octets();
            f[ip_off + 8..ip_off + 24].copy_from_slice(&g(s));
            f[ip_off + 24..ip_off + 40].copy_from_slice(&g(d));
            true
        }
        _ => false,
    };
    if !ip_ok {
        return f;
    }
    // How wrong the ICRC was, before anything moved.
    let ip_packet = &frame[ip_off..];
    let icrc_error = trailer(ip_packet)
        .zip(icrc_of(ip_packet))
        .map(|(t, c)| t ^ c);
    let v4 = f[ip_off] >> 4 == 4;
    let ihl = if v4 {
        usize::from(f[ip_off] & 0xf) * 4
    } else {
        40
    };
    let bth = ip_off + ihl + 8;
    let put = |f: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        if let Some(dst) = f.get_mut(at..at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    };
    let be24 = |v: u32| [(v >> 16) as u8, (v >> 8) as u8, v as u8];
    if let Some(b) = f.get(bth..bth + 12) {
        let qp = u32::from_be_bytes([0, b[5], b[6], b[7]]);
        let psn = u32::from_be_bytes([0, b[9], b[10], b[11]]);
        let opcode = b[0];
        put(&mut f, bth + 5, &be24(move_qp(qp, from.tqpn, to.tqpn)));
        let psn = to.epsn.wrapping_add(psn.wrapping_sub(from.epsn)) & Psn::MASK;
        put(&mut f, bth + 9, &be24(psn));
        if let Some(op) = Opcode::new(opcode) {
            let h = op.headers();
            let ext = bth + 12;
            if h.contains(HeaderSet::RETH) || h.contains(HeaderSet::ATOMIC_ETH) {
                if let Some(b) = f.get(ext..ext + 12) {
                    let va = u64::from_be_bytes(b[0..8].try_into().unwrap_or_default());
                    let rkey = u32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
                    let va = to.va.wrapping_add(va.wrapping_sub(from.va));
                    put(&mut f, ext, &va.to_be_bytes());
                    put(&mut f, ext + 8, &(to.rkey ^ rkey ^ from.rkey).to_be_bytes());
                }
            }
            if h.contains(HeaderSet::DETH) {
                if let Some(b) = f.get(ext + 4..ext + 8) {
                    let src = u32::from_be_bytes([0, b[1], b[2], b[3]]);
                    put(&mut f, ext + 5, &be24(move_qp(src, from.pqpn, to.pqpn)));
                }
            }
            if h.contains(HeaderSet::IETH) {
                // The IETH follows the BTH directly (SEND_*_WITH_INVALIDATE).
                if let Some(b) = f.get(ext..ext + 4) {
                    let rkey = u32::from_be_bytes(b.try_into().unwrap_or_default());
                    put(&mut f, ext, &(to.rkey ^ rkey ^ from.rkey).to_be_bytes());
                }
            }
        }
    }
    ferroce_wire::ipv4::fill_header_checksum(&mut f[ip_off..]);
    if let Some(err) = icrc_error {
        if let Some(c) = icrc_of(&f[ip_off..]) {
            let n = f.len();
            f[n - 4..].copy_from_slice(&(c ^ err).to_le_bytes());
        }
    }
    f
}

/// A QP number keeps its distance (XOR) from the connection's; the special ones (0, the
/// GSI QP 1, the multicast QP 0xffffff) stay what they are.
fn move_qp(qp: u32, from: u32, to: u32) -> u32 {
    match qp {
        0 | 1 | 0xff_ffff => qp,
        _ => (to ^ qp ^ from) & 0xff_ffff,
    }
}

/// The ICRC trailer as sent.
fn trailer(ip_packet: &[u8]) -> Option<u32> {
    let n = ip_packet.len().checked_sub(4)?;
    Some(u32::from_le_bytes(ip_packet[n..].try_into().ok()?))
}

/// The ICRC the bytes before the trailer call for.
fn icrc_of(ip_packet: &[u8]) -> Option<u32> {
    let n = ip_packet.len().checked_sub(4)?;
    icrc::compute(&ip_packet[..n]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::peer::{Peer, Tweak};
    use ferroce::link::{Link, MemoryLink};
    use ferroce_wire::frame::Frame;
    use ferroce_wire::{BthRepr, ExtRepr, RethRepr};
    use std::sync::Arc;

    fn addr(last: u8) -> Addressing {
        Addressing {
            mac: [2, 0, 0, 0, 0, last],
            ip: [10, 0, 0, last].into(),
            target_mac: [2, 0, 0, 0, 0, 9],
            target_ip: [10, 0, 0, 9].into(),
        }
    }

    fn write_first(
        peer: &mut Peer,
        c: &ConnInfo,
        psn_off: u32,
        rkey: u32,
        tweak: &Tweak,
    ) -> Vec<u8> {
        let bth = BthRepr::new(
            Opcode::RC_RDMA_WRITE_FIRST,
            c.tqpn,
            Psn::new((c.epsn + psn_off) & Psn::MASK),
        );
        let ext = ExtRepr {
            reth: Some(RethRepr {
                va: c.va + 64,
                rkey,
                dma_len: 4096,
            }),
            ..Default::default()
        };
        peer.build(bth, ext, &[7; 1024], tweak).unwrap()
    }

    /// A frame moved to another connection is the frame the probe would have built on
    /// that connection, with the same mistakes: PSN offset, key off by one bit, bad ICRC.
    #[test]
    fn rebased_frames_keep_their_mistakes() {
        let (a, _b) = MemoryLink::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 9]).unwrap();
        let link: Arc<dyn Link> = Arc::new(a);
        let from = ConnInfo {
            tqpn: 0x11,
            epsn: 0xff_fffe,
            va: 0x7f00_0000_1000,
            rkey: 0x1234,
            pqpn: 0x42,
        };
        let to = ConnInfo {
            tqpn: 0x2345,
            epsn: 0x10,
            va: 0x5500_0000_0000,
            rkey: 0xabcd_0001,
            pqpn: 0x77,
        };
        for bad_icrc in [false, true] {
            let tweak = Tweak {
                bad_icrc,
                ..Default::default()
            };
            let mut p1 = Peer::new(link.clone(), addr(1), from.pqpn);
            let old = write_first(&mut p1, &from, 3, from.rkey ^ 0x100, &tweak);
            let mut p2 = Peer::new(link.clone(), addr(5), to.pqpn);
            let want = write_first(&mut p2, &to, 3, to.rkey ^ 0x100, &tweak);
            let got = rebase(&old, &from, &to, &addr(5));
            // The IP IDs and UDP source ports differ by construction; the rest is equal.
            let f = Frame::parse(&got).unwrap();
            let w = Frame::parse(&want).unwrap();
            assert_eq!(f.icrc_ok(), !bad_icrc);
            assert_eq!(f.ib().bth().psn(), w.ib().bth().psn());
            assert_eq!(f.ib().bth().dest_qp(), 0x2345);
            let reth = |f: &Frame<'_>| RethRepr::parse(&f.ib().reth().unwrap()).unwrap();
            assert_eq!(reth(&f), reth(&w));
            assert_eq!(f.datagram.src_gid(), w.datagram.src_gid());
        }
    }

    #[test]
    fn reproducers_round_trip() {
        let dir = std::env::temp_dir().join(format!("ferroce-repro-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.pcapng");
        let r = Repro {
            conn: ConnInfo {
                tqpn: 0x11,
                epsn: 0xabc,
                va: 0x1000,
                rkey: 0x55,
                pqpn: 0x42,
            },
            finding: "lost-liveness: no answer".into(),
            via: "write-bw".into(),
            frames: vec![(Dir::Out, vec![1; 70]), (Dir::In, vec![2; 60])],
        };
        r.write(&path).unwrap();
        // A reader that honours pcapng's timestamp resolution (Wireshark, `ferroce
        // decode`) sees the time of writing, not microseconds taken for nanoseconds.
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        for f in ferroce::capture::CaptureReader::open(&path).unwrap() {
            let t = f.unwrap().timestamp;
            assert!(
                now.abs_diff(t) < Duration::from_secs(60),
                "{t:?} against {now:?}"
            );
        }
        let back = Repro::read(&path).unwrap();
        assert_eq!(back.conn, r.conn);
        assert_eq!(back.finding, r.finding);
        assert_eq!(back.via, r.via);
        assert_eq!(back.frames, r.frames);
        let e = Repro::read(&dir.join("nope")).unwrap_err();
        assert!(e.contains("cannot open"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cutting_keeps_the_named_sent_packets_in_the_given_order() {
        let r = Repro {
            conn: ConnInfo::default(),
            finding: "kernel-log: BUG".into(),
            via: "write-bw".into(),
            frames: vec![
                (Dir::Out, vec![1]),
                (Dir::In, vec![9]),
                (Dir::Out, vec![2]),
                (Dir::Out, vec![3]),
            ],
        };
        let c = r.cut(&[3, 1]).unwrap();
        assert_eq!(c.frames, vec![(Dir::Out, vec![3]), (Dir::Out, vec![1])]);
        assert_eq!(c.finding, "kernel-log: BUG [packets 3,1 of 3]");
        assert_eq!(c.conn, r.conn);
        assert!(r.cut(&[4]).unwrap_err().contains("no sent packet 4"));
        assert!(r.cut(&[0]).is_err());
        assert!(r.cut(&[]).is_err());
    }
}

//! Reading and writing packet captures (pcap and pcapng) with the `pcap-file` crate.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

/// How a captured frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet II (DLT_EN10MB).
    Ethernet,
    /// A bare IPv4 or IPv6 packet (DLT_RAW, IPV4, IPV6).
    RawIp,
    /// Linux "cooked" capture v1 (`tcpdump -i any`).
    LinuxSll,
    /// Anything else; such frames are not RoCE as far as the decoder is concerned.
    Other(u32),
}

impl From<DataLink> for LinkType {
    fn from(d: DataLink) -> LinkType {
        match d {
            DataLink::ETHERNET => LinkType::Ethernet,
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => LinkType::RawIp,
            DataLink::LINUX_SLL => LinkType::LinuxSll,
            other => LinkType::Other(u32::from(other)),
        }
    }
}

/// One frame read from a capture.
#[derive(Debug, Clone)]
pub struct CapturedFrame {
    /// 1-based position in the file, as Wireshark numbers frames.
    pub index: usize,
    /// Capture timestamp since the Unix epoch.
    pub timestamp: Duration,
    /// The link type of the capture the frame came from.
    pub link: LinkType,
    /// The frame's bytes as captured.
    pub data: Vec<u8>,
}

impl CapturedFrame {
    /// The IP packet inside the frame, if the link layer carries IP.
    pub fn ip_payload(&self) -> Option<&[u8]> {
        match self.link {
            LinkType::RawIp => Some(&self.data),
            LinkType::LinuxSll => {
                // 16-byte header; the protocol (EtherType) is in its last two bytes.
                let proto = u16::from_be_bytes([*self.data.get(14)?, *self.data.get(15)?]);
                (proto == 0x0800 || proto == 0x86dd).then(|| &self.data[16..])
            }
            LinkType::Ethernet | LinkType::Other(_) => None,
        }
    }
}

/// Why a capture could not be read.
#[derive(Debug)]
pub enum CaptureError {
    /// The file could not be opened or read.
    Open(std::io::Error),
    /// The file is not pcap or pcapng.
    Format(String),
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::Open(e) => write!(f, "{e}"),
            CaptureError::Format(e) => write!(f, "not a pcap or pcapng capture ({e})"),
        }
    }
}

impl std::error::Error for CaptureError {}

enum Inner<R: Read> {
    Pcap(PcapReader<R>),
    PcapNg(PcapNgReader<R>),
}

/// What a pcapng interface description says about its packets.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    /// `if_tsresol`: a timestamp counts units of 10^-n seconds, or 2^-n with the top bit
    /// set; 6 (microseconds) when the option is absent.
    tsresol: u8,
    /// `if_tsoffset`: seconds to add to every timestamp.
    tsoffset: u64,
}

impl Interface {
    fn of(i: &InterfaceDescriptionBlock<'_>) -> Interface {
        let mut me = Interface {
            link: LinkType::from(i.linktype),
            tsresol: 6,
            tsoffset: 0,
        };
        for o in &i.options {
            match o {
                InterfaceDescriptionOption::IfTsResol(r) => me.tsresol = *r,
                InterfaceDescriptionOption::IfTsOffset(s) => me.tsoffset = *s,
                _ => {}
            }
        }
        me
    }

    /// The time of a packet whose raw 64-bit timestamp `pcap-file` handed over as that
    /// many nanoseconds, whatever the interface's resolution.
    fn time(&self, raw: Duration) -> Duration {
        let ticks = raw.as_nanos();
        let nanos = if self.tsresol & 0x80 == 0 {
            let exp = u32::from(self.tsresol);
            if exp <= 9 {
                ticks.saturating_mul(10u128.pow(9 - exp))
            } else {
                ticks / 10u128.saturating_pow(exp - 9)
            }
        } else {
            let bits = u32::from(self.tsresol & 0x7f);
            ticks
                .saturating_mul(1_000_000_000)
                .checked_shr(bits)
                .unwrap_or(0)
        };
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        Duration::from_nanos(nanos).saturating_add(Duration::from_secs(self.tsoffset))
    }
}

/// A streaming reader over a pcap or pcapng file.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    /// The pcapng interfaces seen so far in the section, by interface id.
    interfaces: Vec<Interface>,
    next_index: usize,
}

impl CaptureReader<BufReader<File>> {
    /// Opens a capture file, detecting pcap or pcapng from its magic number.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let mut magic = [0u8; 4];
        File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => CaptureError::Format("file too short".into()),
                _ => CaptureError::Open(e),
            })?;
        let file = BufReader::new(File::open(path).map_err(CaptureError::Open)?);
        Self::new(file, magic)
    }
}

impl<R: Read> CaptureReader<R> {
    fn new(reader: R, magic: [u8; 4]) -> Result<Self, CaptureError> {
        let fmt = |e: pcap_file::PcapError| CaptureError::Format(e.to_string());
        let inner = if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
            Inner::PcapNg(PcapNgReader::new(reader).map_err(fmt)?)
        } else {
            Inner::Pcap(PcapReader::new(reader).map_err(fmt)?)
        };
        Ok(CaptureReader {
            inner,
            interfaces: Vec::new(),
            next_index: 1,
        })
    }

    /// The next frame; `Err` for a corrupt record (after which reading stops).
    pub fn next_frame(&mut self) -> Option<Result<CapturedFrame, CaptureError>> {
        let fmt = |e: pcap_file::PcapError| CaptureError::Format(e.to_string());
        let index = self.next_index;
        let frame = match &mut self.inner {
            Inner::Pcap(r) => {
                let link = LinkType::from(r.header().datalink);
                match r.next_packet()? {
                    Ok(p) => Ok(CapturedFrame {
                        index,
                        timestamp: p.timestamp,
                        link,
                        data: p.data.into_owned(),
                    }),
                    Err(e) => Err(fmt(e)),
                }
            }
            Inner::PcapNg(r) => loop {
                let block = match r.next_block()? {
                    Ok(b) => b,
                    Err(e) => break Err(fmt(e)),
                };
                match block {
                    Block::SectionHeader(_) => self.interfaces.clear(),
                    Block::InterfaceDescription(i) => self.interfaces.push(Interface::of(&i)),
                    Block::EnhancedPacket(p) => {
                        let interface = usize::try_from(p.interface_id)
                            .ok()
                            .and_then(|i| self.interfaces.get(i).copied())
                            .unwrap_or(Interface {
                                link: LinkType::Other(u32::MAX),
                                tsresol: 6,
                                tsoffset: 0,
                            });
                        break Ok(CapturedFrame {
                            index,
                            timestamp: interface.time(p.timestamp),
                            link: interface.link,
                            data: p.data.into_owned(),
                        });
                    }
                    // Statistics, name resolution and the like carry no frames.
                    _ => {}
                }
            },
        };
        self.next_index += 1;
        Some(frame)
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<CapturedFrame, CaptureError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame()
    }
}

/// Writes Ethernet frames to a classic pcap file (what `--pcap FILE` produces).
pub struct PcapSink<W: Write> {
    writer: PcapWriter<W>,
}

impl PcapSink<BufWriter<File>> {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Self::new(BufWriter::new(File::create(path)?))
    }
}

impl<W: Write> PcapSink<W> {
    /// An Ethernet pcap with a snap length large enough for jumbo frames.
    pub fn new(w: W) -> std::io::Result<Self> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        let writer = PcapWriter::with_header(w, header).map_err(std::io::Error::other)?;
        Ok(PcapSink { writer })
    }

    /// Appends one frame.
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(frame.len()).map_err(std::io::Error::other)?;
        self.writer
            .write_packet(&PcapPacket::new(timestamp, len, frame))
            .map(|_| ())
            .map_err(std::io::Error::other)
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::PcapNgWriter;

    /// A pcapng file of one interface with `options` and one packet whose raw timestamp
    /// is `raw` (pcap-file writes a `Duration`'s nanoseconds as the raw count).
    fn pcapng(options: Vec<InterfaceDescriptionOption<'static>>, raw: u64) -> Vec<u8> {
        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options,
        })
        .unwrap();
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(raw),
            original_len: 4,
            data: vec![1, 2, 3, 4].into(),
            options: vec![],
        })
        .unwrap();
        w.into_inner()
    }

    fn first_time(bytes: Vec<u8>) -> Duration {
        let mut r = CaptureReader::new(&bytes[..], [0x0a, 0x0d, 0x0d, 0x0a]).unwrap();
        let f = r.next().unwrap().unwrap();
        assert_eq!(
            (f.link, f.data.as_slice()),
            (LinkType::Ethernet, &[1, 2, 3, 4][..])
        );
        f.timestamp
    }

    #[test]
    fn pcapng_timestamps_follow_the_interface_resolution() {
        // 2026-11-29 17:45:26.059493 UTC, as dumpcap and editcap write it: microseconds
        // (no if_tsresol option). It once read as 1970-01-21.
        let us = 1_795_974_326_059_493;
        assert_eq!(first_time(pcapng(vec![], us)), Duration::from_micros(us));
        let ns = us * 1000 + 7;
        let nano = vec![InterfaceDescriptionOption::IfTsResol(9)];
        assert_eq!(first_time(pcapng(nano, ns)), Duration::from_nanos(ns));
        // Milliseconds, 2^-10 s, and an offset in seconds.
        let ms = vec![InterfaceDescriptionOption::IfTsResol(3)];
        assert_eq!(first_time(pcapng(ms, 1500)), Duration::from_millis(1500));
        let bin = vec![InterfaceDescriptionOption::IfTsResol(0x80 | 10)];
        assert_eq!(first_time(pcapng(bin, 3 * 1024)), Duration::from_secs(3));
        let off = vec![
            InterfaceDescriptionOption::IfTsResol(9),
            InterfaceDescriptionOption::IfTsOffset(100),
        ];
        assert_eq!(first_time(pcapng(off, 5)), Duration::new(100, 5));
        // Resolutions finer than a nanosecond, and absurd ones, do not overflow.
        let ps = vec![InterfaceDescriptionOption::IfTsResol(12)];
        assert_eq!(first_time(pcapng(ps, 2_000_000)), Duration::from_micros(2));
        let huge = vec![InterfaceDescriptionOption::IfTsResol(0x7f)];
        assert_eq!(first_time(pcapng(huge, u64::MAX)), Duration::ZERO);
        let tiny = vec![InterfaceDescriptionOption::IfTsResol(0)];
        assert_eq!(
            first_time(pcapng(tiny, u64::MAX)),
            Duration::from_nanos(u64::MAX)
        );
    }
}

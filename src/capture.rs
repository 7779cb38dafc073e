//! Reading and writing packet captures (pcap and pcapng) with the `pcap-file` crate.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
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

/// A streaming reader over a pcap or pcapng file.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    /// Link types of the pcapng interfaces seen so far, by interface id.
    interfaces: Vec<LinkType>,
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
                    Block::InterfaceDescription(i) => {
                        self.interfaces.push(LinkType::from(i.linktype))
                    }
                    Block::EnhancedPacket(p) => {
                        let link = usize::try_from(p.interface_id)
                            .ok()
                            .and_then(|i| self.interfaces.get(i).copied())
                            .unwrap_or(LinkType::Other(u32::MAX));
                        break Ok(CapturedFrame {
                            index,
                            timestamp: p.timestamp,
                            link,
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

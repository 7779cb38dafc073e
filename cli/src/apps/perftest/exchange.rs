//! perftest's out-of-band exchange over TCP (port 18515 by default), as perftest 6.x (the
//! `ib_*_bw` / `ib_*_lat` of Debian's perftest 4.5) speaks it:
//!
//! 1. 16 bytes each way: the version string ("6.06"), NUL-padded.
//! 2. 4 + 4 bytes: cycle buffer (page size) and cache line size, big-endian; both sides
//!    use the larger of the two values.
//! 3. 2 bytes: the port MTU as the decimal digit of `enum ibv_mtu` and a NUL ("3\0" for
//!    1024); both sides use the smaller.
//! 4. "Handshakes": 108-byte [`KeyMsg`] lines `lid:out_reads:qpn:psn:rkey:vaddr:gid:srqn:`,
//!    one per QP before connecting, again after, one after RTR, more around the data
//!    transfer ([`Script`]).
//! 5. Bandwidth tests of RDMA verbs: five 8-byte fields of the client's result
//!    ([`BwReport`]), which the server prints.
//! 6. A last handshake, then "done\0" from each side.
//!
//! In every exchange the client writes first and then reads; the server reads, then writes.

use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use ferroce_transport::Mtu;

use super::params::{Kind, Test, Verb};

/// The version this implementation speaks.
pub const VERSION: &str = "6.06";
/// Bytes of the version message.
pub const VERSION_LEN: usize = 16;
/// Oldest peer perftest 6.x (and ferroce) talks to.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Bytes of a handshake message (NUL included).
pub const KEY_MSG_LEN: usize = 108;
/// The largest cycle buffer (page size) a peer may announce: 64 KiB pages exist (arm64,
/// ppc64); nothing larger does.
pub const MAX_CYCLE_BUFFER: u32 = 64 << 10;
/// The largest cache line a peer may announce.
pub const MAX_CACHE_LINE: u32 = 4096;
/// What each side sends last.
pub const DONE: &[u8; 5] = b"done\0";

/// Why the exchange failed.
#[derive(Debug)]
pub enum ExchangeError {
    Io(io::Error),
    /// The peer sent something perftest would not.
    Malformed(String),
    /// The peer's perftest is too old.
    Version(String),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Io(e) => write!(f, "out-of-band exchange: {e}"),
            ExchangeError::Malformed(m) => write!(f, "out-of-band exchange: {m}"),
            ExchangeError::Version(v) => write!(
                f,
                "peer speaks perftest version '{v}'; versions older than {MIN_PEER_VERSION:.2} are not supported"
            ),
        }
    }
}

impl std::error::Error for ExchangeError {}

impl From<io::Error> for ExchangeError {
    fn from(e: io::Error) -> Self {
        ExchangeError::Io(e)
    }
}

/// One side's QP: what a handshake carries (perftest's `struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMsg {
    pub lid: u16,
    /// Outstanding RDMA READ / atomic requests the side accepts (1 in other tests).
    pub out_reads: u32,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    /// Where the peer's RDMA operations on this QP go.
    pub vaddr: u64,
    pub gid: Ipv6Addr,
    /// XRC/DC SRQ number (0 here).
    pub srqn: u32,
}

impl KeyMsg {
    /// The 108-byte wire form: `%04x:%04x:%06x:%06x:%08x:%016llx:` then each GID byte as
    /// `%02x:`, then `%08x:` and a NUL.
    pub fn encode(&self) -> [u8; KEY_MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads & 0xffff,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.octets() {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEY_MSG_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses the wire form (colon-separated hex fields, as perftest reads them).
    pub fn decode(msg: &[u8]) -> Result<KeyMsg, ExchangeError> {
        let bad = || {
            ExchangeError::Malformed(format!(
                "bad handshake message '{}'",
                String::from_utf8_lossy(msg).trim_end_matches('\0')
            ))
        };
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| bad())?;
        let f: Vec<&str> = text.split(':').collect();
        // 6 fields, 16 GID bytes, the SRQ number, and what follows the last colon.
        if f.len() < 23 {
            return Err(bad());
        }
        let hex32 = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(f[6 + i], 16).map_err(|_| bad())?;
        }
        Ok(KeyMsg {
            lid: u16::from_str_radix(f[0], 16).map_err(|_| bad())?,
            out_reads: hex32(f[1])?,
            qpn: hex32(f[2])?,
            psn: hex32(f[3])?,
            rkey: hex32(f[4])?,
            vaddr: u64::from_str_radix(f[5], 16).map_err(|_| bad())?,
            gid: Ipv6Addr::from(gid),
            srqn: hex32(f[22])?,
        })
    }
}

/// The version message: the string, NUL-padded to 16 bytes.
pub fn encode_version(v: &str) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    out[..n].copy_from_slice(&v.as_bytes()[..n]);
    out
}

/// The version string of a version message.
pub fn decode_version(msg: &[u8]) -> String {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    String::from_utf8_lossy(&msg[..end]).into_owned()
}

/// The numeric value of a version string, as C's `atof` reads it ("6.06" → 6.06).
pub fn version_number(v: &str) -> f64 {
    let t = v.trim_start();
    let mut end = 0;
    let mut dot = false;
    for (i, c) in t.char_indices() {
        match c {
            '0'..='9' => end = i + 1,
            '.' if !dot => dot = true,
            _ => break,
        }
    }
    t[..end].parse().unwrap_or(0.0)
}

/// The MTU message: `enum ibv_mtu` as a decimal digit and a NUL.
pub fn encode_mtu(mtu: Mtu) -> [u8; 2] {
    [b'0' + mtu as u8, 0]
}

/// The MTU of an MTU message, if it names one.
pub fn decode_mtu(msg: &[u8]) -> Option<Mtu> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let n: u32 = std::str::from_utf8(&msg[..end]).ok()?.trim().parse().ok()?;
    Mtu::ALL.into_iter().find(|m| *m as u32 == n)
}

/// A bandwidth result as exchanged at the end of RDMA BW tests (perftest's
/// `struct bw_report_data`): each field 8 bytes big-endian, the doubles byte-swapped.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations (all QPs together).
    pub iters: u64,
    /// Peak bandwidth, in the report's unit (MiB/s or Gb/s).
    pub bw_peak: f64,
    /// Average bandwidth, in the report's unit.
    pub bw_avg: f64,
    /// Messages per second, in millions.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five fields in the order they are exchanged.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// The report of five exchanged fields.
    pub fn decode(f: &[[u8; 8]; 5]) -> BwReport {
        let d = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: d(f[2]),
            bw_avg: d(f[3]),
            msg_rate: d(f[4]),
        }
    }
}

/// Handshakes between the message sizes of `-a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerSize {
    None,
    /// One before each size but the first, after posting its receives (`ib_send_lat`).
    Before,
    /// That, and one after every size (`ib_send_bw`).
    BeforeAndAfter,
}

/// How many handshakes a test does around its data transfer (after the version, system
/// data and MTU exchanges), as the golden captures and perftest 6.x show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Script {
    /// Before the first data transfer: one per QP before connecting, one per QP after,
    /// one after RTR, and one more in SEND BW (after the receives are posted) and in the
    /// latency tests.
    pub before: usize,
    /// Handshakes around each message size of `-a`.
    pub per_size: PerSize,
    /// RDMA BW tests: a handshake and the client's [`BwReport`] after the transfer.
    pub reports: bool,
    /// A last handshake and "done" (all tests but `ib_write_lat`).
    pub close: bool,
}

impl Script {
    pub fn of(test: Test, num_qps: usize) -> Script {
        let base = 2 * num_qps + 1;
        match (test.kind, test.verb) {
            (Kind::Bw, Verb::Send) => Script {
                before: base + 1,
                per_size: PerSize::BeforeAndAfter,
                reports: false,
                close: true,
            },
            (Kind::Bw, _) => Script {
                before: base,
                per_size: PerSize::None,
                reports: true,
                close: true,
            },
            (Kind::Lat, verb) => Script {
                before: base + 1,
                per_size: if verb == Verb::Send {
                    PerSize::Before
                } else {
                    PerSize::None
                },
                reports: false,
                close: verb != Verb::Write,
            },
        }
    }

    /// Sizes (in bytes) of the messages one side sends after the MTU exchange, for a run
    /// of `sizes` message sizes: 108 for a handshake, 8 for a report field, 5 for "done".
    pub fn messages(&self, sizes: usize, all_sizes: bool) -> Vec<usize> {
        let mut v = vec![KEY_MSG_LEN; self.before];
        if all_sizes {
            let n = sizes.max(1);
            let extra = match self.per_size {
                PerSize::None => 0,
                PerSize::Before => n - 1,
                PerSize::BeforeAndAfter => 2 * n - 1,
            };
            v.extend(std::iter::repeat_n(KEY_MSG_LEN, extra));
        }
        if self.reports {
            v.push(KEY_MSG_LEN);
            v.extend([8; 5]);
        }
        if self.close {
            v.push(KEY_MSG_LEN);
            v.push(DONE.len());
        }
        v
    }
}

/// The TCP side channel of a run.
#[derive(Debug)]
pub struct Control<S> {
    stream: S,
    client: bool,
}

impl<S: Read + Write> Control<S> {
    /// A channel over `stream`; `client` writes first in each exchange.
    pub fn new(stream: S, client: bool) -> Self {
        Control { stream, client }
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The underlying stream, giving up the channel.
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// One exchange: the client sends `mine` then reads `theirs`, the server the other way
    /// round (perftest's `ctx_xchg_data`).
    pub fn xchg(&mut self, mine: &[u8], theirs: &mut [u8]) -> io::Result<()> {
        if self.client {
            self.stream.write_all(mine)?;
            self.stream.flush()?;
            self.stream.read_exact(theirs)
        } else {
            self.stream.read_exact(theirs)?;
            self.stream.write_all(mine)?;
            self.stream.flush()
        }
    }

    /// Exchanges versions; returns the peer's, refusing one older than 5.70 as perftest 6.x.
    pub fn versions(&mut self) -> Result<String, ExchangeError> {
        let mut theirs = [0u8; VERSION_LEN];
        self.xchg(&encode_version(VERSION), &mut theirs)?;
        let v = decode_version(&theirs);
        if version_number(&v) < MIN_PEER_VERSION {
            return Err(ExchangeError::Version(v));
        }
        Ok(v)
    }

    /// Exchanges cycle buffer and cache line sizes; returns the larger of each.
    ///
    /// The peer's values size this side's buffers, so they are held to what real hosts
    /// announce (a page of at most [`MAX_CYCLE_BUFFER`], a cache line of at most
    /// [`MAX_CACHE_LINE`], powers of two): a peer cannot make this side allocate gigabytes.
    pub fn sys_data(&mut self, cycle: u32, cache_line: u32) -> Result<(u32, u32), ExchangeError> {
        let mut c = [0u8; 4];
        self.xchg(&cycle.to_be_bytes(), &mut c)?;
        let mut l = [0u8; 4];
        self.xchg(&cache_line.to_be_bytes(), &mut l)?;
        let (c, l) = (u32::from_be_bytes(c), u32::from_be_bytes(l));
        if !c.is_power_of_two() || c > MAX_CYCLE_BUFFER {
            return Err(ExchangeError::Malformed(format!(
                "peer's cycle buffer of {c} bytes is not a power of two up to {MAX_CYCLE_BUFFER}"
            )));
        }
        if !l.is_power_of_two() || l > MAX_CACHE_LINE {
            return Err(ExchangeError::Malformed(format!(
                "peer's cache line of {l} bytes is not a power of two up to {MAX_CACHE_LINE}"
            )));
        }
        Ok((cycle.max(c), cache_line.max(l)))
    }

    /// Exchanges MTUs; returns the smaller (ours if the peer's is not valid).
    pub fn mtu(&mut self, mine: Mtu) -> Result<Mtu, ExchangeError> {
        let mut theirs = [0u8; 2];
        self.xchg(&encode_mtu(mine), &mut theirs)?;
        Ok(match decode_mtu(&theirs) {
            Some(m) if (m as u8) < (mine as u8) => m,
            _ => mine,
        })
    }

    /// One handshake.
    pub fn handshake(&mut self, mine: &KeyMsg) -> Result<KeyMsg, ExchangeError> {
        let mut theirs = [0u8; KEY_MSG_LEN];
        self.xchg(&mine.encode(), &mut theirs)?;
        KeyMsg::decode(&theirs)
    }

    /// Exchanges bandwidth reports field by field.
    pub fn bw_reports(&mut self, mine: &BwReport) -> Result<BwReport, ExchangeError> {
        let mut theirs = [[0u8; 8]; 5];
        for (m, t) in mine.encode().iter().zip(theirs.iter_mut()) {
            self.xchg(m, t)?;
        }
        Ok(BwReport::decode(&theirs))
    }

    /// The end of a run: a handshake, then "done" (which perftest never reads back).
    pub fn close(mut self, mine: &KeyMsg) -> Result<S, ExchangeError> {
        self.handshake(mine)?;
        self.stream.write_all(DONE)?;
        self.stream.flush()?;
        Ok(self.stream)
    }
}

impl Control<TcpStream> {
    /// Connects to a perftest server.
    pub fn connect(server: &str, port: u16, timeout: Duration) -> io::Result<Self> {
        let addrs: Vec<_> = (server, port).to_socket_addrs()?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve {server}"));
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(timeout))?;
                    return Ok(Control::new(s, true));
                }
                Err(e) => last = e,
            }
        }
        Err(io::Error::new(
            last.kind(),
            format!("Couldn't connect to {server}:{port}: {last}"),
        ))
    }

    /// Waits for a perftest client on `port`.
    pub fn accept(port: u16, timeout: Duration) -> io::Result<Self> {
        let listener = TcpListener::bind(("::", port))
            .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
            .map_err(|e| {
                io::Error::new(e.kind(), format!("Couldn't listen to port {port}: {e}"))
            })?;
        Self::accept_on(&listener, timeout)
    }

    /// Waits for a perftest client on a listener the caller bound.
    pub fn accept_on(listener: &TcpListener, timeout: Duration) -> io::Result<Self> {
        let (s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        Ok(Control::new(s, false))
    }

    /// Sets how long a read may wait (`None`: for ever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// [`Control::close`], then a short wait for the peer's "done" so that closing does not
    /// reset a connection with unread data.
    pub fn finish(self, mine: &KeyMsg) -> Result<(), ExchangeError> {
        let mut s = self.close(mine)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut done = [0u8; 5];
        let _ = s.read(&mut done);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's first handshake of `ib_write_bw -F -n 5 -s 64` in
    /// tests/vectors/rxe/write_bw_s64.pcap (frame 14).
    const WRITE_BW_KEY: &[u8] = b"0000:0001:000015:57f89e:00000676:000055907f141000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01:00000000:\0";

    #[test]
    fn key_msg_round_trips_the_golden_bytes() {
        assert_eq!(WRITE_BW_KEY.len(), KEY_MSG_LEN);
        let k = KeyMsg::decode(WRITE_BW_KEY).unwrap();
        assert_eq!(
            k,
            KeyMsg {
                lid: 0,
                out_reads: 1,
                qpn: 0x15,
                psn: 0x57f89e,
                rkey: 0x676,
                vaddr: 0x5590_7f14_1000,
                gid: "::ffff:10.77.0.1".parse().unwrap(),
                srqn: 0,
            }
        );
        assert_eq!(&k.encode()[..], WRITE_BW_KEY);
        // ib_read_bw advertises rxe's 128 outstanding reads (read_bw_s64.pcap, frame 15).
        let r = KeyMsg::decode(b"0000:0080:000016:af4d82:0000074e:000055e84e9b9000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\0").unwrap();
        assert_eq!((r.out_reads, r.qpn, r.psn), (0x80, 0x16, 0xaf4d82));
        assert!(KeyMsg::decode(b"0000:0001:zz").is_err());
        assert!(KeyMsg::decode(&[0u8; KEY_MSG_LEN]).is_err());
    }

    #[test]
    fn prelude_messages_match_the_golden_bytes() {
        // write_bw_s64.pcap frames 4, 8, 10 and 12.
        let v = hex("362e3036000000000000000000000000");
        assert_eq!(&encode_version(VERSION)[..], &v[..]);
        assert_eq!(decode_version(&v), "6.06");
        assert!((version_number("6.06") - 6.06).abs() < 1e-9);
        assert!((version_number("5.70 beta") - 5.70).abs() < 1e-9);
        assert_eq!(version_number("junk"), 0.0);
        assert_eq!(4096u32.to_be_bytes().to_vec(), hex("00001000"));
        assert_eq!(64u32.to_be_bytes().to_vec(), hex("00000040"));
        assert_eq!(encode_mtu(Mtu::Mtu1024).to_vec(), hex("3300"));
        assert_eq!(decode_mtu(&hex("3300")), Some(Mtu::Mtu1024));
        assert_eq!(decode_mtu(b"9\0"), None);
        assert_eq!(&DONE[..], &hex("646f6e6500")[..]);
    }

    #[test]
    fn bw_report_round_trips_the_golden_bytes() {
        // The client's report in write_bw_s64.pcap, frames 34 to 42.
        let fields = [
            "0000000000000040",
            "0000000000000005",
            "3fe247997df98b51",
            "3fc9c3f6c0d4c02c",
            "3f6b045e9264e4b4",
        ]
        .map(|h| <[u8; 8]>::try_from(hex(h)).unwrap());
        let r = BwReport::decode(&fields);
        assert_eq!((r.size, r.iters), (64, 5));
        assert!((r.bw_peak - 0.5712).abs() < 1e-3, "{r:?}");
        assert!(r.bw_avg > 0.0 && r.bw_avg < r.bw_peak);
        assert!(r.msg_rate > 0.0 && r.msg_rate < 0.01);
        assert_eq!(r.encode(), fields);
    }

    #[test]
    fn scripts_count_the_handshakes_of_the_reference_runs() {
        // Counts of 108-byte messages per direction in rxe <-> rxe runs (golden captures
        // and reference runs of perftest 4.5 in the rxe VM).
        assert_eq!(
            Script::of(Test::WRITE_BW, 1).messages(1, false).len(),
            3 + 1 + 5 + 2
        );
        assert_eq!(Script::of(Test::WRITE_BW, 2).before, 5);
        assert_eq!(
            Script::of(Test::SEND_BW, 1).messages(1, false),
            vec![108; 4].into_iter().chain([108, 5]).collect::<Vec<_>>()
        );
        assert_eq!(Script::of(Test::SEND_BW, 2).before, 6);
        let a = Script::of(Test::SEND_BW, 1).messages(23, true);
        assert_eq!(a.iter().filter(|&&n| n == KEY_MSG_LEN).count(), 50);
        assert_eq!(
            Script::of(Test::WRITE_LAT, 1).messages(1, false),
            vec![108; 4]
        );
        assert_eq!(Script::of(Test::SEND_LAT, 1).messages(1, false).len(), 6);
        assert_eq!(Script::of(Test::READ_LAT, 1).messages(1, false).len(), 6);
        // ib_send_lat -a posts receives and syncs before each size (perftest's send_lat.c).
        assert_eq!(
            Script::of(Test::SEND_LAT, 1).messages(23, true).len(),
            4 + 22 + 2
        );
    }

    #[test]
    fn control_orders_client_and_server_writes() {
        // A server reads first: with nothing to read it must not have written.
        let mut srv = Control::new(Pipe::new(b""), false);
        assert!(srv.versions().is_err());
        assert!(srv.get_ref().written.is_empty());
        // A client writes first, then reads.
        let mut cli = Control::new(Pipe::new(&encode_version("6.06")), true);
        assert_eq!(cli.versions().unwrap(), "6.06");
        assert_eq!(&cli.get_ref().written[..], &encode_version(VERSION)[..]);
        let mut old = Control::new(Pipe::new(&encode_version("5.60")), true);
        assert!(matches!(old.versions(), Err(ExchangeError::Version(_))));
        // System data and MTU take the larger / smaller value.
        let mut cli = Control::new(Pipe::new(&[0, 0, 0x40, 0, 0, 0, 0, 0x80, b'2', 0]), true);
        assert_eq!(cli.sys_data(4096, 64).unwrap(), (0x4000, 128));
        assert_eq!(cli.mtu(Mtu::Mtu4096).unwrap(), Mtu::Mtu512);
    }

    #[test]
    fn a_peer_cannot_size_our_buffers_beyond_real_hosts() {
        // A 4 GiB "page" would make every buffer 4 GiB; a 3-byte one is no page at all.
        for bad in [
            [0xff, 0xff, 0xff, 0xff],
            [0, 0, 0, 3],
            [0, 0, 0, 0],
            [0, 2, 0, 0],
        ] {
            let mut input = bad.to_vec();
            input.extend_from_slice(&[0, 0, 0, 64]);
            let mut cli = Control::new(Pipe::new(&input), true);
            assert!(
                matches!(cli.sys_data(4096, 64), Err(ExchangeError::Malformed(_))),
                "cycle {bad:?}"
            );
        }
        let mut cli = Control::new(Pipe::new(&[0, 0, 0x10, 0, 0, 1, 0, 0]), true);
        assert!(matches!(
            cli.sys_data(4096, 64),
            Err(ExchangeError::Malformed(_))
        ));
        let mut cli = Control::new(Pipe::new(&[0, 1, 0, 0, 0, 0, 0x10, 0]), true);
        assert_eq!(cli.sys_data(4096, 64).unwrap(), (MAX_CYCLE_BUFFER, 4096));
    }

    /// Reads from a fixed buffer, records writes.
    struct Pipe {
        input: io::Cursor<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Pipe {
        fn new(input: &[u8]) -> Self {
            Pipe {
                input: io::Cursor::new(input.to_vec()),
                written: Vec::new(),
            }
        }
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}

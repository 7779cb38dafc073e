//! Which test runs and with what parameters: perftest's flags, its defaults and the
//! adjustments it makes to them (tx depth capped at the iteration count, and so on), so
//! that both sides of a run agree on what the other expects.

use std::time::Duration;

use ferroce_transport::{Mtu, MAX_RD_ATOMIC};

/// The largest message of `-a` (2^23 bytes), as in perftest.
pub const MAX_SIZE: u64 = 1 << 23;
/// Fewest iterations perftest accepts.
pub const MIN_ITERS: u64 = 5;
/// Most iterations perftest accepts.
pub const MAX_ITERS: u64 = 100_000_000;
/// Largest `-s` ferroce accepts (its buffers are plain memory).
pub const MAX_MSG: u64 = 1 << 30;
/// Most memory a run registers (perftest's layout: two buffers per QP).
pub const MAX_BUFFERS: u64 = 4 << 30;
/// Default receive depth of SEND tests.
pub const DEF_RX_SEND: usize = 512;
/// Receive depth limit applied to UC/UD receivers.
pub const UC_MAX_RX: usize = 16000;
/// Q_Key of perftest's UD QPs.
pub const DEF_QKEY: u32 = 0x1111_1111;

/// The operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Send,
    Write,
    Read,
    Atomic,
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Lat,
}

/// One of perftest's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Test {
    pub verb: Verb,
    pub kind: Kind,
}

impl Test {
    pub const WRITE_BW: Test = Test::new(Verb::Write, Kind::Bw);
    pub const READ_BW: Test = Test::new(Verb::Read, Kind::Bw);
    pub const SEND_BW: Test = Test::new(Verb::Send, Kind::Bw);
    pub const ATOMIC_BW: Test = Test::new(Verb::Atomic, Kind::Bw);
    pub const WRITE_LAT: Test = Test::new(Verb::Write, Kind::Lat);
    pub const READ_LAT: Test = Test::new(Verb::Read, Kind::Lat);
    pub const SEND_LAT: Test = Test::new(Verb::Send, Kind::Lat);

    pub const fn new(verb: Verb, kind: Kind) -> Test {
        Test { verb, kind }
    }

    /// The perftest program this test speaks to (`ib_write_bw`, ...).
    pub fn tool(self) -> &'static str {
        match (self.verb, self.kind) {
            (Verb::Send, Kind::Bw) => "ib_send_bw",
            (Verb::Write, Kind::Bw) => "ib_write_bw",
            (Verb::Read, Kind::Bw) => "ib_read_bw",
            (Verb::Atomic, Kind::Bw) => "ib_atomic_bw",
            (Verb::Send, Kind::Lat) => "ib_send_lat",
            (Verb::Write, Kind::Lat) => "ib_write_lat",
            (Verb::Read, Kind::Lat) => "ib_read_lat",
            (Verb::Atomic, Kind::Lat) => "ib_atomic_lat",
        }
    }

    /// The verb as perftest names it in its banner.
    pub fn verb_name(self) -> &'static str {
        match self.verb {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
}

/// Transport service (`-c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conn {
    Rc,
    Uc,
    Ud,
}

impl Conn {
    pub fn name(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
        }
    }

    /// Parses a `-c` value.
    pub fn parse(s: &str) -> Result<Conn, String> {
        match s {
            "RC" => Ok(Conn::Rc),
            "UC" => Ok(Conn::Uc),
            "UD" => Ok(Conn::Ud),
            "XRC" | "DC" | "SRD" | "RawEth" => Err(format!(
                "connection type {s} is not supported by ferroce (RC, UC, UD)"
            )),
            _ => Err(format!(
                "invalid connection type '{s}': choose from RC, UC, UD"
            )),
        }
    }
}

/// Atomic operation (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    CmpAndSwap,
    FetchAndAdd,
}

impl AtomicOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
        }
    }

    /// Parses a `-A` value.
    pub fn parse(s: &str) -> Result<AtomicOp, String> {
        match s {
            "CMP_AND_SWAP" => Ok(AtomicOp::CmpAndSwap),
            "FETCH_AND_ADD" => Ok(AtomicOp::FetchAndAdd),
            _ => Err(format!(
                "invalid atomic type '{s}': choose from CMP_AND_SWAP, FETCH_AND_ADD"
            )),
        }
    }
}

/// What the user asked for, named after perftest's flags; `None` = perftest's default.
#[derive(Debug, Clone)]
pub struct Options {
    pub test: Test,
    /// Server to connect to; `None` = be the server.
    pub server: Option<String>,
    /// `-p`
    pub port: u16,
    /// `-s`
    pub size: Option<u64>,
    /// `-n`
    pub iters: Option<u64>,
    /// `-D` (seconds)
    pub duration: Option<u64>,
    /// `-f` (seconds)
    pub margin: Option<u64>,
    /// `-a`
    pub all_sizes: bool,
    /// `-m`
    pub mtu: Option<Mtu>,
    /// `-x`
    pub gid_index: Option<usize>,
    /// `-q`
    pub num_qps: usize,
    /// `-t`
    pub tx_depth: Option<usize>,
    /// `-r`
    pub rx_depth: Option<usize>,
    /// `-Q`
    pub cq_mod: Option<usize>,
    /// `-c`
    pub conn: Conn,
    /// `-A`
    pub atomic: AtomicOp,
    /// `-o`
    pub out_reads: Option<u32>,
    /// `-u`
    pub qp_timeout: u8,
    /// `--tclass`: the GRH traffic class (IP DSCP and ECN bits) of the QPs' packets.
    pub traffic_class: u8,
    /// `--report_gbits`
    pub report_gbits: bool,
    /// `-N`
    pub no_peak: bool,
    /// Longest wait for a completion or for the peer before giving up (not a perftest flag).
    pub timeout: Duration,
}

impl Options {
    /// Perftest's defaults for `test`, as a server.
    pub fn new(test: Test) -> Options {
        Options {
            test,
            server: None,
            port: 18515,
            size: None,
            iters: None,
            duration: None,
            margin: None,
            all_sizes: false,
            mtu: None,
            gid_index: None,
            num_qps: 1,
            tx_depth: None,
            rx_depth: None,
            cq_mod: None,
            conn: Conn::Rc,
            atomic: AtomicOp::FetchAndAdd,
            out_reads: None,
            qp_timeout: 14,
            traffic_class: 0,
            report_gbits: false,
            no_peak: false,
            timeout: Duration::from_secs(60),
        }
    }
}

/// The parameters a run uses, after perftest's defaults and adjustments.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub test: Test,
    pub conn: Conn,
    pub atomic: AtomicOp,
    pub client: bool,
    /// Message size (the first or only one; `-a` goes through [`Params::sizes`]).
    pub size: u64,
    /// `-s` was given.
    pub size_given: bool,
    /// `-a`
    pub all_sizes: bool,
    /// Iterations per QP (0 in duration mode).
    pub iters: u64,
    /// `-D`
    pub duration: Option<Duration>,
    /// Warm-up and cool-down around the sampled part of a duration run.
    pub margin: Duration,
    pub num_qps: usize,
    pub tx_depth: usize,
    pub rx_depth: usize,
    pub cq_mod: usize,
    /// Outstanding RDMA READ / atomic requests this side accepts and advertises.
    pub out_reads: u32,
    pub qp_timeout: u8,
    pub traffic_class: u8,
    pub no_peak: bool,
    pub gbits: bool,
    pub timeout: Duration,
}

impl Params {
    /// Applies perftest's defaults and adjustments to `o`, or says what is wrong.
    pub fn derive(o: &Options) -> Result<Params, String> {
        let t = o.test;
        let bw = t.kind == Kind::Bw;
        if o.conn == Conn::Ud && t.verb != Verb::Send {
            return Err("UD connection only possible in SEND verb".into());
        }
        if o.conn == Conn::Uc && matches!(t.verb, Verb::Read | Verb::Atomic) {
            return Err("UC connection not possible in READ/ATOMIC verbs".into());
        }
        if o.num_qps == 0 || o.num_qps > 1024 {
            return Err("number of QPs (-q) should be between 1 and 1024".into());
        }
        if !bw && o.num_qps != 1 {
            return Err("latency tests run on one QP (-q 1)".into());
        }
        if t.verb == Verb::Atomic {
            if o.size.is_some_and(|s| s != 8) {
                return Err("Message size cannot be changed for Atomic tests".into());
            }
            if o.all_sizes {
                return Err("-a is not available in atomic tests".into());
            }
        }
        if let Some(s) = o.size {
            if !(1..=MAX_MSG).contains(&s) {
                return Err(format!("size (-s) should be between 1 and {MAX_MSG}"));
            }
        }
        if let Some(n) = o.iters {
            if !(MIN_ITERS..=MAX_ITERS).contains(&n) {
                return Err(format!(
                    "iterations (-n) should be between {MIN_ITERS} and {MAX_ITERS}"
                ));
            }
        }
        if o.duration.is_some() && o.all_sizes {
            return Err("Duration mode currently doesn't support running on all sizes.".into());
        }
        if o.duration == Some(0) {
            return Err("duration (-D) must be at least 1 second".into());
        }
        let max_wr = ferroce_transport::MAX_WR as usize;
        for (name, v) in [
            ("tx depth (-t)", o.tx_depth),
            ("rx depth (-r)", o.rx_depth),
            ("CQ moderation (-Q)", o.cq_mod),
        ] {
            if v.is_some_and(|v| v == 0 || v > max_wr) {
                return Err(format!("{name} should be between 1 and {max_wr}"));
            }
        }
        if o.rx_depth.is_some() && t.verb != Verb::Send {
            return Err("On RDMA verbs rx depth can be only 1".into());
        }
        if o.out_reads.is_some() && t.verb != Verb::Read && t.verb != Verb::Atomic {
            return Err("Setting Outstanding reads only available on READ verb".into());
        }
        if o.out_reads == Some(0) {
            return Err("outstanding reads (-o) must be at least 1".into());
        }

        let largest = if o.all_sizes {
            MAX_SIZE
        } else {
            o.size.unwrap_or(65536)
        };
        if 2 * o.num_qps as u64 * largest.max(4096) > MAX_BUFFERS {
            return Err(format!(
                "2 x {} QPs x {largest}-byte buffers exceed {} GiB",
                o.num_qps,
                MAX_BUFFERS >> 30
            ));
        }
        let size = match (t.verb, o.size) {
            (Verb::Atomic, _) => 8,
            (_, Some(s)) => s,
            (_, None) if bw => 65536,
            (_, None) => 2,
        };
        let size = if o.all_sizes { 2 } else { size };
        let (iters, duration) = match o.duration {
            Some(d) => (0, Some(Duration::from_secs(d))),
            None => (
                o.iters
                    .unwrap_or(if t == Test::WRITE_BW { 5000 } else { 1000 }),
                None,
            ),
        };
        let margin = match (o.duration, o.margin) {
            (Some(d), Some(m)) if 2 * m >= d => {
                return Err("margin (-f) must be shorter than half the duration (-D)".into())
            }
            (Some(_), Some(m)) => Duration::from_secs(m),
            (Some(d), None) => Duration::from_secs(d / 4),
            (None, _) => Duration::ZERO,
        };
        let mut tx_depth = o.tx_depth.unwrap_or(if bw { 128 } else { 1 });
        let rx_default = if t.verb == Verb::Send { DEF_RX_SEND } else { 1 };
        let mut rx_depth = o.rx_depth.unwrap_or(rx_default);
        if duration.is_none() {
            let n = usize::try_from(iters).unwrap_or(usize::MAX);
            tx_depth = tx_depth.min(n);
            if t.verb == Verb::Send {
                rx_depth = rx_depth.min(n);
            }
            if matches!(o.conn, Conn::Ud | Conn::Uc) && rx_depth == DEF_RX_SEND {
                rx_depth = n.min(UC_MAX_RX);
            }
        }
        let cq_mod = o.cq_mod.unwrap_or(100).min(tx_depth);
        let out_reads = match t.verb {
            Verb::Read | Verb::Atomic => o
                .out_reads
                .unwrap_or(u32::from(MAX_RD_ATOMIC))
                .min(u32::from(MAX_RD_ATOMIC)),
            _ => 1,
        };
        let client = o.server.is_some();
        // Latency tests have no peak; nor has a SEND BW server, which only counts arrivals.
        let no_peak = o.no_peak || duration.is_some() || !bw || (t.verb == Verb::Send && !client);
        Ok(Params {
            test: t,
            conn: o.conn,
            atomic: o.atomic,
            client,
            size,
            size_given: o.size.is_some(),
            all_sizes: o.all_sizes,
            iters,
            duration,
            margin,
            num_qps: o.num_qps,
            tx_depth,
            rx_depth,
            cq_mod,
            out_reads,
            qp_timeout: o.qp_timeout,
            traffic_class: o.traffic_class,
            no_peak,
            gbits: o.report_gbits,
            timeout: o.timeout,
        })
    }

    /// Bytes each buffer must hold: the largest message of the run.
    pub fn max_size(&self) -> u64 {
        if self.all_sizes {
            MAX_SIZE
        } else {
            self.size
        }
    }

    /// The message sizes of the run: 2, 4, ..., up to `max` for `-a`, else the one size.
    pub fn sizes(&self, max: u64) -> Vec<u64> {
        if self.all_sizes {
            (1..24)
                .map(|i| 1u64 << i)
                .filter(|&s| s <= max.min(MAX_SIZE))
                .collect()
        } else {
            vec![self.size]
        }
    }

    /// Limits the message size to a UD datagram (the path MTU), as perftest does; an
    /// explicit larger `-s` is an error.
    pub fn fit_ud(&mut self, mtu: Mtu) -> Result<(), String> {
        let m = u64::from(mtu.bytes());
        if self.conn == Conn::Ud && !self.all_sizes && self.size > m {
            if self.size_given {
                return Err(format!(
                    "Max message size in UD cannot be greater than MTU ({m})"
                ));
            }
            self.size = m;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(test: Test) -> Options {
        Options {
            server: Some("peer".into()),
            ..Options::new(test)
        }
    }

    #[test]
    fn defaults_follow_perftest() {
        let p = Params::derive(&client(Test::WRITE_BW)).unwrap();
        assert_eq!(
            (p.size, p.iters, p.tx_depth, p.cq_mod),
            (65536, 5000, 128, 100)
        );
        assert_eq!(p.out_reads, 1);
        let p = Params::derive(&client(Test::SEND_LAT)).unwrap();
        assert_eq!((p.size, p.iters, p.tx_depth, p.rx_depth), (2, 1000, 1, 512));
        let p = Params::derive(&client(Test::ATOMIC_BW)).unwrap();
        assert_eq!((p.size, p.out_reads), (8, u32::from(MAX_RD_ATOMIC)));
    }

    #[test]
    fn depths_are_capped_by_iterations() {
        // As in the golden capture of `ib_write_bw -n 20`: "TX depth : 20", "CQ Moderation : 20".
        let o = Options {
            iters: Some(20),
            ..client(Test::WRITE_BW)
        };
        let p = Params::derive(&o).unwrap();
        assert_eq!((p.tx_depth, p.cq_mod), (20, 20));
        let o = Options {
            iters: Some(20),
            conn: Conn::Ud,
            ..Options::new(Test::SEND_BW)
        };
        let p = Params::derive(&o).unwrap();
        assert_eq!(p.rx_depth, 20);
        assert!(p.no_peak, "a send_bw server reports no peak");
    }

    #[test]
    fn duration_mode() {
        let o = Options {
            duration: Some(3),
            ..client(Test::SEND_BW)
        };
        let p = Params::derive(&o).unwrap();
        assert_eq!(p.iters, 0);
        assert_eq!(p.margin, Duration::ZERO);
        assert_eq!((p.tx_depth, p.rx_depth, p.cq_mod), (128, 512, 100));
        assert!(p.no_peak);
        let o = Options {
            duration: Some(8),
            ..client(Test::WRITE_LAT)
        };
        assert_eq!(Params::derive(&o).unwrap().margin, Duration::from_secs(2));
    }

    #[test]
    fn rejects_what_perftest_rejects() {
        let bad = [
            Options {
                conn: Conn::Ud,
                ..client(Test::WRITE_BW)
            },
            Options {
                conn: Conn::Uc,
                ..client(Test::READ_BW)
            },
            Options {
                size: Some(16),
                ..client(Test::ATOMIC_BW)
            },
            Options {
                iters: Some(2),
                ..client(Test::WRITE_BW)
            },
            Options {
                duration: Some(2),
                all_sizes: true,
                ..client(Test::WRITE_BW)
            },
            Options {
                num_qps: 2,
                ..client(Test::WRITE_LAT)
            },
            Options {
                num_qps: 512,
                size: Some(8 << 20),
                ..client(Test::WRITE_BW)
            },
        ];
        for o in bad {
            assert!(Params::derive(&o).is_err(), "{o:?}");
        }
    }

    #[test]
    fn sizes_and_ud_limit() {
        let o = Options {
            all_sizes: true,
            ..client(Test::WRITE_BW)
        };
        let p = Params::derive(&o).unwrap();
        let s = p.sizes(p.max_size());
        assert_eq!((s.len(), s[0], s[22]), (23, 2, MAX_SIZE));
        assert_eq!(p.sizes(1024).last(), Some(&1024));
        let o = Options {
            conn: Conn::Ud,
            ..client(Test::SEND_BW)
        };
        let mut p = Params::derive(&o).unwrap();
        p.fit_ud(Mtu::Mtu1024).unwrap();
        assert_eq!(p.size, 1024);
        let o = Options {
            conn: Conn::Ud,
            size: Some(4096),
            ..client(Test::SEND_BW)
        };
        let mut p = Params::derive(&o).unwrap();
        assert!(p.fit_ud(Mtu::Mtu1024).is_err());
    }
}

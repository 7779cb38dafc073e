//! Reaching a target: the out-of-band exchange of a program the target already runs
//! (an `ibv_rc_pingpong` server, or a perftest `ib_write_bw` / `ib_read_bw` /
//! `ib_atomic_bw` server), so that the target needs nothing from ferroce; or ferroce's own
//! stack in this process on an in-memory wire (`local`), for tests and demos.
//!
//! Each case gets a fresh connection: a case may leave the target's QP in the error state
//! (as the spec requires after an invalid request or access error). Those programs serve
//! one client and exit, so a target is kept in a loop (see `ferroce probe --help`) and
//! [`Target::connect`] retries until the next one listens.

use std::net::{Ipv6Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ferroce::transport::Mtu;

use super::cases::Needs;
use super::runner::Remote;
use crate::apps::oob;
use crate::apps::perftest::exchange::{BwReport, Control, KeyMsg};
use crate::apps::perftest::{CACHE_LINE, CYCLE_BUFFER};

/// The buffer the probe announces to a target that reads from it (`reader` cases): the
/// probe answers the READs itself, so the numbers only need to be recognisable.
pub const PROBE_VA: u64 = 0x1_0000_0000;
/// Its R_Key.
pub const PROBE_RKEY: u32 = 0x5052_4f42;
/// The READ a reading target sends: 2 packets at MTU 1024 (ib_read_bw -s 2048).
pub const READ_LEN: usize = 2048;

/// The probe's own QP as the target must learn it.
#[derive(Debug, Clone, Copy)]
pub struct Mine {
    /// QP number.
    pub qpn: u32,
    /// First PSN the probe sends.
    pub psn: u32,
    /// The probe's GID.
    pub gid: Ipv6Addr,
}

/// A connection to the target's QP.
pub struct Connected {
    /// What the probe knows of the target's QP.
    pub remote: Remote,
    /// The target's GID (where its RoCE packets come from).
    pub gid: Ipv6Addr,
    /// Ends the out-of-band side, if the program expects an ending.
    pub close: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("remote", &self.remote)
            .field("gid", &self.gid)
            .finish()
    }
}

/// Something the probe can connect to, once per case.
pub trait Target {
    /// One line for the report: which program, where.
    fn describe(&self) -> String;
    /// What its QP offers.
    fn offers(&self) -> &[Needs];
    /// Connects a fresh QP of the target to `mine`, for a case that `needs` this.
    fn connect(&mut self, mine: Mine, needs: Needs) -> Result<Connected, String>;
    /// Whether the program ends only after a SEND and the ACK of its own answer
    /// (ibv_rc_pingpong): the fuzzer then gives it both after each round.
    fn waits_for_send(&self) -> bool {
        false
    }
}

/// The program a target runs, reached by its own exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// `ibv_rc_pingpong` server (receives posted; it answers a SEND with its own).
    Pingpong,
    /// `ib_write_bw` server (RDMA WRITE rights on its buffer).
    WriteBw,
    /// `ib_read_bw` server (RDMA READ rights).
    ReadBw,
    /// `ib_atomic_bw` server (atomic rights on 8 bytes).
    AtomicBw,
    /// `ib_read_bw` *client* connecting to the probe, which plays its server: the target
    /// is the one sending RDMA READs (run it with `-s 2048 -m 1024`, in a loop).
    ReadBwClient,
}

/// A target reached through a program's out-of-band TCP exchange.
#[derive(Debug)]
pub struct OobTarget {
    /// The program.
    pub via: Via,
    /// Its host (the out-of-band address).
    pub host: String,
    /// Its TCP port.
    pub port: u16,
    /// Path MTU to ask for (perftest) or assume (pingpong: its `-m`).
    pub mtu: Mtu,
    /// The size of the target's buffer the cases may use.
    pub size: u64,
    /// How long to keep trying to connect (the target's next run may be starting).
    pub connect_wait: Duration,
    offers: Vec<Needs>,
    /// Where a client target connects to (bound on first use).
    listener: Option<TcpListener>,
}

impl OobTarget {
    /// A target running `via` at `host:port`.
    pub fn new(via: Via, host: String, port: u16, mtu: Mtu, size: Option<u64>) -> OobTarget {
        let (offers, default_size) = match via {
            Via::Pingpong => (vec![Needs::Any, Needs::Send, Needs::Requester], 4096),
            // perftest's WRITE, READ and atomic servers post no receives.
            Via::WriteBw => (vec![Needs::Any, Needs::Write, Needs::NoRecv], 65536),
            Via::ReadBw => (vec![Needs::Any, Needs::Read, Needs::NoRecv], 65536),
            Via::AtomicBw => (vec![Needs::Any, Needs::Atomic, Needs::NoRecv], 8),
            Via::ReadBwClient => (vec![Needs::Reader], 2048),
        };
        OobTarget {
            via,
            host,
            port,
            mtu,
            size: size.unwrap_or(default_size),
            connect_wait: Duration::from_secs(20),
            offers,
            listener: None,
        }
    }

    /// Waits for the client target's next run to connect to the probe.
    fn accept(&mut self) -> Result<TcpStream, String> {
        if self.listener.is_none() {
            let l = TcpListener::bind(("::", self.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", self.port)))
                .map_err(|e| format!("cannot listen on TCP port {}: {e}", self.port))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            self.listener = Some(l);
        }
        let deadline = Instant::now() + self.connect_wait;
        let l = self.listener.as_ref().ok_or("no listener")?;
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).map_err(|e| e.to_string())?;
                    return Ok(s);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("accepting on port {}: {e}", self.port)),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no ib_read_bw client connected to port {} for {} s (is the target's client running, in a loop, pointed at this host?)",
                    self.port,
                    self.connect_wait.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn tcp(&self) -> Result<TcpStream, String> {
        use std::net::ToSocketAddrs;
        let deadline = Instant::now() + self.connect_wait;
        let addrs: Vec<_> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.host))?
            .collect();
        loop {
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "couldn't connect to {}:{} for {} s: {} (is the target program running, in a loop for more than one case?)",
                    self.host,
                    self.port,
                    self.connect_wait.as_secs(),
                    last.map_or("no address".into(), |e| e.to_string())
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Target for OobTarget {
    fn describe(&self) -> String {
        let prog = match self.via {
            Via::Pingpong => "ibv_rc_pingpong",
            Via::WriteBw => "ib_write_bw",
            Via::ReadBw => "ib_read_bw",
            Via::AtomicBw => "ib_atomic_bw",
            Via::ReadBwClient => {
                return format!(
                    "ib_read_bw client at {}, connecting to this host's port {}",
                    self.host, self.port
                )
            }
        };
        format!("{prog} server at {}:{}", self.host, self.port)
    }

    fn offers(&self) -> &[Needs] {
        &self.offers
    }

    fn waits_for_send(&self) -> bool {
        self.via == Via::Pingpong
    }

    fn connect(&mut self, mine: Mine, _needs: Needs) -> Result<Connected, String> {
        // A program just restarting may take the connection into its old listener's
        // backlog and never answer, or reset it: try again until `connect_wait` is over.
        let deadline = Instant::now() + self.connect_wait;
        loop {
            match self.exchange(mine) {
                Ok(c) => return Ok(c),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "out-of-band exchange failed; trying again");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }
}

impl OobTarget {
    fn exchange(&mut self, mine: Mine) -> Result<Connected, String> {
        let client_target = self.via == Via::ReadBwClient;
        let mut stream = if client_target {
            self.accept()?
        } else {
            self.tcp()?
        };
        let timeout = Duration::from_secs(3);
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let mtu = self.mtu.bytes();
        if self.via == Via::Pingpong {
            let d = oob::client_exchange_on(
                &mut stream,
                &oob::Dest {
                    lid: 0,
                    qpn: mine.qpn,
                    psn: mine.psn,
                    gid: mine.gid,
                },
            )
            .map_err(|e| {
                // The server reads the probe's GID first and connects its QP to it: one
                // that hangs up without an answer could not, as when its GID (-g) is of
                // the other IP version (this probe cannot learn it before it sends).
                format!(
                    "pingpong exchange: {e} (a server that hangs up unanswered could not connect its QP to the probe's GID {}: is the server's -g of that IP version? else pick the probe's with -g)",
                    mine.gid
                )
            })?;
            return Ok(Connected {
                remote: Remote {
                    qpn: d.qpn,
                    epsn: mine.psn,
                    va: 0,
                    rkey: 0,
                    size: self.size,
                    mtu,
                    // ibv_rc_pingpong's timeout 14: 4.096 µs << 14.
                    timeout_ms: 67,
                },
                gid: d.gid,
                close: None,
            });
        }
        let _ = stream.set_nodelay(true);
        // The probe is perftest's client, or (a client target) its server.
        let mut ctl = Control::new(stream, !client_target);
        let ex =
            |e: crate::apps::perftest::exchange::ExchangeError| format!("perftest exchange: {e}");
        ctl.versions().map_err(ex)?;
        ctl.sys_data(CYCLE_BUFFER, CACHE_LINE).map_err(ex)?;
        let mtu_agreed = ctl.mtu(self.mtu).map_err(ex)?;
        let key = KeyMsg {
            lid: 0,
            out_reads: 16,
            qpn: mine.qpn,
            psn: mine.psn,
            // What a client target reads from: the probe answers with whatever it likes.
            rkey: if client_target { PROBE_RKEY } else { 0 },
            vaddr: if client_target { PROBE_VA } else { 0 },
            gid: mine.gid,
            srqn: 0,
        };
        let theirs = ctl.handshake(&key).map_err(|e| {
            // perftest reads the probe's GID first, and quits on one of the other IP
            // version than its own before it says its own (Debian's, on rxe).
            format!(
                "perftest exchange: {e} (a server that hangs up here may be on a GID of the other IP version than the probe's {}: pick the probe's with -g)",
                mine.gid
            )
        })?;
        let remote = Remote {
            qpn: theirs.qpn,
            epsn: mine.psn,
            va: theirs.vaddr,
            rkey: theirs.rkey,
            size: self.size,
            mtu: mtu_agreed.bytes(),
            // perftest's default timeout 14.
            timeout_ms: 67,
        };
        if theirs.gid.to_ipv4_mapped().is_some() != mine.gid.to_ipv4_mapped().is_some() {
            // A server that announced a GID of the other IP version (ferroce's perf)
            // cannot use the probe's: the exchange ends here, and the caller learns the
            // target's GID from this and connects again from a GID of its version.
            return Ok(Connected {
                remote,
                gid: theirs.gid,
                close: None,
            });
        }
        // The target connects its QP between these; the last follows its move to RTR.
        ctl.handshake(&key).map_err(ex)?;
        ctl.handshake(&key).map_err(ex)?;
        let close = move || {
            // The end of a bw run as the client ends it; a target whose QP a case broke
            // still finishes its side.
            let _ = ctl.set_read_timeout(Some(Duration::from_secs(3)));
            let _ = ctl.handshake(&key);
            let _ = ctl.bw_reports(&BwReport::default());
            let _ = ctl.finish(&key);
        };
        Ok(Connected {
            remote,
            gid: theirs.gid,
            close: Some(Box::new(close)),
        })
    }
}

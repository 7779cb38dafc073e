//! `ferroce perf`: perftest's bandwidth and latency tests (`ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`, `ib_read_lat`, `ib_send_lat`) on the verbs
//! API, speaking perftest's out-of-band protocol ([`exchange`]) with its flags and
//! defaults ([`params`]) and printing its tables ([`report`]), so that either side of a
//! run can be perftest (on rxe or a RoCE NIC) and the other ferroce.

pub mod exchange;
pub mod params;
pub mod report;

mod bw;
mod lat;
mod resources;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ferroce_transport::{WcStatus, WorkCompletion};

use exchange::{Control, ExchangeError, KeyMsg, Script};
use ferroce::verbs::{CompletionQueue, Context, Error as VerbsError, QpState, QueuePair};
use resources::Resources;

pub use exchange::BwReport;
pub use params::{AtomicOp, Conn, Kind, Options, Params, Test, Verb};
pub use report::LatStats;

/// The cycle buffer and cache line size this side announces (x86 page and line sizes).
pub const CYCLE_BUFFER: u32 = 4096;
/// The cache line size this side announces.
pub const CACHE_LINE: u32 = 64;

/// Why a run failed.
#[derive(Debug)]
pub enum PerfError {
    /// Bad or inconsistent parameters.
    Usage(String),
    Verbs(VerbsError),
    Exchange(ExchangeError),
    Io(std::io::Error),
    /// A work completion with an error status.
    Completion {
        what: &'static str,
        status: WcStatus,
        wr_id: u64,
    },
    /// Nothing happened for too long.
    Timeout(String),
    /// A QP left RTS during the run.
    QpDied {
        /// Which of the run's QPs.
        index: usize,
        /// The state it is in.
        state: QpState,
    },
    /// Work requests still outstanding when a duration run ended, none of them completing
    /// while the tail drained.
    Incomplete(usize),
}

impl std::fmt::Display for PerfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PerfError::Usage(m) => write!(f, "{m}"),
            PerfError::Verbs(e) => write!(f, "{e}"),
            PerfError::Exchange(e) => write!(f, "{e}"),
            PerfError::Io(e) => write!(f, "{e}"),
            PerfError::Completion {
                what,
                status,
                wr_id,
            } => write!(
                f,
                "{what} completion with error: status {status:?}, QP index {wr_id}"
            ),
            PerfError::Timeout(m) => write!(f, "{m}; is the peer still running?"),
            PerfError::QpDied { index, state } => write!(
                f,
                "QP index {index} is in state {state:?} after the run: the connection failed"
            ),
            PerfError::Incomplete(n) => write!(
                f,
                "{n} work requests never completed after the run; is the peer still running?"
            ),
        }
    }
}

impl std::error::Error for PerfError {}

impl From<VerbsError> for PerfError {
    fn from(e: VerbsError) -> Self {
        PerfError::Verbs(e)
    }
}
impl From<ExchangeError> for PerfError {
    fn from(e: ExchangeError) -> Self {
        PerfError::Exchange(e)
    }
}
impl From<std::io::Error> for PerfError {
    fn from(e: std::io::Error) -> Self {
        PerfError::Io(e)
    }
}

/// One row of a latency table.
#[derive(Debug, Clone, PartialEq)]
pub struct LatRow {
    pub size: u64,
    pub iters: u64,
    /// Iterations mode: the statistics.
    pub stats: Option<LatStats>,
    /// Duration mode: average latency in microseconds.
    pub avg_usec: Option<f64>,
}

/// What a run printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Rows of the bandwidth table (a server of an RDMA test prints its client's).
    pub bw: Vec<BwReport>,
    pub lat: Vec<LatRow>,
}

/// Everything the test loops need.
struct Run<'a> {
    p: &'a Params,
    res: &'a Resources,
    mine: &'a [KeyMsg],
    theirs: &'a [KeyMsg],
    mtu: ferroce_transport::Mtu,
    script: Script,
}

impl Run<'_> {
    /// The message sizes this run covers: a UD message is at most one MTU.
    fn sizes(&self) -> Vec<u64> {
        let max = if self.p.conn == params::Conn::Ud {
            u64::from(self.mtu.bytes())
        } else {
            self.p.max_size()
        };
        self.p.sizes(max)
    }
}

/// A duration run's clock: warm-up (margin), sampling, cool-down (margin), end.
#[derive(Debug, Clone, Copy)]
struct Clock {
    start: Instant,
    margin: Duration,
    total: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Sample,
    Cooldown,
    End,
}

impl Clock {
    fn new(p: &Params) -> Option<Clock> {
        p.duration.map(|total| Clock {
            start: Instant::now(),
            margin: p.margin,
            total,
        })
    }

    fn phase(&self, now: Instant) -> Phase {
        let t = now.saturating_duration_since(self.start);
        if t >= self.total {
            Phase::End
        } else if t < self.margin {
            Phase::Warmup
        } else if t < self.total - self.margin {
            Phase::Sample
        } else {
            Phase::Cooldown
        }
    }

    fn end(&self) -> Instant {
        self.start + self.total
    }

    fn sample_secs(&self) -> f64 {
        (self.total - 2 * self.margin).as_secs_f64()
    }
}

/// How a test waits for a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Yield the core a few times, then sleep until the driver signals one: bandwidth
    /// tests, whose completions come in bursts while the driver thread needs a core.
    Block,
    /// Poll without ever giving the core up, as perftest does: latency tests. A thread
    /// that yields or sleeps between messages is woken where its waker runs, and a
    /// ping-pong's two ends then share one core for the first tens of milliseconds
    /// (`ferroce perf write-lat -n 2000` between two namespaces: 8.1-8.6 µs typical in
    /// 26 of 45 runs, 5.0-5.3 in the rest; never sharing when both spin).
    Spin,
}

/// Waits for one completion on `cq`. `Ok(None)` when `deadline` (a duration run's end)
/// passes first; an error after `timeout` without a completion.
fn next_wc(
    cq: &CompletionQueue,
    deadline: Option<Instant>,
    timeout: Duration,
    what: &'static str,
    wait: Wait,
) -> Result<Option<WorkCompletion>, PerfError> {
    let give_up = Instant::now() + timeout;
    let mut out = Vec::with_capacity(1);
    let mut spin = Spinner::default();
    loop {
        if cq.poll(&mut out, 1) == 1 {
            return Ok(out.pop());
        }
        let now = match wait {
            Wait::Block => Instant::now(),
            Wait::Spin => match spin.idle() {
                Some(now) => now,
                None => continue,
            },
        };
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        if now >= give_up {
            return Err(PerfError::Timeout(format!(
                "no {what} completion for {} s",
                timeout.as_secs()
            )));
        }
        if wait == Wait::Spin {
            continue;
        }
        let until = deadline.map_or(give_up, |d| d.min(give_up));
        if let Some(wc) = cq.wait_one(until - now) {
            return Ok(Some(wc));
        }
    }
}

/// The idle rounds of a spinning wait (see [`Wait::Spin`]).
#[derive(Debug, Default)]
struct Spinner(u32);

impl Spinner {
    /// Rounds between two clock reads: where the clock is not the TSC (the VM), every
    /// read is a system call.
    const CLOCK_EVERY: u32 = 64;

    /// One idle round: spins, and every [`Spinner::CLOCK_EVERY`]th round returns the time
    /// instead, for the caller's deadlines.
    fn idle(&mut self) -> Option<Instant> {
        self.0 = self.0.wrapping_add(1);
        if self.0.is_multiple_of(Self::CLOCK_EVERY) {
            Some(Instant::now())
        } else {
            std::hint::spin_loop();
            None
        }
    }
}

/// Fails on a completion with an error status.
fn check(wc: &WorkCompletion, what: &'static str) -> Result<(), PerfError> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(PerfError::Completion {
            what,
            status: wc.status,
            wr_id: wc.wr_id,
        })
    }
}

/// Runs one test on `ctx` as `o` says, printing perftest's output to `out`.
pub fn run(ctx: &Context, o: &Options, out: &mut dyn Write) -> Result<Outcome, PerfError> {
    run_on(ctx, o, None, out)
}

/// [`run`] as the server (`o.server` is `None`), accepting the client on `listener`
/// instead of binding `o.port`: a caller that binds port 0 learns the port before the
/// client needs it, with no window in which another process could take it.
pub fn serve(
    ctx: &Context,
    o: &Options,
    listener: &TcpListener,
    out: &mut dyn Write,
) -> Result<Outcome, PerfError> {
    if o.server.is_some() {
        return Err(PerfError::Usage(
            "serve: the options name a server to connect to".into(),
        ));
    }
    run_on(ctx, o, Some(listener), out)
}

fn run_on(
    ctx: &Context,
    o: &Options,
    listener: Option<&TcpListener>,
    out: &mut dyn Write,
) -> Result<Outcome, PerfError> {
    let mut p = Params::derive(o).map_err(PerfError::Usage)?;
    // Fail on a bad GID index before a peer is waiting for us.
    ctx.source_gid(o.gid_index)?;
    let mut ctl: Control<TcpStream> = match &o.server {
        Some(server) => Control::connect(server, o.port, o.timeout)?,
        None => {
            writeln!(out, "{}", report::WAITING)?;
            out.flush()?;
            match listener {
                Some(l) => Control::accept_on(l, o.timeout)?,
                None => Control::accept(o.port, o.timeout)?,
            }
        }
    };
    ctl.versions()?;
    let (cycle, cache_line) = ctl.sys_data(CYCLE_BUFFER, CACHE_LINE)?;
    let mtu = ctl.mtu(o.mtu.unwrap_or(ctx.attr().active_mtu))?;
    p.fit_ud(mtu).map_err(PerfError::Usage)?;

    let mut res = Resources::create(ctx, &p, o.gid_index, cycle as usize, cache_line as usize)?;
    let info = report::Info {
        params: &p,
        device: &ctx.attr().name,
        mtu,
        gid_index: res.gid_index,
    };
    writeln!(out, "{}", report::test_info(&info))?;
    let verb = p.test.verb;
    let mine: Vec<KeyMsg> = (0..p.num_qps).map(|i| res.key(i, p.out_reads)).collect();
    for k in &mine {
        writeln!(out, "{}", report::address(true, k, verb))?;
    }
    out.flush()?;

    let script = Script::of(p.test, p.num_qps);
    let mut theirs = Vec::with_capacity(p.num_qps);
    for k in &mine {
        theirs.push(ctl.handshake(k)?);
    }
    let v4 = |k: &KeyMsg| k.gid.to_ipv4_mapped().is_some();
    if v4(&mine[0]) != v4(&theirs[0]) {
        return Err(PerfError::Usage(
            "Found Incompatibility issue with GID types: use GIDs of the same IP version on both sides".into(),
        ));
    }
    res.connect(&p, &mine, &theirs, mtu)?;
    for k in &mine {
        let t = ctl.handshake(k)?;
        writeln!(out, "{}", report::address(false, &t, verb))?;
    }
    // After moving to RTR.
    ctl.handshake(&mine[0])?;
    out.flush()?;

    let run = Run {
        p: &p,
        res: &res,
        mine: &mine,
        theirs: &theirs,
        mtu,
        script,
    };
    let outcome = match p.test.kind {
        Kind::Bw => bw::run(&run, ctl, out),
        Kind::Lat => lat::run(&run, ctl, out),
    }?;
    ensure_alive(&res.qps)?;
    Ok(outcome)
}

/// Fails if a QP of the run died: a peer's error or an attacker's packet makes the run
/// fail even where this side saw no completion of its own, as the passive side of a WRITE
/// or READ test does. Figures from a dead connection are no success.
fn ensure_alive(qps: &[QueuePair]) -> Result<(), PerfError> {
    for (i, qp) in qps.iter().enumerate() {
        let state = qp.state()?;
        if state == QpState::Err {
            return Err(PerfError::QpDied { index: i, state });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce::verbs::{Access, QpAttr, QpAttrMask, QpCap, QpType, RcPath};

    /// Times the calling thread gave up its core to wait (blocked, not preempted).
    fn voluntary_switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches:"))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_spinning_wait_never_sleeps() {
        let (a, _b) = Context::memory_pair().unwrap();
        let cq = a.create_cq(4).unwrap();
        // The probe sees a sleep.
        let before = voluntary_switches();
        std::thread::sleep(Duration::from_millis(1));
        assert!(voluntary_switches() > before, "a sleep counts");
        // A blocking wait sleeps after 200 yields; a spinning one keeps its core the whole
        // time (the latency tests' two ends must never come to share one).
        let before = voluntary_switches();
        let deadline = Some(Instant::now() + Duration::from_millis(300));
        let got = next_wc(&cq, deadline, Duration::from_secs(5), "nothing", Wait::Spin);
        assert!(got.unwrap().is_none(), "no completion can come");
        assert_eq!(voluntary_switches(), before, "a spinning wait slept");
    }

    #[test]
    fn a_qp_in_the_error_state_fails_the_run() {
        let (a, b) = Context::memory_pair().unwrap();
        let pd = a.alloc_pd().unwrap();
        let cq = a.create_cq(4).unwrap();
        let qps: Vec<QueuePair> = (0..2)
            .map(|_| {
                pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())
                    .unwrap()
            })
            .collect();
        for qp in &qps {
            qp.init(Access::LOCAL_WRITE, 0).unwrap();
            qp.connect(&RcPath::new(b.gid(0).unwrap(), 0x99, 1, 2))
                .unwrap();
        }
        assert!(ensure_alive(&qps).is_ok());
        let err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        qps[1].modify(&err, QpAttrMask::STATE).unwrap();
        assert!(matches!(
            ensure_alive(&qps),
            Err(PerfError::QpDied {
                index: 1,
                state: QpState::Err
            })
        ));
    }
}

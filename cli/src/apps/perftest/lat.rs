//! Latency tests, timed like perftest: the time between consecutive posts of a ping-pong
//! (`ib_write_lat`, `ib_send_lat`, halved) or of a request and its completion
//! (`ib_read_lat`). In `ib_write_lat` each side writes the iteration number into the last
//! byte of its message and waits until the peer's number shows up in its own memory; the
//! server writes first. In `ib_send_lat` the client sends first.

use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

use super::exchange::{Control, PerSize};
use super::params::Verb;
use super::report::{self, RESULT_LINE};
use super::{check, next_wc, Clock, LatRow, Outcome, PerfError, Phase, Run, Spinner, Wait};

pub(super) fn run(
    r: &Run<'_>,
    mut ctl: Control<TcpStream>,
    out: &mut dyn Write,
) -> Result<Outcome, PerfError> {
    let p = r.p;
    let sizes = r.sizes();
    let verb = p.test.verb;
    let mut outcome = Outcome::default();

    if matches!(verb, Verb::Read | Verb::Atomic) && !p.client {
        // The server of a READ test only offers its memory.
        ctl.handshake(&r.mine[0])?;
        writeln!(out, "{RESULT_LINE}")?;
        out.flush()?;
        ctl.set_read_timeout(None)?;
        ctl.finish(&r.mine[0])?;
        return Ok(outcome);
    }
    if verb != Verb::Send {
        ctl.handshake(&r.mine[0])?;
    }
    writeln!(
        out,
        "{RESULT_LINE}\n{}",
        report::lat_header(p.duration.is_some())
    )?;
    out.flush()?;
    for (k, &size) in sizes.iter().enumerate() {
        if verb == Verb::Send {
            // Receives for this size, then the handshake that lets the peer send: the
            // first size's is the script's last one before the transfer.
            r.res.post_recvs(r.p, p.rx_depth, size)?;
            if k == 0 || r.script.per_size == PerSize::Before {
                ctl.handshake(&r.mine[0])?;
            }
        }
        let row = match verb {
            Verb::Write => write_lat(r, size)?,
            Verb::Read | Verb::Atomic => read_lat(r, size)?,
            Verb::Send => send_lat(r, size)?,
        };
        writeln!(out, "{}", row_text(&row, rtt(verb)))?;
        out.flush()?;
        outcome.lat.push(row);
    }
    writeln!(out, "{RESULT_LINE}")?;
    if r.script.close {
        ctl.finish(&r.mine[0])?;
    }
    Ok(outcome)
}

/// perftest halves ping-pong times; a READ or atomic round trip is reported whole.
fn rtt(verb: Verb) -> f64 {
    match verb {
        Verb::Read | Verb::Atomic => 1.0,
        _ => 2.0,
    }
}

fn row_text(row: &LatRow, rtt: f64) -> String {
    match (&row.stats, row.avg_usec) {
        (Some(s), _) => report::lat_row(row.size, row.iters, s),
        (None, Some(avg)) => {
            let secs = avg * rtt * row.iters as f64 / 1e6;
            report::lat_row_duration(row.size, row.iters, secs, rtt)
        }
        (None, None) => format!(" {:<7} {}", row.size, row.iters),
    }
}

/// The row of a run: statistics of the post times, or the sampled average.
fn finish(
    r: &Run<'_>,
    size: u64,
    posted: &[Instant],
    clock: Option<Clock>,
    sampled: u64,
) -> LatRow {
    let rtt = rtt(r.p.test.verb);
    match clock {
        Some(c) => LatRow {
            size,
            iters: sampled,
            stats: None,
            avg_usec: Some(if sampled == 0 {
                0.0
            } else {
                c.sample_secs() * 1e6 / rtt / sampled as f64
            }),
        },
        None => LatRow {
            size,
            iters: r.p.iters,
            stats: report::lat_stats(posted, rtt),
            avg_usec: None,
        },
    }
}

/// `ib_write_lat`: RDMA WRITE ping-pong with the iteration number in the last byte.
fn write_lat(r: &Run<'_>, size: u64) -> Result<LatRow, PerfError> {
    let (p, res) = (r.p, r.res);
    let wr = res.send_wr(p, 0, size, &r.theirs[0]);
    let post_at = res.local_offset(0) + size as usize - 1;
    let poll_at = res.remote_offset(0) + size as usize - 1;
    let iters = p.iters;
    let clock = Clock::new(p);
    let dur = clock.is_some();
    let mut posted = Vec::with_capacity(if dur { 0 } else { iters as usize });
    let (mut scnt, mut ccnt, mut rcnt, mut sampled) = (0u64, 0u64, 0u64, 0u64);
    let ended = |c: &Option<Clock>| c.is_some_and(|c| c.phase(Instant::now()) == Phase::End);
    while scnt < iters || ccnt < iters || rcnt < iters || (dur && !ended(&clock)) {
        // The server writes first: it waits for nothing before its first write.
        let first_of_server = scnt == 0 && !p.client;
        if (rcnt < iters || dur) && !first_of_server {
            rcnt += 1;
            wait_byte(r, poll_at, rcnt as u8, clock)?;
        }
        if scnt < iters || dur {
            if !dur {
                posted.push(Instant::now());
            }
            scnt += 1;
            res.mr.write(post_at, &[scnt as u8])?;
            res.qps[0].post_send(&wr)?;
        }
        if ended(&clock) {
            break;
        }
        if ccnt < iters || dur {
            let wc = next_wc(&res.send_cq, None, p.timeout, "RDMA WRITE", Wait::Spin)?
                .expect("no deadline");
            check(&wc, "RDMA WRITE")?;
            ccnt += 1;
            if clock.is_some_and(|c| c.phase(Instant::now()) == Phase::Sample) {
                sampled += 1;
            }
        }
    }
    Ok(finish(r, size, &posted, clock, sampled))
}

/// Waits until the byte at `offset` of the memory region is `want` (or the clock ends),
/// taking in frames meanwhile and never giving the core up (see [`Wait::Spin`]).
fn wait_byte(r: &Run<'_>, offset: usize, want: u8, clock: Option<Clock>) -> Result<(), PerfError> {
    let give_up = Instant::now() + r.p.timeout;
    let mut b = [0u8];
    let mut spin = Spinner::default();
    let ctx = r.res.pd.context();
    loop {
        r.res.mr.read(offset, &mut b)?;
        if b[0] == want {
            return Ok(());
        }
        if ctx.progress() {
            continue;
        }
        let Some(now) = spin.idle() else {
            continue;
        };
        if clock.is_some_and(|c| c.phase(now) == Phase::End) {
            return Ok(());
        }
        if now >= give_up {
            return Err(PerfError::Timeout(format!(
                "no RDMA WRITE from the peer for {} s",
                r.p.timeout.as_secs()
            )));
        }
    }
}

/// `ib_read_lat` (and atomics): one request at a time, timed from post to post.
fn read_lat(r: &Run<'_>, size: u64) -> Result<LatRow, PerfError> {
    let (p, res) = (r.p, r.res);
    let wr = res.send_wr(p, 0, size, &r.theirs[0]);
    let clock = Clock::new(p);
    let mut posted = Vec::with_capacity(if clock.is_some() { 0 } else { p.iters as usize });
    let (mut scnt, mut sampled) = (0u64, 0u64);
    loop {
        let now = Instant::now();
        match clock {
            Some(c) if c.phase(now) == Phase::End => break,
            None if scnt == p.iters => break,
            None => posted.push(now),
            Some(_) => {}
        }
        scnt += 1;
        res.qps[0].post_send(&wr)?;
        let wc =
            next_wc(&res.send_cq, None, p.timeout, "RDMA READ", Wait::Spin)?.expect("no deadline");
        check(&wc, "RDMA READ")?;
        if clock.is_some_and(|c| c.phase(Instant::now()) == Phase::Sample) {
            sampled += 1;
        }
    }
    Ok(finish(r, size, &posted, clock, sampled))
}

/// `ib_send_lat`: SEND ping-pong; the client sends first.
fn send_lat(r: &Run<'_>, size: u64) -> Result<LatRow, PerfError> {
    let (p, res) = (r.p, r.res);
    let recv_cq = res.recv_cq.as_ref().expect("SEND tests have a receive CQ");
    let wr = res.send_wr(p, 0, size, &r.theirs[0]);
    let recv = res.recv_wr(p, 0, size);
    let iters = p.iters;
    let dur = p.duration.is_some();
    // As perftest, a duration run's clock starts with the first message received.
    let mut clock: Option<Clock> = None;
    let ended = |c: &Option<Clock>| c.is_some_and(|c| c.phase(Instant::now()) == Phase::End);
    let mut posted = Vec::with_capacity(if dur { 0 } else { iters as usize });
    let (mut scnt, mut rcnt, mut sampled) = (0u64, 0u64, 0u64);
    while scnt < iters || rcnt < iters || (dur && !ended(&clock)) {
        // The client sends first: it waits for nothing before its first send.
        let first_of_client = scnt == 0 && p.client;
        if (rcnt < iters || dur) && !first_of_client {
            let deadline = clock.map(|c| c.end());
            let Some(wc) = next_wc(recv_cq, deadline, p.timeout, "receive", Wait::Spin)? else {
                break;
            };
            check(&wc, "receive")?;
            if dur && clock.is_none() {
                clock = Clock::new(p);
            }
            rcnt += 1;
            if clock.is_some_and(|c| c.phase(Instant::now()) == Phase::Sample) {
                sampled += 1;
            }
            if dur || rcnt + p.rx_depth as u64 <= iters {
                res.qps[0].post_recv(&recv)?;
            }
        }
        if scnt < iters || (dur && !ended(&clock)) {
            if !dur {
                posted.push(Instant::now());
            }
            scnt += 1;
            res.qps[0].post_send(&wr)?;
            let wc =
                next_wc(&res.send_cq, None, p.timeout, "send", Wait::Spin)?.expect("no deadline");
            check(&wc, "send")?;
        }
    }
    Ok(finish(r, size, &posted, clock, sampled))
}

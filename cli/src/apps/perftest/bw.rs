//! Bandwidth tests. The client keeps up to tx-depth messages in flight on every QP and
//! times each post and completion; a SEND server counts what arrives; the server of an
//! RDMA test only offers its memory, waits for the client to finish and prints the
//! client's result.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::exchange::{BwReport, Control, PerSize};
use super::params::{Conn, Verb};
use super::report::{self, RESULT_LINE};
use super::resources::RETRY_CNT;
use super::{check, next_wc, Clock, Outcome, PerfError, Phase, Run, Wait};

/// Shortest wait for the messages still in flight when a duration run ends.
const DRAIN: Duration = Duration::from_secs(2);

/// How long the tail of a duration run may go without a completion before the connection
/// counts as dead: [`DRAIN`], or the QPs' whole retry budget when that is longer (each
/// of `RETRY_CNT + 1` sends may wait a local ACK timeout, 4.096 µs × 2^`qp_timeout`;
/// within it a live connection completes something or fails with an error completion),
/// but never more than the run's own `timeout`. With long ACK timeouts behind a lossy
/// bottleneck (tests/dcqcn's run without congestion control, `-u 18`: 1.07 s) two seconds
/// went by without a completion on a live connection.
fn drain_time(qp_timeout: u8, timeout: Duration) -> Duration {
    let ack = ferroce_transport::ack_timeout(qp_timeout).unwrap_or_default();
    let budget = ack * (u32::from(RETRY_CNT) + 1);
    DRAIN.max(budget.min(timeout))
}

pub(super) fn run(
    r: &Run<'_>,
    mut ctl: Control<TcpStream>,
    out: &mut dyn Write,
) -> Result<Outcome, PerfError> {
    let p = r.p;
    let sizes = r.sizes();
    let mut outcome = Outcome::default();
    writeln!(out, "{RESULT_LINE}\n{}", report::bw_header(p.gbits))?;
    out.flush()?;

    if p.test.verb == Verb::Send {
        for (k, &size) in sizes.iter().enumerate() {
            if !p.client {
                r.res.post_recvs(p, p.rx_depth, size)?;
            }
            // Before each size (the first one's is the last of the script's `before`).
            ctl.handshake(&r.mine[0])?;
            let (rep, gave_up) = if p.client {
                (requester(r, size)?, false)
            } else {
                receiver(r, size)?
            };
            writeln!(out, "{}", report::bw_row(&rep, p.gbits))?;
            out.flush()?;
            outcome.bw.push(rep);
            if p.all_sizes && r.script.per_size == PerSize::BeforeAndAfter {
                ctl.handshake(&r.mine[0])?;
            }
            if gave_up && k + 1 < sizes.len() {
                break;
            }
        }
        writeln!(out, "{RESULT_LINE}")?;
        ctl.finish(&r.mine[0])?;
        return Ok(outcome);
    }

    if p.client {
        let mut last = BwReport::default();
        for &size in &sizes {
            last = requester(r, size)?;
            writeln!(out, "{}", report::bw_row(&last, p.gbits))?;
            out.flush()?;
            outcome.bw.push(last);
        }
        writeln!(out, "{RESULT_LINE}")?;
        ctl.handshake(&r.mine[0])?;
        ctl.bw_reports(&last)?;
        ctl.finish(&r.mine[0])?;
    } else {
        // The client runs as long as it takes.
        ctl.set_read_timeout(None)?;
        ctl.handshake(&r.mine[0])?;
        ctl.set_read_timeout(Some(p.timeout))?;
        let theirs = ctl.bw_reports(&BwReport::default())?;
        writeln!(out, "{}", report::bw_row(&theirs, p.gbits))?;
        outcome.bw.push(theirs);
        ctl.finish(&r.mine[0])?;
        writeln!(out, "{RESULT_LINE}")?;
    }
    Ok(outcome)
}

/// Posts messages of `size` bytes on every QP, up to tx-depth in flight each, for the
/// iterations or the duration of the run.
fn requester(r: &Run<'_>, size: u64) -> Result<BwReport, PerfError> {
    let (p, res) = (r.p, r.res);
    let q = res.qps.len();
    let wrs: Vec<_> = (0..q)
        .map(|i| res.send_wr(p, i, size, &r.theirs[i]))
        .collect();
    let iters = p.iters as usize;
    let total = iters * q;
    let clock = Clock::new(p);
    let timed = clock.is_none();
    let (mut posted, mut completed) = if timed {
        (Vec::with_capacity(total), Vec::with_capacity(total))
    } else {
        (Vec::new(), Vec::new())
    };
    let (mut scnt, mut ccnt) = (vec![0usize; q], vec![0usize; q]);
    let (mut tot_s, mut tot_c, mut sampled) = (0usize, 0usize, 0u64);
    let mut wcs = Vec::with_capacity(64);
    let mut drain_until = None;
    // Completions seen after the duration ended: a slow bottleneck still delivers some
    // while the tail drains; a dead connection delivers none.
    let mut drained = 0usize;
    loop {
        let ended = clock.is_some_and(|c| c.phase(Instant::now()) == Phase::End);
        if !ended {
            for i in 0..q {
                while scnt[i] - ccnt[i] < p.tx_depth && (!timed || scnt[i] < iters) {
                    if timed {
                        posted.push(Instant::now());
                    }
                    res.qps[i].post_send(&wrs[i])?;
                    scnt[i] += 1;
                    tot_s += 1;
                }
            }
        }
        if (timed && tot_c == total) || (ended && tot_c == tot_s) {
            break;
        }
        wcs.clear();
        if res.send_cq.poll(&mut wcs, 64) == 0 {
            let deadline =
                match clock {
                    Some(c) if !ended => Some(c.end()),
                    Some(_) => Some(*drain_until.get_or_insert_with(|| {
                        Instant::now() + drain_time(p.qp_timeout, p.timeout)
                    })),
                    None => None,
                };
            match next_wc(&res.send_cq, deadline, p.timeout, "send", Wait::Block)? {
                Some(wc) => wcs.push(wc),
                // Like perftest, a duration run does not wait for its whole tail; but a
                // tail that never moves means a dead connection, not a result.
                None if ended && drained == 0 => {
                    return Err(PerfError::Incomplete(tot_s - tot_c));
                }
                None if ended => break,
                None => continue,
            }
            res.send_cq.poll(&mut wcs, 63);
        }
        let now = Instant::now();
        for wc in &wcs {
            check(wc, "send")?;
            let i = (wc.wr_id as usize).min(q - 1);
            ccnt[i] += 1;
            tot_c += 1;
            if ended {
                drained += 1;
            }
            if timed {
                completed.push(now);
            } else if clock.is_some_and(|c| c.phase(now) == Phase::Sample) {
                sampled += 1;
            }
        }
    }
    Ok(match clock {
        Some(c) => report::bw_report_duration(size, sampled, c.sample_secs(), p.gbits),
        None => report::bw_report(size, &posted, &completed, p.no_peak, p.gbits),
    })
}

/// A SEND server: counts the messages of `size` bytes arriving on every QP, reposting
/// receives as perftest does. On UC and UD, where lost messages never come, it stops after
/// the timeout without a message and reports what arrived (`true` in the result).
fn receiver(r: &Run<'_>, size: u64) -> Result<(BwReport, bool), PerfError> {
    let (p, res) = (r.p, r.res);
    let cq = res.recv_cq.as_ref().expect("SEND tests have a receive CQ");
    let q = res.qps.len();
    let iters = p.iters as usize;
    let total = (iters * q) as u64;
    let recv: Vec<_> = (0..q).map(|i| res.recv_wr(p, i, size)).collect();
    let mut rcnt_q = vec![0usize; q];
    let (mut rcnt, mut sampled) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut clock: Option<Clock> = None;
    let mut wcs = Vec::with_capacity(64);
    let mut gave_up = false;
    loop {
        let now = Instant::now();
        match clock {
            Some(c) if c.phase(now) == Phase::End => break,
            None if p.duration.is_none() && rcnt == total => break,
            _ => {}
        }
        wcs.clear();
        if cq.poll(&mut wcs, 64) == 0 {
            match next_wc(
                cq,
                clock.map(|c| c.end()),
                p.timeout,
                "receive",
                Wait::Block,
            ) {
                Ok(Some(wc)) => wcs.push(wc),
                Ok(None) => continue,
                Err(PerfError::Timeout(_)) if p.conn != Conn::Rc && first.is_some() => {
                    // perftest's "check alive": report what came.
                    eprintln!(
                        " Did not get Message for {} Seconds, exiting..\n Total Received={rcnt}, Total Iters Required={total}",
                        p.timeout.as_secs()
                    );
                    gave_up = true;
                    break;
                }
                Err(e) => return Err(e),
            }
            cq.poll(&mut wcs, 63);
        }
        let now = Instant::now();
        if first.is_none() {
            first = Some(now);
            if p.duration.is_some() {
                clock = Clock::new(p);
            }
        }
        for wc in &wcs {
            check(wc, "receive")?;
            let i = (wc.wr_id as usize).min(q - 1);
            rcnt_q[i] += 1;
            rcnt += 1;
            if clock.is_some_and(|c| c.phase(now) == Phase::Sample) {
                sampled += 1;
            }
            if p.duration.is_some() || rcnt_q[i] + p.rx_depth <= iters {
                res.qps[i].post_recv(&recv[i])?;
            }
        }
        // As perftest, the run ends after the last batch is handled (a batch that arrived
        // all at once still takes time).
        last = Instant::now();
    }
    let rep = match (clock, first) {
        (Some(c), _) => report::bw_report_duration(size, sampled, c.sample_secs(), p.gbits),
        (None, Some(f)) => report::bw_report_duration(
            size,
            rcnt,
            last.saturating_duration_since(f).as_secs_f64(),
            p.gbits,
        ),
        (None, None) => BwReport {
            size,
            ..BwReport::default()
        },
    };
    Ok((rep, gave_up))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_waits_for_the_retry_budget_within_the_run_timeout() {
        let minute = Duration::from_secs(60);
        // perftest's default -u 14 (67 ms): two seconds are plenty.
        assert_eq!(drain_time(14, minute), DRAIN);
        // -u 18 (1.07 s): eight ACK timeouts.
        assert_eq!(drain_time(18, minute), Duration::from_nanos(4096 << 18) * 8);
        // A huge exponent stops at the run's timeout, never below two seconds.
        assert_eq!(drain_time(31, minute), minute);
        assert_eq!(drain_time(31, Duration::from_secs(1)), DRAIN);
    }
}

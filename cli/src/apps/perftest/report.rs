//! perftest's output: the test banner, the address lines, the result tables, and the
//! statistics behind them (peak and average bandwidth; latency minimum, maximum, median,
//! average, deviation and percentiles), computed as perftest 6.x computes them.

use std::time::Instant;

use ferroce_transport::Mtu;

use super::exchange::{BwReport, KeyMsg};
use super::params::{Kind, Params, Verb};

/// perftest's separator line.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// What a server prints before a client connects.
pub const WAITING: &str = "\n************************************\n\
                           * Waiting for client to connect... *\n\
                           ************************************";

/// Bytes per megabyte (MiB) and per gigabit in perftest's report units.
const MIB: f64 = 1_048_576.0;
const GBIT_BYTES: f64 = 125_000_000.0;
/// Iterations above which the O(n²) peak search is skipped (as perftest's `-N` default).
pub const MAX_PEAK_ITERS: usize = 20_000;
/// Largest latency samples perftest leaves out of its statistics.
const LAT_MEASURE_TAIL: usize = 2;

/// What the banner shows about a run.
#[derive(Debug, Clone, Copy)]
pub struct Info<'a> {
    pub params: &'a Params,
    pub device: &'a str,
    pub mtu: Mtu,
    pub gid_index: usize,
}

/// The test banner (`ctx_print_test_info`), between two separator lines.
pub fn test_info(i: &Info<'_>) -> String {
    let p = i.params;
    let t = p.test;
    let mut s = format!("{RESULT_LINE}\n                    {} ", t.verb_name());
    if t.verb == Verb::Atomic {
        s += &format!("{} ", p.atomic.name());
    }
    s += match t.kind {
        Kind::Bw => "BW ",
        Kind::Lat => "Latency ",
    };
    s += "Test\n";
    s += &format!(" Dual-port       : OFF\t\tDevice         : {}\n", i.device);
    s += &format!(" Number of qps   : {}\t\tTransport type : IB\n", p.num_qps);
    s += &format!(
        " Connection type : {}\t\tUsing SRQ      : OFF\n",
        p.conn.name()
    );
    // perftest turns relaxed ordering off for its write latency test only.
    let relaxed = if t.verb == Verb::Write && t.kind == Kind::Lat {
        "OFF"
    } else {
        "ON"
    };
    s += &format!(" PCIe relax order: {relaxed}\n");
    s += " ibv_wr* API     : OFF\n";
    if p.client {
        s += &format!(" TX depth        : {}\n", p.tx_depth);
    }
    if t.verb == Verb::Send && !p.client {
        s += &format!(" RX depth        : {}\n", p.rx_depth);
    }
    if t.kind == Kind::Bw {
        s += &format!(" CQ Moderation   : {}\n", p.cq_mod);
    }
    s += &format!(" Mtu             : {}[B]\n", i.mtu.bytes());
    s += " Link type       : Ethernet\n";
    s += &format!(" GID index       : {}\n", i.gid_index);
    if matches!(t.verb, Verb::Read | Verb::Atomic) {
        s += &format!(" Outstand reads  : {}\n", p.out_reads);
    } else {
        s += " Max inline data : 0[B]\n";
    }
    s += " rdma_cm QPs\t : OFF\n";
    s += " Data ex. method : Ethernet\n";
    s += RESULT_LINE;
    s
}

/// C's `%#0Nx`: `0x` and zero padding to `width` characters, but no prefix for 0.
fn alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$x}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// The two lines perftest prints for a QP (`ctx_print_pingpong_data`).
pub fn address(local: bool, k: &KeyMsg, verb: Verb) -> String {
    let mut s = format!(
        " {} address: LID {} QPN {} PSN {}",
        if local { "local" } else { "remote" },
        alt_hex(k.lid.into(), 4),
        alt_hex(k.qpn.into(), 6),
        alt_hex(k.psn.into(), 6)
    );
    if verb == Verb::Read {
        s += &format!(" OUT {}", alt_hex(k.out_reads.into(), 4));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        s += &format!(
            " RKey {} VAddr {}",
            alt_hex(k.rkey.into(), 8),
            alt_hex(k.vaddr, 16)
        );
    }
    let gid: Vec<String> = k.gid.octets().iter().map(|b| format!("{b:02}")).collect();
    s += &format!("\n GID: {}", gid.join(":"));
    s
}

/// The bandwidth table's header line.
pub fn bw_header(gbits: bool) -> &'static str {
    if gbits {
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    } else {
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    }
}

/// C's `%-W.Pf`, printing non-finite values as glibc does.
fn cf(x: f64, width: usize, prec: usize) -> String {
    let s = if x.is_nan() {
        "-nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{x:.prec$}")
    };
    format!("{s:<width$}")
}

/// One row of the bandwidth table.
pub fn bw_row(r: &BwReport, gbits: bool) -> String {
    if gbits && r.bw_avg < 0.1 {
        // perftest shows small Gb/s figures with six decimals.
        format!(
            " {:<7}    {}           {}            {}            {}",
            r.size,
            r.iters,
            cf(r.bw_peak, 7, 6),
            cf(r.bw_avg, 7, 6),
            cf(r.msg_rate, 7, 6)
        )
    } else {
        format!(
            " {:<7}    {:<10}       {}            {}\t\t   {}",
            r.size,
            r.iters,
            cf(r.bw_peak, 7, 2),
            cf(r.bw_avg, 7, 2),
            cf(r.msg_rate, 7, 6)
        )
    }
}

fn unit(gbits: bool) -> f64 {
    if gbits {
        GBIT_BYTES
    } else {
        MIB
    }
}

/// Bandwidth of `iters` messages of `size` bytes posted at `posted` and completed at
/// `completed` (one time per message, in order): average over the whole run and, unless
/// `no_peak`, the peak over the best run of consecutive messages (perftest's O(n²) search).
pub fn bw_report(
    size: u64,
    posted: &[Instant],
    completed: &[Instant],
    no_peak: bool,
    gbits: bool,
) -> BwReport {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return BwReport {
            size,
            ..BwReport::default()
        };
    }
    let base = posted[0];
    let ns = |t: Instant| t.saturating_duration_since(base).as_nanos() as u64;
    let tp: Vec<u64> = posted[..n].iter().map(|&t| ns(t)).collect();
    let tc: Vec<u64> = completed[..n].iter().map(|&t| ns(t)).collect();
    let total = (tc[n - 1] - tp[0]).max(1) as f64 / 1e9;
    let u = unit(gbits);
    let bw_peak = if no_peak || n > MAX_PEAK_ITERS {
        0.0
    } else {
        let mut best = tc[0].saturating_sub(tp[0]);
        for (i, &posted) in tp.iter().enumerate() {
            for (k, &done) in tc[i..].iter().enumerate() {
                best = best.min(done.saturating_sub(posted) / (k + 1) as u64);
            }
        }
        size as f64 / (best.max(1) as f64 / 1e9) / u
    };
    BwReport {
        size,
        iters: n as u64,
        bw_peak,
        bw_avg: size as f64 * n as f64 / total / u,
        msg_rate: n as f64 / total / 1e6,
    }
}

/// Bandwidth of a duration run: `iters` messages completed in `seconds` of sampling.
pub fn bw_report_duration(size: u64, iters: u64, seconds: f64, gbits: bool) -> BwReport {
    let s = seconds.max(1e-9);
    BwReport {
        size,
        iters,
        bw_peak: 0.0,
        bw_avg: size as f64 * iters as f64 / s / unit(gbits),
        msg_rate: iters as f64 / s / 1e6,
    }
}

/// The latency table's header (iterations or duration mode).
pub fn lat_header(duration: bool) -> &'static str {
    if duration {
        " #bytes        #iterations       t_avg[usec]    tps average"
    } else {
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    }
}

/// Latency statistics of one size, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    pub min: f64,
    pub max: f64,
    /// The median.
    pub typical: f64,
    pub avg: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

/// perftest's latency statistics over the gaps between consecutive post times, divided by
/// `rtt_factor` (2 for ping-pong tests, 1 for READ and atomics): the two largest gaps are
/// left out, deviations are truncated to whole microseconds before squaring. `None` with
/// fewer than four samples.
pub fn lat_stats(posted: &[Instant], rtt_factor: f64) -> Option<LatStats> {
    if posted.len() < 4 {
        return None;
    }
    let mut d: Vec<f64> = posted
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
        .collect();
    d.sort_by(f64::total_cmp);
    let cnt = d.len() - LAT_MEASURE_TAIL.min(d.len() - 2);
    let median = if (cnt - 1) % 2 == 1 {
        (d[cnt / 2] + d[cnt / 2 - 1]) / 2.0
    } else {
        d[cnt / 2]
    };
    let avg = d[..cnt].iter().sum::<f64>() / cnt as f64;
    let var = d[..cnt]
        .iter()
        .map(|x| (avg - x).trunc().powi(2))
        .sum::<f64>()
        / cnt as f64;
    let at = |q: f64| d[((cnt as f64 * q).ceil() as usize).min(d.len() - 1)];
    Some(LatStats {
        min: d[0],
        max: d[cnt],
        typical: median,
        avg,
        stdev: var.sqrt(),
        p99: at(0.99),
        p999: at(0.999),
    })
}

/// One row of the latency table (iterations mode).
pub fn lat_row(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        " {:<7} {}          {}        {}      {}  \t       {}     \t{}\t\t{} \t\t{}",
        size,
        iters,
        cf(s.min, 7, 2),
        cf(s.max, 7, 2),
        cf(s.typical, 7, 2),
        cf(s.avg, 7, 2),
        cf(s.stdev, 7, 2),
        cf(s.p99, 7, 2),
        cf(s.p999, 7, 2)
    )
}

/// One row of the latency table in duration mode: average latency and transactions per
/// second over `seconds` of sampling.
pub fn lat_row_duration(size: u64, iters: u64, seconds: f64, rtt_factor: f64) -> String {
    let (avg, tps) = if iters == 0 {
        (0.0, 0.0)
    } else {
        (
            seconds * 1e6 / rtt_factor / iters as f64,
            iters as f64 / seconds.max(1e-9),
        )
    };
    format!(
        " {:<7}       {}            {}        {}",
        size,
        iters,
        cf(avg, 7, 2),
        cf(tps, 7, 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::perftest::params::{Options, Test};
    use std::time::Duration;

    #[test]
    fn rows_have_perftest_layout() {
        // Lines of the reference runs (rxe <-> rxe, perftest 4.5).
        let r = BwReport {
            size: 1024,
            iters: 20,
            bw_peak: 5.92,
            bw_avg: 1.89,
            msg_rate: 0.001940,
        };
        assert_eq!(
            bw_row(&r, false),
            " 1024       20               5.92               1.89   \t\t   0.001940"
        );
        let g = BwReport {
            size: 4096,
            iters: 20,
            bw_peak: 0.091833,
            bw_avg: 0.072095,
            msg_rate: 0.002200,
        };
        assert_eq!(
            bw_row(&g, true),
            " 4096       20           0.091833            0.072095            0.002200"
        );
        let big = BwReport {
            size: 8388608,
            iters: 5,
            bw_peak: 8.08,
            bw_avg: 8.08,
            msg_rate: 0.000001,
        };
        assert_eq!(
            bw_row(&big, false),
            " 8388608    5                8.08               8.08   \t\t   0.000001"
        );
        let s = LatStats {
            min: 41.93,
            max: 94.62,
            typical: 44.03,
            avg: 47.66,
            stdev: 9.49,
            p99: 94.62,
            p999: 94.62,
        };
        assert_eq!(
            lat_row(2, 20, &s),
            " 2       20          41.93          94.62        44.03    \t       47.66       \t9.49   \t\t94.62   \t\t94.62  "
        );
        assert_eq!(
            lat_row_duration(2, 23867, 3.0, 2.0),
            " 2             23867            62.85          7955.67"
        );
    }

    #[test]
    fn addresses_and_banner() {
        let k = KeyMsg {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0x7e6ca,
            rkey: 0x222,
            vaddr: 0x5620_6339_5000,
            gid: "::ffff:10.77.0.2".parse().unwrap(),
            srqn: 0,
        };
        assert_eq!(
            address(true, &k, Verb::Write),
            " local address: LID 0000 QPN 0x0011 PSN 0x7e6ca RKey 0x000222 VAddr 0x00562063395000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02"
        );
        assert!(address(false, &k, Verb::Read).contains(" PSN 0x7e6ca OUT 0x80 RKey"));
        assert!(!address(false, &k, Verb::Send).contains("RKey"));
        let o = Options {
            server: Some("x".into()),
            iters: Some(20),
            ..Options::new(Test::WRITE_BW)
        };
        let p = Params::derive(&o).unwrap();
        let b = test_info(&Info {
            params: &p,
            device: "rxeA",
            mtu: Mtu::Mtu1024,
            gid_index: 1,
        });
        let want = [
            RESULT_LINE,
            "                    RDMA_Write BW Test",
            " Dual-port       : OFF\t\tDevice         : rxeA",
            " Number of qps   : 1\t\tTransport type : IB",
            " Connection type : RC\t\tUsing SRQ      : OFF",
            " PCIe relax order: ON",
            " ibv_wr* API     : OFF",
            " TX depth        : 20",
            " CQ Moderation   : 20",
            " Mtu             : 1024[B]",
            " Link type       : Ethernet",
            " GID index       : 1",
            " Max inline data : 0[B]",
            " rdma_cm QPs\t : OFF",
            " Data ex. method : Ethernet",
            RESULT_LINE,
        ];
        assert_eq!(b, want.join("\n"));
    }

    #[test]
    fn bandwidth_figures() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        // Four 1 MiB messages: posted at 0, 1, 2, 3 ms, completed at 10, 11, 12, 40 ms.
        let posted = [ms(0), ms(1), ms(2), ms(3)];
        let completed = [ms(10), ms(11), ms(12), ms(40)];
        let r = bw_report(1 << 20, &posted, &completed, false, false);
        assert_eq!((r.size, r.iters), (1 << 20, 4));
        assert!((r.bw_avg - 100.0).abs() < 1e-6, "{r:?}"); // 4 MiB in 40 ms
        assert!((r.msg_rate - 0.0001).abs() < 1e-9);
        // Best run: messages 0..=2, (12 - 0) / 3 = 4 ms each: 250 MiB/s.
        assert!((r.bw_peak - 250.0).abs() < 1e-6, "{r:?}");
        assert_eq!(bw_report(8, &posted, &completed, true, false).bw_peak, 0.0);
        let g = bw_report_duration(1000, 250, 2.0, true);
        assert!((g.bw_avg - 0.001).abs() < 1e-12 && g.bw_peak == 0.0);
    }

    #[test]
    fn latency_figures() {
        let t0 = Instant::now();
        // Gaps (µs): 10, 20, 30, 40, 1000, 2000 → the two largest are left out.
        let mut t = t0;
        let mut posted = vec![t];
        for g in [10, 20, 30, 40, 1000, 2000] {
            t += Duration::from_micros(g);
            posted.push(t);
        }
        let s = lat_stats(&posted, 2.0).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(s.min, 5.0) && close(s.max, 500.0), "{s:?}");
        assert!(close(s.typical, 12.5), "{s:?}"); // (10 + 15) / 2
        assert!(close(s.avg, 12.5), "{s:?}");
        // Deviations 7.5, 2.5, 2.5, 7.5 truncated to 7, 2, 2, 7.
        assert!(close(s.stdev, (106.0f64 / 4.0).sqrt()), "{s:?}");
        assert!(close(s.p99, 500.0) && close(s.p999, 500.0), "{s:?}");
        assert!(lat_stats(&posted[..3], 1.0).is_none());
    }
}

//! `--rate-log`: a sampler thread that appends each QP's DCQCN rate and the device's
//! traffic counters to a CSV file, so that several processes' flows can be lined up on
//! one time axis (the first column is wall-clock time) and plotted.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferroce::verbs::Context;

use super::CliError;

/// The CSV header; counters are the device's (the same on every QP's line of a sample).
pub const HEADER: &str = "time_s,qpn,rate_mbps,target_mbps,alpha,sent_bytes,rcvd_data_bytes,\
retransmitted_pkts,completer_retry_err,rp_cnp_handled,np_cnp_sent,np_ecn_marked_roce_packets";

const COUNTERS: [&str; 7] = [
    "sent_bytes",
    "rcvd_data_bytes",
    "retransmitted_pkts",
    "completer_retry_err",
    "rp_cnp_handled",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
];

/// A running sampler; [`RateLog::stop`] takes a last sample and closes the file.
pub struct RateLog {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl RateLog {
    pub fn start(ctx: &Context, path: &Path, interval: Duration) -> Result<RateLog, CliError> {
        if interval.is_zero() {
            return Err("--rate-interval must be at least 1 ms".into());
        }
        let file = File::create(path)
            .map_err(|e| format!("cannot write --rate-log '{}': {e}", path.display()))?;
        let mut w = BufWriter::new(file);
        writeln!(w, "{HEADER}")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ctx, flag) = (ctx.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ferroce-ratelog".into())
            .spawn(move || {
                let mut next = std::time::Instant::now();
                loop {
                    let last = flag.load(Ordering::Relaxed);
                    if let Err(e) = sample(&ctx, &mut w) {
                        tracing::warn!(%e, "rate log write failed");
                        return;
                    }
                    if last {
                        let _ = w.flush();
                        return;
                    }
                    next += interval;
                    let now = std::time::Instant::now();
                    if next > now {
                        std::thread::park_timeout(next - now);
                    } else {
                        next = now;
                    }
                }
            })?;
        Ok(RateLog { stop, thread })
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn sample(ctx: &Context, w: &mut impl Write) -> std::io::Result<()> {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let all = ctx.counters();
    let counters: Vec<String> = COUNTERS
        .iter()
        .map(|n| {
            let v = all.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
            v.to_string()
        })
        .collect();
    let counters = counters.join(",");
    let rates = ctx.qp_rates();
    if rates.is_empty() {
        writeln!(w, "{t:.6},,,,,{counters}")?;
    }
    for (qpn, s) in rates {
        writeln!(
            w,
            "{t:.6},{qpn},{:.3},{:.3},{:.5},{counters}",
            s.current_rate, s.target_rate, s.alpha
        )?;
    }
    // Complete lines for whoever reads the file while the run goes on.
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce::verbs::{Access, QpCap, QpType, RcPath};
    use ferroce_transport::DcqcnConfig;

    #[test]
    fn logs_each_qps_rate_and_the_counters() {
        let (a, b) = Context::memory_pair().unwrap();
        a.set_dcqcn(DcqcnConfig {
            enabled: true,
            line_rate: 40,
            ..DcqcnConfig::default()
        })
        .unwrap();
        let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
        let mr_a = pd_a.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let mr_b = pd_b
            .reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let qp_a = pd_a
            .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
            .unwrap();
        let qp_b = pd_b
            .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
            .unwrap();
        qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 0, 0))
            .unwrap();
        qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 0, 0))
            .unwrap();

        let dir = std::env::temp_dir().join(format!("ferroce-ratelog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.csv");
        let log = RateLog::start(&a, &path, Duration::from_millis(5)).unwrap();
        qp_a.post_send(&ferroce::verbs::wr::rdma_write(
            1,
            mr_a.sge(0, 4096),
            mr_b.addr(),
            mr_b.rkey(),
        ))
        .unwrap();
        cq_a.wait_one(Duration::from_secs(10)).expect("completion");
        std::thread::sleep(Duration::from_millis(30));
        log.stop();

        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(HEADER));
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.len() >= 3, "{text}");
        let width = HEADER.split(',').count();
        for r in &rows {
            assert_eq!(r.len(), width, "{r:?}");
            assert_eq!(r[1], qp_a.qpn().to_string());
            // No CNP: the QP runs at the line rate.
            assert_eq!(r[2], "40.000");
        }
        // The last sample comes after the write: 4 KiB of payload went out.
        let last = rows.last().unwrap();
        let sent: u64 = last[5].parse().unwrap();
        assert!(sent > 4096, "{last:?}");
        // The receiving side counts the payload it took in sequence, once.
        let rcvd = b
            .counters()
            .into_iter()
            .find(|(n, _)| *n == "rcvd_data_bytes");
        assert_eq!(rcvd, Some(("rcvd_data_bytes", 4096)));
        let times: Vec<f64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[1] >= w[0]), "{times:?}");
    }
}

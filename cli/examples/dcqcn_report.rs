//! Figures and plot of a DCQCN end-to-end run (tests/dcqcn/run.sh): reads the senders'
//! and receivers' `ferroce perf --rate-log` CSV files and the bottleneck queue's samples,
//! prints each flow's goodput, the utilisation of the bottleneck, Jain's fairness index,
//! marks, drops, the queue's backlog and retransmissions, checks them against the goals
//! with `--check`, and draws each flow's rate and the queue's marks, drops and backlog over
//! time (PNG, plotters).
//!
//! cargo run --release --example dcqcn_report -- --bottleneck-mbps 40 --window 6:14 \
//!   --flow s1:s1.csv:r1.csv --flow s2:s2.csv:r2.csv --queue tc.csv --png out.png --check on

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

#[derive(Debug, Parser)]
struct Args {
    /// A flow: NAME:SENDER_RATE_LOG:RECEIVER_RATE_LOG (repeat for each flow).
    #[arg(long = "flow", required = true)]
    flows: Vec<String>,
    /// The bottleneck queue's samples:
    /// time_s,marked,early,pdrop,other,dropped,backlog_bytes,sent_bytes.
    #[arg(long)]
    queue: PathBuf,
    /// The bottleneck's rate, Mb/s.
    #[arg(long = "bottleneck-mbps")]
    bottleneck: f64,
    /// The measurement window, seconds after the first sample: START:END (after
    /// convergence, before the flows stop).
    #[arg(long)]
    window: String,
    /// Write the plot here.
    #[arg(long)]
    png: Option<PathBuf>,
    /// Plot title.
    #[arg(long, default_value = "DCQCN")]
    title: String,
    /// TrueType font for the plot's text (default: DejaVu Sans or Liberation Sans).
    #[arg(long)]
    font: Option<PathBuf>,
    /// Check the goals: `on` (DCQCN: bottleneck utilisation >= 0.9, Jain >= 0.95, no drops
    /// in the window, marks, a mean sampled backlog in the window below
    /// `--backlog-goal-kb`, no retransmissions) or `off` (drops and retransmissions).
    #[arg(long)]
    check: Option<String>,
    /// With `--check on`: the mean of the queue's backlog samples in the window must stay
    /// below this many KB (DCQCN holds the queue near the marking thresholds; a standing
    /// queue far above them means the flows' feedback is late and their rates swing).
    #[arg(long = "backlog-goal-kb", default_value_t = 150.0)]
    backlog_goal_kb: f64,
}

/// One rate log line (device counters; the first QP's rate).
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    rate: Option<f64>,
    sent_bytes: f64,
    rcvd_data_bytes: f64,
    retransmitted: f64,
    cnp_handled: f64,
    cnp_sent: f64,
    ecn_marked: f64,
}

fn read_rate_log(path: &str) -> Result<Vec<Sample>, Box<dyn Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or(format!("{path}: empty"))?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or(format!("{path}: no column {name}"))
    };
    let (ct, cr) = (col("time_s")?, col("rate_mbps")?);
    let cols = [
        col("sent_bytes")?,
        col("rcvd_data_bytes")?,
        col("retransmitted_pkts")?,
        col("rp_cnp_handled")?,
        col("np_cnp_sent")?,
        col("np_ecn_marked_roce_packets")?,
    ];
    let mut by_time: BTreeMap<u64, Sample> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != header.len() {
            continue; // a line cut short by the end of the run
        }
        let num = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
        let t = num(ct);
        by_time.entry((t * 1e6) as u64).or_insert(Sample {
            t,
            rate: f[cr].parse().ok(),
            sent_bytes: num(cols[0]),
            rcvd_data_bytes: num(cols[1]),
            retransmitted: num(cols[2]),
            cnp_handled: num(cols[3]),
            cnp_sent: num(cols[4]),
            ecn_marked: num(cols[5]),
        });
    }
    if by_time.len() < 2 {
        return Err(format!("{path}: fewer than two samples").into());
    }
    Ok(by_time.into_values().collect())
}

/// A sample of the bottleneck queue's counters.
#[derive(Debug, Clone, Copy)]
struct QueueSample {
    t: f64,
    marked: f64,
    dropped: f64,
    /// Bytes queued at the sample.
    backlog: f64,
    sent_bytes: f64,
}

fn read_queue(path: &PathBuf) -> Result<Vec<QueueSample>, Box<dyn Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut v = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<f64> = line.split(',').filter_map(|x| x.parse().ok()).collect();
        if f.len() >= 8 {
            v.push(QueueSample {
                t: f[0],
                marked: f[1],
                dropped: f[5],
                backlog: f[6],
                sent_bytes: f[7],
            });
        }
    }
    if v.len() < 2 {
        return Err(format!("{}: fewer than two samples", path.display()).into());
    }
    Ok(v)
}

/// The value of `f` at time `t` (the last sample at or before it).
fn at<T: Copy>(v: &[T], time: impl Fn(&T) -> f64, t: f64) -> T {
    let i = v.partition_point(|s| time(s) <= t);
    v[i.saturating_sub(1)]
}

struct Flow {
    name: String,
    sender: Vec<Sample>,
    receiver: Vec<Sample>,
}

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        0.0
    } else {
        s * s / (x.len() as f64 * s2)
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("dcqcn_report: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(a: Args) -> Result<bool, Box<dyn Error>> {
    let mut flows = Vec::new();
    for f in &a.flows {
        let p: Vec<&str> = f.split(':').collect();
        let [name, s, r] = p[..] else {
            return Err(format!("--flow {f}: write NAME:SENDER_LOG:RECEIVER_LOG").into());
        };
        flows.push(Flow {
            name: name.to_string(),
            sender: read_rate_log(s)?,
            receiver: read_rate_log(r)?,
        });
    }
    let queue = read_queue(&a.queue)?;
    let (w0, w1) = a
        .window
        .split_once(':')
        .and_then(|(x, y)| Some((x.parse::<f64>().ok()?, y.parse::<f64>().ok()?)))
        .filter(|(x, y)| x < y)
        .ok_or("--window: write START:END in seconds, START < END")?;
    let t0 = flows
        .iter()
        .map(|f| f.sender[0].t.min(f.receiver[0].t))
        .fold(f64::INFINITY, f64::min);
    let (ws, we) = (t0 + w0, t0 + w1);

    let st = |s: &Sample| s.t;
    let mut goodputs = Vec::new();
    let mut retrans_total = 0.0;
    for f in &flows {
        let (r0, r1) = (at(&f.receiver, st, ws), at(&f.receiver, st, we));
        let gp = (r1.rcvd_data_bytes - r0.rcvd_data_bytes) * 8.0 / (r1.t - r0.t).max(1e-9) / 1e6;
        let (s_first, s_last) = (f.sender[0], f.sender[f.sender.len() - 1]);
        let (s0, s1) = (at(&f.sender, st, ws), at(&f.sender, st, we));
        let retrans = s_last.retransmitted - s_first.retransmitted;
        retrans_total += retrans;
        let rate = s1.rate.map_or("-".to_string(), |r| format!("{r:.2} Mb/s"));
        let sent = (s1.sent_bytes - s0.sent_bytes) * 8.0 / (s1.t - s0.t).max(1e-9) / 1e6;
        println!(
            "flow {}: goodput {gp:.2} Mb/s in the window (sent {sent:.2} Mb/s of IP packets); DCQCN rate at its end {rate}; \
             retransmitted packets {retrans} (in the window {}); CNPs handled {} (receiver sent {}, \
             CE-marked packets received {})",
            f.name,
            s1.retransmitted - s0.retransmitted,
            s_last.cnp_handled - s_first.cnp_handled,
            f.receiver[f.receiver.len() - 1].cnp_sent,
            f.receiver[f.receiver.len() - 1].ecn_marked,
        );
        goodputs.push(gp);
    }
    let total: f64 = goodputs.iter().sum();
    let goodput_util = total / a.bottleneck;
    let fairness = jain(&goodputs);
    let qt = |s: &QueueSample| s.t;
    let (q0, q1) = (at(&queue, qt, ws), at(&queue, qt, we));
    let (qf, ql) = (queue[0], queue[queue.len() - 1]);
    let (marks_w, drops_w) = (q1.marked - q0.marked, q1.dropped - q0.dropped);
    // The backlog is a point sample (every ~0.5-1 s), so only its mean and maximum over the
    // window's samples mean anything.
    let in_window: Vec<f64> = queue
        .iter()
        .filter(|s| s.t >= ws && s.t <= we)
        .map(|s| s.backlog / 1000.0)
        .collect();
    let backlog_mean = in_window.iter().sum::<f64>() / in_window.len().max(1) as f64;
    let backlog_max = in_window.iter().copied().fold(0.0, f64::max);
    // Utilisation is the link's: the frames the bottleneck forwarded (what its rate
    // limits) over its rate. Goodput (payload delivered in order) is at most ~95% of it
    // at MTU 1024 (headers, ICRC).
    let out_rate = (q1.sent_bytes - q0.sent_bytes) * 8.0 / (q1.t - q0.t).max(1e-9) / 1e6;
    let util = out_rate / a.bottleneck;
    println!(
        "bottleneck {:.1} Mb/s, window {w0}-{w1} s: utilisation {util:.3} ({out_rate:.2} Mb/s \
         of frames forwarded; goodput {total:.2} Mb/s = {goodput_util:.3} of the rate), Jain \
         fairness {fairness:.4}",
        a.bottleneck
    );
    println!(
        "bottleneck queue: in the window {marks_w} marked, {drops_w} dropped; whole run {} \
         marked, {} dropped; retransmitted packets, all flows, whole run: {retrans_total}",
        ql.marked - qf.marked,
        ql.dropped - qf.dropped
    );
    println!(
        "bottleneck backlog: {} samples in the window, mean {backlog_mean:.0} KB, max \
         {backlog_max:.0} KB",
        in_window.len()
    );

    if let Some(png) = &a.png {
        plot(&a, png, &flows, &queue, t0, (w0, w1))?;
        println!("plot: {}", png.display());
    }

    let mut ok = true;
    let mut check = |pass: bool, what: String| {
        println!("{} {what}", if pass { "PASS" } else { "FAIL" });
        ok &= pass;
    };
    match a.check.as_deref() {
        None => {}
        Some("on") => {
            check(
                util >= 0.9,
                format!("dcqcn on: bottleneck utilisation {util:.3} >= 0.9"),
            );
            check(
                fairness >= 0.95,
                format!("dcqcn on: Jain fairness {fairness:.4} >= 0.95"),
            );
            check(
                drops_w == 0.0 && marks_w > 0.0,
                format!("dcqcn on: after convergence the queue marks ({marks_w}) and drops nothing ({drops_w})"),
            );
            check(
                !in_window.is_empty() && backlog_mean < a.backlog_goal_kb,
                format!(
                    "dcqcn on: the queue stays short: mean sampled backlog in the window \
                     {backlog_mean:.0} KB < {} KB",
                    a.backlog_goal_kb
                ),
            );
            check(
                retrans_total == 0.0,
                format!("dcqcn on: no go-back-N retransmissions ({retrans_total})"),
            );
        }
        Some("off") => {
            check(
                ql.dropped - qf.dropped > 0.0,
                format!("dcqcn off: the queue drops ({})", ql.dropped - qf.dropped),
            );
            check(
                retrans_total > 0.0,
                format!("dcqcn off: go-back-N retransmits ({retrans_total})"),
            );
        }
        Some(x) => return Err(format!("--check {x}: use on or off").into()),
    }
    Ok(ok)
}

fn load_font(a: &Args) -> Result<(), Box<dyn Error>> {
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
    ];
    let path = match &a.font {
        Some(p) => p.clone(),
        None => candidates
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("no font for the plot: install fonts-dejavu-core or pass --font FILE.ttf")?,
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| format!("{}: not a usable TrueType font", path.display()))?;
    Ok(())
}

/// Per-interval rates of a counter: (time since t0, Mb/s).
fn rate_series(v: &[Sample], t0: f64, f: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
    v.windows(2)
        .filter(|w| w[1].t > w[0].t)
        .map(|w| {
            (
                w[1].t - t0,
                (f(&w[1]) - f(&w[0])) * 8.0 / (w[1].t - w[0].t) / 1e6,
            )
        })
        .collect()
}

fn plot(
    a: &Args,
    png: &PathBuf,
    flows: &[Flow],
    queue: &[QueueSample],
    t0: f64,
    (w0, w1): (f64, f64),
) -> Result<(), Box<dyn Error>> {
    load_font(a)?;
    let tmax = flows
        .iter()
        .map(|f| {
            f.receiver[f.receiver.len() - 1]
                .t
                .max(f.sender[f.sender.len() - 1].t)
                - t0
        })
        .fold(0.0, f64::max);
    let root = BitMapBackend::new(png, (1100, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(470);

    let goodput: Vec<Vec<(f64, f64)>> = flows
        .iter()
        .map(|f| rate_series(&f.receiver, t0, |s| s.rcvd_data_bytes))
        .collect();
    let rates: Vec<Vec<(f64, f64)>> = flows
        .iter()
        .map(|f| {
            f.sender
                .iter()
                .filter_map(|s| s.rate.map(|r| (s.t - t0, r)))
                .collect()
        })
        .collect();
    let ymax = goodput
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(a.bottleneck, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&top)
        .caption(&a.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..tmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("Mb/s")
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, a.bottleneck), (tmax, a.bottleneck)],
            BLACK.mix(0.5).stroke_width(1),
        ))?
        .label("bottleneck rate")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    for (x, label) in [(w0, "window"), (w1, "")] {
        let s = chart.draw_series(LineSeries::new(
            vec![(x, 0.0), (x, ymax)],
            BLACK.mix(0.25).stroke_width(1),
        ))?;
        if !label.is_empty() {
            s.label("measurement window")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.25)));
        }
    }
    for (i, f) in flows.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(goodput[i].clone(), c.stroke_width(2)))?
            .label(format!("{} goodput (receiver)", f.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        if !rates[i].is_empty() {
            let c2 = c.mix(0.45);
            chart
                .draw_series(LineSeries::new(rates[i].clone(), c2.stroke_width(1)))?
                .label(format!("{} DCQCN rate Rc (sender)", f.name))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c2));
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let per_s = |f: fn(&QueueSample) -> f64| -> Vec<(f64, f64)> {
        queue
            .windows(2)
            .filter(|w| w[1].t > w[0].t)
            .map(|w| (w[1].t - t0, (f(&w[1]) - f(&w[0])) / (w[1].t - w[0].t)))
            .collect()
    };
    let marks = per_s(|s| s.marked);
    let drops = per_s(|s| s.dropped);
    let qmax = marks.iter().chain(&drops).map(|p| p.1).fold(10.0, f64::max) * 1.15;
    let backlog: Vec<(f64, f64)> = queue
        .iter()
        .map(|s| (s.t - t0, s.backlog / 1000.0))
        .collect();
    let bmax = backlog.iter().map(|p| p.1).fold(100.0, f64::max) * 1.15;
    let mut qc = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(60)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0.0..tmax, 0.0..qmax)?
        .set_secondary_coord(0.0..tmax, 0.0..bmax);
    qc.configure_mesh()
        .x_desc("time (s)")
        .y_desc("packets/s at the bottleneck")
        .draw()?;
    qc.configure_secondary_axes()
        .y_desc("backlog (KB, sampled)")
        .draw()?;
    let grey = BLACK.mix(0.6);
    qc.draw_secondary_series(LineSeries::new(backlog, grey.stroke_width(1)))?
        .label("backlog (right axis)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    qc.draw_series(LineSeries::new(marks, BLUE.stroke_width(2)))?
        .label("ECN CE marks")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    qc.draw_series(LineSeries::new(drops, RED.stroke_width(2)))?
        .label("drops")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    qc.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

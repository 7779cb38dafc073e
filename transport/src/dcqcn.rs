//! DCQCN congestion control (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015) as RoCE NICs implement it, on passed-in time.
//!
//! Three roles; the switch (congestion point) marks ECN-capable packets CE, this module is
//! the other two:
//!
//! * **Notification point** (receiver): a request or response arriving with CE makes the
//!   receiving QP send a CNP (BTH opcode 0x81, default P_Key, PSN 0, BECN set, 16 reserved
//!   zero bytes, ICRC; IP DSCP `cnp_dscp`, not ECN-capable) to the QP that sent the marked
//!   packet (a connected QP's `dest_qp_num`; for UD the DETH source QP, at the packet's
//!   source address), at most one per QP every `min_time_between_cnps`.
//! * **ECN**: every other packet of a QP with congestion control leaves with the ECN bits
//!   `ecn` (ECT(0)) and the DSCP of its address vector (`traffic_class >> 2`); without
//!   congestion control the traffic class goes out unchanged, as before.
//! * **Reaction point** (sender): a per-QP rate limiter. The QP may not send a paced
//!   packet (requests, READ responses) before its pacing time; ACKs, NAKs, atomic ACKs and
//!   CNPs are never held back. The rate follows the DCQCN equations below.
//!
//! # The reaction point, as implemented
//!
//! Rates are in Mb/s, α is a fraction in [0, 1], g = (1024 − `dce_tcp_g`) / 1024,
//! F = `rpg_threshold`, Rmax = `rpg_max_rate` (or `line_rate` when 0), Rmin = `rpg_min_rate`.
//!
//! * Before the first CNP the QP sends at Rc = Rt = Rmax, and no timer runs.
//! * **First CNP**: α = `initial_alpha_value` / 1024; if `rate_to_set_on_first_cnp` is set,
//!   Rc = Rt = that rate (this is the reaction to that CNP), else the cut below applies.
//! * **Cut** on a CNP (at most one per `rate_reduce_monitor_period`; a CNP inside the period
//!   makes the cut happen when the period ends):
//!   Rt = Rc (always with `clamp_tgt_rate`, otherwise only if a rate increase happened
//!   since the last cut: one driven by the byte counter, or by the timer when
//!   `clamp_tgt_rate_after_time_inc`);
//!   Rc = max(Rc · max(1 − α·2^(10 − `rpg_gd`), `rpg_min_dec_fac` / 100), Rmin)
//!   (with `rpg_gd` = 11: Rc = Rc·(1 − α/2), the paper's cut);
//!   the timer, byte counter and both stage counters T and BC restart.
//! * **α on every CNP**, after the cut decision: α = (1 − g)·α + g; the alpha timer restarts.
//! * **α decay**: every `dce_tcp_rtt` without a CNP, α = (1 − g)·α.
//! * **Rate increase events**: the timer (every `rpg_time_reset` since the last cut or
//!   timer event: T += 1) and the byte counter (every `rpg_byte_reset` bytes sent:
//!   BC += 1). Each event, with T and BC already counted:
//!   - fast recovery while max(T, BC) ≤ F: Rc = (Rt + Rc) / 2;
//!   - hyper increase when min(T, BC) > F: Rt += i·`rpg_hai_rate` with i = min(T, BC) − F,
//!     then Rc = (Rt + Rc) / 2;
//!   - additive increase otherwise: Rt += `rpg_ai_rate`, then Rc = (Rt + Rc) / 2;
//!   - Rt and Rc never exceed Rmax. Once Rt = Rmax and Rc is within 0.001 Mb/s of it, the
//!     limiter is released: the QP is back to its state before the first CNP.
//! * **Pacing**: a token bucket filled at Rc (at the rate in force at each instant: a rate
//!   change applies to the time after it), holding at most B = `pacing_burst_bytes`
//!   (the credit an idle or late sender may use at once). A paced packet may leave when
//!   the bucket is not negative; it takes its size L (IP header through ICRC) out.
//!
//! Time-driven events (timer stages, α decay, a deferred cut) are replayed in time order
//! when the QP is next looked at, so the state does not depend on how often the caller
//! polls, and the engine needs no timers but the pacer's: `poll_timeout` names the send
//! time of a QP held back, or its next timer rate increase if that comes first.

use crate::error::{Error, Result};
use crate::time::Instant;

/// ECN codepoint "not ECN-capable transport".
pub const ECN_NOT_ECT: u8 = 0;
/// ECN codepoint ECT(1).
pub const ECN_ECT1: u8 = 1;
/// ECN codepoint ECT(0), what RoCE NICs send with congestion control enabled.
pub const ECN_ECT0: u8 = 2;
/// ECN codepoint "congestion experienced".
pub const ECN_CE: u8 = 3;

/// A rate within this many Mb/s of the maximum counts as recovered.
const RECOVERED_EPS: f64 = 1e-3;

/// DCQCN parameters of an endpoint. Field names are the mlx5 sysfs / ConnectX firmware
/// names (`/sys/class/net/<if>/ecn/roce_rp/*`, `roce_np/*`, mlxconfig `ROCE_CC_*`);
/// each field documents its unit, ferroce's default and the ConnectX default where
/// ferroce's differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcqcnConfig {
    /// Congestion control (both the notification and the reaction point) for QPs that do
    /// not say otherwise (see `Endpoint::set_qp_dcqcn`). Default: off, so the wire
    /// behaviour is the plain RoCE one (as rxe, which has no congestion control).
    pub enabled: bool,
    /// The ECN codepoint of packets of QPs with congestion control: [`ECN_ECT0`] (default,
    /// as RoCE NICs) or [`ECN_ECT1`].
    pub ecn: u8,
    /// The port speed in Mb/s (ferroce cannot know it): the QP's rate before the first CNP,
    /// and the maximum when `rpg_max_rate` is 0. Default 10000 (10 Gb/s); set it to the
    /// link speed.
    pub line_rate: u32,
    /// Credit in bytes a paced QP that was idle (or is polled late) may send at once.
    /// Not a NIC parameter (a NIC's limiter is exact); default 65536.
    pub pacing_burst_bytes: u32,
    /// Rate increase timer period, µs (0: no timer). Default 300 (ConnectX: 300; the
    /// paper: 55).
    pub rpg_time_reset: u32,
    /// Byte counter period, bytes sent between rate increase events (0: no byte
    /// counter). Default 10 MB, the DCQCN paper's B (ConnectX: 32767, a stage every
    /// 26 µs at 10 Gb/s; with it and ConnectX's α timing the convergence test's queue
    /// overflows: recovery outruns the feedback).
    pub rpg_byte_reset: u32,
    /// F: rate increase events per counter spent in fast recovery before additive
    /// increase. Default 5, the paper's F (ConnectX: 1).
    pub rpg_threshold: u32,
    /// Maximum rate, Mb/s; 0: `line_rate`. Default 0 (ConnectX: 0).
    pub rpg_max_rate: u32,
    /// R_AI, additive increase of the target rate, Mb/s. Default 5 (ConnectX: 5; the
    /// paper: 40).
    pub rpg_ai_rate: u32,
    /// R_HAI, hyper increase step of the target rate, Mb/s. Default 50 (ConnectX: 50).
    pub rpg_hai_rate: u32,
    /// log2 of Gd: a cut multiplies the rate by 1 − α·1024/2^rpg_gd. Default 11, which
    /// is the paper's 1 − α/2 (ConnectX: 11).
    pub rpg_gd: u32,
    /// The least a cut may leave, percent of the rate before it (100: no cuts).
    /// Default 50 (ConnectX: 50).
    pub rpg_min_dec_fac: u32,
    /// Minimum rate, Mb/s. Default 1 (ConnectX: 1).
    pub rpg_min_rate: u32,
    /// Rc and Rt on the first CNP of a flow, Mb/s; 0: the first CNP cuts as any other.
    /// Default 0 (ConnectX: 0).
    pub rate_to_set_on_first_cnp: u32,
    /// 1024·(1 − g), g being α's gain. Default 1020: g = 1/256, the DCQCN paper's
    /// (ConnectX: 1019, g = 5/1024).
    pub dce_tcp_g: u32,
    /// α decay period, µs (0: α never decays). Default 55, the DCQCN paper's K
    /// (ConnectX: 1; α then forgets congestion within a fraction of a millisecond, and
    /// the convergence test's fairness falls to 0.95, its queue overflows when the
    /// ConnectX byte counter is used too).
    pub dce_tcp_rtt: u32,
    /// Minimum time between two cuts of one QP, µs. Default 4 (ConnectX: 4).
    pub rate_reduce_monitor_period: u32,
    /// α on the first CNP of a flow, in 1/1024. Default 1023 (ConnectX: 1023).
    pub initial_alpha_value: u32,
    /// Every cut sets the target rate to the current rate. Default false (ConnectX:
    /// false).
    pub clamp_tgt_rate: bool,
    /// A cut sets the target rate to the current rate also when the last increase since
    /// the previous cut came from the timer. Default true (ConnectX: true).
    pub clamp_tgt_rate_after_time_inc: bool,
    /// Notification point: minimum time between two CNPs of one QP, µs (0: a CNP for
    /// every marked packet). Default 4, the ConnectX default in published tuning tables
    /// (deployments tune it to 0-2; the DCQCN paper's N is 50). The convergence test
    /// passes with 4 and with 50.
    pub min_time_between_cnps: u32,
    /// DSCP of CNPs (their ECN bits are always "not ECT"). Default 48 (ConnectX: 48).
    pub cnp_dscp: u8,
    /// 802.1p priority of CNPs. Default 6 (ConnectX: 6). Kept for the driver: ferroce
    /// sends untagged frames, so it has no effect today.
    pub cnp_802p_prio: u8,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            enabled: false,
            ecn: ECN_ECT0,
            line_rate: 10_000,
            pacing_burst_bytes: 65_536,
            rpg_time_reset: 300,
            rpg_byte_reset: 10_000_000,
            rpg_threshold: 5,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1020,
            dce_tcp_rtt: 55,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            min_time_between_cnps: 4,
            cnp_dscp: 48,
            cnp_802p_prio: 6,
        }
    }
}

impl DcqcnConfig {
    /// Checks the ranges the NICs accept.
    pub fn validate(&self) -> Result<()> {
        let bad = |cond: bool, what: &'static str| {
            if cond {
                Err(Error::InvalidDcqcn(what))
            } else {
                Ok(())
            }
        };
        bad(!matches!(self.ecn, ECN_ECT0 | ECN_ECT1), "ecn")?;
        bad(self.line_rate == 0, "line_rate")?;
        bad(self.rpg_threshold > 31, "rpg_threshold")?;
        bad(self.rpg_gd > 31, "rpg_gd")?;
        bad(self.rpg_min_dec_fac > 100, "rpg_min_dec_fac")?;
        bad(self.rpg_min_rate == 0, "rpg_min_rate")?;
        bad(
            f64::from(self.rpg_min_rate) > self.max_rate(),
            "rpg_min_rate above the maximum rate",
        )?;
        bad(self.dce_tcp_g > 1024, "dce_tcp_g")?;
        bad(self.initial_alpha_value > 1024, "initial_alpha_value")?;
        bad(self.cnp_dscp > 63, "cnp_dscp")?;
        bad(self.cnp_802p_prio > 7, "cnp_802p_prio")?;
        Ok(())
    }

    /// The names [`DcqcnConfig::set`] takes: every parameter but `enabled`.
    pub const PARAMETERS: &'static [&'static str] = &[
        "ecn",
        "line_rate",
        "pacing_burst_bytes",
        "rpg_time_reset",
        "rpg_byte_reset",
        "rpg_threshold",
        "rpg_max_rate",
        "rpg_ai_rate",
        "rpg_hai_rate",
        "rpg_gd",
        "rpg_min_dec_fac",
        "rpg_min_rate",
        "rate_to_set_on_first_cnp",
        "dce_tcp_g",
        "dce_tcp_rtt",
        "rate_reduce_monitor_period",
        "initial_alpha_value",
        "clamp_tgt_rate",
        "clamp_tgt_rate_after_time_inc",
        "min_time_between_cnps",
        "cnp_dscp",
        "cnp_802p_prio",
    ];

    /// Sets the parameter called `name` (a field name, as NICs name it) from its decimal
    /// text (`0`/`1` or `false`/`true` for the two flags), so that tools can take
    /// `NAME=VALUE` settings. The ranges are checked by [`DcqcnConfig::validate`].
    pub fn set(&mut self, name: &str, value: &str) -> core::result::Result<(), String> {
        let num = || -> core::result::Result<u32, String> {
            value
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("{name}: {value:?} is not a non-negative integer"))
        };
        let small = |v: u32| u8::try_from(v).map_err(|_| format!("{name}: {v} is too large"));
        let flag = || match value.trim() {
            "1" | "true" => Ok(true),
            "0" | "false" => Ok(false),
            _ => Err(format!("{name}: {value:?} is not 0, 1, true or false")),
        };
        match name {
            "ecn" => self.ecn = small(num()?)?,
            "line_rate" => self.line_rate = num()?,
            "pacing_burst_bytes" => self.pacing_burst_bytes = num()?,
            "rpg_time_reset" => self.rpg_time_reset = num()?,
            "rpg_byte_reset" => self.rpg_byte_reset = num()?,
            "rpg_threshold" => self.rpg_threshold = num()?,
            "rpg_max_rate" => self.rpg_max_rate = num()?,
            "rpg_ai_rate" => self.rpg_ai_rate = num()?,
            "rpg_hai_rate" => self.rpg_hai_rate = num()?,
            "rpg_gd" => self.rpg_gd = num()?,
            "rpg_min_dec_fac" => self.rpg_min_dec_fac = num()?,
            "rpg_min_rate" => self.rpg_min_rate = num()?,
            "rate_to_set_on_first_cnp" => self.rate_to_set_on_first_cnp = num()?,
            "dce_tcp_g" => self.dce_tcp_g = num()?,
            "dce_tcp_rtt" => self.dce_tcp_rtt = num()?,
            "rate_reduce_monitor_period" => self.rate_reduce_monitor_period = num()?,
            "initial_alpha_value" => self.initial_alpha_value = num()?,
            "clamp_tgt_rate" => self.clamp_tgt_rate = flag()?,
            "clamp_tgt_rate_after_time_inc" => self.clamp_tgt_rate_after_time_inc = flag()?,
            "min_time_between_cnps" => self.min_time_between_cnps = num()?,
            "cnp_dscp" => self.cnp_dscp = small(num()?)?,
            "cnp_802p_prio" => self.cnp_802p_prio = small(num()?)?,
            _ => {
                return Err(format!(
                    "unknown DCQCN parameter {name:?}; known: {}",
                    Self::PARAMETERS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Rmax in Mb/s.
    pub fn max_rate(&self) -> f64 {
        f64::from(if self.rpg_max_rate == 0 {
            self.line_rate
        } else {
            self.rpg_max_rate
        })
    }

    fn min_rate(&self) -> f64 {
        f64::from(self.rpg_min_rate).min(self.max_rate())
    }

    fn clamp_rate(&self, r: f64) -> f64 {
        r.max(self.min_rate()).min(self.max_rate())
    }

    /// α's gain g.
    pub fn g(&self) -> f64 {
        f64::from(1024 - self.dce_tcp_g.min(1024)) / 1024.0
    }
}

/// A snapshot of one QP's reaction point (see [`Endpoint::qp_rate`]).
///
/// [`Endpoint::qp_rate`]: crate::Endpoint::qp_rate
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnState {
    /// A CNP arrived since the QP last ran at its maximum rate (the NIC's "rate limiter
    /// allocated"); false before the first CNP and after full recovery.
    pub limited: bool,
    /// Rc, the rate the QP is paced at, Mb/s.
    pub current_rate: f64,
    /// Rt, the target rate, Mb/s.
    pub target_rate: f64,
    /// α, the congestion estimate.
    pub alpha: f64,
    /// T: timer rate increase events since the last cut.
    pub time_stage: u32,
    /// BC: byte counter rate increase events since the last cut.
    pub byte_stage: u32,
    /// Cuts so far.
    pub cuts: u64,
    /// CNPs this reaction point handled.
    pub cnps: u64,
    /// Rate increase events so far.
    pub increases: u64,
    /// The earliest instant the QP may send its next paced packet.
    pub next_send: Instant,
}

/// What drove a rate increase event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IncSource {
    Timer,
    Bytes,
}

/// One QP's reaction point: the DCQCN rate computation and the pacer.
#[derive(Debug, Clone)]
pub(crate) struct Rp {
    limited: bool,
    rc: f64,
    rt: f64,
    alpha: f64,
    /// Start of the current α decay period, ns.
    alpha_at: u64,
    t_stage: u32,
    b_stage: u32,
    /// Start of the current rate increase timer period, ns.
    timer_at: u64,
    /// Bytes sent since the last byte counter event.
    bytes: u64,
    /// Time of the last cut, ns.
    last_cut: Option<u64>,
    /// A CNP arrived within the monitor period after the last cut: cut when it ends.
    cut_pending: bool,
    last_inc: Option<IncSource>,
    /// Pacer bucket, bytes (negative: owed), as of `tokens_at` (ns).
    tokens: f64,
    tokens_at: u64,
    cuts: u64,
    cnps: u64,
    increases: u64,
}

fn ns(us: u32) -> u64 {
    u64::from(us) * 1000
}

impl Rp {
    pub(crate) fn new(cfg: &DcqcnConfig) -> Rp {
        let max = cfg.max_rate();
        Rp {
            limited: false,
            rc: max,
            rt: max,
            alpha: f64::from(cfg.initial_alpha_value) / 1024.0,
            alpha_at: 0,
            t_stage: 0,
            b_stage: 0,
            timer_at: 0,
            bytes: 0,
            last_cut: None,
            cut_pending: false,
            last_inc: None,
            tokens: 0.0,
            tokens_at: 0,
            cuts: 0,
            cnps: 0,
            increases: 0,
        }
    }

    pub(crate) fn state(&self) -> DcqcnState {
        DcqcnState {
            limited: self.limited,
            current_rate: self.rc,
            target_rate: self.rt,
            alpha: self.alpha,
            time_stage: self.t_stage,
            byte_stage: self.b_stage,
            cuts: self.cuts,
            cnps: self.cnps,
            increases: self.increases,
            next_send: self.next_send(),
        }
    }

    /// Replays every time-driven event up to `now`: timer stages, a deferred cut, α decay.
    pub(crate) fn advance(&mut self, cfg: &DcqcnConfig, now: Instant) {
        let now = now.as_nanos();
        let period = ns(cfg.rpg_time_reset);
        let monitor = ns(cfg.rate_reduce_monitor_period);
        while self.limited {
            let timer = (period > 0).then(|| self.timer_at.saturating_add(period));
            let cut = if self.cut_pending {
                self.last_cut.map(|l| l.saturating_add(monitor))
            } else {
                None
            };
            match (timer, cut) {
                (_, Some(c)) if c <= now && timer.is_none_or(|t| c <= t) => {
                    self.cut_pending = false;
                    self.decay_alpha(cfg, c);
                    self.fill(cfg, c);
                    self.cut(cfg, c);
                }
                (Some(t), _) if t <= now => {
                    self.fill(cfg, t);
                    self.timer_at = t;
                    self.t_stage = self.t_stage.saturating_add(1);
                    self.increase(cfg, IncSource::Timer);
                }
                _ => break,
            }
        }
        if self.limited {
            self.decay_alpha(cfg, now);
        }
    }

    /// Fills the pacer's bucket at the current rate up to `t` (before any rate change).
    fn fill(&mut self, cfg: &DcqcnConfig, t: u64) {
        if t > self.tokens_at {
            let add = (t - self.tokens_at) as f64 * self.rc / 8_000.0;
            self.tokens = (self.tokens + add).min(f64::from(cfg.pacing_burst_bytes));
            self.tokens_at = t;
        }
    }

    /// α = (1 − g)^n · α for the n whole decay periods up to `t`.
    fn decay_alpha(&mut self, cfg: &DcqcnConfig, t: u64) {
        let k = ns(cfg.dce_tcp_rtt);
        if k == 0 || t <= self.alpha_at {
            return;
        }
        let n = (t - self.alpha_at) / k;
        if n == 0 {
            return;
        }
        let f = 1.0 - cfg.g();
        self.alpha *= f.powi(i32::try_from(n).unwrap_or(i32::MAX));
        self.alpha_at += n * k;
    }

    /// A CNP for this QP arrived at `now`.
    pub(crate) fn on_cnp(&mut self, cfg: &DcqcnConfig, now: Instant) {
        self.advance(cfg, now);
        let t = now.as_nanos();
        self.fill(cfg, t);
        self.cnps += 1;
        if !self.limited {
            // The first CNP: the flow gets a rate limiter.
            self.limited = true;
            self.alpha = f64::from(cfg.initial_alpha_value) / 1024.0;
            self.alpha_at = t;
            self.rt = self.rc;
            self.last_cut = None;
            self.cut_pending = false;
            self.last_inc = None;
            if cfg.rate_to_set_on_first_cnp != 0 {
                let r = cfg.clamp_rate(f64::from(cfg.rate_to_set_on_first_cnp));
                self.rc = r;
                self.rt = r;
                self.restart_increase(t);
                self.last_cut = Some(t);
                self.update_alpha_on_cnp(cfg, t);
                return;
            }
        }
        self.decay_alpha(cfg, t);
        let monitor = ns(cfg.rate_reduce_monitor_period);
        if self.last_cut.is_none_or(|l| t >= l.saturating_add(monitor)) {
            self.cut(cfg, t);
        } else {
            self.cut_pending = true;
        }
        self.update_alpha_on_cnp(cfg, t);
    }

    fn update_alpha_on_cnp(&mut self, cfg: &DcqcnConfig, t: u64) {
        let g = cfg.g();
        self.alpha = (1.0 - g) * self.alpha + g;
        self.alpha_at = t;
    }

    fn restart_increase(&mut self, t: u64) {
        self.t_stage = 0;
        self.b_stage = 0;
        self.bytes = 0;
        self.timer_at = t;
        self.last_inc = None;
    }

    /// Rt = Rc (see `clamp_tgt_rate`), Rc = Rc·(1 − α/Gd) within the limits.
    fn cut(&mut self, cfg: &DcqcnConfig, t: u64) {
        let clamp = cfg.clamp_tgt_rate
            || match self.last_inc {
                Some(IncSource::Bytes) => true,
                Some(IncSource::Timer) => cfg.clamp_tgt_rate_after_time_inc,
                None => false,
            };
        if clamp {
            self.rt = self.rc;
        }
        let dec = self.alpha * 1024.0 / f64::from(1u32 << cfg.rpg_gd.min(31));
        let factor = (1.0 - dec).max(f64::from(cfg.rpg_min_dec_fac.min(100)) / 100.0);
        self.rc = cfg.clamp_rate(self.rc * factor);
        self.restart_increase(t);
        self.last_cut = Some(t);
        self.cuts += 1;
    }

    /// One rate increase event (its stage counter already counted).
    fn increase(&mut self, cfg: &DcqcnConfig, src: IncSource) {
        self.last_inc = Some(src);
        self.increases += 1;
        let f = cfg.rpg_threshold;
        let (t, b) = (self.t_stage, self.b_stage);
        let max = cfg.max_rate();
        if t.max(b) <= f {
            // Fast recovery: Rt stays.
        } else if t.min(b) > f {
            self.rt += f64::from(t.min(b) - f) * f64::from(cfg.rpg_hai_rate);
        } else {
            self.rt += f64::from(cfg.rpg_ai_rate);
        }
        self.rt = self.rt.min(max);
        self.rc = cfg.clamp_rate((self.rt + self.rc) / 2.0);
        if !self.cut_pending && self.rt >= max && max - self.rc < RECOVERED_EPS {
            // Back at full rate: the limiter is released.
            self.limited = false;
            self.rc = max;
            self.rt = max;
            self.t_stage = 0;
            self.b_stage = 0;
            self.bytes = 0;
            self.last_inc = None;
            self.alpha = f64::from(cfg.initial_alpha_value) / 1024.0;
        }
    }

    /// May a paced packet leave at `now` (with the rate as of the last `advance`)?
    pub(crate) fn ready(&self, now: Instant) -> bool {
        self.next_send() <= now
    }

    /// The earliest instant of the next paced packet at the current rate (a rate increase
    /// before then makes it earlier: see [`Rp::wakeup`]).
    pub(crate) fn next_send(&self) -> Instant {
        let wait = if self.tokens < 0.0 {
            // bytes · 8 / (Mb/s) = µs; × 1000 = ns.
            (-self.tokens * 8_000.0 / self.rc).ceil() as u64
        } else {
            0
        };
        Instant::from_nanos(self.tokens_at.saturating_add(wait))
    }

    /// When a QP waiting for its pacer should look again: at its send time, or at the
    /// next timer rate increase if that comes first.
    pub(crate) fn wakeup(&self, cfg: &DcqcnConfig) -> Instant {
        let send = self.next_send();
        let period = ns(cfg.rpg_time_reset);
        if self.limited && period > 0 {
            send.min(Instant::from_nanos(self.timer_at.saturating_add(period)))
        } else {
            send
        }
    }

    /// A paced packet of `bytes` (IP header through ICRC) left at `now`.
    pub(crate) fn on_sent(&mut self, cfg: &DcqcnConfig, now: Instant, bytes: usize) {
        self.advance(cfg, now);
        self.fill(cfg, now.as_nanos());
        // Sent at its time: rounding of `next_send` leaves no debt behind.
        self.tokens = self.tokens.max(0.0) - bytes as f64;
        if self.limited && cfg.rpg_byte_reset > 0 {
            self.bytes += bytes as u64;
            let b = u64::from(cfg.rpg_byte_reset);
            while self.limited && self.bytes >= b {
                self.bytes -= b;
                self.b_stage = self.b_stage.saturating_add(1);
                self.increase(cfg, IncSource::Bytes);
            }
        }
    }
}

/// One QP's notification point: when it last generated a CNP.
#[derive(Debug, Clone, Default)]
pub(crate) struct Np {
    /// When the last CNP was generated, ns.
    last: Option<u64>,
}

impl Np {
    /// A CE-marked packet arrived at `now`: whether to generate a CNP for it (not if one
    /// was generated less than `min_time_between_cnps` ago). A yes is recorded.
    pub(crate) fn on_marked(&mut self, cfg: &DcqcnConfig, now: Instant) -> bool {
        let t = now.as_nanos();
        let gap = ns(cfg.min_time_between_cnps);
        if self.last.is_some_and(|l| t < l.saturating_add(gap)) {
            return false;
        }
        self.last = Some(t);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1000;

    #[test]
    fn every_parameter_can_be_set_by_name() {
        for (i, name) in DcqcnConfig::PARAMETERS.iter().enumerate() {
            let mut c = DcqcnConfig::default();
            let value = if name.starts_with("clamp") {
                "true"
            } else {
                "1"
            };
            c.set(name, value).unwrap();
            let mut c2 = DcqcnConfig::default();
            c2.set(
                name,
                if name.starts_with("clamp") {
                    "false"
                } else {
                    "2"
                },
            )
            .unwrap();
            assert_ne!(c, c2, "parameter #{i} {name} changes nothing");
        }
        let mut c = DcqcnConfig::default();
        c.set("rpg_ai_rate", "7").unwrap();
        assert_eq!(c.rpg_ai_rate, 7);
        let e = c.set("rpg_ai", "7").unwrap_err();
        assert!(
            e.contains("unknown DCQCN parameter") && e.contains("rpg_ai_rate"),
            "{e}"
        );
        assert!(c.set("rpg_ai_rate", "-1").is_err());
        assert!(c.set("cnp_dscp", "300").is_err());
        assert!(c.set("clamp_tgt_rate", "yes").is_err());
        assert!(c.set("enabled", "1").is_err());
    }

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    /// Round numbers: Rmax 10000 Mb/s, T = 100 µs, no byte counter, F = 5, AI 10, HAI 100,
    /// g = 1/256, K = 55 µs, no monitor period, α starts at 1.
    fn cfg() -> DcqcnConfig {
        DcqcnConfig {
            enabled: true,
            line_rate: 10_000,
            rpg_time_reset: 100,
            rpg_byte_reset: 0,
            rpg_threshold: 5,
            rpg_ai_rate: 10,
            rpg_hai_rate: 100,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 10,
            dce_tcp_g: 1020,
            dce_tcp_rtt: 55,
            rate_reduce_monitor_period: 0,
            initial_alpha_value: 1024,
            clamp_tgt_rate: true,
            ..DcqcnConfig::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[track_caller]
    fn assert_close(a: f64, b: f64) {
        assert!(close(a, b), "{a} != {b}");
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let d = DcqcnConfig::default();
        d.validate().unwrap();
        assert!(!d.enabled);
        assert_eq!(d.ecn, ECN_ECT0);
        assert_eq!(
            (d.rpg_time_reset, d.rpg_byte_reset, d.rpg_threshold),
            (300, 10_000_000, 5)
        );
        assert_eq!((d.rpg_ai_rate, d.rpg_hai_rate, d.rpg_gd), (5, 50, 11));
        assert_eq!(
            (d.rpg_min_dec_fac, d.rpg_min_rate, d.rpg_max_rate),
            (50, 1, 0)
        );
        assert_eq!(
            (d.dce_tcp_g, d.dce_tcp_rtt, d.initial_alpha_value),
            (1020, 55, 1023)
        );
        assert_eq!(
            (d.rate_reduce_monitor_period, d.min_time_between_cnps),
            (4, 4)
        );
        assert_eq!((d.cnp_dscp, d.cnp_802p_prio), (48, 6));
        assert_eq!(d.max_rate(), 10_000.0);
        assert_close(d.g(), 1.0 / 256.0);
        let bad = [
            DcqcnConfig {
                ecn: 0,
                ..d.clone()
            },
            DcqcnConfig {
                ecn: 3,
                ..d.clone()
            },
            DcqcnConfig {
                line_rate: 0,
                ..d.clone()
            },
            DcqcnConfig {
                rpg_min_dec_fac: 101,
                ..d.clone()
            },
            DcqcnConfig {
                dce_tcp_g: 1025,
                ..d.clone()
            },
            DcqcnConfig {
                cnp_dscp: 64,
                ..d.clone()
            },
            DcqcnConfig {
                rpg_min_rate: 20_000,
                ..d.clone()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }

    #[test]
    fn first_cnp_cuts_the_rate_and_raises_alpha() {
        let c = DcqcnConfig {
            initial_alpha_value: 1023,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        let s = rp.state();
        assert!(!s.limited);
        assert_eq!((s.current_rate, s.target_rate), (10_000.0, 10_000.0));
        rp.on_cnp(&c, at(7 * US));
        let s = rp.state();
        let a0 = 1023.0 / 1024.0;
        let g = 1.0 / 256.0;
        assert!(s.limited);
        // Rt = Rc; Rc = Rc·(1 − α/2) with α before the update; then α = (1 − g)α + g.
        assert_close(s.target_rate, 10_000.0);
        assert_close(s.current_rate, 10_000.0 * (1.0 - a0 / 2.0));
        assert_close(s.alpha, (1.0 - g) * a0 + g);
        assert_eq!((s.cuts, s.cnps), (1, 1));
        // A second CNP: Rt follows Rc (clamp_tgt_rate), cut with the new α.
        rp.on_cnp(&c, at(8 * US));
        let a1 = (1.0 - g) * a0 + g;
        let rc1 = 10_000.0 * (1.0 - a0 / 2.0);
        let s = rp.state();
        assert_close(s.target_rate, rc1);
        assert_close(s.current_rate, rc1 * (1.0 - a1 / 2.0));
        assert_close(s.alpha, (1.0 - g) * a1 + g);
    }

    #[test]
    fn alpha_decays_once_per_period_without_cnps() {
        // No rate increase timer: the QP cannot recover (and reset α) meanwhile.
        let c = DcqcnConfig {
            rpg_time_reset: 0,
            ..cfg()
        };
        let g = c.g();
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        let a = rp.state().alpha;
        assert_close(a, 1.0); // (1 − g)·1 + g
        rp.advance(&c, at(55 * US - 1));
        assert_close(rp.state().alpha, a);
        rp.advance(&c, at(55 * US));
        assert_close(rp.state().alpha, a * (1.0 - g));
        rp.advance(&c, at(3 * 55 * US + 20 * US));
        let a3 = a * (1.0 - g).powi(3);
        assert_close(rp.state().alpha, a3);
        // A CNP between decays: α = (1 − g)α + g, and the decay period restarts there.
        rp.on_cnp(&c, at(200 * US));
        let a4 = (1.0 - g) * a3 + g;
        assert_close(rp.state().alpha, a4);
        rp.advance(&c, at(254 * US));
        assert_close(rp.state().alpha, a4);
        rp.advance(&c, at(255 * US));
        assert_close(rp.state().alpha, a4 * (1.0 - g));
        // Many periods at once are the same as one at a time.
        let mut one = rp.clone();
        for k in 1..=400 {
            one.advance(&c, at(255 * US + k * 55 * US));
        }
        rp.advance(&c, at(255 * US + 400 * 55 * US));
        assert_close(rp.state().alpha, one.state().alpha);
        assert!(rp.state().alpha < 0.5);
    }

    #[test]
    fn cut_follows_gd_min_dec_fac_and_min_rate() {
        // rpg_gd 12: Rc·(1 − α/4).
        let c = DcqcnConfig {
            rpg_gd: 12,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        assert_close(rp.state().current_rate, 10_000.0 * 0.75);
        // rpg_gd 10: 1 − α = 0, but a cut leaves at least rpg_min_dec_fac percent.
        let c = DcqcnConfig {
            rpg_gd: 10,
            rpg_min_dec_fac: 30,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        assert_close(rp.state().current_rate, 3_000.0);
        // rpg_min_dec_fac 100: no cut at all.
        let c = DcqcnConfig {
            rpg_min_dec_fac: 100,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        assert_close(rp.state().current_rate, 10_000.0);
        // Repeated cuts stop at rpg_min_rate.
        let c = cfg();
        let mut rp = Rp::new(&c);
        for k in 0..40 {
            rp.on_cnp(&c, at(k * US));
            assert!(rp.state().current_rate >= 10.0);
        }
        assert_close(rp.state().current_rate, 10.0);
    }

    #[test]
    fn fast_recovery_halves_the_gap_to_the_target_for_f_timer_stages() {
        let c = cfg();
        let mut rp = Rp::new(&c);
        // Two cuts (α = 1): Rt = 5000 after the second, Rc = 2500; the timer restarts at
        // the last cut.
        rp.on_cnp(&c, at(0));
        let t0 = US;
        rp.on_cnp(&c, at(t0));
        let rt = rp.state().target_rate;
        let mut rc = rp.state().current_rate;
        assert_close(rt, 5_000.0);
        assert_close(rc, 2_500.0);
        let t = 100 * US;
        for k in 1..=5u64 {
            rp.advance(&c, at(t0 + k * t - 1));
            assert_eq!(rp.state().time_stage as u64, k - 1);
            rp.advance(&c, at(t0 + k * t));
            rc = (rt + rc) / 2.0;
            let s = rp.state();
            assert_eq!(s.time_stage as u64, k);
            assert_close(s.target_rate, rt);
            assert_close(s.current_rate, rc);
        }
        // After F stages the gap is 1/2^F of what the cut opened.
        assert_close(rt - rc, (5_000.0 - 2_500.0) / 32.0);
        // Stage F + 1 is additive increase: Rt += R_AI, then Rc = (Rt + Rc) / 2.
        rp.advance(&c, at(t0 + 6 * t));
        let s = rp.state();
        assert_close(s.target_rate, rt + 10.0);
        assert_close(s.current_rate, (rt + 10.0 + rc) / 2.0);
        rp.advance(&c, at(t0 + 7 * t));
        let s2 = rp.state();
        assert_close(s2.target_rate, rt + 20.0);
        assert_close(s2.current_rate, (rt + 20.0 + s.current_rate) / 2.0);
        // Without a byte counter there is no hyper increase however long it runs.
        let mut prev = s2;
        for k in 8..40 {
            rp.advance(&c, at(t0 + k * t));
            let s = rp.state();
            assert_close(s.target_rate, prev.target_rate + 10.0);
            prev = s;
        }
    }

    #[test]
    fn byte_counter_advances_stages_and_hyper_increase_needs_both() {
        let c = DcqcnConfig {
            line_rate: 100_000,
            rpg_byte_reset: 10_000,
            rate_to_set_on_first_cnp: 1_000,
            pacing_burst_bytes: 0,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        let s = rp.state();
        // rate_to_set_on_first_cnp: Rc = Rt = 1000, no cut on top.
        assert_close(s.current_rate, 1_000.0);
        assert_close(s.target_rate, 1_000.0);
        assert_eq!(s.cuts, 0);
        let (mut rt, mut rc) = (1_000.0, 1_000.0);
        // Bytes sent at t < T: only BC moves. One packet of 3·B bytes is three events.
        rp.on_sent(&c, at(1), 9_999);
        assert_eq!(rp.state().byte_stage, 0);
        rp.on_sent(&c, at(2), 1 + 2 * 10_000);
        assert_eq!((rp.state().byte_stage, rp.state().time_stage), (3, 0));
        rc = (rt + rc) / 2.0; // all three are fast recovery at Rt = 1000: Rc stays 1000
        assert_close(rp.state().current_rate, rc);
        for bc in 4..=6u32 {
            rp.on_sent(&c, at(3), 10_000);
            assert_eq!(rp.state().byte_stage, bc);
            if bc == 6 {
                rt += 10.0; // max(T, BC) = 6 > F, min = 0: additive
            }
            rc = (rt + rc) / 2.0;
            assert_close(rp.state().target_rate, rt);
            assert_close(rp.state().current_rate, rc);
        }
        // Timer stages 1..=5 with BC = 6: additive each; stage 6: min(T, BC) = 6 > F,
        // hyper with i = 1.
        for t in 1..=6u64 {
            rp.advance(&c, at(t * 100 * US));
            rt += if t == 6 { 100.0 } else { 10.0 };
            rc = (rt + rc) / 2.0;
            let s = rp.state();
            assert_eq!((s.time_stage, s.byte_stage), (t as u32, 6));
            assert_close(s.target_rate, rt);
            assert_close(s.current_rate, rc);
        }
        // BC 7 (min 6: i = 1), then T 7 (min 7: i = 2).
        rp.on_sent(&c, at(600 * US + 1), 10_000);
        rt += 100.0;
        rc = (rt + rc) / 2.0;
        assert_close(rp.state().target_rate, rt);
        rp.advance(&c, at(700 * US));
        rt += 200.0;
        rc = (rt + rc) / 2.0;
        assert_close(rp.state().target_rate, rt);
        assert_close(rp.state().current_rate, rc);
        // A cut restarts both counters.
        rp.on_cnp(&c, at(701 * US));
        let s = rp.state();
        assert_eq!((s.time_stage, s.byte_stage), (0, 0));
        assert_close(s.target_rate, rc);
        // The timer restarted at the cut: the next timer event is 100 µs after it.
        rp.advance(&c, at(800 * US));
        assert_eq!(rp.state().time_stage, 0);
        rp.advance(&c, at(801 * US));
        assert_eq!(rp.state().time_stage, 1);
    }

    #[test]
    fn monitor_period_allows_one_cut_and_defers_the_next() {
        let c = DcqcnConfig {
            rate_reduce_monitor_period: 50,
            dce_tcp_rtt: 0,
            ..cfg()
        };
        let g = c.g();
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        assert_eq!(rp.state().cuts, 1);
        let rc = rp.state().current_rate;
        // CNPs within the period: α moves, the rate does not.
        rp.on_cnp(&c, at(10 * US));
        rp.on_cnp(&c, at(20 * US));
        let a = rp.state().alpha;
        assert_close(a, 1.0); // α = 1 is a fixed point of (1 − g)α + g
        let s = rp.state();
        assert_eq!((s.cuts, s.cnps), (1, 3));
        assert_close(s.current_rate, rc);
        // One deferred cut when the period ends, however many CNPs came.
        rp.advance(&c, at(50 * US - 1));
        assert_eq!(rp.state().cuts, 1);
        rp.advance(&c, at(50 * US));
        let s = rp.state();
        assert_eq!(s.cuts, 2);
        assert_close(s.current_rate, rc * (1.0 - a / 2.0));
        // A CNP 10 µs after that cut waits for 100 µs; one 60 µs after it cuts at once.
        rp.on_cnp(&c, at(60 * US));
        assert_eq!(rp.state().cuts, 2);
        rp.advance(&c, at(100 * US));
        assert_eq!(rp.state().cuts, 3);
        rp.on_cnp(&c, at(160 * US));
        assert_eq!(rp.state().cuts, 4);
        let _ = g;
    }

    #[test]
    fn target_rate_clamping_follows_the_clamp_flags() {
        // Without clamp_tgt_rate, a cut with no increase since the last one keeps Rt.
        let c = DcqcnConfig {
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: false,
            rpg_byte_reset: 1_000_000,
            pacing_burst_bytes: 0,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        rp.on_cnp(&c, at(US));
        assert_close(rp.state().target_rate, 10_000.0);
        // A timer increase does not clamp without clamp_tgt_rate_after_time_inc ...
        rp.advance(&c, at(101 * US));
        assert_eq!(rp.state().time_stage, 1);
        rp.on_cnp(&c, at(102 * US));
        assert_close(rp.state().target_rate, 10_000.0);
        // ... a byte counter increase does.
        rp.on_sent(&c, at(103 * US), 1_000_000);
        let rc = rp.state().current_rate;
        rp.on_cnp(&c, at(104 * US));
        assert_close(rp.state().target_rate, rc);
        // With clamp_tgt_rate_after_time_inc, a timer increase clamps too.
        let c = DcqcnConfig {
            clamp_tgt_rate_after_time_inc: true,
            ..c
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        rp.advance(&c, at(100 * US));
        let rc = rp.state().current_rate;
        rp.on_cnp(&c, at(101 * US));
        assert_close(rp.state().target_rate, rc);
    }

    #[test]
    fn rates_never_exceed_the_maximum_and_recovery_releases_the_limiter() {
        let c = DcqcnConfig {
            rpg_max_rate: 4_000,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        assert_close(rp.state().current_rate, 4_000.0);
        rp.on_cnp(&c, at(0));
        assert_close(rp.state().current_rate, 2_000.0);
        let mut k = 1;
        while rp.state().limited {
            rp.advance(&c, at(k * 100 * US));
            let s = rp.state();
            assert!(s.current_rate <= 4_000.0 && s.target_rate <= 4_000.0);
            k += 1;
            assert!(k < 1000, "never recovered");
        }
        let s = rp.state();
        assert_eq!((s.current_rate, s.target_rate), (4_000.0, 4_000.0));
        // Released: the next CNP is a first CNP again (α from initial_alpha_value).
        rp.on_cnp(&c, at(k * 100 * US + 1));
        assert_close(rp.state().current_rate, 2_000.0);
    }

    #[test]
    fn pacing_spaces_packets_at_the_current_rate_with_a_burst_credit() {
        let c = DcqcnConfig {
            pacing_burst_bytes: 2_500,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        // 10 Gb/s: 1250 bytes take 1 µs.
        assert!(rp.ready(at(0)));
        rp.on_sent(&c, at(0), 1_250);
        assert_eq!(rp.next_send(), at(US));
        assert!(!rp.ready(at(US - 1)));
        rp.on_sent(&c, at(US), 1_250);
        assert_eq!(rp.next_send(), at(2 * US));
        // Idle for a long time: 2500 bytes of credit (2 µs) and no more.
        rp.on_sent(&c, at(100 * US), 1_250);
        assert!(rp.ready(at(100 * US)));
        rp.on_sent(&c, at(100 * US), 1_250);
        assert!(rp.ready(at(100 * US)));
        rp.on_sent(&c, at(100 * US), 1_250);
        assert_eq!(rp.next_send(), at(101 * US));
        // After a cut to 5 Gb/s the same packet takes 2 µs.
        rp.on_cnp(&c, at(101 * US));
        rp.on_sent(&c, at(101 * US), 1_250);
        assert_eq!(rp.next_send(), at(103 * US));
    }

    #[test]
    fn a_rate_increase_shortens_the_wait_of_a_packet_paced_at_a_lower_rate() {
        let c = DcqcnConfig {
            pacing_burst_bytes: 0,
            ..cfg()
        };
        let mut rp = Rp::new(&c);
        rp.on_cnp(&c, at(0));
        assert_close(rp.state().current_rate, 5_000.0);
        // 1.25 MB at 5000 Mb/s: 2 ms, but the timer raises the rate after 100 µs, so the
        // caller is told to look again then.
        rp.on_sent(&c, at(0), 1_250_000);
        assert_eq!(rp.next_send(), at(2_000 * US));
        assert_eq!(rp.wakeup(&c), at(100 * US));
        // 100 µs at 5000 Mb/s paid 62500 bytes; the rest goes at 7500 Mb/s.
        rp.advance(&c, at(100 * US));
        assert_close(rp.state().current_rate, 7_500.0);
        let rest = (1_187_500.0f64 * 8_000.0 / 7_500.0).ceil() as u64;
        assert_eq!(rp.next_send(), at(100 * US + rest));
        assert_eq!(rp.wakeup(&c), at(200 * US));
    }

    #[test]
    fn state_does_not_depend_on_how_often_it_is_polled() {
        let c = DcqcnConfig {
            rpg_byte_reset: 20_000,
            rate_reduce_monitor_period: 30,
            dce_tcp_rtt: 5,
            clamp_tgt_rate: false,
            ..cfg()
        };
        let events: Vec<(u64, Option<usize>)> = (0..400u64)
            .map(|k| {
                let t = k * 7 * US + (k * k) % 3000;
                (t, if k % 37 == 5 { None } else { Some(1_000) })
            })
            .collect();
        let mut lazy = Rp::new(&c);
        let mut eager = Rp::new(&c);
        let mut next_poll = 0;
        for &(t, ev) in &events {
            while next_poll < t {
                eager.advance(&c, at(next_poll));
                next_poll += 300;
            }
            for rp in [&mut lazy, &mut eager] {
                match ev {
                    None => rp.on_cnp(&c, at(t)),
                    Some(n) => rp.on_sent(&c, at(t), n),
                }
            }
        }
        lazy.advance(&c, at(4_000 * US));
        eager.advance(&c, at(4_000 * US));
        let (a, b) = (lazy.state(), eager.state());
        assert!(a.cuts > 5 && a.increases > 10, "{a:?}");
        assert_eq!((a.cuts, a.increases), (b.cuts, b.increases));
        assert_close(a.current_rate, b.current_rate);
        assert_close(a.alpha, b.alpha);
    }

    #[test]
    fn notification_point_limits_cnps_per_interval() {
        let c = cfg(); // min_time_between_cnps 4 µs
        let mut np = Np::default();
        assert!(np.on_marked(&c, at(10 * US)));
        assert!(!np.on_marked(&c, at(10 * US)));
        assert!(!np.on_marked(&c, at(14 * US - 1)));
        assert!(np.on_marked(&c, at(14 * US)));
    }
}

//! The QP's side of DCQCN: whether congestion control is on, the reaction and
//! notification point state it keeps, the CNPs it owes, which packet goes next under
//! congestion control, and the pacer's entry in the timer table.
//!
//! The rate computation itself is [`crate::dcqcn`]: pure math on passed-in time. This
//! file is where the QP calls into it.

use std::collections::VecDeque;

use core::net::Ipv6Addr;

use ferroce_wire::{cnp, CnpRepr, ExtRepr};

use crate::dcqcn::{DcqcnConfig, DcqcnState, Np, Rp, ECN_NOT_ECT};
use crate::qp::timers::Timer;
use crate::qp::{Ctx, Qp};
use crate::time::Instant;
use crate::tx::{ip_udp_len, write_ib, TxMeta};

/// CNPs a QP may owe at once (only reachable with `min_time_between_cnps` = 0).
const MAX_PENDING_CNPS: usize = 16;

/// A CNP the QP owes the sender of a CE-marked packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CnpOut {
    /// The sender of the marked packet.
    pub dst: Ipv6Addr,
    /// Our address the marked packet was sent to.
    pub src: Ipv6Addr,
    /// The QP number of the sender of the marked packet.
    pub dest_qp: u32,
    /// Flow label of the QP's path (0 for UD).
    pub flow_label: u32,
}

/// Congestion control state of one QP.
#[derive(Debug, Clone, Default)]
pub(crate) struct QpCc {
    /// Per-QP override of `DcqcnConfig::enabled`.
    enabled: Option<bool>,
    /// Reaction point: created at the maximum rate when first needed.
    rp: Option<Rp>,
    /// Notification point: when the last CNP was generated.
    np: Np,
    /// CNPs owed, oldest first; they go before any other packet of the QP.
    cnps: VecDeque<CnpOut>,
    /// The QP has paced packets to send and waits for its pacer (its timer table's
    /// `Pacer` entry then holds the pacer's wakeup).
    blocked: bool,
}

impl QpCc {
    fn is_enabled(&self, cfg: &DcqcnConfig) -> bool {
        self.enabled.unwrap_or(cfg.enabled)
    }

    /// The reaction point, created at the configuration's maximum rate.
    fn rp(&mut self, cfg: &DcqcnConfig) -> &mut Rp {
        self.rp.get_or_insert_with(|| Rp::new(cfg))
    }

    /// Forgets the transport state (QP reset, configuration change), keeps the override.
    pub(super) fn clear(&mut self) {
        self.rp = None;
        self.np = Np::default();
        self.cnps.clear();
        self.blocked = false;
    }

    /// When `poll_timeout` should wake the caller for this QP's pacer.
    fn wakeup(&self, cfg: &DcqcnConfig) -> Option<Instant> {
        if self.blocked {
            self.rp.as_ref().map(|rp| rp.wakeup(cfg))
        } else {
            None
        }
    }

    /// A CE-marked packet arrived: owe `out` if there is room and the notification
    /// point's interval allows a CNP. Returns whether one was queued.
    fn on_marked(&mut self, cfg: &DcqcnConfig, now: Instant, out: CnpOut) -> bool {
        if self.cnps.len() >= MAX_PENDING_CNPS || !self.np.on_marked(cfg, now) {
            return false;
        }
        self.cnps.push_back(out);
        true
    }
}

impl Qp {
    /// Whether this QP runs congestion control under `cfg`.
    pub(crate) fn cc_enabled(&self, cfg: &DcqcnConfig) -> bool {
        self.cc.is_enabled(cfg)
    }

    /// Turns congestion control on or off for this QP (`None`: follow the
    /// configuration); its rate state starts over.
    pub(crate) fn set_cc_enabled(&mut self, enabled: Option<bool>) {
        self.cc.enabled = enabled;
        self.reset_cc();
    }

    /// The reaction point as of `now`, computed on a copy (`None` without congestion
    /// control).
    pub(crate) fn rate(&self, cfg: &DcqcnConfig, now: Instant) -> Option<DcqcnState> {
        if !self.cc.is_enabled(cfg) {
            return None;
        }
        let mut rp = self.cc.rp.clone().unwrap_or_else(|| Rp::new(cfg));
        rp.advance(cfg, now);
        Some(rp.state())
    }

    /// Notification point: a CE-marked packet from `out.dst` arrived at `now`; owe it a
    /// CNP (with congestion control on).
    pub(crate) fn on_ce_marked(&mut self, cfg: &DcqcnConfig, now: Instant, out: CnpOut) {
        if self.cc.is_enabled(cfg) {
            self.cc.on_marked(cfg, now, out);
        }
    }

    /// Writes the QP's next packet into `buf` (IB part after the IP/UDP headers):
    /// responder packets before requests, and with congestion control CNPs first, paced
    /// packets only when the pacer allows.
    pub(crate) fn transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        gids: &[Ipv6Addr],
        split: bool,
        dcqcn: &DcqcnConfig,
        buf: &mut [u8],
    ) -> Option<TxMeta> {
        if !self.cc.is_enabled(dcqcn) {
            return self
                .responder_tx(ctx, gids, buf, true)
                .or_else(|| self.requester_tx(ctx, gids, split, buf));
        }
        // Congestion control: CNPs first and never paced, then responder packets (READ
        // responses only when the pacer allows), then requests (only when it allows).
        let now = ctx.now;
        if let Some(m) = self.cnp_tx(ctx, dcqcn, buf) {
            return Some(m);
        }
        let rp = self.cc.rp(dcqcn);
        rp.advance(dcqcn, now);
        let ready = rp.ready(now);
        let mut sent = self.responder_tx(ctx, gids, buf, ready);
        if sent.is_none() && ready {
            sent = self.requester_tx(ctx, gids, split, buf);
        }
        if let Some(m) = &mut sent {
            m.ecn = Some(dcqcn.ecn);
            if m.paced {
                self.cc
                    .rp(dcqcn)
                    .on_sent(dcqcn, now, ip_udp_len(&m.dst) + m.ib_len);
            }
        }
        let ready = self.cc.rp(dcqcn).ready(now);
        self.cc.blocked = !ready && self.has_paced_work();
        self.sync_pacer_timer(dcqcn);
        sent
    }

    /// Whether paced work waits for the pacer: the QP may send later without any event.
    pub(crate) fn waits_for_pacer(&self) -> bool {
        self.cc.blocked
    }

    /// A CNP for this QP arrived at `now`: the reaction point cuts the rate.
    pub(crate) fn on_cnp(&mut self, dcqcn: &DcqcnConfig, now: Instant) {
        self.cc.rp(dcqcn).on_cnp(dcqcn, now);
        self.sync_pacer_timer(dcqcn);
    }

    /// Forgets the congestion control state (configuration change, per-QP switch),
    /// keeping the per-QP override.
    pub(crate) fn reset_cc(&mut self) {
        self.cc.clear();
        self.timers.stop(Timer::Pacer);
    }

    /// The pacer's timer entry follows the reaction point: armed at its wakeup while
    /// paced work waits for it.
    fn sync_pacer_timer(&mut self, dcqcn: &DcqcnConfig) {
        let wakeup = self.cc.wakeup(dcqcn);
        self.timers.set(Timer::Pacer, wakeup);
    }

    /// Paced work is waiting: a request to send (or resend) or a READ response.
    fn has_paced_work(&self) -> bool {
        self.req.has_unsent(self.sq.len()) || self.resp.read_response_waiting()
    }

    /// Writes the next CNP this QP owes (IB part after the IP/UDP headers).
    fn cnp_tx(&mut self, ctx: &mut Ctx<'_>, cfg: &DcqcnConfig, buf: &mut [u8]) -> Option<TxMeta> {
        let c = *self.cc.cnps.front()?;
        let hl = ip_udp_len(&c.dst);
        let ext = ExtRepr {
            cnp: Some(CnpRepr::default()),
            ..Default::default()
        };
        let ib_len = write_ib(buf.get_mut(hl..)?, cnp::bth(c.dest_qp), ext, 0, |_| {
            Ok::<(), ()>(())
        })
        .ok()??;
        self.cc.cnps.pop_front();
        ctx.counters.np_cnp_sent += 1;
        Some(TxMeta {
            dst: c.dst,
            src: c.src,
            traffic_class: cfg.cnp_dscp << 2,
            flow_label: c.flow_label,
            sport: self.sport,
            ib_len,
            ecn: Some(ECN_NOT_ECT),
            paced: false,
            silences: 0,
            payload_crc: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_cnps_are_bounded() {
        let cfg = DcqcnConfig {
            min_time_between_cnps: 0,
            ..DcqcnConfig::default()
        };
        let out = CnpOut {
            dst: Ipv6Addr::LOCALHOST,
            src: Ipv6Addr::LOCALHOST,
            dest_qp: 0x12,
            flow_label: 0,
        };
        let mut cc = QpCc::default();
        for _ in 0..MAX_PENDING_CNPS {
            assert!(cc.on_marked(&cfg, Instant::ZERO, out));
        }
        assert!(!cc.on_marked(&cfg, Instant::ZERO, out), "bounded");
        assert_eq!(cc.cnps.len(), MAX_PENDING_CNPS);
    }
}

//! The QP's side of DCQCN: which packet goes next under congestion control, the CNPs
//! the QP owes, and the pacer's entry in the timer table.
//!
//! The rate computation itself is [`crate::dcqcn`]: pure math on passed-in time. This
//! file is where the QP calls into it.

use core::net::Ipv6Addr;

use ferroce_wire::{cnp, CnpRepr, ExtRepr};

use crate::dcqcn::{DcqcnConfig, ECN_NOT_ECT};
use crate::qp::timers::Timer;
use crate::qp::{Ctx, Qp};
use crate::time::Instant;
use crate::tx::{ip_udp_len, write_ib, TxMeta};

impl Qp {
    /// Writes the QP's next packet into `buf` (IB part after the IP/UDP headers):
    /// responder packets before requests, and with congestion control CNPs first, paced
    /// packets only when the pacer allows.
    pub(crate) fn transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        gids: &[Ipv6Addr],
        dcqcn: &DcqcnConfig,
        buf: &mut [u8],
    ) -> Option<TxMeta> {
        if !self.cc.is_enabled(dcqcn) {
            return self
                .responder_tx(ctx, gids, buf, true)
                .or_else(|| self.requester_tx(ctx, gids, buf));
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
            sent = self.requester_tx(ctx, gids, buf);
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
        let c = self.cc.np.next_cnp()?;
        let hl = ip_udp_len(&c.dst);
        let ext = ExtRepr {
            cnp: Some(CnpRepr::default()),
            ..Default::default()
        };
        let ib_len = write_ib(buf.get_mut(hl..)?, cnp::bth(c.dest_qp), ext, 0, |_| {
            Ok::<(), ()>(())
        })
        .ok()??;
        self.cc.np.cnp_sent();
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
        })
    }
}

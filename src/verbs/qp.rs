//! Queue pairs.

use std::net::Ipv6Addr;

use ferroce_transport::{
    Access, AddressVector, Mtu, QpAttr, QpAttrMask, QpState, QpType, RecvWr, SendWr,
};

use crate::net::gid::addr_of;

use super::pd::RESOLVE_TIMEOUT;
use super::{Context, Error};

/// A queue pair.
#[derive(Debug)]
pub struct QueuePair {
    ctx: Context,
    qpn: u32,
    qp_type: QpType,
}

/// Everything needed to connect an RC or UC QP, as ibv_*_pingpong exchange it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcPath {
    /// The peer's GID.
    pub dest_gid: Ipv6Addr,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// The peer's first PSN (our receive PSN).
    pub rq_psn: u32,
    /// Our first PSN.
    pub sq_psn: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// Index of the local GID to send from.
    pub sgid_index: u8,
    /// Traffic class (DSCP and ECN bits) of the packets.
    pub traffic_class: u8,
    /// Remote access rights the QP grants.
    pub access: Access,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries before a retry-exceeded error.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP asks peers to wait.
    pub min_rnr_timer: u8,
    /// READs and atomics this QP may have outstanding.
    pub max_rd_atomic: u8,
    /// READs and atomics a peer may have outstanding at this QP.
    pub max_dest_rd_atomic: u8,
}

impl RcPath {
    /// The path with ibv_rc_pingpong's defaults for everything else.
    pub fn new(dest_gid: Ipv6Addr, dest_qpn: u32, rq_psn: u32, sq_psn: u32) -> RcPath {
        RcPath {
            dest_gid,
            dest_qpn,
            rq_psn,
            sq_psn,
            mtu: Mtu::Mtu1024,
            sgid_index: 0,
            traffic_class: 0,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

impl QueuePair {
    pub(crate) fn new(ctx: Context, qpn: u32, qp_type: QpType) -> Self {
        QueuePair { ctx, qpn, qp_type }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The transport service.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// ibv_modify_qp. A path (AV) given in an RTR transition is resolved to a MAC address
    /// first, so a missing peer is an error here rather than silent loss later.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        if mask.contains(QpAttrMask::AV) {
            self.ctx
                .shared()
                .resolve(addr_of(attr.av.dest_gid), RESOLVE_TIMEOUT)?;
        }
        // The transport's clock, as the driver passes it to handle_packet.
        let now = self.ctx.shared().now();
        let mut ep = self.ctx.shared().endpoint();
        if mask.contains(QpAttrMask::STATE)
            && matches!(attr.qp_state, QpState::Err | QpState::Reset)
        {
            // The last message's ACK may still wait to leave with the next post (poll
            // mode): it goes before the QP stops sending, as from a NIC, which ACKs before
            // the receiver sees the completion. A program that moves its QP to ERR right
            // after its last receive (rdma_disconnect) left its peer retrying into
            // RETRY_EXC_ERR.
            self.ctx.shared().send_pending(&mut ep);
        }
        ep.modify_qp(now, self.qpn, attr, mask)?;
        self.ctx.shared().kick(ep);
        Ok(())
    }

    /// The QP's current attributes.
    pub fn query(&self) -> Result<QpAttr, Error> {
        Ok(self.ctx.shared().endpoint().query_qp(self.qpn)?.0)
    }

    /// The current state.
    pub fn state(&self) -> Result<QpState, Error> {
        Ok(self.ctx.shared().endpoint().qp_state(self.qpn)?)
    }

    /// RESET → INIT: receives may be posted from here on. `qkey` is used by UD QPs only.
    pub fn init(&self, access: Access, qkey: u32) -> Result<(), Error> {
        let mut a = self.query()?;
        a.qp_state = QpState::Init;
        a.pkey_index = 0;
        a.port_num = 1;
        let mut mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
        if self.qp_type == QpType::Ud {
            a.qkey = qkey;
            mask |= QpAttrMask::QKEY;
        } else {
            a.qp_access_flags = access;
            mask |= QpAttrMask::ACCESS_FLAGS;
        }
        self.modify(&a, mask)
    }

    /// (RESET →) INIT → RTR → RTS for an RC or UC QP, with the given path.
    pub fn connect(&self, p: &RcPath) -> Result<(), Error> {
        if self.state()? == QpState::Reset {
            self.init(p.access, 0)?;
        }
        let mut a = self.query()?;
        a.qp_state = QpState::Rtr;
        a.path_mtu = p.mtu;
        a.dest_qp_num = p.dest_qpn;
        a.rq_psn = p.rq_psn;
        a.av = AddressVector {
            sgid_index: p.sgid_index,
            traffic_class: p.traffic_class,
            ..AddressVector::new(p.dest_gid)
        };
        let mut mask = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN;
        if self.qp_type == QpType::Rc {
            a.max_dest_rd_atomic = p.max_dest_rd_atomic;
            a.min_rnr_timer = p.min_rnr_timer;
            mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
        }
        self.modify(&a, mask)?;

        a.qp_state = QpState::Rts;
        a.sq_psn = p.sq_psn;
        let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
        if self.qp_type == QpType::Rc {
            a.timeout = p.timeout;
            a.retry_cnt = p.retry_cnt;
            a.rnr_retry = p.rnr_retry;
            a.max_rd_atomic = p.max_rd_atomic;
            mask |= QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC;
        }
        self.modify(&a, mask)
    }

    /// (RESET →) INIT → RTR → RTS for a UD QP with `qkey`.
    pub fn ready_ud(&self, qkey: u32, sq_psn: u32) -> Result<(), Error> {
        if self.state()? == QpState::Reset {
            self.init(Access::empty(), qkey)?;
        }
        let mut a = self.query()?;
        a.qp_state = QpState::Rtr;
        self.modify(&a, QpAttrMask::STATE)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = sq_psn;
        self.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
    }

    /// Posts a send work request and wakes the driver.
    pub fn post_send(&self, wr: &SendWr) -> Result<(), Error> {
        if let Some(ud) = &wr.ud {
            self.ctx
                .shared()
                .resolve(addr_of(ud.av.dest_gid), RESOLVE_TIMEOUT)?;
        }
        // The transport's clock, as the driver passes it to handle_packet.
        let now = self.ctx.shared().now();
        let mut ep = self.ctx.shared().endpoint();
        ep.post_send(now, self.qpn, wr)?;
        let behind_others = ep.sq_outstanding(self.qpn).is_ok_and(|n| n > 1);
        let bytes = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        self.ctx.shared().posted_send();
        self.ctx.shared().kick_post(ep, behind_others, bytes);
        Ok(())
    }

    /// ibv_attach_mcast: this UD QP receives, from now on, the SENDs to multicast group
    /// `gid` (an IP multicast address as a GID; IPv4 in IPv4-mapped form) and the
    /// multicast QP ([`ferroce_transport::MULTICAST_QPN`]), besides those sent to it. The
    /// interface takes in the group's frames while some QP here is attached.
    pub fn attach_mcast(&self, gid: Ipv6Addr) -> Result<(), Error> {
        Ok(self.ctx.shared().set_mcast(self.qpn, gid, true)?)
    }

    /// ibv_detach_mcast: undoes [`QueuePair::attach_mcast`]. Destroying the QP detaches
    /// it from every group too.
    pub fn detach_mcast(&self, gid: Ipv6Addr) -> Result<(), Error> {
        Ok(self.ctx.shared().set_mcast(self.qpn, gid, false)?)
    }

    /// Posts a receive work request.
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), Error> {
        // The transport's clock, as the driver passes it to handle_packet.
        let now = self.ctx.shared().now();
        let mut ep = self.ctx.shared().endpoint();
        ep.post_recv(now, self.qpn, wr)?;
        // A new receive WQE can end an RNR wait: the peer's retry then finds it.
        self.ctx.shared().kick_recv(ep);
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let shared = self.ctx.shared();
        let mut ep = shared.endpoint();
        // The last message's ACK may still wait to leave with the next post.
        shared.send_pending(&mut ep);
        let _ = shared.destroy_qp(&mut ep, self.qpn);
    }
}

//! The verbs objects of a run, laid out as perftest lays them out: one memory region of
//! 2 × QPs × buffer bytes, QP i sending from buffer i and offering buffer QPs + i to the
//! peer's RDMA operations (the `vaddr` of its handshake), where "buffer" is the larger of
//! the message size and the cycle buffer (page size). UD receive buffers leave room for
//! the 40-byte GRH in front of the data, one cache line into the buffer.

use std::net::Ipv6Addr;

use ferroce_transport::{Access, Mtu, QpCap, QpType, RecvWr, Sge};

use super::exchange::KeyMsg;
use super::params::{AtomicOp, Conn, Params, Verb, DEF_QKEY};
use ferroce::verbs::{
    wr, AddressHandle, AddressVector, CompletionQueue, Context, Error, MemoryRegion,
    ProtectionDomain, QueuePair, RcPath, SendWr,
};

/// Transport retries of the run's RC QPs (the most IB allows, as perftest sets).
pub(super) const RETRY_CNT: u8 = 7;

/// Bytes of GRH space UD receives need in front of the data.
pub const GRH: usize = 40;
/// What perftest adds with each fetch-and-add.
const ATOMIC_ADD: u64 = 1;

/// PD, memory, CQs and QPs of a run.
#[derive(Debug)]
pub struct Resources {
    pub qps: Vec<QueuePair>,
    /// Completions of sends (and of everything on RDMA tests).
    pub send_cq: CompletionQueue,
    /// Completions of receives (SEND tests).
    pub recv_cq: Option<CompletionQueue>,
    pub mr: MemoryRegion,
    /// UD address handles, one per QP, once connected.
    pub ahs: Vec<AddressHandle>,
    /// Bytes of each buffer.
    pub buff: usize,
    pub cache_line: usize,
    pub gid_index: usize,
    pub gid: Ipv6Addr,
    /// First PSN of each QP.
    psns: Vec<u32>,
    /// Declared last: dropped after everything that uses it.
    pub pd: ProtectionDomain,
}

impl Resources {
    /// Creates everything for `p` with a cycle buffer and cache line as agreed with the peer.
    pub fn create(
        ctx: &Context,
        p: &Params,
        gid_index: Option<usize>,
        cycle: usize,
        cache_line: usize,
    ) -> Result<Resources, Error> {
        let (gid_index, gid) = ctx.source_gid(gid_index)?;
        let q = p.num_qps;
        let msg = usize::try_from(p.max_size()).unwrap_or(usize::MAX);
        let buff = msg.max(cycle);
        let extra = if p.conn == Conn::Ud { cache_line } else { 0 };
        let pd = ctx.alloc_pd()?;
        let mr = pd.reg_mr(
            2 * q * buff + extra,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )?;
        let send_cq = ctx.create_cq(p.tx_depth * q + 1)?;
        let recv_cq = if p.test.verb == Verb::Send {
            Some(ctx.create_cq(p.rx_depth * q + 1)?)
        } else {
            None
        };
        let qp_type = match p.conn {
            Conn::Rc => QpType::Rc,
            Conn::Uc => QpType::Uc,
            Conn::Ud => QpType::Ud,
        };
        let cap = QpCap {
            max_send_wr: p.tx_depth as u32,
            max_recv_wr: p.rx_depth as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let base = ferroce::verbs::random_psn()?;
        let psns = (0..q)
            .map(|i| base.wrapping_add(i as u32 * 0x1_0001) & 0xff_ffff)
            .collect();
        let mut qps = Vec::with_capacity(q);
        for _ in 0..q {
            let qp = pd.create_qp(&send_cq, recv_cq.as_ref().unwrap_or(&send_cq), qp_type, cap)?;
            qp.init(qp_access(p.test.verb), DEF_QKEY)?;
            qps.push(qp);
        }
        Ok(Resources {
            qps,
            send_cq,
            recv_cq,
            mr,
            ahs: Vec::new(),
            buff,
            cache_line,
            gid_index,
            gid,
            psns,
            pd,
        })
    }

    /// What this side tells the peer about QP `i`.
    pub fn key(&self, i: usize, out_reads: u32) -> KeyMsg {
        KeyMsg {
            lid: 0,
            out_reads,
            qpn: self.qps[i].qpn(),
            psn: self.psns[i],
            rkey: self.mr.rkey(),
            vaddr: self.mr.addr() + self.remote_offset(i) as u64,
            gid: self.gid,
            srqn: 0,
        }
    }

    /// Offset of QP `i`'s local (source) buffer.
    pub fn local_offset(&self, i: usize) -> usize {
        i * self.buff
    }

    /// Offset of QP `i`'s buffer for the peer's operations and for receives.
    pub fn remote_offset(&self, i: usize) -> usize {
        (self.qps.len() + i) * self.buff
    }

    /// Brings every QP to RTS (RC, UC) or RTR/RTS with an address handle (UD), as
    /// perftest's `ctx_connect`.
    pub fn connect(
        &mut self,
        p: &Params,
        mine: &[KeyMsg],
        theirs: &[KeyMsg],
        mtu: Mtu,
    ) -> Result<(), Error> {
        for (i, qp) in self.qps.iter().enumerate() {
            let (m, t) = (&mine[i], &theirs[i]);
            if p.conn == Conn::Ud {
                qp.ready_ud(DEF_QKEY, m.psn)?;
                self.ahs.push(self.pd.create_ah(AddressVector {
                    sgid_index: self.gid_index as u8,
                    hop_limit: 1,
                    traffic_class: p.traffic_class,
                    ..AddressVector::new(t.gid)
                })?);
                continue;
            }
            let mut path = RcPath::new(t.gid, t.qpn, t.psn, m.psn);
            path.mtu = mtu;
            path.sgid_index = self.gid_index as u8;
            path.traffic_class = p.traffic_class;
            path.access = qp_access(p.test.verb);
            path.timeout = p.qp_timeout;
            path.retry_cnt = RETRY_CNT;
            path.rnr_retry = 7;
            path.min_rnr_timer = 12;
            path.max_dest_rd_atomic = p.out_reads as u8;
            path.max_rd_atomic = t.out_reads.clamp(1, p.out_reads.max(1)) as u8;
            qp.connect(&path)?;
        }
        Ok(())
    }

    /// The work request QP `i` posts for one message of `size` bytes.
    pub fn send_wr(&self, p: &Params, i: usize, size: u64, theirs: &KeyMsg) -> SendWr {
        let sge = self.mr.sge(self.local_offset(i), size as usize);
        let id = i as u64;
        match p.test.verb {
            Verb::Send => match self.ahs.get(i) {
                Some(ah) => wr::ud_send(id, sge, ah.dest(theirs.qpn, DEF_QKEY)),
                None => wr::send(id, sge),
            },
            Verb::Write => wr::rdma_write(id, sge, theirs.vaddr, theirs.rkey),
            Verb::Read => wr::rdma_read(id, sge, theirs.vaddr, theirs.rkey),
            Verb::Atomic => {
                let sge = self.mr.sge(self.local_offset(i), 8);
                match p.atomic {
                    AtomicOp::FetchAndAdd => {
                        wr::fetch_add(id, sge, theirs.vaddr, theirs.rkey, ATOMIC_ADD)
                    }
                    AtomicOp::CmpAndSwap => {
                        wr::compare_swap(id, sge, theirs.vaddr, theirs.rkey, 0, 0)
                    }
                }
            }
        }
    }

    /// The receive work request of QP `i` for messages of `size` bytes.
    pub fn recv_wr(&self, p: &Params, i: usize, size: u64) -> RecvWr {
        let (off, len) = if p.conn == Conn::Ud {
            (
                self.remote_offset(i) + self.cache_line - GRH,
                size as usize + GRH,
            )
        } else {
            (self.remote_offset(i), size as usize)
        };
        RecvWr {
            wr_id: i as u64,
            sg_list: vec![Sge {
                addr: self.mr.addr() + off as u64,
                length: len as u32,
                lkey: self.mr.lkey(),
            }],
        }
    }

    /// Posts `n` receives of `size` bytes on every QP.
    pub fn post_recvs(&self, p: &Params, n: usize, size: u64) -> Result<(), Error> {
        for (i, qp) in self.qps.iter().enumerate() {
            let w = self.recv_wr(p, i, size);
            for _ in 0..n {
                qp.post_recv(&w)?;
            }
        }
        Ok(())
    }
}

/// The remote rights perftest gives its QPs.
fn qp_access(verb: Verb) -> Access {
    match verb {
        Verb::Atomic => Access::REMOTE_ATOMIC,
        Verb::Read => Access::REMOTE_READ,
        Verb::Write => Access::REMOTE_WRITE,
        Verb::Send => Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    }
}

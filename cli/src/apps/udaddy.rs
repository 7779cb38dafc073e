//! `ferroce udaddy`: rdma-core's `udaddy` (librdmacm/examples/udaddy.c), one peer, over
//! ferroce's connection manager: the client learns the server's UD QP and Q_Key with a
//! SIDR REQ on QP1, as rdma_cm does for its UDP port space, so either side may be the real
//! `udaddy` on rxe or a NIC.
//!
//! udaddy's exchange: the client sends COUNT datagrams of SIZE bytes, each a SEND with
//! its own QP number as immediate data; the server takes them in, answers the QP the first
//! one names (from the address it came from) with as many, and the client takes those in.

use std::io::Write;
use std::time::{Duration, Instant};

use ferroce::cm::ConnectionManager;
use ferroce::verbs::{
    wr, Access, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCap, QpType, QueuePair,
    RecvWr, SendWr, UdDest, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// rdma_cm's Q_Key for its UDP port space (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// The GRH area in front of every UD receive.
const GRH: usize = 40;

pub use super::cmatose::Options;

/// Why the run failed (one line for the user).
pub type Failure = Box<dyn std::error::Error>;

struct Node {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn node(ctx: &Context, o: &Options) -> Result<Node, Failure> {
    let mtu = ctx.attr().active_mtu.bytes() as usize;
    if o.size > mtu {
        return Err(format!(
            "message size {} is larger than the active MTU {mtu}",
            o.size
        )
        .into());
    }
    let pd = ctx.alloc_pd()?;
    let depth = o.count.max(1);
    let cq = ctx.create_cq(2 * depth)?;
    let cap = QpCap {
        max_send_wr: depth as u32,
        max_recv_wr: depth as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let qp = pd.create_qp(&cq, &cq, QpType::Ud, cap)?;
    qp.ready_ud(RDMA_UDP_QKEY, 0)?;
    let mr = pd.reg_mr(GRH + o.size.max(1), Access::LOCAL_WRITE)?;
    for i in 0..o.count {
        qp.post_recv(&RecvWr {
            wr_id: i as u64,
            sg_list: vec![mr.sge(0, GRH + o.size)],
        })?;
    }
    Ok(Node { pd, cq, qp, mr })
}

impl Node {
    /// Sends `count` datagrams to `dest`, each carrying this QP's number as immediate.
    fn send_all(&self, o: &Options, dest: UdDest) -> Result<(), Failure> {
        for i in 0..o.count {
            let w = SendWr {
                opcode: WrOpcode::SendWithImm,
                imm_data: self.qp.qpn(),
                ..wr::ud_send(i as u64, self.mr.sge(GRH, o.size), dest)
            };
            self.qp.post_send(&w)?;
        }
        Ok(())
    }

    /// Waits for `n` successful completions of the kind `recv` says; returns the first.
    fn wait(
        &self,
        recv: bool,
        n: usize,
        timeout: Duration,
    ) -> Result<Option<WorkCompletion>, Failure> {
        let deadline = Instant::now() + timeout;
        let mut first = None;
        let mut done = 0;
        while done < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let wc = self
                .cq
                .wait_one(left)
                .ok_or("timed out waiting for the peer's datagrams")?;
            if wc.status != WcStatus::Success {
                return Err(format!("a work request failed: {:?}", wc.status).into());
            }
            if (wc.opcode == WcOpcode::Recv) == recv {
                done += 1;
                first.get_or_insert(wc);
            }
        }
        Ok(first)
    }
}

/// Runs udaddy's exchange on `cm`'s device, printing udaddy's progress lines to `out`.
pub fn run(
    ctx: &Context,
    cm: &ConnectionManager,
    o: &Options,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match o.server {
        None => {
            writeln!(out, "udaddy: starting server")?;
            cm.listen_ud(o.port)?;
            let req = cm
                .get_ud_request(o.port, o.timeout)
                .ok_or("timed out waiting for a request")?;
            let n = node(ctx, o)?;
            cm.accept_ud(&req, n.qp.qpn(), RDMA_UDP_QKEY)?;
            if o.count > 0 {
                writeln!(out, "receiving data transfers")?;
                let first = n.wait(true, o.count, o.timeout)?.ok_or("no datagram")?;
                let from = first.src_gid.ok_or("a datagram without its source")?;
                let ah = n.pd.create_ah(cm.address_vector(from)?)?;
                writeln!(out, "sending replies")?;
                n.send_all(o, ah.dest(first.imm_data, RDMA_UDP_QKEY))?;
                n.wait(false, o.count, o.timeout)?;
                writeln!(out, "data transfers complete")?;
            }
        }
        Some(addr) => {
            writeln!(out, "udaddy: starting client")?;
            writeln!(out, "udaddy: connecting")?;
            let n = node(ctx, o)?;
            let svc = cm.resolve_ud(addr, o.port, o.timeout)?;
            if o.count > 0 {
                let ah = n.pd.create_ah(cm.address_vector(svc.remote)?)?;
                writeln!(out, "initiating data transfers")?;
                n.send_all(o, ah.dest(svc.qpn, svc.qkey))?;
                writeln!(out, "receiving data transfers")?;
                n.wait(true, o.count, o.timeout)?;
                writeln!(out, "data transfers complete")?;
            }
        }
    }
    Ok(())
}

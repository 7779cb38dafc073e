//! `ferroce ucmatose`: rdma-core's `ucmatose` (librdmacm/examples/cmatose.c), one
//! connection, over ferroce's connection manager: the connection is made on QP1 with IB CM
//! MADs as rdma_cm makes it, so either side may be the real `ucmatose` on rxe or a NIC.
//!
//! The exchange is ucmatose's: the client posts its receives and connects; the server posts
//! its receives, accepts, sends `count` messages of `size` bytes, then waits for as many
//! back; the client, having received them, sends its replies; the server disconnects (DREQ)
//! and the client answers (DREP). The messages themselves are not checked (ucmatose sends
//! whatever its buffer holds).

use std::io::Write;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferroce::cm::{CmFailure, ConnectionManager};
use ferroce::verbs::{
    Access, CompletionQueue, Context, QpCap, QpType, QueuePair, RecvWr, WcOpcode, WcStatus,
};

/// What to run (`ferroce udaddy` takes the same).
#[derive(Debug, Clone)]
pub struct Options {
    /// The server to connect to (or resolve); `None`: be the server.
    pub server: Option<IpAddr>,
    /// rdma_cm port (ucmatose's default 7471, udaddy's 7174).
    pub port: u16,
    /// Messages each way.
    pub count: usize,
    /// Bytes per message.
    pub size: usize,
    /// How long to wait for the peer at each step.
    pub timeout: Duration,
}

/// Why the run failed (one line for the user).
pub type Failure = Box<dyn std::error::Error>;

struct Node {
    /// Completions taken but not yet waited for: [sends, receives].
    seen: std::cell::Cell<[usize; 2]>,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: ferroce::verbs::MemoryRegion,
    _pd: ferroce::verbs::ProtectionDomain,
}

fn node(ctx: &Context, o: &Options) -> Result<Node, Failure> {
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
    let qp = pd.create_qp_with(&cq, &cq, QpType::Rc, cap, None, true)?;
    let mr = pd.reg_mr(o.size.max(1), Access::LOCAL_WRITE)?;
    // As rdma_create_qp leaves it: INIT, so that receives can go in before the connection.
    qp.init(Access::LOCAL_WRITE, 0)?;
    for i in 0..o.count {
        qp.post_recv(&RecvWr {
            wr_id: i as u64,
            sg_list: vec![mr.sge(0, o.size)],
        })?;
    }
    Ok(Node {
        seen: std::cell::Cell::new([0, 0]),
        cq,
        qp,
        mr,
        _pd: pd,
    })
}

impl Node {
    fn post_sends(&self, o: &Options) -> Result<(), Failure> {
        for i in 0..o.count {
            self.qp
                .post_send(&ferroce::verbs::wr::send(i as u64, self.mr.sge(0, o.size)))?;
        }
        Ok(())
    }

    /// Waits for `n` successful completions of the given kind (receives or sends);
    /// completions of the other kind seen meanwhile count toward the next wait.
    fn wait(&self, recv: bool, n: usize, timeout: Duration) -> Result<(), Failure> {
        let deadline = Instant::now() + timeout;
        let mut seen = self.seen.get();
        let k = usize::from(recv);
        while seen[k] < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let wc = self
                .cq
                .wait_one(left)
                .ok_or("timed out waiting for the peer's messages")?;
            if wc.status != WcStatus::Success {
                return Err(format!("a work request failed: {:?}", wc.status).into());
            }
            seen[usize::from(wc.opcode == WcOpcode::Recv)] += 1;
        }
        seen[k] -= n;
        self.seen.set(seen);
        Ok(())
    }
}

/// Runs ucmatose's exchange on `cm`'s device, printing ucmatose's progress lines to `out`.
pub fn run(
    ctx: &Context,
    cm: &ConnectionManager,
    o: &Options,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    match o.server {
        None => server(ctx, cm, o, out),
        Some(addr) => client(ctx, cm, addr, o, out),
    }
}

fn server(
    ctx: &Context,
    cm: &ConnectionManager,
    o: &Options,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    writeln!(out, "cmatose: starting server")?;
    cm.listen(o.port)?;
    let req = cm
        .get_request(o.port, o.timeout)
        .ok_or("timed out waiting for a connection request")?;
    let n = node(ctx, o)?;
    let conn = cm.accept_rc(&req, &n.qp, &[], o.timeout)?;
    if o.count > 0 {
        writeln!(out, "initiating data transfers")?;
        n.post_sends(o)?;
        writeln!(out, "completing sends")?;
        n.wait(false, o.count, o.timeout)?;
        writeln!(out, "receiving data transfers")?;
        n.wait(true, o.count, o.timeout)?;
        writeln!(out, "data transfers complete")?;
    }
    writeln!(out, "cmatose: disconnecting")?;
    cm.disconnect(conn.id, o.timeout)?;
    writeln!(out, "disconnected")?;
    Ok(())
}

fn client(
    ctx: &Context,
    cm: &ConnectionManager,
    addr: IpAddr,
    o: &Options,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    writeln!(out, "cmatose: starting client")?;
    writeln!(out, "cmatose: connecting")?;
    let n = node(ctx, o)?;
    let conn = match cm.connect_rc(&n.qp, addr, o.port, &[], o.timeout) {
        Ok(c) => c,
        Err(e @ CmFailure::Rejected { .. }) => {
            return Err(format!("{e} (port {} at {addr})", o.port).into())
        }
        Err(e) => return Err(e.into()),
    };
    if o.count > 0 {
        writeln!(out, "receiving data transfers")?;
        n.wait(true, o.count, o.timeout)?;
        writeln!(out, "sending replies")?;
        n.post_sends(o)?;
        n.wait(false, o.count, o.timeout)?;
        writeln!(out, "data transfers complete")?;
    }
    // The server ends the connection; answer its DREQ.
    if !cm.wait_disconnect_request(conn.id, o.timeout) {
        return Err("timed out waiting for the server to disconnect".into());
    }
    cm.disconnect(conn.id, o.timeout)?;
    Ok(())
}

//! `ferroce rping`: rdma-core's `rping` (librdmacm/examples/rping.c) over ferroce's
//! connection manager, so either side may be the real `rping` on rxe or a NIC.
//!
//! rping's exchange, per ping: the client writes "rdma-ping-N: " and a rolling alphabet
//! into its start buffer and SENDs its address, R_Key and length (16 bytes, big-endian);
//! the server RDMA READs that buffer, SENDs a go-ahead, gets the address of the client's
//! second buffer the same way, RDMA WRITEs what it read there, and SENDs a go-ahead again.
//! The client (this one always, rping with `-V`) checks that the second buffer now equals
//! the first. After the last ping the client disconnects.

use std::io::Write;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferroce::cm::ConnectionManager;
use ferroce::verbs::{
    wr, Access, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCap, QpType, QueuePair,
    RecvWr, WcOpcode, WcStatus, WorkCompletion,
};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Client of this server address; `None`: be the server.
    pub server: Option<IpAddr>,
    /// rdma_cm port (rping's default 7174).
    pub port: u16,
    /// Pings (the client; 0: until stopped).
    pub count: usize,
    /// Bytes of each ping buffer.
    pub size: usize,
    /// Print each ping's data.
    pub verbose: bool,
    /// How long to wait for the peer at each step.
    pub timeout: Duration,
}

/// The smallest buffer rping takes: room for the message and a number.
pub const MIN_SIZE: usize = 26;
/// Bytes of rping's buffer advertisement: address, R_Key, length.
const INFO: usize = 16;

/// Why the run failed (one line for the user).
pub type Failure = Box<dyn std::error::Error>;

struct Node {
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    recv: MemoryRegion,
    send: MemoryRegion,
    /// The client's start buffer (read by the server), or the server's buffer.
    start: MemoryRegion,
    /// The client's second buffer (written by the server).
    rdma: MemoryRegion,
}

fn node(ctx: &Context, size: usize) -> Result<Node, Failure> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(32)?;
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, cap)?;
    let recv = pd.reg_mr(INFO, Access::LOCAL_WRITE)?;
    let send = pd.reg_mr(INFO, Access::empty())?;
    let start = pd.reg_mr(size, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let rdma = pd.reg_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    qp.init(
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        0,
    )?;
    let n = Node {
        _pd: pd,
        cq,
        qp,
        recv,
        send,
        start,
        rdma,
    };
    n.post_recv()?;
    Ok(n)
}

impl Node {
    fn post_recv(&self) -> Result<(), Failure> {
        self.qp.post_recv(&RecvWr {
            wr_id: 0,
            sg_list: vec![self.recv.sge(0, INFO)],
        })?;
        Ok(())
    }

    /// Sends a buffer advertisement (or, `None`, an all-zero go-ahead).
    fn send_info(&self, mr: Option<&MemoryRegion>) -> Result<(), Failure> {
        let mut b = [0u8; INFO];
        if let Some(mr) = mr {
            b[..8].copy_from_slice(&mr.addr().to_be_bytes());
            b[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
            b[12..].copy_from_slice(&(mr.len() as u32).to_be_bytes());
        }
        self.send.write(0, &b)?;
        self.qp.post_send(&wr::send(1, self.send.sge(0, INFO)))?;
        Ok(())
    }

    /// The next completion of kind `want`, others (successful) passed over; a failed one
    /// is an error. `Ok(None)` when `stop` says to give up first (checked between waits).
    fn wait(
        &self,
        want: WcOpcode,
        timeout: Duration,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<Option<WorkCompletion>, Failure> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(wc) = self.cq.wait_one(Duration::from_millis(100)) {
                if wc.status != WcStatus::Success {
                    return Err(format!("a work request failed: {:?}", wc.status).into());
                }
                if wc.opcode == want {
                    return Ok(Some(wc));
                }
                if wc.opcode == WcOpcode::Recv {
                    return Err("a message from the peer out of turn".into());
                }
                continue;
            }
            if stop() {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Err(format!("timed out waiting for {want:?}").into());
            }
        }
    }

    /// The peer's advertisement just received: (address, R_Key, length).
    fn take_info(&self, wc: &WorkCompletion) -> Result<(u64, u32, usize), Failure> {
        if wc.byte_len as usize != INFO {
            return Err(format!("received bogus data, size {}", wc.byte_len).into());
        }
        let mut b = [0u8; INFO];
        self.recv.read(0, &mut b)?;
        self.post_recv()?;
        let addr = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(b[12..].try_into().expect("4 bytes")) as usize;
        Ok((addr, rkey, len))
    }
}

/// rping's ping text: "rdma-ping-N: " then letters from `start` on, NUL-terminated.
pub fn ping_data(ping: usize, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size.saturating_sub(1));
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Runs rping's exchange on `cm`'s device, printing rping's lines to `out`.
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
    cm.listen(o.port)?;
    let req = cm
        .get_request(o.port, o.timeout)
        .ok_or("timed out waiting for a connection request")?;
    let n = node(ctx, o.size)?;
    let conn = cm.accept_rc(&req, &n.qp, &[], o.timeout)?;
    let mut gone = || cm.wait_disconnect_request(conn.id, Duration::ZERO);
    // Until the client disconnects: a ping per start-buffer advertisement.
    let forever = Duration::from_secs(u64::MAX / 4);
    while let Some(wc) = n.wait(WcOpcode::Recv, forever, &mut gone)? {
        let (addr, rkey, len) = n.take_info(&wc)?;
        if len > o.size {
            return Err(format!(
                "the client's buffer ({len} bytes) is larger than -S {}",
                o.size
            )
            .into());
        }
        n.qp.post_send(&wr::rdma_read(2, n.start.sge(0, len), addr, rkey))?;
        n.wait(WcOpcode::RdmaRead, o.timeout, &mut || false)?;
        let data = n.start.to_vec();
        if o.verbose {
            writeln!(out, "server ping data: {}", text(&data[..len]))?;
        }
        n.send_info(None)?;
        let wc = n
            .wait(WcOpcode::Recv, o.timeout, &mut || false)?
            .ok_or("no write advertisement")?;
        let (addr, rkey, wlen) = n.take_info(&wc)?;
        let echo = text(&data[..len]).len() + 1;
        if echo > wlen {
            return Err(format!("the client's second buffer ({wlen} bytes) is too small").into());
        }
        n.qp.post_send(&wr::rdma_write(3, n.start.sge(0, echo), addr, rkey))?;
        n.wait(WcOpcode::RdmaWrite, o.timeout, &mut || false)?;
        n.send_info(None)?;
    }
    writeln!(out, "server DISCONNECT EVENT...")?;
    cm.disconnect(conn.id, o.timeout)?;
    Ok(())
}

fn client(
    ctx: &Context,
    cm: &ConnectionManager,
    addr: IpAddr,
    o: &Options,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let n = node(ctx, o.size)?;
    let conn = cm.connect_rc(&n.qp, addr, o.port, &[], o.timeout)?;
    let mut start = 65u8;
    let mut ping = 0;
    while o.count == 0 || ping < o.count {
        let data = ping_data(ping, start, o.size);
        start = if start >= 122 { 65 } else { start + 1 };
        n.start.write(0, &data)?;
        n.rdma.write(0, &vec![0; o.size])?;
        n.send_info(Some(&n.start))?;
        n.wait(WcOpcode::Recv, o.timeout, &mut || false)?
            .ok_or("no go-ahead")
            .and_then(|wc| n.take_info(&wc).map_err(|_| "bogus go-ahead"))?;
        n.send_info(Some(&n.rdma))?;
        n.wait(WcOpcode::Recv, o.timeout, &mut || false)?
            .ok_or("no go-ahead")
            .and_then(|wc| n.take_info(&wc).map_err(|_| "bogus go-ahead"))?;
        let got = n.rdma.to_vec();
        if got != data {
            return Err(format!("data mismatch in ping {ping}").into());
        }
        if o.verbose {
            writeln!(out, "ping data: {}", text(&got))?;
        }
        ping += 1;
    }
    cm.disconnect(conn.id, o.timeout)?;
    writeln!(out, "client DISCONNECT EVENT...")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_is_rpings() {
        let d = ping_data(3, 65, 26);
        assert_eq!(&d, b"rdma-ping-3: ABCDEFGHIJKL\0");
        let d = ping_data(0, 121, 17);
        assert_eq!(&d, b"rdma-ping-0: yzA\0");
    }
}

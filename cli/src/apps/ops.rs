//! Every RC operation between two endpoints, with the data checked byte for byte: SEND,
//! SEND with immediate, RDMA WRITE, RDMA WRITE with immediate, RDMA READ, compare-and-swap
//! and fetch-and-add. The client drives; the server checks what arrives in its receive
//! queue. Both derive the expected bytes from a seed they exchange.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use ferroce_transport::{Access, Mtu, QpCap, QpType, RecvWr, WcOpcode, WcStatus, WorkCompletion};

use ferroce::verbs::{
    wr, CompletionQueue, Context, Error as VerbsError, MemoryRegion, QueuePair, RcPath,
};

/// Options of a run.
#[derive(Debug, Clone)]
pub struct OpsOptions {
    pub iters: usize,
    pub size: usize,
    pub mtu: Mtu,
    pub gid_index: Option<usize>,
    pub seed: u64,
    pub timeout: Duration,
}

impl Default for OpsOptions {
    fn default() -> Self {
        OpsOptions {
            iters: 20,
            size: 65536,
            mtu: Mtu::Mtu1024,
            gid_index: None,
            seed: 1,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Count and bytes per operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpsReport {
    pub rows: Vec<(&'static str, usize, u64)>,
    pub seconds: f64,
}

impl OpsReport {
    fn add(&mut self, op: &'static str, bytes: u64) {
        match self.rows.iter_mut().find(|r| r.0 == op) {
            Some(r) => {
                r.1 += 1;
                r.2 += bytes;
            }
            None => self.rows.push((op, 1, bytes)),
        }
    }

    /// Writes the table.
    pub fn print(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{:<40} {:>6} {:>12}  result",
            "operation", "count", "bytes"
        )?;
        for (op, n, b) in &self.rows {
            writeln!(out, "{op:<40} {n:>6} {b:>12}  verified")?;
        }
        writeln!(out, "all operations verified in {:.3} s", self.seconds)
    }
}

/// Why a run failed.
#[derive(Debug)]
pub enum OpsError {
    Verbs(VerbsError),
    Io(std::io::Error),
    Completion {
        op: &'static str,
        status: WcStatus,
    },
    Timeout(&'static str),
    Mismatch {
        op: &'static str,
        iter: usize,
        detail: String,
    },
    Protocol(String),
    /// Options out of range.
    Usage(String),
}

impl std::fmt::Display for OpsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpsError::Verbs(e) => write!(f, "{e}"),
            OpsError::Io(e) => write!(f, "{e}"),
            OpsError::Completion { op, status } => write!(f, "{op} completed with {status:?}"),
            OpsError::Timeout(op) => write!(f, "{op}: no completion in time; is the peer running?"),
            OpsError::Mismatch { op, iter, detail } => {
                write!(f, "{op} #{iter}: data mismatch: {detail}")
            }
            OpsError::Protocol(m) => write!(f, "peer: {m}"),
            OpsError::Usage(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for OpsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpsError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<VerbsError> for OpsError {
    fn from(e: VerbsError) -> Self {
        OpsError::Verbs(e)
    }
}
impl From<std::io::Error> for OpsError {
    fn from(e: std::io::Error) -> Self {
        OpsError::Io(e)
    }
}

/// Deterministic bytes for (seed, stream, iteration).
pub fn pattern(seed: u64, stream: u64, iter: usize, len: usize) -> Vec<u8> {
    let mut x = seed
        ^ (stream << 48)
        ^ (iter as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ 0x5851_f42d_4c95_7f2d;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const SEND: u64 = 1;
const WRITE: u64 = 2;
const WRITE2: u64 = 3;
const READ_SRC: u64 = 4;

/// Offset of iteration `iter`'s WRITE-with-immediate slot in the server's region. Each
/// iteration has its own, so the server can check one after its completion even when the
/// client has moved on (a shared target could already hold the next iteration's bytes).
fn write_imm_offset(size: usize, iter: usize) -> usize {
    (2 + iter) * size
}

/// Offset of the 8-byte atomic target in the server's region (8-byte aligned), after the
/// write target, the read source and `iters` WRITE-with-immediate slots.
fn atomic_offset(size: usize, iters: usize) -> usize {
    write_imm_offset(size, iters).next_multiple_of(8)
}

/// The most memory one side of `rc-ops` registers (the server's target region and
/// receive buffers): a peer's hello cannot make it allocate more.
pub const MAX_OPS_MEMORY: u64 = 4 << 30;
/// The largest message `rc-ops` sends (an IB message is at most 2^31 bytes).
pub const MAX_OPS_SIZE: usize = 1 << 30;

/// The bytes the server registers for `size` and `iters` (target region plus one
/// receive buffer per expected message), if both are in range; else what is wrong.
pub fn ops_memory(size: usize, iters: usize) -> Result<u64, String> {
    let max_iters = (ferroce::transport::MAX_WR / 3) as usize;
    if size > MAX_OPS_SIZE {
        return Err(format!("message size {size} exceeds {MAX_OPS_SIZE} bytes"));
    }
    if iters == 0 || iters > max_iters {
        return Err(format!("iterations {iters} not in 1..={max_iters}"));
    }
    let (size, iters) = (size as u64, iters as u64);
    let region = (2 + iters)
        .checked_mul(size)
        .and_then(|r| r.checked_next_multiple_of(8))
        .and_then(|r| r.checked_add(8));
    let recv = (3 * iters).checked_mul(size.max(1));
    match region.zip(recv).and_then(|(a, b)| a.checked_add(b)) {
        Some(n) if n <= MAX_OPS_MEMORY => Ok(n),
        _ => Err(format!(
            "{iters} iterations of {size} bytes need more than {} GiB",
            MAX_OPS_MEMORY >> 30
        )),
    }
}

/// The initial value of the atomic target.
fn atomic_start(seed: u64) -> u64 {
    seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1
}

struct Peer {
    qpn: u32,
    psn: u32,
    gid: Ipv6Addr,
    rkey: u32,
    addr: u64,
    seed: u64,
    size: usize,
    iters: usize,
}

impl Peer {
    fn line(&self) -> String {
        format!(
            "ferroce-ops 1 qpn={} psn={} gid={} rkey={} addr={} seed={} size={} iters={}\n",
            self.qpn, self.psn, self.gid, self.rkey, self.addr, self.seed, self.size, self.iters
        )
    }
    fn parse(line: &str) -> Option<Peer> {
        let mut p = Peer {
            qpn: 0,
            psn: 0,
            gid: Ipv6Addr::UNSPECIFIED,
            rkey: 0,
            addr: 0,
            seed: 0,
            size: 0,
            iters: 0,
        };
        let mut it = line.split_whitespace();
        if it.next()? != "ferroce-ops" || it.next()? != "1" {
            return None;
        }
        for kv in it {
            let (k, v) = kv.split_once('=')?;
            match k {
                "qpn" => p.qpn = v.parse().ok()?,
                "psn" => p.psn = v.parse().ok()?,
                "gid" => p.gid = v.parse().ok()?,
                "rkey" => p.rkey = v.parse().ok()?,
                "addr" => p.addr = v.parse().ok()?,
                "seed" => p.seed = v.parse().ok()?,
                "size" => p.size = v.parse().ok()?,
                "iters" => p.iters = v.parse().ok()?,
                _ => {}
            }
        }
        Some(p)
    }
}

struct Side {
    cq: CompletionQueue,
    qp: QueuePair,
    gid: Ipv6Addr,
    gid_index: usize,
}

fn setup(
    ctx: &Context,
    o: &OpsOptions,
    pd: &ferroce::verbs::ProtectionDomain,
    recv_depth: u32,
) -> Result<Side, OpsError> {
    let (gid_index, gid) = ctx.source_gid(o.gid_index)?;
    let cq = ctx.create_cq(4 * recv_depth as usize + 16)?;
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: recv_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&cq, &cq, QpType::Rc, cap)?;
    qp.init(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        0,
    )?;
    Ok(Side {
        cq,
        qp,
        gid,
        gid_index,
    })
}

fn connect(side: &Side, o: &OpsOptions, my_psn: u32, peer: &Peer) -> Result<(), OpsError> {
    let mut p = RcPath::new(peer.gid, peer.qpn, peer.psn, my_psn);
    p.mtu = o.mtu;
    p.sgid_index = side.gid_index as u8;
    Ok(side.qp.connect(&p)?)
}

fn wait(
    cq: &CompletionQueue,
    op: &'static str,
    timeout: Duration,
) -> Result<WorkCompletion, OpsError> {
    let wc = cq.wait_one(timeout).ok_or(OpsError::Timeout(op))?;
    if wc.status != WcStatus::Success {
        return Err(OpsError::Completion {
            op,
            status: wc.status,
        });
    }
    Ok(wc)
}

fn first_diff(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "first difference at byte {i} ({:#04x} != {:#04x})",
            a[i], b[i]
        ),
        None => format!("length {} != {}", a.len(), b.len()),
    }
}

fn read_line(r: &mut BufReader<TcpStream>) -> Result<String, OpsError> {
    let mut l = String::new();
    r.read_line(&mut l)?;
    if l.is_empty() {
        return Err(OpsError::Protocol("connection closed".into()));
    }
    Ok(l)
}

/// Server: accepts one client on `port` and checks everything it sends.
pub fn server(
    ctx: &Context,
    port: u16,
    o: &OpsOptions,
    out: &mut dyn Write,
) -> Result<OpsReport, OpsError> {
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    let (stream, _) = listener.accept()?;
    serve(ctx, stream, o, out)
}

/// Server side over an accepted connection.
pub fn serve(
    ctx: &Context,
    stream: TcpStream,
    o: &OpsOptions,
    out: &mut dyn Write,
) -> Result<OpsReport, OpsError> {
    stream.set_read_timeout(Some(o.timeout))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let theirs = Peer::parse(&read_line(&mut reader)?)
        .ok_or_else(|| OpsError::Protocol("bad hello".into()))?;
    let (size, iters, seed) = (theirs.size, theirs.iters, theirs.seed);
    ops_memory(size, iters).map_err(|e| OpsError::Protocol(format!("bad hello: {e}")))?;

    let pd = ctx.alloc_pd()?;
    let region = atomic_offset(size, iters) + 8;
    let mut init = vec![0u8; region];
    init[size..2 * size].copy_from_slice(&pattern(seed, READ_SRC, 0, size));
    init[atomic_offset(size, iters)..].copy_from_slice(&atomic_start(seed).to_le_bytes());
    let target = pd.reg_mr_with(
        init,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    )?;
    // One receive buffer per expected message: SEND, SEND with immediate, WRITE with immediate.
    let depth = (3 * iters).max(1);
    let recv_mr = pd.reg_mr(size.max(1) * depth, Access::LOCAL_WRITE)?;
    let side = setup(ctx, o, &pd, depth as u32)?;
    for i in 0..depth {
        side.qp.post_recv(&RecvWr {
            wr_id: i as u64,
            sg_list: vec![recv_mr.sge(i * size.max(1), size)],
        })?;
    }
    let my_psn = ferroce::verbs::random_psn()?;
    connect(&side, o, my_psn, &theirs)?;
    let mine = Peer {
        qpn: side.qp.qpn(),
        psn: my_psn,
        gid: side.gid,
        rkey: target.rkey(),
        addr: target.addr(),
        seed,
        size,
        iters,
    };
    writer.write_all(mine.line().as_bytes())?;

    let start = Instant::now();
    let mut report = OpsReport::default();
    for n in 0..depth {
        let wc = wait(&side.cq, "receive", o.timeout)?;
        let slot = wc.wr_id as usize;
        let got = {
            let mut b = vec![0u8; wc.byte_len as usize];
            recv_mr.read(slot * size.max(1), &mut b)?;
            b
        };
        // The client sends, per iteration, SEND, SEND with imm, then WRITE with imm.
        let (iter, kind) = (n / 3, n % 3);
        match (kind, wc.opcode) {
            (0, WcOpcode::Recv) | (1, WcOpcode::Recv) => {
                let want = pattern(seed, SEND, iter, size);
                if got != want {
                    return Err(OpsError::Mismatch {
                        op: "SEND",
                        iter,
                        detail: first_diff(&got, &want),
                    });
                }
                if kind == 1 && wc.imm_data != 0x1000 + iter as u32 {
                    return Err(OpsError::Mismatch {
                        op: "SEND_WITH_IMM",
                        iter,
                        detail: format!("imm {:#x}", wc.imm_data),
                    });
                }
                report.add(
                    if kind == 0 { "SEND" } else { "SEND_WITH_IMM" },
                    size as u64,
                );
            }
            (2, WcOpcode::RecvRdmaWithImm) => {
                if wc.imm_data != 0x2000 + iter as u32 {
                    return Err(OpsError::Mismatch {
                        op: "WRITE_WITH_IMM",
                        iter,
                        detail: format!("imm {:#x}", wc.imm_data),
                    });
                }
                let mut now = vec![0u8; size];
                target.read(write_imm_offset(size, iter), &mut now)?;
                let want = pattern(seed, WRITE2, iter, size);
                if now != want {
                    return Err(OpsError::Mismatch {
                        op: "WRITE_WITH_IMM",
                        iter,
                        detail: first_diff(&now, &want),
                    });
                }
                report.add("RDMA_WRITE_WITH_IMM", size as u64);
            }
            (k, op) => {
                return Err(OpsError::Protocol(format!(
                    "unexpected completion {op:?} at step {k} of iteration {iter}"
                )))
            }
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    writer.write_all(format!("verified {depth}\n").as_bytes())?;
    let _ = read_line(&mut reader); // the client's "bye"
    report.print(out)?;
    Ok(report)
}

/// Client: connects to `server:port` and runs every operation `iters` times.
pub fn client(
    ctx: &Context,
    server: &str,
    port: u16,
    o: &OpsOptions,
    out: &mut dyn Write,
) -> Result<OpsReport, OpsError> {
    ops_memory(o.size, o.iters).map_err(OpsError::Usage)?;
    let addr = (server, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| OpsError::Protocol(format!("cannot resolve {server}")))?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(o.timeout))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let (size, iters, seed) = (o.size, o.iters, o.seed);

    let pd = ctx.alloc_pd()?;
    let side = setup(ctx, o, &pd, 1)?;
    let my_psn = ferroce::verbs::random_psn()?;
    let mine = Peer {
        qpn: side.qp.qpn(),
        psn: my_psn,
        gid: side.gid,
        rkey: 0,
        addr: 0,
        seed,
        size,
        iters,
    };
    writer.write_all(mine.line().as_bytes())?;
    let theirs = Peer::parse(&read_line(&mut reader)?)
        .ok_or_else(|| OpsError::Protocol("bad hello".into()))?;
    connect(&side, o, my_psn, &theirs)?;

    let src = pd.reg_mr(size.max(8), Access::LOCAL_WRITE)?;
    let dst = pd.reg_mr(size.max(8), Access::LOCAL_WRITE)?;
    let t = o.timeout;
    let (raddr, rkey) = (theirs.addr, theirs.rkey);
    let mut expected = atomic_start(seed);
    let mut report = OpsReport::default();
    let start = Instant::now();
    let read_back = |mr: &MemoryRegion, len: usize| -> Result<Vec<u8>, OpsError> {
        let mut b = vec![0u8; len];
        mr.read(0, &mut b)?;
        Ok(b)
    };
    for i in 0..iters {
        let id = i as u64;
        src.write(0, &pattern(seed, SEND, i, size))?;
        side.qp.post_send(&wr::send(id, src.sge(0, size)))?;
        wait(&side.cq, "SEND", t)?;
        side.qp
            .post_send(&wr::send_with_imm(id, src.sge(0, size), 0x1000 + i as u32))?;
        wait(&side.cq, "SEND_WITH_IMM", t)?;

        let data = pattern(seed, WRITE, i, size);
        src.write(0, &data)?;
        side.qp
            .post_send(&wr::rdma_write(id, src.sge(0, size), raddr, rkey))?;
        wait(&side.cq, "RDMA_WRITE", t)?;
        report.add("RDMA_WRITE", size as u64);
        side.qp
            .post_send(&wr::rdma_read(id, dst.sge(0, size), raddr, rkey))?;
        wait(&side.cq, "RDMA_READ", t)?;
        let got = read_back(&dst, size)?;
        if got != data {
            return Err(OpsError::Mismatch {
                op: "RDMA_READ after WRITE",
                iter: i,
                detail: first_diff(&got, &data),
            });
        }
        report.add("RDMA_READ", size as u64);

        src.write(0, &pattern(seed, WRITE2, i, size))?;
        side.qp.post_send(&wr::rdma_write_with_imm(
            id,
            src.sge(0, size),
            raddr + write_imm_offset(size, i) as u64,
            rkey,
            0x2000 + i as u32,
        ))?;
        wait(&side.cq, "RDMA_WRITE_WITH_IMM", t)?;

        side.qp.post_send(&wr::rdma_read(
            id,
            dst.sge(0, size),
            raddr + size as u64,
            rkey,
        ))?;
        wait(&side.cq, "RDMA_READ", t)?;
        let got = read_back(&dst, size)?;
        let want = pattern(seed, READ_SRC, 0, size);
        if got != want {
            return Err(OpsError::Mismatch {
                op: "RDMA_READ",
                iter: i,
                detail: first_diff(&got, &want),
            });
        }
        report.add("RDMA_READ", size as u64);

        let atomic = raddr + atomic_offset(size, iters) as u64;
        side.qp
            .post_send(&wr::fetch_add(id, dst.sge(0, 8), atomic, rkey, 1))?;
        wait(&side.cq, "FETCH_ADD", t)?;
        let old = u64::from_le_bytes(read_back(&dst, 8)?.try_into().expect("8 bytes"));
        if old != expected {
            return Err(OpsError::Mismatch {
                op: "FETCH_ADD",
                iter: i,
                detail: format!("old value {old:#x}, expected {expected:#x}"),
            });
        }
        expected += 1;
        report.add("ATOMIC_FETCH_ADD", 8);
        side.qp.post_send(&wr::compare_swap(
            id,
            dst.sge(0, 8),
            atomic,
            rkey,
            expected,
            expected + 1,
        ))?;
        wait(&side.cq, "CMP_SWAP", t)?;
        let old = u64::from_le_bytes(read_back(&dst, 8)?.try_into().expect("8 bytes"));
        if old != expected {
            return Err(OpsError::Mismatch {
                op: "CMP_SWAP",
                iter: i,
                detail: format!("old value {old:#x}, expected {expected:#x}"),
            });
        }
        expected += 1;
        report.add("ATOMIC_CMP_SWAP", 8);
    }
    // The atomics took effect exactly once each.
    side.qp.post_send(&wr::rdma_read(
        0,
        dst.sge(0, 8),
        raddr + atomic_offset(size, iters) as u64,
        rkey,
    ))?;
    wait(&side.cq, "RDMA_READ", t)?;
    let last = u64::from_le_bytes(read_back(&dst, 8)?.try_into().expect("8 bytes"));
    if last != expected {
        return Err(OpsError::Mismatch {
            op: "atomics",
            iter: iters,
            detail: format!("final {last:#x}, expected {expected:#x}"),
        });
    }
    let verdict = read_line(&mut reader)?;
    if !verdict.starts_with("verified") {
        return Err(OpsError::Protocol(verdict.trim().to_string()));
    }
    let _ = writer.write_all(b"bye\n");
    report.rows.insert(
        0,
        (
            "SEND_WITH_IMM (checked by server)",
            iters,
            (iters * size) as u64,
        ),
    );
    report.rows.insert(
        0,
        ("SEND (checked by server)", iters, (iters * size) as u64),
    );
    report.rows.push((
        "RDMA_WRITE_WITH_IMM (checked by server)",
        iters,
        (iters * size) as u64,
    ));
    report.seconds = start.elapsed().as_secs_f64();
    report.print(out)?;
    Ok(report)
}

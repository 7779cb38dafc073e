//! `ibv_rc_pingpong`, `ibv_uc_pingpong` and `ibv_ud_pingpong`, rebuilt on the verbs API:
//! same out-of-band exchange, same QP setup, same ping-pong loop, same output lines, so
//! either side can be rdma-core's program.

use std::io::Write;
use std::time::{Duration, Instant};

use ferroce_transport::{
    Access, AddressVector, Mtu, QpCap, QpType, RecvWr, SendFlags, SendWr, WcStatus,
};

use super::oob::{self, Dest};
use ferroce::verbs::{Context, Error as VerbsError, RcPath};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The Q_Key ibv_ud_pingpong uses.
pub const UD_QKEY: u32 = 0x1111_1111;
/// Bytes of GRH space in front of every UD receive buffer.
const GRH: usize = 40;
/// The page size the `-c` check samples at, as in rdma-core.
const PAGE: usize = 4096;

/// Options, named after the rdma-core flags.
#[derive(Debug, Clone)]
pub struct Options {
    pub qp_type: QpType,
    /// Server to connect to; `None` = be the server.
    pub server: Option<String>,
    pub port: u16,
    pub size: usize,
    pub mtu: Mtu,
    pub rx_depth: usize,
    pub iters: usize,
    pub gid_index: Option<usize>,
    pub validate: bool,
    /// Longest wait for any single completion.
    pub timeout: Duration,
}

/// Why a ping-pong failed.
#[derive(Debug)]
pub enum PingPongError {
    Verbs(VerbsError),
    Io(std::io::Error),
    /// A completion with an error status.
    Completion {
        status: WcStatus,
        wr_id: u64,
    },
    /// No completion came in time.
    Timeout {
        rcnt: usize,
        scnt: usize,
    },
    /// `-c` found a byte that is not what the sender wrote.
    InvalidData {
        page: usize,
    },
    Usage(String),
}

impl std::fmt::Display for PingPongError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PingPongError::Verbs(e) => write!(f, "{e}"),
            PingPongError::Io(e) => write!(f, "{e}"),
            PingPongError::Completion { status, wr_id } => {
                write!(f, "Failed status {status:?} for wr_id {wr_id}")
            }
            PingPongError::Timeout { rcnt, scnt } => {
                write!(f, "no completion for too long (received {rcnt}, sent {scnt}); is the peer still running?")
            }
            PingPongError::InvalidData { page } => write!(f, "Invalid data in page {page}"),
            PingPongError::Usage(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for PingPongError {}

impl From<VerbsError> for PingPongError {
    fn from(e: VerbsError) -> Self {
        PingPongError::Verbs(e)
    }
}
impl From<std::io::Error> for PingPongError {
    fn from(e: std::io::Error) -> Self {
        PingPongError::Io(e)
    }
}

/// What a finished run measured.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub bytes: u64,
    pub seconds: f64,
    pub iters: usize,
}

/// Runs one ping-pong on `ctx`, printing rdma-core's lines to `out`.
pub fn run(ctx: &Context, o: &Options, out: &mut dyn Write) -> Result<Report, PingPongError> {
    let ud = o.qp_type == QpType::Ud;
    if ud && o.size > ctx.attr().active_mtu.bytes() as usize {
        return Err(PingPongError::Usage(format!(
            "Requested size larger than port MTU ({})",
            ctx.attr().active_mtu.bytes()
        )));
    }
    let (gid_index, my_gid) = ctx.source_gid(o.gid_index)?;

    let pd = ctx.alloc_pd()?;
    let buf_len = if ud { o.size + GRH } else { o.size };
    let mr = pd.reg_mr_with(vec![0x7b; buf_len], Access::LOCAL_WRITE)?;
    let cq = ctx.create_cq(o.rx_depth + 1)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&cq, &cq, o.qp_type, cap)?;
    qp.init(Access::empty(), UD_QKEY)?;

    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: vec![mr.sge(0, buf_len)],
    };
    for _ in 0..o.rx_depth {
        qp.post_recv(&recv)?;
    }
    let mut routs = o.rx_depth;

    let mine = Dest {
        lid: 0,
        qpn: qp.qpn(),
        psn: ferroce::verbs::random_psn()?,
        gid: my_gid,
    };
    let sep = if ud { ":" } else { "," };
    writeln!(
        out,
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        mine.lid, mine.qpn, mine.psn, mine.gid
    )?;

    let connect = |theirs: &Dest| -> Result<(), VerbsError> {
        if ud {
            qp.ready_ud(UD_QKEY, mine.psn)
        } else {
            let mut p = RcPath::new(theirs.gid, theirs.qpn, theirs.psn, mine.psn);
            p.mtu = o.mtu;
            p.sgid_index = gid_index as u8;
            p.access = Access::empty();
            p.max_rd_atomic = 1;
            p.max_dest_rd_atomic = 1;
            qp.connect(&p)
        }
    };
    let (mut link, theirs) = match &o.server {
        Some(server) => {
            let (link, theirs) = oob::client_exchange(server, o.port, &mine)?;
            connect(&theirs)?;
            (link, theirs)
        }
        None => {
            let (stream, theirs) = oob::server_accept(o.port)?;
            connect(&theirs)?;
            (oob::server_finish(stream, &mine)?, theirs)
        }
    };
    writeln!(
        out,
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        theirs.lid, theirs.qpn, theirs.psn, theirs.gid
    )?;
    out.flush()?;

    let ah = if ud {
        Some(pd.create_ah(AddressVector {
            sgid_index: gid_index as u8,
            hop_limit: 1,
            ..AddressVector::new(theirs.gid)
        })?)
    } else {
        None
    };
    let data_at = if ud { GRH } else { 0 };
    let send = SendWr {
        wr_id: SEND_WRID,
        sg_list: vec![mr.sge(data_at, o.size)],
        flags: SendFlags::SIGNALED,
        ud: ah.map(|a| a.dest(theirs.qpn, UD_QKEY)),
        ..Default::default()
    };

    let mut pending = RECV_WRID;
    if o.server.is_some() {
        if o.validate {
            // rdma-core writes `i / page_size % sizeof(char)`, i.e. 0, at each page start.
            for i in (0..o.size).step_by(PAGE) {
                mr.write(data_at + i, &[0])?;
            }
        }
        qp.post_send(&send)?;
        pending |= SEND_WRID;
    }

    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0usize, 0usize);
    while rcnt < o.iters || scnt < o.iters {
        let wc = cq
            .wait_one(o.timeout)
            .ok_or(PingPongError::Timeout { rcnt, scnt })?;
        if wc.status != WcStatus::Success {
            return Err(PingPongError::Completion {
                status: wc.status,
                wr_id: wc.wr_id,
            });
        }
        match wc.wr_id {
            SEND_WRID => scnt += 1,
            RECV_WRID => {
                if o.validate {
                    for i in (0..o.size).step_by(PAGE) {
                        let mut b = [0u8];
                        mr.read(data_at + i, &mut b)?;
                        if b[0] != 0 {
                            return Err(PingPongError::InvalidData { page: i / PAGE });
                        }
                    }
                }
                routs -= 1;
                if routs <= 1 {
                    while routs < o.rx_depth {
                        qp.post_recv(&recv)?;
                        routs += 1;
                    }
                }
                rcnt += 1;
            }
            other => {
                return Err(PingPongError::Usage(format!(
                    "Completion for unknown wr_id {other}"
                )));
            }
        }
        pending &= !wc.wr_id;
        if scnt < o.iters && pending == 0 {
            qp.post_send(&send)?;
            pending = RECV_WRID | SEND_WRID;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Keep the QP until the peer has its completions too: its last request's ACK may have
    // been lost, and its resend needs this QP to answer it.
    oob::finish(&mut link, o.timeout);
    let usec = secs * 1e6;
    let bytes = (o.size * o.iters * 2) as u64;
    writeln!(
        out,
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    )?;
    writeln!(
        out,
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    )?;
    Ok(Report {
        bytes,
        seconds: secs,
        iters: o.iters,
    })
}

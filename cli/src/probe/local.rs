//! ferroce's own stack as a target, in this process, on an in-memory wire: needs no
//! privileges, so the conformance suite runs against ferroce in every `cargo test` and as
//! `ferroce probe conformance local`. Its QP behaves like the programs a real target runs:
//! a buffer with every remote right (as perftest's), receives posted, and a SEND answered
//! with a SEND of its own (as ibv_rc_pingpong's).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use ferroce::link::{Link, MemoryLink};
use ferroce::net::gid::GidTable;
use ferroce::net::neigh::StaticResolver;
use ferroce::transport::{Access, Mtu, QpCap, QpType, RecvWr, WcOpcode, WcStatus};
use ferroce::verbs::{
    wr, CompletionQueue, Context, DeviceAttr, MemoryRegion, ProtectionDomain, QueuePair, RcPath,
};

use super::cases::Needs;
use super::peer::Addressing;
use super::runner::Remote;
use super::target::{Connected, Mine, Target, PROBE_RKEY, PROBE_VA, READ_LEN};

const PROBE_MAC: [u8; 6] = [0x02, 0x50, 0x52, 0x4f, 0x42, 0x45];
const TARGET_MAC: [u8; 6] = [0x02, 0x46, 0x45, 0x52, 0x52, 0x4f];
/// The target's buffer: every remote right, as perftest's.
pub const BUFFER: usize = 64 * 1024;
/// Receives posted on each QP, of [`RECV_SIZE`] bytes.
const RECVS: usize = 16;
const RECV_SIZE: usize = 4096;
/// The SEND the target answers a received SEND with.
const ANSWER: usize = 1024;
/// The QPs' local ACK timeout exponent: 16, 268 ms (4.096 µs × 2^16), where
/// ibv_rc_pingpong and perftest use 14 (67 ms). This target shares its CPUs with the
/// other tests of `cargo test`; a longer timer keeps a probe thread that was descheduled
/// for tens of milliseconds from turning into a retransmission the case did not expect
/// (and the timer cases still see the timer: `target-retransmits-after-timeout`, etc.).
const TIMEOUT: u8 = 16;

/// One connection's resources; dropped (QP destroyed) when the next case connects.
struct Current {
    _qp: Arc<QueuePair>,
    _mr: Arc<MemoryRegion>,
    _cq: Arc<CompletionQueue>,
    _pd: ProtectionDomain,
}

/// ferroce on the other end of an in-memory wire.
pub struct LocalTarget {
    ctx: Context,
    current: Option<Current>,
    offers: Vec<Needs>,
}

impl std::fmt::Debug for LocalTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalTarget")
    }
}

impl LocalTarget {
    /// The target and the probe's end of the wire, with the addresses on it.
    pub fn new() -> Result<(LocalTarget, Arc<dyn Link>, Addressing), String> {
        let (probe_link, target_link) =
            MemoryLink::pair(PROBE_MAC, TARGET_MAC).map_err(|e| e.to_string())?;
        let probe_ip: IpAddr = [10, 9, 0, 1].into();
        let target_ip: IpAddr = [10, 9, 0, 2].into();
        let attr = DeviceAttr {
            name: "ferroce-local".into(),
            node_guid: 0x0246_45ff_fe52_524f,
            mac: TARGET_MAC,
            netdev_mtu: 9000,
            active_mtu: Mtu::Mtu4096,
            gids: GidTable::from_addrs(&[target_ip]),
        };
        let resolver = StaticResolver::new([(probe_ip, PROBE_MAC), (target_ip, TARGET_MAC)]);
        let ctx = Context::with_link(attr, Arc::new(target_link), Arc::new(resolver))
            .map_err(|e| e.to_string())?;
        // Congestion control on, as a RoCE NIC with ECN enabled has it: the congestion
        // cases expect CNPs for CE-marked requests.
        ctx.set_dcqcn(ferroce_transport::DcqcnConfig {
            enabled: true,
            ..Default::default()
        })
        .map_err(|e| e.to_string())?;
        let addr = Addressing {
            mac: PROBE_MAC,
            ip: probe_ip,
            target_mac: TARGET_MAC,
            target_ip,
        };
        let target = LocalTarget {
            ctx,
            current: None,
            offers: vec![
                Needs::Any,
                Needs::Send,
                Needs::Write,
                Needs::Read,
                Needs::Atomic,
                Needs::Requester,
                Needs::NoRecv,
                Needs::Reader,
            ],
        };
        Ok((target, Arc::new(probe_link), addr))
    }

    /// Keeps the connection's resources and says what the probe needs to know of them.
    fn connected(
        &mut self,
        qp: Arc<QueuePair>,
        mr: Arc<MemoryRegion>,
        cq: Arc<CompletionQueue>,
        pd: ProtectionDomain,
        path: &RcPath,
        gid: Ipv6Addr,
    ) -> Connected {
        let remote = Remote {
            qpn: qp.qpn(),
            epsn: path.rq_psn,
            va: mr.addr(),
            rkey: mr.rkey(),
            size: BUFFER as u64,
            mtu: path.mtu.bytes(),
            timeout_ms: (4096u64 << TIMEOUT) / 1_000_000,
        };
        self.current = Some(Current {
            _qp: qp,
            _mr: mr,
            _cq: cq,
            _pd: pd,
        });
        Connected {
            remote,
            gid,
            close: None,
        }
    }

    /// Turns congestion control (and with it CNP generation) on or off.
    pub fn congestion_control(&self, on: bool) -> Result<(), String> {
        self.ctx
            .set_dcqcn(ferroce_transport::DcqcnConfig {
                enabled: on,
                ..Default::default()
            })
            .map_err(|e| e.to_string())
    }

    /// The target's counters (rxe's hw_counters names), for checks of what it counted.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        self.ctx.counters()
    }
}

impl Target for LocalTarget {
    fn describe(&self) -> String {
        "ferroce (this build), in process on an in-memory wire".into()
    }

    fn offers(&self) -> &[Needs] {
        &self.offers
    }

    fn connect(&mut self, mine: Mine, needs: Needs) -> Result<Connected, String> {
        self.current = None;
        let e = |e: ferroce::verbs::Error| e.to_string();
        let pd = self.ctx.alloc_pd().map_err(e)?;
        let cq = Arc::new(self.ctx.create_cq(256).map_err(e)?);
        let qp = Arc::new(
            pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())
                .map_err(e)?,
        );
        let all = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = Arc::new(pd.reg_mr(BUFFER, all).map_err(e)?);
        let gid: Ipv6Addr = self.ctx.gid(0).ok_or("the local target has no GID")?;
        let sq_psn = super::random24();
        let path = RcPath {
            mtu: Mtu::Mtu1024,
            timeout: TIMEOUT,
            ..RcPath::new(mine.gid, mine.qpn, mine.psn, sq_psn)
        };
        qp.connect(&path).map_err(e)?;
        // (Receives are posted once the QP has left RESET, as verbs require.)
        let recvs = if needs == Needs::NoRecv { 0 } else { RECVS };
        for i in 0..recvs {
            qp.post_recv(&RecvWr {
                wr_id: i as u64,
                sg_list: vec![mr.sge(i * RECV_SIZE % BUFFER, RECV_SIZE)],
            })
            .map_err(e)?;
        }
        // Like an ib_read_bw client (`reader` cases): READs of the probe's buffer, one at a
        // time, each once the one before completed. A READ sent before the probe drains its
        // queue is kept for the case (`Peer::drain`).
        if needs == Needs::Reader {
            let (rqp, rcq) = (qp.clone(), cq.clone());
            let sge = mr.sge(0, READ_LEN);
            let rmr = mr.clone();
            std::thread::spawn(move || {
                for i in 0..5u64 {
                    if rqp
                        .post_send(&wr::rdma_read(i, sge, PROBE_VA, PROBE_RKEY))
                        .is_err()
                    {
                        return;
                    }
                    match rcq.wait_one(Duration::from_secs(10)) {
                        Some(wc) if wc.status == WcStatus::Success => {}
                        _ => return,
                    }
                }
                drop(rmr);
            });
            return Ok(self.connected(qp, mr, cq, pd, &path, gid));
        }
        // Like ibv_rc_pingpong: the first SEND received is answered with a SEND.
        {
            let qp = qp.clone();
            let cq = cq.clone();
            let sge = mr.sge(BUFFER - ANSWER, ANSWER);
            let mr = mr.clone();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while std::time::Instant::now() < deadline {
                    let Some(wc) = cq.wait_one(Duration::from_millis(50)) else {
                        continue;
                    };
                    if wc.status != WcStatus::Success {
                        return;
                    }
                    if wc.opcode == WcOpcode::Recv {
                        let _ = qp.post_send(&wr::send(1000, sge));
                        drop(mr);
                        return;
                    }
                }
            });
        }
        Ok(self.connected(qp, mr, cq, pd, &path, gid))
    }
}

//! A thread in the link's send call does not hold the device: another thread's verbs
//! call goes ahead meanwhile, and the frames still leave in the order they were built.
//!
//! Why it matters: a send call is long (on a veth, and towards rxe, the receiver's softirq
//! runs inside it), and while the poster was in it the driver could not take in ACKs or
//! build the next frames (see `src/driver/tx_pipe.rs`).

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ferroce::link::{Link, MemoryLink};
use ferroce::net::gid::GidTable;
use ferroce::net::neigh::StaticResolver;
use ferroce::transport::DcqcnConfig;
use ferroce::verbs::*;
use ferroce::wire::*;

const MAC_DEV: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER_QPN: u32 = 0x99;

/// Holds the first frame sent in the send call until the test opens the gate (or 5 s
/// pass): the send call of a slow link.
#[derive(Default)]
struct Gate {
    armed: AtomicBool,
    /// A sender is waiting at the gate.
    waiting: AtomicBool,
    open: Mutex<bool>,
    opened: Condvar,
}

struct StallingLink {
    inner: MemoryLink,
    gate: Arc<Gate>,
    /// Whether the stalled send was let go by the test (true) or by the timeout.
    released_by_test: Arc<Mutex<Option<bool>>>,
}

impl Link for StallingLink {
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        if self.gate.armed.swap(false, Ordering::SeqCst) {
            self.gate.waiting.store(true, Ordering::SeqCst);
            let open = self.gate.open.lock().unwrap();
            let (open, _) = self
                .gate
                .opened
                .wait_timeout_while(open, Duration::from_secs(5), |o| !*o)
                .unwrap();
            *self.released_by_test.lock().unwrap() = Some(*open);
        }
        self.inner.send(frame)
    }
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.inner.recv(buf)
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
}

/// A device on a [`StallingLink`] with one connected RC QP, and the peer's end.
struct Rig {
    ctx: Context,
    _pd: ProtectionDomain,
    _cq: CompletionQueue,
    mr: MemoryRegion,
    qp: QueuePair,
    peer: MemoryLink,
    gate: Arc<Gate>,
    released_by_test: Arc<Mutex<Option<bool>>>,
}

impl Rig {
    fn new(dcqcn: bool) -> Rig {
        let ip_dev = Ipv4Addr::new(10, 0, 0, 1);
        let ip_peer = Ipv4Addr::new(10, 0, 0, 2);
        let (a, peer) = MemoryLink::pair(MAC_DEV, MAC_PEER).unwrap();
        let gate = Arc::new(Gate::default());
        let released_by_test = Arc::new(Mutex::new(None));
        let link = StallingLink {
            inner: a,
            gate: gate.clone(),
            released_by_test: released_by_test.clone(),
        };
        let neighbours = StaticResolver::new([
            (IpAddr::V4(ip_dev), MAC_DEV),
            (IpAddr::V4(ip_peer), MAC_PEER),
        ]);
        let attr = DeviceAttr {
            name: "stall0".into(),
            node_guid: 1,
            mac: MAC_DEV,
            netdev_mtu: 1500,
            active_mtu: Mtu::Mtu1024,
            gids: GidTable::from_addrs(&[IpAddr::V4(ip_dev)]),
        };
        let ctx = Context::with_link(attr, Arc::new(link), Arc::new(neighbours)).unwrap();
        if dcqcn {
            ctx.set_dcqcn(DcqcnConfig {
                enabled: true,
                ..Default::default()
            })
            .unwrap();
        }
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let mr = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
        let qp = pd
            .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
            .unwrap();
        qp.init(Access::LOCAL_WRITE, 0).unwrap();
        let peer_gid = ip_peer.to_ipv6_mapped();
        qp.connect(&RcPath::new(peer_gid, PEER_QPN, 0x10, 0x100))
            .unwrap();
        mr.write(0, &[0x11; 64]).unwrap();
        mr.write(64, &[0x22; 64]).unwrap();
        Rig {
            ctx,
            _pd: pd,
            _cq: cq,
            mr,
            qp,
            peer,
            gate,
            released_by_test,
        }
    }

    fn send(&self, wr_id: u64, offset: usize) {
        self.qp
            .post_send(&wr::send(wr_id, self.mr.sge(offset, 64)))
            .unwrap();
    }

    fn post_recv(&self) {
        self.qp
            .post_recv(&RecvWr {
                wr_id: 9,
                sg_list: vec![self.mr.sge(1024, 64)],
            })
            .unwrap();
    }

    /// Arms the gate and waits until a send call (started by `start`) is stalled in it.
    fn wait_stalled(&self) {
        let start = Instant::now();
        while !self.gate.waiting.load(Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(5), "nothing was sent");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn open_gate(&self) {
        *self.gate.open.lock().unwrap() = true;
        self.gate.opened.notify_all();
    }

    /// The SENDs on the wire, as (PSN, first payload byte).
    fn sent(&self, n: usize) -> Vec<(u32, u8)> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 10000];
        let start = Instant::now();
        while got.len() < n && start.elapsed() < Duration::from_secs(10) {
            match self.peer.recv(&mut buf).unwrap() {
                Some(n) => {
                    let f = Frame::parse(&buf[..n]).expect("a valid frame");
                    let p = f.ib();
                    assert_eq!(p.opcode(), Opcode::RC_SEND_ONLY);
                    got.push((p.bth().psn().value(), p.payload()[0]));
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        got
    }
}

#[test]
fn a_verbs_call_goes_ahead_while_another_thread_is_sending() {
    let rig = Rig::new(false);
    // The first SEND's frame stalls in the link's send call, on the poster's thread.
    rig.gate.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|scope| {
        scope.spawn(|| rig.send(1, 0));
        rig.wait_stalled();
        // A verbs call that locks the device, while that send call is stalled.
        rig.post_recv();
        // A second SEND from another thread, built now: it must leave behind the first,
        // whose send call it finds stalled.
        scope.spawn(|| rig.send(2, 64));
        let start = Instant::now();
        while counter(&rig.ctx, "tx_turn_waits") == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the second SEND never waited for its turn"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        rig.open_gate();
    });
    assert_eq!(
        *rig.released_by_test.lock().unwrap(),
        Some(true),
        "the verbs call waited for the send call to end"
    );
    // Both SENDs reach the wire, in the order they were posted.
    assert_eq!(rig.sent(2), vec![(0x100, 0x11), (0x101, 0x22)]);
}

/// With congestion control on, frames are still sent under the device lock (see
/// `transmit_once` in `src/driver/io.rs`: the DCQCN test's queue doubled without it): a
/// verbs call waits for a stalled send call to end.
#[test]
fn with_dcqcn_a_send_call_holds_the_device() {
    let rig = Rig::new(true);
    rig.gate.armed.store(true, Ordering::SeqCst);
    let recv_done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| rig.send(1, 0));
        rig.wait_stalled();
        scope.spawn(|| {
            rig.post_recv();
            recv_done.store(true, Ordering::SeqCst);
        });
        // Unlocked, post_recv would be done in microseconds; locked, it cannot be done
        // before the gate opens, however long this waits.
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !recv_done.load(Ordering::SeqCst),
            "post_recv went ahead of a paced send call"
        );
        rig.open_gate();
    });
    assert!(recv_done.load(Ordering::SeqCst));
    assert_eq!(*rig.released_by_test.lock().unwrap(), Some(true));
    assert_eq!(rig.sent(1), vec![(0x100, 0x11)]);
}

fn counter(ctx: &Context, name: &str) -> u64 {
    ctx.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

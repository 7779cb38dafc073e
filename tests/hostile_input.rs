//! Hostile network input against a running device (driver thread, transport, in-memory
//! link): garbage, corrupted, misaddressed, out-of-sequence and unauthorized packets are
//! counted and dropped or NAKed as the IB spec says, and the device keeps working.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroce::link::{Link, MemoryLink};
use ferroce::net::gid::GidTable;
use ferroce::net::neigh::StaticResolver;
use ferroce::verbs::*;
use ferroce::wire::*;

const MAC_DEV: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER_QPN: u32 = 0x99;
const PEER_PSN: u32 = 0x00fff0; // close to the 2^24 wrap

struct Rig {
    ctx: Context,
    peer: MemoryLink,
    ip_dev: Ipv4Addr,
    ip_peer: Ipv4Addr,
}

fn rig() -> Rig {
    let ip_dev = Ipv4Addr::new(10, 0, 0, 1);
    let ip_peer = Ipv4Addr::new(10, 0, 0, 2);
    let (a, b) = MemoryLink::pair(MAC_DEV, MAC_PEER).unwrap();
    let neighbours = StaticResolver::new([
        (IpAddr::V4(ip_dev), MAC_DEV),
        (IpAddr::V4(ip_peer), MAC_PEER),
    ]);
    let attr = DeviceAttr {
        name: "hostile0".into(),
        node_guid: 1,
        mac: MAC_DEV,
        netdev_mtu: 1500,
        active_mtu: Mtu::Mtu1024,
        gids: GidTable::from_addrs(&[IpAddr::V4(ip_dev)]),
    };
    Rig {
        ctx: Context::with_link(attr, Arc::new(a), Arc::new(neighbours)).unwrap(),
        peer: b,
        ip_dev,
        ip_peer,
    }
}

impl Rig {
    fn frame(&self, bth: BthRepr, ext: ExtRepr, payload: &[u8]) -> Vec<u8> {
        let bth = BthRepr {
            pad_count: packet::pad_for(payload.len()),
            ..bth
        };
        let r = FrameRepr {
            ethernet: EthernetRepr {
                src: MAC_PEER,
                dst: MAC_DEV,
                vlan: None,
            },
            datagram: DatagramRepr {
                ip: IpRepr::V4 {
                    src: self.ip_peer,
                    dst: self.ip_dev,
                    dscp: 0,
                    ecn: 0,
                    ttl: 64,
                    identification: 7,
                    dont_fragment: true,
                },
                src_port: 0xc000,
                ib: IbRepr { bth, ext, payload },
            },
        };
        let mut out = vec![0; r.buffer_len()];
        r.emit(&mut out).unwrap();
        out
    }

    fn send(&self, frame: &[u8]) {
        self.peer.send(frame).unwrap();
    }

    /// Frames the device sent back: waits (up to 10 s, for a loaded machine) until
    /// `expect` have arrived, then until the link has been quiet for 200 ms, so that an
    /// unexpected extra frame is caught too.
    fn replies(&self, expect: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 10000];
        let start = Instant::now();
        let mut last = Instant::now();
        while (out.len() < expect && start.elapsed() < Duration::from_secs(10))
            || last.elapsed() < Duration::from_millis(200)
        {
            match self.peer.recv(&mut buf).unwrap() {
                Some(n) => {
                    out.push(buf[..n].to_vec());
                    last = Instant::now();
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        out
    }

    /// Waits (up to 10 s) until counter `name` reaches `at_least`; returns its value.
    fn wait_counter(&self, name: &str, at_least: u64) -> u64 {
        let start = Instant::now();
        loop {
            let v = self.counter(name);
            if v >= at_least || start.elapsed() > Duration::from_secs(10) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn counter(&self, name: &str) -> u64 {
        self.ctx
            .counters()
            .into_iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no counter {name}"))
    }
}

fn aeth_of(frame: &[u8]) -> (Opcode, Psn, AethRepr) {
    let f = Frame::parse(frame).expect("device sent a valid frame");
    assert!(f.icrc_ok(), "device sent a bad ICRC");
    let p = f.ib();
    let aeth = AethRepr::parse(&p.aeth().expect("AETH")).unwrap();
    (p.opcode(), p.bth().psn(), aeth)
}

fn send_only(psn: u32, qpn: u32) -> BthRepr {
    BthRepr {
        ack_req: true,
        ..BthRepr::new(Opcode::RC_SEND_ONLY, qpn, Psn::new(psn))
    }
}

#[test]
fn hostile_packets_are_counted_and_answered_as_the_spec_says() {
    let r = rig();
    let pd = r.ctx.alloc_pd().unwrap();
    let cq = r.ctx.create_cq(64).unwrap();
    let mr = pd
        .reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    qp.init(Access::LOCAL_WRITE | Access::REMOTE_WRITE, 0)
        .unwrap();
    for i in 0..4 {
        qp.post_recv(&RecvWr {
            wr_id: i,
            sg_list: vec![mr.sge(1024 * i as usize, 1024)],
        })
        .unwrap();
    }
    let peer_gid = r.ip_peer.to_ipv6_mapped();
    qp.connect(&RcPath::new(peer_gid, PEER_QPN, PEER_PSN, 0x100))
        .unwrap();
    let qpn = qp.qpn();

    // 1. Garbage of every length: dropped and counted, never answered.
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for i in 0..2000 {
        let len = i % 200;
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        r.send(&junk);
    }
    // Truncations of a valid packet at every byte.
    let good = r.frame(send_only(PEER_PSN, qpn), ExtRepr::default(), &[1; 16]);
    for n in 0..good.len() {
        r.send(&good[..n]);
    }
    // Every junk frame and every truncation is dropped by the driver or the transport.
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.counter("rx_not_roce") + r.counter("rx_malformed") < 2000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(r.replies(0).is_empty(), "garbage must not be answered");
    let dropped = r.counter("rx_not_roce") + r.counter("rx_malformed");
    assert!(dropped >= 2000, "garbage counted: {dropped}");

    // 2. A corrupted payload byte: the ICRC rejects it.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 8] ^= 0x40;
    r.send(&bad);
    assert_eq!(r.wait_counter("rx_icrc_err", 1), 1);
    assert!(r.replies(0).is_empty());

    // 3. An unknown QP: silently dropped.
    r.send(&r.frame(send_only(PEER_PSN, 0x777), ExtRepr::default(), &[1; 16]));
    assert_eq!(r.wait_counter("rx_unknown_qp", 1), 1);
    assert!(r.replies(0).is_empty());

    // 4. The expected PSN: executed and ACKed.
    r.send(&good);
    let replies = r.replies(1);
    assert_eq!(replies.len(), 1);
    let (op, psn, aeth) = aeth_of(&replies[0]);
    assert_eq!(op, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(psn, Psn::new(PEER_PSN));
    assert!(matches!(aeth.syndrome, Syndrome::Ack { .. }), "{aeth:?}");
    let wc = cq.wait_one(Duration::from_secs(2)).unwrap();
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));

    // 5. Out of sequence: one NAK (PSN sequence error) naming the expected PSN, then silence.
    r.send(&r.frame(send_only(PEER_PSN + 5, qpn), ExtRepr::default(), &[2; 16]));
    r.send(&r.frame(send_only(PEER_PSN + 6, qpn), ExtRepr::default(), &[2; 16]));
    let replies = r.replies(1);
    assert_eq!(replies.len(), 1, "exactly one NAK per sequence error");
    let (_, psn, aeth) = aeth_of(&replies[0]);
    assert_eq!(aeth.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!(psn, Psn::new(PEER_PSN + 1));
    assert_eq!(r.counter("out_of_seq_request"), 2);

    // 6. A duplicate: ACKed again, not executed again.
    r.send(&good);
    let replies = r.replies(1);
    assert_eq!(replies.len(), 1);
    assert!(matches!(
        aeth_of(&replies[0]).2.syndrome,
        Syndrome::Ack { .. }
    ));
    assert_eq!(r.counter("duplicate_request"), 1);
    assert!(
        cq.wait_one(Duration::from_millis(200)).is_none(),
        "a duplicate must not complete twice"
    );

    // 7. An RDMA WRITE outside the region: NAK remote access error, QP to ERR, receives flushed.
    let reth = RethRepr {
        va: mr.addr() + 4000,
        rkey: mr.rkey(),
        dma_len: 200,
    };
    let write = BthRepr {
        ack_req: true,
        ..BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, Psn::new(PEER_PSN + 1))
    };
    r.send(&r.frame(
        write,
        ExtRepr {
            reth: Some(reth),
            ..Default::default()
        },
        &[3; 200],
    ));
    let replies = r.replies(1);
    assert_eq!(replies.len(), 1);
    assert_eq!(
        aeth_of(&replies[0]).2.syndrome,
        Syndrome::Nak(NakCode::RemoteAccessError)
    );
    assert!(
        mr.to_vec().iter().skip(1024).all(|&b| b == 0),
        "nothing written outside the first receive"
    );
    assert_eq!(qp.state().unwrap(), QpState::Err);
    let mut flushed = Vec::new();
    while let Some(wc) = cq.wait_one(Duration::from_millis(300)) {
        flushed.push(wc);
    }
    assert_eq!(flushed.len(), 3, "{flushed:?}");
    assert!(flushed.iter().all(|w| w.status == WcStatus::WrFlushErr));
    // Nothing arriving for a QP in ERR is answered.
    r.send(&r.frame(send_only(PEER_PSN + 2, qpn), ExtRepr::default(), &[4; 16]));
    assert!(r.replies(0).is_empty());

    // 8. After all that, a new QP works.
    let qp2 = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    qp2.init(Access::LOCAL_WRITE, 0).unwrap();
    qp2.post_recv(&RecvWr {
        wr_id: 9,
        sg_list: vec![mr.sge(0, 64)],
    })
    .unwrap();
    qp2.connect(&RcPath::new(peer_gid, PEER_QPN + 1, 10, 20))
        .unwrap();
    r.send(&r.frame(
        send_only(10, qp2.qpn()),
        ExtRepr::default(),
        b"still alive!",
    ));
    let replies = r.replies(1);
    assert_eq!(replies.len(), 1);
    assert!(matches!(
        aeth_of(&replies[0]).2.syndrome,
        Syndrome::Ack { .. }
    ));
    let wc = cq.wait_one(Duration::from_secs(2)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success));
    let mut b = [0u8; 12];
    mr.read(0, &mut b).unwrap();
    assert_eq!(&b, b"still alive!");
}

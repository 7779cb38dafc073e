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
const PEER_PSN: u32 = 0xff_fff0; // 16 packets before the 2^24 wrap

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

/// `template` (a valid frame) with its IB part replaced by `ib` and an ICRC appended,
/// the IPv4 and UDP lengths and the IPv4 checksum fixed: the bytes reach the transport.
fn wrap_ib(template: &[u8], ib_at: usize, ib: &[u8]) -> Vec<u8> {
    let mut f = template[..ib_at].to_vec();
    f.extend_from_slice(ib);
    f.extend_from_slice(&[0; 4]);
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[14 + 24..14 + 26].copy_from_slice(&(ip_len - 20).to_be_bytes());
    ferroce::wire::ipv4::fill_header_checksum(&mut f[14..]);
    let _ = icrc::fill(&mut f[14..]);
    f
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

    // 1. Garbage of every length: dropped and counted, never answered. Half is raw
    // junk; the other half is random IB bytes behind a valid Ethernet/IPv4/UDP 4791
    // header with a valid ICRC, so it gets past the driver into the transport's parser.
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    };
    let template = r.frame(send_only(PEER_PSN, 0x777), ExtRepr::default(), &[0; 200]);
    let ib_at = 14 + 20 + 8;
    for i in 0..2000 {
        let len = i % 200;
        let junk: Vec<u8> = (0..len).map(|_| rnd()).collect();
        if i % 2 == 0 {
            r.send(&junk);
        } else {
            r.send(&wrap_ib(&template, ib_at, &junk));
        }
    }
    // Truncations of a valid packet at every byte.
    let good = r.frame(send_only(PEER_PSN, qpn), ExtRepr::default(), &[1; 16]);
    for n in 0..good.len() {
        r.send(&good[..n]);
    }
    // Every junk frame and every truncation is dropped by the driver or the transport.
    let dropped = || {
        [
            "rx_not_roce",
            "rx_malformed",
            "rx_icrc_err",
            "rx_unknown_qp",
            "rx_bad_pkey",
            "rx_bad_opcode",
            "rx_cnp",
        ]
        .iter()
        .map(|c| r.counter(c))
        .sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while dropped() < 2000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(r.replies(0).is_empty(), "garbage must not be answered");
    assert!(dropped() >= 2000, "garbage counted: {}", dropped());
    assert!(
        r.counter("rx_malformed") >= 500,
        "wrapped junk reached the transport's parser"
    );
    let icrc_errs = r.counter("rx_icrc_err");

    // 2. A corrupted payload byte: the ICRC rejects it.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 8] ^= 0x40;
    r.send(&bad);
    assert_eq!(r.wait_counter("rx_icrc_err", icrc_errs + 1), icrc_errs + 1);
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

/// An RC QP of `pd` connected to the peer, expecting `PEER_PSN` first.
fn rc_qp(r: &Rig, pd: &ProtectionDomain, cq: &CompletionQueue, access: Access) -> QueuePair {
    let qp = pd.create_qp(cq, cq, QpType::Rc, QpCap::default()).unwrap();
    qp.init(access, 0).unwrap();
    let path = RcPath::new(r.ip_peer.to_ipv6_mapped(), PEER_QPN, PEER_PSN, 0x100);
    qp.connect(&path).unwrap();
    qp
}

fn with_reth(va: u64, rkey: u32, dma_len: u32) -> ExtRepr {
    ExtRepr {
        reth: Some(RethRepr { va, rkey, dma_len }),
        ..Default::default()
    }
}

fn nak_of(replies: &[Vec<u8>]) -> Vec<Syndrome> {
    replies.iter().map(|f| aeth_of(f).2.syndrome).collect()
}

/// The findings, each with crafted frames (valid ICRCs) against a running device.
#[test]
fn spoofed_frames_with_valid_icrcs_are_refused() {
    let r = rig();
    let pd = r.ctx.alloc_pd().unwrap();
    let cq = r.ctx.create_cq(64).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = pd.reg_mr(1 << 16, all).unwrap();
    let rbuf = pd.reg_mr(256, Access::LOCAL_WRITE).unwrap();
    let read = |psn: u32, qpn: u32| BthRepr {
        ack_req: true,
        ..BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, qpn, Psn::new(psn))
    };
    let write = |psn: u32, qpn: u32| BthRepr {
        ack_req: true,
        ..BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, Psn::new(psn))
    };

    // 1. Keys, iovas and QP numbers are not the old defaults, and a WRITE built from
    // those defaults (rkey 0x101 at 0x1000_0000_0000) lands nowhere.
    let qp = rc_qp(&r, &pd, &cq, all);
    assert_ne!(mr.rkey(), 0x101);
    assert_ne!(
        rbuf.lkey() & !0xff,
        mr.lkey() & !0xff,
        "keys are not slot-numbered"
    );
    assert_ne!(mr.addr(), 0x1000_0000_0000);
    assert_ne!(qp.qpn(), 0x11);
    r.send(&r.frame(
        write(PEER_PSN, qp.qpn()),
        with_reth(0x1000_0000_0000, 0x101, 256),
        &[0xee; 256],
    ));
    let replies = r.replies(1);
    assert_eq!(
        nak_of(&replies),
        vec![Syndrome::Nak(NakCode::RemoteAccessError)]
    );
    assert!(mr.to_vec().iter().all(|&b| b == 0));

    // 6. A bad IPv4 header checksum (which the ICRC masks): dropped and counted.
    let qp = rc_qp(&r, &pd, &cq, all);
    let mut f = r.frame(
        read(PEER_PSN, qp.qpn()),
        with_reth(mr.addr(), mr.rkey(), 16),
        &[],
    );
    f[14 + 10] ^= 0x33;
    r.send(&f);
    assert_eq!(r.wait_counter("rx_ip_csum_err", 1), 1);
    assert!(r.replies(0).is_empty());

    // 7. Random PSNs far ahead of the expected one: no sequence NAKs.
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let psn = PEER_PSN.wrapping_add(5000 + x % 0x7f_0000) & 0xff_ffff;
        r.send(&r.frame(
            write(psn, qp.qpn()),
            with_reth(mr.addr(), mr.rkey(), 8),
            &[1; 8],
        ));
    }
    assert_eq!(r.wait_counter("rx_psn_out_of_window", 300), 300);
    assert!(
        r.replies(0).is_empty(),
        "no NAKs for PSNs no requester can send"
    );

    // 2. A duplicate READ asking for more, elsewhere: NAK invalid request, no bytes.
    r.send(&r.frame(
        read(PEER_PSN, qp.qpn()),
        with_reth(mr.addr(), mr.rkey(), 16),
        &[],
    ));
    assert_eq!(r.replies(1).len(), 1, "the original READ's response");
    r.send(&r.frame(
        read(PEER_PSN, qp.qpn()),
        with_reth(mr.addr() + 4096, mr.rkey(), 1000),
        &[],
    ));
    let replies = r.replies(1);
    assert_eq!(
        nak_of(&replies),
        vec![Syndrome::Nak(NakCode::InvalidRequest)]
    );
    assert_eq!(r.counter("rx_dup_read_outside"), 1);

    // 3. Duplicates while a READ's responses are going out share its one stream.
    let qp = rc_qp(&r, &pd, &cq, all);
    let req = r.frame(
        read(PEER_PSN, qp.qpn()),
        with_reth(mr.addr(), mr.rkey(), 1 << 16),
        &[],
    );
    for _ in 0..50 {
        r.send(&req);
    }
    let replies = r.replies(64);
    let busy = r.counter("rx_dup_read_busy");
    // 64 packets at MTU 1024; duplicates after the stream ended replay it once each.
    assert_eq!(replies.len() as u64, 64 * (50 - busy), "busy={busy}");
    assert!(
        busy >= 40,
        "most duplicates met the stream in flight: {busy}"
    );

    // 4. SEND with invalidate naming the (never advertised) receive buffer: refused.
    let qp = rc_qp(&r, &pd, &cq, all);
    qp.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: vec![rbuf.sge(0, 256)],
    })
    .unwrap();
    let inv = BthRepr {
        ack_req: true,
        ..BthRepr::new(
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            qp.qpn(),
            Psn::new(PEER_PSN),
        )
    };
    let ext = ExtRepr {
        ieth: Some(IethRepr { rkey: rbuf.lkey() }),
        ..Default::default()
    };
    r.send(&r.frame(inv, ext, &[5; 8]));
    let replies = r.replies(1);
    assert_eq!(
        nak_of(&replies),
        vec![Syndrome::Nak(NakCode::InvalidRequest)]
    );
    assert_eq!(r.counter("rx_invalidate_refused"), 1);
    let wc = cq.wait_one(Duration::from_secs(2)).unwrap();
    assert_eq!(wc.status, WcStatus::RemInvReqErr);
    // The buffer is still registered and usable.
    let qp = rc_qp(&r, &pd, &cq, all);
    qp.post_recv(&RecvWr {
        wr_id: 2,
        sg_list: vec![rbuf.sge(0, 256)],
    })
    .unwrap();
    r.send(&r.frame(send_only(PEER_PSN, qp.qpn()), ExtRepr::default(), b"ok"));
    assert_eq!(r.replies(1).len(), 1);
    let wc = cq.wait_one(Duration::from_secs(2)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));

    // 5. A READ over 2 GiB: NAK invalid request, nothing streamed.
    let qp = rc_qp(&r, &pd, &cq, all);
    r.send(&r.frame(
        read(PEER_PSN, qp.qpn()),
        with_reth(mr.addr(), mr.rkey(), (1 << 31) + 256),
        &[],
    ));
    let replies = r.replies(1);
    assert_eq!(
        nak_of(&replies),
        vec![Syndrome::Nak(NakCode::InvalidRequest)]
    );
    assert_eq!(r.counter("rx_dma_len_too_long"), 1);
}

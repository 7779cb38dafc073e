//! Connections made and ended through QP1's connection manager between two devices on the
//! in-memory wire: data over the connected QPs, a refused port, a refusal by the server,
//! both sides' counters.

use std::time::Duration;

use ferroce::cm::{CmFailure, ConnectionManager};
use ferroce::verbs::*;
use ferroce_wire::cm::RejReason;

const T: Duration = Duration::from_secs(10);

struct End {
    ctx: Context,
    cm: ConnectionManager,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn end(ctx: Context) -> End {
    let cm = ConnectionManager::open(&ctx).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    let mr = pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    End {
        ctx,
        cm,
        _pd: pd,
        cq,
        qp,
        mr,
    }
}

#[test]
fn a_connection_carries_data_both_ways_and_ends() {
    let (a, b) = Context::memory_pair().unwrap();
    let (a, b) = (end(a), end(b));
    b.cm.listen(18515).unwrap();
    let server = std::thread::spawn(move || {
        let req = b.cm.get_request(18515, T).expect("a connection request");
        let ip = req.ip.expect("rdma_cm's IP header");
        assert_eq!(ip.dst, std::net::IpAddr::from([10, 0, 0, 2]));
        assert_eq!(ip.src, std::net::IpAddr::from([10, 0, 0, 1]));
        // Receives go in before the connection is up (rdma_create_qp leaves the QP in INIT).
        b.qp.init(Access::LOCAL_WRITE, 0).unwrap();
        b.qp.post_recv(&RecvWr {
            wr_id: 1,
            sg_list: vec![b.mr.sge(0, 4096)],
        })
        .unwrap();
        let conn = b.cm.accept_rc(&req, &b.qp, b"server", T).unwrap();
        assert_eq!(&conn.private_data[..6], b"client");
        let wc = b.cq.wait_one(T).expect("the client's message");
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 11));
        assert_eq!(&b.mr.to_vec()[..11], b"hello there");
        b.mr.write(0, b"general kenobi").unwrap();
        b.qp.post_send(&wr::send(2, b.mr.sge(0, 14))).unwrap();
        assert_eq!(b.cq.wait_one(T).expect("sent").status, WcStatus::Success);
        // The client ends it; the server answers.
        assert!(b.cm.wait_disconnect_request(conn.id, T));
        b.cm.disconnect(conn.id, T).unwrap();
        b
    });
    let conn =
        a.cm.connect_rc(&a.qp, [10, 0, 0, 2].into(), 18515, b"client", T)
            .unwrap();
    assert_eq!(&conn.private_data[..6], b"server");
    a.qp.post_recv(&RecvWr {
        wr_id: 3,
        sg_list: vec![a.mr.sge(100, 1000)],
    })
    .unwrap();
    a.mr.write(0, b"hello there").unwrap();
    a.qp.post_send(&wr::send(4, a.mr.sge(0, 11))).unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        got.push(a.cq.wait_one(T).expect("completions"));
    }
    assert!(got.iter().all(|wc| wc.status == WcStatus::Success));
    assert_eq!(&a.mr.to_vec()[100..114], b"general kenobi");
    a.cm.disconnect(conn.id, T).unwrap();
    let b = server.join().unwrap();
    let (ca, unsent_a) = a.cm.counters();
    let (cb, unsent_b) = b.cm.counters();
    assert_eq!((unsent_a, unsent_b), (0, 0));
    // REQ, RTU, DREQ out of A; REP, DREP out of B; nothing resent, nothing dropped.
    assert_eq!((ca.tx_msgs[0], ca.tx_msgs[4], ca.tx_msgs[5]), (1, 1, 1));
    assert_eq!((cb.tx_msgs[3], cb.tx_msgs[6]), (1, 1));
    assert_eq!(ca.tx_retries.iter().sum::<u64>(), 0);
    assert_eq!(
        (cb.rx_malformed, cb.rx_spoofed, cb.rx_unknown_comm_id),
        (0, 0, 0)
    );
    drop(b.ctx);
}

#[test]
fn a_port_nobody_listens_on_is_refused_at_once() {
    let (a, b) = Context::memory_pair().unwrap();
    let (a, b) = (end(a), end(b));
    let t0 = std::time::Instant::now();
    let r = a.cm.connect_rc(&a.qp, [10, 0, 0, 2].into(), 7999, b"", T);
    assert!(
        matches!(
            r,
            Err(CmFailure::Rejected {
                reason: RejReason::INVALID_SERVICE_ID,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "a REJ, not a timeout"
    );
    assert_eq!(b.cm.counters().0.rej_no_listener, 1);
    assert_eq!(
        r.unwrap_err().to_string(),
        "connection refused: nothing listens on that port"
    );
    let _ = b.ctx;
}

#[test]
fn the_server_may_refuse() {
    let (a, b) = Context::memory_pair().unwrap();
    let (a, b) = (end(a), end(b));
    b.cm.listen(1).unwrap();
    let server = std::thread::spawn(move || {
        let req = b.cm.get_request(1, T).expect("a request");
        b.cm.reject(&req, b"go away").unwrap();
        b
    });
    let r = a.cm.connect_rc(&a.qp, [10, 0, 0, 2].into(), 1, b"", T);
    // The refusal and its private data (REJ's 148 bytes, rdma_cm's REJECTED event's).
    assert!(
        matches!(&r, Err(CmFailure::Rejected { reason, private_data })
            if *reason == RejReason::CONSUMER_DEFINED && private_data.starts_with(b"go away")),
        "{r:?}"
    );
    server.join().unwrap();
}

#[test]
fn a_ud_service_is_found_and_datagrams_reach_it() {
    let (a, b) = Context::memory_pair().unwrap();
    let (cm_a, cm_b) = (
        ConnectionManager::open(&a).unwrap(),
        ConnectionManager::open(&b).unwrap(),
    );
    cm_b.listen_ud(7174).unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let cq_b = b.create_cq(8).unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Ud, QpCap::default())
        .unwrap();
    qp_b.ready_ud(0x0123_4567, 0).unwrap();
    let mr_b = pd_b.reg_mr(40 + 64, Access::LOCAL_WRITE).unwrap();
    qp_b.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: vec![mr_b.sge(0, 104)],
    })
    .unwrap();
    let qpn_b = qp_b.qpn();
    let server = std::thread::spawn(move || {
        let req = cm_b.get_ud_request(7174, T).expect("a UD service request");
        assert_eq!(
            req.ip.map(|h| h.dst),
            Some(std::net::IpAddr::from([10, 0, 0, 2]))
        );
        cm_b.accept_ud(&req, qpn_b, 0x0123_4567).unwrap();
        cm_b
    });
    let svc = cm_a.resolve_ud([10, 0, 0, 2].into(), 7174, T).unwrap();
    assert_eq!((svc.qpn, svc.qkey), (qpn_b, 0x0123_4567));
    let _cm_b = server.join().unwrap();
    let pd_a = a.alloc_pd().unwrap();
    let cq_a = a.create_cq(8).unwrap();
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Ud, QpCap::default())
        .unwrap();
    qp_a.ready_ud(0x0123_4567, 0).unwrap();
    let mr_a = pd_a.reg_mr(64, Access::empty()).unwrap();
    mr_a.write(0, b"over SIDR").unwrap();
    let ah = pd_a
        .create_ah(cm_a.address_vector(svc.remote).unwrap())
        .unwrap();
    qp_a.post_send(&wr::ud_send(2, mr_a.sge(0, 9), ah.dest(svc.qpn, svc.qkey)))
        .unwrap();
    let wc = cq_b.wait_one(T).expect("the datagram");
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 49));
    assert_eq!(&mr_b.to_vec()[40..49], b"over SIDR");
    // Nothing listens on 7175.
    let r = cm_a.resolve_ud([10, 0, 0, 2].into(), 7175, T);
    assert!(
        matches!(r, Err(CmFailure::SidrRefused(s)) if s == ferroce_wire::cm::SidrStatus::UNSUPPORTED),
        "{r:?}"
    );
}

#[test]
fn data_completions_do_not_wake_the_connection_manager() {
    // The CM thread sleeps on QP1's completions alone. Woken by every completion of
    // the device (its completion generation), it also took the link back from a thread
    // in poll mode at each: a ping-pong over a connection rdma_cm made ran 8x slower.
    let (a, b) = Context::memory_pair().unwrap();
    let (a, b) = (end(a), end(b));
    let (qa, qb) = (&a.qp, &b.qp);
    qa.init(Access::LOCAL_WRITE, 0).unwrap();
    qb.init(Access::LOCAL_WRITE, 0).unwrap();
    let gid = |last| std::net::Ipv4Addr::new(10, 0, 0, last).to_ipv6_mapped();
    qa.connect(&RcPath::new(gid(2), qb.qpn(), 0, 0)).unwrap();
    qb.connect(&RcPath::new(gid(1), qa.qpn(), 0, 0)).unwrap();
    let before = (a.cm.wakeups(), b.cm.wakeups());
    const N: u64 = 2000;
    for i in 0..N {
        qb.post_recv(&RecvWr {
            wr_id: i,
            sg_list: vec![b.mr.sge(0, 64)],
        })
        .unwrap();
        qa.post_send(&wr::send(i, a.mr.sge(0, 8))).unwrap();
        assert_eq!(a.cq.wait_one(T).expect("sent").status, WcStatus::Success);
        assert_eq!(
            b.cq.wait_one(T).expect("received").status,
            WcStatus::Success
        );
    }
    let woke = (a.cm.wakeups() - before.0, b.cm.wakeups() - before.1);
    // Its own 100 ms looks, a few dozen at most while the messages go; one per message
    // (4000 completions on the two devices) before.
    assert!(
        woke.0 < N / 10 && woke.1 < N / 10,
        "CM threads woke {woke:?} times"
    );
}

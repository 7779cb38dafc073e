//! The verbs API end to end on an in-memory pair, including the async completion wait.

use std::time::Duration;

use ferroce::verbs::*;

#[tokio::test(flavor = "current_thread")]
async fn completions_can_be_awaited() {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let mr_a = pd_a.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mr_b = pd_b.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
        .unwrap();
    qp_b.init(Access::LOCAL_WRITE, 0).unwrap();
    qp_b.post_recv(&RecvWr {
        wr_id: 7,
        sg_list: vec![mr_b.sge(0, 4096)],
    })
    .unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 100, 200))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 200, 100))
        .unwrap();

    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    mr_a.write(0, &msg).unwrap();
    qp_a.post_send(&wr::send_with_imm(1, mr_a.sge(0, msg.len()), 0xabcd))
        .unwrap();

    let recv = tokio::time::timeout(Duration::from_secs(5), cq_b.next())
        .await
        .expect("receive completion");
    assert_eq!(
        (recv.wr_id, recv.status, recv.byte_len, recv.imm_data),
        (7, WcStatus::Success, 3000, 0xabcd)
    );
    let sent = tokio::time::timeout(Duration::from_secs(5), cq_a.next())
        .await
        .expect("send completion");
    assert_eq!((sent.wr_id, sent.status), (1, WcStatus::Success));
    let mut got = vec![0u8; msg.len()];
    mr_b.read(0, &mut got).unwrap();
    assert_eq!(got, msg);
}

#[test]
fn memory_region_access_is_bounds_checked() {
    let (a, _b) = Context::memory_pair().unwrap();
    let pd = a.alloc_pd().unwrap();
    let mr = pd.reg_mr(16, Access::LOCAL_WRITE).unwrap();
    assert!(matches!(
        mr.write(10, &[0; 7]),
        Err(Error::OutOfBounds {
            offset: 10,
            len: 7,
            region: 16
        })
    ));
    assert!(mr.write(usize::MAX, &[0; 2]).is_err());
    let mut b = [0u8; 17];
    assert!(mr.read(0, &mut b).is_err());
    mr.write(8, &[1; 8]).unwrap();
    assert_eq!(mr.into_vec().unwrap(), [vec![0; 8], vec![1; 8]].concat());
}

#[test]
fn two_qps_share_one_receive_queue() {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let srq = pd_b.create_srq(8, 1).unwrap();
    let mr_b = pd_b.reg_mr(4 * 64, Access::LOCAL_WRITE).unwrap();
    for i in 0..4 {
        srq.post_recv(&RecvWr {
            wr_id: i,
            sg_list: vec![mr_b.sge(64 * i as usize, 64)],
        })
        .unwrap();
    }
    assert_eq!(srq.len(), 4);
    let mr_a = pd_a.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let mut pairs = Vec::new();
    for n in 0..2u32 {
        let qa = pd_a
            .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
            .unwrap();
        let qb = pd_b
            .create_qp_on_srq(&cq_b, &cq_b, QpType::Rc, QpCap::default(), Some(&srq))
            .unwrap();
        qa.connect(&RcPath::new(b.gid(0).unwrap(), qb.qpn(), n * 1000, 5))
            .unwrap();
        qb.connect(&RcPath::new(a.gid(0).unwrap(), qa.qpn(), 5, n * 1000))
            .unwrap();
        pairs.push((qa, qb));
    }
    for (n, (qa, qb)) in pairs.iter().enumerate() {
        mr_a.write(0, &[n as u8 + 1; 64]).unwrap();
        qa.post_send(&wr::send(n as u64, mr_a.sge(0, 64))).unwrap();
        let wc = cq_b.wait_one(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (wc.status, wc.wr_id, wc.qp_num),
            (WcStatus::Success, n as u64, qb.qpn())
        );
        assert_eq!(
            cq_a.wait_one(Duration::from_secs(5)).unwrap().status,
            WcStatus::Success
        );
    }
    assert_eq!(srq.len(), 2);
    let bytes = mr_b.to_vec();
    assert!(bytes[..64].iter().all(|&x| x == 1) && bytes[64..128].iter().all(|&x| x == 2));
}

#[test]
fn the_driver_runs_transport_timers_retry_exceeded_on_a_dead_peer() {
    // The peer device exists but has no such QP: every request is dropped there, so only
    // the local ACK timer (armed by the API thread, fired by the driver's timerfd) moves on.
    let (a, b) = Context::memory_pair().unwrap();
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(16).unwrap();
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    let mut p = RcPath::new(b.gid(0).unwrap(), 0x4242, 1, 1);
    p.timeout = 8; // 4.096 us * 2^8 = 1 ms
    p.retry_cnt = 2;
    qp.connect(&p).unwrap();
    qp.post_send(&wr::send(5, mr.sge(0, 64))).unwrap();
    // The 5 s bound only keeps a broken driver from hanging the test; nothing is asserted
    // about how long it took (the counters below say what happened).
    let wc = cq.wait_one(Duration::from_secs(5)).expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::RetryExcErr));
    // One transmission and retry_cnt = 2 retransmissions, each ended by its ACK timeout;
    // the third timeout exhausts the retries and fails the work request.
    let c = a.counters();
    let get = |n: &str| c.iter().find(|(k, _)| *k == n).unwrap().1;
    assert_eq!(get("sent_pkts"), 3);
    assert_eq!(get("retransmitted_pkts"), 2);
    assert_eq!(get("ack_timeouts"), 3);
    assert_eq!(get("completer_retry_err"), 2);
    assert_eq!(get("retry_exceeded_err"), 1);
    assert_eq!(get("rcvd_pkts"), 0);
    assert_eq!(qp.state().unwrap(), QpState::Err);
}

//! Two QPs of one device talk to each other (rdma-core's own tests and many CI jobs do
//! exactly this): datagrams to the device's own address go straight back to its
//! transport, never to the wire, with every operation's data checked.

use std::time::Duration;

use ferroce::verbs::*;

fn counter(ctx: &Context, name: &str) -> u64 {
    ctx.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

#[test]
fn rc_qps_of_one_device_send_write_read_and_atomics_to_each_other() {
    let (a, _b) = Context::memory_pair().unwrap();
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(64).unwrap();
    let rw =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let src = pd.reg_mr_with((0..64u8).collect::<Vec<_>>(), rw).unwrap();
    let dst = pd.reg_mr(64, rw).unwrap();
    let q1 = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    let q2 = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    let gid = a.gid(0).unwrap();
    let mut p1 = RcPath::new(gid, q2.qpn(), 100, 200);
    p1.access = rw;
    let mut p2 = RcPath::new(gid, q1.qpn(), 200, 100);
    p2.access = rw;
    q1.connect(&p1).unwrap();
    q2.connect(&p2).unwrap();
    let wait = |what: &str| {
        let wc = cq
            .wait_one(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{what}: no completion"));
        assert_eq!(wc.status, WcStatus::Success, "{what}");
        wc
    };

    q2.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: vec![dst.sge(0, 16)],
    })
    .unwrap();
    q1.post_send(&wr::send(2, src.sge(0, 16))).unwrap();
    let (x, y) = (wait("send"), wait("send"));
    assert!([x.wr_id, y.wr_id].contains(&1) && [x.wr_id, y.wr_id].contains(&2));
    assert_eq!(dst.to_vec()[..16], src.to_vec()[..16]);

    q1.post_send(&wr::rdma_write(
        3,
        src.sge(16, 16),
        dst.addr() + 16,
        dst.rkey(),
    ))
    .unwrap();
    wait("write");
    assert_eq!(dst.to_vec()[16..32], src.to_vec()[16..32]);

    q2.post_send(&wr::rdma_read(
        4,
        dst.sge(32, 16),
        src.addr() + 32,
        src.rkey(),
    ))
    .unwrap();
    wait("read");
    assert_eq!(dst.to_vec()[32..48], src.to_vec()[32..48]);

    src.write(48, &5u64.to_ne_bytes()).unwrap();
    q2.post_send(&wr::fetch_add(
        5,
        dst.sge(56, 8),
        src.addr() + 48,
        src.rkey(),
        7,
    ))
    .unwrap();
    wait("fetch_add");
    assert_eq!(
        u64::from_ne_bytes(dst.to_vec()[56..64].try_into().unwrap()),
        5
    );
    assert_eq!(
        u64::from_ne_bytes(src.to_vec()[48..56].try_into().unwrap()),
        12
    );

    assert!(counter(&a, "loopback_pkts") >= 8, "{:?}", a.counters());
    assert_eq!(counter(&a, "tx_no_neighbour"), 0);
}

#[test]
fn ud_qps_of_one_device_reach_each_other() {
    let (a, _b) = Context::memory_pair().unwrap();
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(16).unwrap();
    let src = pd.reg_mr_with(vec![9u8; 100], Access::LOCAL_WRITE).unwrap();
    let dst = pd.reg_mr(200, Access::LOCAL_WRITE).unwrap();
    let q1 = pd
        .create_qp(&cq, &cq, QpType::Ud, QpCap::default())
        .unwrap();
    let q2 = pd
        .create_qp(&cq, &cq, QpType::Ud, QpCap::default())
        .unwrap();
    q1.ready_ud(0x1111, 1).unwrap();
    q2.ready_ud(0x1111, 2).unwrap();
    q2.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: vec![dst.sge(0, 140)],
    })
    .unwrap();
    let ah = pd.create_ah(AddressVector::new(a.gid(0).unwrap())).unwrap();
    q1.post_send(&wr::ud_send(2, src.sge(0, 100), ah.dest(q2.qpn(), 0x1111)))
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(cq.wait_one(Duration::from_secs(5)).expect("completion"));
    }
    let recv = got.iter().find(|w| w.wr_id == 1).expect("receive");
    assert_eq!(recv.status, WcStatus::Success);
    assert_eq!(recv.byte_len, 140);
    assert_eq!(recv.src_qp, q1.qpn());
    assert_eq!(dst.to_vec()[40..140], vec![9u8; 100][..]);
}

//! The completion notification is a file descriptor: armed, it polls readable when a
//! completion arrives, so C completion channels and epoll loops can wait on it.

use std::os::fd::RawFd;
use std::time::Duration;

use ferroce::verbs::*;

fn readable(fd: RawFd, timeout: Duration) -> bool {
    ferroce::link::eventfd::poll_readable(&[fd], Some(timeout)).unwrap() & 1 != 0
}

#[test]
fn an_armed_completion_fd_wakes_a_poller() {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let src = pd_a.reg_mr_with(vec![7u8; 32], Access::empty()).unwrap();
    let dst = pd_b.reg_mr(32, Access::LOCAL_WRITE).unwrap();
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
        .unwrap();
    qp_b.init(Access::LOCAL_WRITE, 0).unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 5, 6))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 6, 5))
        .unwrap();

    let fd = b.completion_fd();
    b.ack_notify();
    b.req_notify();
    assert!(!readable(fd, Duration::ZERO), "nothing completed yet");
    qp_b.post_recv(&RecvWr {
        wr_id: 3,
        sg_list: vec![dst.sge(0, 32)],
    })
    .unwrap();
    qp_a.post_send(&wr::send(1, src.sge(0, 32))).unwrap();
    assert!(
        readable(fd, Duration::from_secs(5)),
        "the receive completion wakes the poller"
    );
    let mut wcs = Vec::new();
    assert_eq!(cq_b.poll(&mut wcs, 4), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::Success));
    assert_eq!(dst.to_vec(), vec![7u8; 32]);
    b.ack_notify();
    assert!(
        !readable(fd, Duration::ZERO),
        "acknowledged and not re-armed"
    );
}

//! Completion channels: a CQ attached to a channel reports one event per notification
//! request, to that channel only, and solicited-only requests wait for a solicited
//! message — the semantics `ibv_req_notify_cq` and `ibv_get_cq_event` give C programs.

use std::os::fd::RawFd;
use std::time::Duration;

use ferroce::verbs::*;

fn readable(fd: RawFd, timeout: Duration) -> bool {
    ferroce::link::eventfd::poll_readable(&[fd], Some(timeout)).unwrap() & 1 != 0
}

struct Pair {
    _a: Context,
    _b: Context,
    qp_a: QueuePair,
    qp_b: QueuePair,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    src: MemoryRegion,
    dst: MemoryRegion,
}

fn pair() -> Pair {
    pair_of(QpType::Rc)
}

/// Two QPs of `qp_type` (RC or UC) connected over the in-memory wire.
fn pair_of(qp_type: QpType) -> Pair {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let src = pd_a.reg_mr_with(vec![7u8; 32], Access::empty()).unwrap();
    let dst = pd_b.reg_mr(32, Access::LOCAL_WRITE).unwrap();
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, qp_type, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, qp_type, QpCap::default())
        .unwrap();
    qp_b.init(Access::LOCAL_WRITE, 0).unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 5, 6))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 6, 5))
        .unwrap();
    Pair {
        _a: a,
        _b: b,
        qp_a,
        qp_b,
        cq_a,
        cq_b,
        src,
        dst,
    }
}

impl Pair {
    fn send(&self, wr_id: u64, solicited: bool) {
        self.qp_b
            .post_recv(&RecvWr {
                wr_id,
                sg_list: vec![self.dst.sge(0, 32)],
            })
            .unwrap();
        let mut wr = wr::send(wr_id, self.src.sge(0, 32));
        if solicited {
            wr.flags |= SendFlags::SOLICITED;
        }
        self.qp_a.post_send(&wr).unwrap();
        let wc = self.cq_a.wait_one(Duration::from_secs(5)).expect("send");
        assert_eq!(wc.status, WcStatus::Success);
    }
}

#[test]
fn an_attached_cq_reports_one_event_per_request_on_its_channel() {
    let p = pair();
    let ch = CompletionChannel::new().unwrap();
    let other = CompletionChannel::new().unwrap();
    p.cq_b.attach_channel(&ch, 0xb0b);
    p.cq_b.req_notify(false).unwrap();
    assert!(!readable(ch.fd(), Duration::ZERO), "nothing completed yet");
    p.send(1, false);
    assert!(
        readable(ch.fd(), Duration::from_secs(5)),
        "event on the channel"
    );
    assert_eq!(ch.get_event().unwrap(), 0xb0b);
    assert!(
        !readable(other.fd(), Duration::ZERO),
        "other channel untouched"
    );
    // Not re-armed: the next completion makes no event.
    p.send(2, false);
    let mut wcs = Vec::new();
    while wcs.len() < 2 {
        p.cq_b.poll(&mut wcs, 2);
    }
    assert!(
        !readable(ch.fd(), Duration::from_millis(50)),
        "one event per request"
    );
    assert_eq!(ch.pending(), 0);
}

#[test]
fn solicited_only_waits_for_a_solicited_send() {
    let p = pair();
    let ch = CompletionChannel::new().unwrap();
    p.cq_b.attach_channel(&ch, 9);
    p.cq_b.req_notify(true).unwrap();
    p.send(1, false);
    let mut wcs = Vec::new();
    while wcs.is_empty() {
        p.cq_b.poll(&mut wcs, 1);
    }
    assert!(
        !readable(ch.fd(), Duration::from_millis(50)),
        "an unsolicited message does not fire a solicited-only request"
    );
    p.send(2, true);
    assert!(readable(ch.fd(), Duration::from_secs(5)));
    assert_eq!(ch.get_event().unwrap(), 9);
}

/// A UC send completes as its packet leaves, on the thread that sends it; the event its
/// completion fires goes out then too. Until 2026-12-03 it waited for the next frame or
/// timer to come in, and with nothing more to come (the last message of `ibv_uc_pingpong
/// -e` or `ibv_ud_pingpong -e`) never came: the program waited in `ibv_get_cq_event`
/// for good.
#[test]
fn a_uc_send_that_completes_as_it_leaves_fires_its_event() {
    let p = pair_of(QpType::Uc);
    let ch = CompletionChannel::new().unwrap();
    p.cq_a.attach_channel(&ch, 0xa);
    p.qp_b
        .post_recv(&RecvWr {
            wr_id: 1,
            sg_list: vec![p.dst.sge(0, 32)],
        })
        .unwrap();
    p.cq_a.req_notify(false).unwrap();
    p.qp_a.post_send(&wr::send(1, p.src.sge(0, 32))).unwrap();
    assert!(
        readable(ch.fd(), Duration::from_secs(5)),
        "no event for the send's completion"
    );
    assert_eq!(ch.get_event().unwrap(), 0xa);
    let mut wcs = Vec::new();
    p.cq_a.poll(&mut wcs, 1);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
}

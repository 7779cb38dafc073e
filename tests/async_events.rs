//! Asynchronous events: a QP that fails by itself (retries exhausted) and a CQ that
//! overflows are reported to subscribers once each; a QP the user moves to ERR is not. The
//! port's events follow its link, and a link whose interface went away raises
//! DEVICE_FATAL once.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferroce::link::eventfd::EventFd;
use ferroce::link::{Link, MemoryLink};
use ferroce::net::gid::GidTable;
use ferroce::net::neigh::StaticResolver;
use ferroce::verbs::*;

#[derive(Default)]
struct Collect(Mutex<Vec<AsyncEvent>>);

impl AsyncEventSink for Collect {
    fn async_event(&self, event: AsyncEvent) {
        self.0.lock().unwrap().push(event);
    }
}

fn wait_for(c: &Collect, what: impl Fn(&[AsyncEvent]) -> bool) -> Vec<AsyncEvent> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = c.0.lock().unwrap().clone();
        if what(&got) || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_qp_that_fails_by_itself_raises_qp_fatal_and_user_errors_do_not() {
    let (a, _b) = Context::memory_pair().unwrap();
    let events = Arc::new(Collect::default());
    let sink: Arc<dyn AsyncEventSink> = events.clone();
    a.subscribe_async_events(&sink);
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(16).unwrap();
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let lonely = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    let user = pd
        .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
        .unwrap();
    // A peer QP that does not exist: every try times out, and the retries run out fast.
    let mut p = RcPath::new("::ffff:10.0.0.2".parse().unwrap(), 0xabcde, 1, 1);
    p.timeout = 1;
    p.retry_cnt = 0;
    lonely.connect(&p).unwrap();
    user.connect(&p).unwrap();
    let mut err = user.query().unwrap();
    err.qp_state = QpState::Err;
    user.modify(&err, QpAttrMask::STATE).unwrap();
    lonely.post_send(&wr::send(1, mr.sge(0, 8))).unwrap();
    let wc = cq.wait_one(Duration::from_secs(5)).expect("a completion");
    assert_eq!(wc.status, WcStatus::RetryExcErr);
    let got = wait_for(&events, |e| !e.is_empty());
    assert_eq!(got, vec![AsyncEvent::QpFatal(lonely.qpn())]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        events.0.lock().unwrap().len(),
        1,
        "once, and none for the user's ERR"
    );
}

#[test]
fn a_cq_that_overflows_raises_cq_err_once() {
    let (a, _b) = Context::memory_pair().unwrap();
    let events = Arc::new(Collect::default());
    let sink: Arc<dyn AsyncEventSink> = events.clone();
    a.subscribe_async_events(&sink);
    let pd = a.alloc_pd().unwrap();
    let small = a.create_cq(1).unwrap();
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let qp = pd
        .create_qp(&small, &small, QpType::Rc, QpCap::default())
        .unwrap();
    qp.init(Access::LOCAL_WRITE, 0).unwrap();
    for i in 0..3 {
        qp.post_recv(&RecvWr {
            wr_id: i,
            sg_list: vec![mr.sge(0, 8)],
        })
        .unwrap();
    }
    // Moving to ERR flushes three receives into a CQ of one.
    let mut err = qp.query().unwrap();
    err.qp_state = QpState::Err;
    qp.modify(&err, QpAttrMask::STATE).unwrap();
    let got = wait_for(&events, |e| !e.is_empty());
    assert_eq!(got, vec![AsyncEvent::CqErr(small.id())]);
}

/// An in-memory link whose state the test sets, as rtnetlink would report it.
struct Flaky {
    inner: MemoryLink,
    changed: EventFd,
    up: AtomicBool,
    gone: AtomicBool,
}

impl Flaky {
    fn set(&self, up: bool, gone: bool) {
        self.up.store(up, SeqCst);
        self.gone.store(gone, SeqCst);
        self.changed.wake();
    }
}

impl Link for Flaky {
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn send(&self, frame: &[u8]) -> std::io::Result<bool> {
        self.inner.send(frame)
    }
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        self.inner.recv(buf)
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
    fn state_fd(&self) -> Option<RawFd> {
        Some(self.changed.as_raw_fd())
    }
    fn is_up(&self) -> bool {
        self.changed.drain();
        self.up.load(SeqCst)
    }
    fn is_gone(&self) -> bool {
        self.gone.load(SeqCst)
    }
}

/// The port's events follow the link: PORT_ERR when it goes down, PORT_ACTIVE when it
/// comes back, and when its interface goes away PORT_ERR then DEVICE_FATAL, once,
/// however many notifications follow.
#[test]
fn a_link_that_goes_away_raises_port_err_then_device_fatal_once() {
    use AsyncEvent::{DeviceFatal, PortActive, PortErr};
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let (link, _peer) = MemoryLink::pair(MAC, [2, 0, 0, 0, 0, 2]).unwrap();
    let flaky = Arc::new(Flaky {
        inner: link,
        changed: EventFd::new().unwrap(),
        up: true.into(),
        gone: false.into(),
    });
    let attr = DeviceAttr {
        name: "flaky0".into(),
        node_guid: 1,
        mac: MAC,
        netdev_mtu: 1500,
        active_mtu: Mtu::Mtu1024,
        gids: GidTable::from_addrs(&[ip]),
    };
    let resolver = Arc::new(StaticResolver::new([(ip, MAC)]));
    let a = Context::with_link(attr, flaky.clone(), resolver).unwrap();
    let events = Arc::new(Collect::default());
    let sink: Arc<dyn AsyncEventSink> = events.clone();
    a.subscribe_async_events(&sink);
    assert!(a.port_active() && !a.device_fatal());
    flaky.set(false, false);
    assert_eq!(wait_for(&events, |e| !e.is_empty()), [PortErr]);
    assert!(!a.port_active() && !a.device_fatal(), "down is not dead");
    flaky.set(true, false);
    assert_eq!(wait_for(&events, |e| e.len() >= 2), [PortErr, PortActive]);
    flaky.set(false, true);
    assert_eq!(
        wait_for(&events, |e| e.len() >= 4),
        [PortErr, PortActive, PortErr, DeviceFatal]
    );
    assert!(!a.port_active() && a.device_fatal());
    // Later notifications (about other interfaces, say) raise nothing more.
    flaky.set(false, true);
    flaky.set(false, true);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        *events.0.lock().unwrap(),
        [PortErr, PortActive, PortErr, DeviceFatal]
    );
}

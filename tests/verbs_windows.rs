//! Memory windows through the Rust API: a peer writes through a window's key into
//! exactly the window's bytes, and loses access when the window is invalidated or
//! dropped, while the region stays registered.

use std::time::Duration;

use ferroce::verbs::*;

struct Pair {
    pd_a: ProtectionDomain,
    pd_b: ProtectionDomain,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    qp_a: QueuePair,
    qp_b: QueuePair,
    _ctx: (Context, Context),
}

fn pair() -> Pair {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
        .unwrap();
    qp_b.init(Access::LOCAL_WRITE | Access::REMOTE_WRITE, 0)
        .unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 1, 2))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 2, 1))
        .unwrap();
    Pair {
        pd_a,
        pd_b,
        cq_a,
        cq_b,
        qp_a,
        qp_b,
        _ctx: (a, b),
    }
}

impl Pair {
    fn write(&self, data: &[u8], addr: u64, rkey: u32) -> WcStatus {
        let src = self
            .pd_a
            .reg_mr_with(data.to_vec(), Access::empty())
            .unwrap();
        self.qp_a
            .post_send(&wr::rdma_write(9, src.sge(0, data.len()), addr, rkey))
            .unwrap();
        let wc = self
            .cq_a
            .wait_one(Duration::from_secs(5))
            .expect("completion");
        wc.status
    }

    /// Posts `w` on B's QP and returns its completion.
    fn on_b(&self, w: &SendWr) -> WorkCompletion {
        self.qp_b.post_send(w).unwrap();
        self.cq_b
            .wait_one(Duration::from_secs(5))
            .expect("completion")
    }
}

#[test]
fn a_type2_window_opens_part_of_a_region_until_it_is_invalidated() {
    let p = pair();
    let mr = p
        .pd_b
        .reg_mr(256, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let mw = p.pd_b.alloc_mw(MwType::Type2).unwrap();
    let key = next_rkey(mw.rkey());
    let wc = p.on_b(&mw.bind_wr(1, key, mr.lkey(), mr.addr() + 64, 64, Access::REMOTE_WRITE));
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(mw.rkey(), key);
    assert_eq!(p.write(b"window", mr.addr() + 100, key), WcStatus::Success);
    assert_eq!(&mr.to_vec()[100..106], b"window");
    assert!(mr.has_windows());
    let inv = SendWr {
        wr_id: 2,
        opcode: WrOpcode::LocalInv,
        invalidate_rkey: key,
        flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    let wc = p.on_b(&inv);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    assert!(!mr.has_windows());
    assert_eq!(
        p.write(b"late", mr.addr() + 100, key),
        WcStatus::RemAccessErr
    );
    assert_eq!(&mr.to_vec()[100..106], b"window");
}

#[test]
fn a_dropped_window_key_opens_nothing() {
    let p = pair();
    let mr = p
        .pd_b
        .reg_mr(128, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let mw = p.pd_b.alloc_mw(MwType::Type1).unwrap();
    let key = next_rkey(mw.rkey());
    let wc = p.on_b(&mw.bind_wr(1, key, mr.lkey(), mr.addr(), 128, Access::REMOTE_WRITE));
    assert_eq!(wc.status, WcStatus::Success);
    drop(mw);
    assert!(!mr.has_windows());
    assert_eq!(p.write(b"x", mr.addr(), key), WcStatus::RemAccessErr);
    assert_eq!(mr.to_vec(), vec![0; 128]);
}

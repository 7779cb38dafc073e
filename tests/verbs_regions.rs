//! Memory regions are views of memory the application owns: RDMA lands in the
//! application's buffer itself (owned, borrowed for a scope, or raw), and a region's memory
//! is never touched once it is deregistered. Memory windows open part of a region to a
//! peer until they are invalidated or dropped, while the region stays registered.

use std::time::Duration;

use ferroce::verbs::*;

/// Two connected RC QPs on an in-memory pair.
struct Pair {
    a: Context,
    b: Context,
    pd_a: ProtectionDomain,
    pd_b: ProtectionDomain,
    cq_a: CompletionQueue,
    qp_a: QueuePair,
    qp_b: QueuePair,
    cq_b: CompletionQueue,
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
    qp_b.init(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        0,
    )
    .unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 1, 2))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 2, 1))
        .unwrap();
    Pair {
        a,
        b,
        pd_a,
        pd_b,
        cq_a,
        qp_a,
        qp_b,
        cq_b,
    }
}

impl Pair {
    /// WRITEs `data` from a fresh source region of `a` to `addr`/`rkey` of `b`.
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
        assert_eq!(wc.wr_id, 9);
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
fn any_owned_buffer_is_registered_in_place_and_given_back() {
    let p = pair();
    let buf: Box<[u8]> = vec![0u8; 64].into_boxed_slice();
    let mr = p
        .pd_b
        .reg_mr_with(buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        p.write(b"in place", mr.addr() + 3, mr.rkey()),
        WcStatus::Success
    );
    // The application reads its buffer without the device (the region's own lock).
    assert_eq!(mr.with_bytes(|b| b[3..11].to_vec()), b"in place");
    mr.with_bytes_mut(|b| b[0] = 0xee);
    let back: Box<[u8]> = mr.into_inner().unwrap();
    assert_eq!(&back[..11], b"\xee\0\0in place");
    let _ = (&p.a, &p.b);
}

#[test]
fn a_borrowed_buffer_receives_rdma_and_is_released_at_scope_end() {
    let p = pair();
    let mut buf = vec![0u8; 256];
    let (addr, rkey) = p.pd_b.scope(|s| {
        let mr = s
            .reg_mr(&mut buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!(
            p.write(&[0x5a; 100], mr.addr() + 10, mr.rkey()),
            WcStatus::Success
        );
        let mut seen = [0u8; 2];
        mr.read(109, &mut seen).unwrap();
        assert_eq!(seen, [0x5a, 0]);
        let keys = (mr.addr(), mr.rkey());
        // Even a region the program forgets is deregistered when the scope ends.
        std::mem::forget(mr);
        keys
    });
    // The WRITE landed in the application's own vector: no copy back was needed.
    assert_eq!(&buf[10..110], &[0x5a; 100][..]);
    assert_eq!(buf[9], 0);
    assert_eq!(buf[110], 0);
    // After the scope the key is dead: a peer's WRITE is refused, the buffer untouched.
    assert_eq!(p.write(&[1; 16], addr + 10, rkey), WcStatus::RemAccessErr);
    assert_eq!(&buf[10..26], &[0x5a; 16][..]);
}

#[test]
fn raw_memory_is_the_callers_own_bytes_until_the_region_is_dropped() {
    let p = pair();
    let mut buf = vec![0u8; 128];
    // SAFETY: `buf` outlives the region and is not used through a reference while the
    // region lives (it is read only after `drop(mr)`).
    let mr = unsafe {
        p.pd_b.reg_mr_raw(
            buf.as_mut_ptr(),
            buf.len(),
            Some(0x7000),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    assert_eq!((mr.addr(), mr.len()), (0x7000, 128));
    let rkey = mr.rkey();
    assert_eq!(p.write(b"raw", 0x7000 + 125, rkey), WcStatus::Success);
    drop(mr);
    assert_eq!(&buf[125..], b"raw");
    assert_eq!(
        p.write(b"x", 0x7000, rkey),
        WcStatus::RemAccessErr,
        "after deregistration"
    );
    assert_eq!(buf[0], 0);
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

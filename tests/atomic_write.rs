//! Atomic writes through the whole library (`verbs::wr::atomic_write`, the driver, frames
//! on an in-memory link) into both kinds of region memory a responder may have: an owned
//! buffer and raw memory (the C ABI's kind, stored through a CPU atomic).

use std::time::Duration;

use ferroce::verbs::*;

#[test]
fn atomic_writes_land_in_owned_and_raw_memory() {
    let (a, b) = Context::memory_pair().unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
        .unwrap();
    let write = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    qp_b.init(write, 0).unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 1, 2))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 2, 1))
        .unwrap();

    let owned = pd_b.reg_mr_with(vec![0u8; 64], write).unwrap();
    let mut raw_bytes = vec![0u64; 8];
    // SAFETY: `raw_bytes` outlives the region (dropped below, before it) and is not used
    // through a reference while the region lives.
    let raw = unsafe { pd_b.reg_mr_raw(raw_bytes.as_mut_ptr().cast(), 64, None, write) }.unwrap();

    let wrs = [
        wr::atomic_write(1, owned.addr() + 8, owned.rkey(), *b"owned!!!"),
        wr::atomic_write(2, raw.addr() + 56, raw.rkey(), *b"raw mem!"),
        // Refused by the responder: an address that is not 8-byte aligned cannot be
        // posted, so the key is wrong instead (remote access error).
        wr::atomic_write(3, owned.addr(), owned.rkey() ^ 0x100, [9; 8]),
    ];
    for w in &wrs {
        qp_a.post_send(w).unwrap();
    }
    let misaligned = wr::atomic_write(4, owned.addr() + 4, owned.rkey(), [1; 8]);
    assert!(qp_a.post_send(&misaligned).is_err());
    for (id, status) in [(1, WcStatus::Success), (2, WcStatus::Success)] {
        let wc = cq_a.wait_one(Duration::from_secs(10)).expect("completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (id, status, WcOpcode::AtomicWrite)
        );
    }
    let wc = cq_a.wait_one(Duration::from_secs(10)).expect("completion");
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::RemAccessErr));

    let mut got = [0u8; 64];
    owned.read(0, &mut got).unwrap();
    assert_eq!(&got[8..16], b"owned!!!");
    assert!(
        got[..8].iter().chain(&got[16..]).all(|&x| x == 0),
        "{got:?}"
    );
    drop(raw);
    let raw_got: Vec<u8> = raw_bytes.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(&raw_got[56..], b"raw mem!");
    assert!(raw_got[..56].iter().all(|&x| x == 0));
}

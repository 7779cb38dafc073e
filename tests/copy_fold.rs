//! Payloads folded into the ICRC while they are copied into the frame, with this CPU's
//! kernel (`ferroce::link::copy_fold`), from each kind of region memory: an owned buffer
//! and raw memory (the C ABI's kind). WRITEs and READ responses must reach the peer with
//! ICRCs it accepts and the data intact. Where the CPU has no kernel (or the ICRC engine
//! is the table), nothing is folded, and the test says so in its output.

use std::time::Duration;

use ferroce::verbs::*;

fn counter(ctx: &Context, name: &str) -> u64 {
    ctx.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn pattern(len: usize, mut x: u32) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn folded_writes_and_read_responses_arrive_intact_from_owned_and_raw_memory() {
    // A debug build's crc32fast can lose the engine timing to the table; fold whatever the
    // build. This binary runs this one test, so no other thread reads the environment.
    std::env::set_var("FERROCE_ICRC", "simd");
    std::env::remove_var("FERROCE_COPY_FOLD");
    let (a, b) = Context::memory_pair().unwrap();
    let engine = a.icrc_engine();
    eprintln!("icrc: {engine}");
    let folding = engine.contains("copy fold on");
    let kernel = ferroce::link::copy_fold::kernel();
    assert_eq!(folding, kernel.is_some(), "{engine}");
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, QpType::Rc, QpCap::default())
        .unwrap();
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, QpType::Rc, QpCap::default())
        .unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    qp_b.init(all, 0).unwrap();
    qp_a.connect(&RcPath::new(b.gid(0).unwrap(), qp_b.qpn(), 1, 2))
        .unwrap();
    qp_b.connect(&RcPath::new(a.gid(0).unwrap(), qp_a.qpn(), 2, 1))
        .unwrap();

    const LEN: usize = 65_536 + 777;
    let data = pattern(LEN, 0x51ed_270b);
    let owned = pd_a.reg_mr_with(data.clone(), Access::empty()).unwrap();
    let mut raw_src = data.clone();
    raw_src.reverse();
    // SAFETY: `raw_src` outlives the region (dropped below, before it) and is not used
    // through a reference while the region lives.
    let raw = unsafe { pd_a.reg_mr_raw(raw_src.as_mut_ptr(), LEN, None, Access::empty()) }.unwrap();
    let dst = pd_b.reg_mr_with(vec![0u8; 2 * LEN], all).unwrap();
    let back = pd_a
        .reg_mr_with(vec![0u8; 2 * LEN], Access::LOCAL_WRITE)
        .unwrap();

    let (addr, rkey) = (dst.addr(), dst.rkey());
    qp_a.post_send(&wr::rdma_write(1, owned.sge(0, LEN), addr, rkey))
        .unwrap();
    qp_a.post_send(&wr::rdma_write(2, raw.sge(0, LEN), addr + LEN as u64, rkey))
        .unwrap();
    qp_a.post_send(&wr::rdma_read(3, back.sge(0, 2 * LEN), addr, rkey))
        .unwrap();
    for id in 1..=3 {
        let wc = cq_a.wait_one(Duration::from_secs(10)).expect("completion");
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
    drop(raw);
    let mut want = data.clone();
    want.extend(data.iter().rev());
    let mut got = vec![0u8; 2 * LEN];
    dst.read(0, &mut got).unwrap();
    assert!(got == want, "the WRITEs' data");
    back.read(0, &mut got).unwrap();
    assert!(got == want, "the READ's data");

    assert_eq!(
        (counter(&a, "rx_icrc_err"), counter(&b, "rx_icrc_err")),
        (0, 0)
    );
    let (fa, fb) = (counter(&a, "tx_icrc_folded"), counter(&b, "tx_icrc_folded"));
    eprintln!("folded: {fa} WRITE packets, {fb} READ response packets");
    if folding {
        // Every packet: two WRITEs of 64 full packets and one of 777 bytes at MTU 1024,
        // READ responses of 129 full packets and one of 530, all above MIN_PAYLOAD.
        assert_eq!((fa, fb), (130, 130));
    } else {
        assert_eq!((fa, fb), (0, 0));
    }
}

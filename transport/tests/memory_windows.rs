//! Memory windows over the wire: a peer reaches exactly the window's bytes with the
//! window's current key, on the right QP, until the window is unbound, invalidated
//! (locally or by the peer's SEND with invalidate) or freed; binds take effect in
//! send-queue order and complete like other work requests.

mod common;

use common::*;
use ferroce_transport::testing::{bring_up, connect, create, create_in_pd, QpOpts, Side, Sim};
use ferroce_transport::{
    next_rkey, Access, Error, MrInfo, MwBind, MwId, MwType, PdId, SendWr, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};

/// A region the peer may reach only through windows (no remote rights of its own).
fn window_mr(sim: &mut Sim, s: Side, len: usize) -> MrInfo {
    sim.nodes[s.node]
        .reg_mr_with(
            s.pd,
            vec![0; len],
            None,
            Access::LOCAL_WRITE | Access::MW_BIND,
        )
        .expect("reg_mr")
}

fn bind_wr(id: u64, mw: MwId, rkey: u32, mr: &MrInfo, off: u64, len: u64) -> SendWr {
    SendWr::bind_mw(
        id,
        MwBind {
            mw,
            rkey,
            mr_lkey: mr.lkey,
            addr: mr.addr + off,
            len,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ,
        },
    )
}

fn write(
    sim: &mut Sim,
    a: Side,
    id: u64,
    src: &MrInfo,
    len: u32,
    addr: u64,
    rkey: u32,
) -> WcStatus {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, vec![sge(src, 0, len)]);
    w.remote_addr = addr;
    w.rkey = rkey;
    sim.nodes[a.node].post_send(sim.now, a.qpn, &w).unwrap();
    let wcs = wait_wcs(sim, a, 1);
    assert_eq!(wcs.len(), 1, "one completion for WRITE {id}");
    assert_eq!(wcs[0].wr_id, id);
    wcs[0].status
}

#[test]
fn a_type2_window_admits_writes_until_the_peer_invalidates_it() {
    let mut sim = Sim::new(1, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let data = pattern(5, 300);
    let src = mr(&mut sim, a, data.clone());
    let target = window_mr(&mut sim, b, 1024);
    let (mw, key0) = sim.nodes[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    let key = next_rkey(key0);
    sim.nodes[1]
        .post_send(sim.now, b.qpn, &bind_wr(7, mw, key, &target, 256, 512))
        .unwrap();
    let wcs = wait_wcs(&mut sim, b, 1);
    assert_ok(&wcs);
    assert_eq!(wcs[0].opcode, WcOpcode::BindMw);
    assert_eq!(sim.nodes[1].mw_info(mw).map(|i| i.2), Some(key));
    // Through the window, inside it: the bytes land where the window says.
    assert_eq!(
        write(&mut sim, a, 1, &src, 300, target.addr + 300, key),
        WcStatus::Success
    );
    assert_eq!(
        &sim.nodes[1].mr_bytes(target.lkey).unwrap()[300..600],
        &data[..]
    );
    // The region cannot go while the window is bound.
    assert!(sim.nodes[1].dereg_mr(target.lkey).is_err());
    // A's SEND with invalidate revokes the key; B's receive says which.
    let rbuf = mr(&mut sim, b, vec![0; 64]);
    post_recv(&mut sim, b, 50, vec![sge(&rbuf, 0, 64)]);
    let mut inv = send_wr(2, WrOpcode::SendWithInv, vec![sge(&src, 0, 16)]);
    inv.invalidate_rkey = key;
    sim.nodes[0].post_send(sim.now, a.qpn, &inv).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));
    let rx = wait_wcs(&mut sim, b, 1);
    assert_ok(&rx);
    assert!(rx[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(rx[0].invalidated_rkey, key);
    assert_eq!(
        write(&mut sim, a, 3, &src, 8, target.addr + 300, key),
        WcStatus::RemAccessErr
    );
    assert!(sim.nodes[1].counters().rx_invalidate_refused == 0);
    assert!(sim.nodes[1].dereg_mr(target.lkey).is_ok());
}

#[test]
fn window_keys_open_only_the_window_on_its_qp() {
    let mut sim = Sim::new(2, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    // A second connection between the same nodes, its B end in B's first PD.
    let o = QpOpts::default();
    let a2 = create(&mut sim, 0, &o);
    let b2 = create_in_pd(&mut sim, 1, b.pd, &o);
    let (g0, g1) = (sim.gid(0), sim.gid(1));
    bring_up(&mut sim, a2, g1, b2.qpn, &o, 0);
    bring_up(&mut sim, b2, g0, a2.qpn, &o, 1);
    let src = mr(&mut sim, a, pattern(1, 64));
    let src2 = mr(&mut sim, a2, pattern(2, 64));
    let target = window_mr(&mut sim, b, 1024);
    let (mw, key0) = sim.nodes[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    let key = next_rkey(key0);
    sim.nodes[1]
        .post_send(sim.now, b.qpn, &bind_wr(1, mw, key, &target, 0, 128))
        .unwrap();
    assert_ok(&wait_wcs(&mut sim, b, 1));
    // Past the window's end: refused, though the region goes on.
    assert_eq!(
        write(&mut sim, a, 1, &src, 64, target.addr + 100, key),
        WcStatus::RemAccessErr
    );
    // From a QP the window is not bound to: refused too.
    assert_eq!(
        write(&mut sim, a2, 2, &src2, 8, target.addr, key),
        WcStatus::RemAccessErr
    );
    assert_eq!(sim.nodes[1].mr_bytes(target.lkey).unwrap(), vec![0; 1024]);
}

#[test]
fn binds_and_local_invalidations_take_effect_in_send_queue_order() {
    let mut sim = Sim::new(3, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(9, 256));
    let local = mr(&mut sim, b, pattern(4, 4096));
    let target = window_mr(&mut sim, b, 256);
    let (mw1, k1) = sim.nodes[1].alloc_mw(b.pd, MwType::Type1).unwrap();
    let (mw2, k2) = sim.nodes[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    let peer = sim.nodes[0]
        .reg_mr_with(a.pd, vec![0; 4096], None, ALL)
        .unwrap();
    // B: a 4 KiB WRITE to A, then two binds and a local invalidation of the second,
    // all signaled: the binds complete after the WRITE, in order.
    let mut w = send_wr(10, WrOpcode::RdmaWrite, vec![sge(&local, 0, 4096)]);
    w.remote_addr = peer.addr;
    w.rkey = peer.rkey;
    let b1 = next_rkey(k1);
    let b2 = next_rkey(k2);
    let mut inv = send_wr(13, WrOpcode::LocalInv, vec![]);
    inv.invalidate_rkey = b2;
    for wr in [
        w,
        bind_wr(11, mw1, b1, &target, 0, 256),
        bind_wr(12, mw2, b2, &target, 0, 256),
        inv,
    ] {
        sim.nodes[1].post_send(sim.now, b.qpn, &wr).unwrap();
    }
    let wcs = wait_wcs(&mut sim, b, 4);
    assert_ok(&wcs);
    let seen: Vec<(u64, WcOpcode)> = wcs.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(
        seen,
        vec![
            (10, WcOpcode::RdmaWrite),
            (11, WcOpcode::BindMw),
            (12, WcOpcode::BindMw),
            (13, WcOpcode::LocalInv)
        ]
    );
    assert_eq!(sim.nodes[0].mr_bytes(peer.lkey).unwrap(), pattern(4, 4096));
    assert_eq!(
        write(&mut sim, a, 1, &src, 256, target.addr, b1),
        WcStatus::Success
    );
    assert_eq!(sim.nodes[1].mr_bytes(target.lkey).unwrap(), pattern(9, 256));
    // A type 1 window is closed by a bind of length 0; then its key fails.
    let mut unbind = bind_wr(14, mw1, next_rkey(b1), &target, 0, 0);
    unbind.bind_mw.as_mut().unwrap().mr_lkey = 0;
    sim.nodes[1].post_send(sim.now, b.qpn, &unbind).unwrap();
    assert_ok(&wait_wcs(&mut sim, b, 1));
    assert_eq!(
        write(&mut sim, a, 2, &src, 8, target.addr, next_rkey(b1)),
        WcStatus::RemAccessErr
    );
}

#[test]
fn a_forbidden_bind_fails_with_mw_bind_err_and_stale_keys_fail_remotely() {
    let mut sim = Sim::new(4, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src = mr(&mut sim, a, pattern(3, 64));
    let plain = mr(&mut sim, b, vec![0; 256]); // no MW_BIND
    let (mw, k) = sim.nodes[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    sim.nodes[1]
        .post_send(sim.now, b.qpn, &bind_wr(1, mw, next_rkey(k), &plain, 0, 64))
        .unwrap();
    let wcs = wait_wcs(&mut sim, b, 1);
    assert_eq!(wcs[0].status, WcStatus::MwBindErr);
    // The failed bind took B's QP to the error state; a fresh connection shows that a
    // freed window's key opens nothing.
    let (a2, b2) = connect(&mut sim, 0, 1, &QpOpts::default());
    let src2 = mr(&mut sim, a2, pattern(3, 64));
    let target = window_mr(&mut sim, b2, 256);
    let (mw2, k2) = sim.nodes[1].alloc_mw(b2.pd, MwType::Type1).unwrap();
    let open = bind_wr(2, mw2, next_rkey(k2), &target, 0, 256);
    sim.nodes[1].post_send(sim.now, b2.qpn, &open).unwrap();
    assert_ok(&wait_wcs(&mut sim, b2, 1));
    sim.nodes[1].dealloc_mw(mw2).unwrap();
    assert!(sim.nodes[1].dealloc_mw(mw2).is_err());
    let gone = write(&mut sim, a2, 1, &src2, 8, target.addr, next_rkey(k2));
    assert_eq!(gone, WcStatus::RemAccessErr);
    let _ = src;
    assert_eq!(
        sim.nodes[1].alloc_mw(PdId(99), MwType::Type1).err(),
        Some(Error::InvalidPd)
    );
}

#[test]
fn a_failing_bind_behind_a_good_one_completes_after_it() {
    let mut sim = Sim::new(5, 2, false);
    let (_a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let target = window_mr(&mut sim, b, 256);
    let plain = mr(&mut sim, b, vec![0; 256]); // no MW_BIND
    let (mw1, k1) = sim.nodes[1].alloc_mw(b.pd, MwType::Type1).unwrap();
    let (mw2, k2) = sim.nodes[1].alloc_mw(b.pd, MwType::Type2).unwrap();
    for wr in [
        bind_wr(1, mw1, next_rkey(k1), &target, 0, 64),
        bind_wr(2, mw2, next_rkey(k2), &plain, 0, 64),
    ] {
        sim.nodes[1].post_send(sim.now, b.qpn, &wr).unwrap();
    }
    let wcs = wait_wcs(&mut sim, b, 2);
    let seen: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(seen, vec![(1, WcStatus::Success), (2, WcStatus::MwBindErr)]);
}

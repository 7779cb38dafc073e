//! RC happy paths over a clean simulated network.

mod common;

use common::*;
use ferroce_transport::testing::{connect, QpOpts, Sim};
use ferroce_transport::{Mtu, WcFlags, WcOpcode, WrOpcode};

#[test]
fn rc_send_multi_packet_with_imm() {
    let mut sim = Sim::new(1, 2, false);
    let o = QpOpts {
        mtu: Mtu::Mtu256,
        ..Default::default()
    };
    let (a, b) = connect(&mut sim, 0, 1, &o);
    let data = pattern(7, 1000);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 2048]);
    post_recv(&mut sim, b, 99, vec![sge(&dst, 0, 2048)]);
    let mut wr = send_wr(1, WrOpcode::SendWithImm, vec![sge(&src, 0, 1000)]);
    wr.imm_data = 0xdead_beef;
    sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
    let wa = wait_wcs(&mut sim, a, 1);
    let wb = wait_wcs(&mut sim, b, 1);
    assert_ok(&wa);
    assert_ok(&wb);
    assert_eq!(wa[0].wr_id, 1);
    assert_eq!(wa[0].opcode, WcOpcode::Send);
    assert_eq!(wb[0].wr_id, 99);
    assert_eq!(wb[0].byte_len, 1000);
    assert_eq!(wb[0].imm_data, 0xdead_beef);
    assert!(wb[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(&sim.nodes[1].mr_bytes(dst.lkey).unwrap()[..1000], &data[..]);
    // 4 packets of 256 bytes: 4 sent by A, at least one ACK back.
    assert!(sim.nodes[0].counters().sent_pkts >= 4);
    assert!(sim.nodes[1].counters().sent_pkts >= 1);
}

#[test]
fn rc_write_read_and_atomics() {
    let mut sim = Sim::new(2, 2, true);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let data = pattern(3, 5000);
    let la = mr(&mut sim, a, data.clone());
    let rb = mr(&mut sim, b, vec![0; 8192]);
    // WRITE 5000 bytes, then READ them back into another region.
    let mut w = send_wr(1, WrOpcode::RdmaWrite, vec![sge(&la, 0, 5000)]);
    w.remote_addr = rb.addr + 100;
    w.rkey = rb.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &w).unwrap();
    let back = mr(&mut sim, a, vec![0; 5000]);
    let mut r = send_wr(2, WrOpcode::RdmaRead, vec![sge(&back, 0, 5000)]);
    r.remote_addr = rb.addr + 100;
    r.rkey = rb.rkey;
    sim.nodes[0].post_send(sim.now, a.qpn, &r).unwrap();
    // Fetch-add and compare-swap on an 8-byte word.
    let res = mr(&mut sim, a, vec![0; 16]);
    let mut fa = send_wr(3, WrOpcode::AtomicFetchAdd, vec![sge(&res, 0, 8)]);
    fa.remote_addr = rb.addr + 8000;
    fa.rkey = rb.rkey;
    fa.compare_add = 5;
    sim.nodes[0].post_send(sim.now, a.qpn, &fa).unwrap();
    let mut cs = send_wr(4, WrOpcode::AtomicCmpSwp, vec![sge(&res, 8, 8)]);
    cs.remote_addr = rb.addr + 8000;
    cs.rkey = rb.rkey;
    cs.compare_add = 5;
    cs.swap = 77;
    sim.nodes[0].post_send(sim.now, a.qpn, &cs).unwrap();
    let wcs = wait_wcs(&mut sim, a, 4);
    assert_ok(&wcs);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    assert_eq!(wcs[1].opcode, WcOpcode::RdmaRead);
    assert_eq!(wcs[1].byte_len, 5000);
    assert_eq!(sim.nodes[0].mr_bytes(back.lkey).unwrap(), &data[..]);
    assert_eq!(
        &sim.nodes[1].mr_bytes(rb.lkey).unwrap()[100..5100],
        &data[..]
    );
    let r = sim.nodes[0].mr_bytes(res.lkey).unwrap();
    assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), 0);
    assert_eq!(u64::from_le_bytes(r[8..].try_into().unwrap()), 5);
    let word = &sim.nodes[1].mr_bytes(rb.lkey).unwrap()[8000..8008];
    assert_eq!(u64::from_le_bytes(word.try_into().unwrap()), 77);
}

/// Retired WQEs' gather lists are reused by later posts: each message must still gather
/// exactly its own SGEs, whatever list it was stored in (a longer one, an inline one).
#[test]
fn each_send_gathers_its_own_sges_whatever_list_it_reuses() {
    let mut sim = Sim::new(5, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let data = pattern(11, 3000);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 4 * 4096]);
    // (SGEs as (offset, length) in `src`, inline?)
    let messages: [(&[(u64, u32)], bool); 4] = [
        (&[(0, 100), (500, 200), (1000, 300)], false),
        (&[(2000, 50)], false),
        (&[(2500, 40), (2600, 8)], true),
        (&[(100, 7), (0, 5)], false),
    ];
    for (i, (sges, inline)) in messages.iter().enumerate() {
        let slot = i as u64 * 4096;
        post_recv(&mut sim, b, i as u64, vec![sge(&dst, slot, 4096)]);
        let list = sges.iter().map(|&(off, len)| sge(&src, off, len)).collect();
        let mut wr = send_wr(i as u64, WrOpcode::Send, list);
        if *inline {
            wr.flags |= ferroce_transport::SendFlags::INLINE;
        }
        sim.nodes[0].post_send(sim.now, a.qpn, &wr).unwrap();
        // One at a time, so that each post finds the last one's list retired.
        assert_ok(&wait_wcs(&mut sim, a, 1));
        let wb = wait_wcs(&mut sim, b, 1);
        assert_ok(&wb);
        let want: Vec<u8> = sges
            .iter()
            .flat_map(|&(off, len)| data[off as usize..(off + u64::from(len)) as usize].to_vec())
            .collect();
        assert_eq!(wb[0].byte_len as usize, want.len(), "message {i}");
        let got = &sim.nodes[1].mr_bytes(dst.lkey).unwrap()[slot as usize..][..want.len()];
        assert_eq!(got, &want[..], "message {i}");
    }
}

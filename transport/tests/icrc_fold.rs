//! Payloads folded into the ICRC while they are copied into the frame
//! (`ferroce_wire::icrc_fold`): with a kernel installed, WRITE payloads gathered from one
//! or several regions and READ responses carry ICRCs the peer accepts, and the data lands
//! intact. The reference kernel (copy, then crc32fast) stands in for the CPU's: every
//! kernel gives the same CRCs, and the `ferroce` crate's tests hold its kernel to it.

mod common;

use common::*;
use ferroce_transport::testing::{connect, QpOpts, Sim};
use ferroce_transport::{SendWr, WrOpcode};
use ferroce_wire::icrc_fold::{self, Fold};

#[test]
fn folded_payloads_carry_icrcs_the_peer_accepts() {
    // This test binary is its own process: installing here touches no other test file.
    icrc_fold::install(Fold::REFERENCE);
    assert!(icrc_fold::active().is_some());
    let mut sim = Sim::new(7, 2, false);
    let (a, b) = connect(&mut sim, 0, 1, &QpOpts::default());
    let data = pattern(11, 20_000);
    let src = mr(&mut sim, a, data.clone());
    let dst = mr(&mut sim, b, vec![0; 20_000]);
    let back = mr(&mut sim, a, vec![0; 20_000]);
    // One WRITE from one region (full packets, then a 3616-byte last one); one gathered
    // from two pieces of it, split inside a packet so one packet's CRC continues across
    // the pieces; a short one that is not folded (under MIN_PAYLOAD).
    let w1 = rdma_wr(
        1,
        WrOpcode::RdmaWrite,
        sge(&src, 0, 12_000),
        dst.addr,
        dst.rkey,
    );
    let w2 = SendWr {
        remote_addr: dst.addr + 12_000,
        rkey: dst.rkey,
        ..send_wr(
            2,
            WrOpcode::RdmaWrite,
            vec![sge(&src, 12_000, 1_500), sge(&src, 13_500, 6_400)],
        )
    };
    let w3 = rdma_wr(
        3,
        WrOpcode::RdmaWrite,
        sge(&src, 19_900, 100),
        dst.addr + 19_900,
        dst.rkey,
    );
    for w in [&w1, &w2, &w3] {
        sim.nodes[0].post_send(sim.now, a.qpn, w).unwrap();
    }
    assert_ok(&wait_wcs(&mut sim, a, 3));
    // Then READ it all back: the responder's packets are folded on node 1.
    let r = rdma_wr(
        4,
        WrOpcode::RdmaRead,
        sge(&back, 0, 20_000),
        dst.addr,
        dst.rkey,
    );
    sim.nodes[0].post_send(sim.now, a.qpn, &r).unwrap();
    assert_ok(&wait_wcs(&mut sim, a, 1));

    assert_eq!(sim.nodes[1].mr_bytes(dst.lkey).unwrap(), data);
    assert_eq!(sim.nodes[0].mr_bytes(back.lkey).unwrap(), data);
    let (c0, c1) = (sim.nodes[0].counters(), sim.nodes[1].counters());
    assert_eq!((c0.rx_icrc_err, c1.rx_icrc_err), (0, 0));
    // 12000 + 7900 bytes of WRITEs at MTU 1024: 12 + 8 packets of 256 bytes or more; the
    // 100-byte WRITE is hashed as before. 20 READ response packets.
    assert_eq!(c0.tx_icrc_folded, 20, "{c0:?}");
    assert_eq!(c1.tx_icrc_folded, 20, "{c1:?}");
}

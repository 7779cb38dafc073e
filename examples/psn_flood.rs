//! A blind spoofer for the "Security model" measurement in README.md: RC RDMA WRITE
//! requests with valid ICRCs and random PSNs, sent through AF_PACKET at a fixed rate
//! from a spoofed source address, either to a live QP or (for the control run) the same
//! frames to another UDP port, which costs the receiver the same parsing but can earn no
//! NAK.
//!
//! ```text
//! psn_flood IFACE SRC_IP DST_IP DST_MAC QPN RATE_PPS SECONDS [--other-port]
//! ```
//!
//! Used by `tests/netns/flood.sh`. Sends nothing but to DST_MAC on IFACE.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ferroce::link::af_packet::{RawSocket, RingUse};
use ferroce::link::bpf::{roce_filter, FilterSpec, Groups};
use ferroce::link::interface::Interface;
use ferroce::wire::{
    packet, BthRepr, DatagramRepr, EthernetRepr, ExtRepr, FrameRepr, IbRepr, IpRepr, Opcode, Psn,
    RethRepr,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 8 {
        eprintln!(
            "usage: psn_flood IFACE SRC_IP DST_IP DST_MAC QPN RATE_PPS SECONDS [--other-port]"
        );
        std::process::exit(2);
    }
    let iface = Interface::by_name(&args[1]).expect("interface");
    let src: Ipv4Addr = args[2].parse().expect("SRC_IP");
    let dst: Ipv4Addr = args[3].parse().expect("DST_IP");
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(args[4].split(':')) {
        *m = u8::from_str_radix(p, 16).expect("DST_MAC");
    }
    let qpn = u32::from_str_radix(args[5].trim_start_matches("0x"), 16).expect("QPN (hex)");
    let rate: u64 = args[6].parse().expect("RATE_PPS");
    let secs: u64 = args[7].parse().expect("SECONDS");
    let other_port = args.get(8).is_some_and(|a| a == "--other-port");
    let own_mac = iface.mac;
    // A bare AF_PACKET socket: no UDP 4791 reservation, so it can share a namespace
    // with the real client whose address it spoofs.
    // A sender only: its filter takes no QP's frames.
    let nothing = roce_filter(&FilterSpec {
        own_mac: iface.mac,
        outgoing_to_self: false,
        blocks: Some(Vec::new()),
        multicast: Groups::None,
    });
    let link = RawSocket::open(iface.index, 2048, RingUse::None, &nothing, false)
        .expect("AF_PACKET (root?)");

    let mut x: u64 = Instant::now().elapsed().as_nanos() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let payload = [0x5au8; 64];
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let gap = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let r = next();
        let bth = BthRepr {
            ack_req: true,
            pad_count: packet::pad_for(payload.len()),
            ..BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, Psn::new((r >> 8) as u32))
        };
        let ext = ExtRepr {
            reth: Some(RethRepr {
                va: next() & !0xfff,
                rkey: next() as u32,
                dma_len: payload.len() as u32,
            }),
            ..Default::default()
        };
        let f = FrameRepr {
            ethernet: EthernetRepr {
                src: own_mac,
                dst: mac,
                vlan: None,
            },
            datagram: DatagramRepr {
                ip: IpRepr::V4 {
                    src,
                    dst,
                    dscp: 0,
                    ecn: 0,
                    ttl: 64,
                    identification: r as u16,
                    dont_fragment: true,
                },
                src_port: 0xc000 | (r as u16 & 0x3fff),
                ib: IbRepr {
                    bth,
                    ext,
                    payload: &payload,
                },
            },
        };
        let n = f.emit(&mut buf).expect("emit");
        if other_port {
            // UDP destination port 4792: same size and cost, not RoCE.
            buf[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&4792u16.to_be_bytes());
        }
        let _ = link.send(&buf[..n]);
        sent += 1;
        let due = start + gap * sent as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    eprintln!(
        "psn_flood: {sent} frames in {:.1} s to QP {qpn:#x}{}",
        start.elapsed().as_secs_f64(),
        if other_port { " (UDP port 4792)" } else { "" }
    );
}

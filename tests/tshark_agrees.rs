//! An independent decoder agrees with ferroce: packets built by ferroce, written to a pcap,
//! are decoded by Wireshark's tshark as InfiniBand with the same opcode, QPN, PSN and
//! extension header fields, and nothing is marked malformed.
//!
//! tshark comes from the Debian package `tshark`, which the README's test command installs.
//! Its absence fails the test. On a machine without it, leave the test out by name so that
//! the summary shows it did not run: `cargo test -- --skip tshark_decodes_what_ferroce_emits`.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::Duration;

use ferroce::capture::PcapSink;
use ferroce::wire::opcode::HeaderSet;
use ferroce::wire::packet::pad_for;
use ferroce::wire::*;

struct Built {
    bytes: Vec<u8>,
    op: Opcode,
    qp: u32,
    psn: u32,
}

fn build(op: Opcode, i: u32, v6: bool, vlan: bool) -> Built {
    let h = op.headers();
    let payload: Vec<u8> = if op.has_payload() {
        (0..(i * 37 % 300)).map(|b| b as u8).collect()
    } else {
        vec![]
    };
    let qp = 0x11 + i;
    let psn = (0xfffff0 + i * 3) & 0xff_ffff;
    let ext = ExtRepr {
        deth: h.contains(HeaderSet::DETH).then_some(DethRepr {
            qkey: 0x11111111,
            src_qp: 0x20 + i,
        }),
        reth: h.contains(HeaderSet::RETH).then_some(RethRepr {
            va: 0x5606_905b_3000 + u64::from(i),
            rkey: 0xdc3,
            dma_len: 4100 + i,
        }),
        atomic_eth: h.contains(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x1000,
            rkey: 0x1234,
            swap_add: 7,
            compare: 9,
        }),
        aeth: h.contains(HeaderSet::AETH).then_some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 100 + i,
        }),
        atomic_ack_eth: h
            .contains(HeaderSet::ATOMIC_ACK_ETH)
            .then_some(AtomicAckEthRepr { orig: 42 }),
        immdt: h
            .contains(HeaderSet::IMMDT)
            .then_some(ImmDtRepr { imm: 0xdeadbeef }),
        ieth: h
            .contains(HeaderSet::IETH)
            .then_some(IethRepr { rkey: 0xabcd }),
        cnp: h.contains(HeaderSet::CNP).then_some(CnpRepr::default()),
    };
    let mut bth = if op == Opcode::CNP {
        cnp::bth(qp)
    } else {
        BthRepr::new(op, qp, Psn::new(psn))
    };
    bth.pad_count = pad_for(payload.len());
    bth.ack_req = i % 2 == 0 && op != Opcode::CNP;
    let ip = if v6 {
        IpRepr::V6 {
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }
    } else {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 77, 0, 1),
            dst: Ipv4Addr::new(10, 77, 0, 2),
            dscp: 0,
            ecn: 2,
            ttl: 64,
            identification: i as u16,
            dont_fragment: true,
        }
    };
    let repr = FrameRepr {
        ethernet: EthernetRepr {
            src: [2, 0, 10, 77, 0, 1],
            dst: [2, 0, 10, 77, 0, 2],
            vlan: vlan.then_some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 42,
            }),
        },
        datagram: DatagramRepr {
            ip,
            src_port: 0xc000 | i as u16,
            ib: IbRepr {
                bth,
                ext,
                payload: &payload,
            },
        },
    };
    let mut bytes = vec![0; repr.buffer_len()];
    repr.emit(&mut bytes).unwrap();
    Built {
        bytes,
        op,
        qp,
        psn: if op == Opcode::CNP { 0 } else { psn },
    }
}

#[test]
fn tshark_decodes_what_ferroce_emits() {
    let mut packets = Vec::new();
    for (i, op) in Opcode::all().enumerate() {
        let i = i as u32;
        packets.push(build(op, i, false, false));
        packets.push(build(op, i + 100, true, i % 3 == 0));
    }
    let dir = std::env::temp_dir().join(format!("ferroce-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("built.pcap");
    let mut sink = PcapSink::create(&path).unwrap();
    for (n, p) in packets.iter().enumerate() {
        sink.write(Duration::from_millis(n as u64), &p.bytes)
            .unwrap();
    }
    drop(sink.into_inner());

    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=;", "-E", "occurrence=f"])
        .args(["-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"])
        .args(["-e", "infiniband.bth.psn", "-e", "_ws.malformed", "-e", "_ws.expert.severity"])
        .args(["-e", "infiniband.reth.dmalen", "-e", "infiniband.aeth.msn", "-e", "infiniband.deth.q_key"])
        .output()
        .expect("tshark not found: install the Debian package `tshark` (the README's test command does)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), packets.len(), "tshark output:\n{text}");
    for (line, p) in lines.iter().zip(&packets) {
        let f: Vec<&str> = line.split(';').collect();
        let ctx = format!("{} ({:#x}): {line}", p.op.name(), p.op.value());
        assert_eq!(f[1], p.op.value().to_string(), "opcode: {ctx}");
        assert_eq!(
            u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap(),
            p.qp,
            "QPN: {ctx}"
        );
        assert_eq!(f[3], p.psn.to_string(), "PSN: {ctx}");
        assert_eq!(f[4], "", "marked malformed: {ctx}");
        // Expert severities: 8388608 is an error (4194304 a warning, which we also reject).
        assert!(
            !f[5].contains("8388608") && !f[5].contains("6291456"),
            "expert info: {ctx}"
        );
        let h = p.op.headers();
        if h.contains(HeaderSet::RETH) {
            assert!(f[6].parse::<u32>().unwrap() >= 4100, "RETH: {ctx}");
        }
        if h.contains(HeaderSet::AETH) {
            assert!(f[7].parse::<u32>().unwrap() >= 100, "AETH: {ctx}");
        }
        if h.contains(HeaderSet::DETH) {
            assert_eq!(
                u64::from_str_radix(f[8].trim_start_matches("0x"), 16).unwrap(),
                0x11111111,
                "DETH: {ctx}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

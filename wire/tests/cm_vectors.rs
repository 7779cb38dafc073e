//! Golden vectors of the communication manager: Linux's CM and rdma_cm between two rxe
//! devices (`tests/vectors/rxe-cm/`, made by `tests/interop/rxe-vm/tests/cm-golden.sh`).
//! Every MAD on QP1 in them must parse, emit back to the very same 256 bytes, and say what
//! the traffic around it shows: the QP numbers and PSNs the data packets then use, the
//! communication IDs each answer names, the service IDs of the ports the programs used.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use ferroce_wire::cm::rdma_cm::{self, IpHeader, PortSpace};
use ferroce_wire::cm::{Message, MsgKind, RejReason, Repr, SidrStatus, Transport};
use ferroce_wire::mad::{self, Mad};
use ferroce_wire::Frame;

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// A RoCE packet of a capture: who sent it, and what it is.
enum Seen {
    Cm {
        from_a: bool,
        repr: Box<Repr>,
    },
    Data {
        from_a: bool,
        dst_qp: u32,
        psn: u32,
        qkey: Option<u32>,
    },
}

fn read(name: &str) -> Vec<Seen> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors/rxe-cm")
        .join(name);
    let file = fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("classic pcap");
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet() {
        let data = p.expect("pcap record").data.into_owned();
        let Ok(frame) = Frame::parse(&data) else {
            continue; // ARP, IPv6 router solicitations, perftest's TCP
        };
        assert!(frame.icrc_ok(), "{name}: ICRC");
        let from_a = frame.datagram.src_gid() == A.to_ipv6_mapped();
        assert!(from_a || frame.datagram.src_gid() == B.to_ipv6_mapped());
        let ib = frame.ib();
        let bth = ib.bth();
        let qkey = ib.deth().map(|d| d.qkey());
        if bth.dest_qp() != mad::GSI_QPN {
            if ib.opcode().info().is_response() {
                continue; // ACKs and READ responses carry the requester's PSNs
            }
            out.push(Seen::Data {
                from_a,
                dst_qp: bth.dest_qp(),
                psn: bth.psn().value(),
                qkey,
            });
            continue;
        }
        let deth = ib.deth().expect("a MAD travels in a UD packet");
        assert_eq!((deth.qkey(), deth.src_qp()), (mad::GSI_QKEY, 1), "{name}");
        let payload = ib.payload();
        assert_eq!(payload.len(), mad::MAD_LEN, "{name}");
        let repr = Repr::parse(&Mad::new_checked(payload).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            repr.to_bytes(),
            payload,
            "{name}: {} re-emitted",
            repr.msg.name()
        );
        out.push(Seen::Cm {
            from_a,
            repr: Box::new(repr),
        });
    }
    out
}

fn cms(seen: &[Seen]) -> Vec<(bool, &Repr)> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Cm { from_a, repr } => Some((*from_a, &**repr)),
            Seen::Data { .. } => None,
        })
        .collect()
}

/// The first request packet (not an ACK or response) in one direction: (destination QP, PSN, Q_Key).
fn first_data(seen: &[Seen], a: bool) -> (u32, u32, Option<u32>) {
    seen.iter()
        .find_map(|s| match s {
            Seen::Data {
                from_a,
                dst_qp,
                psn,
                qkey,
            } if *from_a == a => Some((*dst_qp, *psn, *qkey)),
            _ => None,
        })
        .expect("data in that direction")
}

/// Checks an RC connection's set-up and tear-down; returns the REQ's rdma_cm header.
fn rc_connection(name: &str, port: u16) -> IpHeader {
    let seen = read(name);
    let cm = cms(&seen);
    let names: Vec<_> = cm.iter().map(|(a, r)| (*a, r.msg.name())).collect();
    assert_eq!(
        &names[..3],
        &[(true, "REQ"), (false, "REP"), (true, "RTU")],
        "{name}: {names:?}"
    );
    let (Message::Req(req), Message::Rep(rep), Message::Rtu(rtu)) =
        (&cm[0].1.msg, &cm[1].1.msg, &cm[2].1.msg)
    else {
        unreachable!()
    };
    assert_eq!(req.service_id, rdma_cm::service_id(PortSpace::TCP, port));
    assert_eq!(req.transport, Transport::Rc);
    assert_eq!(req.pkey, 0xffff);
    assert_eq!(req.primary.local_gid, A.to_ipv6_mapped().octets());
    assert_eq!(req.primary.remote_gid, B.to_ipv6_mapped().octets());
    assert_eq!(
        (req.primary.local_lid, req.primary.remote_lid),
        (0xffff, 0xffff)
    );
    assert_eq!(req.path_mtu, 3, "RoCE MTU 1024 on a 1500-byte veth");
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    assert_eq!(
        cm[1].1.tid, cm[0].1.tid,
        "the REP answers the REQ's transaction"
    );
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (req.local_comm_id, rep.local_comm_id)
    );
    // The requests that follow use what the REQ and REP announced: each side's Starting
    // PSN is where its own QP starts receiving.
    let (qp_ab, psn_ab, _) = first_data(&seen, true);
    let (qp_ba, psn_ba, _) = first_data(&seen, false);
    assert_eq!((qp_ab, psn_ab), (rep.local_qpn, rep.starting_psn), "{name}");
    assert_eq!((qp_ba, psn_ba), (req.local_qpn, req.starting_psn), "{name}");
    // Either side may end it (perftest opens a second connection and ends both); the DREQ
    // names the receiver's QP, the DREP echoes the IDs back.
    let ids = [req.local_comm_id, rep.local_comm_id];
    let (from_a, dreq) = cm
        .iter()
        .find_map(|(a, r)| match &r.msg {
            Message::Dreq(d) if ids.contains(&d.local_comm_id) => Some((*a, d)),
            _ => None,
        })
        .expect("a DREQ of this connection");
    let (receiver_qpn, sender_id, receiver_id) = if from_a {
        (rep.local_qpn, req.local_comm_id, rep.local_comm_id)
    } else {
        (req.local_qpn, rep.local_comm_id, req.local_comm_id)
    };
    assert_eq!(dreq.remote_qpn, receiver_qpn, "{name}");
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (sender_id, receiver_id)
    );
    let drep = cm.iter().find_map(|(a, r)| match &r.msg {
        Message::Drep(d) if d.local_comm_id == receiver_id => Some((*a, d)),
        _ => None,
    });
    let (drep_from_a, drep) = drep.expect("a DREP of this connection");
    assert_ne!(drep_from_a, from_a, "the DREP comes from the other side");
    assert_eq!(drep.remote_comm_id, sender_id);
    IpHeader::parse(&req.private_data).unwrap()
}

#[test]
fn rping_connects_and_disconnects() {
    let ip = rc_connection("cm_rping.pcap", 7471);
    assert_eq!((ip.src, ip.dst), (IpAddr::V4(A), IpAddr::V4(B)));
    assert_ne!(ip.src_port, 0);
}

#[test]
fn perftest_rdma_cm_mode_connects_and_disconnects() {
    let ip = rc_connection("cm_write_bw_R.pcap", 18515);
    assert_eq!((ip.src, ip.dst), (IpAddr::V4(A), IpAddr::V4(B)));
}

#[test]
fn a_port_nobody_listens_on_is_rejected() {
    let seen = read("cm_rej.pcap");
    let cm = cms(&seen);
    assert_eq!(cm.len(), 2);
    let (Message::Req(req), Message::Rej(rej)) = (&cm[0].1.msg, &cm[1].1.msg) else {
        panic!("REQ then REJ")
    };
    assert!(cm[0].0 && !cm[1].0);
    assert_eq!(req.service_id, rdma_cm::service_id(PortSpace::TCP, 7999));
    assert_eq!(rej.reason, RejReason::INVALID_SERVICE_ID);
    assert_eq!(rej.message_rejected, MsgKind::Req);
    assert_eq!(rej.remote_comm_id, req.local_comm_id);
    assert_eq!(cm[1].1.tid, cm[0].1.tid);
}

#[test]
fn udaddy_resolves_its_service_with_sidr() {
    let seen = read("cm_udaddy.pcap");
    let cm = cms(&seen);
    let reqs: Vec<_> = cm
        .iter()
        .filter_map(|(a, r)| match &r.msg {
            Message::SidrReq(q) => Some((*a, r.tid, q)),
            _ => None,
        })
        .collect();
    let reps: Vec<_> = cm
        .iter()
        .filter_map(|(a, r)| match &r.msg {
            Message::SidrRep(p) => Some((*a, r.tid, p)),
            _ => None,
        })
        .collect();
    assert_eq!(
        (reqs.len(), reps.len()),
        (2, 2),
        "udaddy -c 2: two connections"
    );
    for (a, tid, q) in &reqs {
        assert!(a);
        let (ps, _) = rdma_cm::split_service_id(q.service_id).unwrap();
        assert_eq!(ps, PortSpace::UDP);
        let ip = IpHeader::parse(&q.private_data).unwrap();
        assert_eq!((ip.src, ip.dst), (IpAddr::V4(A), IpAddr::V4(B)));
        let (_, rtid, p) = reps
            .iter()
            .find(|(_, _, p)| p.request_id == q.request_id)
            .expect("a SIDR REP for each SIDR REQ");
        assert_eq!(rtid, tid);
        assert_eq!(p.status, SidrStatus::OK);
        assert_eq!(p.service_id, q.service_id);
    }
    // The datagrams go to a QP and with the Q_Key a SIDR REP named.
    let (qp, _, qkey) = first_data(&seen, true);
    assert!(reps
        .iter()
        .any(|(_, _, p)| p.qpn == qp && Some(p.qkey) == qkey));
}

#[test]
fn gids_in_the_vectors_are_ipv4_mapped() {
    // A guard for the helper above: rxe's RoCE v2 GIDs for IPv4 are ::ffff:a.b.c.d.
    assert_eq!(
        A.to_ipv6_mapped(),
        Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a4d, 0x0001)
    );
}

//! Round trips of every CM message, the bit-field helpers, and the MADs the parser refuses.

use super::*;
use crate::mad::{Mad, MAD_LEN};
use proptest::prelude::*;

fn arr<const N: usize>(v: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    for (i, x) in a.iter_mut().enumerate() {
        *x = v[i % v.len()];
    }
    a
}

prop_compose! {
    fn path()(lids in any::<(u16, u16)>(), g in any::<[u8; 16]>(), fl in 0u32..1 << 20,
              rate in 0u8..64, tc: u8, hop: u8, sl in 0u8..16, local: bool, ack in 0u8..32)
              -> Path {
        Path { local_lid: lids.0, remote_lid: lids.1, local_gid: g, remote_gid: arr(&g[3..]),
               flow_label: fl, packet_rate: rate, traffic_class: tc, hop_limit: hop, sl,
               subnet_local: local, local_ack_timeout: ack }
    }
}

prop_compose! {
    fn req()(ids in any::<(u32, u64, u64, u32)>(), qpn in 0u32..1 << 24, rr: u8,
             e in (0u32..1 << 24, 0u32..1 << 24), id: u8, t in (0u8..32, 0u8..4, any::<bool>()),
             psn in 0u32..1 << 24, l in (0u8..32, 0u8..8), pkey: u16,
             m in (0u8..16, any::<bool>(), 0u8..8), r in (0u8..16, any::<bool>(), 0u8..8),
             p in path(), a in path(), sap: bool, pd in prop::collection::vec(any::<u8>(), 1..8))
             -> Req {
        Req { local_comm_id: ids.0, service_id: ids.1, local_ca_guid: ids.2, local_qkey: ids.3,
              local_qpn: qpn, responder_resources: rr, local_eecn: e.0, initiator_depth: id,
              remote_eecn: e.1, remote_cm_response_timeout: t.0,
              transport: [Transport::Rc, Transport::Uc, Transport::Rd, Transport::Reserved]
                  [usize::from(t.1)],
              end_to_end_flow_control: t.2, starting_psn: psn,
              local_cm_response_timeout: l.0, retry_count: l.1, pkey, path_mtu: m.0,
              rdc_exists: m.1, rnr_retry_count: m.2, max_cm_retries: r.0, srq: r.1,
              extended_transport: r.2, primary: p, alternate: a, sap_supported: sap,
              private_data: arr(&pd) }
    }
}

fn kind(k: u8) -> MsgKind {
    [
        MsgKind::Req,
        MsgKind::Rep,
        MsgKind::Other,
        MsgKind::Reserved,
    ][usize::from(k & 3)]
}

fn message() -> impl Strategy<Value = Message> {
    let pd = prop::collection::vec(any::<u8>(), 1..8);
    prop_oneof![
        req().prop_map(Message::Req),
        (
            any::<(u32, u32, u32, u64)>(),
            0u32..1 << 24,
            0u32..1 << 24,
            any::<(u8, u8)>(),
            (0u8..32, 0u8..4, any::<bool>()),
            (0u8..8, any::<bool>()),
            pd.clone()
        )
            .prop_map(|(ids, qpn, psn, res, a, r, pd)| Message::Rep(Rep {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                local_qkey: ids.2,
                local_qpn: qpn,
                local_eecn: psn ^ 1,
                starting_psn: psn,
                responder_resources: res.0,
                initiator_depth: res.1,
                target_ack_delay: a.0,
                failover_accepted: a.1,
                end_to_end_flow_control: a.2,
                rnr_retry_count: r.0,
                srq: r.1,
                local_ca_guid: ids.3,
                private_data: arr(&pd)
            })),
        (any::<(u32, u32, u16)>(), 0u8..4, 0u8..128, pd.clone()).prop_map(|(ids, k, len, pd)| {
            Message::Rej(Rej {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                message_rejected: kind(k),
                ari_len: len,
                reason: RejReason(ids.2),
                ari: arr(&pd[1..]
                    .repeat(2)
                    .iter()
                    .chain(&[7])
                    .copied()
                    .collect::<Vec<_>>()),
                private_data: arr(&pd),
            })
        }),
        (any::<(u32, u32)>(), 0u8..4, 0u8..32, pd.clone()).prop_map(|(ids, k, t, pd)| {
            Message::Mra(Mra {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                message_mraed: kind(k),
                service_timeout: t,
                private_data: arr(&pd),
            })
        }),
        (any::<(u32, u32)>(), pd.clone()).prop_map(|(ids, pd)| Message::Rtu(Rtu {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            private_data: arr(&pd)
        })),
        (any::<(u32, u32)>(), pd.clone()).prop_map(|(ids, pd)| Message::Drep(Drep {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            private_data: arr(&pd)
        })),
        (any::<(u32, u32)>(), 0u32..1 << 24, pd.clone()).prop_map(|(ids, q, pd)| {
            Message::Dreq(Dreq {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                remote_qpn: q,
                private_data: arr(&pd),
            })
        }),
        (any::<(u32, u16, u64)>(), pd.clone()).prop_map(|(x, pd)| Message::SidrReq(SidrReq {
            request_id: x.0,
            pkey: x.1,
            service_id: x.2,
            private_data: arr(&pd)
        })),
        (any::<(u32, u8, u8, u64, u32)>(), 0u32..1 << 24, pd).prop_map(|(x, q, pd)| {
            Message::SidrRep(SidrRep {
                request_id: x.0,
                status: SidrStatus(x.1),
                info_len: x.2,
                qpn: q,
                service_id: x.3,
                qkey: x.4,
                info: arr(&pd),
                private_data: arr(&pd[1..].iter().chain(&[9]).copied().collect::<Vec<_>>()),
            })
        }),
    ]
}

proptest! {
    /// Whatever a message holds (within its fields' widths) comes back out of its bytes.
    #[test]
    fn every_message_round_trips(tid: u64, msg in message()) {
        let r = Repr { tid, msg };
        let bytes = r.to_bytes();
        prop_assert_eq!(bytes.len(), MAD_LEN);
        prop_assert_eq!(&Repr::parse(&Mad::new_checked(&bytes[..]).unwrap()).unwrap(), &r);
    }

    /// Any 256 bytes either parse or give a typed error, and what parses emits bytes that
    /// parse to the same message (reserved bits are the only thing emit may change).
    #[test]
    fn any_mad_parses_or_errs_and_reparses_the_same(mut b in prop::collection::vec(any::<u8>(), 256),
                                                  attr in 0x10u16..0x19) {
        b[..4].copy_from_slice(&[1, 0x07, 2, 3]);
        b[16..18].copy_from_slice(&attr.to_be_bytes());
        let r = Repr::parse(&Mad::new_checked(&b[..]).unwrap()).unwrap();
        let again = r.to_bytes();
        prop_assert_eq!(Repr::parse(&Mad::new_checked(&again[..]).unwrap()).unwrap(), r);
        prop_assert_eq!(&again[..4], &b[..4]);
        prop_assert_eq!(&again[8..18], &b[8..18]);
    }
}

#[test]
fn bit_fields_count_from_the_top() {
    assert_eq!(bits(0b1010_0110, 0, 5), 0b10100);
    assert_eq!(bits(0b1010_0110, 5, 2), 0b11);
    assert_eq!(bits(0b1010_0111, 7, 1), 1);
    let mut b = 0xffu8;
    put_bits(&mut b, 5, 2, 0);
    assert_eq!(b, 0b1111_1001);
    put_bits(&mut b, 0, 4, 0xfa);
    assert_eq!(b, 0b1010_1001, "bits beyond the width are dropped");
}

#[test]
fn non_cm_mads_are_refused_with_their_reason() {
    let ok = Repr {
        tid: 7,
        msg: Message::Rtu(Rtu::default()),
    }
    .to_bytes();
    let parse = |b: &[u8]| Repr::parse(&Mad::new_checked(b).unwrap());
    assert!(parse(&ok).is_ok());
    let mut b = ok.clone();
    b[1] = 0x03; // subnet administration
    assert_eq!(parse(&b), Err(crate::Error::UnsupportedMadClass(0x03, 2)));
    let mut b = ok.clone();
    b[2] = 1;
    assert_eq!(parse(&b), Err(crate::Error::UnsupportedMadClass(0x07, 1)));
    let mut b = ok.clone();
    b[3] = 0x81; // a GetResp
    assert_eq!(parse(&b), Err(crate::Error::BadCmMethod(0x81)));
    let mut b = ok.clone();
    b[17] = 0x19; // LAP, which ferroce does not speak
    assert_eq!(parse(&b), Err(crate::Error::UnknownCmAttribute(0x19)));
    let mut b = ok;
    b[0] = 0;
    assert_eq!(parse(&b), Err(crate::Error::BadMadVersion(0)));
}

#[test]
fn names_and_attribute_ids_agree() {
    for (m, id, name) in [
        (Message::Req(Req::default()), attr::REQ, "REQ"),
        (Message::Rej(Rej::default()), attr::REJ, "REJ"),
        (
            Message::SidrRep(SidrRep::default()),
            attr::SIDR_REP,
            "SIDR_REP",
        ),
    ] {
        assert_eq!((m.attr_id(), m.name()), (id, name));
    }
}

#[test]
fn the_flow_label_and_packet_rate_sit_where_linux_puts_them() {
    // IBA Table 106 / Linux's CM_REQ_PRIMARY_FLOW_LABEL (bits 31..12 of the word at data
    // byte 88) and CM_REQ_PRIMARY_PACKET_RATE (the low 6 bits of byte 91).
    let mut req = Req::default();
    req.primary.flow_label = 0x54321;
    req.primary.packet_rate = 0x21;
    req.alternate.flow_label = 0xfffff;
    let b = Repr {
        tid: 0,
        msg: Message::Req(req),
    }
    .to_bytes();
    assert_eq!(&b[24 + 88..24 + 92], &[0x54, 0x32, 0x10, 0x21]);
    assert_eq!(&b[24 + 132..24 + 136], &[0xff, 0xff, 0xf0, 0x00]);
}

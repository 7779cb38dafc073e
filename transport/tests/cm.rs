//! The connection manager between two ends, deterministic: connection and disconnection,
//! refusals, lost and repeated messages, peers that never answer, spoofed and guessed
//! messages, floods; and a real REQ from Linux's rdma_cm (rping against rxe) answered.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use ferroce_transport::cm::{
    cm_time, Cm, CmConfig, CmEvent, CmTransmit, CommId, Dropped, ServedElsewhere,
};
use ferroce_transport::{seeded_fill, Instant};
use ferroce_wire::cm::rdma_cm::{self, IpHeader, PortSpace};
use ferroce_wire::cm::{Dreq, Message, RejReason, Rep, Repr, Req, Rtu, Transport};
use ferroce_wire::mad::Mad;

const SID: u64 = rdma_cm::service_id(PortSpace::TCP, 7471);

fn gid(last: u8) -> Ipv6Addr {
    Ipv4Addr::new(10, 0, 0, last).to_ipv6_mapped()
}

fn config() -> CmConfig {
    CmConfig {
        ca_guid: 0x0002_c9ff_fe00_0001,
        response_timeout: 12, // 16.8 ms
        max_retries: 3,
        timewait: Duration::from_millis(50),
        max_connections: 8,
    }
}

/// Two CMs, A at 10.0.0.1 and B at 10.0.0.2, and a clock.
struct Pair {
    a: Cm,
    b: Cm,
    now: Instant,
}

impl Pair {
    fn new() -> Pair {
        Pair {
            a: Cm::new(config(), seeded_fill(1)),
            b: Cm::new(config(), seeded_fill(2)),
            now: Instant::ZERO,
        }
    }

    /// Moves every queued MAD between the two, both ways, until none is left; `keep`
    /// decides for each (sender is A, the MAD) whether the wire delivers it.
    fn run(&mut self, mut keep: impl FnMut(bool, &CmTransmit) -> bool) -> usize {
        let mut moved = 0;
        loop {
            let mut any = false;
            while let Some(t) = self.a.poll_transmit() {
                any = true;
                assert_eq!(t.to, gid(2));
                if keep(true, &t) {
                    moved += 1;
                    let _ = self.b.handle_mad(self.now, gid(1), &t.mad);
                }
            }
            while let Some(t) = self.b.poll_transmit() {
                any = true;
                assert_eq!(t.to, gid(1));
                if keep(false, &t) {
                    moved += 1;
                    let _ = self.a.handle_mad(self.now, gid(2), &t.mad);
                }
            }
            if !any {
                return moved;
            }
        }
    }

    fn deliver_all(&mut self) -> usize {
        self.run(|_, _| true)
    }

    /// Advances the clock to the next timer of either side and fires it.
    fn tick(&mut self) {
        let next = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("a timer is armed");
        self.now = next.max(self.now);
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
    }
}

fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

/// The one event `cm` has, a refusal: its connection and reason.
fn rejected(cm: &mut Cm) -> (CommId, RejReason) {
    let [CmEvent::Rejected { id, reason, .. }] = &events(cm)[..] else {
        panic!("rejected")
    };
    (*id, *reason)
}

fn req(qpn: u32, psn: u32) -> Req {
    let mut r = Req {
        service_id: SID,
        local_qpn: qpn,
        starting_psn: psn,
        transport: Transport::Rc,
        path_mtu: 3,
        retry_count: 7,
        rnr_retry_count: 7,
        responder_resources: 4,
        initiator_depth: 4,
        pkey: 0xffff,
        ..Req::default()
    };
    r.primary.local_gid = gid(1).octets();
    r.primary.remote_gid = gid(2).octets();
    r.private_data[..5].copy_from_slice(b"hello");
    r
}

fn rep(qpn: u32, psn: u32) -> Rep {
    let mut r = Rep {
        local_qpn: qpn,
        starting_psn: psn,
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
        ..Rep::default()
    };
    r.private_data[..3].copy_from_slice(b"hey");
    r
}

fn msg_of(t: &CmTransmit) -> Message {
    Repr::parse(&Mad::new_checked(&t.mad[..]).unwrap())
        .unwrap()
        .msg
}

/// A connected pair: A's connection ID, B's.
fn connect(p: &mut Pair) -> (u32, u32) {
    p.b.listen(SID).unwrap();
    let a_id = p.a.connect(p.now, gid(2), req(0x11, 0x100)).unwrap();
    p.deliver_all();
    let [CmEvent::ConnectRequest {
        id: b_id,
        from,
        req: got,
    }] = &events(&mut p.b)[..]
    else {
        panic!("one connect request")
    };
    assert_eq!(*from, gid(1));
    assert_eq!((got.local_qpn, got.starting_psn), (0x11, 0x100));
    assert_eq!(&got.private_data[..5], b"hello");
    assert_eq!(got.local_comm_id, a_id);
    let b_id = *b_id;
    p.b.accept(p.now, b_id, rep(0x22, 0x200)).unwrap();
    p.deliver_all();
    let [CmEvent::Reply { id, rep: got }] = &events(&mut p.a)[..] else {
        panic!("one reply")
    };
    assert_eq!(*id, a_id);
    assert_eq!(
        (got.local_qpn, got.starting_psn, got.local_comm_id),
        (0x22, 0x200, b_id)
    );
    assert_eq!(&got.private_data[..3], b"hey");
    p.a.ready(a_id).unwrap();
    p.deliver_all();
    assert_eq!(events(&mut p.b), [CmEvent::Established { id: b_id }]);
    (a_id, b_id)
}

/// A sends a REQ, B (listening) takes it: A's connection ID, B's.
fn requested(p: &mut Pair) -> (u32, u32) {
    p.b.listen(SID).unwrap();
    let a_id = p.a.connect(p.now, gid(2), req(1, 1)).unwrap();
    p.deliver_all();
    let [CmEvent::ConnectRequest { id, .. }] = &events(&mut p.b)[..] else {
        panic!("one connect request")
    };
    (a_id, *id)
}

#[test]
fn a_connection_is_made_used_and_ended_through_time_wait() {
    let mut p = Pair::new();
    let (a_id, b_id) = connect(&mut p);
    p.a.disconnect(p.now, a_id).unwrap();
    p.deliver_all();
    assert_eq!(events(&mut p.b), [CmEvent::DisconnectRequest { id: b_id }]);
    p.b.disconnect(p.now, b_id).unwrap();
    p.deliver_all();
    assert_eq!(
        events(&mut p.a),
        [CmEvent::Disconnected {
            id: a_id,
            answered: true
        }]
    );
    // Both sit in time-wait until it is over, then forget the connection.
    assert_eq!((p.a.connections(), p.b.connections()), (1, 1));
    p.tick();
    assert_eq!(events(&mut p.a), [CmEvent::TimewaitExit { id: a_id }]);
    assert_eq!(events(&mut p.b), [CmEvent::TimewaitExit { id: b_id }]);
    assert_eq!((p.a.connections(), p.b.connections()), (0, 0));
    assert_eq!(p.a.poll_timeout(), None);
    let c = p.a.counters();
    assert_eq!(
        (c.tx_msgs[0], c.rx_msgs[3], c.tx_msgs[4]),
        (1, 1, 1),
        "REQ, REP, RTU"
    );
    assert_eq!((c.tx_msgs[5], c.rx_msgs[6]), (1, 1), "DREQ, DREP");
}

#[test]
fn nobody_listening_is_a_rej_with_invalid_service_id() {
    let mut p = Pair::new();
    let id = p.a.connect(p.now, gid(2), req(0x11, 0)).unwrap();
    p.deliver_all();
    assert_eq!(rejected(&mut p.a), (id, RejReason::INVALID_SERVICE_ID));
    assert_eq!(p.b.counters().rej_no_listener, 1);
    assert_eq!((p.a.connections(), p.b.connections()), (0, 0));
    assert_eq!(p.a.poll_timeout(), None, "no resend left armed");
}

#[test]
fn the_user_refuses_with_private_data() {
    let mut p = Pair::new();
    let (a_id, b_id) = requested(&mut p);
    assert!(p
        .b
        .reject(b_id, RejReason::CONSUMER_DEFINED, &[0; 149])
        .is_err());
    p.b.reject(b_id, RejReason::CONSUMER_DEFINED, b"busy")
        .unwrap();
    p.deliver_all();
    let [CmEvent::Rejected {
        id,
        reason,
        private_data,
    }] = &events(&mut p.a)[..]
    else {
        panic!()
    };
    assert_eq!((*id, *reason), (a_id, RejReason::CONSUMER_DEFINED));
    assert_eq!(&private_data[..4], b"busy");
}

#[test]
fn a_lost_req_is_resent_and_a_repeated_one_is_taken_once() {
    let mut p = Pair::new();
    p.b.listen(SID).unwrap();
    p.a.connect(p.now, gid(2), req(0x11, 0)).unwrap();
    assert_eq!(p.run(|_, _| false), 0, "the first REQ is lost");
    let t0 = p.now;
    p.tick();
    assert_eq!(p.now - t0, cm_time(12), "resent after the response timeout");
    // The resend arrives twice (the wire duplicated it).
    let t = p.a.poll_transmit().expect("the REQ again");
    assert!(matches!(msg_of(&t), Message::Req(_)));
    assert_eq!(p.b.handle_mad(p.now, gid(1), &t.mad), Ok(()));
    assert_eq!(
        p.b.handle_mad(p.now, gid(1), &t.mad),
        Err(Dropped::Duplicate)
    );
    assert_eq!(events(&mut p.b).len(), 1, "one connect request");
    assert_eq!(p.a.counters().tx_retries[0], 1);
    assert_eq!(p.b.counters().rx_duplicates[0], 1);
}

#[test]
fn a_lost_rtu_is_recovered_by_the_resent_rep() {
    let mut p = Pair::new();
    p.b.listen(SID).unwrap();
    let a_id = p.a.connect(p.now, gid(2), req(0x11, 0)).unwrap();
    p.deliver_all();
    let [CmEvent::ConnectRequest { id: b_id, .. }] = &events(&mut p.b)[..] else {
        panic!()
    };
    p.b.accept(p.now, *b_id, rep(0x22, 0)).unwrap();
    p.deliver_all();
    events(&mut p.a);
    p.a.ready(a_id).unwrap();
    assert_eq!(p.run(|_, t| !matches!(msg_of(t), Message::Rtu(_))), 0);
    assert!(events(&mut p.b).is_empty());
    p.tick(); // B resends its REP, A answers it with the RTU again
    p.deliver_all();
    assert_eq!(events(&mut p.b), [CmEvent::Established { id: *b_id }]);
    assert!(events(&mut p.a).is_empty(), "no second reply event");
    assert_eq!(p.a.counters().rx_duplicates[3], 1);
    assert_eq!(p.a.counters().tx_msgs[4], 2, "the RTU twice");
}

#[test]
fn a_peer_that_never_answers_ends_in_unreachable_after_every_resend() {
    let mut p = Pair::new();
    let id = p.a.connect(p.now, gid(2), req(1, 1)).unwrap();
    let mut sent = 0;
    while p.a.poll_timeout().is_some() {
        while let Some(t) = p.a.poll_transmit() {
            sent += 1;
            let _ = t; // into the void
        }
        p.tick();
    }
    while p.a.poll_transmit().is_some() {
        sent += 1;
    }
    assert_eq!(events(&mut p.a), [CmEvent::Unreachable { id }]);
    // The first REQ, three resends, and the REJ (timeout) that tells the peer.
    assert_eq!(sent, 5);
    assert_eq!(p.a.counters().tx_retries[0], 3);
    assert_eq!(p.a.counters().timeouts, 1);
    assert_eq!(p.a.connections(), 0);
    assert!(p.now - Instant::ZERO >= cm_time(12) * 4);
}

#[test]
fn an_unanswered_dreq_still_ends_in_time_wait() {
    let mut p = Pair::new();
    let (a_id, _) = connect(&mut p);
    p.a.disconnect(p.now, a_id).unwrap();
    p.run(|_, _| false);
    for _ in 0..4 {
        p.tick();
        p.run(|_, _| false);
    }
    // Said so: rdma_cm's DISCONNECTED carries -ETIMEDOUT for it.
    assert_eq!(
        events(&mut p.a),
        [CmEvent::Disconnected {
            id: a_id,
            answered: false
        }]
    );
    assert_eq!(p.a.counters().tx_retries[5], 3);
    p.tick();
    assert_eq!(events(&mut p.a), [CmEvent::TimewaitExit { id: a_id }]);
}

#[test]
fn spoofed_and_guessed_messages_change_nothing() {
    let mut p = Pair::new();
    let (a_id, b_id) = connect(&mut p);
    let dreq = |local, remote, qpn| {
        Repr {
            tid: 9,
            msg: Message::Dreq(Dreq {
                local_comm_id: local,
                remote_comm_id: remote,
                remote_qpn: qpn,
                ..Dreq::default()
            }),
        }
        .to_bytes()
    };
    // Right IDs and QPN, wrong source: someone else on the network.
    assert_eq!(
        p.a.handle_mad(p.now, gid(9), &dreq(b_id, a_id, 0x11)),
        Err(Dropped::Spoofed)
    );
    // From the peer's address but with a guessed connection ID.
    assert_eq!(
        p.a.handle_mad(p.now, gid(2), &dreq(b_id, a_id ^ 1, 0x11)),
        Err(Dropped::UnknownCommId)
    );
    // The peer's own ID wrong.
    assert_eq!(
        p.a.handle_mad(p.now, gid(2), &dreq(b_id ^ 1, a_id, 0x11)),
        Err(Dropped::Spoofed)
    );
    // Another QP.
    assert_eq!(
        p.a.handle_mad(p.now, gid(2), &dreq(b_id, a_id, 0x12)),
        Err(Dropped::QpnMismatch)
    );
    // An RTU to the active side, a REP out of the blue.
    let rtu = Repr {
        tid: 1,
        msg: Message::Rtu(Rtu {
            local_comm_id: b_id,
            remote_comm_id: a_id,
            ..Rtu::default()
        }),
    };
    assert_eq!(
        p.a.handle_mad(p.now, gid(2), &rtu.to_bytes()),
        Err(Dropped::WrongState)
    );
    assert_eq!(
        p.a.handle_mad(p.now, gid(2), &[0u8; 255]),
        Err(Dropped::Malformed(ferroce_wire::Error::Truncated(
            ferroce_wire::Layer::Mad
        )))
    );
    assert!(events(&mut p.a).is_empty());
    assert!(p.a.poll_transmit().is_none(), "nothing answered");
    let c = p.a.counters();
    assert_eq!(
        (
            c.rx_spoofed,
            c.rx_unknown_comm_id,
            c.rx_qpn_mismatch,
            c.rx_wrong_state,
            c.rx_malformed
        ),
        (2, 1, 1, 1, 1)
    );
    // And the connection still ends normally.
    p.a.disconnect(p.now, a_id).unwrap();
    p.deliver_all();
    assert_eq!(events(&mut p.b), [CmEvent::DisconnectRequest { id: b_id }]);
}

#[test]
fn a_flood_of_reqs_is_bounded_and_refused_beyond_the_table() {
    let mut b = Cm::new(config(), seeded_fill(3));
    b.listen(SID).unwrap();
    let mut refused = 0;
    for i in 0..100u32 {
        let mut q = req(i, i);
        q.local_comm_id = 1000 + i;
        // A hostile REQ asks for a response timeout of 2^31 × 4 µs and 15 resends.
        q.local_cm_response_timeout = 31;
        q.max_cm_retries = 15;
        let mad = Repr {
            tid: u64::from(i),
            msg: Message::Req(q),
        }
        .to_bytes();
        if b.handle_mad(Instant::ZERO, gid(7), &mad)
            == Err(Dropped::Refused(RejReason::NO_RESOURCES))
        {
            refused += 1;
        }
    }
    assert_eq!(b.connections(), 8);
    assert_eq!(refused, 92);
    assert_eq!(b.counters().rej_no_resources, 92);
    // Accepted ones wait no longer than this CM's own timeout, whatever the REQ said.
    let ids: Vec<u32> = events(&mut b)
        .into_iter()
        .map(|e| match e {
            CmEvent::ConnectRequest { id, .. } => id,
            e => panic!("{e:?}"),
        })
        .collect();
    for id in &ids {
        b.accept(Instant::ZERO, *id, rep(5, 5)).unwrap();
    }
    assert_eq!(b.poll_timeout(), Some(Instant::ZERO + cm_time(12)));
    // Unanswered, they all end after this CM's resends, not the REQ's fifteen.
    let mut now = Instant::ZERO;
    while let Some(t) = b.poll_timeout() {
        now = t;
        b.handle_timeout(now);
    }
    assert_eq!(b.connections(), 0);
    assert!(now - Instant::ZERO <= cm_time(12) * 4);
    assert_eq!(b.counters().tx_retries[3], 8 * 3);
}

#[test]
fn linux_rdma_cm_req_from_rping_is_answered() {
    // The REQ rping sent from rxe (tests/vectors/rxe-cm/cm_rping.pcap, frame 9).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/rxe-cm/cm_rping.pcap");
    let mut reader = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut frame = None;
    for _ in 0..9 {
        frame = Some(reader.next_packet().unwrap().unwrap().data.into_owned());
    }
    let frame = frame.unwrap();
    let f = ferroce_wire::Frame::parse(&frame).unwrap();
    let mad = f.ib().payload().to_vec();
    let from = f.datagram.src_gid();
    let mut b = Cm::new(config(), seeded_fill(4));
    b.listen(SID).unwrap();
    b.handle_mad(Instant::ZERO, from, &mad).unwrap();
    let [CmEvent::ConnectRequest { id, req: q, .. }] = &events(&mut b)[..] else {
        panic!()
    };
    let ip = IpHeader::parse(&q.private_data).unwrap();
    assert_eq!(ip.dst, Ipv4Addr::new(10, 77, 0, 2));
    b.accept(Instant::ZERO, *id, rep(0x33, 0x1234)).unwrap();
    let t = b.poll_transmit().unwrap();
    assert_eq!(t.to, from);
    let sent = Repr::parse(&Mad::new_checked(&t.mad[..]).unwrap()).unwrap();
    let Message::Rep(p) = sent.msg else { panic!() };
    assert_eq!(p.remote_comm_id, q.local_comm_id);
    assert_eq!(
        sent.tid,
        Repr::parse(&Mad::new_checked(&mad[..]).unwrap())
            .unwrap()
            .tid
    );
    assert_eq!(
        (p.local_qpn, p.starting_psn, p.local_comm_id),
        (0x33, 0x1234, *id)
    );
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of MADs, valid messages with fields (IDs included) changed at
        /// random, thrown at both ends of a live connection in any order: nothing panics,
        /// the tables stay within their bound, every timer still ends.
        #[test]
        fn mutated_messages_never_panic_or_grow_state(
            flips in prop::collection::vec((any::<bool>(), 0usize..7, 24usize..256, any::<u8>()), 0..64)
        ) {
            let mut p = Pair::new();
            let (a_id, b_id) = connect(&mut p);
            p.a.disconnect(p.now, a_id).unwrap();
            // A pool of real messages of this connection, as sent.
            let msg = |msg| Repr { tid: 1, msg }.to_bytes();
            let mut pool: Vec<Vec<u8>> = vec![
                msg(Message::Req(req(5, 5))),
                msg(Message::Rep(Rep { local_comm_id: b_id, remote_comm_id: a_id, ..rep(5, 5) })),
                msg(Message::Rtu(Rtu { local_comm_id: a_id, remote_comm_id: b_id, ..Rtu::default() })),
                msg(Message::Dreq(Dreq {
                    local_comm_id: b_id,
                    remote_comm_id: a_id,
                    remote_qpn: 0x11,
                    ..Dreq::default()
                })),
            ];
            while let Some(t) = p.a.poll_transmit() {
                pool.push(t.mad);
            }
            pool.truncate(7);
            for (to_a, which, at, x) in flips {
                let mut m = pool[which % pool.len()].clone();
                m[at] ^= x;
                let (cm, from) = if to_a { (&mut p.a, gid(2)) } else { (&mut p.b, gid(1)) };
                let _ = cm.handle_mad(p.now, from, &m);
                p.deliver_all();
                prop_assert!(p.a.connections() <= 8 && p.b.connections() <= 8);
            }
            for _ in 0..64 {
                if p.a.poll_timeout().is_none() && p.b.poll_timeout().is_none() { break; }
                p.tick();
                p.deliver_all();
            }
            prop_assert_eq!(p.a.poll_timeout(), None);
            prop_assert_eq!(p.b.poll_timeout(), None);
        }
    }
}

/// Another process on the interface serves the service IDs `served` says it does.
fn served_by_others(served: impl Fn(u64) -> bool + Send + 'static) -> Option<ServedElsewhere> {
    Some(ServedElsewhere(Box::new(served)))
}

#[test]
fn a_shared_interface_leaves_reqs_to_the_process_that_serves_them() {
    let mut p = Pair::new();
    p.b.set_served_elsewhere(served_by_others(|sid| sid == SID));
    p.a.connect(p.now, gid(2), req(1, 1)).unwrap();
    assert_eq!(p.deliver_all(), 1, "the REQ, and no REJ");
    assert_eq!(p.b.counters().rx_no_listener, 1);
    assert_eq!(p.b.counters().rej_no_listener, 0);
    assert!(events(&mut p.a).is_empty());
    // A listener still answers as before.
    p.b.listen(SID).unwrap();
    p.tick();
    p.deliver_all();
    assert!(matches!(
        &events(&mut p.b)[..],
        [CmEvent::ConnectRequest { .. }]
    ));
}

#[test]
fn a_shared_interface_refuses_what_no_process_serves() {
    use std::sync::{Arc, Mutex};
    let mut p = Pair::new();
    // The host's other processes serve SID only; every question is recorded.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    p.b.set_served_elsewhere(served_by_others(move |sid| {
        log.lock().unwrap().push(sid);
        sid == SID
    }));
    // A request for SID is another process's: dropped, no REJ.
    p.a.connect(p.now, gid(2), req(1, 1)).unwrap();
    assert_eq!(p.deliver_all(), 1, "the REQ, and no REJ");
    assert_eq!(p.b.counters().rx_no_listener, 1);
    assert!(events(&mut p.a).is_empty());
    // A request for a port nobody serves is refused at once, as on a sole interface.
    let other = rdma_cm::service_id(PortSpace::TCP, 7472);
    let mut r = req(2, 2);
    r.service_id = other;
    let id = p.a.connect(p.now, gid(2), r).unwrap();
    assert_eq!(p.deliver_all(), 2, "the REQ and its REJ");
    assert_eq!(rejected(&mut p.a), (id, RejReason::INVALID_SERVICE_ID));
    assert_eq!(p.b.counters().rej_no_listener, 1);
    // Asked only about requests this CM does not serve itself.
    p.b.listen(other).unwrap();
    let mut r = req(3, 3);
    r.service_id = other;
    p.a.connect(p.now, gid(2), r).unwrap();
    p.deliver_all();
    assert!(matches!(
        &events(&mut p.b)[..],
        [CmEvent::ConnectRequest { .. }]
    ));
    assert_eq!(*asked.lock().unwrap(), vec![SID, other]);
    // On a sole interface nobody else is asked.
    p.b.set_served_elsewhere(None);
    let id = p.a.connect(p.now, gid(2), req(4, 4)).unwrap();
    p.deliver_all();
    assert_eq!(rejected(&mut p.a), (id, RejReason::INVALID_SERVICE_ID));
    assert_eq!(asked.lock().unwrap().len(), 2);
}

#[test]
fn its_own_req_come_back_is_not_taken_for_a_peer_s() {
    let mut a = Cm::new(config(), seeded_fill(9));
    // Other processes share the interface, and one of them serves SID: its request.
    a.set_served_elsewhere(served_by_others(|sid| sid == SID));
    a.connect(Instant::ZERO, gid(1), req(1, 1)).unwrap();
    let t = a.poll_transmit().unwrap();
    assert_eq!(
        a.handle_mad(Instant::ZERO, gid(1), &t.mad),
        Err(Dropped::Own)
    );
    assert!(a.poll_transmit().is_none() && events(&mut a).is_empty());
    assert_eq!(a.counters().rx_own, 1);
    // Shared, with nobody serving it, or alone on the interface: refused at once, as a
    // peer host would.
    for others in [served_by_others(|_| false), None] {
        a.set_served_elsewhere(others);
        let me = a.connect(Instant::ZERO, gid(1), req(1, 1)).unwrap();
        let t = a.poll_transmit().unwrap();
        let _ = a.handle_mad(Instant::ZERO, gid(1), &t.mad);
        let rej = a.poll_transmit().unwrap();
        a.handle_mad(Instant::ZERO, gid(1), &rej.mad).unwrap();
        assert!(matches!(
            &events(&mut a)[..],
            [CmEvent::Rejected { id, reason: RejReason::INVALID_SERVICE_ID, .. }] if *id == me
        ));
    }
    assert_eq!(a.counters().rx_own, 1);
    // Listening on the service, it is a connection to itself, made like any other.
    a.listen(SID).unwrap();
    let me = a.connect(Instant::ZERO, gid(1), req(1, 1)).unwrap();
    let t = a.poll_transmit().unwrap();
    a.handle_mad(Instant::ZERO, gid(1), &t.mad).unwrap();
    let [CmEvent::ConnectRequest { id, .. }] = &events(&mut a)[..] else {
        panic!()
    };
    a.accept(Instant::ZERO, *id, rep(2, 2)).unwrap();
    let t = a.poll_transmit().unwrap();
    a.handle_mad(Instant::ZERO, gid(1), &t.mad).unwrap();
    assert!(matches!(&events(&mut a)[..], [CmEvent::Reply { id, .. }] if *id == me));
}

#[test]
fn a_request_the_user_never_answers_expires() {
    let mut p = Pair::new();
    let (a_id, b_id) = requested(&mut p);
    // A resends its REQ meanwhile; B keeps the one request and answers none of them.
    while p.b.connections() > 0 {
        p.tick();
        p.deliver_all();
        assert!(p.now - Instant::ZERO < Duration::from_secs(1));
    }
    assert_eq!(events(&mut p.b), [CmEvent::RequestExpired { id: b_id }]);
    assert_eq!(
        p.b.accept(p.now, b_id, rep(1, 1)),
        Err(ferroce_transport::cm::CmError::UnknownId)
    );
    // A gave up by then too, or takes B's REJ (timeout).
    let ev = events(&mut p.a);
    assert!(
        matches!(&ev[..], [CmEvent::Unreachable { id }] | [CmEvent::Rejected { id, .. }] if *id == a_id),
        "{ev:?}"
    );
}

#[test]
fn a_dropped_request_goes_unanswered_and_its_resend_is_a_new_request() {
    let mut p = Pair::new();
    let (a_id, b_id) = requested(&mut p);
    // B's listener has no room (a full backlog): it drops the request, sending nothing.
    p.b.drop_request(b_id).unwrap();
    assert!(p.b.poll_transmit().is_none(), "no REJ, no MRA");
    assert_eq!(p.b.connections(), 0);
    assert_eq!(p.b.counters().rx_dropped_backlog, 1);
    assert_eq!(
        p.b.drop_request(b_id),
        Err(ferroce_transport::cm::CmError::UnknownId)
    );
    // A resends after its response timeout; B takes the resend as a request of its own,
    // not as a duplicate of one it no longer has, and can accept it.
    p.tick();
    p.deliver_all();
    let [CmEvent::ConnectRequest { id, req, .. }] = &events(&mut p.b)[..] else {
        panic!("the resend is a new connect request")
    };
    assert_eq!(req.local_comm_id, a_id);
    assert_eq!(p.b.counters().rx_duplicates[0], 0);
    p.b.accept(p.now, *id, rep(2, 2)).unwrap();
    p.deliver_all();
    assert!(matches!(&events(&mut p.a)[..], [CmEvent::Reply { id, .. }] if *id == a_id));
    // Only an unanswered request can be dropped.
    assert_eq!(
        p.b.drop_request(*id),
        Err(ferroce_transport::cm::CmError::WrongState)
    );
}

fn sidr_req(port: u16) -> ferroce_wire::cm::SidrReq {
    ferroce_wire::cm::SidrReq {
        service_id: rdma_cm::service_id(PortSpace::UDP, port),
        pkey: 0xffff,
        ..Default::default()
    }
}

#[test]
fn sidr_resolves_a_ud_service_and_refuses_an_unknown_one() {
    use ferroce_wire::cm::SidrStatus;
    let mut p = Pair::new();
    let udp = rdma_cm::service_id(PortSpace::UDP, 7174);
    p.b.listen(udp).unwrap();
    // The first request is lost: A resends it.
    let id = p.a.sidr_request(p.now, gid(2), sidr_req(7174)).unwrap();
    assert_eq!(p.run(|_, _| false), 0);
    p.tick();
    p.deliver_all();
    let [CmEvent::SidrRequest {
        id: b_id,
        from,
        req,
    }] = &events(&mut p.b)[..]
    else {
        panic!("one SIDR request")
    };
    assert_eq!((*from, req.service_id), (gid(1), udp));
    p.b.sidr_reply(p.now, *b_id, SidrStatus::OK, 0x42, 0x0123_4567)
        .unwrap();
    p.deliver_all();
    let [CmEvent::SidrReply { id: got, rep }] = &events(&mut p.a)[..] else {
        panic!("one SIDR reply")
    };
    assert_eq!(*got, id);
    assert_eq!(
        (rep.status, rep.qpn, rep.qkey),
        (SidrStatus::OK, 0x42, 0x0123_4567)
    );
    assert_eq!(p.a.connections(), 0, "nothing kept on the asking side");
    // Nobody listens on 7175: "unsupported" at once.
    let id = p.a.sidr_request(p.now, gid(2), sidr_req(7175)).unwrap();
    p.deliver_all();
    let [CmEvent::SidrReply { id: got, rep }] = &events(&mut p.a)[..] else {
        panic!("one SIDR reply")
    };
    assert_eq!((*got, rep.status), (id, SidrStatus::UNSUPPORTED));
    // A reply from elsewhere, or to nothing asked, changes nothing.
    let forged = Repr {
        tid: 1,
        msg: Message::SidrRep(ferroce_wire::cm::SidrRep {
            request_id: id,
            status: SidrStatus::OK,
            service_id: rdma_cm::service_id(PortSpace::UDP, 7175),
            ..Default::default()
        }),
    }
    .to_bytes();
    assert_eq!(
        p.a.handle_mad(p.now, gid(2), &forged),
        Err(Dropped::UnknownCommId)
    );
    let id = p.a.sidr_request(p.now, gid(2), sidr_req(7175)).unwrap();
    let mut forged_rep = Repr::parse(&Mad::new_checked(&forged[..]).unwrap()).unwrap();
    if let Message::SidrRep(r) = &mut forged_rep.msg {
        r.request_id = id;
    }
    assert_eq!(
        p.a.handle_mad(p.now, gid(9), &forged_rep.to_bytes()),
        Err(Dropped::Spoofed)
    );
}

#[test]
fn an_unanswered_sidr_request_ends_unreachable() {
    let mut p = Pair::new();
    let id = p.a.sidr_request(p.now, gid(2), sidr_req(1)).unwrap();
    while p.a.poll_timeout().is_some() {
        p.run(|_, _| false);
        p.tick();
    }
    assert_eq!(events(&mut p.a), [CmEvent::Unreachable { id }]);
    assert_eq!(p.a.counters().tx_retries[7], 3);
}

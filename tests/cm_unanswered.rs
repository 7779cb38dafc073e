//! A connection manager that must answer an address nobody answers ARP for (a REQ with a
//! spoofed source is refused with a REJ to that source) keeps serving everyone else: the
//! REJ waits for its peer's MAC address apart, and is dropped, counted, when none comes.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroce::cm::ConnectionManager;
use ferroce::link::{Link, MemoryLink};
use ferroce::net::gid::{gid_of, GidTable};
use ferroce::net::neigh::{ResolveError, Resolver, StaticResolver};
use ferroce::verbs::*;
use ferroce::wire::cm::rdma_cm::{service_id, PortSpace};
use ferroce::wire::*;
use ferroce::wire::{cm, mad};

const MAC_DEV: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];
const DEV: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// A source address nobody on the wire answers for.
const SPOOFED: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);

/// A network where an address outside the table gets no ARP answer: resolving it waits
/// out the whole timeout, as on a real link.
struct Silent(StaticResolver);

impl Resolver for Silent {
    fn resolve(&self, ip: IpAddr, timeout: Duration) -> std::result::Result<[u8; 6], ResolveError> {
        self.0
            .resolve(ip, timeout)
            .inspect_err(|_| std::thread::sleep(timeout))
    }
}

/// A REQ for `port` as the 256-byte MAD, from communication ID `comm`.
fn req_mad(port: u16, comm: u32, from: Ipv4Addr) -> Vec<u8> {
    let mut req = cm::Req {
        local_comm_id: comm,
        service_id: service_id(PortSpace::TCP, port),
        local_qpn: 0x99,
        starting_psn: 1,
        transport: cm::Transport::Rc,
        pkey: 0xffff,
        path_mtu: 3,
        retry_count: 7,
        rnr_retry_count: 7,
        local_cm_response_timeout: 16,
        remote_cm_response_timeout: 16,
        max_cm_retries: 3,
        ..cm::Req::default()
    };
    req.primary.local_gid = gid_of(from.into()).octets();
    req.primary.remote_gid = gid_of(DEV.into()).octets();
    cm::Repr {
        tid: u64::from(comm),
        msg: cm::Message::Req(req),
    }
    .to_bytes()
}

/// The MAD as a UD SEND ONLY from QP1 at `from` to the device's QP1.
fn frame(mad: &[u8], from: Ipv4Addr, psn: u32) -> Vec<u8> {
    let repr = FrameRepr {
        ethernet: EthernetRepr {
            src: MAC_PEER,
            dst: MAC_DEV,
            vlan: None,
        },
        datagram: DatagramRepr {
            ip: IpRepr::V4 {
                src: from,
                dst: DEV,
                dscp: 0,
                ecn: 0,
                ttl: 64,
                identification: psn as u16,
                dont_fragment: true,
            },
            src_port: 0xc000,
            ib: IbRepr {
                bth: BthRepr::new(Opcode::UD_SEND_ONLY, mad::GSI_QPN, Psn::new(psn)),
                ext: ExtRepr {
                    deth: Some(DethRepr {
                        qkey: mad::GSI_QKEY,
                        src_qp: mad::GSI_QPN,
                    }),
                    ..ExtRepr::default()
                },
                payload: mad,
            },
        },
    };
    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut out).unwrap();
    out
}

#[test]
fn a_refusal_to_an_address_nobody_answers_for_holds_nothing_up() {
    let (a, peer) = MemoryLink::pair(MAC_DEV, MAC_PEER).unwrap();
    let known = StaticResolver::new([(IpAddr::V4(DEV), MAC_DEV), (IpAddr::V4(PEER), MAC_PEER)]);
    let attr = DeviceAttr {
        name: "silent0".into(),
        node_guid: 1,
        mac: MAC_DEV,
        netdev_mtu: 1500,
        active_mtu: Mtu::Mtu1024,
        gids: GidTable::from_addrs(&[IpAddr::V4(DEV)]),
    };
    let ctx = Context::with_link(attr, Arc::new(a), Arc::new(Silent(known))).unwrap();
    let cm = ConnectionManager::open(&ctx).unwrap();
    cm.listen(7471).unwrap();

    // From a spoofed address, to a port nobody listens on: refused, with a REJ to an
    // address whose MAC address never comes.
    peer.send(&frame(&req_mad(7999, 0x1111, SPOOFED), SPOOFED, 0))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Then a real peer's REQ: taken while the REJ still waits (3 s) for its address.
    let t0 = Instant::now();
    peer.send(&frame(&req_mad(7471, 0x2222, PEER), PEER, 1))
        .unwrap();
    let got = cm.get_request(7471, Duration::from_secs(2));
    let took = t0.elapsed();
    let got = got.expect("the real peer's request, while the REJ waits apart");
    assert_eq!(got.from, gid_of(PEER.into()));
    assert!(took < Duration::from_secs(2), "{took:?}");

    // The REJ is given up once its wait is over, and counted.
    let start = Instant::now();
    while cm.counters().1 == 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cm.counters().1, 1, "the REJ to the silent address, unsent");
}

//! The kernel's neighbour and routing tables over rtnetlink: which MAC address to send a
//! RoCE packet to. ferroce keeps no ARP cache of its own.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr as NlAddr};

/// Sends one request and collects the replies until `Done` (dumps) or the ACK/first answer.
fn request(msg: RouteNetlinkMessage, flags: u16) -> io::Result<Vec<RouteNetlinkMessage>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&NlAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = 1;
    let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
    req.finalize();
    let mut buf = vec![0; req.header.length as usize];
    req.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
    let mut out = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full()?;
        let mut at = 0;
        while at < data.len() {
            let msg: NetlinkMessage<RouteNetlinkMessage> = NetlinkMessage::deserialize(&data[at..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let len = msg.header.length as usize;
            match msg.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => match e.code {
                    None => return Ok(out), // an ACK
                    Some(code) => return Err(io::Error::from_raw_os_error(-code.get())),
                },
                NetlinkPayload::InnerMessage(m) => {
                    out.push(m);
                    if !dump {
                        return Ok(out);
                    }
                }
                _ => {}
            }
            if len == 0 {
                break;
            }
            at += len;
        }
    }
}

/// The next hop towards `dst` and the interface the kernel would use.
pub fn route(dst: IpAddr) -> io::Result<(IpAddr, Option<u32>)> {
    let mut m = RouteMessage::default();
    m.header.address_family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(dst)));
    let replies = request(RouteNetlinkMessage::GetRoute(m), NLM_F_REQUEST)?;
    let mut hop = dst;
    let mut oif = None;
    for r in replies {
        if let RouteNetlinkMessage::NewRoute(r) = r {
            for a in r.attributes {
                match a {
                    RouteAttribute::Gateway(RouteAddress::Inet(g)) => hop = IpAddr::V4(g),
                    RouteAttribute::Gateway(RouteAddress::Inet6(g)) => hop = IpAddr::V6(g),
                    RouteAttribute::Oif(i) => oif = Some(i),
                    _ => {}
                }
            }
        }
    }
    Ok((hop, oif))
}

/// The MAC address of `ip` on interface `ifindex`, if the kernel has a usable entry.
pub fn lookup(ifindex: u32, ip: IpAddr) -> io::Result<Option<[u8; 6]>> {
    let mut m = NeighbourMessage::default();
    m.header.family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let replies = request(
        RouteNetlinkMessage::GetNeighbour(m),
        NLM_F_REQUEST | NLM_F_DUMP,
    )?;
    for r in replies {
        let RouteNetlinkMessage::NewNeighbour(n) = r else {
            continue;
        };
        if n.header.ifindex != ifindex
            || matches!(
                n.header.state,
                NeighbourState::Incomplete | NeighbourState::Failed | NeighbourState::None
            )
        {
            continue;
        }
        let mut dst = None;
        let mut mac = None;
        for a in &n.attributes {
            match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                    dst = Some(IpAddr::V4(*v4))
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                    dst = Some(IpAddr::V6(*v6))
                }
                NeighbourAttribute::LinkLocalAddress(l) if l.len() == 6 => {
                    mac = Some([l[0], l[1], l[2], l[3], l[4], l[5]])
                }
                _ => {}
            }
        }
        if dst == Some(ip) {
            return Ok(mac);
        }
    }
    Ok(None)
}

/// Asks the kernel to resolve `ip` on `ifindex` (an `NTF_USE` neighbour request, which needs
/// CAP_NET_ADMIN); without that right, a one-byte UDP datagram to the discard port makes the
/// kernel resolve the address on its own.
pub fn trigger(ifindex: u32, ip: IpAddr) {
    let mut m = NeighbourMessage::default();
    m.header.family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.ifindex = ifindex;
    m.header.state = NeighbourState::None;
    m.header.flags = NeighbourFlags::Use;
    m.attributes.push(NeighbourAttribute::Destination(match ip {
        IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
        IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
    }));
    let asked = request(
        RouteNetlinkMessage::NewNeighbour(m),
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
    );
    if let Err(e) = asked {
        tracing::debug!(%ip, error = %e, "NTF_USE refused; resolving through a UDP probe");
        let bind: IpAddr = if ip.is_ipv4() {
            [0, 0, 0, 0].into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        if let Ok(s) = UdpSocket::bind(SocketAddr::new(bind, 0)) {
            let _ = s.send_to(&[0], SocketAddr::new(ip, 9));
        }
    }
}

/// Why a peer's MAC address could not be found.
#[derive(Debug)]
pub enum ResolveError {
    /// No neighbour answered in time.
    Unreachable {
        /// The address asked for.
        ip: IpAddr,
        /// The interface it was asked on.
        ifname: String,
    },
    /// The kernel's tables could not be read.
    Io(io::Error),
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Unreachable { ip, ifname } => write!(
                f,
                "peer {ip} is unreachable from {ifname} (no ARP/ND answer): check the address and that the peer is up"
            ),
            ResolveError::Io(e) => write!(f, "cannot read the kernel's neighbour table: {e}"),
        }
    }
}

impl std::error::Error for ResolveError {}

/// The MAC address to send packets for `dst` to: the neighbour entry of `dst` (or of its
/// gateway), resolved through the kernel when missing, waiting at most `timeout`.
pub fn resolve(
    ifindex: u32,
    ifname: &str,
    dst: IpAddr,
    timeout: Duration,
) -> Result<[u8; 6], ResolveError> {
    let hop = match route(dst) {
        Ok((hop, _)) => hop,
        Err(_) => dst,
    };
    let deadline = Instant::now() + timeout;
    let mut asked = false;
    loop {
        if let Some(mac) = lookup(ifindex, hop).map_err(ResolveError::Io)? {
            return Ok(mac);
        }
        // Asked before the deadline is checked: a zero timeout asks the network and
        // returns at once (a caller that must not wait looks again later).
        if !asked {
            trigger(ifindex, hop);
            asked = true;
        }
        if Instant::now() >= deadline {
            return Err(ResolveError::Unreachable {
                ip: dst,
                ifname: ifname.to_string(),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Finds the MAC address to send a RoCE packet for an IP address to. Its own piece, apart
/// from the link that carries the frames: a real interface asks the kernel, an in-memory
/// wire knows its ends.
pub trait Resolver: Send + Sync + 'static {
    /// The MAC address for `ip`, waiting at most `timeout` for the network to answer.
    fn resolve(&self, ip: IpAddr, timeout: Duration) -> Result<[u8; 6], ResolveError>;
}

/// The kernel's neighbour table for one interface (ARP / ND through rtnetlink).
#[derive(Debug, Clone)]
pub struct KernelResolver {
    /// Interface index.
    pub ifindex: u32,
    /// Interface name, for messages.
    pub ifname: String,
}

impl Resolver for KernelResolver {
    fn resolve(&self, ip: IpAddr, timeout: Duration) -> Result<[u8; 6], ResolveError> {
        resolve(self.ifindex, &self.ifname, ip, timeout)
    }
}

/// A fixed table: every address on an in-memory wire and the MAC address of its end.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    table: std::collections::HashMap<IpAddr, [u8; 6]>,
}

impl StaticResolver {
    /// A table of the given (address, MAC) pairs.
    pub fn new(entries: impl IntoIterator<Item = (IpAddr, [u8; 6])>) -> StaticResolver {
        StaticResolver {
            table: entries.into_iter().collect(),
        }
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, ip: IpAddr, _timeout: Duration) -> Result<[u8; 6], ResolveError> {
        self.table
            .get(&ip)
            .copied()
            .ok_or(ResolveError::Unreachable {
                ip,
                ifname: "memory".into(),
            })
    }
}

//! UDP GSO through an ordinary UDP socket (`UDP_SEGMENT`, Linux ≥ 4.18): the way to send
//! super-packets where packet sockets cannot (before Linux 6.2), and the other way to
//! send them where they can.
//!
//! The kernel builds the IP and UDP headers itself, so the segments' ICRCs must be
//! computed for the headers it will write, not the ones the transport built: an
//! unconnected socket with DF set (`IP_PMTUDISC_DO`) gives the first segment IPv4
//! identification 0 and each later one one more (`ip_select_ident_segs`,
//! `inet_gso_segment`), and every segment carries the socket's own UDP source port. The
//! sender ([`super::packet`]) rewrites those fields and the ICRC of each frame of a run
//! before handing the payloads here. TOS (DSCP and ECN) goes per message (`IP_TOS`); TTL
//! and checksums are masked by the ICRC.
//!
//! What a receiver sees: a NIC, or the kernel before a device that cannot segment, cuts
//! the super-packet up; a veth hands it to its peer whole, where a UDP socket (rxe's)
//! gets it cut up, and a packet socket gets it whole. From Linux 6.2 a virtio-net header
//! gives the receiver its segment size; before, ferroce finds it from the packets
//! themselves (`ferroce_wire::gso::infer_segment_size`), which works for any datagram
//! longer than a single RoCE packet can be. So runs no longer than that go one by one
//! ([`super::gso::plan_udp`]).

use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};

/// `UDP_SEGMENT` (`<linux/udp.h>`): the segment size of a UDP GSO send.
const UDP_SEGMENT: libc::c_int = 103;

/// A UDP socket on one IPv4 address of the interface that sends RoCE super-packets.
#[derive(Debug)]
pub struct UdpSegmentSocket {
    fd: OwnedFd,
    addr: Ipv4Addr,
    port: u16,
}

impl UdpSegmentSocket {
    /// Opens a socket bound to `addr` (an ephemeral port) and to the interface `ifname`,
    /// with DF set on everything it sends.
    pub fn open(ifname: &str, addr: Ipv4Addr) -> io::Result<UdpSegmentSocket> {
        use rustix::net::{bind, socket_with, sockopt, AddressFamily, SocketFlags, SocketType};
        let fd = socket_with(
            AddressFamily::INET,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        let name = ifname.as_bytes();
        // SAFETY: `name` is a live byte string of the length passed; the kernel copies it.
        let ret = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BINDTODEVICE,
                name.as_ptr().cast(),
                name.len() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let pmtudisc_do: libc::c_int = libc::IP_PMTUDISC_DO;
        super::af_packet::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            &pmtudisc_do,
        )?;
        // Nothing is ever read from it: a small receive buffer bounds what strays hold.
        let _ = sockopt::set_socket_recv_buffer_size(&fd, 1);
        // Room for what is in flight, as on the packet socket: a super-packet stays charged
        // to this socket until the receiver's IP layer takes it, and the default buffer
        // (net.core.wmem_default, about 208 KiB) holds only a few of 64 KiB. A full buffer refuses
        // the send, and the frames refused are lost and retransmitted: in the VM this lost
        // one frame in about 500 of a 64 KiB WRITE stream in some runs.
        super::af_packet::set_buffer(fd.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
        bind(&fd, &SocketAddr::V4(SocketAddrV4::new(addr, 0)))?;
        let port = SocketAddr::try_from(rustix::net::getsockname(&fd)?)
            .map_err(|_| io::Error::other("UDP socket has no IP address"))?
            .port();
        Ok(UdpSegmentSocket { fd, addr, port })
    }

    /// The address the socket sends from.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The UDP source port every segment carries.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends `datagrams` in order with one `sendmmsg`; returns how many the kernel took
    /// (0 when the socket buffer is full; fewer than all when a later one failed, which the
    /// next call reports). At most [`MAX_DATAGRAMS`] at a time.
    pub fn send_many(&self, datagrams: &[Datagram<'_>]) -> io::Result<usize> {
        let n = datagrams.len().min(MAX_DATAGRAMS);
        if n == 0 {
            return Ok(0);
        }
        // Two control messages at most: UDP_SEGMENT (u16) and IP_TOS (int), each padded to
        // the platform's alignment; u64 elements keep each buffer aligned for cmsghdr.
        // SAFETY: CMSG_SPACE only computes a size.
        let (seg_space, tos_space) = unsafe {
            (
                libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize,
                libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize,
            )
        };
        let mut control = [[0u64; 8]; MAX_DATAGRAMS];
        assert!(seg_space + tos_space <= std::mem::size_of_val(&control[0]));
        // SAFETY: sockaddr_in and mmsghdr are plain old data; all-zero is a valid value.
        let mut names: [libc::sockaddr_in; MAX_DATAGRAMS] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_DATAGRAMS] = unsafe { std::mem::zeroed() };
        for (k, d) in datagrams[..n].iter().enumerate() {
            names[k] = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: ferroce_wire::ROCE_V2_PORT.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(d.dst).to_be(),
                },
                sin_zero: [0; 8],
            };
            let msg = &mut msgs[k].msg_hdr;
            msg.msg_name = (&mut names[k] as *mut libc::sockaddr_in).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            // IoSlice is guaranteed ABI-compatible with iovec on Unix.
            msg.msg_iov = d.payload.as_ptr().cast_mut().cast();
            msg.msg_iovlen = d.payload.len();
            msg.msg_control = control[k].as_mut_ptr().cast();
            msg.msg_controllen = tos_space + if d.segment.is_some() { seg_space } else { 0 };
            // SAFETY: `msg` describes `control[k]`, which has room for both messages
            // (asserted above) and msg_controllen covers the ones written; CMSG_FIRSTHDR
            // / CMSG_NXTHDR stay inside it and CMSG_DATA points into the message each was
            // sized for (an int, then a u16), written unaligned.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(msg);
                (*c).cmsg_level = libc::IPPROTO_IP;
                (*c).cmsg_type = libc::IP_TOS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
                libc::CMSG_DATA(c)
                    .cast::<libc::c_int>()
                    .write_unaligned(libc::c_int::from(d.tos));
                if let Some(segment) = d.segment {
                    let c = libc::CMSG_NXTHDR(msg, c);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                    libc::CMSG_DATA(c).cast::<u16>().write_unaligned(segment);
                }
            }
        }
        // SAFETY: the first `n` headers point to live sockaddr_ins, to the callers' slices
        // (IoSlice is ABI-compatible with iovec) and to their control buffers; the kernel
        // only reads those and writes each header's msg_len.
        let ret = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS) => Ok(0),
            _ => Err(e),
        }
    }
}

/// The most datagrams [`UdpSegmentSocket::send_many`] sends in one call.
pub const MAX_DATAGRAMS: usize = 64;

/// One datagram for [`UdpSegmentSocket::send_many`]: its payload to `dst`:4791 with TOS
/// `tos`, cut by the kernel into segments of `segment` bytes when given (a super-packet).
#[derive(Debug)]
pub struct Datagram<'a> {
    /// Where it goes.
    pub dst: Ipv4Addr,
    /// DSCP and ECN.
    pub tos: u8,
    /// The segment size of a super-packet; `None` sends one datagram.
    pub segment: Option<u16>,
    /// The UDP payload, in pieces.
    pub payload: &'a [IoSlice<'a>],
}

/// Rewrites the IPv4 frame `frame` (Ethernet header first, IHL 5, UDP to 4791, a valid
/// ICRC) into what segment `index` of a super-packet sent through a [`UdpSegmentSocket`]
/// on `port` will be on the wire: identification `index`, DF, source port `port`, and the
/// ICRC for those, patched in place (`patch` is for the frame's IP length). Returns the
/// UDP payload's offset in `frame`.
pub fn prepare_segment(
    frame: &mut [u8],
    index: u16,
    port: u16,
    patch: &ferroce_wire::icrc::HeadPatch,
) -> Option<usize> {
    const ETH: usize = 14;
    patch
        .apply(frame.get_mut(ETH..)?, |h| {
            h[4..6].copy_from_slice(&index.to_be_bytes());
            h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
            h[20..22].copy_from_slice(&port.to_be_bytes());
        })
        .ok()?;
    Some(ETH + ferroce_wire::icrc::IPV4_UDP_HEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The socket's send buffer holds a burst of super-packets: the requested size, which
    /// the kernel doubles, where the process may force it (root), else as much as
    /// net.core.wmem_max allows; never the small default that refused sends in the VM.
    #[test]
    fn send_buffer_holds_bursts() {
        let sock = match UdpSegmentSocket::open("lo", Ipv4Addr::LOCALHOST) {
            Ok(s) => s,
            // Binding to a device needs CAP_NET_RAW on kernels before 5.7.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => return,
            Err(e) => panic!("cannot open a UDP socket on lo: {e}"),
        };
        let got = rustix::net::sockopt::socket_send_buffer_size(&sock.fd).unwrap();
        let want = super::super::af_packet::SOCKET_BUFFER as usize;
        if rustix::process::geteuid().is_root() {
            assert_eq!(got, 2 * want);
        } else {
            let max = std::fs::read_to_string("/proc/sys/net/core/wmem_max").unwrap();
            assert_eq!(got, 2 * want.min(max.trim().parse().unwrap()));
        }
    }
}

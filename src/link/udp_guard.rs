//! Keeps the kernel from answering RoCE v2 packets with ICMP port unreachable.
//!
//! The kernel sees every frame the raw socket sees. With nothing bound to UDP port 4791 it
//! would answer each RoCE packet with an ICMP error. A UDP socket bound to the port, whose
//! own socket filter drops everything, silences it without queueing a byte.
//!
//! Every ferroce process on the interface binds its own guard with `SO_REUSEADDR` (which,
//! unlike `SO_REUSEPORT`, also lets processes of different users share the port), so the
//! port stays covered for as long as any of them runs, whichever exits first. The kernel's
//! rdma_rxe binds without it, so its presence still shows as `AddrInUse`.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use super::bpf::SockFilter;

/// A UDP socket on port 4791 that discards everything it receives.
#[derive(Debug)]
pub struct UdpGuard {
    _socket: UdpSocket,
}

impl UdpGuard {
    /// Binds `addr`:4791. `AddrInUse` means another RoCE stack (such as the kernel's rdma_rxe)
    /// already owns the port in this network namespace. `gro`: whether the socket may ask
    /// for super-frames whole (see below): where the packet sockets here are told which
    /// frames are super-frames, or where the interface joins no packets itself.
    pub fn bind(addr: IpAddr, gro: bool) -> io::Result<UdpGuard> {
        use rustix::net::{bind, socket_with, sockopt, AddressFamily, SocketFlags, SocketType};
        let family = match addr {
            IpAddr::V4(_) => AddressFamily::INET,
            IpAddr::V6(_) => AddressFamily::INET6,
        };
        let fd = socket_with(family, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
        sockopt::set_socket_reuseaddr(&fd, true)?;
        bind(&fd, &SocketAddr::new(addr, ferroce_wire::ROCE_V2_PORT))?;
        let socket = UdpSocket::from(fd);
        let drop_all = [SockFilter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: drop_all.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points to a one-instruction program that outlives the call; the
        // kernel copies it.
        let ret = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        // A UDP GSO super-frame (see `gso`) reaches this socket whole; without UDP_GRO the
        // kernel would cut it into segments in software, only for the filter to drop them.
        // Best effort: kernels before 5.0 do not have the option and segment as before.
        // But a socket with UDP_GRO also makes a NIC's GRO join the RoCE packets it
        // receives, and a packet socket without a virtio-net header (Linux before 6.2)
        // cannot tell a join of a few short packets from one packet: there the kernel
        // cuts super-frames for this socket instead, unless the interface does no GRO
        // (a veth by default, where the cutting cost the sender's CPU a tenth of its time
        // in the VM: see [`gro_off`]).
        if !gro {
            return Ok(UdpGuard { _socket: socket });
        }
        const UDP_GRO: libc::c_int = 104;
        let on: libc::c_int = 1;
        // SAFETY: `on` is a live int of the size passed; the kernel copies it.
        let ret = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_UDP,
                UDP_GRO,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "no UDP_GRO on the guard socket");
        }
        Ok(UdpGuard { _socket: socket })
    }
}

/// `ETHTOOL_GGRO` (`<linux/ethtool.h>`): whether the interface's generic receive offload is on.
const ETHTOOL_GGRO: u32 = 0x2b;

/// Whether interface `name` has generic receive offload off, so that nothing joins the
/// RoCE packets it receives but a sender's own super-packets (a veth hands those over
/// whole). Off since Linux 5.13 on a veth unless turned on (`ethtool -K IF gro on`), on
/// by default on NICs. `false` when the kernel does not say: assume the joins.
///
/// Read once, at open: GRO turned on later while a process that took its super-frames
/// whole runs (a Linux before 6.2 only) may join short packets it cannot tell apart,
/// which fail their ICRC and are retransmitted.
pub fn gro_off(name: &str) -> bool {
    let Ok(fd) = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    ) else {
        return false;
    };
    let mut value = [ETHTOOL_GGRO, 0u32]; // struct ethtool_value { cmd, data }
                                          // SAFETY: ifreq is plain old data; all-zero is a valid starting value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return false;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = value.as_mut_ptr().cast();
    // SAFETY: `req` holds a NUL-terminated name (checked shorter than the field, which was
    // zeroed) and points to `value`, a live ethtool_value the kernel writes 8 bytes of.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    ret == 0 && value[1] == 0
}

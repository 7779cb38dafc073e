//! Keeps the kernel from answering RoCE v2 packets with ICMP port unreachable.
//!
//! The kernel sees every frame the raw socket sees. With nothing bound to UDP port 4791 it
//! would answer each RoCE packet with an ICMP error. A UDP socket bound to the port, whose
//! own socket filter drops everything, silences it without queueing a byte.

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
    /// already owns the port in this network namespace.
    pub fn bind(addr: IpAddr) -> io::Result<UdpGuard> {
        let socket = UdpSocket::bind(SocketAddr::new(addr, ferroce_wire::ROCE_V2_PORT))?;
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
        Ok(UdpGuard { _socket: socket })
    }
}

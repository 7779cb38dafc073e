//! The rsocket calls as a hostile C caller makes them: unknown and closed numbers, NULL
//! and short arguments get the socket convention (-1 and errno), never a crash; options
//! read back what was set. Connections need devices: tests/netns/rsocket.sh.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr::{null, null_mut};

use super::api::*;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn socket() -> c_int {
    // SAFETY: a plain call.
    let fd = unsafe { rsocket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "rsocket: errno {}", errno());
    fd
}

#[test]
fn unknown_families_types_and_protocols_are_refused() {
    // SAFETY: plain calls with bad arguments, as the test intends.
    unsafe {
        assert_eq!(rsocket(libc::AF_UNIX, libc::SOCK_STREAM, 0), -1);
        assert_eq!(errno(), libc::EAFNOSUPPORT);
        assert_eq!(rsocket(libc::AF_INET, libc::SOCK_DGRAM, 0), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(
            rsocket(libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_UDP),
            -1
        );
        assert_eq!(errno(), libc::EPROTONOSUPPORT);
        assert_eq!(rsocket(libc::AF_INET, libc::SOCK_RAW, 0), -1);
        assert_eq!(errno(), libc::EPROTONOSUPPORT);
    }
}

#[test]
fn unknown_and_closed_numbers_get_ebadf() {
    let fd = socket();
    let mut b = [0u8; 8];
    // SAFETY: valid buffers; the numbers are the point.
    unsafe {
        assert_eq!(rclose(fd), 0);
        for bad in [fd, -1, 0, 1_000_000] {
            assert_eq!(rsend(bad, b.as_ptr().cast(), 8, 0), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(rrecv(bad, b.as_mut_ptr().cast(), 8, 0), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(rlisten(bad, 1), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(rshutdown(bad, libc::SHUT_RDWR), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(rclose(bad), -1);
            assert_eq!(errno(), libc::EBADF);
            assert_eq!(rfcntl(bad, libc::F_GETFL, 0), -1);
            assert_eq!(errno(), libc::EBADF);
        }
    }
}

#[test]
fn null_and_short_arguments_are_refused() {
    let fd = socket();
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 7471u16.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([10, 255, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let sa = (&sin as *const libc::sockaddr_in).cast::<libc::sockaddr>();
    let one: c_int = 1;
    let mut v: c_int = 0;
    let mut len: libc::socklen_t;
    // SAFETY: NULL and short arguments are what this test passes.
    unsafe {
        assert_eq!(rbind(fd, null(), 16), -1);
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(rbind(fd, sa, 8), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rconnect(fd, sa, 2), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rsend(fd, null(), 10, 0), -1);
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(rrecv(fd, null_mut(), 10, 0), -1);
        assert_eq!(errno(), libc::EFAULT);
        // Not connected.
        let mut b = [0u8; 4];
        assert_eq!(rrecv(fd, b.as_mut_ptr().cast(), 4, 0), -1);
        assert_eq!(errno(), libc::ENOTCONN);
        assert_eq!(rsend(fd, b.as_ptr().cast(), 4, 0), -1);
        assert_eq!(errno(), libc::ENOTCONN);
        assert_eq!(rwritev(fd, null(), 3), -1);
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(rreadv(fd, null(), -1), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rsendmsg(fd, null(), 0), -1);
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(
            rsetsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, null(), 4),
            -1
        );
        assert_eq!(errno(), libc::EFAULT);
        let p = (&one as *const c_int).cast::<c_void>();
        assert_eq!(
            rsetsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, p, 2),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rsetsockopt(fd, 12345, 1, p, 4), -1);
        assert_eq!(errno(), libc::ENOTSUP);
        let pv = (&mut v as *mut c_int).cast::<c_void>();
        assert_eq!(
            rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, pv, null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EFAULT);
        len = 1;
        assert_eq!(
            rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, pv, &mut len),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rgetpeername(fd, null_mut(), &mut len), -1);
        assert_eq!(errno(), libc::EFAULT);
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        assert_eq!(
            rgetpeername(
                fd,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len
            ),
            -1
        );
        assert_eq!(errno(), libc::ENOTCONN);
        assert_eq!(rshutdown(fd, libc::SHUT_RDWR), -1);
        assert_eq!(errno(), libc::ENOTCONN);
        assert_eq!(rlisten(fd, 1), -1, "listen before bind");
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rpoll(null_mut(), 1, 0), -1);
        assert_eq!(errno(), libc::EFAULT);
        assert_eq!(
            rselect(
                libc::FD_SETSIZE as c_int + 1,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut()
            ),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rclose(fd), 0);
    }
}

#[test]
fn options_read_back_and_sizes_are_bounded() {
    let fd = socket();
    let set = |level, name, x: c_int| {
        // SAFETY: an int option of the right size.
        unsafe { rsetsockopt(fd, level, name, (&x as *const c_int).cast(), 4) }
    };
    let get = |level, name| {
        let mut v: c_int = -7;
        let mut len = 4 as libc::socklen_t;
        // SAFETY: room for an int.
        let r = unsafe { rgetsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
        assert_eq!((r, len), (0, 4), "option {level}/{name}");
        v
    };
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_RCVBUF), 1 << 20 >> 1);
    assert_eq!(set(libc::SOL_SOCKET, libc::SO_RCVBUF, 1 << 20), 0);
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_RCVBUF), 1 << 20);
    // Absurd sizes are held to what a ring may be.
    assert_eq!(set(libc::SOL_SOCKET, libc::SO_SNDBUF, c_int::MAX), 0);
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_SNDBUF), (64 << 20) / 2);
    assert_eq!(set(libc::SOL_SOCKET, libc::SO_SNDBUF, -5), 0);
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_SNDBUF), 2048);
    assert_eq!(set(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1), 0);
    assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_NODELAY), 1);
    assert_eq!(set(0x10000, 0, 5), 0); // RDMA_SQSIZE: at least 16
    assert_eq!(get(0x10000, 0), 16);
    assert_eq!(set(0x10000, 1, 100_000), 0); // RDMA_RQSIZE: at most 0xfffe
    assert_eq!(get(0x10000, 1), 0xfffe);
    assert_eq!(set(0x10000, 3, 8), -1); // RDMA_IOMAPSIZE: no zero-copy map is built
    assert_eq!(errno(), libc::ENOTSUP);
    assert_eq!(set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 0), -1);
    assert_eq!(errno(), libc::EINVAL);
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_ERROR), 0);
    assert_eq!(get(libc::SOL_SOCKET, libc::SO_TYPE), libc::SOCK_STREAM);
    // SAFETY: plain calls on the socket.
    unsafe {
        assert_eq!(rfcntl(fd, libc::F_GETFL, 0) & libc::O_NONBLOCK, 0);
        assert_eq!(
            rfcntl(fd, libc::F_SETFL, libc::O_NONBLOCK as libc::c_long),
            0
        );
        assert_ne!(rfcntl(fd, libc::F_GETFL, 0) & libc::O_NONBLOCK, 0);
        assert_eq!(rfcntl(fd, libc::F_DUPFD, 0), -1);
        assert_eq!(errno(), libc::ENOTSUP);
        assert_eq!(rclose(fd), 0);
    }
}

#[test]
fn a_poll_of_an_unconnected_socket_and_a_pipe_waits_for_the_pipe() {
    let fd = socket();
    let mut p = [0 as c_int; 2];
    // SAFETY: plain calls; `p` has room for two fds.
    unsafe { assert_eq!(libc::pipe(p.as_mut_ptr()), 0) };
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLOUT,
            revents: 0,
        },
        libc::pollfd {
            fd: p[0],
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a live array of 2.
    unsafe {
        assert_eq!(rpoll(fds.as_mut_ptr(), 2, 0), 0);
        let t = std::time::Instant::now();
        assert_eq!(rpoll(fds.as_mut_ptr(), 2, 50), 0);
        assert!(t.elapsed() >= std::time::Duration::from_millis(45));
        assert_eq!(libc::write(p[1], b"x".as_ptr().cast(), 1), 1);
        assert_eq!(rpoll(fds.as_mut_ptr(), 2, 1000), 1);
        assert_eq!((fds[0].revents, fds[1].revents), (0, libc::POLLIN));
        // The same through rselect.
        let mut r: libc::fd_set = std::mem::zeroed();
        libc::FD_ZERO(&mut r);
        libc::FD_SET(fd, &mut r);
        libc::FD_SET(p[0], &mut r);
        let mut tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        let n = fd.max(p[0]) + 1;
        assert_eq!(rselect(n, &mut r, null_mut(), null_mut(), &mut tv), 1);
        assert!(libc::FD_ISSET(p[0], &r) && !libc::FD_ISSET(fd, &r));
        libc::close(p[0]);
        libc::close(p[1]);
        assert_eq!(rclose(fd), 0);
    }
}

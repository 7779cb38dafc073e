//! Helpers shared by the CLI crate's integration tests.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A TCP port on 127.0.0.1 that is bound but not listening, held for as long as the
/// returned socket lives: connecting to it is refused, and no other process can take the
/// port meanwhile (binding a listener and closing it again would leave that window open).
pub fn refusing_port() -> (OwnedFd, u16) {
    // SAFETY: plain socket calls on a descriptor this function owns; the address structures
    // are zero-initialised `sockaddr_in`s of the size passed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let fd = OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let r = libc::bind(
            fd.as_raw_fd(),
            &addr as *const _ as *const libc::sockaddr,
            len,
        );
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut got_len = len;
        let r = libc::getsockname(
            fd.as_raw_fd(),
            &mut got as *mut _ as *mut libc::sockaddr,
            &mut got_len,
        );
        assert_eq!(r, 0, "getsockname: {}", std::io::Error::last_os_error());
        (fd, u16::from_be(got.sin_port))
    }
}

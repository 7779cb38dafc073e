//! The rsocket calls as C sees them: a socket's number looked up, arguments checked
//! (NULL, short addresses, unknown numbers get the socket convention: -1 and errno), and
//! no panic into C.

use std::ffi::{c_int, c_void};
use std::mem::size_of;

use super::stream::{Phase, RSocket};
use super::{insert, lookup, remove};
use crate::ffi::cma_h::rdma_cm_id;
use crate::guard::{catch, set_errno};

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
const RDMA_ROUTE: c_int = 4;

/// -1 with errno `e`.
fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// Runs `f` on socket `fd`'s object, or fails with EBADF.
fn with<T: From<i8>>(
    name: &'static str,
    fd: c_int,
    f: impl FnOnce(&RSocket) -> Result<T, c_int>,
) -> T {
    catch(name, T::from(-1), || match lookup(fd) {
        None => fail(libc::EBADF),
        Some(s) => f(&s).unwrap_or_else(fail),
    })
}

/// The length a sockaddr of `addr`'s family needs, if it is one rsockets take.
///
/// # Safety
/// `addr` is NULL or points to at least `len` bytes.
unsafe fn addr_len(addr: *const libc::sockaddr, len: libc::socklen_t) -> Result<usize, c_int> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least the family is there (checked).
    let need = match c_int::from(unsafe { (*addr).sa_family }) {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(libc::EINVAL);
    }
    Ok(need)
}

/// A copy of a caller's address in a sockaddr_storage.
///
/// # Safety
/// As [`addr_len`].
unsafe fn storage(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<libc::sockaddr_storage, c_int> {
    // SAFETY: the caller's contract.
    let need = unsafe { addr_len(addr, len) }?;
    // SAFETY: sockaddr_storage is plain data.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: `need` bytes are readable at `addr` (checked) and fit in the storage.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            (&mut s as *mut libc::sockaddr_storage).cast(),
            need,
        )
    };
    Ok(s)
}

#[export_name = "__ferroce_rsocket"]
pub unsafe extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    catch("rsocket", -1, || {
        let base = kind & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return fail(libc::EAFNOSUPPORT);
        }
        if base == libc::SOCK_DGRAM {
            tracing::warn!("rsocket: datagram rsockets are not built in ferroce");
            return fail(libc::EOPNOTSUPP);
        }
        if base != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
            return fail(libc::EPROTONOSUPPORT);
        }
        match RSocket::new(domain, kind & libc::SOCK_NONBLOCK != 0) {
            Ok(s) => insert(s),
            Err(e) => fail(e),
        }
    })
}

#[export_name = "__ferroce_rbind"]
pub unsafe extern "C" fn rbind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    with("rbind", fd, |s| {
        // SAFETY: the caller's address of `len` bytes (bind's contract).
        let a = unsafe { storage(addr, len) }?;
        s.bind((&a as *const libc::sockaddr_storage).cast())?;
        Ok(0)
    })
}

#[export_name = "__ferroce_rlisten"]
pub unsafe extern "C" fn rlisten(fd: c_int, backlog: c_int) -> c_int {
    with("rlisten", fd, |s| s.listen(backlog).map(|()| 0))
}

#[export_name = "__ferroce_raccept"]
pub unsafe extern "C" fn raccept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    with("raccept", fd, |s| {
        let new = s.accept()?;
        let id = new.lock().id;
        let nfd = insert(new);
        // SAFETY: the caller's out-parameters (accept's contract); the new socket's ID.
        unsafe { copy_addr(id, false, addr, len) };
        Ok(nfd)
    })
}

#[export_name = "__ferroce_rconnect"]
pub unsafe extern "C" fn rconnect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    with("rconnect", fd, |s| {
        // SAFETY: the caller's address of `len` bytes (connect's contract).
        let a = unsafe { storage(addr, len) }?;
        s.connect(&a, len)?;
        Ok(0)
    })
}

#[export_name = "__ferroce_rshutdown"]
pub unsafe extern "C" fn rshutdown(fd: c_int, how: c_int) -> c_int {
    with("rshutdown", fd, |s| s.shutdown(how).map(|()| 0))
}

#[export_name = "__ferroce_rclose"]
pub unsafe extern "C" fn rclose(fd: c_int) -> c_int {
    catch("rclose", -1, || match remove(fd) {
        None => fail(libc::EBADF),
        Some(s) => {
            if s.lock().phase == Phase::Connected {
                // As close() on a TCP socket: what was sent is delivered, the peer told.
                let _ = s.shutdown(libc::SHUT_RDWR);
            }
            s.destroy();
            0
        }
    })
}

#[export_name = "__ferroce_rrecv"]
pub unsafe extern "C" fn rrecv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    with("rrecv", fd, |s| {
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        s.recv(&[(buf.cast(), len)], flags).map(|n| n as isize)
    })
}

#[export_name = "__ferroce_rrecvfrom"]
pub unsafe extern "C" fn rrecvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src: *mut libc::sockaddr,
    srclen: *mut libc::socklen_t,
) -> isize {
    // SAFETY: the caller's arguments, passed on.
    let n = unsafe { rrecv(fd, buf, len, flags) };
    if n >= 0 && !src.is_null() {
        // SAFETY: as above.
        unsafe { rgetpeername(fd, src, srclen) };
    }
    n
}

/// The caller's iovecs as (pointer, length) pairs.
///
/// # Safety
/// `iov` is NULL or points to `n` iovecs.
unsafe fn iovecs(iov: *const libc::iovec, n: c_int) -> Result<Vec<(*mut u8, usize)>, c_int> {
    if !(0..=1024).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n > 0 && iov.is_null() {
        return Err(libc::EFAULT);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: `i` < `n` (the caller's contract).
        let e = unsafe { *iov.add(i) };
        if e.iov_base.is_null() && e.iov_len > 0 {
            return Err(libc::EFAULT);
        }
        v.push((e.iov_base.cast::<u8>(), e.iov_len));
    }
    Ok(v)
}

#[export_name = "__ferroce_rreadv"]
pub unsafe extern "C" fn rreadv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    with("rreadv", fd, |s| {
        // SAFETY: the caller's iovecs (readv's contract).
        let v = unsafe { iovecs(iov, n) }?;
        s.recv(&v, 0).map(|n| n as isize)
    })
}

#[export_name = "__ferroce_rread"]
pub unsafe extern "C" fn rread(fd: c_int, buf: *mut c_void, len: usize) -> isize {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rrecv(fd, buf, len, 0) }
}

#[export_name = "__ferroce_rrecvmsg"]
pub unsafe extern "C" fn rrecvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    with("rrecvmsg", fd, |s| {
        if msg.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: non-NULL, the caller's msghdr (recvmsg's contract).
        let m = unsafe { &mut *msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(libc::ENOTSUP);
        }
        // SAFETY: the msghdr's own iovecs.
        let v = unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }?;
        let n = s.recv(&v, flags)?;
        m.msg_flags = 0;
        Ok(n as isize)
    })
}

/// Sends the caller's pieces.
fn send_pieces(s: &RSocket, v: &[(*mut u8, usize)], flags: c_int) -> Result<isize, c_int> {
    // SAFETY: each piece is the caller's readable buffer (send's contract), checked
    // non-NULL where non-empty.
    let bufs: Vec<&[u8]> = v
        .iter()
        .filter(|p| p.1 > 0)
        .map(|&(p, n)| unsafe { std::slice::from_raw_parts(p.cast_const(), n) })
        .collect();
    s.send(&bufs, flags).map(|n| n as isize)
}

#[export_name = "__ferroce_rsend"]
pub unsafe extern "C" fn rsend(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
    with("rsend", fd, |s| {
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        send_pieces(s, &[(buf.cast_mut().cast(), len)], flags)
    })
}

#[export_name = "__ferroce_rsendto"]
pub unsafe extern "C" fn rsendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    dst: *const libc::sockaddr,
    _dstlen: libc::socklen_t,
) -> isize {
    if !dst.is_null() {
        // A connected stream: as sendto() on TCP.
        return fail(libc::EISCONN);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { rsend(fd, buf, len, flags) }
}

#[export_name = "__ferroce_rsendmsg"]
pub unsafe extern "C" fn rsendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    with("rsendmsg", fd, |s| {
        if msg.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: non-NULL, the caller's msghdr.
        let m = unsafe { &*msg };
        // SAFETY: the msghdr's own iovecs.
        let v = unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }?;
        send_pieces(s, &v, flags)
    })
}

#[export_name = "__ferroce_rwrite"]
pub unsafe extern "C" fn rwrite(fd: c_int, buf: *const c_void, len: usize) -> isize {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rsend(fd, buf, len, 0) }
}

#[export_name = "__ferroce_rwritev"]
pub unsafe extern "C" fn rwritev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    with("rwritev", fd, |s| {
        // SAFETY: the caller's iovecs (writev's contract).
        let v = unsafe { iovecs(iov, n) }?;
        send_pieces(s, &v, 0)
    })
}

/// Copies the ID's local (`local`) or peer address to the caller's (`addr`, `len`), as
/// getsockname() does: cut to the room given, the full length written back.
///
/// # Safety
/// `id` is live; `addr` and `len` are NULL or the caller's.
unsafe fn copy_addr(
    id: *mut rdma_cm_id,
    local: bool,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: the live ID's route; sockaddr_storage is plain data.
    let a: libc::sockaddr_storage = unsafe {
        let r = &(*id).route.addr;
        let p: *const libc::sockaddr_storage = if local {
            &*r.__bindgen_anon_1.src_storage
        } else {
            &*r.__bindgen_anon_2.dst_storage
        };
        std::ptr::read(p.cast())
    };
    let full = match c_int::from(a.ss_family) {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => size_of::<libc::sa_family_t>(),
    };
    // SAFETY: `len` non-NULL, the caller's; `addr` has room for `*len` bytes.
    unsafe {
        let room = (*len as usize).min(full);
        std::ptr::copy_nonoverlapping(
            (&a as *const libc::sockaddr_storage).cast::<u8>(),
            addr.cast(),
            room,
        );
        *len = full as libc::socklen_t;
    }
}

#[export_name = "__ferroce_rgetpeername"]
pub unsafe extern "C" fn rgetpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    with("rgetpeername", fd, |s| {
        if addr.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        let st = s.lock();
        if !matches!(st.phase, Phase::Connected | Phase::Disconnected) {
            return Err(libc::ENOTCONN);
        }
        // SAFETY: the socket's live ID (its lock held); the caller's out-parameters.
        unsafe { copy_addr(st.id, false, addr, len) };
        Ok(0)
    })
}

#[export_name = "__ferroce_rgetsockname"]
pub unsafe extern "C" fn rgetsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    with("rgetsockname", fd, |s| {
        if addr.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        let st = s.lock();
        // SAFETY: as in rgetpeername.
        unsafe { copy_addr(st.id, true, addr, len) };
        Ok(0)
    })
}

/// An int option's value.
///
/// # Safety
/// `v` is NULL or points to `len` bytes.
unsafe fn int_opt(v: *const c_void, len: libc::socklen_t) -> Result<c_int, c_int> {
    if v.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least an int's bytes (checked); unaligned read, the caller's memory.
    Ok(unsafe { std::ptr::read_unaligned(v.cast::<c_int>()) })
}

#[export_name = "__ferroce_rsetsockopt"]
pub unsafe extern "C" fn rsetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    v: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    with("rsetsockopt", fd, |s| {
        let mut st = s.lock();
        // Sizes count only before the connection's buffers are made.
        let unmade = st.ep.is_none();
        let o = &mut st.opts;
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                if v.is_null() {
                    return Err(libc::EFAULT);
                }
                if (len as usize) < size_of::<libc::linger>() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: a linger's bytes (checked), the caller's.
                o.linger = unsafe { std::ptr::read_unaligned(v.cast()) };
                return Ok(0);
            }
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => return Ok(0),
            _ => {}
        }
        // SAFETY: the caller's option of `len` bytes.
        let x = unsafe { int_opt(v, len) }?;
        let size16 = |x: c_int| u16::try_from(x.clamp(0, 0xfffe)).unwrap_or(0xfffe);
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr = x != 0,
            (libc::SOL_SOCKET, libc::SO_RCVBUF) if unmade => o.rbuf = buf_size(x, o.rbuf),
            (libc::SOL_SOCKET, libc::SO_SNDBUF) if unmade => o.sbuf = buf_size(x, o.sbuf),
            (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_SNDBUF) => {}
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => o.keepalive = x != 0,
            (libc::SOL_SOCKET, libc::SO_OOBINLINE) => o.oobinline = x != 0,
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay = x != 0,
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
                if x <= 0 {
                    return Err(libc::EINVAL);
                }
                o.keepidle = x;
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG) => {}
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => o.v6only = x != 0,
            (SOL_RDMA, RDMA_SQSIZE) if unmade => o.sq = size16(x).max(16),
            (SOL_RDMA, RDMA_RQSIZE) if unmade => o.rq = size16(x).max(16),
            (SOL_RDMA, RDMA_INLINE) if unmade => o.inline = size16(x),
            (SOL_RDMA, RDMA_SQSIZE | RDMA_RQSIZE | RDMA_INLINE) => return Err(libc::EINVAL),
            (SOL_RDMA, RDMA_IOMAPSIZE) => {
                if x != 0 {
                    // No zero-copy map is built: say so rather than pretend.
                    return Err(libc::ENOTSUP);
                }
            }
            (SOL_RDMA, RDMA_ROUTE) => return Err(libc::ENOTSUP),
            _ => return Err(libc::ENOTSUP),
        }
        Ok(0)
    })
}

/// A buffer size from SO_RCVBUF / SO_SNDBUF: doubled, as Linux and rsockets do, and kept
/// between 4 KiB and 64 MiB (an even number, as the receive ring is used in halves).
fn buf_size(x: c_int, _old: u32) -> u32 {
    let v = (x.max(0) as u64) * 2;
    (v.clamp(4096, 64 << 20) as u32) & !1
}

#[export_name = "__ferroce_rgetsockopt"]
pub unsafe extern "C" fn rgetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    v: *mut c_void,
    len: *mut libc::socklen_t,
) -> c_int {
    with("rgetsockopt", fd, |s| {
        if v.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: non-NULL, the caller's.
        let room = unsafe { *len } as usize;
        if (level, name) == (libc::SOL_SOCKET, libc::SO_ERROR) {
            let e = s.take_error();
            return put_int(v, len, room, e);
        }
        let st = s.lock();
        let o = st.opts;
        let (sizes_sq, sizes_rq, inline) = match st.ep.as_ref() {
            Some(ep) => (
                c_int::from(ep.sizes.sq),
                c_int::from(ep.sizes.rq),
                ep.inline as c_int,
            ),
            None => (c_int::from(o.sq), c_int::from(o.rq), c_int::from(o.inline)),
        };
        drop(st);
        let x = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                if room < size_of::<libc::linger>() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: room for a linger (checked), the caller's.
                unsafe {
                    std::ptr::write_unaligned(v.cast::<libc::linger>(), o.linger);
                    *len = size_of::<libc::linger>() as libc::socklen_t;
                }
                return Ok(0);
            }
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => c_int::from(o.reuseaddr),
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => (o.rbuf / 2) as c_int,
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => (o.sbuf / 2) as c_int,
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => c_int::from(o.keepalive),
            (libc::SOL_SOCKET, libc::SO_OOBINLINE) => c_int::from(o.oobinline),
            (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => c_int::from(o.nodelay),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => o.keepidle,
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 65536,
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => c_int::from(o.v6only),
            (SOL_RDMA, RDMA_SQSIZE) => sizes_sq,
            (SOL_RDMA, RDMA_RQSIZE) => sizes_rq,
            (SOL_RDMA, RDMA_INLINE) => inline,
            (SOL_RDMA, RDMA_IOMAPSIZE) => 0,
            _ => return Err(libc::ENOTSUP),
        };
        put_int(v, len, room, x)
    })
}

fn put_int(
    v: *mut c_void,
    len: *mut libc::socklen_t,
    room: usize,
    x: c_int,
) -> Result<c_int, c_int> {
    if room < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: room for an int (checked); the caller's non-NULL out-parameters.
    unsafe {
        std::ptr::write_unaligned(v.cast::<c_int>(), x);
        *len = size_of::<c_int>() as libc::socklen_t;
    }
    Ok(0)
}

/// `rfcntl(fd, cmd, ...)`. Stable Rust cannot define a C variadic function; on the
/// targets this library builds for (x86-64 and AArch64 Linux), a variadic call passes its
/// one integer or pointer argument in the same register as a fixed third parameter, so
/// this reads it as one.
#[export_name = "__ferroce_rfcntl"]
pub unsafe extern "C" fn rfcntl(fd: c_int, cmd: c_int, arg: libc::c_long) -> c_int {
    with("rfcntl", fd, |s| match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR
            | if s.lock().nonblock {
                libc::O_NONBLOCK
            } else {
                0
            }),
        libc::F_SETFL => {
            s.set_nonblock(arg as c_int & libc::O_NONBLOCK != 0);
            Ok(0)
        }
        libc::F_GETFD => Ok(0),
        libc::F_SETFD => Ok(0),
        _ => Err(libc::ENOTSUP),
    })
}

#[export_name = "__ferroce_rpoll"]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    catch("rpoll", -1, || {
        if fds.is_null() && n > 0 {
            return fail(libc::EFAULT);
        }
        if n > 65536 {
            return fail(libc::EINVAL);
        }
        // SAFETY: `n` pollfds of the caller's (poll's contract).
        let v = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
        super::poll::rpoll(v, timeout).unwrap_or_else(fail)
    })
}

#[export_name = "__ferroce_rselect"]
pub unsafe extern "C" fn rselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    catch("rselect", -1, || {
        // SAFETY: the caller's sets and timeout, NULL or live (select's contract).
        unsafe { super::poll::rselect(n, r, w, e, timeout) }.unwrap_or_else(fail)
    })
}

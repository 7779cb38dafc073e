//! `rpoll` and `rselect`: rsockets and ordinary fds in one wait. An rsocket is ready by
//! its own state (data waiting, room to send, a connect finished); when none is ready,
//! each rsocket's completion channel is armed and the kernel waits on those fds beside
//! the program's own, and what woke is looked at again.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lookup;
use super::stream::RSocket;

/// The longest single kernel wait: a socket whose wake-up another thread took is looked
/// at again by then (as rdma-core's rpoll wakes every 500 ms).
const WAKE_MS: c_int = 500;

/// Fills each entry's `revents`; the number of entries with any.
fn check(fds: &mut [libc::pollfd], socks: &[Option<Arc<RSocket>>]) -> c_int {
    let mut plain: Vec<libc::pollfd> = Vec::new();
    for (p, s) in fds.iter_mut().zip(socks) {
        p.revents = match s {
            Some(s) => {
                let mut st = s.lock();
                s.revents(&mut st, p.events)
            }
            None => 0,
        };
        if s.is_none() {
            plain.push(*p);
        }
    }
    if !plain.is_empty() {
        // SAFETY: a live array of `plain.len()` pollfds.
        unsafe { libc::poll(plain.as_mut_ptr(), plain.len() as libc::nfds_t, 0) };
        let mut it = plain.iter();
        for (p, s) in fds.iter_mut().zip(socks) {
            if s.is_none() {
                p.revents = it.next().map_or(0, |q| q.revents);
            }
        }
    }
    fds.iter().filter(|p| p.revents != 0).count() as c_int
}

pub(crate) fn rpoll(fds: &mut [libc::pollfd], timeout: c_int) -> Result<c_int, c_int> {
    let socks: Vec<Option<Arc<RSocket>>> = fds.iter().map(|p| lookup(p.fd)).collect();
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let n = check(fds, &socks);
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        // Arm, then look once more: what completed before the arming raises no event.
        let mut kernel: Vec<libc::pollfd> = Vec::new();
        for (p, s) in fds.iter().zip(&socks) {
            match s {
                Some(s) => {
                    let mut st = s.lock();
                    for fd in s.arm(&mut st) {
                        kernel.push(libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                    }
                }
                None => kernel.push(libc::pollfd {
                    fd: p.fd,
                    events: p.events,
                    revents: 0,
                }),
            }
        }
        let n = check(fds, &socks);
        if n > 0 {
            return Ok(n);
        }
        let ms = match deadline {
            None => WAKE_MS,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(0);
                }
                (left.as_millis().min(WAKE_MS as u128) as c_int).max(1)
            }
        };
        // SAFETY: a live array of `kernel.len()` pollfds.
        let r = unsafe { libc::poll(kernel.as_mut_ptr(), kernel.len() as libc::nfds_t, ms) };
        if r < 0 {
            return Err(crate::rdmacm::last_errno());
        }
        for s in socks.iter().flatten() {
            let mut st = s.lock();
            st.cm_pending |= kernel.iter().any(|k| k.fd == s.fd && k.revents != 0);
            s.take_cq_event(&mut st);
        }
    }
}

/// # Safety
/// Each set is NULL or the caller's fd_set; `timeout` NULL or the caller's timeval.
pub(crate) unsafe fn rselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> Result<c_int, c_int> {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&n) {
        return Err(libc::EINVAL);
    }
    let is_set = |set: *mut libc::fd_set, fd: c_int| {
        // SAFETY: `set` non-NULL, the caller's; fd < FD_SETSIZE.
        !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
    };
    let mut fds = Vec::new();
    for fd in 0..n {
        let mut events = 0;
        if is_set(r, fd) {
            events |= libc::POLLIN;
        }
        if is_set(w, fd) {
            events |= libc::POLLOUT;
        }
        if is_set(e, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: non-NULL, the caller's.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            return Err(libc::EINVAL);
        }
        (t.tv_sec.saturating_mul(1000) + t.tv_usec / 1000).min(c_int::MAX as i64) as c_int
    };
    rpoll(&mut fds, ms)?;
    for set in [r, w, e] {
        if !set.is_null() {
            // SAFETY: the caller's set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &fds {
        let mut hit = |set: *mut libc::fd_set, mask: i16| {
            if !set.is_null() && p.revents & mask != 0 {
                // SAFETY: the caller's set; fd < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        };
        if p.events & libc::POLLIN != 0 {
            hit(r, libc::POLLIN | libc::POLLHUP | libc::POLLERR);
        }
        if p.events & libc::POLLOUT != 0 {
            hit(w, libc::POLLOUT | libc::POLLERR);
        }
        if p.events & libc::POLLPRI != 0 {
            hit(e, libc::POLLPRI);
        }
    }
    Ok(count)
}

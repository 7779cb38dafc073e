//! A Linux eventfd: how API threads and in-memory peers wake the driver thread's poll().

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A counter the kernel makes pollable: `wake` makes it readable, `drain` resets it.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        Self::with_flags(libc::EFD_NONBLOCK)
    }

    /// A blocking eventfd in semaphore mode: each read takes one wake-up, and blocks while
    /// there is none (unless its owner sets O_NONBLOCK). The events of a completion
    /// channel: one read per event, as `ibv_get_cq_event` reads its channel's descriptor.
    pub fn semaphore() -> io::Result<EventFd> {
        Self::with_flags(libc::EFD_SEMAPHORE)
    }

    fn with_flags(flags: libc::c_int) -> io::Result<EventFd> {
        // SAFETY: plain eventfd(2) call; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    /// Makes the eventfd readable (wakes a poller).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64, as eventfd requires. A full counter
        // (EAGAIN) already means "readable", so the result can be ignored.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Takes one wake-up (semaphore mode) or all of them: blocks while there is none on a
    /// blocking descriptor, and fails with `WouldBlock` on a non-blocking one.
    pub fn take(&self) -> io::Result<u64> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into a live u64, as eventfd requires.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(v);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Takes one wake-up if there is one, without blocking even on a blocking descriptor.
    pub fn try_take(&self) -> io::Result<bool> {
        if poll_readable(&[self.fd.as_raw_fd()], Some(std::time::Duration::ZERO))? == 0 {
            return Ok(false);
        }
        self.take().map(|_| true)
    }

    /// Resets the counter so the next poll blocks again.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (nothing pending) is fine.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits until one of `fds` is readable or `timeout` passes (`None` = forever); returns
/// which were readable (bit `i` for `fds[i]`, the first 32).
pub fn poll_readable(fds: &[RawFd], timeout: Option<std::time::Duration>) -> io::Result<u32> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // ppoll: microsecond timeouts stay microseconds (poll(2) counts milliseconds).
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is a valid array of pollfd of the given length for the whole call;
    // `tsp` is NULL or points to `ts`, alive until the call returns; no signal mask.
    let ret = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(pfds
        .iter()
        .take(32)
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .fold(0, |m, (i, _)| m | 1 << i))
}

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
    ///
    /// One read(2), so it fails with `Interrupted` when a signal handler installed
    /// without `SA_RESTART` runs meanwhile, as the kernel's verbs and rdma_cm files do
    /// for the C calls that wait on them. Programs end their test loops that way (qperf's
    /// alarm sets a flag and expects `ibv_get_cq_event` to return): a wait that went on
    /// after the signal hung them until their peer gave up.
    pub fn take(&self) -> io::Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64, as eventfd requires.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            Ok(v)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Takes one wake-up if there is one, without blocking even on a blocking descriptor
    /// that another thread reads too: one read with `RWF_NOWAIT` (eventfd honours it
    /// since Linux 5.10). A poll then a read would block when another thread took the
    /// last wake-up between the two, and a caller holding a lock that thread needs next
    /// (rdma_cm's event queue) would never wake. Kernels without it get that poll and
    /// read.
    pub fn try_take(&self) -> io::Result<bool> {
        let mut v: u64 = 0;
        let iov = libc::iovec {
            iov_base: (&mut v as *mut u64).cast(),
            iov_len: 8,
        };
        loop {
            // SAFETY: one iovec over a live u64 of the 8 bytes eventfd requires; offset
            // -1 is the file position, which an eventfd ignores.
            let n = unsafe { libc::preadv2(self.fd.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) };
            if n == 8 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(false),
                Some(libc::EINTR) => continue,
                Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) => break,
                _ => return Err(e),
            }
        }
        if poll_readable(&[self.fd.as_raw_fd()], Some(std::time::Duration::ZERO))? == 0 {
            return Ok(false);
        }
        loop {
            match self.take() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r.map(|_| true),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_take_takes_one_wake_up_each_and_never_blocks() {
        let fd = EventFd::semaphore().unwrap();
        assert!(
            !fd.try_take().unwrap(),
            "none yet: false, not a blocked read"
        );
        fd.wake();
        fd.wake();
        assert!(fd.try_take().unwrap());
        assert!(fd.try_take().unwrap());
        assert!(!fd.try_take().unwrap());
        fd.wake();
        assert_eq!(fd.take().unwrap(), 1, "what try_take left is there to read");
    }
}

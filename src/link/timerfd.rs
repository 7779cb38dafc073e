//! A Linux timerfd: the driver's timer that API threads can move without waking it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A one-shot CLOCK_MONOTONIC timer whose expiry makes the descriptor readable.
#[derive(Debug)]
pub struct TimerFd {
    fd: OwnedFd,
}

/// Now on CLOCK_MONOTONIC, in nanoseconds.
pub fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl TimerFd {
    /// A disarmed, non-blocking timer.
    pub fn new() -> io::Result<TimerFd> {
        // SAFETY: plain timerfd_create(2); the result is checked before use.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        Ok(TimerFd {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    /// Fires at the absolute CLOCK_MONOTONIC time `at_nanos`; `None` disarms.
    pub fn set(&self, at_nanos: Option<u64>) {
        // A zero it_value disarms, so an already-due time becomes "1 ns after boot": past,
        // which fires at once.
        let ns = at_nanos.map_or(0, |n| n.max(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old value is not requested (null).
        unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }

    /// Consumes an expiry so the descriptor polls unreadable again.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (not expired) is fine.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::eventfd::poll_readable;
    use std::time::{Duration, Instant};

    #[test]
    fn fires_at_the_absolute_time_and_can_be_moved() {
        let t = TimerFd::new().unwrap();
        let start = Instant::now();
        t.set(Some(monotonic_nanos() + 50_000_000));
        t.set(Some(monotonic_nanos() + 5_000_000)); // moved earlier
        poll_readable(&[t.as_raw_fd()], Some(Duration::from_secs(2))).unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(4) && waited < Duration::from_millis(45),
            "{waited:?}"
        );
        t.drain();
        t.set(None);
        let start = Instant::now();
        poll_readable(&[t.as_raw_fd()], Some(Duration::from_millis(30))).unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(25),
            "a disarmed timer does not fire"
        );
    }
}

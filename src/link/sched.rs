//! A scheduling hint for the thread that receives frames: ask the kernel for a short time
//! slice, so that a frame's arrival gets it a CPU at once instead of after the slice of
//! whatever thread is spinning there.
//!
//! Why: a program that waits by spinning on its own memory (perftest's `ib_write_lat`
//! polls the last byte of its buffer, never a CQ) leaves every frame to the driver thread.
//! On a machine with as many spinning threads as CPUs, the woken driver waits for a
//! spinner's slice to end (Linux's EEVDF runs the current task to its deadline, a few
//! hundred microseconds) before it may store the data the spinner waits for. Since Linux
//! 6.12 a normal (SCHED_OTHER) thread may ask for a shorter slice (`sched_runtime` in
//! `sched_setattr`, 0.1 ms to 100 ms, no privilege needed), and a waking task with a
//! shorter slice preempts the running one. Older kernels ignore the field for normal
//! threads: the call is harmless there.

use std::io;
use std::time::Duration;

/// `struct sched_attr` of `<linux/sched/types.h>` (first version, 56 bytes: the kernel
/// accepts any size it knows and zero-fills what an older caller leaves out).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

const SCHED_OTHER: u32 = 0;
const SCHED_BATCH: u32 = 3;

/// Asks for time slices of `slice` for the calling thread, keeping its policy and nice
/// value. Returns whether the slice was set (false: the thread runs under a policy this
/// does not touch, e.g. a real-time one chosen by the user). Errors come from the kernel
/// (e.g. `ENOSYS` under a seccomp filter); callers treat them as a hint not taken.
pub fn request_slice(slice: Duration) -> io::Result<bool> {
    let mut attr = getattr()?;
    if attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH {
        return Ok(false);
    }
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    attr.sched_flags = 0;
    attr.sched_runtime = slice.as_nanos().min(u64::MAX as u128) as u64;
    // SAFETY: sched_setattr(2) on the calling thread reads `attr.size` bytes from a live
    // struct of that size; the result is checked.
    let ret = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// The calling thread's slice as the kernel keeps it (0 where the kernel has none for
/// normal threads), for tests and diagnostics.
pub fn current_slice() -> io::Result<Duration> {
    Ok(Duration::from_nanos(getattr()?.sched_runtime))
}

/// The calling thread's scheduling attributes.
fn getattr() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: sched_getattr(2) on the calling thread (pid 0) writes at most `size` bytes
    // into `attr`, a live, writable, properly aligned struct of that size; the result is
    // checked.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as libc::c_uint,
            0,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_is_the_kernels_first_version() {
        assert_eq!(std::mem::size_of::<SchedAttr>(), 56);
    }

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            // SAFETY: getpriority(2) reads the calling thread's nice value (tid via
            // gettid); errno is not consulted (-1 is a valid nice value, never ours here).
            let nice_before = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let set = request_slice(Duration::from_micros(100)).expect("sched_setattr");
            assert!(set, "a normal thread takes the hint");
            // SAFETY: as above.
            let nice_after = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            assert_eq!(nice_before, nice_after);
            let got = current_slice().expect("sched_getattr");
            // Kernels before 6.12 keep no slice for normal threads and report 0.
            assert!(
                got == Duration::ZERO || got == Duration::from_micros(100),
                "slice {got:?}"
            );
        })
        .join()
        .unwrap();
    }
}

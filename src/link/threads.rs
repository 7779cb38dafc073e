//! Threads ferroce starts for itself (driver, connection manager, QP-number server, the
//! C library's helpers) block every signal, so a signal sent to the process runs the
//! program's handler on one of the program's own threads.
//!
//! The kernel hands a process-directed signal (SIGALRM of `setitimer`, SIGINT, SIGTERM)
//! to any thread that does not block it. Programs count on where it lands: qperf's alarm
//! handler must interrupt the thread waiting in `ibv_get_cq_event`, and a program that
//! blocks SIGTERM in its threads to read it from a signalfd would be killed by the
//! default action run on a ferroce thread that did not block it. With rxe there are no
//! such threads: the kernel does the work.

use std::io;
use std::thread::JoinHandle;

/// Spawns a named thread with every signal blocked. The spawning thread blocks them
/// around the spawn, so the new thread starts with the full mask (no window in which a
/// signal could land on it first); its own mask is restored at once.
pub fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it fully, and
    // pthread_sigmask only reads `all` and writes `old`, both live locals. Synchronous
    // signals of faults are delivered even when blocked, so blocking them is harmless.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    let spawned = std::thread::Builder::new().name(name.into()).spawn(f);
    // SAFETY: restores the mask read above, from a live local.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked-signal mask of thread `tid` as /proc shows it.
    fn blocked(tid: i32) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        let line = s.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
        u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).unwrap()
    }

    fn gettid() -> i32 {
        // SAFETY: gettid(2) has no arguments and cannot fail.
        unsafe { libc::gettid() }
    }

    #[test]
    fn a_spawned_thread_blocks_every_signal_and_its_spawner_keeps_its_mask() {
        let before = blocked(gettid());
        let t = spawn("ferroce-test", || blocked(gettid())).unwrap();
        let mask = t.join().unwrap();
        // Every signal a program can send or catch: SIGKILL and SIGSTOP cannot be
        // blocked, and glibc keeps the two below SIGRTMIN for itself.
        let catchable = (1..=31)
            .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
            .chain(libc::SIGRTMIN()..=libc::SIGRTMAX());
        for sig in catchable {
            assert!(mask & 1 << (sig - 1) != 0, "signal {sig} open: {mask:016x}");
        }
        assert_eq!(blocked(gettid()), before);
    }
}

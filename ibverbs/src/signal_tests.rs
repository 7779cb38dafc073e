//! The C calls that block on a descriptor (`ibv_get_cq_event`, `ibv_get_async_event`,
//! `rdma_get_cm_event`) return -1 with `EINTR` when a signal handler installed without
//! `SA_RESTART` runs while they wait, as the kernel's verbs and rdma_cm files make them
//! do. Programs rely on it to end a timed loop: qperf's SIGALRM handler sets a flag and
//! expects the wait to return; a wait that went on hung it until its peer timed out.

use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroce::verbs::Context;

use crate::async_event::ibv_get_async_event;
use crate::cq::*;
use crate::ffi::*;
use crate::open::wrap;
use crate::rdmacm::channel::{
    rdma_create_event_channel, rdma_destroy_event_channel, rdma_get_cm_event,
};

/// The signal whose handler has no `SA_RESTART`, as qperf installs its alarm handler.
const SIG: c_int = libc::SIGUSR2;
/// The signal whose handler has `SA_RESTART`, as glibc's `signal()` installs them.
const SIG_RESTART: c_int = libc::SIGUSR1;

extern "C" fn nothing(_: c_int) {}

fn install_handler(sig: c_int, flags: c_int) {
    // SAFETY: a zeroed sigaction with a handler that touches nothing, so it is
    // async-signal-safe.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = nothing as extern "C" fn(c_int) as usize;
        act.sa_flags = flags;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(libc::sigaction(sig, &act, null_mut()), 0);
    }
}

/// A blocking C call (-1 or 0, leaving errno) running on a thread of its own.
struct Waiter {
    thread: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    join: std::thread::JoinHandle<(c_int, c_int)>,
}

impl Waiter {
    fn start(wait: impl FnOnce() -> c_int + Send + 'static) -> Waiter {
        let thread = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (t, d) = (thread.clone(), done.clone());
        let join = std::thread::spawn(move || {
            // SAFETY: the calling thread's own id.
            t.store(unsafe { libc::pthread_self() } as u64, Ordering::SeqCst);
            let r = wait();
            // SAFETY: the calling thread's errno slot.
            let e = unsafe { *libc::__errno_location() };
            d.store(true, Ordering::SeqCst);
            (r, e)
        });
        Waiter { thread, done, join }
    }

    /// Signals the thread with `sig` every 20 ms for up to `limit` or until the call
    /// returns; whether it returned.
    fn signal(&self, sig: c_int, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.done.load(Ordering::SeqCst) && Instant::now() < deadline {
            let t = self.thread.load(Ordering::SeqCst);
            if t != 0 {
                // SAFETY: the waiter's id; it is alive until `done`, and a signal with a
                // handler that does nothing is harmless if it comes after.
                unsafe { libc::pthread_kill(t as libc::pthread_t, sig) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.done.load(Ordering::SeqCst)
    }

    /// What the call returned and its errno.
    fn result(self) -> (c_int, c_int) {
        self.join.join().unwrap()
    }
}

/// Runs `wait` on a thread and signals it (no `SA_RESTART`) until it returns: what the
/// call returned and its errno. A call still waiting after 3 s fails the test, its
/// thread left blocked (the objects it uses are then never destroyed).
fn interrupted(wait: impl FnOnce() -> c_int + Send + 'static) -> (c_int, c_int) {
    install_handler(SIG, 0);
    let w = Waiter::start(wait);
    assert!(
        w.signal(SIG, Duration::from_secs(3)),
        "still waiting after 3 s of signals without SA_RESTART"
    );
    w.result()
}

/// A C handle moved to the waiting thread; the test keeps it alive until that thread
/// returns.
struct Handle<T>(*mut T);
// SAFETY: the handles are only used by one thread at a time (the waiter, then the test
// after joining it).
unsafe impl<T> Send for Handle<T> {}

#[test]
fn a_signal_interrupts_a_wait_for_a_completion_event() {
    let (a, _peer) = Context::memory_pair().unwrap();
    let ctx = wrap(a, null_mut()).unwrap();
    // SAFETY: valid calls on live objects, destroyed after the waiter returned.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 4, null_mut(), ch, 0);
        assert!(!cq.is_null());
        let h = Handle(ch);
        let (r, e) = interrupted(move || {
            let h = h;
            let (mut c, mut x) = (null_mut(), null_mut());
            ibv_get_cq_event(h.0, &mut c, &mut x)
        });
        assert_eq!((r, e), (-1, libc::EINTR), "the wait ends at the signal");
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(crate::open::ibv_close_device(ctx), 0);
    }
}

#[test]
fn a_signal_interrupts_a_wait_for_an_async_event() {
    let (a, _peer) = Context::memory_pair().unwrap();
    let ctx = wrap(a, null_mut()).unwrap();
    // SAFETY: a live context, closed after the waiter returned; room for one event.
    unsafe {
        let h = Handle(ctx);
        let (r, e) = interrupted(move || {
            let h = h;
            let mut ev: ibv_async_event = std::mem::zeroed();
            ibv_get_async_event(h.0, &mut ev)
        });
        assert_eq!((r, e), (-1, libc::EINTR), "the wait ends at the signal");
        assert_eq!(crate::open::ibv_close_device(ctx), 0);
    }
}

#[test]
fn a_signal_with_sa_restart_leaves_the_wait_going() {
    // As the kernel restarts the read of its verbs file: the wait goes on through the
    // signals and ends only when the descriptor is readable.
    install_handler(SIG_RESTART, libc::SA_RESTART);
    let (a, _peer) = Context::memory_pair().unwrap();
    let ctx = wrap(a, null_mut()).unwrap();
    // SAFETY: a live context, closed after the waiter returned; room for one event; the
    // write puts 8 bytes into the context's own eventfd.
    unsafe {
        let fd = (*ctx).async_fd;
        let h = Handle(ctx);
        let w = Waiter::start(move || {
            let h = h;
            let mut ev: ibv_async_event = std::mem::zeroed();
            ibv_get_async_event(h.0, &mut ev)
        });
        assert!(
            !w.signal(SIG_RESTART, Duration::from_millis(300)),
            "a signal with SA_RESTART ended the wait"
        );
        let one: u64 = 1;
        assert_eq!(libc::write(fd, (&one as *const u64).cast(), 8), 8);
        // A readable descriptor with no event behind it: the call returns, EAGAIN.
        assert_eq!(w.result(), (-1, libc::EAGAIN));
        assert_eq!(crate::open::ibv_close_device(ctx), 0);
    }
}

#[test]
fn a_signal_interrupts_a_wait_for_a_cm_event() {
    // SAFETY: a live channel, destroyed after the waiter returned; the out-pointer is
    // the waiter's local.
    unsafe {
        let ch = rdma_create_event_channel();
        assert!(!ch.is_null());
        let h = Handle(ch);
        let (r, e) = interrupted(move || {
            let h = h;
            let mut ev = null_mut();
            rdma_get_cm_event(h.0, &mut ev)
        });
        assert_eq!((r, e), (-1, libc::EINTR), "the wait ends at the signal");
        rdma_destroy_event_channel(ch);
    }
}

/// The threads of this process named `ferroce-*` and the signals each blocks (/proc).
fn ferroce_threads() -> Vec<(String, u64)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        if let (Some(name), Some(blk)) = (field("Name:"), field("SigBlk:")) {
            if name.starts_with("ferroce-") {
                found.push((name, u64::from_str_radix(&blk, 16).unwrap()));
            }
        }
    }
    found
}

#[test]
fn a_signal_to_the_process_never_lands_on_a_ferroce_thread() {
    // A program that opens a device and then waits with its own mask open: the alarm
    // it sets must interrupt it, not run on the driver thread ferroce started.
    let (a, _peer) = Context::memory_pair().unwrap();
    let ctx = wrap(a, null_mut()).unwrap();
    let threads = ferroce_threads();
    assert!(
        threads.iter().any(|(n, _)| n == "ferroce-driver"),
        "{threads:?}"
    );
    for (name, blk) in &threads {
        for sig in [libc::SIGALRM, libc::SIGINT, libc::SIGTERM, SIG] {
            assert!(blk & 1 << (sig - 1) != 0, "{name} takes signal {sig}");
        }
    }
    // SAFETY: the context opened above, unused since.
    unsafe { assert_eq!(crate::open::ibv_close_device(ctx), 0) };
}

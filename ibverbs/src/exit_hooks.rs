//! Work the library does when the program exits (`atexit`), for modules that need it: one
//! registration, the hooks run in order on a thread of their own (the exiting thread's
//! thread-locals, the log's among them, are gone by then), and a panic ends nothing more
//! than the hooks.

use std::sync::{Mutex, Once, PoisonError};

static HOOKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Runs `hook` at the program's exit (once, however often it is added).
pub(crate) fn add(hook: fn()) {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `run` is an `extern "C" fn()` that does not unwind (it catches panics)
        // and lives as long as the library, which is not unloaded while a program can
        // still exit through it.
        unsafe { libc::atexit(run) };
    });
    let mut h = HOOKS.lock().unwrap_or_else(PoisonError::into_inner);
    if !h.contains(&hook) {
        h.push(hook);
    }
}

extern "C" fn run() {
    let _ = std::panic::catch_unwind(|| {
        let hooks = HOOKS.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let t =
            ferroce::link::threads::spawn("ferroce-exit", move || hooks.iter().for_each(|h| h()));
        if let Ok(t) = t {
            let _ = t.join();
        }
    });
}

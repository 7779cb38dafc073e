//! What a panic in the driver does: the process aborts, with a message.
//!
//! A panic while handling packets is a bug reached with the endpoint locked, possibly
//! half-way through changing a QP or a region table, on input a peer chose. The options
//! were:
//!
//! - let the driver thread end (before this module): API calls go on against a device
//!   that no longer receives, and applications wait on completions that never come or,
//!   worse, report whatever they counted as success;
//! - take the poisoned lock back and drop the frame, counting it: the device keeps
//!   running on state whose invariants may be broken (keys, PSNs, queue positions), and
//!   an attacker who found the panic can repeat it at will;
//! - abort: nothing runs on broken state, the failure is loud and names its cause, and
//!   whoever supervises the process restarts it.
//!
//! Ferroce aborts. The message goes to the log at error level and to stderr (the default
//! panic hook has already printed the panic and its location).

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; if it panics, logs and aborts the process (see the module docs for why).
pub(super) fn abort_on_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic".into());
            tracing::error!(what, panic = %msg, "panic in the driver: aborting");
            eprintln!("ferroce: panic in {what} ({msg}); the device cannot go on safely: aborting");
            std::process::abort();
        }
    }
}

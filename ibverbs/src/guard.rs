//! The C boundary: no panic crosses it, and errors follow the verbs convention (an errno
//! value returned, or NULL / -1 with `errno` set).

use std::panic::{catch_unwind, AssertUnwindSafe};

use ferroce::verbs::Error;

/// Runs `f`; a panic inside becomes `on_panic` (and a log line), never an unwind into C.
pub(crate) fn catch<T>(function: &'static str, on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            tracing::error!(function, "panic inside ferroce's libibverbs; call failed");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// Sets `errno` to `e` and returns NULL: the failure of a verb returning a pointer.
pub(crate) fn null_with<T>(e: i32) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// The errno value for a ferroce error.
pub(crate) fn errno_of(e: &Error) -> i32 {
    use ferroce::link::LinkError;
    use ferroce_transport::Error as T;
    match e {
        Error::Transport(t) => match t {
            T::PdInUse | T::CqInUse | T::SrqInUse => libc::EBUSY,
            T::QueueFull | T::OutOfResources | T::NoQpn => libc::ENOMEM,
            _ => libc::EINVAL,
        },
        Error::Interface(_) => libc::ENODEV,
        Error::Link(LinkError::Permission) => libc::EPERM,
        Error::Link(LinkError::PortInUse(_)) => libc::EADDRINUSE,
        Error::Link(LinkError::Io(io)) | Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        Error::Resolve(_) => libc::EHOSTUNREACH,
        Error::OutOfBounds { .. } | Error::NoSuchGid(_) => libc::EINVAL,
    }
}

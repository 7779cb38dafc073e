//! Errors of the verbs API: each says what went wrong and, where a user can act, what to do.

use crate::link::interface::InterfaceError;
use crate::link::LinkError;
use crate::net::neigh::ResolveError;

/// A verbs API error.
#[derive(Debug)]
pub enum Error {
    /// The transport refused the request (bad attributes, state, keys, full queues, ...).
    Transport(ferroce_transport::Error),
    /// The named network interface cannot be used.
    Interface(InterfaceError),
    /// The interface could not be opened for RoCE (permission, UDP 4791 taken).
    Link(LinkError),
    /// A peer's MAC address could not be found.
    Resolve(ResolveError),
    /// A memory-region access outside the region.
    OutOfBounds {
        /// Offset of the access.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Length of the region.
        region: usize,
    },
    /// The GID index is not in the table.
    NoSuchGid(usize),
    /// A system error.
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Transport(e) => write!(f, "{e}"),
            Error::Interface(e) => write!(f, "{e}"),
            Error::Link(e) => write!(f, "{e}"),
            Error::Resolve(e) => write!(f, "{e}"),
            Error::OutOfBounds {
                offset,
                len,
                region,
            } => {
                write!(f, "access of {len} bytes at offset {offset} exceeds the {region}-byte memory region")
            }
            Error::NoSuchGid(i) => write!(
                f,
                "no GID at index {i}; list them with `ferroce devinfo -v`"
            ),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ferroce_transport::Error> for Error {
    fn from(e: ferroce_transport::Error) -> Self {
        Error::Transport(e)
    }
}
impl From<InterfaceError> for Error {
    fn from(e: InterfaceError) -> Self {
        Error::Interface(e)
    }
}
impl From<LinkError> for Error {
    fn from(e: LinkError) -> Self {
        Error::Link(e)
    }
}
impl From<ResolveError> for Error {
    fn from(e: ResolveError) -> Self {
        Error::Resolve(e)
    }
}
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

//! ferroce: a user-space RoCE v2 stack.
//!
//! The packet formats live in [`ferroce_wire`] (re-exported as [`wire`]), the sans-IO
//! InfiniBand transport in [`ferroce_transport`] (re-exported as [`transport`]); this crate
//! adds the link layer (AF_PACKET I/O, neighbour resolution), the driver thread, the
//! verbs API and packet captures. The command-line tool is the `ferroce-cli` package
//! (`cli/`).

#![allow(missing_docs)] // TODO(architecture): remove once documented
#![deny(unsafe_op_in_unsafe_fn)]

pub mod capture;
pub mod driver;
pub mod net;
pub mod port;
pub mod verbs;

pub use ferroce_transport as transport;
pub use ferroce_wire as wire;

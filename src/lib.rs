//! ferroce: a user-space RoCE v2 stack.
//!
//! The packet formats live in [`ferroce_wire`] (re-exported as [`wire`]), the sans-IO
//! InfiniBand transport in [`ferroce_transport`] (re-exported as [`transport`]); this crate
//! adds the link layer (AF_PACKET I/O and an in-memory wire), neighbour resolution, the
//! driver thread, the verbs API with application-owned memory regions, and packet
//! captures. The command-line tool is the `ferroce-cli` package (`cli/`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod capture;
pub mod cm;
pub mod driver;
pub mod link;
pub mod memory;
pub mod net;
pub mod verbs;

pub use ferroce_transport as transport;
pub use ferroce_wire as wire;

//! ferroce: a user-space RoCE v2 stack.
//!
//! The packet formats live in [`ferroce_wire`] (re-exported as [`wire`]), the sans-IO
//! InfiniBand transport in [`ferroce_transport`] (re-exported as [`transport`]); this crate
//! adds packet captures, the decoder and the command-line interface.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[allow(missing_docs)] // moves to the CLI crate
pub mod apps;
pub mod capture;
#[allow(missing_docs)] // moves to the CLI crate
pub mod decode;
pub mod driver;
pub mod link;
pub mod memory;
pub mod net;
pub mod verbs;

pub use ferroce_transport as transport;
pub use ferroce_wire as wire;

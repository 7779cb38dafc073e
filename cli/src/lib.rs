//! The applications behind the `ferroce` command-line tool, built on the `ferroce` library:
//! rdma-core's pingpong programs, perftest, the RC operations check and the capture
//! decoder. The binary (`src/main.rs`, `src/cli/`) parses the arguments and calls these;
//! the tests use them directly.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod apps;
pub mod decode;
pub mod probe;
pub mod resends;

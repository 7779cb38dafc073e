//! `libibverbs.so.1` (and `librdmacm.so.1`, [`rdmacm`]) on ferroce: the C ABI of rdma-core's libibverbs, so that unmodified
//! RDMA programs (perftest, rdma-core's examples and tests, UCX, MPI) run on ferroce's
//! user-space RoCE v2 stack with no RDMA NIC and no kernel RDMA module.
//!
//! Every C object is a `#[repr(C)]` struct whose first field is the C struct the program
//! sees, followed by the ferroce object behind it ([`handles`] keeps the table of live
//! ones). Memory regions are the program's own memory, registered in place. No panic
//! crosses into C ([`guard`]). Exports carry rdma-core's symbol versions ([`exports`]);
//! what ferroce does not implement answers EOPNOTSUPP ([`stubs`]).
// Every export's safety contract is libibverbs' own (see `man ibv_*`).
#![allow(clippy::missing_safety_doc)]

mod ah;
mod async_event;
mod context;
mod cq;
mod cq_ex;
mod device;
mod exit_hooks;
mod exports;
pub mod ffi;
mod guard;
mod handles;
mod hint;
mod log;
mod mcast;
mod mr;
mod mw;
mod open;
mod ops;
mod pd;
mod per_process;
mod post;
mod qp;
mod qp_ex;
mod query;
mod rdmacm;
mod rsocket;
mod srq;
mod stats;
mod strings;
mod stubs;

#[cfg(test)]
mod build_tests;
#[cfg(test)]
mod c_caller_tests;
#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod signal_tests;

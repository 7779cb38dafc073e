//! perftest's bandwidth and latency tests (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`,
//! `ib_atomic_bw`, `ib_write_lat`, `ib_read_lat`, `ib_send_lat`): its out-of-band protocol
//! ([`exchange`]), its flags and defaults ([`params`]) and its tables ([`report`]).

pub mod exchange;
pub mod params;
pub mod report;

pub use exchange::BwReport;
pub use params::{AtomicOp, Conn, Kind, Options, Params, Test, Verb};
pub use report::LatStats;

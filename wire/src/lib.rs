//! RoCE v2 packet formats for ferroce.
//!
//! In the style of smoltcp's `wire` module: each header has a zero-copy view
//! (`Header<T: AsRef<[u8]>>`, with `new_checked` and field accessors) and an owned `Repr`
//! with `parse`, `emit` and `buffer_len`. The opcode table in [`opcode`] is the single
//! source of truth for which extension headers follow the BTH.
//!
//! ```
//! use ferroce_wire::{Frame, FrameRepr};
//! # let bytes = ferroce_wire::example_frame();
//! let frame = Frame::parse(&bytes)?;
//! assert!(frame.icrc_ok());
//! let repr = FrameRepr::parse(&frame)?;
//! let mut out = vec![0; repr.buffer_len()];
//! repr.emit(&mut out)?;
//! assert_eq!(out, bytes);
//! # Ok::<(), ferroce_wire::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod error;
mod field;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cm;
pub mod cnp;
pub mod deth;
pub mod frame;
pub mod gso;
pub mod icrc;
pub mod icrc_fold;
pub mod ieth;
pub mod immdt;
pub mod ipv4;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;

pub use aeth::{NakCode, Repr as AethRepr, Syndrome};
pub use atomic_ack_eth::Repr as AtomicAckEthRepr;
pub use atomic_eth::Repr as AtomicEthRepr;
pub use bth::Repr as BthRepr;
pub use cnp::Repr as CnpRepr;
pub use deth::Repr as DethRepr;
pub use error::{Error, Layer, Result};
pub use frame::{
    finalize, split_link, Datagram, DatagramRepr, DatagramView, EthernetRepr, Frame, FrameRepr,
    IpHeader, IpRepr, VlanTag, ROCE_V2_PORT,
};
pub use ieth::Repr as IethRepr;
pub use immdt::Repr as ImmDtRepr;
pub use opcode::{HeaderSet, Opcode, OpcodeInfo, Operation, Position, Service};
pub use packet::{ExtRepr, Packet, Repr as IbRepr};
pub use psn::Psn;
pub use reth::Repr as RethRepr;

/// A real rxe frame (RC_SEND_ONLY of 64 bytes from `ibv_rc_pingpong`), for examples.
#[doc(hidden)]
pub fn example_frame() -> Vec<u8> {
    const HEX: &str = "02000a4d000202000a4d000108004500006c9f054000401186df0a4d00010a4d0002c12112b7005800000400ffff0000001180bcf8a3";
    let mut v: Vec<u8> = (0..HEX.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&HEX[i..i + 2], 16).expect("hex"))
        .collect();
    v.extend_from_slice(&[0x7b; 64]);
    v.extend_from_slice(&[0; 4]);
    let n = v.len();
    icrc::fill(&mut v[14..n]).expect("valid frame");
    v
}

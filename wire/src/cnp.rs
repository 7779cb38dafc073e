//! RoCE v2 congestion notification packet (CNP): BTH opcode 0x81, 16 reserved bytes, ICRC.
//!
//! A notification point sends one to the QP whose packets arrived ECN-marked (CE); the
//! reaction point slows that QP down (DCQCN).

use crate::field::header_view;
use crate::{bth, Opcode, Psn};

header_view!(
    /// A view of the 16 reserved bytes that follow a CNP's BTH.
    Header,
    16,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// The reserved bytes (zero when sent).
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[..16]
    }
}

/// A parsed CNP body: its reserved bytes, kept so that parse then emit is byte-exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The 16 reserved bytes after the BTH, as received.
    pub reserved: [u8; 16],
}

impl Repr {
    /// Parses the CNP body.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        let mut reserved = [0u8; 16];
        reserved.copy_from_slice(h.reserved());
        Ok(Repr { reserved })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        16
    }
    /// Writes the body.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        h.buffer.as_mut()[..16].copy_from_slice(&self.reserved);
    }
}

/// The BTH of a CNP to `dest_qp` as RoCE NICs send it: default P_Key, PSN 0, BECN set.
pub fn bth(dest_qp: u32) -> bth::Repr {
    bth::Repr {
        becn: true,
        ..bth::Repr::new(Opcode::CNP, dest_qp, Psn::new(0))
    }
}

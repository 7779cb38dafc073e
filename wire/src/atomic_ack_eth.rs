//! Atomic acknowledge extended transport header (AtomicAckETH): the value before the atomic.

use crate::field::*;

header_view!(
    /// A view of an AtomicAckETH.
    Header,
    8,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// The remote 8 bytes as they were before the atomic operation.
    pub fn orig(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The original value at the remote address, before the atomic operation.
    pub orig: u64,
}

impl Repr {
    /// Parses an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        Ok(Repr { orig: h.orig() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        8
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        put_u64(h.buffer.as_mut(), 0, self.orig);
    }
}

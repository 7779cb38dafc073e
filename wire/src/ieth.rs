//! Invalidate extended transport header (IETH): the R_Key a SEND with invalidate revokes.

use crate::field::*;

header_view!(
    /// A view of an IETH.
    Header,
    4,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// The remote key to invalidate.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Repr {
    /// Parses an IETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        Ok(Repr { rkey: h.rkey() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        put_u32(h.buffer.as_mut(), 0, self.rkey);
    }
}

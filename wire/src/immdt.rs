//! Immediate data extended transport header (ImmDt): 4 bytes handed to the receiver's completion.

use crate::field::*;

header_view!(
    /// A view of an ImmDt header.
    Header,
    4,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// The immediate data, in network byte order as ibv_wc's `imm_data` keeps it.
    pub fn imm(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

/// A parsed ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The immediate data, in network byte order as ibv_wc's `imm_data` keeps it.
    pub imm: u32,
}

impl Repr {
    /// Parses an ImmDt header.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        Ok(Repr { imm: h.imm() })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        put_u32(h.buffer.as_mut(), 0, self.imm);
    }
}

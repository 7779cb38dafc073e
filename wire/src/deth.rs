//! Datagram extended transport header (DETH): the Q_Key and source QP of a UD packet.

use crate::field::*;

mod field {
    pub const QKEY: usize = 0;
    pub const SRC_QP: usize = 5;
}

header_view!(
    /// A view of a DETH.
    Header,
    8,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// Queue key the receiver checks against its own.
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::QKEY)
    }
    /// Source queue pair number (24 bits).
    pub fn src_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::SRC_QP)
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Queue key that the destination QP checks.
    pub qkey: u32,
    /// Source queue pair number (24 bits).
    pub src_qp: u32,
}

impl Repr {
    /// Parses a DETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        Ok(Repr {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        8
    }
    /// Writes the header; the reserved byte becomes 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        let b = h.buffer.as_mut();
        put_u32(b, field::QKEY, self.qkey);
        b[4] = 0;
        put_u24(b, field::SRC_QP, self.src_qp);
    }
}

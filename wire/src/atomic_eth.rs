//! Atomic extended transport header (AtomicETH): target, key and operands of an atomic.

use crate::field::*;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const SWAP_ADD: usize = 12;
    pub const COMPARE: usize = 20;
}

header_view!(
    /// A view of an AtomicETH.
    Header,
    28,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// Remote virtual address of the 8-byte target.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::RKEY)
    }
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// Compare value (compare-and-swap only).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::COMPARE)
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Remote virtual address of the 8-byte, 8-byte-aligned target.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// Compare-and-swap: the value to store; fetch-and-add: the value to add.
    pub swap_add: u64,
    /// Compare-and-swap: the value to compare with (ignored by fetch-and-add).
    pub compare: u64,
}

impl Repr {
    /// Parses an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        Ok(Repr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        28
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        let b = h.buffer.as_mut();
        put_u64(b, field::VA, self.va);
        put_u32(b, field::RKEY, self.rkey);
        put_u64(b, field::SWAP_ADD, self.swap_add);
        put_u64(b, field::COMPARE, self.compare);
    }
}

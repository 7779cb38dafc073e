//! RDMA extended transport header (RETH): where an RDMA WRITE or READ goes, and how much.

use crate::field::*;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const DMA_LEN: usize = 12;
}

header_view!(
    /// A view of a RETH.
    Header,
    16,
    Extension
);

impl<T: AsRef<[u8]>> Header<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::RKEY)
    }
    /// Length of the whole RDMA operation in bytes.
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::DMA_LEN)
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Remote virtual address.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// Length of the whole message in bytes.
    pub dma_len: u32,
}

impl Repr {
    /// Parses a RETH.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> crate::Result<Repr> {
        h.check_len()?;
        Ok(Repr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        })
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        16
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        let b = h.buffer.as_mut();
        put_u64(b, field::VA, self.va);
        put_u32(b, field::RKEY, self.rkey);
        put_u32(b, field::DMA_LEN, self.dma_len);
    }
}

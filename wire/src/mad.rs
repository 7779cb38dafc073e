//! Management datagrams (MADs): the fixed 256-byte messages that InfiniBand management
//! sends on QP1, the general services interface (GSI). Over RoCE v2 a MAD is the payload of
//! a UD SEND ONLY to QP 1 with Q_Key [`GSI_QKEY`]. ferroce reads and writes one class of
//! them, the communication manager's ([`crate::cm`]), which is how rdma_cm and the kernel's
//! CM set up connections; the common header here is shared by every class.

use crate::field::*;

/// The GSI's queue pair number: where every MAD is sent.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of the GSI (IBA 13.5.1.2): a MAD to QP1 with any other key is dropped.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Every MAD is exactly this long.
pub const MAD_LEN: usize = 256;
/// Bytes of the common header; the class's data follows.
pub const HEADER_LEN: usize = 24;

/// Management class of the communication manager.
pub const CLASS_CM: u8 = 0x07;
/// The communication manager's class version (IBA 1.2 onwards).
pub const CM_CLASS_VERSION: u8 = 2;
/// The only base version there is.
pub const BASE_VERSION: u8 = 1;
/// Method: an unsolicited message that expects no MAD-layer response (every CM message).
pub const METHOD_SEND: u8 = 0x03;

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const ATTR_MOD: usize = 20;
}

header_view!(
    /// A view of a whole MAD: the common header and the class's data behind it.
    Mad,
    MAD_LEN,
    Mad
);

impl<T: AsRef<[u8]>> Mad<T> {
    /// Base version (1).
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    /// Management class (0x07 for the CM).
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    /// Version of the class's format.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// Method, with the response bit (0x80).
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }
    /// Status of a response.
    pub fn status(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::STATUS)
    }
    /// Class-specific word.
    pub fn class_specific(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }
    /// Transaction ID: the sender's, echoed by responses.
    pub fn tid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::TID)
    }
    /// Attribute ID: which message of the class this is.
    pub fn attr_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ATTR_ID)
    }
    /// Attribute modifier.
    pub fn attr_mod(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::ATTR_MOD)
    }
    /// The class's data: the 232 bytes after the common header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..MAD_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    /// The class's data, to write.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..MAD_LEN]
    }
}

/// The common header of a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderRepr {
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific word.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID.
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl HeaderRepr {
    /// Parses the common header; only base version 1 exists, anything else is refused.
    pub fn parse<T: AsRef<[u8]>>(m: &Mad<T>) -> crate::Result<HeaderRepr> {
        m.check_len()?;
        if m.base_version() != BASE_VERSION {
            return Err(crate::Error::BadMadVersion(m.base_version()));
        }
        Ok(HeaderRepr {
            mgmt_class: m.mgmt_class(),
            class_version: m.class_version(),
            method: m.method(),
            status: m.status(),
            class_specific: m.class_specific(),
            tid: m.tid(),
            attr_id: m.attr_id(),
            attr_mod: m.attr_mod(),
        })
    }
    /// Bytes needed to emit the whole MAD this header starts.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }
    /// Writes the common header (base version 1, the reserved word zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Mad<T>) -> crate::Result<()> {
        m.check_len().map_err(|_| crate::Error::BufferTooSmall)?;
        let b = m.buffer.as_mut();
        b[field::BASE_VERSION] = BASE_VERSION;
        b[field::MGMT_CLASS] = self.mgmt_class;
        b[field::CLASS_VERSION] = self.class_version;
        b[field::METHOD] = self.method;
        put_u16(b, field::STATUS, self.status);
        put_u16(b, field::CLASS_SPECIFIC, self.class_specific);
        put_u64(b, field::TID, self.tid);
        put_u16(b, field::ATTR_ID, self.attr_id);
        put_u16(b, field::ATTR_ID + 2, 0);
        put_u32(b, field::ATTR_MOD, self.attr_mod);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_short_buffers_are_refused() {
        let h = HeaderRepr {
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid: 0x1122_3344_5566_7788,
            attr_id: 0x0010,
            attr_mod: 0,
        };
        let mut buf = [0xaau8; MAD_LEN];
        h.emit(&mut Mad::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(&buf[..4], &[1, 0x07, 2, 3]);
        assert_eq!(&buf[18..20], &[0, 0], "reserved word cleared");
        let m = Mad::new_checked(&buf[..]).unwrap();
        assert_eq!(HeaderRepr::parse(&m).unwrap(), h);
        assert_eq!(
            Mad::new_checked(&buf[..255]).unwrap_err(),
            crate::Error::Truncated(crate::Layer::Mad)
        );
        assert_eq!(
            h.emit(&mut Mad::new_unchecked(&mut [0u8; 100][..])),
            Err(crate::Error::BufferTooSmall)
        );
        buf[0] = 2;
        assert_eq!(
            HeaderRepr::parse(&Mad::new_unchecked(&buf[..])),
            Err(crate::Error::BadMadVersion(2))
        );
    }
}

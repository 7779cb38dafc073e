//! The rsocket protocol's bytes (librdmacm's `docs/rsocket`): the connection data both
//! ends put in the CM's private data, the 32-bit messages carried as immediate data, and
//! the 16-byte scatter entry one end writes into the other's target list. Pure, so that
//! every field is tested against the layout rdma-core's rsockets put on the wire.

/// A scatter entry as rsockets lay it out: address, key, length (`struct rs_sge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

/// Bytes of one [`Sge`] in memory and on the wire.
pub(crate) const SGE_LEN: usize = 16;

impl Sge {
    /// The entry as the peer reads it from its target list: in the peer's byte order,
    /// which is this host's unless `swap` (the connection data said the peer's differs).
    pub(crate) fn to_peer_bytes(self, swap: bool) -> [u8; SGE_LEN] {
        let (addr, key, length) = if swap {
            (
                self.addr.swap_bytes(),
                self.key.swap_bytes(),
                self.length.swap_bytes(),
            )
        } else {
            (self.addr, self.key, self.length)
        };
        let mut b = [0u8; SGE_LEN];
        b[0..8].copy_from_slice(&addr.to_ne_bytes());
        b[8..12].copy_from_slice(&key.to_ne_bytes());
        b[12..16].copy_from_slice(&length.to_ne_bytes());
        b
    }

    /// An entry in big-endian order, as the connection data carries it.
    fn from_be(b: &[u8; SGE_LEN]) -> Sge {
        Sge {
            addr: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            key: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            length: u32::from_be_bytes(b[12..16].try_into().expect("4 bytes")),
        }
    }

    fn to_be(self) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.key.to_be_bytes());
        b[12..16].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// The kinds of message in an immediate's top three bits (`RS_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Application data written; the low 29 bits are its length.
    Data,
    /// Receive credits: the low bits are the sender's new limit of messages, and one of
    /// the receiver's target entries may have been rewritten.
    Sgl,
    /// A zero-copy mapping was published (not used by this library; ignored).
    IomapSgl,
    /// A control message: [`CTRL_DISCONNECT`], [`CTRL_KEEPALIVE`], [`CTRL_SHUTDOWN`].
    Ctrl,
    /// A reserved kind: a peer that sends one breaks the protocol.
    Reserved(u32),
}

const OP_DATA: u32 = 0;
const OP_SGL: u32 = 4;
const OP_IOMAP_SGL: u32 = 6;
const OP_CTRL: u32 = 7;
/// The low 29 bits of a message.
const DATA_MASK: u32 = 0x1fff_ffff;

/// Control message: the sender will neither send nor receive any more.
pub(crate) const CTRL_DISCONNECT: u32 = 0;
/// Control message: the sender is alive (rsockets' keepalive; nothing to do).
pub(crate) const CTRL_KEEPALIVE: u32 = 1;
/// Control message: the sender will send no more (it may still receive).
pub(crate) const CTRL_SHUTDOWN: u32 = 2;

/// A message as it goes into an immediate (host order; `htobe32` is the post's).
pub(crate) fn msg(op: Op, data: u32) -> u32 {
    let code = match op {
        Op::Data => OP_DATA,
        Op::Sgl => OP_SGL,
        Op::IomapSgl => OP_IOMAP_SGL,
        Op::Ctrl => OP_CTRL,
        Op::Reserved(c) => c & 7,
    };
    (code << 29) | (data & DATA_MASK)
}

/// A received immediate's kind and low bits.
pub(crate) fn parse_msg(m: u32) -> (Op, u32) {
    let op = match m >> 29 {
        OP_DATA => Op::Data,
        OP_SGL => Op::Sgl,
        OP_IOMAP_SGL => Op::IomapSgl,
        OP_CTRL => Op::Ctrl,
        c => Op::Reserved(c),
    };
    (op, m & DATA_MASK)
}

/// Bytes of the connection data (`struct rs_conn_data`).
pub(crate) const CONN_DATA_LEN: usize = 40;
/// The only protocol version there is.
const VERSION: u8 = 1;
/// Flag: the sender is big-endian (its target list is read in that order).
const FLAG_NET: u8 = 1;
/// Flag: the sender's target list is followed by a zero-copy map of
/// `target_iomap_size` entries.
const FLAG_IOMAP: u8 = 2;

/// What each end tells the other as it connects or accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnData {
    /// The sender is big-endian.
    pub big_endian: bool,
    /// Receive queue entries: how many messages the peer may send before its first
    /// credit update.
    pub credits: u16,
    /// The sender's target list: its address, key, and number of entries (`length`).
    pub target_sgl: Sge,
    /// The first receive buffer (half the sender's receive ring): where data goes first.
    pub data_buf: Sge,
}

/// Why connection data was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnDataError {
    /// Fewer than [`CONN_DATA_LEN`] bytes.
    Short(usize),
    /// A version other than 1.
    Version(u8),
    /// A target list of no entries: nothing could ever be granted.
    EmptyTargetList,
}

impl std::fmt::Display for ConnDataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Short(n) => write!(f, "rsocket connection data of {n} bytes (40 needed)"),
            Self::Version(v) => write!(f, "rsocket protocol version {v} (1 known)"),
            Self::EmptyTargetList => write!(f, "rsocket target list of no entries"),
        }
    }
}

impl ConnData {
    /// Connection data as this host sends it (no zero-copy map: size 0).
    pub(crate) fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = VERSION;
        b[1] = FLAG_IOMAP | if self.big_endian { FLAG_NET } else { 0 };
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        // b[4..7] reserved, b[7] target_iomap_size: 0.
        b[8..24].copy_from_slice(&self.target_sgl.to_be());
        b[24..40].copy_from_slice(&self.data_buf.to_be());
        b
    }

    /// The peer's connection data, checked.
    pub(crate) fn parse(b: &[u8]) -> Result<ConnData, ConnDataError> {
        let b: &[u8; CONN_DATA_LEN] = b
            .get(..CONN_DATA_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(ConnDataError::Short(b.len()))?;
        if b[0] != VERSION {
            return Err(ConnDataError::Version(b[0]));
        }
        let sge =
            |r: std::ops::Range<usize>| -> [u8; SGE_LEN] { b[r].try_into().expect("16 bytes") };
        let target_sgl = Sge::from_be(&sge(8..24));
        if target_sgl.length == 0 {
            return Err(ConnDataError::EmptyTargetList);
        }
        Ok(ConnData {
            big_endian: b[1] & FLAG_NET != 0,
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_sgl,
            data_buf: Sge::from_be(&sge(24..40)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_their_kind_in_the_top_three_bits() {
        assert_eq!(msg(Op::Data, 65536), 0x0001_0000);
        assert_eq!(msg(Op::Sgl, 384), 0x8000_0180);
        assert_eq!(msg(Op::Ctrl, CTRL_SHUTDOWN), 0xe000_0002);
        assert_eq!(parse_msg(0xe000_0000), (Op::Ctrl, CTRL_DISCONNECT));
        assert_eq!(parse_msg(0xc000_0003), (Op::IomapSgl, 3));
        assert_eq!(parse_msg(0x2000_0010), (Op::Reserved(1), 16));
        assert_eq!(parse_msg(0x5fff_ffff), (Op::Reserved(2), 0x1fff_ffff));
        // Data longer than 29 bits cannot be said: the length is cut, never the kind.
        assert_eq!(parse_msg(msg(Op::Data, u32::MAX)).0, Op::Data);
    }

    #[test]
    fn connection_data_is_rdma_cores_layout() {
        let c = ConnData {
            big_endian: false,
            credits: 384,
            target_sgl: Sge {
                addr: 0x1122_3344_5566_7788,
                key: 0xaabb_ccdd,
                length: 2,
            },
            data_buf: Sge {
                addr: 0x7f00_0000_1000,
                key: 0x1234,
                length: 65536,
            },
        };
        let b = c.emit();
        // version, flags (IOMAP), credits big-endian, reserved, iomap size 0
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&b[16..20], &0xaabb_ccddu32.to_be_bytes());
        assert_eq!(&b[20..24], &2u32.to_be_bytes());
        assert_eq!(&b[36..40], &65536u32.to_be_bytes());
        assert_eq!(ConnData::parse(&b), Ok(c));
        // The CM pads private data: longer input is fine.
        let mut padded = b.to_vec();
        padded.resize(196, 0);
        assert_eq!(ConnData::parse(&padded), Ok(c));
    }

    #[test]
    fn hostile_connection_data_is_refused() {
        let good = ConnData {
            big_endian: true,
            credits: 1,
            target_sgl: Sge {
                addr: 1,
                key: 2,
                length: 2,
            },
            data_buf: Sge::default(),
        }
        .emit();
        assert_eq!(ConnData::parse(&good[..39]), Err(ConnDataError::Short(39)));
        assert_eq!(ConnData::parse(&[]), Err(ConnDataError::Short(0)));
        let mut v = good;
        v[0] = 2;
        assert_eq!(ConnData::parse(&v), Err(ConnDataError::Version(2)));
        let mut e = good;
        e[20..24].fill(0);
        assert_eq!(ConnData::parse(&e), Err(ConnDataError::EmptyTargetList));
        assert!(ConnData::parse(&good).unwrap().big_endian);
    }

    #[test]
    fn a_target_entry_is_written_in_the_readers_order() {
        let s = Sge {
            addr: 0x0102_0304_0506_0708,
            key: 0x0a0b_0c0d,
            length: 0x10,
        };
        let same = s.to_peer_bytes(false);
        assert_eq!(&same[0..8], &s.addr.to_ne_bytes());
        assert_eq!(&same[12..16], &0x10u32.to_ne_bytes());
        let swapped = s.to_peer_bytes(true);
        assert_eq!(&swapped[0..8], &s.addr.swap_bytes().to_ne_bytes());
        assert_eq!(&swapped[8..12], &s.key.swap_bytes().to_ne_bytes());
    }
}

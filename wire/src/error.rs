//! The one error type of the wire layer: every way a packet can be malformed.

use core::fmt;

/// Why a buffer is not a valid RoCE v2 packet (or cannot hold one).
///
/// Each variant is a distinct counter-worthy condition, so callers can count and decide
/// between drop and NAK without string matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the named layer does.
    Truncated(Layer),
    /// The Ethernet frame carries neither IPv4 nor IPv6 (the EtherType is given).
    NotIp(u16),
    /// The IP header is invalid (bad version, IHL, or IPv6 extension chain).
    BadIpHeader,
    /// The IP packet is not UDP (the protocol number is given).
    NotUdp(u8),
    /// The IPv4 packet is a fragment; RoCE v2 is never fragmented.
    Fragmented,
    /// The IP length fields disagree with the bytes present.
    BadIpLength,
    /// The IPv4 header checksum is wrong (the ICRC does not cover it).
    BadIpChecksum,
    /// The UDP length disagrees with the IP payload length.
    BadUdpLength,
    /// The UDP destination port is not 4791 (the port is given).
    NotRoce(u16),
    /// The BTH transport header version is not 0.
    BadVersion(u8),
    /// The BTH opcode is not one this stack knows (RC, UC, UD or CNP).
    UnknownOpcode(u8),
    /// The BTH pad count is larger than the bytes after the headers, or payload and pad do
    /// not fill whole 4-byte words.
    BadPad,
    /// The opcode carries no payload but bytes follow its headers.
    UnexpectedPayload,
    /// The AETH syndrome uses a reserved encoding.
    BadSyndrome(u8),
    /// The ICRC trailer does not match the packet.
    IcrcMismatch {
        /// ICRC computed over the packet.
        computed: u32,
        /// ICRC found in the trailer.
        found: u32,
    },
    /// Emit: the representation's extension headers do not match its opcode.
    HeaderMismatch,
    /// Emit: the buffer is too small for the representation.
    BufferTooSmall,
    /// A management datagram's base version is not 1 (the version is given).
    BadMadVersion(u8),
    /// A MAD of a management class or class version this stack does not parse (class and
    /// version are given); the communication manager's is class 0x07, version 2.
    UnsupportedMadClass(u8, u8),
    /// A communication manager MAD whose method is not Send (the method is given).
    BadCmMethod(u8),
    /// A communication manager MAD with an attribute (message type) this stack does not
    /// know (the attribute ID is given).
    UnknownCmAttribute(u16),
    /// rdma_cm's private-data header has an unknown version or IP version (both given).
    BadRdmaCmHeader(u8, u8),
}

/// The layer that a [`Error::Truncated`] cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The Ethernet header.
    Ethernet,
    /// An 802.1Q VLAN tag.
    Vlan,
    /// The IPv4 or IPv6 header, or the length it announces.
    Ip,
    /// The UDP header, or the length it announces.
    Udp,
    /// The base transport header.
    Bth,
    /// An extension header (RETH, AETH, ...) or the payload it announces.
    Extension,
    /// The 4-byte ICRC at the end of the packet.
    Icrc,
    /// A management datagram (MAD): its 256 bytes, or a header inside its data.
    Mad,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated(l) => write!(f, "truncated {l:?} header"),
            Error::NotIp(t) => write!(f, "not IP (ethertype {t:#06x})"),
            Error::BadIpHeader => write!(f, "invalid IP header"),
            Error::NotUdp(p) => write!(f, "not UDP (IP protocol {p})"),
            Error::Fragmented => write!(f, "fragmented IPv4 packet"),
            Error::BadIpLength => write!(f, "IP length does not match the frame"),
            Error::BadIpChecksum => write!(f, "IPv4 header checksum error"),
            Error::BadUdpLength => write!(f, "UDP length does not match the IP payload"),
            Error::NotRoce(p) => write!(f, "not RoCE v2 (UDP port {p})"),
            Error::BadVersion(v) => write!(f, "BTH transport version {v} is not 0"),
            Error::UnknownOpcode(o) => write!(f, "unknown BTH opcode {o:#04x}"),
            Error::BadPad => write!(f, "BTH pad count does not fit the payload"),
            Error::UnexpectedPayload => write!(f, "payload on an opcode that carries none"),
            Error::BadSyndrome(s) => write!(f, "reserved AETH syndrome {s:#04x}"),
            Error::IcrcMismatch { computed, found } => {
                write!(
                    f,
                    "ICRC mismatch (computed {computed:#010x}, found {found:#010x})"
                )
            }
            Error::HeaderMismatch => write!(f, "extension headers do not match the opcode"),
            Error::BufferTooSmall => write!(f, "buffer too small"),
            Error::BadMadVersion(v) => write!(f, "MAD base version {v} is not 1"),
            Error::UnsupportedMadClass(c, v) => {
                write!(f, "unsupported MAD class {c:#04x} version {v}")
            }
            Error::BadCmMethod(m) => write!(f, "CM MAD method {m:#04x} is not Send"),
            Error::UnknownCmAttribute(a) => write!(f, "unknown CM attribute {a:#06x}"),
            Error::BadRdmaCmHeader(v, ip) => {
                write!(f, "rdma_cm header version {v} / IP version {ip} unknown")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result alias of the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

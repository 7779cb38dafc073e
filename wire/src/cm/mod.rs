//! Communication manager (CM) messages, IBA volume 1 chapter 12: how two ends agree on QP
//! numbers, PSNs and path before an RC or UC connection carries data, and how a UD sender
//! learns a service's QP (SIDR). Over RoCE v2 they are [`crate::mad`]s of class 0x07 on
//! QP1; Linux's CM (and so rdma_cm, rping, `ib_write_bw -R`, UCX and libfabric over
//! rdma_cm) speaks exactly these.
//!
//! Every message is a fixed 232-byte block after the MAD header, private data included:
//! the wire does not say how much of the private data the sender meant, so it is kept
//! whole. Reserved bits are ignored when parsing and written as zero. Field values are not
//! judged here (a REQ naming a transport type this stack has no QPs for parses fine): that
//! is for the connection state machine, which answers with the REJ reason IBA asks for.

mod dreq;
mod mra;
mod path;
pub mod rdma_cm;
mod rej;
mod rep;
mod req;
mod rtu;
mod sidr;

pub use dreq::Dreq;
pub use mra::{Mra, MsgKind};
pub use path::Path;
pub use rej::{Rej, RejReason};
pub use rep::Rep;
pub use req::{Req, Transport};
pub use rtu::{Drep, Rtu};
pub use sidr::{SidrRep, SidrReq, SidrStatus};

use crate::mad::{self, HeaderRepr, Mad};

/// Bytes of a CM message after the MAD header.
pub const DATA_LEN: usize = mad::MAD_LEN - mad::HEADER_LEN;

/// The attribute IDs of the CM class: one per message type.
pub mod attr {
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement: "more time needed".
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a REQ.
    pub const REP: u16 = 0x0013;
    /// Ready to use: the active side took the REP.
    pub const RTU: u16 = 0x0014;
    /// Disconnection request.
    pub const DREQ: u16 = 0x0015;
    /// Reply to a DREQ.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request (UD).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply.
    pub const SIDR_REP: u16 = 0x0018;
}

/// One CM message of any type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Connection request.
    Req(Req),
    /// More time needed.
    Mra(Mra),
    /// Reject.
    Rej(Rej),
    /// Reply.
    Rep(Rep),
    /// Ready to use.
    Rtu(Rtu),
    /// Disconnection request.
    Dreq(Dreq),
    /// Disconnection reply.
    Drep(Drep),
    /// Service ID resolution request.
    SidrReq(SidrReq),
    /// Service ID resolution reply.
    SidrRep(SidrRep),
}

impl Message {
    /// The MAD attribute ID of this message type.
    pub fn attr_id(&self) -> u16 {
        match self {
            Message::Req(_) => attr::REQ,
            Message::Mra(_) => attr::MRA,
            Message::Rej(_) => attr::REJ,
            Message::Rep(_) => attr::REP,
            Message::Rtu(_) => attr::RTU,
            Message::Dreq(_) => attr::DREQ,
            Message::Drep(_) => attr::DREP,
            Message::SidrReq(_) => attr::SIDR_REQ,
            Message::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// A short name for logs and counters ("REQ", "SIDR_REP", ...).
    pub fn name(&self) -> &'static str {
        match self {
            Message::Req(_) => "REQ",
            Message::Mra(_) => "MRA",
            Message::Rej(_) => "REJ",
            Message::Rep(_) => "REP",
            Message::Rtu(_) => "RTU",
            Message::Dreq(_) => "DREQ",
            Message::Drep(_) => "DREP",
            Message::SidrReq(_) => "SIDR_REQ",
            Message::SidrRep(_) => "SIDR_REP",
        }
    }
}

/// A CM MAD: the transaction ID the MAD header carries, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    /// Transaction ID. Linux's CM puts its local communication ID in the low word; the
    /// answer to a REQ or SIDR REQ carries the requester's TID back.
    pub tid: u64,
    /// The message.
    pub msg: Message,
}

impl Repr {
    /// Parses a CM MAD (the 256-byte payload of a UD SEND to QP1). Anything that is not a
    /// CM Send of a known attribute is a typed error: a MAD of another class, another class
    /// version, a response method, an unknown message.
    pub fn parse<T: AsRef<[u8]>>(m: &Mad<T>) -> crate::Result<Repr> {
        let h = HeaderRepr::parse(m)?;
        if h.mgmt_class != mad::CLASS_CM || h.class_version != mad::CM_CLASS_VERSION {
            return Err(crate::Error::UnsupportedMadClass(
                h.mgmt_class,
                h.class_version,
            ));
        }
        if h.method != mad::METHOD_SEND {
            return Err(crate::Error::BadCmMethod(h.method));
        }
        let d = m.data();
        let msg = match h.attr_id {
            attr::REQ => Message::Req(Req::parse(d)),
            attr::MRA => Message::Mra(Mra::parse(d)),
            attr::REJ => Message::Rej(Rej::parse(d)),
            attr::REP => Message::Rep(Rep::parse(d)),
            attr::RTU => Message::Rtu(Rtu::parse(d)),
            attr::DREQ => Message::Dreq(Dreq::parse(d)),
            attr::DREP => Message::Drep(Drep::parse(d)),
            attr::SIDR_REQ => Message::SidrReq(SidrReq::parse(d)),
            attr::SIDR_REP => Message::SidrRep(SidrRep::parse(d)),
            a => return Err(crate::Error::UnknownCmAttribute(a)),
        };
        Ok(Repr { tid: h.tid, msg })
    }

    /// Bytes needed to emit: always one whole MAD.
    pub const fn buffer_len(&self) -> usize {
        mad::MAD_LEN
    }

    /// Writes the whole MAD: header, message, zeroed reserved bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Mad<T>) -> crate::Result<()> {
        HeaderRepr {
            mgmt_class: mad::CLASS_CM,
            class_version: mad::CM_CLASS_VERSION,
            method: mad::METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid: self.tid,
            attr_id: self.msg.attr_id(),
            attr_mod: 0,
        }
        .emit(m)?;
        let d = m.data_mut();
        d.fill(0);
        match &self.msg {
            Message::Req(x) => x.emit(d),
            Message::Mra(x) => x.emit(d),
            Message::Rej(x) => x.emit(d),
            Message::Rep(x) => x.emit(d),
            Message::Rtu(x) => x.emit(d),
            Message::Dreq(x) => x.emit(d),
            Message::Drep(x) => x.emit(d),
            Message::SidrReq(x) => x.emit(d),
            Message::SidrRep(x) => x.emit(d),
        }
        Ok(())
    }

    /// Emits into a new 256-byte vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; mad::MAD_LEN];
        self.emit(&mut Mad::new_unchecked(&mut v[..]))
            .expect("a MAD-sized buffer");
        v
    }
}

/// Reads `width` bits of `byte` starting `offset` bits below its most significant bit, the
/// way IBA's tables number them.
pub(crate) fn bits(byte: u8, offset: u32, width: u32) -> u8 {
    (byte >> (8 - offset - width)) & ((1u16 << width) - 1) as u8
}

/// Writes `v` (masked to `width` bits) into `byte` at `offset` bits below its top.
pub(crate) fn put_bits(byte: &mut u8, offset: u32, width: u32, v: u8) {
    let mask = (((1u16 << width) - 1) as u8) << (8 - offset - width);
    *byte = (*byte & !mask) | ((v << (8 - offset - width)) & mask);
}

/// Copies a fixed-length private-data field out of a message.
pub(crate) fn private<const N: usize>(d: &[u8], at: usize) -> [u8; N] {
    let mut p = [0u8; N];
    p.copy_from_slice(&d[at..at + N]);
    p
}

#[cfg(test)]
mod tests;

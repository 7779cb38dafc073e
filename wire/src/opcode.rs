//! The BTH opcode table: the single source of truth for what each opcode carries.
//!
//! Parse, emit, the decoder and the transport all ask this table which extension headers
//! follow the BTH, whether a payload follows them, and where the packet sits in a message.

use core::fmt;

/// A set of extension headers, in wire order (see [`HeaderSet::ORDER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// No extension header.
    pub const EMPTY: HeaderSet = HeaderSet(0);
    /// Datagram extended transport header (UD): Q_Key and source QP.
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    /// RDMA extended transport header: virtual address, R_Key, DMA length.
    pub const RETH: HeaderSet = HeaderSet(1 << 1);
    /// Atomic extended transport header: address, R_Key, swap/add and compare data.
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 2);
    /// ACK extended transport header: syndrome and MSN.
    pub const AETH: HeaderSet = HeaderSet(1 << 3);
    /// Atomic ACK extended transport header: the original remote data.
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 4);
    /// Immediate data.
    pub const IMMDT: HeaderSet = HeaderSet(1 << 5);
    /// Invalidate extended transport header: the R_Key to invalidate.
    pub const IETH: HeaderSet = HeaderSet(1 << 6);
    /// The 16 reserved bytes of a RoCE v2 congestion notification packet.
    pub const CNP: HeaderSet = HeaderSet(1 << 7);

    /// Every header kind in the order it appears on the wire, with its length in bytes.
    pub const ORDER: [(HeaderSet, usize); 8] = [
        (HeaderSet::DETH, 8),
        (HeaderSet::RETH, 16),
        (HeaderSet::ATOMIC_ETH, 28),
        (HeaderSet::AETH, 4),
        (HeaderSet::ATOMIC_ACK_ETH, 8),
        (HeaderSet::IMMDT, 4),
        (HeaderSet::IETH, 4),
        (HeaderSet::CNP, 16),
    ];

    /// Union of two sets.
    pub const fn with(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }

    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Total length of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                n += Self::ORDER[i].1;
            }
            i += 1;
        }
        n
    }

    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Offset of header `h` from the end of the BTH, when `h` is in the set.
    pub const fn offset_of(self, h: HeaderSet) -> Option<usize> {
        if !self.contains(h) || h.0 == 0 {
            return None;
        }
        let mut n = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if Self::ORDER[i].0 .0 == h.0 {
                return Some(n);
            }
            if self.contains(Self::ORDER[i].0) {
                n += Self::ORDER[i].1;
            }
            i += 1;
        }
        None
    }
}

/// Where a packet sits in a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a message of several.
    First,
    /// A packet in the middle of a message.
    Middle,
    /// Last packet of a message of several.
    Last,
    /// The only packet of a message.
    Only,
}

impl Position {
    /// Every position, in declaration (discriminant) order.
    pub const ALL: [Position; 4] = [Self::First, Self::Middle, Self::Last, Self::Only];
}

/// The transport service an opcode belongs to (the top three bits of the opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// RoCE v2 congestion notification.
    Cnp,
}

impl Service {
    /// Every service, in declaration (discriminant) order.
    pub const ALL: [Service; 4] = [Self::Rc, Self::Uc, Self::Ud, Self::Cnp];
}

/// The operation an opcode performs, independent of position and service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND.
    Send,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// Acknowledgement (ACK or NAK).
    Acknowledge,
    /// Atomic acknowledgement, carrying the original value.
    AtomicAcknowledge,
    /// Atomic compare-and-swap.
    CompareSwap,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// RoCE v2 congestion notification packet.
    Cnp,
    /// Atomic write (IBA 1.5, A19.4): 8 bytes stored at once at the RETH's address,
    /// acknowledged like an RDMA WRITE.
    AtomicWrite,
}

impl Operation {
    /// Every operation, in declaration (discriminant) order.
    pub const ALL: [Operation; 10] = [
        Self::Send,
        Self::RdmaWrite,
        Self::RdmaReadRequest,
        Self::RdmaReadResponse,
        Self::Acknowledge,
        Self::AtomicAcknowledge,
        Self::CompareSwap,
        Self::FetchAdd,
        Self::Cnp,
        Self::AtomicWrite,
    ];
}

/// Everything the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name as Wireshark and the Linux headers spell it, e.g. `RC_SEND_FIRST`.
    pub name: &'static str,
    /// The transport service.
    pub service: Service,
    /// The operation.
    pub operation: Operation,
    /// Where the packet sits in its message.
    pub position: Position,
    /// Extension headers after the BTH.
    pub headers: HeaderSet,
    /// Whether a payload may follow the extension headers.
    pub payload: bool,
}

impl OpcodeInfo {
    /// True for packets sent by a responder (read responses and acknowledgements).
    pub const fn is_response(&self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
}

/// A BTH opcode that is in the table. Construct with [`Opcode::new`] or the constants.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(u8);

macro_rules! opcode_table {
    ($( $name:ident = $val:literal, $svc:ident, $op:ident, $pos:ident, [$($h:ident),*], $payload:literal; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($val), ").")]
                pub const $name: Opcode = Opcode($val);
            )*
        }
        const ENTRIES: &[(u8, OpcodeInfo)] = &[
            $( ($val, OpcodeInfo {
                name: stringify!($name),
                service: Service::$svc,
                operation: Operation::$op,
                position: Position::$pos,
                headers: HeaderSet::EMPTY$(.with(HeaderSet::$h))*,
                payload: $payload,
            }), )*
        ];
    };
}

opcode_table! {
    RC_SEND_FIRST = 0x00, Rc, Send, First, [], true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, [], true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, [], true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, Send, Last, [IMMDT], true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, [], true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, Send, Only, [IMMDT], true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, RdmaWrite, First, [RETH], true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, RdmaWrite, Middle, [], true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, RdmaWrite, Last, [], true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, RdmaWrite, Last, [IMMDT], true;
    RC_RDMA_WRITE_ONLY = 0x0a, Rc, RdmaWrite, Only, [RETH], true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, Rc, RdmaWrite, Only, [RETH, IMMDT], true;
    RC_RDMA_READ_REQUEST = 0x0c, Rc, RdmaReadRequest, Only, [RETH], false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, Rc, RdmaReadResponse, First, [AETH], true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, Rc, RdmaReadResponse, Middle, [], true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, Rc, RdmaReadResponse, Last, [AETH], true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, RdmaReadResponse, Only, [AETH], true;
    RC_ACKNOWLEDGE = 0x11, Rc, Acknowledge, Only, [AETH], false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], false;
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, Only, [ATOMIC_ETH], false;
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, Only, [ATOMIC_ETH], false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, Send, Last, [IETH], true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, Send, Only, [IETH], true;
    RC_ATOMIC_WRITE = 0x1d, Rc, AtomicWrite, Only, [RETH], true;
    UC_SEND_FIRST = 0x20, Uc, Send, First, [], true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, [], true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, [], true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, Send, Last, [IMMDT], true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, [], true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, Send, Only, [IMMDT], true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, RdmaWrite, First, [RETH], true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, RdmaWrite, Middle, [], true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, RdmaWrite, Last, [], true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, RdmaWrite, Last, [IMMDT], true;
    UC_RDMA_WRITE_ONLY = 0x2a, Uc, RdmaWrite, Only, [RETH], true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, Uc, RdmaWrite, Only, [RETH, IMMDT], true;
    UD_SEND_ONLY = 0x64, Ud, Send, Only, [DETH], true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, Send, Only, [DETH, IMMDT], true;
    CNP = 0x81, Cnp, Cnp, Only, [CNP], false;
}

/// Indexed by opcode value; built at compile time from the table above.
static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    let mut i = 0;
    while i < ENTRIES.len() {
        t[ENTRIES[i].0 as usize] = Some(ENTRIES[i].1);
        i += 1;
    }
    t
};

/// Index of a meaning (service, operation, position, immediate, invalidate) in
/// [`BY_MEANING`].
const fn meaning(
    service: Service,
    operation: Operation,
    position: Position,
    immediate: bool,
    invalidate: bool,
) -> usize {
    let op = service as usize * OPERATIONS + operation as usize;
    ((op * POSITIONS + position as usize) * 2 + immediate as usize) * 2 + invalidate as usize
}

const SERVICES: usize = Service::ALL.len();
const OPERATIONS: usize = Operation::ALL.len();
const POSITIONS: usize = Position::ALL.len();

/// The opcode of each meaning, built at compile time from the table above: the
/// requester asks for one per packet it sends, and a walk of the table was 1% of the
/// engine benchmark's time.
static BY_MEANING: [Option<Opcode>; SERVICES * OPERATIONS * POSITIONS * 4] = {
    let mut t = [None; SERVICES * OPERATIONS * POSITIONS * 4];
    let mut i = 0;
    while i < ENTRIES.len() {
        let (v, info) = &ENTRIES[i];
        let h = info.headers;
        let k = meaning(
            info.service,
            info.operation,
            info.position,
            h.contains(HeaderSet::IMMDT),
            h.contains(HeaderSet::IETH),
        );
        // The first entry of a meaning wins, as a walk of the table would find it.
        if t[k].is_none() {
            t[k] = Some(Opcode(*v));
        }
        i += 1;
    }
    t
};

impl Opcode {
    /// The opcode for a BTH byte, if the table knows it.
    pub fn new(v: u8) -> Option<Opcode> {
        TABLE[v as usize].map(|_| Opcode(v))
    }

    /// Every opcode in the table, in numeric order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        ENTRIES.iter().map(|(v, _)| Opcode(*v))
    }

    /// The opcode's byte value.
    pub const fn value(self) -> u8 {
        self.0
    }

    /// The table entry.
    pub fn info(self) -> &'static OpcodeInfo {
        TABLE[self.0 as usize]
            .as_ref()
            .expect("Opcode is only constructed for table entries")
    }

    /// Name, e.g. `RC_RDMA_READ_RESPONSE_MIDDLE`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Extension headers after the BTH.
    pub fn headers(self) -> HeaderSet {
        self.info().headers
    }

    /// Whether a payload may follow the headers.
    pub fn has_payload(self) -> bool {
        self.info().payload
    }

    /// Position in a message.
    pub fn position(self) -> Position {
        self.info().position
    }

    /// Transport service.
    pub fn service(self) -> Service {
        self.info().service
    }

    /// Operation.
    pub fn operation(self) -> Operation {
        self.info().operation
    }

    /// The opcode of `service` for `operation` at `position`, with or without immediate data
    /// and invalidate; `None` if IB defines no such opcode.
    pub fn lookup(
        service: Service,
        operation: Operation,
        position: Position,
        immediate: bool,
        invalidate: bool,
    ) -> Option<Opcode> {
        BY_MEANING[meaning(service, operation, position, immediate, invalidate)]
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#04x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_ib_encoding() {
        // The top three bits name the service.
        for op in Opcode::all() {
            let svc = match op.value() >> 5 {
                0 => Service::Rc,
                1 => Service::Uc,
                3 => Service::Ud,
                4 => Service::Cnp,
                _ => panic!("unexpected service bits in {op:?}"),
            };
            assert_eq!(op.service(), svc, "{op:?}");
            let prefix = match svc {
                Service::Rc => "RC_",
                Service::Uc => "UC_",
                Service::Ud => "UD_",
                Service::Cnp => "CNP",
            };
            assert!(op.name().starts_with(prefix), "{op:?}");
        }
        assert_eq!(Opcode::all().count(), 39);
        assert_eq!(
            Opcode::new(0x1d).map(|o| (o.name(), o.operation(), o.headers())),
            Some(("RC_ATOMIC_WRITE", Operation::AtomicWrite, HeaderSet::RETH))
        );
        assert!(Opcode::new(0x1c).is_none(), "FLUSH is not supported");
        assert!(Opcode::new(0x15).is_none());
        assert!(Opcode::new(0x2c).is_none());
        assert!(Opcode::new(0x40).is_none(), "RD is not supported");
    }

    #[test]
    fn header_offsets_follow_wire_order() {
        let h = HeaderSet::RETH.with(HeaderSet::IMMDT);
        assert_eq!(h.len(), 20);
        assert_eq!(h.offset_of(HeaderSet::RETH), Some(0));
        assert_eq!(h.offset_of(HeaderSet::IMMDT), Some(16));
        assert_eq!(h.offset_of(HeaderSet::AETH), None);
        let a = Opcode::RC_ATOMIC_ACKNOWLEDGE.headers();
        assert_eq!(a.offset_of(HeaderSet::ATOMIC_ACK_ETH), Some(4));
        assert_eq!(
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
                .headers()
                .offset_of(HeaderSet::IMMDT),
            Some(8)
        );
    }

    #[test]
    fn lookup_agrees_with_a_walk_of_the_table_for_every_meaning() {
        // The meaning index relies on each list being in discriminant order.
        assert!(Service::ALL
            .iter()
            .enumerate()
            .all(|(i, &v)| v as usize == i));
        assert!(Operation::ALL
            .iter()
            .enumerate()
            .all(|(i, &v)| v as usize == i));
        assert!(Position::ALL
            .iter()
            .enumerate()
            .all(|(i, &v)| v as usize == i));
        let mut found = 0;
        for s in Service::ALL {
            for o in Operation::ALL {
                for p in Position::ALL {
                    for (imm, inv) in [(false, false), (true, false), (false, true), (true, true)] {
                        let walk = ENTRIES.iter().find_map(|(v, i)| {
                            let h = i.headers;
                            (i.service == s
                                && i.operation == o
                                && i.position == p
                                && h.contains(HeaderSet::IMMDT) == imm
                                && h.contains(HeaderSet::IETH) == inv)
                                .then_some(Opcode(*v))
                        });
                        assert_eq!(Opcode::lookup(s, o, p, imm, inv), walk, "{s:?} {o:?} {p:?}");
                        found += usize::from(walk.is_some());
                    }
                }
            }
        }
        assert_eq!(
            found,
            ENTRIES.len(),
            "every opcode is some meaning's answer"
        );
    }

    #[test]
    fn lookup_finds_the_right_variant() {
        use Operation::*;
        use Position::*;
        assert_eq!(
            Opcode::lookup(Service::Rc, Send, Last, true, false),
            Some(Opcode::RC_SEND_LAST_WITH_IMMEDIATE)
        );
        assert_eq!(
            Opcode::lookup(Service::Rc, Send, Only, false, true),
            Some(Opcode::RC_SEND_ONLY_WITH_INVALIDATE)
        );
        assert_eq!(
            Opcode::lookup(Service::Uc, RdmaWrite, First, false, false),
            Some(Opcode::UC_RDMA_WRITE_FIRST)
        );
        assert_eq!(Opcode::lookup(Service::Ud, Send, First, false, false), None);
    }
}

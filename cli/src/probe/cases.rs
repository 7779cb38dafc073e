//! Conformance cases as data: TOML files of `[[case]]` tables, each a sequence of steps
//! (send a packet or message, expect an answer or silence, pause). The built-in suite lives
//! in `cli/probe/*.toml`; users add files of their own with `--cases`.
//!
//! ```toml
//! [[case]]
//! name = "psn-sequence-error"
//! needs = "send"
//! summary = "A request past the expected PSN draws one PSN sequence error NAK"
//! cite = "IBA vol. 1 §9.7.5.1.2 (C9-101)"
//! steps = [
//!   { send = "SEND", psn = "epsn+1", len = 64 },
//!   { expect = "NAK_PSN_SEQ", psn = "epsn" },
//! ]
//! ```
//!
//! Field values that depend on the connection are expressions (see [`super::expr`]) over
//! the names in [`NAMES`] and the names earlier steps `save`d.

use std::collections::BTreeSet;

use ferroce_wire::Opcode;
use serde::Deserialize;

use super::expr;

/// Names every expression may use. `epsn`: the PSN the target expects next; `first`,
/// `last`: the first and last PSN of the previous request sent; `va`, `rkey`, `size`: the
/// target's buffer; `mtu`: the path MTU in bytes; `tpsn`: the PSN of the last request
/// the target sent (set by `expect = "REQUEST"`); `msn`: the MSN of the last
/// acknowledgement seen; `orig`: the original value of the last atomic acknowledgement.
pub const NAMES: &[&str] = &[
    "epsn",
    "first",
    "last",
    "va",
    "rkey",
    "size",
    "mtu",
    "tqpn",
    "tpsn",
    "tlast",
    "msn",
    "orig",
    "timeout_ms",
];

/// What a target must offer for a case to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Needs {
    /// Receives posted (an ibv_rc_pingpong or ib_send_bw server).
    Send,
    /// RDMA WRITE rights on a buffer (ib_write_bw).
    Write,
    /// RDMA READ rights (ib_read_bw).
    Read,
    /// Atomic rights (ib_atomic_bw).
    Atomic,
    /// A target that sends requests of its own after a SEND (ibv_rc_pingpong).
    Requester,
    /// A QP with no receive posted (perftest's WRITE, READ and atomic servers).
    #[serde(rename = "norecv")]
    NoRecv,
    /// A target that sends RDMA READ requests to the probe (an ib_read_bw client; the
    /// probe plays its server).
    Reader,
    /// Nothing beyond a connected RC QP.
    Any,
}

impl Needs {
    /// Its name in a case file.
    pub fn name(self) -> &'static str {
        match self {
            Needs::Send => "send",
            Needs::Write => "write",
            Needs::Read => "read",
            Needs::Atomic => "atomic",
            Needs::Requester => "requester",
            Needs::NoRecv => "norecv",
            Needs::Reader => "reader",
            Needs::Any => "any",
        }
    }
}

/// A case file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDef {
    #[serde(rename = "case", default)]
    cases: Vec<CaseDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseDef {
    name: String,
    summary: String,
    /// The spec rule or rxe behaviour the case checks.
    cite: String,
    #[serde(default = "any")]
    needs: Needs,
    /// A known, explained deviation of a stack: `{ rxe = "why, with a source citation" }`.
    #[serde(default)]
    known: std::collections::BTreeMap<String, String>,
    /// Stacks the case is known to crash (`{ rxe = "the oops, the source" }`): skipped
    /// for them unless asked for.
    #[serde(default)]
    crashes: std::collections::BTreeMap<String, String>,
    steps: Vec<StepDef>,
}

fn any() -> Needs {
    Needs::Any
}

/// One step as written; exactly one of `send`, `expect`, `sleep_ms` is set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepDef {
    send: Option<String>,
    expect: Option<String>,
    sleep_ms: Option<u64>,
    // send
    psn: Option<String>,
    len: Option<u32>,
    va: Option<String>,
    rkey: Option<String>,
    dma_len: Option<String>,
    add: Option<String>,
    swap: Option<String>,
    compare: Option<String>,
    imm: Option<u32>,
    ack_req: Option<bool>,
    advance: Option<bool>,
    syndrome: Option<String>,
    timer: Option<u8>,
    msn: Option<String>,
    opcode: Option<u8>,
    dest_qp: Option<String>,
    pkey: Option<u16>,
    tver: Option<u8>,
    pad: Option<u8>,
    icrc: Option<String>,
    truncate: Option<usize>,
    udp_dport: Option<u16>,
    ecn: Option<u8>,
    repeat: Option<u32>,
    /// Payload bytes are `offset ^ fill` (send: what is written; READ_RESPONSE: what must
    /// come back).
    fill: Option<String>,
    // expect
    within_ms: Option<u64>,
    before_timer: Option<bool>,
    min_ms: Option<u64>,
    orig: Option<String>,
    save: Option<String>,
    count: Option<u32>,
}

/// A loaded case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Short unique name (`psn-sequence-error`).
    pub name: String,
    /// One line: what is checked.
    pub summary: String,
    /// The rule it checks (spec section, or rxe source).
    pub cite: String,
    /// What the target must offer.
    pub needs: Needs,
    /// Known, explained deviations by stack name (`rxe`, `ferroce`).
    pub known: Vec<(String, String)>,
    /// Stacks this case is known to crash, with the evidence.
    pub crashes: Vec<(String, String)>,
    /// The steps in order.
    pub steps: Vec<Step>,
}

/// One step of a case.
#[derive(Debug, Clone)]
pub enum Step {
    /// Send a request message or one raw packet.
    Send(Send),
    /// Wait for an answer (or for silence).
    Expect(Expect),
    /// Pause.
    Sleep(u64),
}

/// What to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendKind {
    /// A whole message cut into MTU-sized packets: SEND, WRITE, READ (the request),
    /// FETCH_ADD, COMPARE_SWAP.
    Message(MessageOp),
    /// Exactly one packet with this opcode (`RC_RDMA_WRITE_MIDDLE`, `RC_ACKNOWLEDGE`, ...).
    Packet(Opcode),
}

/// The operation of a message send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageOp {
    /// SEND (FIRST / MIDDLE / LAST or ONLY).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ request.
    Read,
    /// FETCH_ADD.
    FetchAdd,
    /// COMPARE_SWAP.
    CompareSwap,
}

/// A send step: the fields the case set; the rest take defaults from the connection.
#[derive(Debug, Clone)]
pub struct Send {
    /// The message or packet.
    pub kind: SendKind,
    /// Expressions (None: the default for the connection).
    pub psn: Option<String>,
    /// Payload length (message length for messages); for READ the length to read.
    pub len: u32,
    /// RETH / AtomicETH address, R_Key and RETH length.
    pub va: Option<String>,
    /// R_Key.
    pub rkey: Option<String>,
    /// RETH DMA length (default: `len`).
    pub dma_len: Option<String>,
    /// Atomic operands.
    pub add: Option<String>,
    /// COMPARE_SWAP: the value to store.
    pub swap: Option<String>,
    /// COMPARE_SWAP: the value to compare with.
    pub compare: Option<String>,
    /// Immediate data: sends the `_WITH_IMMEDIATE` form of a message.
    pub imm: Option<u32>,
    /// BTH AckReq (default: on the last packet of a message).
    pub ack_req: Option<bool>,
    /// Whether `epsn` moves past the packets (default: when sent at `epsn`).
    pub advance: Option<bool>,
    /// For acknowledgements: `ack`, `rnr`, `nak-seq`, `nak-inv`, `nak-acc`, `nak-op`.
    pub syndrome: Option<String>,
    /// The RNR NAK's timer code (default 1: 0.01 ms).
    pub timer: Option<u8>,
    /// AETH MSN (expression).
    pub msn: Option<String>,
    /// Overrides the opcode byte after building (reserved or wrong opcodes).
    pub opcode: Option<u8>,
    /// Destination QP (expression; default the target's QP).
    pub dest_qp: Option<String>,
    /// Partition key (default 0xffff).
    pub pkey: Option<u16>,
    /// BTH transport header version (default 0).
    pub tver: Option<u8>,
    /// BTH pad count override (the payload is not changed).
    pub pad: Option<u8>,
    /// `bad`: flip the ICRC.
    pub bad_icrc: bool,
    /// Cut this many bytes off the end of the frame (IP and UDP lengths still claim them).
    pub truncate: usize,
    /// UDP destination port (default 4791).
    pub udp_dport: Option<u16>,
    /// The IP ECN field of every packet (3: Congestion Experienced).
    pub ecn: Option<u8>,
    /// Send the same packets this many times.
    pub repeat: u32,
    /// Payload byte at message offset `o` is `o ^ fill` (low 8 bits; default 0x5a).
    pub fill: Option<String>,
}

/// What a step waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectKind {
    /// An ACK (AETH syndrome ACK), skipping earlier coalescible ones.
    Ack,
    /// A NAK with this code: PSN sequence error, invalid request, remote access error,
    /// remote operational error.
    NakSeq,
    /// NAK: invalid request.
    NakInvalid,
    /// NAK: remote access error.
    NakAccess,
    /// NAK: remote operational error.
    NakOperational,
    /// Any NAK but a PSN sequence error (where the spec leaves the code to the stack).
    Nak,
    /// RNR NAK.
    RnrNak,
    /// The READ response packets of the last READ request.
    ReadResponse,
    /// An atomic acknowledgement.
    AtomicAck,
    /// A whole message from the target (its SEND, WRITE, ...), up to its LAST or ONLY
    /// packet; the PSN checked is its first packet's.
    Request,
    /// No packet at all for `within_ms`.
    Nothing,
    /// A congestion notification packet to the probe's QP (RoCE v2 annex A17), for a
    /// request that arrived marked Congestion Experienced. Answers that come before it
    /// are kept for the steps after; once a case has sent a marked packet, the other
    /// steps pass over CNPs.
    Cnp,
}

/// An expect step.
#[derive(Debug, Clone)]
pub struct Expect {
    /// What must come.
    pub kind: ExpectKind,
    /// Its PSN (expression), if checked.
    pub psn: Option<String>,
    /// Its AETH MSN (expression), if checked.
    pub msn: Option<String>,
    /// The atomic's original value (expression), if checked.
    pub orig: Option<String>,
    /// How long to wait (silence: how long it must last).
    pub within_ms: u64,
    /// Wait only three quarters of the target's local ACK timeout instead: what must come
    /// "at once", not when the target's retransmission timer fires. Scaled to the
    /// target's timer so that a target with a long one (the in-process `local` target,
    /// sharing its CPUs with other tests) is not held to a window its timer cannot
    /// explain.
    pub before_timer: bool,
    /// It must not come sooner than this after the previous step (timer checks).
    pub min_ms: Option<u64>,
    /// READ response: how many packets (default: the length of the last READ over the MTU).
    pub count: Option<u32>,
    /// A name to store the PSN (REQUEST) or original value (ATOMIC_ACK) under.
    pub save: Option<String>,
    /// READ_RESPONSE: the data read back must be `offset ^ fill` (as a send with this
    /// `fill` wrote it).
    pub fill: Option<String>,
}

/// Reads every case of a TOML text; `origin` names it in messages.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Case>, String> {
    let file: FileDef = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
    let mut out = Vec::with_capacity(file.cases.len());
    for c in file.cases {
        let name = c.name.clone();
        out.push(load_case(c).map_err(|e| format!("{origin}: case '{name}': {e}"))?);
    }
    Ok(out)
}

/// The built-in suite.
pub fn builtin() -> Vec<Case> {
    let mut all = Vec::new();
    for (file, text) in BUILTIN {
        all.extend(parse(text, file).expect("built-in cases parse (checked by a test)"));
    }
    all
}

const BUILTIN: &[(&str, &str)] = &[
    ("sequence.toml", include_str!("../../probe/sequence.toml")),
    ("access.toml", include_str!("../../probe/access.toml")),
    (
        "atomic_write.toml",
        include_str!("../../probe/atomic_write.toml"),
    ),
    ("invalid.toml", include_str!("../../probe/invalid.toml")),
    ("malformed.toml", include_str!("../../probe/malformed.toml")),
    ("requester.toml", include_str!("../../probe/requester.toml")),
    ("reader.toml", include_str!("../../probe/reader.toml")),
    (
        "congestion.toml",
        include_str!("../../probe/congestion.toml"),
    ),
];

fn load_case(c: CaseDef) -> Result<Case, String> {
    if c.name.is_empty() || c.name.contains(|ch: char| ch.is_whitespace() || ch == '/') {
        return Err("a name is one word without '/'".into());
    }
    if c.steps.is_empty() {
        return Err("no steps".into());
    }
    let mut saved: BTreeSet<String> = BTreeSet::new();
    let mut steps = Vec::with_capacity(c.steps.len());
    for (i, s) in c.steps.into_iter().enumerate() {
        let step = load_step(s, &mut saved).map_err(|e| format!("step {}: {e}", i + 1))?;
        steps.push(step);
    }
    Ok(Case {
        name: c.name,
        summary: c.summary,
        cite: c.cite,
        needs: c.needs,
        known: c.known.into_iter().collect(),
        crashes: c.crashes.into_iter().collect(),
        steps,
    })
}

fn load_step(s: StepDef, saved: &mut BTreeSet<String>) -> Result<Step, String> {
    let known = |n: &str| NAMES.contains(&n) || saved.contains(n);
    let exprs = [
        &s.psn, &s.va, &s.rkey, &s.dma_len, &s.add, &s.swap, &s.compare, &s.msn, &s.dest_qp,
        &s.orig, &s.fill,
    ];
    for e in exprs.into_iter().flatten() {
        expr::check(e, &known)?;
    }
    match (&s.send, &s.expect, s.sleep_ms) {
        (Some(op), None, None) => {
            let expect_only = [
                s.within_ms.is_some(),
                s.before_timer.is_some(),
                s.min_ms.is_some(),
                s.orig.is_some(),
            ];
            if expect_only.contains(&true) || s.save.is_some() || s.count.is_some() {
                return Err(
                    "within_ms, before_timer, min_ms, orig, save and count belong to expect steps"
                        .into(),
                );
            }
            let kind = send_kind(op)?;
            if s.ecn.is_some_and(|e| e > 3) {
                return Err("ecn is the IP header's two-bit ECN field: 0 to 3".into());
            }
            if let Some(syn) = &s.syndrome {
                syndrome_byte(syn, 0)?;
            }
            let bad_icrc = match s.icrc.as_deref() {
                None => false,
                Some("bad") => true,
                Some(other) => return Err(format!("icrc = '{other}': only \"bad\" is known")),
            };
            Ok(Step::Send(Send {
                kind,
                psn: s.psn,
                len: s.len.unwrap_or(0),
                va: s.va,
                rkey: s.rkey,
                dma_len: s.dma_len,
                add: s.add,
                swap: s.swap,
                compare: s.compare,
                imm: s.imm,
                ack_req: s.ack_req,
                advance: s.advance,
                syndrome: s.syndrome,
                timer: s.timer,
                msn: s.msn,
                opcode: s.opcode,
                dest_qp: s.dest_qp,
                pkey: s.pkey,
                tver: s.tver,
                pad: s.pad,
                bad_icrc,
                truncate: s.truncate.unwrap_or(0),
                udp_dport: s.udp_dport,
                ecn: s.ecn,
                repeat: s.repeat.unwrap_or(1).max(1),
                fill: s.fill,
            }))
        }
        (None, Some(what), None) => {
            let kind = expect_kind(what)?;
            if s.len.is_some()
                || s.va.is_some()
                || s.rkey.is_some()
                || s.opcode.is_some()
                || s.ecn.is_some()
            {
                return Err("len, va, rkey, opcode and ecn belong to send steps".into());
            }
            if s.fill.is_some() && kind != ExpectKind::ReadResponse {
                return Err("fill belongs to send steps and READ_RESPONSE".into());
            }
            if let Some(name) = &s.save {
                if NAMES.contains(&name.as_str()) {
                    return Err(format!("save = '{name}' would hide a built-in name"));
                }
                saved.insert(name.clone());
            }
            let before_timer = s.before_timer.unwrap_or(false);
            if before_timer && s.within_ms.is_some() {
                return Err("before_timer sets the wait: within_ms cannot be given with it".into());
            }
            let default_wait = if kind == ExpectKind::Nothing {
                300
            } else {
                1000
            };
            Ok(Step::Expect(Expect {
                kind,
                psn: s.psn,
                msn: s.msn,
                orig: s.orig,
                within_ms: s.within_ms.unwrap_or(default_wait),
                before_timer,
                min_ms: s.min_ms,
                count: s.count,
                save: s.save,
                fill: s.fill,
            }))
        }
        (None, None, Some(ms)) => Ok(Step::Sleep(ms)),
        _ => Err("a step has exactly one of send, expect, sleep_ms".into()),
    }
}

/// The opcode or message a `send` names: `SEND`, `WRITE`, `READ`, `FETCH_ADD`,
/// `COMPARE_SWAP` (whole messages), or any opcode name with or without its `RC_` prefix.
pub fn send_kind(name: &str) -> Result<SendKind, String> {
    let msg = match name {
        "SEND" => Some(MessageOp::Send),
        "WRITE" => Some(MessageOp::Write),
        "READ" => Some(MessageOp::Read),
        "FETCH_ADD" => Some(MessageOp::FetchAdd),
        "COMPARE_SWAP" => Some(MessageOp::CompareSwap),
        _ => None,
    };
    if let Some(m) = msg {
        return Ok(SendKind::Message(m));
    }
    let want = [name.to_string(), format!("RC_{name}")];
    Opcode::all()
        .find(|o| want.iter().any(|w| w == o.name()))
        .map(SendKind::Packet)
        .ok_or_else(|| {
            format!("send = '{name}': not SEND, WRITE, READ, FETCH_ADD, COMPARE_SWAP or an opcode name (RC_SEND_FIRST, ...)")
        })
}

fn expect_kind(name: &str) -> Result<ExpectKind, String> {
    Ok(match name {
        "ACK" => ExpectKind::Ack,
        "NAK_PSN_SEQ" => ExpectKind::NakSeq,
        "NAK_INVALID_REQUEST" => ExpectKind::NakInvalid,
        "NAK_REMOTE_ACCESS" => ExpectKind::NakAccess,
        "NAK_REMOTE_OP" => ExpectKind::NakOperational,
        "NAK" => ExpectKind::Nak,
        "RNR_NAK" => ExpectKind::RnrNak,
        "READ_RESPONSE" => ExpectKind::ReadResponse,
        "ATOMIC_ACK" => ExpectKind::AtomicAck,
        "REQUEST" => ExpectKind::Request,
        "NOTHING" => ExpectKind::Nothing,
        "CNP" => ExpectKind::Cnp,
        _ => {
            return Err(format!(
                "expect = '{name}': one of ACK, NAK_PSN_SEQ, NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS, NAK_REMOTE_OP, NAK, RNR_NAK, READ_RESPONSE, ATOMIC_ACK, REQUEST, CNP, NOTHING"
            ))
        }
    })
}

/// The AETH syndrome byte of a sent acknowledgement (`credits` for ACKs, timer for RNR).
pub fn syndrome_byte(name: &str, value: u8) -> Result<u8, String> {
    Ok(match name {
        "ack" => value & 0x1f,
        "rnr" => 0x20 | (value & 0x1f),
        "nak-seq" => 0x60,
        "nak-inv" => 0x61,
        "nak-acc" => 0x62,
        "nak-op" => 0x63,
        _ => {
            return Err(format!(
                "syndrome = '{name}': one of ack, rnr, nak-seq, nak-inv, nak-acc, nak-op"
            ))
        }
    })
}

impl ExpectKind {
    /// Its name in a case file.
    pub fn name(self) -> &'static str {
        match self {
            ExpectKind::Ack => "ACK",
            ExpectKind::NakSeq => "NAK_PSN_SEQ",
            ExpectKind::NakInvalid => "NAK_INVALID_REQUEST",
            ExpectKind::NakAccess => "NAK_REMOTE_ACCESS",
            ExpectKind::NakOperational => "NAK_REMOTE_OP",
            ExpectKind::Nak => "NAK",
            ExpectKind::RnrNak => "RNR_NAK",
            ExpectKind::ReadResponse => "READ_RESPONSE",
            ExpectKind::AtomicAck => "ATOMIC_ACK",
            ExpectKind::Request => "REQUEST",
            ExpectKind::Nothing => "NOTHING",
            ExpectKind::Cnp => "CNP",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_cases_load_with_unique_names() {
        let all = builtin();
        assert!(all.len() >= 20, "{} cases", all.len());
        let names: BTreeSet<_> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), all.len(), "duplicate case names");
        assert!(all
            .iter()
            .all(|c| !c.cite.is_empty() && !c.summary.is_empty()));
    }

    #[test]
    fn mistakes_are_reported_with_their_place() {
        let bad = |steps: &str| {
            let text = format!(
                "[[case]]\nname = \"x\"\nsummary = \"s\"\ncite = \"c\"\nsteps = [{steps}]\n"
            );
            parse(&text, "f.toml").unwrap_err()
        };
        assert!(bad("{ send = \"SENDX\" }").contains("step 1"));
        assert!(bad("{ send = \"SEND\", psn = \"epsn+nope\" }").contains("nope"));
        assert!(bad("{ expect = \"ACK\" }, { expect = \"WHAT\" }").contains("step 2"));
        assert!(bad("{ send = \"SEND\", expect = \"ACK\" }").contains("exactly one"));
        assert!(bad("{ expect = \"ACK\", len = 3 }").contains("send steps"));
        assert!(bad("{ send = \"SEND\", colour = 1 }").contains("colour"));
        assert!(bad("{ send = \"SEND\", before_timer = true }").contains("expect steps"));
        assert!(
            bad("{ expect = \"REQUEST\", before_timer = true, within_ms = 9 }")
                .contains("before_timer")
        );
        // A saved name is known to later steps only.
        assert!(
            bad("{ expect = \"ACK\", psn = \"x1\" }, { expect = \"REQUEST\", save = \"x1\" }")
                .contains("x1")
        );
        let ok = "[[case]]\nname = \"x\"\nsummary = \"s\"\ncite = \"c\"\nsteps = [{ expect = \"REQUEST\", save = \"p\" }, { send = \"ACKNOWLEDGE\", psn = \"p\", syndrome = \"ack\" }]\n";
        let c = parse(ok, "f.toml").unwrap();
        assert!(matches!(
            c[0].steps[1],
            Step::Send(Send { kind: SendKind::Packet(o), .. }) if o == Opcode::RC_ACKNOWLEDGE
        ));
    }
}

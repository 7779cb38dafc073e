//! Runs one case on a fresh connection: sends its packets, checks each answer against
//! what the case expects, and keeps a transcript (sent / expected / observed per step).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ferroce_wire::{
    AethRepr, AtomicEthRepr, ExtRepr, ImmDtRepr, NakCode, Opcode, Operation, Position, Psn,
    RethRepr, Service, Syndrome,
};

use super::cases::{Case, Expect, ExpectKind, MessageOp, Send, SendKind, Step};
use super::expr;
use super::peer::{Peer, Reply, Tweak, MAX_LOG};

/// What the probe knows of the target's QP once connected.
#[derive(Debug, Clone, Copy, Default)]
pub struct Remote {
    /// The target's QP number.
    pub qpn: u32,
    /// The PSN the target expects first (the probe's initial PSN).
    pub epsn: u32,
    /// The target's buffer (0 if it announced none), its R_Key and length.
    pub va: u64,
    /// R_Key of the target's buffer.
    pub rkey: u32,
    /// Bytes of the target's buffer the probe may use.
    pub size: u64,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// The target's local ACK timeout in ms, if known (for timer checks).
    pub timeout_ms: u64,
}

/// A case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every step saw what it expected.
    Pass,
    /// A step saw something else: a deviation (unless the case lists it as known).
    Fail,
    /// A deviation the case documents for this stack (`known`), with its explanation.
    Known(String),
    /// The target does not offer what the case needs.
    Skip(String),
    /// The case could not run (no connection, a send failed).
    Error(String),
}

impl Verdict {
    /// One word for the table.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Known(_) => "KNOWN",
            Verdict::Skip(_) => "SKIP",
            Verdict::Error(_) => "ERROR",
        }
    }
}

/// One line of a transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The step (1-based).
    pub step: usize,
    /// `sent`, `expected`, `observed`, `note`.
    pub what: &'static str,
    /// The text.
    pub text: String,
}

/// The result of running one case.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The case's name.
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What happened, step by step.
    pub lines: Vec<Line>,
    /// The step that failed, if any.
    pub failed_step: Option<usize>,
    /// Every answer the target gave, without the connection's own numbers (for comparing
    /// two targets: `--diff`).
    pub answers: Vec<String>,
}

/// The state of a case in progress.
struct Run<'a> {
    peer: &'a mut Peer,
    remote: Remote,
    epsn: u32,
    first: u32,
    last: u32,
    read_len: u32,
    saved: HashMap<String, u64>,
    last_step_end: Instant,
    lines: Vec<Line>,
    answers: Vec<String>,
    step: usize,
    /// Requests the target sends of its own accord (ibv_rc_pingpong answers each SEND
    /// with one) are not answers: outside requester cases, expectations pass over them.
    skip_target_requests: bool,
    /// Whether a packet marked Congestion Experienced was sent: the target may answer
    /// with CNPs, which only `expect = "CNP"` looks for.
    marked: bool,
    /// Answers that came while a CNP was awaited, for the steps after.
    held: VecDeque<Reply>,
    /// CNPs that came while other answers were awaited, for a later CNP step.
    cnps: VecDeque<Reply>,
    /// An `expect = "CNP"` step is running.
    awaiting_cnp: bool,
}

/// Runs `case` against the connected target.
pub fn run_case(case: &Case, peer: &mut Peer, remote: Remote) -> Outcome {
    let mut run = Run {
        peer,
        remote,
        epsn: remote.epsn & Psn::MASK,
        first: remote.epsn & Psn::MASK,
        last: remote.epsn.wrapping_sub(1) & Psn::MASK,
        read_len: 0,
        saved: HashMap::new(),
        last_step_end: Instant::now(),
        lines: Vec::new(),
        answers: Vec::new(),
        step: 0,
        skip_target_requests: !matches!(
            case.needs,
            super::cases::Needs::Requester | super::cases::Needs::Reader
        ),
        marked: false,
        held: VecDeque::new(),
        cnps: VecDeque::new(),
        awaiting_cnp: false,
    };
    let mut verdict = Verdict::Pass;
    let mut failed_step = None;
    for (i, step) in case.steps.iter().enumerate() {
        run.step = i + 1;
        let r = match step {
            Step::Send(s) => run.send(s).map(|_| true),
            Step::Expect(e) => run.expect(e),
            Step::Sleep(ms) => {
                std::thread::sleep(Duration::from_millis(*ms));
                Ok(true)
            }
        };
        run.last_step_end = Instant::now();
        match r {
            Ok(true) => {}
            Ok(false) => {
                verdict = Verdict::Fail;
                failed_step = Some(i + 1);
                break;
            }
            Err(e) => {
                verdict = Verdict::Error(format!("step {}: {e}", i + 1));
                failed_step = Some(i + 1);
                break;
            }
        }
    }
    Outcome {
        name: case.name.clone(),
        verdict,
        lines: run.lines,
        failed_step,
        answers: run.answers,
    }
}

impl Run<'_> {
    fn value(&self, name: &str) -> Option<u64> {
        Some(match name {
            "epsn" => u64::from(self.epsn),
            "first" => u64::from(self.first),
            "last" => u64::from(self.last),
            "va" => self.remote.va,
            "rkey" => u64::from(self.remote.rkey),
            "size" => self.remote.size,
            "mtu" => u64::from(self.remote.mtu),
            "tqpn" => u64::from(self.remote.qpn),
            "timeout_ms" => self.remote.timeout_ms,
            other => return self.saved.get(other).copied(),
        })
    }

    fn eval(&self, e: &Option<String>, default: &str) -> Result<u64, String> {
        let text = e.as_deref().unwrap_or(default);
        expr::eval(text, &|n| self.value(n))
    }

    fn eval_psn(&self, e: &Option<String>, default: &str) -> Result<u32, String> {
        Ok(self.eval(e, default)? as u32 & Psn::MASK)
    }

    /// Adds a transcript line; a target that floods the probe fills it up to
    /// [`MAX_LOG`] lines, then one saying so, then no more.
    fn line(&mut self, what: &'static str, text: String) {
        let (what, text) = match self.lines.len() {
            n if n < MAX_LOG => (what, text),
            n if n == MAX_LOG => ("note", "transcript full: later lines dropped".into()),
            _ => return,
        };
        self.lines.push(Line {
            step: self.step,
            what,
            text,
        });
    }

    /// The AtomicETH of `s`: its address and key (default: the target's buffer).
    fn atomic_eth(&self, s: &Send, swap_add: u64, compare: u64) -> Result<AtomicEthRepr, String> {
        Ok(AtomicEthRepr {
            va: self.eval(&s.va, "va")?,
            rkey: self.eval(&s.rkey, "rkey")? as u32,
            swap_add,
            compare,
        })
    }

    fn send(&mut self, s: &Send) -> Result<(), String> {
        let psn0 = self.eval_psn(&s.psn, "epsn")?;
        let dest_qp = self.eval(&s.dest_qp, &self.remote.qpn.to_string())? as u32;
        let tweak = Tweak {
            opcode: s.opcode,
            tver: s.tver,
            pad: s.pad,
            udp_dport: s.udp_dport,
            ecn: s.ecn,
            bad_icrc: s.bad_icrc,
            truncate: s.truncate,
        };
        self.marked |= s.ecn == Some(ferroce_transport::ECN_CE);
        let mtu = self.remote.mtu.max(256);
        // (opcode, ext headers, payload length) per packet, and PSNs the message takes.
        let mut packets: Vec<(Opcode, ExtRepr, usize)> = Vec::new();
        let mut consumed = 1u32;
        let mut is_request = true;
        let reth = |run: &Self| -> Result<RethRepr, String> {
            Ok(RethRepr {
                va: run.eval(&s.va, "va")?,
                rkey: run.eval(&s.rkey, "rkey")? as u32,
                dma_len: run.eval(&s.dma_len, &s.len.to_string())? as u32,
            })
        };
        match s.kind {
            SendKind::Message(op @ (MessageOp::Send | MessageOp::Write)) => {
                let operation = if op == MessageOp::Send {
                    Operation::Send
                } else {
                    Operation::RdmaWrite
                };
                let n = s.len.div_ceil(mtu).max(1);
                for i in 0..n {
                    let position = position_of(i, n);
                    let imm =
                        s.imm.is_some() && matches!(position, Position::Only | Position::Last);
                    let opcode = Opcode::lookup(Service::Rc, operation, position, imm, false)
                        .ok_or("no such opcode")?;
                    let mut ext = ExtRepr::default();
                    if opcode.headers().contains(ferroce_wire::HeaderSet::RETH) {
                        ext.reth = Some(reth(self)?);
                    }
                    if imm {
                        ext.immdt = Some(ImmDtRepr {
                            imm: s.imm.unwrap_or(0),
                        });
                    }
                    let len = (s.len - i * mtu).min(mtu) as usize;
                    packets.push((opcode, ext, len));
                }
                consumed = n;
            }
            SendKind::Message(MessageOp::Read) => {
                let ext = ExtRepr {
                    reth: Some(reth(self)?),
                    ..Default::default()
                };
                packets.push((Opcode::RC_RDMA_READ_REQUEST, ext, 0));
                consumed = s.len.div_ceil(mtu).max(1);
                self.read_len = s.len;
            }
            SendKind::Message(op @ (MessageOp::FetchAdd | MessageOp::CompareSwap)) => {
                let (opcode, swap_add, compare) = if op == MessageOp::FetchAdd {
                    (Opcode::RC_FETCH_ADD, self.eval(&s.add, "1")?, 0)
                } else {
                    (
                        Opcode::RC_COMPARE_SWAP,
                        self.eval(&s.swap, "0")?,
                        self.eval(&s.compare, "0")?,
                    )
                };
                let ext = ExtRepr {
                    atomic_eth: Some(self.atomic_eth(s, swap_add, compare)?),
                    ..Default::default()
                };
                packets.push((opcode, ext, 0));
            }
            SendKind::Packet(opcode) => {
                use ferroce_wire::HeaderSet as H;
                let h = opcode.headers();
                let mut ext = ExtRepr::default();
                if h.contains(H::RETH) {
                    ext.reth = Some(reth(self)?);
                }
                if h.contains(H::ATOMIC_ETH) {
                    let swap_add = self.eval(&s.add.clone().or(s.swap.clone()), "1")?;
                    let compare = self.eval(&s.compare, "0")?;
                    ext.atomic_eth = Some(self.atomic_eth(s, swap_add, compare)?);
                }
                if h.contains(H::AETH) {
                    let name = s.syndrome.as_deref().unwrap_or("ack");
                    let value = if name == "rnr" {
                        s.timer.unwrap_or(1)
                    } else {
                        0x1f
                    };
                    let byte = super::cases::syndrome_byte(name, value)?;
                    ext.aeth = Some(AethRepr {
                        syndrome: Syndrome::from_byte(byte).map_err(|e| e.to_string())?,
                        msn: self.eval(&s.msn, "0")? as u32 & 0xff_ffff,
                    });
                }
                if h.contains(H::ATOMIC_ACK_ETH) {
                    ext.atomic_ack_eth = Some(ferroce_wire::AtomicAckEthRepr { orig: 0 });
                }
                if h.contains(H::IMMDT) {
                    ext.immdt = Some(ImmDtRepr {
                        imm: s.imm.unwrap_or(0),
                    });
                }
                if h.contains(H::IETH) {
                    ext.ieth = Some(ferroce_wire::IethRepr {
                        rkey: self.eval(&s.rkey, "rkey")? as u32,
                    });
                }
                if h.contains(H::DETH) {
                    ext.deth = Some(ferroce_wire::DethRepr {
                        qkey: 0,
                        src_qp: self.peer.qpn,
                    });
                }
                if h.contains(H::CNP) {
                    ext.cnp = Some(ferroce_wire::CnpRepr::default());
                }
                let len = if opcode.has_payload() {
                    s.len as usize
                } else {
                    0
                };
                packets.push((opcode, ext, len));
                is_request = !opcode.info().is_response() && opcode != Opcode::CNP;
                if opcode == Opcode::RC_RDMA_READ_REQUEST {
                    let dma = ext.reth.map_or(0, |r| r.dma_len);
                    consumed = dma.div_ceil(mtu).max(1);
                    self.read_len = dma;
                }
            }
        }
        let fill = self.eval(&s.fill, "0x5a")? as u8;
        let count = packets.len();
        let mut built = Vec::with_capacity(count);
        for (i, (opcode, ext, len)) in packets.iter().enumerate() {
            let ack_req = s.ack_req.unwrap_or(i + 1 == count);
            let psn = (psn0 + i as u32) & Psn::MASK;
            let b = ferroce_wire::BthRepr {
                mig_req: true,
                ack_req,
                pkey: s.pkey.unwrap_or(ferroce_wire::BthRepr::DEFAULT_PKEY),
                ..ferroce_wire::BthRepr::new(*opcode, dest_qp, Psn::new(psn))
            };
            // Byte `o` of the message is `o ^ fill`: packets are MTU-sized, a multiple of
            // 256, so the offset's low byte is the packet's.
            let payload: Vec<u8> = (0..*len).map(|k| (k as u8) ^ fill).collect();
            let frame = self
                .peer
                .build(b, *ext, &payload, &tweak)
                .map_err(|e| e.to_string())?;
            built.push(frame);
            let mut text = format!("{} psn={psn:#08x}", opcode.name());
            if *len > 0 {
                text.push_str(&format!(" len={len}"));
            }
            if let Some(r) = ext.reth {
                text.push_str(&format!(
                    " va={:#x} rkey={:#x} dma_len={}",
                    r.va, r.rkey, r.dma_len
                ));
            }
            if let Some(a) = ext.atomic_eth {
                text.push_str(&format!(
                    " va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}",
                    a.va, a.rkey, a.swap_add, a.compare
                ));
            }
            if let Some(a) = ext.aeth {
                text.push_str(&format!(
                    " {} msn={}",
                    super::peer::syndrome_name(a.syndrome),
                    a.msn
                ));
            }
            text.push_str(&tweak_text(&tweak, dest_qp != self.remote.qpn, s.pkey));
            if s.repeat > 1 {
                text.push_str(&format!(" (x{})", s.repeat));
            }
            self.line("sent", text);
        }
        for _ in 0..s.repeat {
            for f in &built {
                self.peer.send(f.clone()).map_err(|e| e.to_string())?;
            }
        }
        if is_request {
            self.first = psn0;
            self.last = (psn0 + consumed - 1) & Psn::MASK;
            let advance = s.advance.unwrap_or(psn0 == self.epsn);
            if advance {
                self.epsn = (psn0 + consumed) & Psn::MASK;
            }
        }
        Ok(())
    }

    fn expect(&mut self, e: &Expect) -> Result<bool, String> {
        let mut want = e.kind.name().to_string();
        let psn = match &e.psn {
            Some(_) => Some(self.eval_psn(&e.psn, "epsn")?),
            None => None,
        };
        if let Some(p) = psn {
            want.push_str(&format!(" psn={p:#08x}"));
        }
        let msn = match &e.msn {
            Some(_) => Some(self.eval(&e.msn, "0")? as u32 & 0xff_ffff),
            None => None,
        };
        if let Some(m) = msn {
            want.push_str(&format!(" msn={m}"));
        }
        let orig = match &e.orig {
            Some(_) => Some(self.eval(&e.orig, "0")?),
            None => None,
        };
        if let Some(o) = orig {
            want.push_str(&format!(" orig={o:#x}"));
        }
        if let Some(ms) = e.min_ms {
            want.push_str(&format!(" no sooner than {ms} ms"));
        }
        let within_ms = if e.before_timer {
            self.remote.timeout_ms * 3 / 4
        } else {
            e.within_ms
        };
        want.push_str(&format!(" within {within_ms} ms"));
        if e.before_timer {
            want.push_str(&format!(
                " (before the target's {} ms ACK timer)",
                self.remote.timeout_ms
            ));
        }
        self.line("expected", want);
        let start = self.last_step_end;
        let deadline = Instant::now() + Duration::from_millis(within_ms);
        if e.kind == ExpectKind::Nothing {
            return match self.recv(deadline)? {
                None => {
                    self.line("observed", "nothing".into());
                    Ok(true)
                }
                Some(r) => {
                    self.line(
                        "observed",
                        format!("{r} after {} ms", ms_since(start, r.at)),
                    );
                    Ok(false)
                }
            };
        }
        if e.kind == ExpectKind::ReadResponse {
            return self.expect_read_response(e, psn, deadline);
        }
        if e.kind == ExpectKind::Cnp {
            return self.expect_cnp(start, deadline);
        }
        loop {
            let Some(r) = self.recv(deadline)? else {
                self.line("observed", "nothing".into());
                return Ok(false);
            };
            let after = ms_since(start, r.at);
            self.line("observed", format!("{r} after {after} ms"));
            if !r.icrc_ok {
                return Ok(false);
            }
            let kind_ok = match e.kind {
                ExpectKind::Ack => {
                    matches!(r.syndrome, Some(Syndrome::Ack { .. }))
                        && r.opcode == Opcode::RC_ACKNOWLEDGE
                }
                ExpectKind::NakSeq => r.syndrome == Some(Syndrome::Nak(NakCode::PsnSequenceError)),
                ExpectKind::NakInvalid => {
                    r.syndrome == Some(Syndrome::Nak(NakCode::InvalidRequest))
                }
                ExpectKind::NakAccess => {
                    r.syndrome == Some(Syndrome::Nak(NakCode::RemoteAccessError))
                }
                ExpectKind::NakOperational => {
                    r.syndrome == Some(Syndrome::Nak(NakCode::RemoteOperationalError))
                }
                ExpectKind::Nak => {
                    matches!(r.syndrome, Some(Syndrome::Nak(c)) if c != NakCode::PsnSequenceError)
                }
                ExpectKind::RnrNak => matches!(r.syndrome, Some(Syndrome::RnrNak { .. })),
                ExpectKind::AtomicAck => r.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE,
                ExpectKind::Request => !r.opcode.info().is_response(),
                ExpectKind::Nothing | ExpectKind::ReadResponse | ExpectKind::Cnp => {
                    unreachable!("handled above")
                }
            };
            // An earlier, coalescible ACK before the one awaited: note it and go on.
            if e.kind == ExpectKind::Ack && kind_ok {
                if let Some(p) = psn {
                    if Psn::new(r.psn).before(Psn::new(p)) {
                        self.line("note", "an ACK for an earlier PSN; waiting on".into());
                        self.note_ack(&r);
                        continue;
                    }
                }
            }
            // A target with several requests outstanding: the one awaited may come after
            // others.
            if e.kind == ExpectKind::Request && kind_ok && psn.is_some_and(|p| p != r.psn) {
                self.line("note", "another request; waiting on".into());
                continue;
            }
            if !kind_ok || psn.is_some_and(|p| p != r.psn) {
                return Ok(false);
            }
            if let (Some(m), Some(got)) = (msn, r.msn) {
                if m != got {
                    return Ok(false);
                }
            }
            if let Some(o) = orig {
                if r.orig != Some(o) {
                    return Ok(false);
                }
            }
            if let Some(min) = e.min_ms {
                if after < min {
                    self.line(
                        "note",
                        format!("came after {after} ms, sooner than {min} ms"),
                    );
                    return Ok(false);
                }
            }
            self.note_ack(&r);
            if let Some(o) = r.orig {
                self.saved.insert("orig".into(), o);
            }
            if e.kind == ExpectKind::Request {
                self.saved.insert("tpsn".into(), u64::from(r.psn));
                let end = self.rest_of_message(&r, deadline)?;
                let Some(tlast) = end else {
                    return Ok(false);
                };
                self.saved.insert("tlast".into(), u64::from(tlast));
            }
            if let Some(name) = &e.save {
                let v = r.orig.unwrap_or(u64::from(r.psn));
                self.saved.insert(name.clone(), v);
            }
            return Ok(true);
        }
    }

    /// After the first packet `r` of a message from the target, its remaining packets;
    /// returns the PSN of the last (`None`: the message broke off or went wrong).
    fn rest_of_message(&mut self, r: &Reply, deadline: Instant) -> Result<Option<u32>, String> {
        let mut prev = r.clone();
        loop {
            if matches!(prev.opcode.position(), Position::Last | Position::Only) {
                return Ok(Some(prev.psn));
            }
            let Some(next) = self.recv(deadline)? else {
                self.line("observed", "the message broke off".into());
                return Ok(None);
            };
            self.line("observed", format!("{next} (same message)"));
            let continues = next.icrc_ok
                && next.opcode.operation() == prev.opcode.operation()
                && matches!(next.opcode.position(), Position::Middle | Position::Last)
                && next.psn == (prev.psn + 1) & Psn::MASK;
            if !continues {
                return Ok(None);
            }
            prev = next;
        }
    }

    fn note_ack(&mut self, r: &Reply) {
        if let Some(m) = r.msn {
            self.saved.insert("msn".into(), u64::from(m));
        }
    }

    fn expect_read_response(
        &mut self,
        e: &Expect,
        psn: Option<u32>,
        deadline: Instant,
    ) -> Result<bool, String> {
        let mtu = self.remote.mtu.max(256);
        let n = e.count.unwrap_or(self.read_len.div_ceil(mtu).max(1));
        let psn0 = psn.unwrap_or(self.first);
        let start = self.last_step_end;
        let fill = match &e.fill {
            Some(_) => Some(self.eval(&e.fill, "0")? as u8),
            None => None,
        };
        let mut bytes = 0usize;
        for i in 0..n {
            let Some(r) = self.recv(deadline)? else {
                self.line("observed", format!("nothing more after {i} of {n} packets"));
                return Ok(false);
            };
            self.line(
                "observed",
                format!("{r} after {} ms", ms_since(start, r.at)),
            );
            let want_pos = position_of(i, n);
            let ok = r.icrc_ok
                && r.opcode.operation() == Operation::RdmaReadResponse
                && r.opcode.position() == want_pos
                && r.psn == (psn0 + i) & Psn::MASK;
            if !ok {
                return Ok(false);
            }
            self.note_ack(&r);
            if let Some(f) = fill {
                let wrong = r
                    .payload
                    .iter()
                    .enumerate()
                    .position(|(k, b)| *b != (bytes + k) as u8 ^ f);
                if let Some(k) = wrong {
                    self.line(
                        "note",
                        format!(
                            "byte {} read back is {:#04x}, {:#04x} was written",
                            bytes + k,
                            r.payload[k],
                            (bytes + k) as u8 ^ f
                        ),
                    );
                    return Ok(false);
                }
            }
            bytes += r.payload_len;
        }
        if e.count.is_none() && bytes != self.read_len as usize {
            self.line(
                "note",
                format!("{bytes} bytes read back, {} asked", self.read_len),
            );
            return Ok(false);
        }
        Ok(true)
    }

    /// Waits for a CNP (or takes one that came during an earlier step); answers before
    /// it are held for the next steps.
    fn expect_cnp(&mut self, start: Instant, deadline: Instant) -> Result<bool, String> {
        if let Some(r) = self.cnps.pop_front() {
            self.line("observed", format!("{r}, which came before this step"));
            return Ok(r.icrc_ok);
        }
        self.awaiting_cnp = true;
        let mut held = Vec::new();
        let found = loop {
            match self.recv(deadline) {
                Ok(Some(r)) if r.opcode == Opcode::CNP => {
                    let after = ms_since(start, r.at);
                    self.line("observed", format!("{r} after {after} ms"));
                    break Ok(r.icrc_ok);
                }
                Ok(Some(r)) => {
                    self.line("note", format!("{r}: kept for the next step"));
                    if held.len() < MAX_LOG {
                        held.push(r);
                    }
                }
                Ok(None) => {
                    self.line("observed", "no CNP".into());
                    break Ok(false);
                }
                Err(e) => break Err(e),
            }
        };
        self.awaiting_cnp = false;
        // Before anything still held from an earlier CNP step.
        for r in held.into_iter().rev() {
            self.held.push_front(r);
        }
        found
    }

    fn recv(&mut self, deadline: Instant) -> Result<Option<Reply>, String> {
        if let Some(r) = self.held.pop_front() {
            return Ok(Some(r));
        }
        loop {
            let r = self.peer.recv(deadline).map_err(|e| e.to_string())?;
            if let Some(r) = &r {
                if self.answers.len() < MAX_LOG {
                    let a = r.describe(self.remote.epsn);
                    self.answers.push(a);
                }
            }
            match r {
                Some(r) if r.opcode == Opcode::CNP && self.marked && !self.awaiting_cnp => {
                    self.line(
                        "note",
                        format!("{r}: a congestion notification, kept for a CNP step"),
                    );
                    if self.cnps.len() < MAX_LOG {
                        self.cnps.push_back(r);
                    }
                }
                Some(r)
                    if self.skip_target_requests
                        && !r.opcode.info().is_response()
                        && r.opcode != Opcode::CNP =>
                {
                    self.line(
                        "note",
                        format!("{r}: the target's own request, not an answer; passed over"),
                    );
                }
                other => return Ok(other),
            }
        }
    }
}

/// Where packet `i` of `n` sits in its message.
pub(crate) fn position_of(i: u32, n: u32) -> Position {
    match (n, i) {
        (1, _) => Position::Only,
        (_, 0) => Position::First,
        (_, i) if i + 1 == n => Position::Last,
        _ => Position::Middle,
    }
}

fn ms_since(start: Instant, at: Instant) -> u64 {
    at.saturating_duration_since(start).as_millis() as u64
}

fn tweak_text(t: &Tweak, other_qp: bool, pkey: Option<u16>) -> String {
    let mut s = String::new();
    if let Some(o) = t.opcode {
        s.push_str(&format!(" [opcode byte {o:#04x}]"));
    }
    if let Some(v) = t.tver {
        s.push_str(&format!(" [tver {v}]"));
    }
    if let Some(p) = t.pad {
        s.push_str(&format!(" [pad {p}]"));
    }
    if let Some(e) = t.ecn {
        s.push_str(&match e {
            ferroce_transport::ECN_CE => " [ECN CE]".to_string(),
            e => format!(" [ECN {e}]"),
        });
    }
    if let Some(p) = t.udp_dport {
        s.push_str(&format!(" [udp dport {p}]"));
    }
    if t.bad_icrc {
        s.push_str(" [bad ICRC]");
    }
    if t.truncate > 0 {
        s.push_str(&format!(" [{} bytes cut]", t.truncate));
    }
    if other_qp {
        s.push_str(" [other dest QP]");
    }
    if let Some(k) = pkey {
        s.push_str(&format!(" [pkey {k:#06x}]"));
    }
    s
}

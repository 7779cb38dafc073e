//! Finding requesters that reuse a PSN for a different packet.
//!
//! On a reliable connection a PSN names one request packet. A retry resends that packet
//! (IB spec 9.7.4.1.5: from the PSN of the first unacknowledged packet, with the same
//! opcode sequence), so every copy of a request PSN must carry the same opcode, extension
//! headers and payload length. A requester that breaks this desynchronises its responder:
//! the responder has executed the PSN's first version, takes the second for a duplicate,
//! and later answers the requester's shifted messages with NAKs that end the connection.
//! Linux 6.1's rxe does this after some retries under loss; `ferroce decode` reports each
//! such packet so that a capture says who broke the stream.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use ferroce_wire::{Datagram, ExtRepr, Opcode, Service};

/// How far behind a flow's newest PSN entries are kept. A retry never reaches further
/// back than the send window (rxe: at most 2^23 PSNs, in practice a few thousand), and
/// the bound keeps a long capture's memory proportional to this, not to its length.
const WINDOW: u32 = 1 << 16;

/// What a request packet must repeat when it is resent: its opcode, extension headers
/// (the wire crate's own parse of them) and payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    pub opcode: Opcode,
    pub ext: ExtRepr,
    pub payload_len: usize,
}

impl Fingerprint {
    /// `None` for a packet whose extension headers do not parse.
    fn of(d: &Datagram<'_>) -> Option<Fingerprint> {
        let p = d.ib();
        Some(Fingerprint {
            opcode: p.opcode(),
            ext: ExtRepr::parse(&p).ok()?,
            payload_len: p.payload().len(),
        })
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.opcode.name())?;
        let e = &self.ext;
        if let Some(h) = e.reth {
            write!(
                f,
                " RETH va={:#x} rkey={:#x} len={}",
                h.va, h.rkey, h.dma_len
            )?;
        }
        if let Some(h) = e.atomic_eth {
            write!(
                f,
                " AtomicETH va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}",
                h.va, h.rkey, h.swap_add, h.compare
            )?;
        }
        if let Some(h) = e.immdt {
            write!(f, " ImmDt {:#010x}", h.imm)?;
        }
        if let Some(h) = e.ieth {
            write!(f, " IETH rkey={:#x}", h.rkey)?;
        }
        write!(f, " payload={}", self.payload_len)
    }
}

/// A request packet that reused an earlier request's PSN with different contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reuse {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dest_qp: u32,
    pub psn: u32,
    /// Capture index of the PSN's first packet, and what it was.
    pub first_index: usize,
    pub first: Fingerprint,
    /// What the PSN carries now.
    pub now: Fingerprint,
}

impl fmt::Display for Reuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PSN REUSED {} -> {} qp={:#x} psn={}: now {}; frame {} sent it as {}",
            self.src, self.dst, self.dest_qp, self.psn, self.now, self.first_index, self.first
        )
    }
}

/// One requester's request stream: source address and UDP port (per QP in rxe and
/// ferroce), destination address and QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Flow {
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    dest_qp: u32,
}

#[derive(Debug, Default)]
struct Seen {
    newest: u32,
    by_psn: HashMap<u32, (usize, Fingerprint)>,
}

impl Seen {
    /// Forgets PSNs more than [`WINDOW`] behind the newest, once there are twice as many
    /// entries as the window holds (amortised constant time per packet).
    fn prune(&mut self) {
        if self.by_psn.len() <= 2 * WINDOW as usize {
            return;
        }
        let newest = self.newest;
        self.by_psn
            .retain(|&psn, _| newest.wrapping_sub(psn) & 0x00ff_ffff < WINDOW);
    }
}

/// Watches the RC request packets of a capture, in capture order.
#[derive(Debug, Default)]
pub struct ResendCheck {
    flows: HashMap<Flow, Seen>,
    /// How many packets [`ResendCheck::check`] has reported.
    pub reused: usize,
}

impl ResendCheck {
    pub fn new() -> ResendCheck {
        ResendCheck::default()
    }

    /// Records the packet at capture index `index`; returns the reuse it shows, if any.
    /// Responses, UC, UD and CNPs are not requests that can be retried and are ignored.
    pub fn check(&mut self, index: usize, d: &Datagram<'_>) -> Option<Reuse> {
        let p = d.ib();
        let op = p.opcode();
        if op.service() != Service::Rc || op.info().is_response() {
            return None;
        }
        let (src, dst) = crate::decode::ip_addrs(d);
        let flow = Flow {
            src,
            src_port: d.udp.source_port,
            dst,
            dest_qp: p.bth().dest_qp(),
        };
        let psn = p.bth().psn().value();
        let now = Fingerprint::of(d)?;
        let seen = self.flows.entry(flow).or_default();
        if let Some(&(first_index, first)) = seen.by_psn.get(&psn) {
            if first == now {
                return None;
            }
            self.reused += 1;
            return Some(Reuse {
                src,
                dst,
                dest_qp: flow.dest_qp,
                psn,
                first_index,
                first,
                now,
            });
        }
        if seen.by_psn.is_empty() || psn.wrapping_sub(seen.newest) & 0x00ff_ffff < 0x0080_0000 {
            seen.newest = psn;
        }
        seen.by_psn.insert(psn, (index, now));
        seen.prune();
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce_transport::testing::forge;
    use ferroce_wire::{AethRepr, BthRepr, ExtRepr, Psn, RethRepr, Syndrome};
    use std::net::Ipv6Addr;

    const A: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const B: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);

    fn pkt(src: Ipv6Addr, op: Opcode, psn: u32, reth_len: Option<u32>, payload: usize) -> Vec<u8> {
        let ext = ExtRepr {
            reth: reth_len.map(|dma_len| RethRepr {
                va: 0x1000,
                rkey: 0x77,
                dma_len,
            }),
            ..Default::default()
        };
        forge(
            src,
            B,
            BthRepr::new(op, 0x11, Psn::new(psn)),
            ext,
            &vec![0x5a; payload],
        )
    }

    fn check(c: &mut ResendCheck, index: usize, p: &[u8]) -> Option<Reuse> {
        c.check(index, &Datagram::parse(p).expect("datagram"))
    }

    #[test]
    fn an_identical_resend_is_a_retry_and_a_different_one_is_reported() {
        let mut c = ResendCheck::new();
        let first = pkt(A, Opcode::RC_RDMA_WRITE_FIRST, 540, Some(8192), 4096);
        assert_eq!(check(&mut c, 1, &first), None);
        assert_eq!(check(&mut c, 2, &first), None, "a retry resends the packet");
        let shifted = pkt(A, Opcode::RC_RDMA_WRITE_ONLY, 540, Some(0), 0);
        let r = check(&mut c, 3, &shifted).expect("reported");
        assert_eq!((r.psn, r.dest_qp, r.first_index), (540, 0x11, 1));
        assert_eq!(r.first.opcode, Opcode::RC_RDMA_WRITE_FIRST);
        assert_eq!(
            (r.now.ext.reth.map(|h| h.dma_len), r.now.payload_len),
            (Some(0), 0)
        );
        assert_eq!(c.reused, 1);
        let text = r.to_string();
        assert!(
            text.contains("psn=540: now RC_RDMA_WRITE_ONLY RETH va=0x1000 rkey=0x77 len=0")
                && text.contains("frame 1 sent it as RC_RDMA_WRITE_FIRST"),
            "{text}"
        );
        // The next PSN as FIRST where it was MIDDLE: each shifted packet is reported.
        let middle = pkt(A, Opcode::RC_RDMA_WRITE_MIDDLE, 541, None, 4096);
        assert_eq!(check(&mut c, 4, &middle), None);
        let moved = pkt(A, Opcode::RC_RDMA_WRITE_FIRST, 541, Some(8192), 4096);
        assert!(check(&mut c, 5, &moved).is_some());
        assert_eq!(c.reused, 2);
    }

    #[test]
    fn responses_and_other_requesters_are_apart() {
        let mut c = ResendCheck::new();
        let ack = |msn| {
            let ext = ExtRepr {
                aeth: Some(AethRepr {
                    syndrome: Syndrome::Ack { credits: 0 },
                    msn,
                }),
                ..Default::default()
            };
            forge(
                B,
                A,
                BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x22, Psn::new(7)),
                ext,
                &[],
            )
        };
        // A responder repeats a PSN in its ACKs with new contents: not a request.
        assert_eq!(check(&mut c, 1, &ack(1)), None);
        assert_eq!(check(&mut c, 2, &ack(2)), None);
        // One PSN from two requesters (addresses) names two packets.
        let a = pkt(A, Opcode::RC_SEND_ONLY, 9, None, 64);
        let other = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 3);
        let b = pkt(other, Opcode::RC_SEND_ONLY, 9, None, 32);
        assert_eq!(check(&mut c, 3, &a), None);
        assert_eq!(check(&mut c, 4, &b), None);
        // UC has no retries to check.
        let uc = pkt(A, Opcode::UC_SEND_ONLY, 9, None, 16);
        assert_eq!(check(&mut c, 5, &uc), None);
        assert_eq!(c.reused, 0);
    }

    #[test]
    fn memory_is_bounded_by_the_window_across_psn_wrap() {
        let mut c = ResendCheck::new();
        let start = 0x00ff_ffff - WINDOW; // wraps past 2^24 on the way
        let n = 3 * WINDOW + 5;
        for i in 0..n {
            let psn = start.wrapping_add(i) & 0x00ff_ffff;
            let p = pkt(A, Opcode::RC_SEND_ONLY, psn, None, 0);
            assert_eq!(check(&mut c, i as usize, &p), None);
        }
        let seen = c.flows.values().next().expect("one flow");
        assert!(
            seen.by_psn.len() <= 2 * WINDOW as usize + 1,
            "{}",
            seen.by_psn.len()
        );
        assert_eq!(seen.newest, (start + n - 1) & 0x00ff_ffff);
        // The newest PSNs are still remembered after the wrap.
        let last = seen.newest;
        let changed = pkt(A, Opcode::RC_SEND_ONLY, last, None, 8);
        assert!(check(&mut c, 0, &changed).is_some());
    }
}

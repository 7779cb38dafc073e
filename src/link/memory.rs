//! An in-memory wire: two ends, each a [`Link`], for tests and demos without privileges.
//!
//! [`MemoryLink::gso_pair`] makes a wire that carries what a veth carries with UDP GSO:
//! runs of frames joined into super-frames by the same code as the packet link
//! ([`super::gso`]) and split on arrival, with a hook that drops, duplicates, reorders or
//! damages super-frames — deterministic tests of the GSO path without privileges.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

use super::eventfd::EventFd;
use super::gso;
use super::join_pause::JoinPauses;
use super::vnet::VnetHdr;
use super::{FrameBatch, Link};

/// One end of an in-memory wire: frames sent on one end queue at the other.
pub struct MemoryLink {
    mac: [u8; 6],
    inbox: Arc<Inbox>,
    peer: Arc<Inbox>,
    /// Super-frame mode: what happens to each super-frame this end sends.
    gso: Option<Mutex<SuperWire>>,
    /// Destinations frames are not joined toward for now (as on the packet link).
    pauses: JoinPauses,
}

struct Inbox {
    frames: Mutex<VecDeque<(Vec<u8>, VnetHdr)>>,
    ready: EventFd,
}

/// What the wire does to the `n`th super-frame one end sends (counting from 0); the
/// hook may also change its bytes (a damaged segment fails its ICRC: a lost packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered.
    Deliver,
    /// Lost whole.
    Drop,
    /// Delivered twice.
    Duplicate,
    /// Delivered after the next frame this end sends, whole or single (the next frame may
    /// be single: a join pause, or a lone packet).
    Hold,
}

/// The hook of a [`MemoryLink::gso_pair`].
pub type SuperFault = Box<dyn FnMut(u64, &mut Vec<u8>) -> Fate + Send>;

struct SuperWire {
    fault: SuperFault,
    /// Super-frames sent (`gso_tx_frames`), and the packets they joined (`gso_tx_pkts`).
    sent: u64,
    sent_pkts: u64,
    held: Option<(Vec<u8>, VnetHdr)>,
}

/// Frames queued per direction before the wire drops (like a full NIC ring).
const MEMORY_QUEUE: usize = 4096;

impl MemoryLink {
    /// Two ends of a wire with the given MAC addresses.
    pub fn pair(mac_a: [u8; 6], mac_b: [u8; 6]) -> io::Result<(MemoryLink, MemoryLink)> {
        let inbox = || -> io::Result<Arc<Inbox>> {
            Ok(Arc::new(Inbox {
                frames: Mutex::new(VecDeque::new()),
                ready: EventFd::new()?,
            }))
        };
        let (ia, ib) = (inbox()?, inbox()?);
        Ok((
            MemoryLink {
                mac: mac_a,
                inbox: ia.clone(),
                peer: ib.clone(),
                gso: None,
                pauses: JoinPauses::default(),
            },
            MemoryLink {
                mac: mac_b,
                inbox: ib,
                peer: ia,
                gso: None,
                pauses: JoinPauses::default(),
            },
        ))
    }

    /// Two ends of a wire that joins runs of frames into UDP super-frames, passes each
    /// through its end's hook, and splits them on arrival.
    pub fn gso_pair(
        mac_a: [u8; 6],
        mac_b: [u8; 6],
        fault_a: SuperFault,
        fault_b: SuperFault,
    ) -> io::Result<(MemoryLink, MemoryLink)> {
        let (mut a, mut b) = MemoryLink::pair(mac_a, mac_b)?;
        let wire = |fault| {
            Some(Mutex::new(SuperWire {
                fault,
                sent: 0,
                sent_pkts: 0,
                held: None,
            }))
        };
        a.gso = wire(fault_a);
        b.gso = wire(fault_b);
        Ok((a, b))
    }

    /// A held super-frame goes out after whatever frame followed it, single frames too (a
    /// join pause sends only those): reordered, not lost.
    fn release_held(&self, w: &mut SuperWire) {
        if let Some((f, v)) = w.held.take() {
            self.push(f, v);
        }
    }

    fn push(&self, frame: Vec<u8>, vnet: VnetHdr) {
        let mut q = self.peer.frames.lock().expect("inbox lock");
        // A full queue drops the frame, as a wire would; retransmission recovers.
        if q.len() < MEMORY_QUEUE {
            q.push_back((frame, vnet));
        }
    }
}

impl Link for MemoryLink {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn joins_frames(&self) -> bool {
        self.gso.is_some()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let Some(wire) = &self.gso else {
            return Vec::new();
        };
        let w = wire.lock().expect("wire lock");
        vec![
            ("gso_tx_frames", w.sent),
            ("gso_tx_pkts", w.sent_pkts),
            ("gso_peer_pauses", self.pauses.started()),
        ]
    }
    fn resending_to(&self, dst: std::net::IpAddr, silences: u8) {
        if self.gso.is_some() {
            self.pauses
                .resending_to(dst, silences, std::time::Instant::now());
        }
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        self.push(frame.to_vec(), VnetHdr::NONE);
        if let Some(wire) = &self.gso {
            self.release_held(&mut wire.lock().expect("wire lock"));
        }
        self.peer.ready.wake();
        Ok(true)
    }
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut q = self.inbox.frames.lock().expect("inbox lock");
        match q.pop_front() {
            Some((f, _)) => {
                let n = f.len().min(buf.len());
                buf[..n].copy_from_slice(&f[..n]);
                Ok(Some(n))
            }
            None => {
                self.inbox.ready.drain();
                Ok(None)
            }
        }
    }
    fn send_batch(&self, batch: &mut FrameBatch) -> io::Result<usize> {
        let Some(wire) = &self.gso else {
            for i in 0..batch.len() {
                self.send(batch.frame(i))?;
            }
            return Ok(batch.len());
        };
        let mut wire = wire.lock().expect("wire lock");
        let w = &mut *wire;
        let n = batch.len();
        let join = self.pauses.joinable();
        let m = gso::plan(
            &mut batch.data,
            &batch.offsets[..n],
            &batch.lens[..n],
            &join,
            &mut batch.runs,
        );
        for r in &batch.runs[..m] {
            let mut whole = batch.frame(r.first).to_vec();
            for k in r.first + 1..r.first + r.count {
                whole.extend_from_slice(&batch.frame(k)[r.skip..]);
            }
            if r.count > 1 {
                let fate = (w.fault)(w.sent, &mut whole);
                w.sent += 1;
                w.sent_pkts += r.count as u64;
                match fate {
                    Fate::Deliver => self.push(whole, r.vnet),
                    Fate::Drop => {}
                    Fate::Duplicate => {
                        self.push(whole.clone(), r.vnet);
                        self.push(whole, r.vnet);
                    }
                    Fate::Hold => {
                        if let Some((f, v)) = w.held.replace((whole, r.vnet)) {
                            self.push(f, v);
                        }
                        continue;
                    }
                }
            } else {
                self.push(whole, r.vnet);
            }
            self.release_held(w);
        }
        self.peer.ready.wake();
        Ok(n)
    }
    fn recv_each(&self, batch: &mut FrameBatch, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut taken = 0;
        while taken < batch.capacity() {
            let mut q = self.inbox.frames.lock().expect("inbox lock");
            let Some((mut frame, vnet)) = q.pop_front() else {
                // Under the lock: a frame queued after this is woken for again.
                self.inbox.ready.drain();
                break;
            };
            drop(q);
            gso::split_received(&mut frame, vnet, f);
            taken += 1;
        }
        Ok(taken)
    }
    fn fd(&self) -> RawFd {
        self.inbox.ready.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::gso::tests::frame;

    /// A held super-frame arrives after the single frame that follows it: reordered, as
    /// `Fate::Hold` says, not lost when the next frame is not joined.
    #[test]
    fn a_held_super_frame_follows_the_next_single_frame() {
        let hold_first: SuperFault =
            Box::new(|n, _| if n == 0 { Fate::Hold } else { Fate::Deliver });
        let (a, b) =
            MemoryLink::gso_pair([2; 6], [4; 6], hold_first, Box::new(|_, _| Fate::Deliver))
                .expect("wire");
        let mut out = FrameBatch::new(4);
        for (psn, id) in [(1, 10), (2, 11)] {
            let f = frame(psn, 1024, id, 2);
            out.begin()[..f.len()].copy_from_slice(&f);
            out.push(f.len());
        }
        assert_eq!(a.send_batch(&mut out).expect("send"), 2);
        let single = frame(3, 100, 12, 2);
        a.send(&single).expect("send");
        let mut psns = Vec::new();
        let mut rx = FrameBatch::new(8);
        b.recv_each(&mut rx, &mut |f| psns.push(f[14 + 28 + 11]))
            .expect("recv");
        // The BTH's PSN's low byte: the single first, then the super-frame's two packets.
        assert_eq!(psns, [3, 1, 2]);
        assert_eq!(a.counters()[0], ("gso_tx_frames", 1));
    }
}

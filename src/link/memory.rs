//! An in-memory wire: two ends, each a [`Link`], for tests and demos without privileges.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

use super::eventfd::EventFd;
use super::Link;

/// One end of an in-memory wire: frames sent on one end queue at the other.
pub struct MemoryLink {
    mac: [u8; 6],
    inbox: Arc<Inbox>,
    peer: Arc<Inbox>,
}

struct Inbox {
    frames: Mutex<VecDeque<Vec<u8>>>,
    ready: EventFd,
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
            },
            MemoryLink {
                mac: mac_b,
                inbox: ib,
                peer: ia,
            },
        ))
    }
}

impl Link for MemoryLink {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        let mut q = self.peer.frames.lock().expect("inbox lock");
        if q.len() < MEMORY_QUEUE {
            q.push_back(frame.to_vec());
        }
        // A full queue drops the frame, as a wire would; retransmission recovers.
        drop(q);
        self.peer.ready.wake();
        Ok(true)
    }
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut q = self.inbox.frames.lock().expect("inbox lock");
        match q.pop_front() {
            Some(f) => {
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
    fn fd(&self) -> RawFd {
        self.inbox.ready.as_raw_fd()
    }
}

//! Pauses in joining frames toward a peer that seems to lose super-frames whole.
//!
//! A receiver that cannot split a super-frame loses it entire: a packet socket without a
//! receive ring sized for one, an older ferroce, any stack that reads at most an MTU per
//! frame on a path that hands super-frames over whole (a veth). RoCE has no way for a
//! sender to ask beforehand; what it sees is its transport resending after silences (ACK
//! timeouts, or a READ asked for again). After [`SILENCES`] in a row (a resend lost
//! again: one silence may be any loss at the tail of a burst) the link stops joining
//! frames toward that destination for a while, then tries again: [`FIRST`] at first,
//! twice as long each time the silences come back soon after a pause ended, up to
//! [`LONGEST`]. A peer that loses every super-frame then costs two silences per pause,
//! the pauses soon a minute long; a path that loses a packet now and then, nothing.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Silences in a row (over the same packets) that start a pause.
pub const SILENCES: u8 = 2;
/// The first pause toward a destination.
pub const FIRST: Duration = Duration::from_millis(128);
/// The longest pause (`FIRST` doubled nine times, about a minute).
pub const LONGEST: Duration = Duration::from_millis(128 << 9);
/// Destinations remembered; beyond, the one whose pause ended first is forgotten.
const MAX_PEERS: usize = 256;

/// The destinations frames are not joined toward, for now.
#[derive(Debug, Default)]
pub struct JoinPauses {
    /// Some pause may still be running (checked before the lock and the clock).
    active: AtomicBool,
    table: Mutex<Vec<Pause>>,
    /// Pauses started (`gso_peer_pauses`).
    started: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Pause {
    dst: IpAddr,
    until: Instant,
    length: Duration,
}

impl JoinPauses {
    /// The transport resends to `dst` what its peer lost without a word, after `silences`
    /// in a row: from [`SILENCES`] on, pause joining toward it, unless a pause runs
    /// already. Returns the new pause's length.
    pub fn resending_to(&self, dst: IpAddr, silences: u8, now: Instant) -> Option<Duration> {
        if silences < SILENCES {
            return None;
        }
        let mut table = self.table.lock().expect("join pauses lock");
        let length = match table.iter_mut().find(|p| p.dst == dst) {
            Some(p) if now < p.until => return None,
            Some(p) => {
                // Soon after the last pause ended: the peer still loses them.
                p.length = if now < p.until + 2 * p.length {
                    (2 * p.length).min(LONGEST)
                } else {
                    FIRST
                };
                p.until = now + p.length;
                p.length
            }
            None => {
                if table.len() >= MAX_PEERS {
                    if let Some(i) = (0..table.len()).min_by_key(|&i| table[i].until) {
                        table.swap_remove(i);
                    }
                }
                table.push(Pause {
                    dst,
                    until: now + FIRST,
                    length: FIRST,
                });
                FIRST
            }
        };
        self.active.store(true, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%dst, ms = length.as_millis() as u64, "the peer lost packets without a word (super-frames it cannot split?): sending to it packet by packet for a while");
        Some(length)
    }

    /// Whether some pause may be running: when not, nothing is paused (and no clock read
    /// is needed to say so).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether frames toward `dst` go unjoined at `now`.
    pub fn paused(&self, dst: IpAddr, now: Instant) -> bool {
        if !self.active() {
            return false;
        }
        let table = self.table.lock().expect("join pauses lock");
        if table.iter().all(|p| p.until <= now) {
            self.active.store(false, Ordering::Relaxed);
            return false;
        }
        table.iter().any(|p| p.dst == dst && now < p.until)
    }

    /// Whether a frame may head a run of joined frames now: not one toward a paused
    /// destination. Reads the clock once, and only while some pause may run.
    pub fn joinable(&self) -> impl Fn(&[u8]) -> bool + '_ {
        let now = self.active().then(Instant::now);
        move |frame: &[u8]| match (now, frame_dst(frame)) {
            (Some(now), Some(dst)) => !self.paused(dst, now),
            _ => true,
        }
    }

    /// Pauses started since the link opened.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }
}

/// The IP destination of an Ethernet frame (IPv4 or IPv6, no VLAN tag), if it has one.
pub fn frame_dst(frame: &[u8]) -> Option<IpAddr> {
    match frame.get(12..14)? {
        [0x08, 0x00] => {
            let a: [u8; 4] = frame.get(30..34)?.try_into().ok()?;
            Some(a.into())
        }
        [0x86, 0xdd] => {
            let a: [u8; 16] = frame.get(38..54)?.try_into().ok()?;
            Some(a.into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        [10, 0, 0, last].into()
    }

    #[test]
    fn a_pause_holds_then_ends_and_doubles_while_losses_recur() {
        let p = JoinPauses::default();
        let t0 = Instant::now();
        assert!(!p.active() && !p.paused(ip(2), t0));
        // One silence may be any loss at the tail of a burst.
        assert_eq!(p.resending_to(ip(2), 1, t0), None);
        assert!(!p.active());
        assert_eq!(p.resending_to(ip(2), SILENCES, t0), Some(FIRST));
        // Resends during a pause start nothing new.
        assert_eq!(p.resending_to(ip(2), SILENCES, t0 + FIRST / 2), None);
        assert!(p.paused(ip(2), t0 + FIRST / 2));
        assert!(!p.paused(ip(3), t0 + FIRST / 2), "other peers keep joining");
        assert!(!p.paused(ip(2), t0 + FIRST));
        assert!(!p.active(), "no pause left running");
        // Lost again soon after: twice as long, up to LONGEST.
        let mut t = t0 + FIRST + Duration::from_millis(1);
        let mut want = FIRST;
        for _ in 0..12 {
            want = (2 * want).min(LONGEST);
            assert_eq!(p.resending_to(ip(2), SILENCES, t), Some(want));
            t += want + Duration::from_millis(1);
        }
        assert_eq!(want, LONGEST);
        // Long after the last pause: the first length again.
        t += 3 * LONGEST;
        assert_eq!(p.resending_to(ip(2), SILENCES, t), Some(FIRST));
        assert_eq!(p.started(), 14);
    }

    #[test]
    fn the_table_stays_bounded() {
        let p = JoinPauses::default();
        let t0 = Instant::now();
        for k in 0..(MAX_PEERS as u32 + 50) {
            let dst: IpAddr = std::net::Ipv4Addr::from(0x0a00_0000 + k).into();
            let t = t0 + Duration::from_millis(u64::from(k));
            assert!(p.resending_to(dst, SILENCES, t).is_some());
        }
        assert_eq!(p.table.lock().unwrap().len(), MAX_PEERS);
        // The newest is still paused.
        let last: IpAddr = std::net::Ipv4Addr::from(0x0a00_0000 + MAX_PEERS as u32 + 49).into();
        assert!(p.paused(last, t0 + Duration::from_millis(MAX_PEERS as u64 + 49)));
    }

    #[test]
    fn frame_destinations() {
        let mut v4 = [0u8; 34];
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        v4[30..34].copy_from_slice(&[10, 9, 8, 7]);
        assert_eq!(frame_dst(&v4), Some([10, 9, 8, 7].into()));
        assert_eq!(frame_dst(&v4[..33]), None, "truncated");
        let mut v6 = [0u8; 54];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[53] = 1;
        assert_eq!(frame_dst(&v6), Some(std::net::Ipv6Addr::LOCALHOST.into()));
        v6[12] = 0x88;
        assert_eq!(frame_dst(&v6), None, "not IP");
    }
}

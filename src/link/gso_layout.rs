//! Where a super-frame's bytes lie in the kernel's buffer when a packet socket sends it:
//! in one linear block, or behind its headers in page fragments. The virtio-net header's
//! `hdr_len` decides: the kernel copies that many bytes into the skb's linear head and the
//! rest into pages.
//!
//! Why it matters, and why it is measured rather than fixed: the kernel's copy into the
//! super-frame is the largest single cost of a RoCE stream over a veth, and its speed is
//! set by whether the memory it writes is still in the cache. Fragment pages come from a
//! per-CPU free list, so they are hot only when the receiver that freed them runs on the
//! sender's CPU; a 64 KiB linear head comes from the zone's shared free list, the block a
//! receiver on another CPU freed a moment earlier. On a 2-CPU Intel host (README, "A
//! super-frame's head") one pair of processes moved 7-14% more at MTU 1500
//! and 23-25% more at 9000 with linear heads, while two and four pairs moved less with them
//! (their senders share a CPU with a receiver). Where the kernel or a NIC cuts the
//! super-frame in software, a linear head costs a copy per segment. So the sender times its
//! own sends in each layout and uses the cheaper one, trying the other now and then.

use std::sync::Mutex;

/// How a super-frame is laid out in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Headers linear, payload in page fragments (the kernel's default for packet sockets).
    Fragments,
    /// As much of the frame as fits a 64 KiB allocation in the linear head.
    Linear,
}

/// The most bytes of a super-frame put in the linear head: with the kernel's headroom and
/// `skb_shared_info` the allocation stays within 64 KiB (an order-4 block), instead of an
/// order-5 block for the last few hundred bytes of a 64 KiB datagram.
pub const LINEAR_MAX: usize = 65536 - 1024;

/// Sends timed per epoch, after a few that are not (the first sends in a layout find the
/// other layout's memory in the cache).
const SAMPLES: usize = 128;
const WARMUP: usize = 32;
/// Every this many epochs, one in the layout not in use.
const PROBE_EVERY: u32 = 16;
/// The other layout must be this much cheaper (in 1/64ths) to be switched to.
const HYSTERESIS_64THS: u64 = 61;
/// Sends moving fewer super-frame bytes than this are not timed: their cost is mostly the
/// per-frame work, the same in both layouts.
pub const MIN_TIMED_BYTES: usize = 16 << 10;

/// The choice, as a value that is given the cost of each send (time passed in, no clock).
#[derive(Debug, Clone)]
pub struct Chooser {
    /// The layout of the current epoch.
    trying: Layout,
    /// The layout regular epochs use.
    best: Layout,
    epoch: u32,
    seen: usize,
    samples: Vec<u32>,
    /// Median nanoseconds per KiB of each layout's last epoch (Fragments, Linear).
    cost: [Option<u32>; 2],
    switches: u64,
    /// The kernel refused a linear head as invalid: never again.
    linear_off: bool,
}

impl Default for Chooser {
    fn default() -> Self {
        Chooser::new()
    }
}

fn name(l: Layout) -> &'static str {
    match l {
        Layout::Linear => "linear",
        Layout::Fragments => "fragments",
    }
}

fn index(l: Layout) -> usize {
    match l {
        Layout::Fragments => 0,
        Layout::Linear => 1,
    }
}

fn other(l: Layout) -> Layout {
    match l {
        Layout::Fragments => Layout::Linear,
        Layout::Linear => Layout::Fragments,
    }
}

impl Chooser {
    /// Starts with the kernel's default layout; the first epochs measure both.
    pub fn new() -> Chooser {
        Chooser {
            trying: Layout::Fragments,
            best: Layout::Fragments,
            epoch: 0,
            seen: 0,
            samples: Vec::with_capacity(SAMPLES),
            cost: [None, None],
            switches: 0,
            linear_off: false,
        }
    }

    /// The layout the next super-frames go in.
    pub fn layout(&self) -> Layout {
        self.trying
    }

    /// The layout regular epochs use.
    pub fn best(&self) -> Layout {
        self.best
    }

    /// Median nanoseconds per KiB last measured for `l`.
    pub fn cost(&self, l: Layout) -> Option<u32> {
        self.cost[index(l)]
    }

    /// How often the layout in use has changed.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// One send that moved `bytes` of super-frames in `layout` and took `nanos`. Sends
    /// made in a layout other than the epoch's (another thread's, across an epoch's end)
    /// and small ones are not counted.
    pub fn record(&mut self, layout: Layout, nanos: u64, bytes: usize) {
        if layout != self.trying || bytes < MIN_TIMED_BYTES {
            return;
        }
        self.seen += 1;
        if self.seen <= WARMUP {
            return;
        }
        let per_kib = (nanos.saturating_mul(1024) / bytes as u64).min(u64::from(u32::MAX));
        self.samples.push(per_kib as u32);
        if self.samples.len() == SAMPLES {
            self.end_epoch();
        }
    }

    /// The kernel could not allocate a linear head (or dropped the frame): fragments until
    /// the next probe of linear heads; for good if it `refused` the header as invalid.
    pub fn linear_failed(&mut self, refused: bool) {
        self.linear_off |= refused;
        self.cost[index(Layout::Linear)] = Some(u32::MAX);
        if self.trying == Layout::Linear || self.best == Layout::Linear {
            if self.best == Layout::Linear {
                self.switches += 1;
            }
            self.best = Layout::Fragments;
            self.start_epoch(Layout::Fragments);
        }
    }

    fn end_epoch(&mut self) {
        // Medians, not means: a send preempted halfway counts its whole time slice.
        let mid = self.samples.len() / 2;
        let (_, median, _) = self.samples.select_nth_unstable(mid);
        self.cost[index(self.trying)] = Some(*median);
        let before = self.best;
        if let (Some(cur), Some(alt)) = (self.cost[index(before)], self.cost[index(other(before))])
        {
            if u64::from(alt) * 64 < u64::from(cur) * HYSTERESIS_64THS {
                self.best = other(before);
                self.switches += 1;
                tracing::debug!(layout = ?self.best, ns_per_kib = alt, was = cur, "super-frame layout switched");
            }
        }
        self.epoch = self.epoch.wrapping_add(1);
        let probe =
            self.cost[index(other(self.best))].is_none() || self.epoch.is_multiple_of(PROBE_EVERY);
        let next = if probe && !self.linear_off {
            other(self.best)
        } else {
            self.best
        };
        self.start_epoch(next);
    }

    fn start_epoch(&mut self, l: Layout) {
        self.trying = l;
        self.seen = 0;
        self.samples.clear();
    }
}

/// What `FERROCE_GSO_LAYOUT` asks for: `linear` or `frags` fixes the layout; anything else
/// (or nothing) measures.
pub fn fixed_layout() -> Option<Layout> {
    match std::env::var("FERROCE_GSO_LAYOUT").as_deref() {
        Ok("linear") => Some(Layout::Linear),
        Ok("frags") | Ok("fragments") => Some(Layout::Fragments),
        _ => None,
    }
}

/// A [`Chooser`] shared by the threads that send, or a fixed layout.
#[derive(Debug)]
pub struct LayoutChoice {
    fixed: Option<Layout>,
    chooser: Mutex<Chooser>,
}

impl LayoutChoice {
    /// Measures unless `fixed`.
    pub fn new(fixed: Option<Layout>) -> LayoutChoice {
        LayoutChoice {
            fixed,
            chooser: Mutex::new(Chooser::new()),
        }
    }

    /// The layout for the next send.
    pub fn layout(&self) -> Layout {
        match self.fixed {
            Some(Layout::Linear) if self.lock().linear_off => Layout::Fragments,
            Some(l) => l,
            None => self.lock().layout(),
        }
    }

    /// See [`Chooser::record`].
    pub fn record(&self, layout: Layout, nanos: u64, bytes: usize) {
        if self.fixed.is_none() && bytes >= MIN_TIMED_BYTES {
            self.lock().record(layout, nanos, bytes);
        }
    }

    /// See [`Chooser::linear_failed`]. A fixed linear layout turns to fragments for good
    /// when `refused`.
    pub fn linear_failed(&self, refused: bool) {
        match self.fixed {
            None => self.lock().linear_failed(refused),
            Some(Layout::Linear) if refused => {
                tracing::warn!("the kernel refused a linear super-frame (FERROCE_GSO_LAYOUT=linear); sending fragments");
                self.lock().linear_failed(true);
            }
            Some(_) => {}
        }
    }

    /// For `--stats`: the layout regular sends use and why, e.g. `linear (measured: 95
    /// ns/KiB against 130 in fragments; 3 switches)` or `fragments (FERROCE_GSO_LAYOUT)`.
    pub fn describe(&self) -> String {
        let c = self.lock();
        if c.linear_off {
            return "fragments (the kernel refused a linear head)".into();
        }
        if let Some(l) = self.fixed {
            return format!("{} (FERROCE_GSO_LAYOUT)", name(l));
        }
        let best = c.best();
        let other = match best {
            Layout::Linear => Layout::Fragments,
            Layout::Fragments => Layout::Linear,
        };
        match (c.cost(best), c.cost(other)) {
            (Some(a), Some(b)) => format!(
                "{} (measured: {a} ns/KiB against {b} in {}; {} switches)",
                name(best),
                name(other),
                c.switches()
            ),
            _ => format!("{} (not measured yet: too few super-frames)", name(best)),
        }
    }

    /// How often the measured choice changed (`gso_layout_switches`).
    pub fn switches(&self) -> u64 {
        self.lock().switches()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Chooser> {
        // A panic elsewhere while holding it leaves a consistent value: keep using it.
        self.chooser.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one epoch of sends (warm-up included) at `ns_per_kib` in the current layout.
    fn epoch(c: &mut Chooser, ns_per_kib: impl Fn(Layout) -> u64) -> Layout {
        let l = c.layout();
        for _ in 0..WARMUP + SAMPLES {
            c.record(l, ns_per_kib(l) * 64, 64 << 10);
        }
        l
    }

    #[test]
    fn measures_both_then_keeps_the_cheaper_and_probes_the_other() {
        let mut c = Chooser::new();
        let cost = |l| if l == Layout::Linear { 150 } else { 200 };
        assert_eq!(epoch(&mut c, cost), Layout::Fragments);
        assert_eq!(epoch(&mut c, cost), Layout::Linear);
        assert_eq!(c.best(), Layout::Linear);
        assert_eq!(
            (c.cost(Layout::Fragments), c.cost(Layout::Linear)),
            (Some(200), Some(150))
        );
        let used: Vec<Layout> = (0..2 * PROBE_EVERY).map(|_| epoch(&mut c, cost)).collect();
        let probes = used.iter().filter(|&&l| l == Layout::Fragments).count();
        assert_eq!(
            probes, 2,
            "one probe of fragments per {PROBE_EVERY} epochs: {used:?}"
        );
        assert_eq!(c.switches(), 1);
    }

    #[test]
    fn keeps_fragments_when_they_are_cheaper() {
        let mut c = Chooser::new();
        let cost = |l| if l == Layout::Linear { 260 } else { 200 };
        for _ in 0..3 * PROBE_EVERY {
            epoch(&mut c, cost);
        }
        assert_eq!(c.best(), Layout::Fragments);
        assert_eq!(c.switches(), 0);
    }

    #[test]
    fn follows_a_change_of_costs_at_the_next_probe() {
        let mut c = Chooser::new();
        for _ in 0..PROBE_EVERY {
            epoch(&mut c, |l| if l == Layout::Linear { 150 } else { 200 });
        }
        assert_eq!(c.best(), Layout::Linear);
        // Now the processes share CPUs and fragments are recycled hot.
        for _ in 0..2 * PROBE_EVERY {
            epoch(&mut c, |l| if l == Layout::Linear { 180 } else { 90 });
        }
        assert_eq!(c.best(), Layout::Fragments);
        assert_eq!(c.switches(), 2);
    }

    #[test]
    fn a_small_difference_does_not_flip_the_choice() {
        let mut c = Chooser::new();
        for _ in 0..4 * PROBE_EVERY {
            epoch(&mut c, |l| if l == Layout::Linear { 198 } else { 200 });
        }
        assert_eq!(c.best(), Layout::Fragments);
        assert_eq!(c.switches(), 0);
    }

    #[test]
    fn preempted_sends_do_not_decide() {
        let mut c = Chooser::new();
        // Fragments: cheap, but one send in eight is preempted for 3 ms.
        let mut n = 0u64;
        for _ in 0..WARMUP + SAMPLES {
            n += 1;
            let ns = if n.is_multiple_of(8) {
                3_000_000
            } else {
                100 * 64
            };
            c.record(Layout::Fragments, ns, 64 << 10);
        }
        epoch(&mut c, |_| 150);
        assert_eq!(c.cost(Layout::Fragments), Some(100));
        assert_eq!(c.best(), Layout::Fragments);
    }

    #[test]
    fn ignores_small_sends_warm_up_and_other_layouts() {
        let mut c = Chooser::new();
        for _ in 0..10 * SAMPLES {
            c.record(Layout::Fragments, 1, MIN_TIMED_BYTES - 1);
            c.record(Layout::Linear, 1, 64 << 10);
        }
        assert_eq!(c.cost(Layout::Fragments), None);
        assert_eq!(c.cost(Layout::Linear), None);
        for _ in 0..WARMUP {
            c.record(Layout::Fragments, 1, 64 << 10);
        }
        for _ in 0..SAMPLES - 1 {
            c.record(Layout::Fragments, 64 * 300, 64 << 10);
        }
        assert_eq!(
            c.cost(Layout::Fragments),
            None,
            "an epoch is not over early"
        );
        c.record(Layout::Fragments, 64 * 300, 64 << 10);
        assert_eq!(
            c.cost(Layout::Fragments),
            Some(300),
            "warm-up sends left out"
        );
        assert_eq!(c.layout(), Layout::Linear);
    }

    #[test]
    fn a_failed_linear_head_goes_back_to_fragments_until_the_next_probe() {
        let mut c = Chooser::new();
        let cost = |l| if l == Layout::Linear { 150 } else { 200 };
        epoch(&mut c, cost);
        epoch(&mut c, cost);
        assert_eq!(c.layout(), Layout::Linear);
        c.linear_failed(false);
        assert_eq!(c.layout(), Layout::Fragments);
        let mut used = Vec::new();
        for _ in 0..PROBE_EVERY {
            used.push(epoch(&mut c, cost));
        }
        assert!(
            used.contains(&Layout::Linear),
            "linear probed again: {used:?}"
        );
        assert_eq!(
            c.best(),
            Layout::Linear,
            "and taken back when it works: {used:?}"
        );
    }

    #[test]
    fn a_refused_linear_head_is_never_tried_again() {
        let mut c = Chooser::new();
        let cost = |l| if l == Layout::Linear { 150 } else { 200 };
        epoch(&mut c, cost);
        assert_eq!(c.layout(), Layout::Linear);
        c.linear_failed(true);
        for _ in 0..3 * PROBE_EVERY {
            assert_eq!(epoch(&mut c, cost), Layout::Fragments);
        }
        let f = LayoutChoice::new(Some(Layout::Linear));
        f.linear_failed(false);
        assert_eq!(
            f.layout(),
            Layout::Linear,
            "fixed: a full queue changes nothing"
        );
        f.linear_failed(true);
        assert_eq!(f.layout(), Layout::Fragments);
    }

    #[test]
    fn huge_or_zero_times_do_not_overflow() {
        let mut c = Chooser::new();
        for _ in 0..WARMUP + SAMPLES {
            c.record(Layout::Fragments, u64::MAX, MIN_TIMED_BYTES);
        }
        assert_eq!(c.cost(Layout::Fragments), Some(u32::MAX));
        for _ in 0..WARMUP + SAMPLES {
            c.record(Layout::Linear, 0, usize::MAX);
        }
        assert_eq!(c.cost(Layout::Linear), Some(0));
        assert_eq!(c.best(), Layout::Linear);
    }

    #[test]
    fn a_fixed_layout_is_not_measured() {
        let f = LayoutChoice::new(Some(Layout::Linear));
        for _ in 0..10 * SAMPLES {
            f.record(Layout::Linear, 1, 64 << 10);
        }
        assert_eq!(f.layout(), Layout::Linear);
        assert_eq!(f.switches(), 0);
        assert_eq!(f.lock().cost(Layout::Linear), None);
        assert_eq!(f.describe(), "linear (FERROCE_GSO_LAYOUT)");
        f.linear_failed(true);
        assert_eq!(f.describe(), "fragments (the kernel refused a linear head)");
    }

    #[test]
    fn the_description_gives_both_costs_once_measured() {
        let f = LayoutChoice::new(None);
        assert_eq!(
            f.describe(),
            "fragments (not measured yet: too few super-frames)"
        );
        // Fragments cost 2 ns per byte, linear heads 1: one epoch each, then linear wins.
        for _ in 0..4 {
            let l = f.layout();
            let nanos = if l == Layout::Linear {
                64 << 10
            } else {
                128 << 10
            };
            for _ in 0..WARMUP + SAMPLES {
                f.record(l, nanos, 64 << 10);
            }
        }
        assert_eq!(f.layout(), Layout::Linear);
        assert_eq!(
            f.describe(),
            "linear (measured: 1024 ns/KiB against 2048 in fragments; 1 switches)"
        );
    }
}

//! Virtual time: the engine never reads a clock, the caller passes `now` in.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary origin chosen by the caller.
///
/// The engine only compares instants and adds durations to them, so any monotonic
/// source works (a simulated clock in tests, `std::time::Instant` offsets in the app).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ns` nanoseconds after the origin.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates instead of overflowing, so "infinitely far" timers stay representable.
    fn add(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_and_sub_is_non_negative() {
        let t = Instant::from_nanos(5) + Duration::from_micros(1);
        assert_eq!(t.as_nanos(), 1005);
        assert_eq!(t - Instant::from_nanos(5), Duration::from_nanos(1000));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!((t + Duration::MAX).as_nanos(), u64::MAX);
    }
}

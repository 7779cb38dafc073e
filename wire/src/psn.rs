//! 24-bit packet sequence numbers with wrapping arithmetic.
//!
//! PSNs live on a circle of 2^24 values; "before" and "after" are defined within half the
//! circle, as rxe's `psn_compare` does.

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs.
    pub const MODULUS: u32 = 1 << 24;
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = Self::MODULUS - 1;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping at 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// Signed distance from `other` to `self`, in `-2^23..2^23`: positive when `self` is after.
    pub const fn distance(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Order on the circle: `Less` when `self` comes before `other`.
    pub fn cmp_wrapping(self, other: Psn) -> Ordering {
        self.distance(other).cmp(&0)
    }

    /// True when `self` comes strictly before `other`.
    pub fn before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }

    /// True when `self` comes strictly after `other`.
    pub fn after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_2_pow_24() {
        let top = Psn::new(Psn::MASK);
        assert_eq!(top.add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), top);
        assert_eq!(Psn::new(0x1ff_ffff), top, "bits above 24 are dropped");
    }

    #[test]
    fn distance_and_order_across_the_wrap() {
        let a = Psn::new(Psn::MASK - 2);
        let b = Psn::new(3);
        assert_eq!(b.distance(a), 6);
        assert_eq!(a.distance(b), -6);
        assert!(a.before(b));
        assert!(b.after(a));
        assert_eq!(a.cmp_wrapping(a), Ordering::Equal);
        // Half the circle away is the most negative distance.
        assert_eq!(Psn::new(1 << 23).distance(Psn::new(0)), -(1 << 23));
    }
}

//! Initial PSNs from the OS's cryptographic random source.
//!
//! RoCE v2 has no authentication: a blind spoofer that can guess where a connection's
//! sequence starts can inject packets the receiver accepts. Time- or seed-derived values
//! are guessable; these are not.

use std::io;

/// A uniformly random 24-bit packet sequence number.
pub fn random_psn() -> io::Result<u32> {
    getrandom::u32()
        .map(|v| v & 0xff_ffff)
        .map_err(|e| io::Error::other(format!("no random numbers from the OS: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psns_are_24_bits_and_not_repeated() {
        let v: Vec<u32> = (0..64).map(|_| random_psn().unwrap()).collect();
        assert!(v.iter().all(|p| *p <= 0xff_ffff));
        let distinct: std::collections::BTreeSet<_> = v.iter().collect();
        // 64 draws from 2^24 values collide with probability ~1e-4; allow one.
        assert!(distinct.len() >= 63, "{v:?}");
    }
}

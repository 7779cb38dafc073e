//! The endpoint's source of unpredictable numbers: memory keys, default iovas and QP
//! numbers come from it.
//!
//! RoCE v2 has no authentication: whoever can put a frame on the fabric with the right
//! QP number, PSN, R_Key and address writes memory. Drawing those from a cryptographic
//! source is what keeps a blind (off-path) attacker from guessing them. The transport
//! does no I/O, so the source is injected: the library passes the OS's CSPRNG, the
//! simulator a seeded generator so runs stay reproducible.

/// Fills a buffer with random bytes. A device facing a network must pass a
/// cryptographic source (the OS's, e.g. `getrandom`).
pub type FillRandom = Box<dyn FnMut(&mut [u8]) + Send>;

/// A random source owned by one endpoint.
pub(crate) struct Random {
    fill: FillRandom,
}

impl core::fmt::Debug for Random {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Random")
    }
}

impl Random {
    pub(crate) fn new(fill: FillRandom) -> Random {
        Random { fill }
    }

    /// A deterministic generator (SplitMix64) for tests: NOT unpredictable.
    #[cfg(test)]
    pub(crate) fn seeded(seed: u64) -> Random {
        Random::new(seeded_fill(seed))
    }

    pub(crate) fn u32(&mut self) -> u32 {
        let mut b = [0; 4];
        (self.fill)(&mut b);
        u32::from_le_bytes(b)
    }

    pub(crate) fn u64(&mut self) -> u64 {
        let mut b = [0; 8];
        (self.fill)(&mut b);
        u64::from_le_bytes(b)
    }
}

/// A deterministic fill function (SplitMix64 from `seed`), for simulations and tests
/// that must replay exactly. Predictable: never use it for a device on a network.
pub fn seeded_fill(seed: u64) -> FillRandom {
    let mut state = seed;
    Box::new(move |buf: &mut [u8]| {
        for chunk in buf.chunks_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_is_reproducible_and_seed_dependent() {
        let (mut a, mut b, mut c) = (Random::seeded(1), Random::seeded(1), Random::seeded(2));
        let x: Vec<u64> = (0..4).map(|_| a.u64()).collect();
        let y: Vec<u64> = (0..4).map(|_| b.u64()).collect();
        let z: Vec<u64> = (0..4).map(|_| c.u64()).collect();
        assert_eq!(x, y);
        assert_ne!(x, z);
    }
}

//! Which QP numbers an endpoint may hand out.
//!
//! Alone on an interface, an endpoint draws QP numbers from the whole 24-bit space. When
//! several processes share an interface, each owns *blocks* of [`QPN_BLOCK_SIZE`]
//! consecutive numbers (claimed from the host by the layer above), so the kernel can send
//! each frame to the one process whose block holds its destination QP with a short
//! socket filter. Within its blocks an endpoint still picks numbers at random.

use std::collections::BTreeMap;

use crate::mcast::MULTICAST_QPN;
use crate::random::Random;

/// Bits of a QP number below its block: a block is `block << QPN_BLOCK_BITS ..` the next.
pub const QPN_BLOCK_BITS: u32 = 8;
/// QP numbers per block.
pub const QPN_BLOCK_SIZE: u32 = 1 << QPN_BLOCK_BITS;
/// Blocks in the 24-bit QP number space (block 0 holds the special QPs 0 and 1 and is
/// never handed out).
pub const QPN_BLOCKS: u32 = 1 << (24 - QPN_BLOCK_BITS);

/// The block a QP number belongs to.
pub fn qpn_block(qpn: u32) -> u16 {
    ((qpn & 0xff_ffff) >> QPN_BLOCK_BITS) as u16
}

/// The QP numbers an endpoint may use.
#[derive(Debug, Clone, Default)]
pub(crate) enum QpnSpace {
    /// Any number from `FIRST_QPN` up.
    #[default]
    Any,
    /// Only numbers in these blocks.
    Blocks(Vec<u16>),
}

impl QpnSpace {
    /// A free QP number (not a key of `live`), or `None` when the space is full.
    pub(crate) fn alloc<V>(
        &self,
        random: &mut Random,
        live: &BTreeMap<u32, V>,
        first: u32,
    ) -> Option<u32> {
        // 0xffffff is the multicast QP every group's packets name: no QP's own.
        let usable = |q: u32| q >= first && q < MULTICAST_QPN && !live.contains_key(&q);
        match self {
            QpnSpace::Any => (0..64)
                .map(|_| random.u32() & 0xff_ffff)
                .find(|q| usable(*q)),
            QpnSpace::Blocks(blocks) if blocks.is_empty() => None,
            QpnSpace::Blocks(blocks) => {
                // Random guesses first (numbers stay unpredictable), then a full sweep
                // so that a nearly full block still yields its last free numbers.
                let pick = |r: u32| {
                    let b = blocks[(r >> 16) as usize % blocks.len()];
                    (u32::from(b) << QPN_BLOCK_BITS) | (r & (QPN_BLOCK_SIZE - 1))
                };
                if let Some(q) = (0..16).map(|_| pick(random.u32())).find(|q| usable(*q)) {
                    return Some(q);
                }
                let start = random.u32() & (QPN_BLOCK_SIZE - 1);
                blocks.iter().find_map(|b| {
                    (0..QPN_BLOCK_SIZE)
                        .map(|i| {
                            (u32::from(*b) << QPN_BLOCK_BITS) | ((start + i) & (QPN_BLOCK_SIZE - 1))
                        })
                        .find(|q| usable(*q))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_confine_and_fill_completely() {
        let mut random = Random::seeded(7);
        let space = QpnSpace::Blocks(vec![0x1234, 0x0042]);
        let mut live = BTreeMap::new();
        for _ in 0..2 * QPN_BLOCK_SIZE {
            let q = space.alloc(&mut random, &live, 2).expect("room left");
            assert!(matches!(qpn_block(q), 0x1234 | 0x0042), "{q:#x}");
            assert!(live.insert(q, ()).is_none(), "{q:#x} handed out twice");
        }
        assert_eq!(
            space.alloc(&mut random, &live, 2),
            None,
            "both blocks are full"
        );
        live.remove(&0x4217);
        assert_eq!(space.alloc(&mut random, &live, 2), Some(0x4217));
    }

    #[test]
    fn the_multicast_qp_number_is_never_handed_out() {
        let mut random = Random::seeded(5);
        let mut live = BTreeMap::new();
        let space = QpnSpace::Blocks(vec![0xffff]);
        while let Some(q) = space.alloc(&mut random, &live, 2) {
            live.insert(q, ());
        }
        assert_eq!(live.len(), QPN_BLOCK_SIZE as usize - 1);
        assert!(!live.contains_key(&MULTICAST_QPN));
    }

    #[test]
    fn no_blocks_means_no_numbers_and_any_means_any() {
        let mut random = Random::seeded(1);
        let live: BTreeMap<u32, ()> = BTreeMap::new();
        assert_eq!(QpnSpace::Blocks(vec![]).alloc(&mut random, &live, 2), None);
        let q = QpnSpace::Any.alloc(&mut random, &live, 2).unwrap();
        assert!((2..0xff_ffff).contains(&q));
    }

    #[test]
    fn block_zero_keeps_the_special_qps() {
        let mut random = Random::seeded(3);
        let mut live = BTreeMap::new();
        let space = QpnSpace::Blocks(vec![0]);
        while let Some(q) = space.alloc(&mut random, &live, 2) {
            assert!(q >= 2);
            live.insert(q, ());
        }
        assert_eq!(live.len(), QPN_BLOCK_SIZE as usize - 2);
    }
}

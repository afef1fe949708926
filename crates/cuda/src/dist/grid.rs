//! The 2-D layout: `R` rings of `P` ranks side by side on `W = R x P` GPUs, data-parallel
//! across rings. Pure arithmetic, tested on the host.
//!
//! Global rank `g` is position `g % P` of ring `g / P`, so a ring is `P` consecutive
//! ranks (on one host these are neighbouring GPUs, which keeps the ring's hops on the
//! fastest links). Ring `i` handles rows `batch_rows(B)[i]` of the batch: the batch is
//! split as evenly as possible, the first `B mod R` rings taking one row more. Inside a
//! ring the ordinary ring attention runs on a sub-communicator
//! ([`Communicator::split`](super::Communicator::split) with `color = ring`,
//! `key = position`). `R = 1` is the plain ring; `P = 1` is pure data parallelism (every
//! GPU its own one-rank ring).

use super::error::{DistError, DistResult};
use std::ops::Range;

/// `rings` rings of `ring_size` ranks each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    rings: usize,
    ring_size: usize,
}

impl Grid {
    /// `world` ranks as `rings` rings; errors name both when they do not fit.
    pub fn new(world: usize, rings: usize) -> DistResult<Self> {
        let bad = |reason| Err(DistError::BadGrid { world, rings, reason });
        if rings == 0 {
            return bad("at least one ring");
        }
        if world == 0 {
            return bad("at least one rank");
        }
        if world % rings != 0 {
            return bad("the world size must be a multiple of the number of rings");
        }
        Ok(Grid { rings, ring_size: world / rings })
    }

    pub fn rings(&self) -> usize {
        self.rings
    }

    /// `P`, the ranks of one ring.
    pub fn ring_size(&self) -> usize {
        self.ring_size
    }

    pub fn world(&self) -> usize {
        self.rings * self.ring_size
    }

    /// `(ring, position)` of global rank `g`.
    pub fn place(&self, g: usize) -> DistResult<(usize, usize)> {
        if g >= self.world() {
            return Err(DistError::BadRank { rank: g, world: self.world() });
        }
        Ok((g / self.ring_size, g % self.ring_size))
    }

    /// The global rank at `position` of `ring` (the inverse of [`Grid::place`]).
    pub fn global(&self, ring: usize, position: usize) -> usize {
        ring * self.ring_size + position
    }

    /// The batch rows of every ring, in ring order: consecutive, as even as possible.
    /// Errors when a ring would get none (`batch < rings`).
    pub fn batch_rows(&self, batch: usize) -> DistResult<Vec<Range<usize>>> {
        if batch < self.rings {
            return Err(DistError::EmptyRing { batch, rings: self.rings });
        }
        let (base, extra) = (batch / self.rings, batch % self.rings);
        let mut start = 0;
        Ok((0..self.rings)
            .map(|i| {
                let rows = base + usize::from(i < extra);
                start += rows;
                start - rows..start
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uneven_batch_gives_the_first_rings_one_more_row() {
        let g = Grid::new(6, 3).unwrap();
        assert_eq!(g.ring_size(), 2);
        assert_eq!(g.batch_rows(7).unwrap(), vec![0..3, 3..5, 5..7]);
        assert_eq!(g.batch_rows(3).unwrap(), vec![0..1, 1..2, 2..3]);
        assert_eq!(
            (0..6).map(|r| g.place(r).unwrap()).collect::<Vec<_>>(),
            [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
        );
        for r in 0..6 {
            let (ring, pos) = g.place(r).unwrap();
            assert_eq!(g.global(ring, pos), r);
        }
    }

    #[test]
    fn one_ring_is_the_plain_ring() {
        let g = Grid::new(4, 1).unwrap();
        assert_eq!((g.rings(), g.ring_size(), g.world()), (1, 4, 4));
        assert_eq!(g.place(3).unwrap(), (0, 3));
        assert_eq!(g.batch_rows(2).unwrap(), vec![0..2]);
    }

    #[test]
    fn rings_of_one_rank_are_pure_data_parallelism() {
        let g = Grid::new(4, 4).unwrap();
        assert_eq!(g.ring_size(), 1);
        assert_eq!((0..4).map(|r| g.place(r).unwrap()).collect::<Vec<_>>(), [(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(g.batch_rows(5).unwrap(), vec![0..2, 2..3, 3..4, 4..5]);
    }

    #[test]
    fn bad_grids_and_batches_are_typed_errors_naming_the_values() {
        assert!(matches!(Grid::new(4, 0), Err(DistError::BadGrid { world: 4, rings: 0, .. })));
        assert!(matches!(Grid::new(0, 1), Err(DistError::BadGrid { world: 0, rings: 1, .. })));
        let e = Grid::new(6, 4).unwrap_err();
        assert!(matches!(e, DistError::BadGrid { world: 6, rings: 4, .. }), "{e}");
        assert!(e.to_string().contains("6 ranks") && e.to_string().contains("4 rings"), "{e}");
        let g = Grid::new(4, 2).unwrap();
        let e = g.batch_rows(1).unwrap_err();
        assert!(matches!(e, DistError::EmptyRing { batch: 1, rings: 2 }), "{e}");
        assert!(e.to_string().contains("batch 1") && e.to_string().contains("2 rings"), "{e}");
        assert!(matches!(g.place(4), Err(DistError::BadRank { rank: 4, world: 4 })));
    }
}

//! Query heads and K/V heads: grouped-query (GQA) and multi-query (MQA) attention.
//!
//! `H` query heads share `H_kv` K/V heads, `H_kv | H`: the `g = H / H_kv` consecutive
//! query heads `j g .. (j + 1) g` form group `j` and all read K/V head `j`,
//!
//! ```text
//!   kv(h) = h / g = floor(h H_kv / H)
//! ```
//!
//! (the grouping of flash-attention and of PyTorch's `repeat_interleave(k, g, dim=heads)`).
//! Multi-head attention is `H_kv = H` (`g = 1`), multi-query attention `H_kv = 1`.
//! Patterns stay functions of the *query* head `h` of `H`: a dilated branch's offset is
//! `o(h)` as without grouping, and the rows it selects are read from K/V head `kv(h)`.
//! `docs/semantics.md`, section 15, states the rule and its gradients.

use crate::error::{Error, Result};
use std::ops::Range;

/// `H` query heads over `H_kv` K/V heads, with `H_kv` dividing `H`. Built by
/// [`Heads::new`] (checked) or from a plain head count (multi-head attention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Heads {
    query: usize,
    kv: usize,
}

impl Heads {
    /// `query` query heads over `kv` K/V heads: both at least 1 ([`Error::ZeroDim`] of
    /// `q` or `k`), and `kv` dividing `query` ([`Error::KvHeads`]).
    pub fn new(query: usize, kv: usize) -> Result<Self> {
        if query == 0 {
            return Err(Error::ZeroDim { tensor: "q", dim: "heads" });
        }
        if kv == 0 {
            return Err(Error::ZeroDim { tensor: "k", dim: "heads" });
        }
        if query % kv != 0 {
            return Err(Error::KvHeads { heads: query, kv_heads: kv });
        }
        Ok(Heads { query, kv })
    }

    /// Multi-head attention: every query head has its own K/V head.
    pub fn mha(heads: usize) -> Self {
        Heads { query: heads, kv: heads }
    }

    /// `H`, the number of query heads (of `Q`, `Out`, `dOut`, `dQ` and the LSE).
    pub fn query(self) -> usize {
        self.query
    }

    /// `H_kv`, the number of K/V heads (of `K`, `V`, `dK`, `dV`).
    pub fn kv(self) -> usize {
        self.kv
    }

    /// `g = H / H_kv`, the query heads per K/V head (1 for the degenerate `Heads::mha(0)`).
    pub fn group(self) -> usize {
        (self.query / self.kv.max(1)).max(1)
    }

    /// The K/V head that query head `h` reads.
    pub fn kv_of(self, h: usize) -> usize {
        h / self.group()
    }

    /// The K/V heads that the query heads `heads` read: `start/g .. ceil(end/g)`, a
    /// range since groups are consecutive (empty for no query head).
    pub fn kv_range(self, heads: &Range<usize>) -> Range<usize> {
        if heads.is_empty() {
            return 0..0;
        }
        let g = self.group();
        heads.start / g..heads.end.div_ceil(g)
    }

    /// Whether a computation over the query heads `heads` (with K/V heads
    /// [`Heads::kv_range`]) is grouped-query attention of its own: it covers whole
    /// groups (its local group size is `g`), or lies inside one group (it reads one K/V
    /// head). A range that cuts a group and crosses into the next has no uniform
    /// local grouping, so single-device attention on it would pair heads wrongly.
    pub fn runs_alone(self, heads: &Range<usize>) -> bool {
        let g = self.group();
        (heads.start % g == 0 && heads.end % g == 0) || self.kv_range(heads).len() <= 1
    }

    /// `heads` cut at group boundaries into pieces that each [run alone](Heads::runs_alone):
    /// the part of a first, cut group, the whole groups, the part of a last, cut group
    /// (empty pieces left out). One piece for a range of whole groups or inside one group.
    pub fn pieces(self, heads: &Range<usize>) -> Vec<Range<usize>> {
        if self.runs_alone(heads) {
            return if heads.is_empty() { Vec::new() } else { vec![heads.clone()] };
        }
        let g = self.group();
        let (first_whole, last_whole) = (heads.start.div_ceil(g) * g, heads.end / g * g);
        [heads.start..first_whole, first_whole..last_whole, last_whole..heads.end]
            .into_iter()
            .filter(|r| !r.is_empty())
            .collect()
    }
}

impl From<usize> for Heads {
    /// Multi-head attention over `heads` heads.
    fn from(heads: usize) -> Self {
        Heads::mha(heads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_counts_and_divisibility() {
        assert_eq!(Heads::new(0, 1), Err(Error::ZeroDim { tensor: "q", dim: "heads" }));
        assert_eq!(Heads::new(4, 0), Err(Error::ZeroDim { tensor: "k", dim: "heads" }));
        assert_eq!(Heads::new(6, 4), Err(Error::KvHeads { heads: 6, kv_heads: 4 }));
        assert_eq!(Heads::new(6, 3).unwrap().group(), 2);
        assert_eq!(Heads::from(5), Heads::new(5, 5).unwrap());
    }

    /// Query heads 0..8 over 2 K/V heads: 0..4 read head 0, 4..8 head 1.
    #[test]
    fn ranges_and_pieces_follow_the_groups() {
        let h = Heads::new(8, 2).unwrap();
        assert_eq!((0..8).map(|q| h.kv_of(q)).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(h.kv_range(&(3..5)), 0..2);
        assert_eq!(h.kv_range(&(4..8)), 1..2);
        assert_eq!(h.kv_range(&(2..2)), 0..0);
        assert!(h.runs_alone(&(0..8)) && h.runs_alone(&(1..3)) && h.runs_alone(&(4..8)));
        assert!(!h.runs_alone(&(3..5)) && !h.runs_alone(&(0..5)));
        assert_eq!(h.pieces(&(3..5)), [3..4, 4..5]);
        assert_eq!(h.pieces(&(1..8)), [1..4, 4..8]);
        let all = 0..8;
        assert_eq!(h.pieces(&all), std::slice::from_ref(&all));
        let wide = Heads::new(12, 6).unwrap();
        assert_eq!(wide.pieces(&(1..9)), [1..2, 2..8, 8..9]);
        let middle = 1..4;
        assert_eq!(Heads::mha(5).pieces(&middle), std::slice::from_ref(&middle));
    }
}

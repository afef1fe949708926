//! Chunk plans: which tokens each of `P` ranks owns.
//!
//! Every layout is the same two things: a token **order** (a permutation of `0..N`) and
//! `P + 1` **boundaries** `0 = b_0 <= b_1 <= ... <= b_P = N`; rank `r` owns the tokens
//! `order[b_r..b_{r+1}]`. Tokens keep their global index wherever they go, so masks and
//! dilation offsets are always computed from global positions, never from local rows.
//!
//! * [`Layout::Contiguous`]: identity order, even split (the first `N mod P` ranks get
//!   `ceil(N/P)` tokens, the others `floor(N/P)`).
//! * [`Layout::Zigzag`]: cut `0..N` evenly into `2P` chunks `c_0..c_{2P-1}`; rank `i` owns
//!   `c_i` and `c_{2P-1-i}`. Under a causal mask rank `i`'s work is
//!   `~ |c_i| (i + 1/2) + |c_{2P-1-i}| (2P - i - 1/2)`, the same for every rank.
//! * [`Layout::Striped`]: token `t` lives on rank `t mod P` (Striped Attention).
//! * [`Layout::Boundaries`]: identity order with any boundaries (unequal, a rank may own
//!   nothing).
//! * [`Layout::Permuted`]: any user order (a Hilbert curve over a 2-D grid, say) with
//!   given or even boundaries; outputs still come back in the original token order.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// How to lay a sequence out over ranks. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    Contiguous,
    Zigzag,
    Striped,
    Boundaries(Vec<usize>),
    Permuted { order: Vec<usize>, boundaries: Option<Vec<usize>> },
}

/// A validated split of `0..seq_len` over `boundaries.len() - 1` ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkPlan {
    pub seq_len: usize,
    /// `order[i]` is the global token at layout position `i`.
    pub order: Vec<usize>,
    /// Rank `r` owns `order[boundaries[r]..boundaries[r + 1]]`.
    pub boundaries: Vec<usize>,
}

/// Where each global token lives: `rank[t]` owns token `t`, at local row `local[t]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMap {
    pub rank: Vec<usize>,
    pub local: Vec<usize>,
}

/// `parts + 1` boundaries splitting `n` items as evenly as possible, larger parts first.
pub fn even_boundaries(n: usize, parts: usize) -> Vec<usize> {
    let (base, extra) = (n / parts.max(1), n % parts.max(1));
    (0..=parts).map(|p| p * base + p.min(extra)).collect()
}

impl ChunkPlan {
    /// The plan of `layout` for `seq_len` tokens over `ranks` ranks.
    pub fn new(seq_len: usize, ranks: usize, layout: &Layout) -> Result<Self> {
        if ranks == 0 {
            return Err(Error::ZeroRanks);
        }
        let identity: Vec<usize> = (0..seq_len).collect();
        match layout {
            Layout::Contiguous => Self::from_parts(seq_len, identity, even_boundaries(seq_len, ranks)),
            Layout::Boundaries(b) => Self::checked(seq_len, ranks, identity, b.clone()),
            Layout::Permuted { order, boundaries } => {
                let b = boundaries.clone().unwrap_or_else(|| even_boundaries(seq_len, ranks));
                Self::checked(seq_len, ranks, order.clone(), b)
            }
            Layout::Zigzag => {
                let c = even_boundaries(seq_len, 2 * ranks);
                let mut order = Vec::with_capacity(seq_len);
                let mut boundaries = vec![0];
                for i in 0..ranks {
                    let j = 2 * ranks - 1 - i;
                    order.extend(c[i]..c[i + 1]);
                    order.extend(c[j]..c[j + 1]);
                    boundaries.push(order.len());
                }
                Self::from_parts(seq_len, order, boundaries)
            }
            Layout::Striped => {
                let mut order = Vec::with_capacity(seq_len);
                let mut boundaries = vec![0];
                for r in 0..ranks {
                    order.extend((r..seq_len).step_by(ranks));
                    boundaries.push(order.len());
                }
                Self::from_parts(seq_len, order, boundaries)
            }
        }
    }

    /// Like [`ChunkPlan::from_parts`], and the boundaries must be for `ranks` ranks.
    fn checked(seq_len: usize, ranks: usize, order: Vec<usize>, boundaries: Vec<usize>) -> Result<Self> {
        if boundaries.len() != ranks + 1 {
            return Err(Error::BadBoundaries { boundaries, ranks, seq_len });
        }
        Self::from_parts(seq_len, order, boundaries)
    }

    /// A plan from an order and boundaries, validated: the order must be a permutation
    /// of `0..seq_len` and the boundaries `P + 1 >= 2` non-decreasing values from 0 to
    /// `seq_len`.
    pub fn from_parts(seq_len: usize, order: Vec<usize>, boundaries: Vec<usize>) -> Result<Self> {
        let plan = ChunkPlan { seq_len, order, boundaries };
        plan.validate()?;
        Ok(plan)
    }

    /// Check a plan built by hand or read back from JSON.
    pub fn validate(&self) -> Result<()> {
        let (n, b) = (self.seq_len, &self.boundaries);
        if b.len() < 2 {
            return Err(if b.len() == 1 {
                Error::ZeroRanks
            } else {
                Error::BadBoundaries { boundaries: b.clone(), ranks: 0, seq_len: n }
            });
        }
        if b[0] != 0 || b[b.len() - 1] != n || b.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::BadBoundaries { boundaries: b.clone(), ranks: b.len() - 1, seq_len: n });
        }
        if self.order.len() != n {
            return Err(Error::NotAPermutation { len: self.order.len(), seq_len: n, token: None });
        }
        let mut seen = vec![false; n];
        for &t in &self.order {
            if t >= n || std::mem::replace(&mut seen[t], true) {
                return Err(Error::NotAPermutation { len: n, seq_len: n, token: Some(t) });
            }
        }
        Ok(())
    }

    pub fn ranks(&self) -> usize {
        self.boundaries.len() - 1
    }

    /// The plan whose ranks are groups of `size` consecutive ranks of this one: group
    /// `g` owns the tokens of ranks `g size .. (g + 1) size`, in their local orders one
    /// after the other (the groups of the Ulysses x ring hybrid, [`super::hybrid()`]).
    /// Errors: `size` 0 or not dividing the ranks ([`Error::UlyssesDegree`]).
    pub fn grouped(&self, size: usize) -> Result<ChunkPlan> {
        let p = self.ranks();
        if size == 0 || p % size != 0 {
            return Err(Error::UlyssesDegree { ulysses: size, ranks: p });
        }
        ChunkPlan::from_parts(self.seq_len, self.order.clone(), self.boundaries.iter().step_by(size).copied().collect())
    }

    /// The global tokens of `rank`, in its local row order.
    pub fn tokens(&self, rank: usize) -> &[usize] {
        &self.order[self.boundaries[rank]..self.boundaries[rank + 1]]
    }

    /// The most tokens any rank owns (the `N/P` of the memory bounds).
    pub fn max_tokens(&self) -> usize {
        (0..self.ranks()).map(|r| self.tokens(r).len()).max().unwrap_or(0)
    }

    /// The global-to-local map, the inverse of [`ChunkPlan::tokens`].
    pub fn token_map(&self) -> TokenMap {
        let mut map = TokenMap { rank: vec![0; self.seq_len], local: vec![0; self.seq_len] };
        for r in 0..self.ranks() {
            for (local, &t) in self.tokens(r).iter().enumerate() {
                map.rank[t] = r;
                map.local[t] = local;
            }
        }
        map
    }
}

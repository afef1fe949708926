//! Tile classification: is a block of (query, key) pairs of a mask empty, full or
//! partial? The GPU visits only non-empty tiles and skips the per-element test on full
//! ones (issue 21), so both claims must be true statements:
//!
//! * [`TileClass::Empty`]: the mask is false for every pair of the tile;
//! * [`TileClass::Full`]: the mask is true for every pair;
//! * [`TileClass::Partial`]: otherwise, or undecided within the budget (always a safe
//!   answer: the kernel then tests every element).
//!
//! **How.** The tile is a box of [`super::interval`]: `q` and `k` range over the tile's
//! rows, the other variables are fixed. One interval evaluation decides the tile when
//! the enclosure is `Always` or `Never`. Otherwise the box is split in two along its
//! longer side and the halves are classified the same way, depth first (a mixed tile
//! shows a true and a false sub-box after about two evaluations per level of the
//! descent, since a decided sibling costs one evaluation); an undecided box of at most [`ENUMERATE_PAIRS`] pairs is evaluated
//! pair by pair with the evaluator itself instead of being split. The search stops as soon as it has seen a true and a
//! false pair (the tile is mixed: `Partial`, exactly), or when the budget of
//! evaluations is spent (`Partial`, undecided).
//!
//! **Exactness.** The boxes form a binary tree whose leaves are disjoint and non-empty,
//! so there are at most `P` leaves and `2P - 1` boxes for a tile of `P` pairs, each
//! costing one interval evaluation, plus at most `P` pointwise evaluations in the
//! enumerated leaves: with a budget of [`exact_budget`] (`3P`) the search always
//! finishes, and the answer is exact for *every* expression (interval soundness makes
//! the decided boxes right; the enumerated ones are the evaluator). What the
//! interval arithmetic buys is speed: for these masks one evaluation decides every
//! tile that is not mixed, because each side of the test is the exact image of the
//! tile (`super::interval`, "Precision"):
//!
//! * causal `k <= q`: `Always` iff `k1 <= q0`, `Never` iff `k0 > q1`;
//! * windows `abs(q - k) <= w`: `q - k` takes every value of `[q0 - k1, q1 - k0]`, and
//!   `abs` of a range is the exact range of absolute values;
//! * documents / block-diagonal `q / B == k / B` (B > 0): the quotients take every value
//!   of `[q0/B, q1/B]` and `[k0/B, k1/B]`; equal single values give `Always`, disjoint
//!   ranges `Never`, and overlapping ones a common value (a true pair) and, one range
//!   being wider than a point, a different one (a false pair);
//! * global tokens `k < g || q < g`: each side is decided exactly and they share no
//!   variable, so the `||` is `Always` iff one side is, `Never` iff both are.
//!
//! LongNet-like dilations `(q % w) % r == o && (k % w) % r == o && q / w == k / w` are
//! not decided by one evaluation (the residues of a range straddling a multiple of `r`
//! enclose as all of `[0, r - 1]`), but the search resolves them within a few hundred
//! evaluations of a 64 x 64 tile; the tests check that they are exact with
//! [`SMALL_BUDGET`].

use super::ast::{Node, Var};
use super::eval::{Env, eval};
use super::interval::{Interval, Ranges, Truth, enclose};
use crate::error::{Error, Result};
use std::ops::Range;

/// Undecided boxes of at most this many pairs are evaluated pair by pair (cheaper than
/// splitting them further with interval evaluations).
pub const ENUMERATE_PAIRS: usize = 8;

/// A budget that decides the common masks of the module docs, dilations included,
/// on 64 x 64 tiles.
pub const SMALL_BUDGET: usize = 512;

/// The budget with which a tile of `pairs` pairs is always classified exactly.
pub fn exact_budget(pairs: usize) -> usize {
    3 * pairs
}

/// What a mask does on a tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TileClass {
    /// No pair of the tile is allowed.
    Empty,
    /// Some pairs may be allowed and some not: the kernel tests each element.
    Partial,
    /// Every pair of the tile is allowed.
    Full,
}

/// A block of query rows and key rows (half-open ranges of positions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tile {
    queries: Range<usize>,
    keys: Range<usize>,
    seq_len: usize,
}

impl Tile {
    /// The tile `queries x keys` of a sequence of `seq_len` positions: both ranges must
    /// be non-empty and end at or before `seq_len` ([`Error::BadTile`] names the range).
    pub fn new(queries: Range<usize>, keys: Range<usize>, seq_len: usize) -> Result<Tile> {
        for (axis, range) in [("query", &queries), ("key", &keys)] {
            if range.start >= range.end || range.end > seq_len {
                return Err(Error::BadTile { axis, start: range.start, end: range.end, seq_len });
            }
        }
        Ok(Tile { queries, keys, seq_len })
    }

    pub fn queries(&self) -> Range<usize> {
        self.queries.clone()
    }

    pub fn keys(&self) -> Range<usize> {
        self.keys.clone()
    }

    /// The sequence length `n` the tile lies in.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The number of (query, key) pairs.
    pub fn pairs(&self) -> usize {
        self.queries.len() * self.keys.len()
    }
}

/// A box of the search: inclusive query and key bounds.
#[derive(Debug, Clone, Copy)]
struct Block {
    q: (i64, i64),
    k: (i64, i64),
}

impl Block {
    fn pairs(&self) -> u128 {
        (self.q.1 - self.q.0 + 1) as u128 * (self.k.1 - self.k.0 + 1) as u128
    }

    /// The two halves along the longer side (the block has at least two pairs).
    fn split(self) -> [Block; 2] {
        let halve = |(lo, hi): (i64, i64)| {
            let mid = lo + (hi - lo) / 2;
            [(lo, mid), (mid + 1, hi)]
        };
        if self.q.1 - self.q.0 >= self.k.1 - self.k.0 {
            halve(self.q).map(|q| Block { q, k: self.k })
        } else {
            halve(self.k).map(|k| Block { q: self.q, k })
        }
    }
}

/// What the search has seen so far.
#[derive(Debug, Default)]
struct Seen {
    allowed: bool,
    refused: bool,
    undecided: bool,
}

/// The class of the boolean `mask` on the pairs `queries x keys` (positions as
/// evaluated: any non-empty ranges), with `at` giving the other variables (its `q` and
/// `k` are ignored), spending at most `budget` evaluations (interval or pointwise).
/// Sound for any budget; exact when `budget >= exact_budget(pairs)`; a tile the
/// enclosure decides costs 1.
pub fn classify(mask: &Node, at: &Env, tile: &Tile, budget: usize) -> TileClass {
    let fixed = Ranges::at(at);
    let bounds = |r: &Range<usize>| (r.start as i64, r.end as i64 - 1);
    let mut stack = vec![Block { q: bounds(&tile.queries), k: bounds(&tile.keys) }];
    let mut seen = Seen::default();
    let mut spent = 0;
    while let Some(block) = stack.pop() {
        if seen.undecided || (seen.allowed && seen.refused) {
            break;
        }
        if spent == budget {
            seen.undecided = true;
            break;
        }
        spent += 1;
        let ranges = fixed
            .with(Var::Query, Interval::between(block.q.0, block.q.1))
            .with(Var::Key, Interval::between(block.k.0, block.k.1));
        match enclose(mask, &ranges).truth() {
            Truth::Always => seen.allowed = true,
            Truth::Never => seen.refused = true,
            Truth::Unknown if block.pairs() > ENUMERATE_PAIRS as u128 => stack.extend(block.split()),
            Truth::Unknown => {
                let pairs = (block.q.0..=block.q.1).flat_map(|q| (block.k.0..=block.k.1).map(move |k| (q, k)));
                for (q, k) in pairs {
                    if spent == budget {
                        seen.undecided = true;
                        break;
                    }
                    spent += 1;
                    let allowed = eval(mask, &at.with(Var::Query, q).with(Var::Key, k)) != 0;
                    seen.allowed |= allowed;
                    seen.refused |= !allowed;
                }
            }
        }
    }
    match seen {
        Seen { allowed: true, refused: false, undecided: false } => TileClass::Full,
        Seen { allowed: false, refused: true, undecided: false } => TileClass::Empty,
        _ => TileClass::Partial,
    }
}

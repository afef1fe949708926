//! The tile plan of a mask expression ([`GpuPattern::Expr`](crate::GpuPattern)): a tile
//! pair is visited unless the reference's interval classification
//! ([`classify`]) proves the mask false on every pair of it, for every head of the launch,
//! and marked full (no per-element evaluation in the kernel) where it proves the mask
//! true on every pair for every head, causality included.
//!
//! Sound for any axis: a strided axis (a striped ring piece) hands the classification
//! the interval from its first to its last position, a superset of its rows, and
//! `Empty` on a superset is `Empty` on the rows. The budget per tile is small
//! ([`PLAN_BUDGET`] interval evaluations): the masks the issue names (windows, blocks,
//! global tokens, causal variants) are decided in one, and a tile left undecided is
//! visited (the kernel's per-element test is exact). Head-independent masks are
//! classified once per tile, not once per head.

use super::{IndexMap, TilePlan, Visit, causal_full};
use ringdil_reference::pattern::ExprPattern;
use ringdil_reference::pattern::expr::{Env, Kind, Node, Tile, TileClass, Var, classify};

/// Interval evaluations spent per tile and head, at most.
pub const PLAN_BUDGET: usize = 4;

/// The heads of a launch: heads `first..first + count` of the pattern's `total`, over a
/// sequence of `seq_len` positions (the expression's `h`, `H` and `n`).
#[derive(Debug, Clone, Copy)]
pub struct ExprScope {
    pub first: usize,
    pub count: usize,
    pub total: usize,
    pub seq_len: usize,
}

/// Does `node` read `var`?
fn reads(node: &Node, var: Var) -> bool {
    node.kind == Kind::Var(var) || node.children().into_iter().any(|c| reads(c, var))
}

/// The tile plan of `pattern` under `map` (identity: expression launches are never
/// compacted), query and key indices in tiles of `tiles`. Key tiles are classified as
/// runs (`TilePlan::build_runs`): the interval classification decides a window's or a
/// block band's inside and outside for a whole run at once.
pub fn plan(pattern: &ExprPattern, scope: ExprScope, causal: bool, map: &IndexMap, tiles: (usize, usize)) -> TilePlan {
    let root = pattern.mask().root();
    let heads: Vec<usize> =
        if reads(root, Var::Head) { (scope.first..scope.first + scope.count).collect() } else { vec![scope.first] };
    TilePlan::build_runs(map, tiles, |q, k| {
        if causal && k.0 > q.1 {
            return Visit::Skip;
        }
        let Ok(tile) = Tile::new(q.0..q.1 + 1, k.0..k.1 + 1, scope.seq_len) else {
            return Visit::Partial;
        };
        let classes: Vec<TileClass> = heads
            .iter()
            .map(|&h| {
                let mut at = Env::default();
                at.set(Var::Head, h);
                at.set(Var::Heads, scope.total);
                at.set(Var::SeqLen, scope.seq_len);
                classify(root, &at, &tile, PLAN_BUDGET)
            })
            .collect();
        if classes.iter().all(|&c| c == TileClass::Empty) {
            Visit::Skip
        } else if classes.iter().all(|&c| c == TileClass::Full) && causal_full(causal, q, k) {
            Visit::Full
        } else {
            Visit::Partial
        }
    })
}

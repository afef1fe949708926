//! The Ulysses x ring hybrid (USP, the reference's `ring::hybrid`), host side: which
//! rank is which member of which group, the head runs a member computes, the ring plan
//! of each run, and the index lists that move rows between a rank's token pieces and its
//! group's pieces.
//!
//! `P = G U` ranks form `G` groups of `U` consecutive ranks: rank `g U + u` is member `u`
//! of group `g`, and group `g` owns its members' tokens in their local orders one after
//! the other ([`ChunkPlan::grouped`]). Member `u` computes the query heads
//! `H_u = even_boundaries(H, U)[u..u + 2]` (as Ulysses splits them), cut into runs that
//! each run alone ([`Heads::pieces`]: whole K/V groups, or heads inside one group). For
//! each run the `G` ranks `(g, u)`, `g = 0..G`, run the dense ring over the group plan at
//! the run's heads ([`HybridSplit::ring_plan`]: a [`DistPlan::for_heads`], so a dilated
//! branch keeps its per-head offsets of the whole problem).
//!
//! # Index lists
//! A rank's piece and a group piece are both contiguous ranges of the group's local
//! order, so they meet in one contiguous [`Overlap`] (or not at all). For an overlap of
//! `len` rows starting at row `i0` of the token piece (`rows` rows) and at row `at` of the
//! group piece (`R` rows), and heads `first..first + m` of `all`, the packed message is
//! `[batch, len, m, d]` in `(b, i, j)` order:
//!
//! ```text
//!   token side   ([B, rows, all, d]):  (b rows + i0 + i) all + first + j   (token_rows)
//!   group side   ([B, R,    m,   d]):  (b R + at + i) m + j                (group_rows)
//!   LSE, token   ([B, all, rows]):     (b all + first + j) rows + i0 + i   (token_lse)
//!   LSE, group   ([B, m, R]):          (b m + j) R + at + i                (group_lse)
//! ```
//! The members' overlaps cover every group piece once, so a group tensor assembled from
//! them has every row written once.

use super::error::{DistError, DistResult};
use super::head_split::Run;
use super::layout::{DistPlan, MAX_PIECES, Piece, pieces_of};
use ringdil_reference::Heads;
use ringdil_reference::ring::{ChunkPlan, even_boundaries};
use std::ops::Range;

/// The grid of a hybrid run: groups, their pieces and the members' query heads.
#[derive(Debug, Clone)]
pub struct HybridSplit {
    /// Members per group (`U`).
    pub degree: usize,
    /// The chunk plan whose ranks are the groups.
    pub groups: ChunkPlan,
    /// Pieces of each group's tokens (the ring plans' pieces).
    group_pieces: Vec<Vec<Piece>>,
    /// Each member's head runs (every exchange walks them).
    runs: Vec<Vec<Run>>,
}

/// Where rows of a rank's piece lie in its group's pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The rank's piece.
    pub piece: usize,
    /// Rows of that piece.
    pub rows: Range<usize>,
    /// The group piece holding them.
    pub group_piece: usize,
    /// The group piece's row of `rows.start`.
    pub at: usize,
}

impl HybridSplit {
    /// The grid of `plan` (all heads of the problem) with groups of `degree` ranks.
    /// Errors: `degree` 0, not dividing the ranks or above the query heads
    /// ([`DistError::HybridDegree`]); a group with more pieces than a ring step launches.
    pub fn new(plan: &DistPlan, degree: usize) -> DistResult<Self> {
        let p = plan.ranks();
        if degree == 0 || p % degree != 0 || degree > plan.heads || plan.heads != plan.all_heads {
            return Err(DistError::HybridDegree { degree, ranks: p, heads: plan.heads });
        }
        let groups = plan.chunks.grouped(degree)?;
        let group_pieces = (0..groups.ranks())
            .map(|g| {
                let pieces = pieces_of(groups.tokens(g));
                if pieces.len() > MAX_PIECES {
                    return Err(DistError::TooManyPieces { rank: g * degree, pieces: pieces.len(), max: MAX_PIECES });
                }
                Ok(pieces)
            })
            .collect::<DistResult<_>>()?;
        let heads = Heads::new(plan.heads, plan.kv_heads)?;
        let bounds = even_boundaries(plan.heads, degree);
        let runs = (0..degree)
            .map(|u| {
                let mine = bounds[u]..bounds[u + 1];
                heads.pieces(&mine).into_iter().map(|q| Run { kv: heads.kv_range(&q), q }).collect()
            })
            .collect();
        Ok(HybridSplit { degree, groups, group_pieces, runs })
    }

    /// Groups (`G = P / U`): the length of each ring.
    pub fn group_count(&self) -> usize {
        self.groups.ranks()
    }

    /// `(group, member)` of `rank`.
    pub fn place(&self, rank: usize) -> (usize, usize) {
        (rank / self.degree, rank % self.degree)
    }

    /// The rank of member `u` of group `g`.
    pub fn rank(&self, g: usize, u: usize) -> usize {
        g * self.degree + u
    }

    /// Member `u`'s query heads cut into runs that each run alone, with their K/V heads.
    pub fn runs(&self, u: usize) -> &[Run] {
        &self.runs[u]
    }

    /// Group `g`'s pieces.
    pub fn group_pieces(&self, g: usize) -> &[Piece] {
        &self.group_pieces[g]
    }

    /// The ring over the groups for `run`: the group plan at the run's query and K/V
    /// heads, with global head indices.
    pub fn ring_plan(&self, plan: &DistPlan, run: &Run) -> DistResult<DistPlan> {
        DistPlan::for_heads(
            self.groups.clone(),
            plan.spec.clone(),
            plan.batch,
            run.q.clone(),
            plan.heads,
            plan.head_dim,
        )?
        .with_kv_heads(run.kv.len())?
        .with_value_dim(plan.value_dim)
    }

    /// Where the pieces of `rank` lie in its group's pieces, by piece then row.
    pub fn overlaps(&self, plan: &DistPlan, rank: usize) -> Vec<Overlap> {
        let (g, _) = self.place(rank);
        let offset: usize = (self.rank(g, 0)..rank).map(|r| plan.chunks.tokens(r).len()).sum();
        let mut out = Vec::new();
        for (pi, piece) in plan.pieces(rank).iter().enumerate() {
            let (lo, hi) = (offset + piece.local, offset + piece.local + piece.rows);
            for (gj, gp) in self.group_pieces[g].iter().enumerate() {
                let (a, b) = (lo.max(gp.local), hi.min(gp.local + gp.rows));
                if a < b {
                    out.push(Overlap { piece: pi, rows: a - lo..b - lo, group_piece: gj, at: a - gp.local });
                }
            }
        }
        out
    }

    /// Elements rank `r` sends in the forward: its rows of the other members' heads (Q,
    /// and K/V at the K/V heads each run reads), the dense ring's K/V hops over the groups
    /// at its runs' K/V heads, and its output and LSE rows of the other members' tokens.
    pub fn forward_volume(&self, plan: &DistPlan, r: usize) -> usize {
        let (b, d, dv) = (plan.batch, plan.head_dim, plan.value_dim);
        let (g, u) = self.place(r);
        let mine: usize = plan.chunks.tokens(r).len();
        let group: usize = self.groups.tokens(g).len();
        let g_count = self.group_count();
        let width = |run: &Run| run.q.len() * d + run.kv.len() * (d + dv);
        let scatter: usize =
            (0..self.degree).filter(|&o| o != u).flat_map(|o| self.runs(o)).map(|run| b * mine * width(run)).sum();
        let next = self.groups.tokens((g + 1) % g_count).len();
        let ring_rows = if g_count > 1 { plan.seq_len() - next } else { 0 };
        let own = self.runs(u);
        let ring: usize = own.iter().map(|run| b * run.kv.len() * (d + dv) * ring_rows).sum();
        let back: usize = own.iter().map(|run| b * (group - mine) * run.q.len() * (dv + 1)).sum();
        scatter + ring + back
    }
}

/// The Ulysses degree that makes a grid of `ranks` ranks with `heads` query heads: the
/// largest divisor of the ranks below them and not above the heads, so that at least two
/// groups form a ring (2 x 2 on 4 ranks, 2 x 4 on 8); where none above 1 exists (2 or 3
/// ranks), the reference's rule (`ring::hybrid_degree`). What `ring_check` and
/// `ring_bench` run the hybrid with.
pub fn grid_degree(ranks: usize, heads: usize) -> usize {
    (2..ranks.min(heads + 1))
        .filter(|u| ranks % u == 0)
        .max()
        .unwrap_or_else(|| ringdil_reference::ring::hybrid_degree(ranks, heads))
}

fn u32_of(x: usize) -> u32 {
    u32::try_from(x).expect("row indices fit 32 bits (the kernels' limit on sizes)")
}

/// `(b, i, j)` in the packing order of the module docs.
fn packed(batch: usize, ov: &Overlap, m: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let len = ov.rows.len();
    (0..batch).flat_map(move |b| (0..len).flat_map(move |i| (0..m).map(move |j| (b, i, j))))
}

/// Rows of heads `heads` of overlap `ov` in its token piece `[batch, rows, all, d]`.
pub fn token_rows(batch: usize, rows: usize, all: usize, heads: &Range<usize>, ov: &Overlap) -> Vec<u32> {
    packed(batch, ov, heads.len())
        .map(|(b, i, j)| u32_of((b * rows + ov.rows.start + i) * all + heads.start + j))
        .collect()
}

/// Rows of overlap `ov` in its group piece `[batch, group_rows, m, d]`.
pub fn group_rows(batch: usize, group_rows: usize, m: usize, ov: &Overlap) -> Vec<u32> {
    packed(batch, ov, m).map(|(b, i, j)| u32_of((b * group_rows + ov.at + i) * m + j)).collect()
}

/// LSE entries of heads `heads` of overlap `ov` in its token piece's `[batch, all, rows]`.
pub fn token_lse(batch: usize, rows: usize, all: usize, heads: &Range<usize>, ov: &Overlap) -> Vec<u32> {
    packed(batch, ov, heads.len())
        .map(|(b, i, j)| u32_of((b * all + heads.start + j) * rows + ov.rows.start + i))
        .collect()
}

/// LSE entries of overlap `ov` in its group piece's `[batch, m, group_rows]`.
pub fn group_lse(batch: usize, group_rows: usize, m: usize, ov: &Overlap) -> Vec<u32> {
    packed(batch, ov, m).map(|(b, i, j)| u32_of((b * m + j) * group_rows + ov.at + i)).collect()
}

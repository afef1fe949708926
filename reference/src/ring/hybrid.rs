//! Ulysses x ring (USP, Fang and Zhao, 2024): head parallelism inside groups of ranks,
//! ring attention between the groups.
//!
//! `P = G U` ranks form `G` groups of `U` consecutive ranks; rank `g U + u` is member `u`
//! of group `g`, and group `g` owns the tokens of its members, `T_g`. Query heads are split
//! evenly over the members (`H_u`, as Ulysses splits them over all ranks).
//!
//! 1. **All-to-all inside each group** (Ulysses): member `u` receives `Q`, `K`, `V` (and
//!    in the backward `dOut`, `Out`) of all of `T_g` for its heads `H_u` (K/V at the K/V
//!    heads they read, replicated when two members share a grouped-query K/V head).
//! 2. **A ring over the groups**, one per head slice: the `G` ranks `(g, u)` for fixed `u`
//!    run [`super::ring()`]'s steps on the group blocks, heads `H_u` only: at step `s`
//!    rank `(g, u)` attends `T_g` over `T_{(g - s) mod G}` and passes that K/V block (in
//!    the backward with its `dK`, `dV` accumulators) to `(g + 1, u)`; one more hop brings
//!    the accumulators home. A step whose group pair the pattern leaves empty computes
//!    nothing (the block still travels).
//! 3. **All-to-all back**: member `u` sends each member the `Out` (backward: `dQ`, `dK`,
//!    `dV`) rows of its tokens for `H_u`; the contributions of a shared K/V head add.
//!
//! `U = 1` is the ring over all ranks, `U = P` is Ulysses. Why: Ulysses moves `~4/P` of
//! the activations once but needs `H >= P` heads; the ring needs no heads but pays `P`
//! steps. The grid keeps each ring at `G = P / U` steps with `U <= H`, the usual choice
//! being Ulysses inside a node (fast links) and the ring across nodes.
//!
//! # Volume (elements sent by rank `p = (g, u)` with `n_p` tokens; `N_g = |T_g|`, group
//! indices mod `G`; multi-head, `d_v = d`)
//! ```text
//!   forward:  3 B d n_p (H - |H_u|) + 2 B d |H_u| (N - N_{g+1}) + B (d + 1) |H_u| (N_g - n_p)
//!   backward: B (5d + 1) n_p (H - |H_u|) + 4 B d |H_u| (N - N_{g+1}) + 2 B d |H_u| N_{g+1} [G > 1]
//!             + 3 B d |H_u| (N_g - n_p)
//! ```
//! (Ulysses' exchange inside the group, the ring's hops over the groups at `|H_u|` heads,
//! the results back). `U = 1` gives the ring's formula, `U = P` Ulysses'. The ring's
//! `2 B H d N` per rank thus shrinks to `2 B d |H_u| N ~ 2 B H d N / U`, for an all-to-all
//! inside the group.

use super::chunking::{ChunkPlan, even_boundaries};
use super::needs::Needs;
use super::schedule::{Kind, Op, Schedule, Step, Tensor};
use crate::error::Result;
use crate::heads::Heads;
use crate::spec::Spec;
use std::ops::Range;

/// The Ulysses x ring schedule of `spec` over `heads` for `chunks`, with Ulysses groups
/// of `ulysses` consecutive ranks. Errors: `ulysses` 0 or not dividing the ranks
/// ([`Error::UlyssesDegree`](crate::Error::UlyssesDegree)), and the pattern's own.
pub fn hybrid(chunks: &ChunkPlan, spec: &Spec, heads: impl Into<Heads>, ulysses: usize) -> Result<Schedule> {
    let counts = heads.into();
    let groups = chunks.grouped(ulysses)?;
    let needs = Needs::new(spec, &groups, counts)?;
    let grid = Grid { chunks, groups: &groups, ulysses, split: even_boundaries(counts.query(), ulysses) };
    Ok(Schedule {
        kind: Kind::Hybrid,
        chunks: chunks.clone(),
        heads: counts.query(),
        kv_heads: counts.kv(),
        forward: grid.steps(&needs, counts, false),
        backward: grid.steps(&needs, counts, true),
    })
}

/// The Ulysses degree [`Kind::Hybrid`] uses for `ranks` ranks and `query_heads` heads:
/// the largest divisor of the ranks not above the heads (as much head parallelism as the
/// heads allow, the ring for the rest).
pub fn hybrid_degree(ranks: usize, query_heads: usize) -> usize {
    (1..=ranks.min(query_heads).max(1)).filter(|u| ranks % u == 0).max().unwrap_or(1)
}

/// The rank grid: `groups` is the chunk plan whose ranks are the groups.
struct Grid<'a> {
    chunks: &'a ChunkPlan,
    groups: &'a ChunkPlan,
    ulysses: usize,
    /// Query-head boundaries of the members.
    split: Vec<usize>,
}

impl Grid<'_> {
    fn rank(&self, g: usize, u: usize) -> usize {
        g * self.ulysses + u
    }

    fn heads(&self, u: usize) -> Range<usize> {
        self.split[u]..self.split[u + 1]
    }

    /// The members with query heads, as (group, member) pairs.
    fn members(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let g = self.groups.ranks();
        (0..g).flat_map(move |g| (0..self.ulysses).map(move |u| (g, u))).filter(|&(_, u)| !self.heads(u).is_empty())
    }

    fn steps(&self, needs: &Needs, counts: Heads, backward: bool) -> Vec<Step> {
        use Tensor::{DK, DOut, DQ, DV, K, Out, Q, V};
        let (inputs, outputs): (&[Tensor], &[Tensor]) =
            if backward { (&[Q, K, V, DOut, Out], &[DQ, DK, DV]) } else { (&[Q, K, V], &[Out]) };
        let travel: &[Tensor] = if backward { &[K, V, DK, DV] } else { &[K, V] };
        let g_count = self.groups.ranks();
        // The other members of (g, u) that own tokens.
        let others = |g: usize, u: usize| {
            (0..self.ulysses)
                .filter(move |&o| o != u)
                .map(move |o| self.rank(g, o))
                .filter(|&o| !self.chunks.tokens(o).is_empty())
        };
        let mut steps = Vec::with_capacity(g_count + 3);
        let mut scatter = Step::default();
        for (g, u) in self.members() {
            for o in others(g, u) {
                scatter.ops.push(Op::send(o, self.rank(g, u), inputs, self.heads(u), self.chunks.tokens(o)));
            }
        }
        steps.push(scatter);
        for s in 0..g_count {
            let mut step = Step::default();
            for (g, u) in self.members() {
                let (src, prev) = ((g + g_count - s) % g_count, (g + g_count - 1) % g_count);
                let block = self.groups.tokens(src);
                if s > 0 && !block.is_empty() {
                    step.ops.push(Op::send(self.rank(prev, u), self.rank(g, u), travel, self.heads(u), block));
                    if prev != src {
                        step.ops.push(Op::free(self.rank(prev, u), &[K, V], self.heads(u), block));
                    }
                }
            }
            for (g, u) in self.members() {
                let src = (g + g_count - s) % g_count;
                if needs.any(g, src) {
                    for piece in counts.pieces(&self.heads(u)) {
                        let (queries, keys) = (self.groups.tokens(g), self.groups.tokens(src));
                        step.ops.push(Op::compute(backward, self.rank(g, u), piece, queries, keys));
                    }
                }
            }
            steps.push(step);
        }
        // The blocks held after the last compute belong to the next group: in the
        // backward their dK, dV go home first (one more hop), then they are dropped.
        let mut last = Step::default();
        for (g, u) in self.members().filter(|_| g_count > 1) {
            let next = (g + 1) % g_count;
            let block = self.groups.tokens(next);
            if block.is_empty() {
                continue;
            }
            if backward {
                last.ops.push(Op::send(self.rank(g, u), self.rank(next, u), &[DK, DV], self.heads(u), block));
            }
            last.ops.push(Op::free(self.rank(g, u), &[K, V], self.heads(u), block));
        }
        steps.push(last);
        let mut gather = Step::default();
        for (g, u) in self.members() {
            for o in others(g, u) {
                gather.ops.push(Op::free(self.rank(g, u), inputs, self.heads(u), self.chunks.tokens(o)));
                gather.ops.push(Op::send(self.rank(g, u), o, outputs, self.heads(u), self.chunks.tokens(o)));
            }
        }
        steps.push(gather);
        steps.retain(|s| !s.ops.is_empty());
        steps
    }
}

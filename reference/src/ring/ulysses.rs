//! Head-parallel attention with all-to-all (DeepSpeed-Ulysses, Jacobs et al., 2023).
//!
//! Heads are split evenly over the ranks (rank `p` gets heads `H_p`; with `H < P` some
//! ranks get none and idle). An all-to-all turns the token split into a head split:
//! rank `p` receives `Q`, `K`, `V` of **all** tokens for its heads, runs single-device
//! attention on them, and a second all-to-all sends the output rows back to the token
//! owners. Heads are independent, so this is exact for every pattern; the head slice
//! keeps global head indices, so dilated offsets `o(h)` are unchanged.
//!
//! # Grouped-query attention
//! The *query* heads are split evenly, as without grouping, and rank `p` receives the
//! K/V heads its query heads read, `K_p = kv_range(H_p)` ([`Heads::kv_range`]). When
//! ranks' query heads are whole groups (`P` divides `H_kv`, say) every K/V head goes to
//! one rank; otherwise a K/V head shared by several ranks is **replicated** to each,
//! and each sends its partial `dK`, `dV` of that head back, where the owner adds them
//! (accumulators combine by addition). A rank whose query heads cut a group and reach
//! into the next computes the pieces separately ([`Heads::pieces`]). This is exact for
//! every `H`, `H_kv` and `P`: no split is refused.
//!
//! # Volume (elements sent by rank `p`, `|H_p|` its query heads, `|K_r|` the K/V heads
//! rank `r` receives, `d_v = d`)
//! ```text
//!   forward:  B d n_p (H - |H_p|) + 2 B d n_p sum_{r != p} |K_r|  +  B (d + 1) |H_p| (N - n_p)
//!   backward: B (3d + 1) n_p (H - |H_p|) + 2 B d n_p sum_{r != p} |K_r|
//!             + B d (|H_p| + 2 |K_p|) (N - n_p)
//! ```
//! (in: `Q, K, V` forward; `Q, K, V, dOut, Out+LSE` backward; out: `Out+LSE`, then
//! `dQ, dK, dV`). For multi-head attention `|K_r| = |H_r|` and `sum_{r != p} |K_r| =
//! H - |H_p|`. Memory per rank `O(N |H_p| + n_p H)`: `O(N H / P)`.

use super::chunking::{ChunkPlan, even_boundaries};
use super::schedule::{Kind, Op, Schedule, Step, Tensor};
use crate::heads::Heads;
use std::ops::Range;

/// The Ulysses schedule over `heads` (a head count, or [`Heads`] for grouped-query
/// attention) for `chunks`.
pub fn ulysses(chunks: &ChunkPlan, heads: impl Into<Heads>) -> Schedule {
    let counts = heads.into();
    Schedule {
        kind: Kind::Ulysses,
        chunks: chunks.clone(),
        heads: counts.query(),
        kv_heads: counts.kv(),
        forward: ulysses_steps(chunks, counts, false),
        backward: ulysses_steps(chunks, counts, true),
    }
}

fn ulysses_steps(chunks: &ChunkPlan, counts: Heads, backward: bool) -> Vec<Step> {
    use Tensor::{DK, DOut, DQ, DV, K, Out, Q, V};
    let p = chunks.ranks();
    let split = even_boundaries(counts.query(), p);
    let heads_of = |r: usize| -> Range<usize> { split[r]..split[r + 1] };
    let (inputs, outputs): (&[Tensor], &[Tensor]) =
        if backward { (&[Q, K, V, DOut, Out], &[DQ, DK, DV]) } else { (&[Q, K, V], &[Out]) };
    let mut scatter = Step::default();
    let mut compute = Step::default();
    let mut gather = Step::default();
    for r in (0..p).filter(|&r| !heads_of(r).is_empty()) {
        let others = (0..p).filter(|&o| o != r && !chunks.tokens(o).is_empty());
        for o in others.clone() {
            scatter.ops.push(Op::send(o, r, inputs, heads_of(r), chunks.tokens(o)));
        }
        for piece in counts.pieces(&heads_of(r)) {
            compute.ops.push(Op::compute(backward, r, piece, &chunks.order, &chunks.order));
        }
        for o in others {
            compute.ops.push(Op::free(r, inputs, heads_of(r), chunks.tokens(o)));
            gather.ops.push(Op::send(r, o, outputs, heads_of(r), chunks.tokens(o)));
        }
    }
    vec![scatter, compute, gather]
}

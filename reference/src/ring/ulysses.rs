//! Head-parallel attention with all-to-all (DeepSpeed-Ulysses, Jacobs et al., 2023).
//!
//! Heads are split evenly over the ranks (rank `p` gets heads `H_p`; with `H < P` some
//! ranks get none and idle). An all-to-all turns the token split into a head split:
//! rank `p` receives `Q`, `K`, `V` of **all** tokens for its heads, runs single-device
//! attention on them, and a second all-to-all sends the output rows back to the token
//! owners. Heads are independent, so this is exact for every pattern; the head slice
//! keeps global head indices, so dilated offsets `o(h)` are unchanged.
//!
//! # Volume (elements sent by rank `p`, `|H_p|` its heads, `d_v = d`)
//! ```text
//!   forward:  3 B d n_p (H - |H_p|)  +  B (d + 1) |H_p| (N - n_p)
//!   backward: B (5d + 1) n_p (H - |H_p|)  +  3 B d |H_p| (N - n_p)
//! ```
//! (in: `Q, K, V` forward; `Q, K, V, dOut, Out+LSE` backward; out: `Out+LSE`, then
//! `dQ, dK, dV`). Memory per rank `O(N |H_p| + n_p H)`: `O(N H / P)`.

use super::chunking::{ChunkPlan, even_boundaries};
use super::schedule::{Kind, Op, Schedule, Step, Tensor};
use std::ops::Range;

/// The Ulysses schedule over `heads` heads for `chunks`.
pub fn ulysses(chunks: &ChunkPlan, heads: usize) -> Schedule {
    Schedule {
        kind: Kind::Ulysses,
        chunks: chunks.clone(),
        heads,
        forward: ulysses_steps(chunks, heads, false),
        backward: ulysses_steps(chunks, heads, true),
    }
}

fn ulysses_steps(chunks: &ChunkPlan, heads: usize, backward: bool) -> Vec<Step> {
    use Tensor::{DK, DOut, DQ, DV, K, Out, Q, V};
    let p = chunks.ranks();
    let split = even_boundaries(heads, p);
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
        compute.ops.push(Op::compute(backward, r, heads_of(r), &chunks.order, &chunks.order));
        for o in others {
            compute.ops.push(Op::free(r, inputs, heads_of(r), chunks.tokens(o)));
            gather.ops.push(Op::send(r, o, outputs, heads_of(r), chunks.tokens(o)));
        }
    }
    vec![scatter, compute, gather]
}

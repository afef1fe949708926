//! All-gather context parallelism (Megatron-LM's context parallel with all-gathered
//! K/V, as in Llama 3 training): every rank gathers the whole `K`, `V`, attends its own
//! queries over all of it, and in the backward pass reduce-scatters `dK`, `dV` to their
//! owners.
//!
//! Simple and one collective per phase, but each rank holds all `N` keys: memory
//! `O(N)`, not `O(N/P)`.
//!
//! # Volume (elements sent by rank `r`, `H_kv` K/V heads, `d_v = d`)
//! ```text
//!   forward:  2 B H_kv d n_r (P - 1)                          (all-gather of K, V)
//!   backward: 2 B H_kv d n_r (P - 1) + 2 B H_kv d (N - n_r)    (gather again, reduce-scatter dK, dV)
//! ```
//! Only K/V-side rows travel: `H_kv / H` of multi-head attention's volume.

use super::chunking::ChunkPlan;
use super::schedule::{Kind, Op, Schedule, Step, Tensor};
use crate::heads::Heads;

/// The all-gather schedule over `heads` (a head count, or [`Heads`] for grouped-query
/// attention) for `chunks`.
pub fn all_gather(chunks: &ChunkPlan, heads: impl Into<Heads>) -> Schedule {
    let counts = heads.into();
    let heads = counts.query();
    Schedule {
        kind: Kind::AllGather,
        chunks: chunks.clone(),
        heads,
        kv_heads: counts.kv(),
        forward: gather_steps(chunks, heads, false),
        backward: gather_steps(chunks, heads, true),
    }
}

fn gather_steps(chunks: &ChunkPlan, heads: usize, backward: bool) -> Vec<Step> {
    use Tensor::{DK, DV, K, V};
    let p = chunks.ranks();
    let others = |r: usize| (0..p).filter(move |&o| o != r && !chunks.tokens(o).is_empty());
    let mut gather = Step::default();
    let mut compute = Step::default();
    let mut scatter = Step::default();
    for r in 0..p {
        for o in others(r) {
            gather.ops.push(Op::send(o, r, &[K, V], 0..heads, chunks.tokens(o)));
        }
        compute.ops.push(Op::compute(backward, r, 0..heads, chunks.tokens(r), &chunks.order));
        for o in others(r) {
            if backward {
                scatter.ops.push(Op::send(r, o, &[DK, DV], 0..heads, chunks.tokens(o)));
            }
            scatter.ops.push(Op::free(r, &[K, V], 0..heads, chunks.tokens(o)));
        }
    }
    vec![gather, compute, scatter]
}

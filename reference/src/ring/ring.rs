//! Ring attention (Liu et al., 2023), forward and backward, as a [`Schedule`].
//!
//! Rank `r` keeps its query chunk `Q_r` and its output rows for the whole run. At step
//! `s = 0..P-1` it holds the key/value block of rank `src = (r - s) mod P`, attends
//! `Q_r` over it, and merges the partial into its output with the online-softmax merge;
//! then every rank passes the block it holds to `r + 1`. After `P - 1` passes every
//! query has seen every key exactly once, and the output is partitioned like `Q`.
//!
//! The backward pass is ring-flash-attention's: the block travels with its `dK`, `dV`
//! accumulators; each rank adds its queries' contributions to them (and to its own
//! `dQ`), and after the last compute one more hop brings each accumulator home.
//!
//! A step whose pair `(r, src)` the pattern leaves empty (causal blocks above the
//! diagonal, a sliding window or dilated segments that never reach `src`) is **skipped**
//! and recorded in [`Step::skipped`]; the block still travels, since later ranks need it.
//!
//! # Volume (elements sent by rank `r`; `n_s` tokens on rank `s`, `H_kv` K/V heads, batch `B`)
//! ```text
//!   forward:  sum_{s=1}^{P-1} 2 B H_kv d n_{(r-s+1) mod P} = 2 B H_kv d (N - n_{r+1})   ~ 2 B H_kv d N (P-1)/P
//!   backward: 4 B H_kv d (N - n_{r+1}) + 2 B H_kv d n_{r+1}          (P > 1; indices mod P)
//! ```
//! (with `d_v = d`; `V`/`dV` rows are `B d_v`). Only K/V-side rows travel, so
//! grouped-query attention (`H_kv < H`) cuts every step's volume to `H_kv / H` of
//! multi-head attention's. Memory per rank is `O(n_r + max_s n_s)`.

use super::chunking::ChunkPlan;
use super::needs::Needs;
use super::schedule::{Kind, Op, Schedule, Skip, Step, Tensor};
use crate::error::Result;
use crate::heads::Heads;
use crate::spec::Spec;

/// The dense ring schedule of `spec` over `heads` (a head count, or [`Heads`] for
/// grouped-query attention) for `chunks`.
pub fn ring(chunks: &ChunkPlan, spec: &Spec, heads: impl Into<Heads>) -> Result<Schedule> {
    let counts = heads.into();
    let needs = Needs::new(spec, chunks, counts)?;
    let heads = counts.query();
    Ok(Schedule {
        kind: Kind::Ring,
        chunks: chunks.clone(),
        heads,
        kv_heads: counts.kv(),
        forward: ring_steps(chunks, &needs, heads, false),
        backward: ring_steps(chunks, &needs, heads, true),
    })
}

fn ring_steps(chunks: &ChunkPlan, needs: &Needs, heads: usize, backward: bool) -> Vec<Step> {
    use Tensor::{DK, DV, K, V};
    let p = chunks.ranks();
    let travel: &[Tensor] = if backward { &[K, V, DK, DV] } else { &[K, V] };
    let source = |r: usize, s: usize| (r + p - s) % p;
    let mut steps = Vec::with_capacity(p + 1);
    for s in 0..p {
        let mut step = Step::default();
        for r in 0..p {
            let (src, prev) = (source(r, s), (r + p - 1) % p);
            let block = chunks.tokens(src);
            if s > 0 && !block.is_empty() {
                step.ops.push(Op::send(prev, r, travel, 0..heads, block));
                if prev != src {
                    step.ops.push(Op::free(prev, &[K, V], 0..heads, block));
                }
            }
        }
        for r in 0..p {
            let src = source(r, s);
            let (queries, keys) = (chunks.tokens(r), chunks.tokens(src));
            if needs.any(r, src) {
                step.ops.push(Op::compute(backward, r, 0..heads, queries, keys));
            } else if !queries.is_empty() && !keys.is_empty() {
                step.skipped.push(Skip { rank: r, source: src });
            }
        }
        steps.push(step);
    }
    // The blocks held after the last compute are not their holder's: drop them, and in
    // the backward pass first send their dK, dV home (one more hop, to r + 1).
    let mut last = Step::default();
    for r in (0..p).filter(|&r| p > 1 && !chunks.tokens((r + 1) % p).is_empty()) {
        let (src, block) = ((r + 1) % p, chunks.tokens((r + 1) % p));
        if backward {
            last.ops.push(Op::send(r, src, &[DK, DV], 0..heads, block));
        }
        last.ops.push(Op::free(r, &[K, V], 0..heads, block));
    }
    if !last.ops.is_empty() {
        steps.push(last);
    }
    steps
}

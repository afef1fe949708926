//! The pattern-aware communication plan: ship only the key/value rows a rank's queries
//! can see.
//!
//! Same step structure as the ring (at step `s` rank `r` works on keys of
//! `src = (r - s) mod P`, merging partials in the same order), but instead of the whole
//! block, `src` sends `r` exactly `need(r, src, h)` ([`Needs`]) for each head `h`, one
//! message per run of heads with equal needs. Each step is therefore a permutation of
//! direct messages (shift by `s`); on a fabric with only ring links they would be
//! relayed, which changes link load but not what each rank receives.
//!
//! The plan is **exact** (every allowed pair is computed once: [`Schedule::validate`])
//! and **minimal** (a row is sent to `r` for head `h` only if some query of `r` sees it
//! in head `h`). In the backward pass the received rows' `dK`, `dV` go back to their
//! owner in the same step.
//!
//! Under grouped-query attention the messages are per K/V head `j`, carrying
//! `need_kv(r, src, j)`, the union of its group's needs, and the compute covers the
//! whole group (its query heads see only their own keys among them): minimal per K/V
//! head.
//!
//! # Volume (elements, `d_v = d`)
//! ```text
//!   forward (received by r):  2 B d sum_{s != r} sum_j |need_kv(r, s, j)|   (j over the H_kv K/V heads)
//!   backward:                 twice that (K, V in; dK, dV back)
//! ```
//! With `H_kv = H` this is `sum_h |need(r, s, h)|`; for patterns whose needs are the same
//! for every head of a group (dense, window, block sparse, causal, padding) it is
//! `H_kv / H` of the multi-head volume.
//! For a LongNet branch `(w, r)`: if every segment lies inside one rank the branch adds
//! nothing; if segments span ranks, head `h` needs only the kept positions
//! `a + o(h) + t r` of each segment it reaches, `~ 1/r` of a dense ring's rows.

use super::chunking::ChunkPlan;
use super::needs::Needs;
use super::schedule::{Kind, Op, Schedule, Skip, Step, Tensor};
use crate::error::Result;
use crate::heads::Heads;
use crate::spec::Spec;

/// The pattern-aware schedule of `spec` over `heads` (a head count, or [`Heads`] for
/// grouped-query attention) for `chunks`.
pub fn pattern_ring(chunks: &ChunkPlan, spec: &Spec, heads: impl Into<Heads>) -> Result<Schedule> {
    let counts = heads.into();
    let needs = Needs::new(spec, chunks, counts)?;
    Ok(Schedule {
        kind: Kind::PatternRing,
        chunks: chunks.clone(),
        heads: counts.query(),
        kv_heads: counts.kv(),
        forward: plan_steps(chunks, &needs, false),
        backward: plan_steps(chunks, &needs, true),
    })
}

fn plan_steps(chunks: &ChunkPlan, needs: &Needs, backward: bool) -> Vec<Step> {
    use Tensor::{DK, DV, K, V};
    let p = chunks.ranks();
    (0..p)
        .map(|s| {
            let mut step = Step::default();
            for r in 0..p {
                let src = (r + p - s) % p;
                let groups = needs.head_groups(r, src);
                if groups.is_empty() && !chunks.tokens(r).is_empty() && !chunks.tokens(src).is_empty() {
                    step.skipped.push(Skip { rank: r, source: src });
                }
                for (heads, keys) in groups {
                    if s > 0 {
                        step.ops.push(Op::send(src, r, &[K, V], heads.clone(), keys));
                    }
                    step.ops.push(Op::compute(backward, r, heads.clone(), chunks.tokens(r), keys));
                    if s > 0 {
                        if backward {
                            step.ops.push(Op::send(r, src, &[DK, DV], heads.clone(), keys));
                        }
                        step.ops.push(Op::free(r, &[K, V], heads, keys));
                    }
                }
            }
            step
        })
        .collect()
}

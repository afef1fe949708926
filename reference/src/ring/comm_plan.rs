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
//! # Volume (elements, `d_v = d`)
//! ```text
//!   forward (received by r):  2 B d sum_{s != r} sum_h |need(r, s, h)|
//!   backward:                 twice that (K, V in; dK, dV back)
//! ```
//! For a LongNet branch `(w, r)`: if every segment lies inside one rank the branch adds
//! nothing; if segments span ranks, head `h` needs only the kept positions
//! `a + o(h) + t r` of each segment it reaches, `~ 1/r` of a dense ring's rows.

use super::chunking::ChunkPlan;
use super::needs::Needs;
use super::schedule::{Kind, Op, Schedule, Skip, Step, Tensor};
use crate::error::Result;
use crate::spec::Spec;

/// The pattern-aware schedule of `spec` over `heads` heads for `chunks`.
pub fn pattern_ring(chunks: &ChunkPlan, spec: &Spec, heads: usize) -> Result<Schedule> {
    let needs = Needs::new(spec, chunks, heads)?;
    Ok(Schedule {
        kind: Kind::PatternRing,
        chunks: chunks.clone(),
        heads,
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

//! Calls of one module on two streams at once: the cases that a kernel keeping state in
//! its module (not in the call) fails.
//!
//! Two prepared calls of the same variant, each bound to a stream of its own, launch
//! their forwards alternately, [`CALLS`] per stream, with no wait between the streams, so
//! that one stream's blocks start while the other's still run. Every output goes to a
//! buffer of its own, poisoned with NaN, and each is compared with the f64 reference: a
//! launch that took items belonging to the other stream's launch leaves rows unwritten
//! (NaN), one that took its items twice or out of order writes them wrongly. The
//! wgmma forward claims its items from counters; these cases are why the counters belong to
//! the call (`Params::work`), and they fail against counters kept in the module.
//!
//! Sizes are larger than the other cases' (hundreds of work items per launch), so that
//! launches last long enough to overlap.

use super::cases::{Case, Kind, fit_spec};
use super::kernels::{draw, partial_to_host, poisoned_partial};
use super::{Metric, Outcome, bound, describe};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::shape::{Chunk, Dtype, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::attention;
use ringdil_reference::compare::{rel_err, worst};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;

/// Forward calls per stream.
pub const CALLS: usize = 8;

/// The two-stream cases: a causal dense forward (many items of unequal cost), a LongNet
/// forward (several launches per call) and a sliding window, over both element types and
/// head dims between them.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let seq = |rng: &mut SplitMix64| if quick { rng.range(257, 521) } else { rng.range(1000, 2000) };
    let longnet = Dilated::longnet(&[(rng.range(64, 256), 1), (rng.range(256, 1024), 2), (rng.range(1024, 4096), 4)]);
    let window = GpuPattern::Window { left: rng.range(64, 512), right: rng.range(0, 64) };
    let specs = [
        ("two streams dense causal", (Dtype::Bf16, 128), GpuSpec::new(GpuPattern::Dense).causal(true)),
        ("two streams dilated longnet", (Dtype::F16, 64), GpuSpec::new(GpuPattern::Dilated(longnet)).causal(true)),
        ("two streams sliding window", (Dtype::Bf16, 64), GpuSpec::new(window)),
    ];
    specs
        .into_iter()
        .map(|(name, combo, spec)| {
            let (n, batch, heads) = (seq(rng), 2, 4);
            let spec = fit_spec(spec, batch, n, rng);
            Case::new(Kind::TwoStreams, name, combo, [batch, n, heads], spec)
        })
        .collect()
}

/// Run a two-stream case (module docs): the worst error of out and of the LSE over every
/// call of both streams, and the number of calls whose output has a NaN.
pub fn run(gpu: &Gpu, case: &Case, seed: u64) -> Result<Outcome> {
    let (_, [(qb, q), (kb, k), (vb, v)]) = draw(case, seed);
    let dims = [case.batch, case.seq, case.heads, case.head_dim];
    let shape = Shape::square(case.batch, case.seq, case.heads, case.head_dim);
    let (qd, kd, vd) = (gpu.upload(&qb, dims)?, gpu.upload(&kb, dims)?, gpu.upload(&vb, dims)?);
    let mut lanes = Vec::new();
    for _ in 0..2 {
        let lane = gpu.with_stream(gpu.context().new_stream()?);
        let prep = lane.prepare(&shape, case.dtype, &case.spec, &Chunk::whole(&shape))?;
        let outs = (0..CALLS).map(|_| poisoned_partial(&lane, dims)).collect::<Result<Vec<_>>>()?;
        lanes.push((lane, prep, outs));
    }
    // Everything above is queued on the streams that made it; the calls below wait for
    // none of it but their own inputs (cudarc's per-buffer events), not for each other.
    for i in 0..CALLS {
        for (lane, prep, outs) in &mut lanes {
            lane.forward_into(prep, &qd, &kd, &vd, &mut outs[i])?;
        }
    }
    let want = attention(q.view(), k.view(), v.view(), &case.spec.to_reference())?;
    let (mut out_errs, mut lse_errs, mut with_nan) = (Vec::new(), Vec::new(), 0usize);
    for (lane, _, outs) in &lanes {
        for out in outs {
            let got = partial_to_host(lane, out)?;
            with_nan += got.out.iter().chain(got.lse.iter()).any(|x| x.is_nan()) as usize;
            out_errs.push(rel_err(got.out.iter(), want.out.iter()));
            lse_errs.push(rel_err(got.lse.iter(), want.lse.iter()));
        }
    }
    let b = bound(case.dtype);
    Ok(Outcome {
        case: describe(case),
        metrics: vec![
            Metric { what: "out, worst of both streams' calls", err: worst(out_errs), bound: b },
            Metric { what: "lse, worst of both streams' calls", err: worst(lse_errs), bound: b },
            Metric { what: "calls with a NaN", err: with_nan as f64, bound: 1.0 },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_large_enough_to_overlap_and_valid() {
        for quick in [false, true] {
            let c = cases(&mut SplitMix64::new(7), quick);
            assert_eq!(c.len(), 3);
            for x in &c {
                assert_eq!(x.kind, Kind::TwoStreams);
                assert!(x.seq >= if quick { 257 } else { 1000 }, "{}", describe(x));
                x.spec.validate(x.batch, x.heads, x.seq).unwrap();
            }
        }
    }
}

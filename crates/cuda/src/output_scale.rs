//! A pattern's output scale on the GPU: `out = sigma O`, one factor for every head
//! ([`crate::GpuSpec::output_scale`]: 1, or `1/G` for the head-group combine of `G`
//! branches, `docs/semantics.md` section 7.6), taken inside the kernels
//! (`Params::out_scale`, `Params::delta_scale`): no pass over a finished result.
//!
//! **Forward.** Each launch's epilogue stores `sigma O / l` where it stored `O / l`; the
//! LSE stays `O`'s, as in the reference (`Partial::finish`). A launch that merges into an
//! accumulator adds `sigma O` with the merge's weights, which come from the LSEs alone: the
//! merge is linear in the outputs, so `merge(sigma A, sigma B) = sigma merge(A, B)` and
//! launches that each scale their own result build the scaled output (the merge identity's
//! zeros are scaled already).
//!
//! **Backward.** With `out = sigma O`, the upstream gradient of `O` is `sigma dout`. The
//! kernels compute, from an upstream gradient `dO`, the row sums `delta` and the LSE,
//!
//! ```text
//! dV = P^T dO,   dS = P o (dO V^T - delta),   dQ = c dS K,   dK = c dS^T Q,
//! ```
//!
//! linear in `(dO, delta)` taken together. The delta pass reads the finished output:
//! `rowsum(dout * out) = rowsum(sigma dout * O)`, which is already the `delta` of
//! `dO = sigma dout`. So the gradients are `kernels(sigma dout, delta) = sigma
//! kernels(dout, delta / sigma)`: the kernels read `dout` as given (scaling it would round
//! it to 16 bits a second time) and form `c sigma dS = P o (c sigma dP - c delta)` in one
//! FMA per element (`dscores_t`: `delta_scale = 1 / sigma`), which carries `sigma` into dQ
//! and dK, and multiply dV by `sigma` as they store it.
//!
//! **Deferred scale (distributed schedules).** A result added into (`forward_accumulate`,
//! `backward_add_into`: a ring's steps) cannot be scaled call by call: a merge of `sigma
//! O_1` with `O_2` is no scaled merge, and a running gradient sum would be multiplied
//! again at every step. Those calls refuse a scaled pattern unless the caller took the
//! scale over (`Prepared::defer_output_scale`). Then a call's launches take `out_scale = 1`:
//!
//! * forward: computes the unscaled `O` (so partials merge exactly as without a scale);
//!   the schedule multiplies each finished output by `sigma` once, after its last merge;
//! * backward: reads the finished (scaled) output as usual and still divides delta by
//!   `sigma`, so its gradients are `kernels(dout, delta / sigma) = grad / sigma`, linear
//!   and summable across steps; the schedule multiplies the summed dQ, dK, dV by `sigma`
//!   once, when they are complete (`dist::exec`).

use crate::error::{CudaError, Result};
use crate::params::Params;
use crate::tensors::Prepared;

impl Prepared {
    /// Does this call's pattern scale its output ([`crate::GpuSpec::output_scale`])?
    pub fn scales_output(&self) -> bool {
        self.out_scale != 1.0
    }

    /// Leave the output scale to the caller (module docs, "Deferred scale"): forwards
    /// compute and merge the unscaled output, backwards return gradients divided by the
    /// scale; the caller multiplies finished outputs and summed gradients by the scale
    /// (`DistPlan::output_scale`).
    pub(crate) fn defer_output_scale(&mut self) {
        self.scale_deferred = true;
    }

    /// Does this call itself multiply its results by the scale?
    fn applies_scale(&self) -> bool {
        self.scales_output() && !self.scale_deferred
    }

    /// Refuse `call`, which adds into a running result, for a pattern that scales its
    /// output in the call.
    pub(crate) fn refuse_scaled(&self, call: &'static str) -> Result<()> {
        match self.applies_scale() {
            true => Err(CudaError::Unsupported { what: call }),
            false => Ok(()),
        }
    }

    /// `params` with this call's scale factors ([`launch_factors`]).
    pub(crate) fn with_output_scale(&self, params: Params) -> Params {
        let (out_scale, delta_scale) = launch_factors(self.out_scale, self.scale_deferred);
        Params { out_scale, delta_scale, ..params }
    }
}

/// A launch's `(out_scale, delta_scale)` for a pattern of output scale `sigma` (module
/// docs): the factor of its output rows and gradients, sigma where the call applies it
/// (not `deferred`) else 1, and the backward's factor of delta, `1 / sigma` deferred or not.
fn launch_factors(sigma: f32, deferred: bool) -> (f32, f32) {
    match (sigma == 1.0, deferred) {
        (true, _) => (1.0, 1.0),
        (false, false) => (sigma, 1.0 / sigma),
        (false, true) => (1.0, 1.0 / sigma),
    }
}

#[cfg(test)]
mod tests {
    use super::launch_factors;

    /// Against the module docs' gradients, evaluated on numbers: with `out = sigma O`, the
    /// call's dV must be `sigma P^T dO` (applied) or `P^T dO` (deferred: the caller
    /// multiplies by sigma), and the kernels' `c dS = P (c dP - c delta_scale delta)` must
    /// be `sigma` (applied) or 1 (deferred) times the unscaled pattern's `P (dP - delta_O)`
    /// with `delta = sigma delta_O`.
    #[test]
    fn launch_factors_give_the_scaled_gradients() {
        let (p, dp, delta_o) = (0.3f32, 1.7f32, 0.4f32);
        for sigma in [1.0f32, 0.5, 0.25, 1.0 / 3.0] {
            for deferred in [false, true] {
                let (out_scale, delta_scale) = launch_factors(sigma, deferred);
                let call_factor = if deferred { 1.0 } else { sigma };
                assert_eq!(out_scale, call_factor, "dV's factor, sigma {sigma} deferred {deferred}");
                let delta = sigma * delta_o;
                let ds = p * (out_scale * dp - out_scale * delta_scale * delta);
                let want = call_factor * p * (dp - delta_o);
                assert!((ds - want).abs() <= 1e-6, "sigma {sigma} deferred {deferred}: {ds} vs {want}");
            }
        }
    }
}

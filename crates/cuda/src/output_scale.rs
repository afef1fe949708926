//! A pattern's output scale on the GPU: `out = sigma O`, one factor for every head
//! ([`crate::GpuSpec::output_scale`]: 1, or `1/G` for the head-group combine of `G`
//! branches, `docs/semantics.md` section 7.6).
//!
//! **Forward.** The launches compute the attention `O` (normalised, merged over
//! branches), then one pass multiplies the finished output by `sigma`; the LSE stays
//! `O`'s, as in the reference (`Partial::finish`).
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
//! kernels(dout, delta / sigma)`: the backward runs on `dout` as given with `delta`
//! divided by `sigma` after the delta pass, then multiplies dQ, dK and dV by `sigma`.
//! (Scaling `dout` instead would round it to 16 bits a second time.) dK and dV therefore
//! go through f32 sums (`backward::kv_accumulates`).
//!
//! **Deferred scale (distributed schedules).** A result added into (`forward_accumulate`,
//! `backward_add_into`: a ring's steps) cannot be scaled call by call: a merge of `sigma
//! O_1` with `O_2` is no scaled merge, and a running gradient sum would be multiplied
//! again at every step. Those calls refuse a scaled pattern unless the caller took the
//! scale over (`Prepared::defer_output_scale`). Then a call:
//!
//! * forward: computes the unscaled `O` (so partials merge exactly as without a scale);
//!   the schedule multiplies each finished output by `sigma` once, after its last merge;
//! * backward: reads the finished (scaled) output as usual and still divides delta by
//!   `sigma`, so its gradients are `kernels(dout, delta / sigma) = grad / sigma`, linear
//!   and summable across steps; the schedule multiplies the summed dQ, dK, dV by `sigma`
//!   once, when they are complete (`dist::exec`).

use crate::error::{CudaError, Result};
use crate::gpu::{Gpu, elementwise};
use crate::tensors::Prepared;
use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};

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
}

impl Gpu {
    /// `x <- s x` on the stream, by `kernel` (a module's `scale_f32`).
    fn scale_in_place(&self, kernel: &CudaFunction, x: &mut CudaSlice<f32>, s: f32) -> Result<()> {
        let n = x.len();
        let mut l = self.stream.launch_builder(kernel);
        l.arg(&mut *x).arg(&s).arg(&n);
        // SAFETY: n is the buffer's own length.
        unsafe { l.launch(elementwise(n)) }?;
        Ok(())
    }

    /// The forward's last step: the finished f32 output times the pattern's scale.
    pub(crate) fn finish_output(&self, prep: &Prepared, out: &mut CudaSlice<f32>) -> Result<()> {
        match prep.applies_scale() {
            true => self.scale_in_place(&prep.kernels.scale, out, prep.out_scale),
            false => Ok(()),
        }
    }

    /// After the delta pass: `delta / sigma` (module docs; deferred or not).
    pub(crate) fn unscale_delta(&self, prep: &mut Prepared) -> Result<()> {
        match prep.scales_output() {
            true => self.scale_in_place(&prep.kernels.scale, &mut prep.delta, 1.0 / prep.out_scale),
            false => Ok(()),
        }
    }

    /// After the launches: each f32 gradient times `sigma` (module docs).
    pub(crate) fn scale_grads(&self, prep: &Prepared, grads: [&mut CudaSlice<f32>; 3]) -> Result<()> {
        if prep.applies_scale() {
            grads.into_iter().try_for_each(|g| self.scale_in_place(&prep.kernels.scale, g, prep.out_scale))?;
        }
        Ok(())
    }
}

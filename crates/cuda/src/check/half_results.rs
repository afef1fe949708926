//! The 16-bit results the epilogue writes ([`Gpu::forward_half_into`],
//! [`Gpu::backward_half_into`]), checked inside each forward / backward case of
//! [`super::kernels::run_case`]:
//!
//! * the 16-bit output must be, word for word, the rounding of the f32 output the same
//!   kernel writes in the f32 call (`out 16-bit epilogue`: differing words, must be 0),
//!   and its LSE bit-identical (`lse 16-bit call`); where the call has several launches
//!   the rounding is a pass over the f32 result, held to the same rule;
//! * the gradients from the 16-bit output (delta taken from the rounded output, dK and dV
//!   rounded by the epilogue where one launch writes each row, dQ by a pass) must meet the
//!   case's bound against the f64 reference gradient *at the rounded output* ([`decoded`]),
//!   after the rounding of each value to 16 bits; a reference value the type cannot hold
//!   must come back as the infinity it rounds to (f16's largest finite value is 65504,
//!   which dK exceeds in the large-score cases). The rounded output is the kernel's input:
//!   against the gradient at the exact output its rounding alone can pass the bound where a
//!   row's gradient cancels. A pattern that scales its output (the head-group combine,
//!   `crate::output_scale`) rounds `sigma O`, inexact even where `O` is (a row of one key
//!   has `O = v`), and in such a row, whose exact gradient is 0, that rounding (relative
//!   `2^-8` in bf16) reached 1.2e-2 (bound 1e-2) in a bf16 case of one token; an f16
//!   expression case of two keys reached 1.14e-3 on dQ (bound 1e-3).
//!
//! Buffers start as NaN (the 16-bit word 0xFFFF is NaN in bf16 and f16), so a value the
//! kernel forgets to write fails.

use super::kernels::half_metric;
use super::{Case, Metric, grad_err};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::shape::Dtype;
use crate::tensors::{DevicePartial, DeviceTensor, Prepared};
use cudarc::driver::CudaSlice;
use ndarray::Array4;

/// A 16-bit tensor of `dims` filled with NaN.
fn poisoned(gpu: &Gpu, dims: [usize; 4]) -> Result<DeviceTensor> {
    Ok(DeviceTensor { data: gpu.stream().clone_htod(&vec![0xFFFFu16; dims.iter().product()])?, dims })
}

/// The 16-bit forward of `prep` against its f32 forward `f32_out` (module docs); returns
/// the metrics and the 16-bit output with its LSE, for [`backward`].
pub(super) fn forward(
    gpu: &Gpu,
    case: &Case,
    prep: &mut Prepared,
    [q, k, v]: [&DeviceTensor; 3],
    f32_out: &DevicePartial,
) -> Result<(Vec<Metric>, DeviceTensor, CudaSlice<f32>)> {
    let mut out = poisoned(gpu, f32_out.dims)?;
    let mut lse = gpu.filled(f32_out.lse.len(), f32::NAN)?;
    gpu.forward_half_into(prep, q, k, v, &mut out, &mut lse)?;
    let exact = gpu.download(&f32_out.out)?;
    let mut metrics = vec![half_metric("out 16-bit epilogue", case, gpu, &out, exact.iter().map(|&x| x as f64))?];
    let (got, want) = (gpu.download(&lse)?, gpu.download(&f32_out.lse)?);
    let differ = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    metrics.push(Metric { what: "lse 16-bit call", err: (differ + got.len().abs_diff(want.len())) as f64, bound: 1.0 });
    Ok((metrics, out, lse))
}

/// The exact values of 16-bit words.
fn decode(dtype: Dtype, bits: &[u16]) -> Vec<f64> {
    bits.iter()
        .map(|&b| match dtype {
            Dtype::Bf16 => half::bf16::from_bits(b).to_f64(),
            Dtype::F16 => half::f16::from_bits(b).to_f64(),
        })
        .collect()
}

/// A 16-bit tensor's exact values, shaped as it is.
pub(super) fn decoded(gpu: &Gpu, case: &Case, x: &DeviceTensor) -> Result<Array4<f64>> {
    let values = decode(case.dtype, &gpu.stream().clone_dtoh(&x.data)?);
    let [b, n, h, d] = x.dims;
    Ok(Array4::from_shape_vec((b, n, h, d), values).expect("a tensor's dims hold its length"))
}

/// The 16-bit backward from the 16-bit forward `(out, lse)` against `references` (dq, dk,
/// dv): the f64 gradients at that rounded output, with the case's `floors` and `bound`.
#[allow(clippy::too_many_arguments)] // the inputs of one backward and what it is held to
pub(super) fn backward(
    gpu: &Gpu,
    case: &Case,
    prep: &mut Prepared,
    [q, k, v]: [&DeviceTensor; 3],
    (out, lse): (&DeviceTensor, &CudaSlice<f32>),
    dout: &DeviceTensor,
    references: &[Vec<f64>],
    (floors, bound): ([f64; 3], f64),
) -> Result<Vec<Metric>> {
    let (mut dq, mut dk, mut dv) = (poisoned(gpu, q.dims)?, poisoned(gpu, k.dims)?, poisoned(gpu, v.dims)?);
    gpu.backward_half_into(prep, q, k, v, (out, lse), dout, [&mut dq, &mut dk, &mut dv])?;
    let names = ["dq 16-bit from 16-bit out", "dk 16-bit from 16-bit out", "dv 16-bit from 16-bit out"];
    let mut metrics = Vec::new();
    for (((what, g), reference), floor) in names.into_iter().zip([&dq, &dk, &dv]).zip(references).zip(floors) {
        let got = decode(case.dtype, &gpu.stream().clone_dtoh(&g.data)?);
        metrics.push(Metric { what, err: representable_err(case.dtype, &got, reference, floor), bound });
    }
    Ok(metrics)
}

/// [`grad_err`] over the values the 16-bit type can hold. A reference value beyond the
/// type's largest finite value (dK of the large-score f16 cases: `scale dS^T Q` with
/// |q| ~ 70) rounds to an infinity, and the result must be that same infinity; such
/// values are left out of the relative error, any other mismatch makes it infinite.
fn representable_err(dtype: Dtype, got: &[f64], reference: &[f64], floor: f64) -> f64 {
    let overflows = |x: f64| match dtype {
        Dtype::Bf16 => half::bf16::from_f32(x as f32).is_infinite(),
        Dtype::F16 => half::f16::from_f32(x as f32).is_infinite(),
    };
    let mut kept = (Vec::with_capacity(got.len()), Vec::with_capacity(got.len()));
    for (&g, &r) in got.iter().zip(reference) {
        if overflows(r) {
            if g != r.signum() * f64::INFINITY {
                return f64::INFINITY;
            }
        } else {
            kept.0.push(g);
            kept.1.push(r);
        }
    }
    grad_err(&kept.0, &kept.1, floor)
}

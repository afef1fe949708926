//! `ringdil attend --device gpu`: the attention of the user's tensors on ringdil-cuda's
//! kernels, with the error against the f64 reference on request.
//!
//! The kernels read 16-bit inputs, so q, k and v are rounded on the host to bf16 or f16
//! (`--dtype`; to nearest, ties to even). That rounding is the main difference from the
//! CPU path: bf16 keeps 8 significant bits (a relative step of 2^-8 = 0.4%), f16 keeps 11
//! (2^-11) but its largest finite value is 65504, so a larger input is an error here, not
//! an infinity. The kernels accumulate in f32 and write the f32 output and LSE, which
//! `attend` stores as f32 `.npy` (no rounding of the results).
//!
//! `--check` runs the reference (f64) twice: on the rounded inputs, where the difference
//! is the kernels' own (f32 sums, 16-bit P in P V; `gpu_check` bounds it by 1e-2 for bf16
//! and 1e-3 for f16), and on the inputs as read, which adds the inputs' rounding: the
//! difference a user of the GPU path sees.

use crate::tensor_io;
use ndarray::{Array3, Array4, ArrayView3};
use ringdil_cuda::check::{bound, inputs::round};
use ringdil_cuda::{Chunk, Dtype, Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::compare::{pointwise_err, rel_err};
use ringdil_reference::{Spec, attention};
use serde::Serialize;
use std::error::Error;

/// What the GPU run was, for the terminal and `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct GpuReport {
    /// The device and its kernel family, as `gpu_check` names them.
    pub device: String,
    /// The type the inputs were rounded to.
    pub inputs: &'static str,
    pub check: Option<CheckReport>,
}

/// The GPU result against the reference, by the project's measures
/// (`ringdil_reference::compare`): `rel_err` (`||x - ref|| / ||ref||`) of the output,
/// `pointwise_err` (largest `|x - ref| / (1 + |ref|)`; `-inf` on both sides agrees) of the
/// LSE.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Against the reference on the rounded inputs: the kernels' error.
    pub out_vs_rounded_inputs: f64,
    pub lse_vs_rounded_inputs: f64,
    /// Against the reference on the inputs as read: the kernels' error and the rounding's.
    pub out_vs_inputs: f64,
    /// `gpu_check`'s bound for the kernels' error at this dtype.
    pub bound: f64,
    /// Rows where exactly one of the two has no key (LSE -inf): must be 0.
    pub empty_row_mismatches: usize,
}

/// Output `[batch, seq, heads, v's head_dim]`, LSE `[batch, heads, seq]` and the report.
pub type GpuResult = (Array4<f32>, Array3<f32>, GpuReport);

/// Attention of `q` over `k`, `v` under `spec` (the kernels' form of its pattern:
/// `pattern`) on the first CUDA device, inputs rounded to `dtype`; with `check`, the
/// error against the reference. Shapes and values are checked before the device is
/// looked for, so their errors do not depend on having one.
pub fn run(
    q: &Array4<f64>,
    k: &Array4<f64>,
    v: &Array4<f64>,
    spec: &Spec,
    pattern: GpuPattern,
    dtype: Dtype,
    check: bool,
) -> Result<GpuResult, Box<dyn Error>> {
    let (batch, seq, heads, head_dim) = q.dim();
    // v's head dim may differ from q's (MLA's 128 at 192); the kernels say which pairs run.
    let value_dim = v.dim().3;
    if k.shape()[..3] != v.shape()[..3] {
        return Err(format!("v: shape {:?} differs from k's {:?} in batch, seq or heads", v.shape(), k.shape()).into());
    }
    let (kb, kn, kv_heads, kd) = k.dim();
    if (kb, kn, kd) != (batch, seq, head_dim) {
        return Err(format!(
            "k: shape {:?} does not match q's {:?} in batch, seq or head_dim (k and v may have fewer heads)",
            k.shape(),
            q.shape()
        )
        .into());
    }
    // A materialised pattern's table is built on the host: what it cannot hold (a key
    // counted twice) is an error here, on any machine.
    if let GpuPattern::Table(t) = &pattern {
        ringdil_cuda::mask_table::tables(t, heads, seq)?;
    }
    let (qh, qr) = rounded("q", q, dtype)?;
    let (kh, kr) = rounded("k", k, dtype)?;
    let (vh, vr) = rounded("v", v, dtype)?;
    let gspec = GpuSpec {
        pattern,
        causal: spec.causal,
        key_lengths: spec.key_lengths.clone(),
        scale: spec.scale,
        documents: spec.documents.clone(),
    };
    let gpu = Gpu::probe()?.ok_or("--device gpu: no CUDA device (libcuda not found or no GPU visible)")?;
    let shape = Shape::square(batch, seq, heads, head_dim).with_kv_heads(kv_heads).with_value_dim(value_dim);
    let mut prep = gpu.prepare(&shape, dtype, &gspec, &Chunk::whole(&shape))?;
    let (qd, kd, vd) =
        (gpu.upload(&qh, shape.q_dims())?, gpu.upload(&kh, shape.k_dims())?, gpu.upload(&vh, shape.v_dims())?);
    let mut part = gpu.alloc_partial(&prep)?;
    gpu.forward_into(&mut prep, &qd, &kd, &vd, &mut part)?;
    gpu.synchronize()?;
    let out = Array4::from_shape_vec(shape.out_dims(), gpu.download(&part.out)?)?;
    let lse = Array3::from_shape_vec((batch, heads, seq), gpu.download(&part.lse)?)?;
    let check = match check {
        false => None,
        true => {
            let on_rounded = attention(qr.view(), kr.view(), vr.view(), spec)?;
            let on_inputs = attention(q.view(), k.view(), v.view(), spec)?;
            let out64 = out.mapv(f64::from);
            Some(CheckReport {
                out_vs_rounded_inputs: rel_err(out64.iter(), on_rounded.out.iter()),
                lse_vs_rounded_inputs: pointwise_err(lse.mapv(f64::from).iter(), on_rounded.lse.iter()),
                out_vs_inputs: rel_err(out64.iter(), on_inputs.out.iter()),
                bound: bound(dtype),
                empty_row_mismatches: empty_row_mismatches(lse.view(), on_rounded.lse.view()),
            })
        }
    };
    let report = GpuReport { device: gpu.describe()?, inputs: dtype_name(dtype), check };
    Ok((out, lse, report))
}

/// The name `--dtype` takes for `dtype`.
pub fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::Bf16 => "bf16",
        Dtype::F16 => "f16",
    }
}

/// `x` rounded to `dtype`: the 16-bit words the kernels read and their exact f64 values.
/// A value that is not finite, or that rounds to infinity (f16 beyond 65504), is an
/// error naming the tensor, the index and the value.
fn rounded(name: &str, x: &Array4<f64>, dtype: Dtype) -> Result<(Vec<u16>, Array4<f64>), String> {
    let mut bits = Vec::with_capacity(x.len());
    let mut exact = Vec::with_capacity(x.len());
    for (index, &value) in x.indexed_iter() {
        let (word, r) = round(value, dtype);
        if !r.is_finite() {
            let i = [index.0, index.1, index.2, index.3];
            return Err(match value.is_finite() {
                false => format!("{name}: value {value} at {i:?} is not finite"),
                true => format!(
                    "{name}: value {value} at {i:?} exceeds {}'s largest finite value (65504); use --dtype bf16",
                    dtype_name(dtype)
                ),
            });
        }
        bits.push(word);
        exact.push(r);
    }
    Ok((bits, Array4::from_shape_vec(x.raw_dim(), exact).expect("same length as x")))
}

/// The number of rows where exactly one of `lse` and `r` is -inf (no key).
fn empty_row_mismatches(lse: ArrayView3<f32>, r: ArrayView3<f64>) -> usize {
    lse.iter().zip(r.iter()).filter(|(a, b)| a.is_finite() != b.is_finite()).count()
}

/// Write the GPU's output (and LSE) as f32 `.npy`.
pub fn write(out: &std::path::Path, lse: Option<&std::path::Path>, result: &GpuResult) -> Result<(), Box<dyn Error>> {
    tensor_io::write_npy(out, &result.0)?;
    if let Some(path) = lse {
        tensor_io::write_npy(path, &result.1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_f16_cannot_hold_are_errors_naming_tensor_index_and_value() {
        let mut x = Array4::<f64>::zeros((1, 2, 1, 2));
        x[[0, 1, 0, 1]] = 7.0e4;
        let e = rounded("k", &x, Dtype::F16).unwrap_err();
        assert_eq!(e, "k: value 70000 at [0, 1, 0, 1] exceeds f16's largest finite value (65504); use --dtype bf16");
        assert!(rounded("k", &x, Dtype::Bf16).is_ok());
        x[[0, 0, 0, 1]] = f64::NAN;
        assert_eq!(rounded("q", &x, Dtype::Bf16).unwrap_err(), "q: value NaN at [0, 0, 0, 1] is not finite");
    }

    #[test]
    fn rounding_keeps_the_words_and_their_exact_values() {
        let x = Array4::from_shape_vec((1, 1, 1, 4), vec![1.0, 1.0 + 2f64.powi(-9), -3.3, 1e-3]).unwrap();
        let (bits, exact) = rounded("q", &x, Dtype::Bf16).unwrap();
        for ((&b, &e), &v) in bits.iter().zip(exact.iter()).zip(x.iter()) {
            assert_eq!(f64::from(half::bf16::from_bits(b)), e);
            assert!((e - v).abs() <= v.abs() * 2f64.powi(-9), "{v} -> {e}");
        }
        // 1 + 2^-9 is the tie between 1 and 1 + 2^-8: to even, 1.
        assert_eq!(exact[[0, 0, 0, 1]], 1.0);
    }

    #[test]
    fn rows_empty_on_one_side_only_are_counted() {
        let lse = Array3::from_shape_vec((1, 1, 4), vec![1.0f32, f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY]).unwrap();
        let reference =
            Array3::from_shape_vec((1, 1, 4), vec![1.25, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.5]).unwrap();
        assert_eq!(empty_row_mismatches(lse.view(), reference.view()), 2);
    }
}

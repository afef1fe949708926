//! One kernel-check case on the GPU: inputs drawn and rounded ([`super::Logits`]), outputs
//! poisoned with NaN, the kernel run, and every output compared with the f64 reference on
//! the same rounded inputs ([`super::Metric`]), rows with no key exactly
//! ([`super::extreme`]).

use super::extreme::{exact_empty, exact_zero_grads};
use super::half_results;
use super::{
    Case, Kind, Logits, MERGE_BOUND, Metric, Outcome, bound_for, describe, grad_err, grad_floor_scales,
    large_lse_bound, lse_err, partial_bound, rounded,
};
use crate::error::{CudaError, Result};
use crate::gpu::Gpu;
use crate::shape::{Chunk, Dtype, Shape};
use crate::tensors::{DevicePartial, DeviceTensor};
use ndarray::{Array3, Array4, Axis, s};
use ringdil_reference::compare::rel_err;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::{Attention, Partial, Spec, attend_chunk, attention, attention_backward};

fn to_f64(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

pub(super) fn partial_to_host(gpu: &Gpu, p: &DevicePartial) -> Result<Partial<f64>> {
    let [b, n, h, d] = p.dims;
    let out = Array4::from_shape_vec((b, n, h, d), to_f64(&gpu.download(&p.out)?)).expect("dims");
    let lse = Array3::from_shape_vec((b, h, n), to_f64(&gpu.download(&p.lse)?)).expect("dims");
    Ok(Partial { out, lse })
}

/// Out and LSE of `got` against `want`, named `out` and `lse`: the relative error of out; the
/// relative error of the LSE for unit scores, its error relative to the magnitude for
/// large ones ([`lse_err`]); and the exact identity of the rows with no key.
fn compare_partial(
    metrics: &mut Vec<Metric>,
    case: &Case,
    got: &Partial<f64>,
    want: &Partial<f64>,
    [out, lse]: [&'static str; 2],
) {
    let bound = bound_for(case.dtype, case.logits);
    metrics.push(Metric { what: out, err: rel_err(got.out.iter(), want.out.iter()), bound });
    metrics.push(match case.logits {
        Logits::Unit => Metric { what: lse, err: rel_err(got.lse.iter(), want.lse.iter()), bound },
        Logits::Large | Logits::Offset => Metric {
            what: lse,
            err: lse_err(got.lse.iter(), want.lse.iter(), partial_bound(case.logits)),
            bound: large_lse_bound(),
        },
    });
    metrics.extend(empty_metric("empty rows", case, exact_empty(got, want)));
}

/// The exact check of rows with no key as a metric: the number of values that are not
/// the identity (it passes at 0). None where there is no such row, except in a case built
/// to have one, which then fails with an infinite error.
fn empty_metric(what: &'static str, case: &Case, violations: Option<usize>) -> Option<Metric> {
    match violations {
        Some(n) => Some(Metric { what, err: n as f64, bound: 1.0 }),
        None if case.empty_rows => Some(Metric { what, err: f64::INFINITY, bound: 1.0 }),
        None => None,
    }
}

/// An input tensor: the 16-bit words a kernel reads and their exact values.
pub(super) type Rounded = (Vec<u16>, Array4<f64>);

/// A case's q, k (shaped by its [`Logits`]) and v, rounded, drawn in this order from its
/// seed, and the generator, from which the case draws the rest (d_out, ring rows, the
/// merge's cut) in [`run_case`]'s order.
pub(super) fn draw(case: &Case, seed: u64) -> (SplitMix64, [Rounded; 3]) {
    let mut rng = SplitMix64::new(seed);
    let dims = [case.batch, case.seq, case.heads, case.head_dim];
    let kv_dims = [case.batch, case.seq, case.kv_heads, case.head_dim];
    let v_dims = [case.batch, case.seq, case.kv_heads, case.value_dim];
    let q = case.logits.rounded(dims, case.dtype, true, &mut rng);
    let k = case.logits.rounded(kv_dims, case.dtype, false, &mut rng);
    let v = rounded(v_dims, case.dtype, &mut rng);
    (rng, [q, k, v])
}

/// Run one case on the GPU and compare with the reference.
pub fn run_case(gpu: &Gpu, case: &Case, seed: u64) -> Result<Outcome> {
    let (mut rng, [(qb, q), (kb, k), (vb, v)]) = draw(case, seed);
    let (b, n, h, d, dv) = (case.batch, case.seq, case.heads, case.head_dim, case.value_dim);
    let (dims, kv_dims) = ([b, n, h, d], [b, n, case.kv_heads, d]);
    let (v_dims, out_dims) = ([b, n, case.kv_heads, dv], [b, n, h, dv]);
    let reference_spec = case.spec.to_reference();
    let bound = bound_for(case.dtype, case.logits);
    let mut metrics = Vec::new();
    let all: Vec<usize> = (0..n).collect();
    match case.kind {
        Kind::TwoStreams => return super::streams::run(gpu, case, seed),
        Kind::Forward | Kind::Backward => {
            let shape = Shape::square(b, n, h, d).with_kv_heads(case.kv_heads).with_value_dim(dv);
            let mut prep = gpu.prepare(&shape, case.dtype, &case.spec, &Chunk::whole(&shape))?;
            let (qd, kd, vd) = (gpu.upload(&qb, dims)?, gpu.upload(&kb, kv_dims)?, gpu.upload(&vb, v_dims)?);
            let mut out = poisoned_partial(gpu, out_dims)?;
            gpu.forward_into(&mut prep, &qd, &kd, &vd, &mut out)?;
            let got = partial_to_host(gpu, &out)?;
            let half = gpu.output_half(&prep, &out)?;
            metrics.push(half_metric("out 16-bit", case, gpu, &half, got.out.iter().copied())?);
            let (m, out16, lse16) = half_results::forward(gpu, case, &mut prep, [&qd, &kd, &vd], &out)?;
            metrics.extend(m);
            let want = attention(q.view(), k.view(), v.view(), &reference_spec)?;
            let want_partial = Partial { out: want.out.clone(), lse: want.lse.clone() };
            compare_partial(
                &mut metrics,
                case,
                &got,
                &want_partial,
                [quantity!(case.logits, "out"), quantity!(case.logits, "lse")],
            );
            if case.kind == Kind::Backward {
                let (dob, dout) = rounded(out_dims, case.dtype, &mut rng);
                let dod = gpu.upload(&dob, out_dims)?;
                let mut grads = crate::tensors::DeviceGrads {
                    dq: gpu.filled(shape.q_len(), f32::NAN)?,
                    dk: gpu.filled(shape.k_len(), f32::NAN)?,
                    dv: gpu.filled(shape.v_len(), f32::NAN)?,
                };
                gpu.backward_into(&mut prep, &qd, &kd, &vd, &out, &dod, &mut grads)?;
                let want_g = attention_backward(
                    q.view(),
                    k.view(),
                    v.view(),
                    &reference_spec,
                    &Attention { out: want.out, lse: want.lse.clone() },
                    dout.view(),
                )?;
                let references: Vec<Vec<f64>> =
                    [&want_g.dq, &want_g.dk, &want_g.dv].iter().map(|r| r.iter().copied().collect()).collect();
                let names = [quantity!(case.logits, "dq"), quantity!(case.logits, "dk"), quantity!(case.logits, "dv")];
                let floors = grad_floor_scales(&q, &k);
                // The 16-bit path takes delta from the rounded output, so its reference is
                // the exact gradient at the rounded output (`half_results`): the rounding is
                // its input, and where a row's gradient cancels (two keys, or a scaled
                // output's row of one key) that rounding alone can exceed the bound.
                let rounded = Attention { out: half_results::decoded(gpu, case, &out16)?, lse: want.lse.clone() };
                let g = attention_backward(q.view(), k.view(), v.view(), &reference_spec, &rounded, dout.view())?;
                let at_rounded: Vec<Vec<f64>> =
                    [&g.dq, &g.dk, &g.dv].iter().map(|r| r.iter().copied().collect()).collect();
                metrics.extend(half_results::backward(
                    gpu,
                    case,
                    &mut prep,
                    [&qd, &kd, &vd],
                    (&out16, &lse16),
                    &dod,
                    &at_rounded,
                    (floors, bound),
                )?);
                let mut first = Vec::new();
                for (((what, buf), reference), floor) in
                    names.into_iter().zip([&grads.dq, &grads.dk, &grads.dv]).zip(&references).zip(floors)
                {
                    let got = to_f64(&gpu.download(buf)?);
                    metrics.push(Metric { what, err: grad_err(&got, reference, floor), bound });
                    first.push(got);
                }
                // The gradients in the inputs' type: each the rounding of its f32 value.
                let halves = gpu.grads_half(&prep, &grads)?;
                for ((what, half), exact) in
                    ["dq 16-bit", "dk 16-bit", "dv 16-bit"].into_iter().zip(&halves).zip(&first)
                {
                    metrics.push(half_metric(what, case, gpu, half, exact.iter().copied())?);
                }
                // Adding mode (a ring rank's running sums): a second pass onto the first
                // must add the same gradients again; a pattern that scales its output
                // (the head-group combine) cannot be added into and must say so.
                let violations = if prep.scales_output() {
                    let refused = gpu.backward_add_into(&mut prep, &qd, &kd, &vd, &out, None, &dod, grads.as_mut());
                    let named = matches!(refused, Err(CudaError::Unsupported { what }) if what.contains("head-group"));
                    metrics.push(Metric { what: "adding refused", err: if named { 0.0 } else { 1.0 }, bound: 1.0 });
                    exact_zero_grads(case, &want.lse, [&first[0], &first[1], &first[2]])
                } else {
                    gpu.backward_add_into(&mut prep, &qd, &kd, &vd, &out, None, &dod, grads.as_mut())?;
                    let names = [
                        quantity!(case.logits, "dq added"),
                        quantity!(case.logits, "dk added"),
                        quantity!(case.logits, "dv added"),
                    ];
                    let mut twice = Vec::new();
                    for ((((what, buf), reference), first), floor) in names
                        .into_iter()
                        .zip([&grads.dq, &grads.dk, &grads.dv])
                        .zip(&references)
                        .zip(&first)
                        .zip(floors)
                    {
                        let sum = to_f64(&gpu.download(buf)?);
                        let added: Vec<f64> = sum.iter().zip(first).map(|(b, a)| b - a).collect();
                        metrics.push(Metric { what, err: grad_err(&added, reference, floor), bound });
                        twice.push(sum);
                    }
                    // Exact zeros of rows with no key, after one pass and after two.
                    let zeros = [&first, &twice].map(|g| exact_zero_grads(case, &want.lse, [&g[0], &g[1], &g[2]]));
                    zeros[0].zip(zeros[1]).map(|(a, b)| a + b)
                };
                metrics.extend(empty_metric("empty grads", case, violations));
            }
        }
        Kind::RingStep => {
            // Query rows at positions qa + i*qs against key rows ka + j*ks of the global
            // sequence (contiguous ring pieces, or a striped rank's rows).
            let (qc, kc) = ring_rows(case, &mut rng);
            let got = ring_step(gpu, case, (&qb, qc), (&kb, &vb, kc))?;
            let got = partial_to_host(gpu, &got)?;
            let want = ring_reference(&q, &k, &v, (qc, kc), &reference_spec)?;
            compare_partial(
                &mut metrics,
                case,
                &got,
                &want,
                [quantity!(case.logits, "out"), quantity!(case.logits, "lse")],
            );
        }
        Kind::Merge => {
            // All queries; keys split in two ring steps [0, cut) and [cut, n), merged.
            if n < 2 {
                return run_case(gpu, &Case { kind: Kind::Forward, ..case.clone() }, seed);
            }
            let cut = rng.range(1, n - 1);
            let all_rows = Rows { start: 0, len: n, stride: 1 };
            let left = ring_step(gpu, case, (&qb, all_rows), (&kb, &vb, Rows { start: 0, len: cut, stride: 1 }))?;
            let right =
                ring_step(gpu, case, (&qb, all_rows), (&kb, &vb, Rows { start: cut, len: n - cut, stride: 1 }))?;
            let mut merged = poisoned_partial(gpu, out_dims)?;
            gpu.merge_into(&left, &right, &mut merged)?;
            let got = partial_to_host(gpu, &merged)?;
            let want = attend_chunk(q.view(), &all, k.view(), v.view(), &all, n, &reference_spec)?;
            compare_partial(
                &mut metrics,
                case,
                &got,
                &want,
                [quantity!(case.logits, "out"), quantity!(case.logits, "lse")],
            );
            // The merge kernel itself against the reference merge of the same partials.
            let exact = partial_to_host(gpu, &left)?.merge(&partial_to_host(gpu, &right)?)?;
            metrics.push(Metric {
                what: "merge kernel out",
                err: rel_err(got.out.iter(), exact.out.iter()),
                bound: MERGE_BOUND,
            });
            metrics.push(Metric {
                what: "merge kernel lse",
                err: rel_err(got.lse.iter(), exact.lse.iter()),
                bound: MERGE_BOUND,
            });
            // Inputs keep their meaning: the left partial is still the left ring step.
            let left_ref = attend_chunk(
                q.view(),
                &all,
                k.slice(s![.., 0..cut, .., ..]),
                v.slice(s![.., 0..cut, .., ..]),
                &(0..cut).collect::<Vec<_>>(),
                n,
                &reference_spec,
            )?;
            let left_now = partial_to_host(gpu, &left)?;
            metrics.push(Metric {
                what: quantity!(case.logits, "merge input intact"),
                err: rel_err(left_now.out.iter(), left_ref.out.iter()),
                bound,
            });
            // The fused merge: the right step accumulated into the left result in place.
            let mut running =
                ring_step(gpu, case, (&qb, all_rows), (&kb, &vb, Rows { start: 0, len: cut, stride: 1 }))?;
            let right_rows = Rows { start: cut, len: n - cut, stride: 1 };
            ring_step_into(gpu, case, (&qb, all_rows), (&kb, &vb, right_rows), &mut running, true)?;
            let fused = partial_to_host(gpu, &running)?;
            let names = [quantity!(case.logits, "accumulate out"), quantity!(case.logits, "accumulate lse")];
            compare_partial(&mut metrics, case, &fused, &want, names);
        }
    }
    Ok(Outcome { case: describe(case), metrics })
}

/// A 16-bit result against the rounding (to nearest, ties to even: `half`'s `from_f32`)
/// of the f32 values it was converted from (`exact`, widened to f64 without rounding):
/// the number of words that differ (the metric passes at 0). (Not [`round`](super::round): `half`'s
/// `bf16::from_f64` rounds some f32-exact values differently, about 1 in 22,000.)
pub(super) fn half_metric(
    what: &'static str,
    case: &Case,
    gpu: &Gpu,
    half: &DeviceTensor,
    exact: impl Iterator<Item = f64>,
) -> Result<Metric> {
    let bits = gpu.stream().clone_dtoh(&half.data)?;
    let rounded = |x: f64| match case.dtype {
        Dtype::Bf16 => half::bf16::from_f32(x as f32).to_bits(),
        Dtype::F16 => half::f16::from_f32(x as f32).to_bits(),
    };
    let differ = bits.iter().zip(exact).filter(|&(&b, x)| b != rounded(x)).count();
    let missing = bits.len().abs_diff(half.dims.iter().product());
    Ok(Metric { what, err: (differ + missing) as f64, bound: 1.0 })
}

/// Rows of one side of a ring step: global positions `start + i * stride`, `i < len`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rows {
    start: usize,
    len: usize,
    stride: usize,
}

impl Rows {
    pub(super) fn positions(&self) -> Vec<usize> {
        (0..self.len).map(|i| self.start + i * self.stride).collect()
    }
}

/// Random non-empty rows of `0..n` starting in `first..=last`: contiguous half of the
/// time, else a stride of 2 to 4 (a striped layout's rank).
fn chunk_from(first: usize, last: usize, n: usize, rng: &mut SplitMix64) -> Rows {
    let stride = if n < 8 || rng.uniform() < 0.5 { 1 } else { rng.range(2, 4) };
    let start = rng.range(first, last);
    Rows { start, len: rng.range(1, (n - 1 - start) / stride + 1), stride }
}

/// The query and key rows of a ring step, random ([`chunk_from`]). In a case built to
/// have rows with no key (causal), the key rows start after the first query row, which
/// then sees none of them, and (where there is one) at or before the last, which sees
/// some: both kinds of rows in one launch.
pub(super) fn ring_rows(case: &Case, rng: &mut SplitMix64) -> (Rows, Rows) {
    let n = case.seq;
    if case.empty_rows {
        let q = chunk_from(0, n - 2, n, rng);
        let last = q.start + (q.len - 1) * q.stride;
        (q, chunk_from(q.start + 1, last.max(q.start + 1), n, rng))
    } else {
        (chunk_from(0, n - 1, n, rng), chunk_from(0, n - 1, n, rng))
    }
}

/// The reference of a ring step: queries `qc` of `q` over keys `kc` of `k`, `v`.
pub(super) fn ring_reference(
    q: &Array4<f64>,
    k: &Array4<f64>,
    v: &Array4<f64>,
    (qc, kc): (Rows, Rows),
    spec: &Spec,
) -> ringdil_reference::Result<Partial<f64>> {
    let (qpos, kpos) = (qc.positions(), kc.positions());
    let (kr, vr) = (k.select(Axis(1), &kpos), v.select(Axis(1), &kpos));
    attend_chunk(q.select(Axis(1), &qpos).view(), &qpos, kr.view(), vr.view(), &kpos, q.dim().1, spec)
}

/// One ring step on the GPU: query rows `qr` over key rows `kr`.
fn ring_step(
    gpu: &Gpu,
    case: &Case,
    (qb, qr): (&[u16], Rows),
    (kb, vb, kr): (&[u16], &[u16], Rows),
) -> Result<DevicePartial> {
    let mut out = poisoned_partial(gpu, [case.batch, qr.len, case.heads, case.value_dim])?;
    ring_step_into(gpu, case, (qb, qr), (kb, vb, kr), &mut out, false)?;
    Ok(out)
}

/// One ring step on the GPU, written to `out`, or (`accumulate`) merged into the partial
/// `out` holds ([`Gpu::forward_accumulate`]).
fn ring_step_into(
    gpu: &Gpu,
    case: &Case,
    (qb, qr): (&[u16], Rows),
    (kb, vb, kr): (&[u16], &[u16], Rows),
    out: &mut DevicePartial,
    accumulate: bool,
) -> Result<()> {
    let (b, n, h, hk, d) = (case.batch, case.seq, case.heads, case.kv_heads, case.head_dim);
    let rows = |src: &[u16], heads: usize, width: usize, r: Rows| -> Vec<u16> {
        let a = ndarray::ArrayView4::from_shape((b, n, heads, width), src).expect("dims");
        a.select(Axis(1), &r.positions()).iter().copied().collect()
    };
    let shape = Shape {
        batch: b,
        heads: h,
        kv_heads: hk,
        head_dim: d,
        value_dim: case.value_dim,
        q_rows: qr.len,
        k_rows: kr.len,
    };
    let chunk = Chunk { q_stride: qr.stride, k_stride: kr.stride, ..Chunk::new(qr.start, kr.start, n) };
    let mut prep = gpu.prepare(&shape, case.dtype, &case.spec, &chunk)?;
    let qd = gpu.upload(&rows(qb, h, d, qr), shape.q_dims())?;
    let kd = gpu.upload(&rows(kb, hk, d, kr), shape.k_dims())?;
    let vd = gpu.upload(&rows(vb, hk, case.value_dim, kr), shape.v_dims())?;
    match accumulate {
        true => gpu.forward_accumulate(&mut prep, &qd, &kd, &vd, out),
        false => gpu.forward_into(&mut prep, &qd, &kd, &vd, out),
    }
}

pub(super) fn poisoned_partial(gpu: &Gpu, dims: [usize; 4]) -> Result<DevicePartial> {
    let [b, n, h, d] = dims;
    Ok(DevicePartial { out: gpu.filled(b * n * h * d, f32::NAN)?, lse: gpu.filled(b * h * n, f32::NAN)?, dims })
}

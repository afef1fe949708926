//! The GPU check: every kernel against the f64 reference on fresh random inputs.
//!
//! Each case draws q, k, v (and d_out) from a seed, rounds them to bf16 or f16, and runs
//! the reference in f64 on *the same rounded values*, so the only differences are the
//! kernel's own arithmetic (16-bit P and dS operands of the tensor-core products, f32
//! accumulation, exp2 approximations). The metric is the relative error
//! `||gpu - ref||_2 / ||ref||_2` over a whole tensor ([`rel_err`], the project's measure),
//! with the bounds of [`bound`]:
//!
//! * bf16: `< 1e-2` (8-bit mantissa: one rounding of P is ~2e-3 relative);
//! * f16: `< 1e-3` (11-bit mantissa: ~2.4e-4).
//!
//! Gradients use the same measure with the reference's norm floored at
//! [`GRAD_RMS_FLOOR`]` * sqrt(len)` ([`floor_err`]), since a gradient can be exactly zero
//! (one key per row) and then only rounding noise is left to compare.
//!
//! The LSE is measured like the output: `-inf` must be exactly where the reference's is
//! (rows with no key; an unmatched infinity is an infinite error), and the finite values
//! are within the same bound. Outputs are poisoned with NaN before each launch, so a
//! row the kernel forgets to write fails, and a NaN anywhere fails (every comparison is
//! written so that NaN is not below a bound). Sequence lengths include primes and lengths
//! that are not multiples of the 64-row tile.

use crate::error::Result;
use crate::gpu::{DevicePartial, Gpu};
use crate::launch::{Chunk, Dtype, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use ndarray::{Array3, Array4, Axis, s};
use ringdil_reference::compare::{floor_err, rel_err, worst as worst_of};
use ringdil_reference::pattern::{BlockSparse, Dilated};
use ringdil_reference::random::SplitMix64;
use ringdil_reference::{Attention, Partial, attend_chunk, attention, attention_backward};

/// The relative-error bound of an element type (module docs).
pub fn bound(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 1e-2,
        Dtype::F16 => 1e-3,
    }
}

/// The merge kernel is f32 arithmetic on f32 inputs: compared with the reference merge of
/// the same inputs in f64, it must agree to f32 rounding.
pub const MERGE_BOUND: f64 = 1e-5;

/// The smallest root-mean-square a gradient is measured against. A gradient can be
/// exactly zero in exact arithmetic (a row with one key: `P = 1`, so
/// `dS = P (dP - delta) = 0`, hence `dQ = 0` and that key's `dK = 0`); the kernel then
/// returns f32 rounding noise (~1e-6) and `||gpu - ref|| / ||ref||` divides noise by
/// noise. Gradients of these unit-normal problems have an RMS of 3e-2 or more whenever
/// they are not degenerate, so a floor of 1e-2 leaves real cases relative and keeps the
/// degenerate ones meaningful (an absolute error of ~1e-4 of the natural scale).
pub const GRAD_RMS_FLOOR: f64 = 1e-2;

/// Relative error of a gradient, with the norm of the reference floored at
/// `GRAD_RMS_FLOOR * sqrt(len)` (see there).
pub fn grad_err(a: &[f64], b: &[f64]) -> f64 {
    floor_err(a, b, GRAD_RMS_FLOOR * (b.len() as f64).sqrt())
}

/// What a case exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One forward call over the whole sequence.
    Forward,
    /// One forward call of a query chunk over a key chunk (a ring step).
    RingStep,
    /// Two ring steps over disjoint key chunks, merged on the GPU.
    Merge,
    /// Forward, then dQ, dK, dV.
    Backward,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub kind: Kind,
    pub name: String,
    pub dtype: Dtype,
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub seq: usize,
    pub spec: GpuSpec,
}

/// One measured quantity of a case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Metric {
    pub what: &'static str,
    pub err: f64,
    pub bound: f64,
}

impl Metric {
    pub fn passed(&self) -> bool {
        self.err < self.bound // false for NaN
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub case: String,
    pub metrics: Vec<Metric>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.metrics.iter().all(Metric::passed)
    }
}

/// Sequence lengths: primes and non-multiples of 64 first, a few exact multiples.
const LENGTHS: [usize; 12] = [1, 61, 97, 127, 131, 192, 257, 263, 509, 521, 640, 1021];

/// The case list of one run, sizes and patterns drawn from `seed`. `quick` keeps the
/// sizes small (the `cargo test` version).
pub fn cases(seed: u64, quick: bool) -> Vec<Case> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let mut add = |kind: Kind, name: &str, spec: GpuSpec, rng: &mut SplitMix64| {
                let seq = if quick {
                    LENGTHS[rng.range(0, 6)]
                } else if rng.uniform() < 0.75 {
                    LENGTHS[rng.range(0, LENGTHS.len() - 1)]
                } else {
                    rng.range(2, 1100)
                };
                let (batch, heads) = (rng.range(1, 2), rng.range(1, 4));
                let spec = fit_spec(spec, batch, seq, rng);
                out.push(Case { kind, name: name.into(), dtype, batch, heads, head_dim, seq, spec });
            };
            let causal = rng.uniform() < 0.5;
            let dense = GpuSpec::new(GpuPattern::Dense);
            add(Kind::Forward, "dense", dense.clone(), &mut rng);
            add(Kind::Forward, "dense causal", dense.clone().causal(true), &mut rng);
            add(Kind::Forward, "causal + key padding", dense.clone().causal(true).key_lengths(vec![]), &mut rng);
            let window = GpuPattern::Window { left: rng.range(0, 150), right: rng.range(0, 80) };
            add(Kind::Forward, "sliding window", GpuSpec::new(window.clone()).causal(causal), &mut rng);
            let bs = BlockSparse {
                block: [16, 32, 64, 100][rng.range(0, 3)],
                local_radius: Some(rng.range(0, 1)),
                dilated_stride: Some(rng.range(2, 5)),
                global_tokens: rng.range(0, 20),
                block_mask: None,
            };
            add(
                Kind::Forward,
                "block sparse",
                GpuSpec::new(GpuPattern::BlockSparse(bs.clone())).causal(causal),
                &mut rng,
            );
            let user = BlockSparse { block_mask: Some(vec![]), local_radius: None, dilated_stride: None, ..bs };
            add(Kind::Forward, "block sparse, user mask", GpuSpec::new(GpuPattern::BlockSparse(user)), &mut rng);
            let branches = [(rng.range(16, 128), 1), (rng.range(100, 400), 2), (rng.range(400, 2000), 4)];
            let longnet = GpuPattern::Dilated(Dilated::longnet(&branches));
            add(Kind::Forward, "dilated longnet", GpuSpec::new(longnet.clone()).causal(causal), &mut rng);
            let torchscale =
                GpuPattern::Dilated(Dilated::torchscale(&[(rng.range(64, 256), 2), (rng.range(256, 1024), 8)]));
            add(Kind::Forward, "dilated torchscale offsets", GpuSpec::new(torchscale), &mut rng);
            add(Kind::RingStep, "ring step dense", dense.clone().causal(causal), &mut rng);
            add(Kind::RingStep, "ring step dilated", GpuSpec::new(longnet.clone()).causal(true), &mut rng);
            add(
                Kind::RingStep,
                "ring step window + padding",
                GpuSpec::new(window.clone()).key_lengths(vec![]),
                &mut rng,
            );
            add(Kind::Merge, "ring merge causal", dense.clone().causal(true), &mut rng);
            add(Kind::Merge, "ring merge window + padding", GpuSpec::new(window).key_lengths(vec![]), &mut rng);
            add(Kind::Backward, "backward dense", dense.clone().causal(causal), &mut rng);
            add(Kind::Backward, "backward causal + padding", dense.causal(true).key_lengths(vec![]), &mut rng);
            add(Kind::Backward, "backward dilated", GpuSpec::new(longnet).causal(causal), &mut rng);
        }
    }
    out
}

/// Draw what depends on the drawn sizes: key lengths (an empty list means "draw them")
/// and a user block mask (an empty mask means "draw one for this length").
fn fit_spec(mut spec: GpuSpec, batch: usize, seq: usize, rng: &mut SplitMix64) -> GpuSpec {
    if spec.key_lengths.is_some() {
        spec.key_lengths = Some((0..batch).map(|_| rng.range(0, seq)).collect());
    }
    if let GpuPattern::BlockSparse(bs) = &mut spec.pattern
        && bs.block_mask.as_ref().is_some_and(Vec::is_empty)
    {
        let nb = seq.div_ceil(bs.block);
        bs.block_mask = Some((0..nb).map(|_| (0..nb).map(|_| rng.uniform() < 0.3).collect()).collect());
    }
    spec
}

/// `x` rounded to `dtype` (to nearest, ties to even): its 16-bit word and the word's
/// exact value in f64 (both formats widen to f64 without rounding).
pub fn round(x: f64, dtype: Dtype) -> (u16, f64) {
    match dtype {
        Dtype::Bf16 => {
            let h = half::bf16::from_f64(x);
            (h.to_bits(), h.to_f64())
        }
        Dtype::F16 => {
            let h = half::f16::from_f64(x);
            (h.to_bits(), h.to_f64())
        }
    }
}

/// The next `len` standard normals of `rng`, each rounded to `dtype` ([`round`]).
fn rounded_draws(len: usize, dtype: Dtype, rng: &mut SplitMix64) -> impl Iterator<Item = (u16, f64)> + '_ {
    (0..len).map(move |_| round(rng.normal(), dtype))
}

/// Random test inputs: a `dims` tensor of standard normals from `rng`, rounded to
/// `dtype`, as the 16-bit words a kernel reads and their exact f64 values for the
/// reference. Both sides then hold the same numbers, so a comparison measures the
/// kernel's arithmetic and not the rounding of its inputs. Draws are taken in order, so
/// consecutive calls on one `rng` give q, k, v, ... reproducibly from one seed.
pub fn rounded(dims: [usize; 4], dtype: Dtype, rng: &mut SplitMix64) -> (Vec<u16>, Array4<f64>) {
    let (bits, values): (Vec<u16>, Vec<f64>) = rounded_draws(dims.iter().product(), dtype, rng).unzip();
    (bits, Array4::from_shape_vec(dims, values).expect("sized by dims"))
}

/// The words of [`rounded`] alone (same draws), for benchmarks that need no reference.
pub fn rounded_bits(len: usize, dtype: Dtype, rng: &mut SplitMix64) -> Vec<u16> {
    rounded_draws(len, dtype, rng).map(|(bits, _)| bits).collect()
}

fn to_f64(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn partial_to_host(gpu: &Gpu, p: &DevicePartial) -> Result<Partial<f64>> {
    let [b, n, h, d] = p.dims;
    let out = Array4::from_shape_vec((b, n, h, d), to_f64(&gpu.download(&p.out)?)).expect("dims");
    let lse = Array3::from_shape_vec((b, h, n), to_f64(&gpu.download(&p.lse)?)).expect("dims");
    Ok(Partial { out, lse })
}

fn compare_partial(metrics: &mut Vec<Metric>, gpu: &Partial<f64>, reference: &Partial<f64>, bound: f64) {
    metrics.push(Metric { what: "out", err: rel_err(gpu.out.iter(), reference.out.iter()), bound });
    metrics.push(Metric { what: "lse", err: rel_err(gpu.lse.iter(), reference.lse.iter()), bound });
}

/// Run one case on the GPU and compare with the reference.
pub fn run_case(gpu: &Gpu, case: &Case, seed: u64) -> Result<Outcome> {
    let mut rng = SplitMix64::new(seed);
    let (b, n, h, d) = (case.batch, case.seq, case.heads, case.head_dim);
    let dims = [b, n, h, d];
    let (qb, q) = rounded(dims, case.dtype, &mut rng);
    let (kb, k) = rounded(dims, case.dtype, &mut rng);
    let (vb, v) = rounded(dims, case.dtype, &mut rng);
    let reference_spec = case.spec.to_reference();
    let bound = bound(case.dtype);
    let mut metrics = Vec::new();
    let all: Vec<usize> = (0..n).collect();
    match case.kind {
        Kind::Forward | Kind::Backward => {
            let shape = Shape::square(b, n, h, d);
            let mut prep = gpu.prepare(&shape, case.dtype, &case.spec, &Chunk::whole(&shape))?;
            let (qd, kd, vd) = (gpu.upload(&qb, dims)?, gpu.upload(&kb, dims)?, gpu.upload(&vb, dims)?);
            let mut out = poisoned_partial(gpu, dims)?;
            gpu.forward_into(&mut prep, &qd, &kd, &vd, &mut out)?;
            let got = partial_to_host(gpu, &out)?;
            let want = attention(q.view(), k.view(), v.view(), &reference_spec)?;
            let want_partial = Partial { out: want.out.clone(), lse: want.lse.clone() };
            compare_partial(&mut metrics, &got, &want_partial, bound);
            if case.kind == Kind::Backward {
                let (dob, dout) = rounded(dims, case.dtype, &mut rng);
                let dod = gpu.upload(&dob, dims)?;
                let mut grads = crate::gpu::DeviceGrads {
                    dq: gpu.filled(shape.q_len(), f32::NAN)?,
                    dk: gpu.filled(shape.k_len(), f32::NAN)?,
                    dv: gpu.filled(shape.k_len(), f32::NAN)?,
                };
                gpu.backward_into(&mut prep, &qd, &kd, &vd, &out, &dod, &mut grads)?;
                let want_g = attention_backward(
                    q.view(),
                    k.view(),
                    v.view(),
                    &reference_spec,
                    &Attention { out: want.out, lse: want.lse },
                    dout.view(),
                )?;
                let references: Vec<Vec<f64>> =
                    [&want_g.dq, &want_g.dk, &want_g.dv].iter().map(|r| r.iter().copied().collect()).collect();
                let mut first = Vec::new();
                for ((what, buf), reference) in
                    [("dq", &grads.dq), ("dk", &grads.dk), ("dv", &grads.dv)].into_iter().zip(&references)
                {
                    let got = to_f64(&gpu.download(buf)?);
                    metrics.push(Metric { what, err: grad_err(&got, reference), bound });
                    first.push(got);
                }
                // Adding mode (a ring rank's running sums): a second pass onto the first
                // must add the same gradients again.
                gpu.backward_add_into(&mut prep, &qd, &kd, &vd, &out, &dod, grads.as_mut())?;
                for (((what, buf), reference), first) in
                    [("dq added", &grads.dq), ("dk added", &grads.dk), ("dv added", &grads.dv)]
                        .into_iter()
                        .zip(&references)
                        .zip(&first)
                {
                    let added: Vec<f64> = to_f64(&gpu.download(buf)?).iter().zip(first).map(|(b, a)| b - a).collect();
                    metrics.push(Metric { what, err: grad_err(&added, reference), bound });
                }
            }
        }
        Kind::RingStep => {
            // Query rows at positions qa + i*qs against key rows ka + j*ks of the global
            // sequence (contiguous ring pieces, or a striped rank's rows).
            let qc = chunk_of(n, &mut rng);
            let kc = chunk_of(n, &mut rng);
            let got = ring_step(gpu, case, (&qb, qc), (&kb, &vb, kc))?;
            let got = partial_to_host(gpu, &got)?;
            let (qpos, kpos) = (qc.positions(), kc.positions());
            let want = attend_chunk(
                q.select(Axis(1), &qpos).view(),
                &qpos,
                k.select(Axis(1), &kpos).view(),
                v.select(Axis(1), &kpos).view(),
                &kpos,
                n,
                &reference_spec,
            )?;
            compare_partial(&mut metrics, &got, &want, bound);
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
            let mut merged = poisoned_partial(gpu, dims)?;
            gpu.merge_into(&left, &right, &mut merged)?;
            let got = partial_to_host(gpu, &merged)?;
            let want = attend_chunk(q.view(), &all, k.view(), v.view(), &all, n, &reference_spec)?;
            compare_partial(&mut metrics, &got, &want, bound);
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
                what: "merge input intact",
                err: rel_err(left_now.out.iter(), left_ref.out.iter()),
                bound,
            });
            // The fused merge: the right step accumulated into the left result in place.
            let mut running =
                ring_step(gpu, case, (&qb, all_rows), (&kb, &vb, Rows { start: 0, len: cut, stride: 1 }))?;
            let right_rows = Rows { start: cut, len: n - cut, stride: 1 };
            ring_step_into(gpu, case, (&qb, all_rows), (&kb, &vb, right_rows), &mut running, true)?;
            let fused = partial_to_host(gpu, &running)?;
            metrics.push(Metric { what: "accumulate out", err: rel_err(fused.out.iter(), want.out.iter()), bound });
            metrics.push(Metric { what: "accumulate lse", err: rel_err(fused.lse.iter(), want.lse.iter()), bound });
        }
    }
    Ok(Outcome { case: describe(case), metrics })
}

/// Rows of one side of a ring step: global positions `start + i * stride`, `i < len`.
#[derive(Debug, Clone, Copy)]
struct Rows {
    start: usize,
    len: usize,
    stride: usize,
}

impl Rows {
    fn positions(&self) -> Vec<usize> {
        (0..self.len).map(|i| self.start + i * self.stride).collect()
    }
}

/// Random non-empty rows of `0..n`: contiguous half of the time, else a stride of 2 to 4
/// (a striped layout's rank).
fn chunk_of(n: usize, rng: &mut SplitMix64) -> Rows {
    let stride = if n < 8 || rng.uniform() < 0.5 { 1 } else { rng.range(2, 4) };
    let start = rng.range(0, n - 1);
    Rows { start, len: rng.range(1, (n - 1 - start) / stride + 1), stride }
}

/// One ring step on the GPU: query rows `qr` over key rows `kr`.
fn ring_step(
    gpu: &Gpu,
    case: &Case,
    (qb, qr): (&[u16], Rows),
    (kb, vb, kr): (&[u16], &[u16], Rows),
) -> Result<DevicePartial> {
    let mut out = poisoned_partial(gpu, [case.batch, qr.len, case.heads, case.head_dim])?;
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
    let (b, n, h, d) = (case.batch, case.seq, case.heads, case.head_dim);
    let rows = |src: &[u16], r: Rows| -> Vec<u16> {
        let a = ndarray::ArrayView4::from_shape((b, n, h, d), src).expect("dims");
        a.select(Axis(1), &r.positions()).iter().copied().collect()
    };
    let shape = Shape { batch: b, heads: h, head_dim: d, q_rows: qr.len, k_rows: kr.len };
    let chunk = Chunk { q_stride: qr.stride, k_stride: kr.stride, ..Chunk::new(qr.start, kr.start, n) };
    let mut prep = gpu.prepare(&shape, case.dtype, &case.spec, &chunk)?;
    let qd = gpu.upload(&rows(qb, qr), [b, qr.len, h, d])?;
    let kd = gpu.upload(&rows(kb, kr), [b, kr.len, h, d])?;
    let vd = gpu.upload(&rows(vb, kr), [b, kr.len, h, d])?;
    match accumulate {
        true => gpu.forward_accumulate(&mut prep, &qd, &kd, &vd, out),
        false => gpu.forward_into(&mut prep, &qd, &kd, &vd, out),
    }
}

fn poisoned_partial(gpu: &Gpu, dims: [usize; 4]) -> Result<DevicePartial> {
    let [b, n, h, d] = dims;
    Ok(DevicePartial { out: gpu.filled(b * n * h * d, f32::NAN)?, lse: gpu.filled(b * h * n, f32::NAN)?, dims })
}

/// One line naming the case completely (enough to reproduce it with its seed).
pub fn describe(c: &Case) -> String {
    format!(
        "{:?} {} {:?} d={} b={} h={} n={} causal={} pattern={:?} key_lengths={:?}",
        c.kind, c.name, c.dtype, c.head_dim, c.batch, c.heads, c.seq, c.spec.causal, c.spec.pattern, c.spec.key_lengths
    )
}

/// The worst error per (kind, dtype, metric) over a run, for the log's summary table.
pub fn worst(cases: &[Case], outcomes: &[Outcome]) -> Vec<(String, f64, f64)> {
    let mut table: Vec<(String, f64, f64)> = Vec::new();
    for (c, o) in cases.iter().zip(outcomes) {
        for m in &o.metrics {
            let key = format!("{:?} {:?} {}", c.kind, c.dtype, m.what);
            match table.iter_mut().find(|(k, _, _)| *k == key) {
                Some(entry) => entry.1 = worst_of([entry.1, m.err]),
                None => table.push((key, m.err, m.bound)),
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_metric_fails() {
        assert!(!Metric { what: "out", err: f64::NAN, bound: 1.0 }.passed());
        assert!(!Metric { what: "out", err: f64::INFINITY, bound: 1.0 }.passed());
        assert!(Metric { what: "out", err: 0.5, bound: 1.0 }.passed());
    }

    #[test]
    fn gradient_error_is_relative_above_the_floor_and_absolute_below() {
        let big = [0.5, -0.4, 0.3, 0.2];
        let off = [0.505, -0.4, 0.3, 0.2];
        assert_eq!(grad_err(&off, &big), rel_err(&off, &big));
        // A gradient that is zero up to rounding: noise of 1e-6 against the 1e-2 floor.
        let zero = [1e-17, -1e-17, 0.0, 0.0];
        let noise = [1e-6, -1e-6, 1e-6, 0.0];
        let err = grad_err(&noise, &zero);
        assert!(err < 1e-3 && err > 1e-5, "{err}");
        assert!(grad_err(&[f64::NAN, 0.0, 0.0, 0.0], &zero).is_nan());
    }

    #[test]
    fn cases_cover_every_kernel_type_and_awkward_lengths() {
        let c = cases(7, false);
        for kind in [Kind::Forward, Kind::RingStep, Kind::Merge, Kind::Backward] {
            for dtype in [Dtype::Bf16, Dtype::F16] {
                for d in [64, 128] {
                    assert!(c.iter().any(|x| x.kind == kind && x.dtype == dtype && x.head_dim == d));
                }
            }
        }
        assert!(c.iter().any(|x| x.seq % 64 != 0));
        for x in &c {
            x.spec.validate(x.batch, x.heads, x.seq).unwrap_or_else(|e| panic!("{}: {e}", describe(x)));
        }
        // Fresh draws: another seed gives other sizes.
        let other = cases(8, false);
        assert!(c.iter().zip(&other).any(|(a, b)| (a.seq, a.heads) != (b.seq, b.heads)));
    }

    /// The f64 values are exactly the words' values, the words are the nearest 16-bit
    /// numbers to the draws (transcribed here from the formats' unit roundoff), and the
    /// bits-only helper gives the same words.
    #[test]
    fn rounded_inputs_are_exact_in_f64_and_nearest_to_the_draws() {
        for (dtype, unit) in [(Dtype::Bf16, 2f64.powi(-8)), (Dtype::F16, 2f64.powi(-11))] {
            let (bits, vals) = rounded([1, 5, 1, 4], dtype, &mut SplitMix64::new(3));
            let mut draws = SplitMix64::new(3);
            for (b, v) in bits.iter().zip(vals.iter()) {
                let exact = match dtype {
                    Dtype::Bf16 => half::bf16::from_bits(*b).to_f64(),
                    Dtype::F16 => half::f16::from_bits(*b).to_f64(),
                };
                assert_eq!(exact, *v);
                let x = draws.normal();
                assert!((v - x).abs() <= unit * x.abs(), "{dtype:?}: {x} rounded to {v}");
            }
            assert_eq!(rounded_bits(20, dtype, &mut SplitMix64::new(3)), bits);
        }
    }
}

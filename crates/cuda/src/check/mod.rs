//! The GPU check: every kernel against the f64 reference on fresh random inputs.
//!
//! Each case draws q, k, v (and d_out) from a seed, rounds them to bf16 or f16, and runs
//! the reference in f64 on *the same rounded values*, so the only differences are the
//! kernel's own arithmetic (16-bit P and dS operands of the tensor-core products, f32
//! accumulation, exp2 approximations). The metric is the relative error
//! `||gpu - ref||_2 / ||ref||_2` over a whole tensor (the project's measure,
//! [`compare::rel_err`]), with the bounds of [`bound`]:
//!
//! * bf16: `< 1e-2` (8-bit mantissa: one rounding of P is ~2e-3 relative);
//! * f16: `< 1e-3` (11-bit mantissa: ~2.4e-4).
//!
//! Gradients use the same measure with the reference's norm floored at
//! [`GRAD_RMS_FLOOR`]` * sqrt(len)` ([`compare::floor_err`]), since a gradient can be
//! exactly zero (one key per row) and then only rounding noise is left to compare.
//!
//! The LSE is measured like the output: `-inf` must be exactly where the reference's is
//! (rows with no key; an unmatched infinity is an infinite error), and the finite values
//! are within the same bound. Rows with no key must moreover come back *exactly* as the
//! merge identity (out = 0, LSE = `-inf`; in the backward dQ = 0, and dK = dV = 0 for a
//! key that no query sees): a relative error over the tensor would let small garbage in
//! them pass, so [`extreme::exact_empty`] counts every value that differs, NaN included.
//! Outputs are poisoned with NaN before each launch, so a row the kernel forgets to write
//! fails, and a NaN anywhere fails (every comparison is written so that NaN is not below
//! a bound). Sequence lengths include primes and lengths that are not multiples of the
//! 64-row tile.
//!
//! Results in the inputs' 16-bit type ([`Gpu::output_half`], [`Gpu::grads_half`]) are
//! checked exactly: every word must be the rounding (to nearest, ties to even) of the f32
//! value the kernel wrote (`out 16-bit`, `dq 16-bit`, ...: counts of differing words,
//! must be 0); how close that f32 value is to the reference is the f32 metrics' business.
//!
//! [`Gpu::output_half`]: crate::gpu::Gpu::output_half
//! [`Gpu::grads_half`]: crate::gpu::Gpu::grads_half
//!
//! # Large scores
//! The cases of large-magnitude q and k ([`Logits`]: `|s| <= 1e4`, or every score `5e3 +
//! O(1)`) add an error the bounds above do not hold: the f32 sum of a score. Let `T`
//! bound a score's scaled partial sums, `T >= scale * sum_i |q_i k_i|` over all pairs
//! (`1.01` times the nominal magnitude, [`partial_bound`]; a host test checks it on the
//! rounded inputs). A product of two 16-bit numbers is exact in f32, the sum of `d` of
//! them is not. Pessimistically (tensor cores align the addends of one instruction to the
//! largest and truncate; assume no guard bits), each product loses up to one unit of the
//! accumulator's last place, at most `2^-23 T` in scaled units, by an amount uniform
//! over the unit and of the product's sign: a mean square of at most `1/4 + 1/12 = 1/3`
//! unit^2 each. One score is then off by
//!
//! ```text
//!   eps(T, d) = sqrt(d / 3) * 2^-23 * T         (rms, natural-log units; score_err)
//! ```
//!
//! 2.8e-3 (d = 64) and 3.9e-3 (d = 128) at `T = 5.05e3`; twice that at `1.01e4`.
//!
//! * **Output.** The weights `p_j ~ exp(s_j + e_j)` are off by `e_j - e_mean` relative
//!   (a shift common to a row cancels in the normalisation), so `out`, a weighted mean of
//!   v, is off by about `eps` relative (a one-hot row, most rows of `|s| <= 1e4`, not at
//!   all).
//! * **Gradients.** The backward recomputes `P = exp(s_b - lse)` from its own sums `s_b`
//!   of the scores and the saved LSE, so nothing cancels: `e_b,j - e_mean` (two
//!   independent errors, `<= sqrt(2) eps` rms) plus the LSE's f32 arithmetic and a
//!   one-signed truncation that may differ between the passes (`<= 1.6 eps`, next
//!   point): P, dS, hence dQ, dK, dV, are off by `<~ 3 eps` relative.
//!
//!   Where the softmax is one-hot (most rows of `|s| <= 1e4`) the exact dS is 0 and the
//!   kernel's is noise: the forward's top weight is `2^(s c - fl(m))`, not exactly 1 (the
//!   maximum `m` is an f32 number near `1.44 T`, one unit of which is `~1e-3`), so O is
//!   off by about that relative, and `delta = dO . O` against the backward's `dP = dO . v`
//!   leaves `dS ~ 1e-3 |dP|` (measured with `gpu_check --large-sweep`, [`sweep`]: delta
//!   off by 6e-4 rms, 5e-3 at most, on both kernel families; the first version of this
//!   model said 3e-5 and failed about one case in ten). That noise reaches dQ = scale dS K
//!   multiplied by K's elements and dK = scale dS^T Q by Q's, so the floor below which a
//!   gradient is compared absolutely scales with that operand: [`grad_floor_scales`]
//!   (`rms(K)` for dQ, `rms(Q)` for dK, 35 at `|s| <= 1e4`, d = 64; 1 for unit scores).
//!   Over the sweep's 512 seeds x 4 large-score backward cases per family, dQ then stays
//!   below 9.4e-3, inside the bound below. The floor does not cover one key that is the
//!   only key of many rows (every row one-hot onto it: its dK adds the rows' noise,
//!   growing with their square root); large-score cases therefore draw key lengths of at
//!   least 2 (unit-score cases keep length 0 and 1).
//!
//!   Both are bounded by [`bound_for`] `= bound(dtype) + 3 eps(T, 128)`: the 16-bit
//!   rounding of P and dS as for unit scores, plus three score errors. `eps` is taken at
//!   `d = 128`, the larger head dim, for both head dims, so that one quantity of one
//!   kernel and element type has one bound (the log's worst-error table keeps one per
//!   name; the metrics of these cases carry the magnitude in their names, `quantity!`).
//! * **LSE.** Its absolute error is the weighted mean of its scores' errors (a single
//!   score's in a one-hot row: under `4 eps` over every row of a case), plus the
//!   accumulator's truncations of one sign (`d / 16` instructions of one unit: `1.2
//!   eps`), plus the f32 arithmetic of `(m + log2 l) ln 2` and the f32 constants `scale
//!   log2(e)` and `ln 2` (five roundings of numbers up to `1.44 T`: `0.4 eps`): under
//!   `6 eps`. It is measured relative to the magnitude, [`lse_err`] `= max_i |lse_i -
//!   ref_i| / T`, below [`large_lse_bound`] `= 8 eps(T, 128) / T = 6.2e-6`; an error
//!   relative to each row's own LSE would let a row whose LSE is near 0 while its scores
//!   are not pass with a large absolute error.
//!
//! The merge kernel is f32 arithmetic on partials whose LSEs differ by little where both
//! weights matter (`a - max(a, b)` is then exact, Sterbenz), so [`MERGE_BOUND`] holds at
//! every magnitude.
//!
//! * [`cases`](mod@cases): the case list of a run, drawn from a seed;
//! * [`extreme`]: the large-score cases and the cases built to have rows with no key,
//!   with the exact check of those rows;
//! * [`inputs`]: random inputs rounded to bf16 / f16, their words and exact values;
//! * [`kernels`]: one case on the GPU ([`run_case`]), measured against the reference;
//! * [`streams`]: calls of one module on two streams at once;
//! * [`sweep`]: the large-score backward cases of many seeds with what explains their
//!   errors (`gpu_check --large-sweep N`), to measure the bounds' distribution;
//! * [`ring`]: the same for distributed attention (`ring_check`): its cases, and the
//!   ranks' results gathered and compared with the reference.

/// A quantity's name in the log: the plain name for unit scores, with the magnitude of
/// large-score cases appended, so that the log's worst-error table (one bound per kernel,
/// element type and name) never mixes two bounds.
macro_rules! quantity {
    ($logits:expr, $what:literal) => {
        match $logits {
            $crate::check::Logits::Unit => $what,
            $crate::check::Logits::Large => concat!($what, " |s|<=1e4"),
            $crate::check::Logits::Offset => concat!($what, " s=5e3"),
        }
    };
}

pub mod cases;
pub mod dilated_expr;
pub mod document_pairs;
pub mod expressions;
pub mod extreme;
pub mod faults;
pub mod gqa;
mod half_results;
pub mod head_dims;
pub mod head_groups;
pub mod inputs;
pub mod intervals;
pub mod kernels;
pub mod packed;
pub mod packed_tables;
pub mod ring;
pub mod ring_compare;
pub mod ring_packed;
pub mod streams;
pub mod sweep;
pub mod tables;
pub mod value_dims;

pub use cases::{Case, Kind, cases, describe};
pub use inputs::{LARGE_LOGITS, Logits, OFFSET_LOGITS, round, rounded, rounded_bits};
pub use kernels::run_case;

use crate::shape::Dtype;
use ringdil_reference::compare;

/// The relative-error bound of an element type (module docs).
pub fn bound(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 1e-2,
        Dtype::F16 => 1e-3,
    }
}

/// A score's f32 summation error for scaled partial sums bounded by `magnitude` at head
/// dim `head_dim`: `eps = sqrt(d / 3) * 2^-23 * T` (rms, natural-log units; module docs).
pub fn score_err(magnitude: f64, head_dim: usize) -> f64 {
    (head_dim as f64 / 3.0).sqrt() * 2f64.powi(-23) * magnitude
}

/// The bound on a score's scaled partial sums `scale * sum_i |q_i k_i|` that the
/// tolerances assume: 1.01 times the nominal magnitude (the host tests check it).
pub fn partial_bound(logits: Logits) -> f64 {
    1.01 * logits.magnitude()
}

/// The bound of out and of the gradients: [`bound`] for unit scores, `bound(dtype) + 3
/// eps(T, 128)` for large ones (module docs).
pub fn bound_for(dtype: Dtype, logits: Logits) -> f64 {
    match logits {
        Logits::Unit => bound(dtype),
        Logits::Large | Logits::Offset => bound(dtype) + 3.0 * score_err(partial_bound(logits), 128),
    }
}

/// The bound of [`lse_err`] in large-score cases: `8 eps(T, 128) / T`, the same at
/// every magnitude (module docs).
pub fn large_lse_bound() -> f64 {
    8.0 * score_err(1.0, 128)
}

/// `max_i |x_i - r_i| / magnitude`: the LSE's absolute error relative to the magnitude of
/// the scores. Equal values (the `-inf` of a row with no key on both sides) agree, NaN
/// stays NaN ([`compare::worst`]) and an unmatched infinity is an infinite error: the
/// rule of [`compare`].
pub fn lse_err<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>, magnitude: f64) -> f64 {
    let (mut x, mut r) = (x.into_iter(), r.into_iter());
    let mut errors = Vec::new();
    loop {
        match (x.next(), r.next()) {
            (Some(a), Some(b)) => errors.push(if a == b { 0.0 } else { (a - b).abs() / magnitude }),
            (None, None) => return compare::worst(errors),
            _ => panic!("compared sequences differ in length"),
        }
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
/// `GRAD_RMS_FLOOR * scale * sqrt(len)` (see there): `scale` is the magnitude of the
/// operand the gradient's noise is multiplied by ([`grad_floor_scales`]; 1 for unit
/// scores).
pub fn grad_err(a: &[f64], b: &[f64], scale: f64) -> f64 {
    compare::floor_err(a, b, GRAD_RMS_FLOOR * scale * (b.len() as f64).sqrt())
}

/// The floor scales of dQ, dK, dV (module docs, "Large scores"): dQ = scale dS K carries
/// K's magnitude, dK = scale dS^T Q carries Q's, dV = P^T dO that of dO (unit normals in
/// every case: 1). Never below 1, so unit-score cases keep [`GRAD_RMS_FLOOR`].
pub fn grad_floor_scales(q: &ndarray::Array4<f64>, k: &ndarray::Array4<f64>) -> [f64; 3] {
    let rms = |x: &ndarray::Array4<f64>| (x.iter().map(|v| v * v).sum::<f64>() / x.len().max(1) as f64).sqrt();
    [rms(k).max(1.0), rms(q).max(1.0), 1.0]
}

/// One measured quantity of a case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Metric {
    pub what: &'static str,
    pub err: f64,
    pub bound: f64,
}

impl Metric {
    /// Within the bound; NaN never is.
    pub fn passed(&self) -> bool {
        self.err < self.bound // false for NaN
    }
}

/// A case's name and everything measured on it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub case: String,
    pub metrics: Vec<Metric>,
}

impl Outcome {
    /// Every metric within its bound.
    pub fn passed(&self) -> bool {
        self.metrics.iter().all(Metric::passed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::compare::rel_err;

    #[test]
    fn a_nan_metric_fails() {
        assert!(!Metric { what: "out", err: f64::NAN, bound: 1.0 }.passed());
        assert!(!Metric { what: "out", err: f64::INFINITY, bound: 1.0 }.passed());
        assert!(Metric { what: "out", err: 0.5, bound: 1.0 }.passed());
    }

    /// The numbers of the module docs: eps at T = 5.05e3 and 1.01e4, the bounds built
    /// from it, and the LSE bound.
    #[test]
    fn large_score_bounds_are_the_derived_ones() {
        let eps = |logits, d| score_err(partial_bound(logits), d);
        assert!((eps(Logits::Offset, 64) / 2.78e-3 - 1.0).abs() < 1e-2);
        assert!((eps(Logits::Offset, 128) / 3.93e-3 - 1.0).abs() < 1e-2);
        assert!((eps(Logits::Large, 128) / eps(Logits::Offset, 128) - 2.0).abs() < 1e-12);
        for dtype in [Dtype::Bf16, Dtype::F16] {
            assert_eq!(bound_for(dtype, Logits::Unit), bound(dtype));
            let extra = bound_for(dtype, Logits::Large) - bound(dtype);
            assert!((extra / (3.0 * eps(Logits::Large, 128)) - 1.0).abs() < 1e-12);
        }
        assert!((large_lse_bound() / 6.23e-6 - 1.0).abs() < 1e-2);
    }

    /// The largest absolute difference over the magnitude, under the rule of `compare`.
    #[test]
    fn lse_error_is_absolute_over_the_magnitude() {
        let inf = f64::INFINITY;
        assert_eq!(lse_err(&[5000.5, -inf, 3.0], &[5000.0, -inf, 3.25], 5e3), 0.5 / 5e3);
        assert_eq!(lse_err(&[-inf, 1.0], &[0.0, 1.0], 5e3), inf);
        assert!(lse_err(&[f64::NAN, -inf], &[1.0, 0.0], 5e3).is_nan());
        assert!(lse_err(&[-inf, f64::NAN], &[0.0, 1.0], 5e3).is_nan());
    }

    #[test]
    fn gradient_error_is_relative_above_the_floor_and_absolute_below() {
        let big = [0.5, -0.4, 0.3, 0.2];
        let off = [0.505, -0.4, 0.3, 0.2];
        assert_eq!(grad_err(&off, &big, 1.0), rel_err(&off, &big));
        // A gradient that is zero up to rounding: noise of 1e-6 against the 1e-2 floor.
        let zero = [1e-17, -1e-17, 0.0, 0.0];
        let noise = [1e-6, -1e-6, 1e-6, 0.0];
        let err = grad_err(&noise, &zero, 1.0);
        assert!(err < 1e-3 && err > 1e-5, "{err}");
        assert!(grad_err(&[f64::NAN, 0.0, 0.0, 0.0], &zero, 1.0).is_nan());
    }
}

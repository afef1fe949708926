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
//! are within the same bound. Outputs are poisoned with NaN before each launch, so a
//! row the kernel forgets to write fails, and a NaN anywhere fails (every comparison is
//! written so that NaN is not below a bound). Sequence lengths include primes and lengths
//! that are not multiples of the 64-row tile.
//!
//! * [`cases`](mod@cases): the case list of a run, drawn from a seed;
//! * [`inputs`]: random inputs rounded to bf16 / f16, their words and exact values;
//! * [`kernels`]: one case on the GPU ([`run_case`]), measured against the reference;
//! * [`ring`]: the same for distributed attention (`ring_check`): its cases, and the
//!   ranks' results gathered and compared with the reference.

pub mod cases;
pub mod inputs;
pub mod kernels;
pub mod ring;

pub use cases::{Case, Kind, cases, describe};
pub use inputs::{round, rounded, rounded_bits};
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
    compare::floor_err(a, b, GRAD_RMS_FLOOR * (b.len() as f64).sqrt())
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
}

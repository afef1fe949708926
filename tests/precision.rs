//! Precision of the f32 and bf16/f16 paths, as statistics over many random problems
//! (statrs), against f64 ground truth computed on the *same* (already rounded) inputs,
//! so that only arithmetic error is measured. A second statistic measures the total
//! error of a half-precision pipeline against the unrounded f64 problem, which is
//! dominated by rounding the inputs.
//!
//! Bounds, derived (not fitted). `u = 2^-24 ~ 6e-8` is f32's unit roundoff. With
//! head_dim `d = 16` and sequences of `n <= 40`:
//! * a score `scale * q.k` carries an absolute error of at most `d u scale sum|q_x k_x|`,
//!   about `16 u * 0.25 * 13 ~ 50 u` in the worst case and `sqrt(d)`-times smaller
//!   typically; a softmax weight inherits it as a relative error, plus a few `u` from
//!   `exp` and the normalisation; the output sum adds `~ log2(n) u` (pairwise-ish blocked
//!   products) to `n u` (worst case).
//! * so the relative (Frobenius) error of a whole output tensor, where independent
//!   rounding errors average out, is typically a few `u` (`sqrt(d) u` from the scores
//!   plus a few from `exp` and the normalisation): we require **mean <= 8 u**, the
//!   **99th percentile <= 32 u** and the **max <= 128 u** (the worst-case sum of the two
//!   terms above, `~50 u + 40 u`, rounded up). The LSE gets the same bounds (its error is
//!   the score error plus `ln`'s).
//! * bf16 and f16 inputs widen exactly to f32, so the arithmetic bounds are the same.
//! * against the unrounded problem, rounding the inputs to a format with unit roundoff
//!   `u_h` (bf16 `2^-8`, f16 `2^-11`) perturbs `v` by `u_h` relatively and each score by
//!   about `2 scale sqrt(d) u_h |q||k|/d ~ u_h` (rms); both reach the output as relative
//!   errors of order `u_h`, averaged over keys: we require **mean <= 2 u_h**, the
//!   **99th percentile <= 4 u_h** and **max <= 8 u_h**.
//!
//! Lower bounds are not asserted (they would test luck), except that errors are not all
//! zero, which would mean the low-precision path secretly computed in f64.

use half::{bf16, f16};
use ndarray::Array4;
use ringdil_proofs::qkv;
use ringdil_reference::compare::{pointwise_err, rel_err};
use ringdil_reference::pattern::{Dilated, SlidingWindow};
use ringdil_reference::{Attention, Spec, attention, attention_low_precision};
use statrs::statistics::{Data, OrderStatistics, Statistics};

/// f32 unit roundoff.
const U32: f64 = 1.0 / (1u64 << 24) as f64;
/// (mean, 99th percentile, max) bounds of f32 arithmetic error, in units of `U32`.
const ARITH_BOUNDS: (f64, f64, f64) = (8.0, 32.0, 128.0);
/// Number of random problems per statistic.
const SEEDS: u64 = 200;
const DIM: usize = 16;

/// Problem `seed`: length `8 + seed % 33` (odd lengths included), 2 heads, and one of
/// four specs in turn (dense, causal, causal window, causal LongNet).
fn problem(seed: u64) -> ([usize; 4], Spec) {
    let n = 8 + (seed % 33) as usize;
    let spec = match seed % 4 {
        0 => Spec::dense(),
        1 => Spec::dense().causal(true),
        2 => Spec::new(SlidingWindow { left: 6, right: 0 }).causal(true),
        _ => Spec::new(Dilated::longnet(&[(8, 1), (16, 2), (32, 4)])).causal(true),
    };
    ([1, n, 2, DIM], spec)
}

/// Mean, 99th percentile and max of a sample, via statrs.
#[derive(Debug)]
struct Summary {
    mean: f64,
    p99: f64,
    max: f64,
}

impl Summary {
    fn of(errs: &[f64]) -> Summary {
        assert!(errs.iter().all(|e| e.is_finite()), "non-finite error in {errs:?}");
        let mean = errs.mean();
        let max = Statistics::max(errs);
        let p99 = Data::new(errs.to_vec()).percentile(99);
        Summary { mean, p99, max }
    }

    /// Assert the bounds, each given in units of `unit`, with a readable message.
    fn assert_within(&self, what: &str, unit: f64, (mean, p99, max): (f64, f64, f64)) {
        let in_units = |x: f64| x / unit;
        assert!(self.mean > 0.0, "{what}: all errors are zero; the low-precision path is not low precision");
        assert!(
            self.mean <= mean * unit && self.p99 <= p99 * unit && self.max <= max * unit,
            "{what}: mean {:.2}, p99 {:.2}, max {:.2} (units of {unit:e}) exceed bounds {mean}, {p99}, {max}",
            in_units(self.mean),
            in_units(self.p99),
            in_units(self.max),
        );
    }
}

/// Relative output error and pointwise LSE error of a result cast to f64 against the
/// f64 reference. The LSE's `-inf` rows (no key: causal LongNet has them when a head's
/// offset passes a short segment) count as equal on both sides, so the statistics
/// stay finite ([`pointwise_err`]'s rule for infinities).
fn errors(got: &Attention<f64>, want: &Attention<f64>) -> (f64, f64) {
    (rel_err(got.out.iter(), want.out.iter()), pointwise_err(got.lse.iter(), want.lse.iter()))
}

fn widen(a: Attention<f32>) -> Attention<f64> {
    Attention { out: a.out.mapv(f64::from), lse: a.lse.mapv(f64::from) }
}

fn f64_attention(q: &Array4<f64>, k: &Array4<f64>, v: &Array4<f64>, spec: &Spec) -> Attention<f64> {
    attention(q.view(), k.view(), v.view(), spec).unwrap()
}

/// Statistics of f32 attention against f64 attention on the f32-rounded inputs.
#[test]
fn f32_vs_f64() {
    let (mut out_errs, mut lse_errs) = (Vec::new(), Vec::new());
    for seed in 0..SEEDS {
        let (shape, spec) = problem(seed);
        let (q, k, v) = qkv(shape, seed);
        let [q, k, v] = [q, k, v].map(|x| x.mapv(|x| x as f32));
        let got = widen(attention(q.view(), k.view(), v.view(), &spec).unwrap());
        let [q, k, v] = [q, k, v].map(|x| x.mapv(f64::from));
        let (o, l) = errors(&got, &f64_attention(&q, &k, &v, &spec));
        out_errs.push(o);
        lse_errs.push(l);
    }
    Summary::of(&out_errs).assert_within("f32 out", U32, ARITH_BOUNDS);
    Summary::of(&lse_errs).assert_within("f32 lse", U32, ARITH_BOUNDS);
}

/// A half-precision format: rounding from f64 and exact widening back.
trait Half: Copy + Into<f32> {
    /// Unit roundoff of the format.
    const U: f64;
    fn round(x: f64) -> Self;
}

impl Half for bf16 {
    const U: f64 = 1.0 / 256.0;
    fn round(x: f64) -> Self {
        bf16::from_f64(x)
    }
}

impl Half for f16 {
    const U: f64 = 1.0 / 2048.0;
    fn round(x: f64) -> Self {
        f16::from_f64(x)
    }
}

/// For `H`: (a) arithmetic error of `attention_low_precision` against f64 on the same
/// rounded inputs, under the f32 bounds; (b) total error against the unrounded f64
/// problem, under the `u_h` bounds.
fn low_precision_statistics<H: Half>(name: &str) {
    let (mut arith, mut arith_lse, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 0..SEEDS {
        let (shape, spec) = problem(seed);
        let (q, k, v) = qkv(shape, seed + 1000);
        let exact = f64_attention(&q, &k, &v, &spec);
        let [qh, kh, vh]: [Array4<H>; 3] = [&q, &k, &v].map(|x| x.mapv(H::round));
        let got = widen(attention_low_precision(qh.view(), kh.view(), vh.view(), &spec).unwrap());
        let [qr, kr, vr] = [&qh, &kh, &vh].map(|x| x.mapv(|h| f64::from(h.into())));
        let (o, l) = errors(&got, &f64_attention(&qr, &kr, &vr, &spec));
        arith.push(o);
        arith_lse.push(l);
        total.push(rel_err(got.out.iter(), exact.out.iter()));
    }
    Summary::of(&arith).assert_within(&format!("{name} arithmetic out"), U32, ARITH_BOUNDS);
    Summary::of(&arith_lse).assert_within(&format!("{name} arithmetic lse"), U32, ARITH_BOUNDS);
    let t = Summary::of(&total);
    t.assert_within(&format!("{name} total out"), H::U, (2.0, 4.0, 8.0));
}

#[test]
fn bf16_inputs() {
    low_precision_statistics::<bf16>("bf16");
}

#[test]
fn f16_inputs() {
    low_precision_statistics::<f16>("f16");
}

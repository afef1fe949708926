//! The oracle side of the extreme-input proofs: inputs with large scores, the f64 ground
//! truth of a problem with the magnitudes its errors are judged by, and the derived
//! error bound ([`Budget`]) that every engine result must meet.

use ndarray::{Array, Array3, Array4, Dimension, NdFloat, s};
use proptest::prelude::*;
use ringdil_proofs::{Case, naive_attention, spec_counts};
use ringdil_reference::float::cast;
use ringdil_reference::random::normal_tensor;
use ringdil_reference::{Attention, Gradients};

/// Factor over the first-order [`Budget`]: second-order terms and the f64 oracle's own
/// rounding, which has the same form as the engine's (it is as large in the f64 tests).
/// Measured: with a factor of 1 every test passed 500 cases, with 0.1 most failed, so
/// the bound is within about ten times the worst error seen, and a wrong weight or a
/// lost term lands far outside it.
pub const SAFETY: f64 = 4.0;

/// Unit roundoff of `T` (`2^-24` for f32, `2^-53` for f64).
pub fn unit<T: NdFloat>() -> f64 {
    cast::<T, f64>(T::epsilon()) / 2.0
}

/// `x` rounded to `T`.
pub fn narrow<T: NdFloat>(x: &Array4<f64>) -> Array4<T> {
    x.mapv(cast)
}

/// `x` widened to f64 (exactly).
pub fn wide<T: NdFloat, D: Dimension>(x: &Array<T, D>) -> Array<f64, D> {
    x.mapv(cast)
}

// ---------------------------------------------------------------------------------
// Inputs, oracle and error bound
// ---------------------------------------------------------------------------------

/// How large a problem's scores are: about `mag` in size (standard-normal spread), all
/// shifted by `shift`.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    mag: f64,
    shift: f64,
}

/// Sizes up to `max_mag`, with no shift or a shift of either sign in `edge..=max_shift`,
/// past the edge of `exp`'s range.
pub fn size(max_mag: f64, edge: f64, max_shift: f64) -> impl Strategy<Value = Size> {
    (0.0..=1.0f64, prop_oneof![Just(0.0), edge..=max_shift, -max_shift..=-edge])
        .prop_map(move |(t, shift)| Size { mag: max_mag.powf(t), shift })
}

/// f32: `|s|` about `1e2`, shifts past `ln f32::MAX = 88.72`.
pub fn size_f32() -> impl Strategy<Value = Size> {
    size(1e2, 88.8, 1e2)
}

/// f64: `|s|` about `1e3`, shifts past `ln f64::MAX = 709.78`.
pub fn size_f64() -> impl Strategy<Value = Size> {
    size(1e3, 709.8, 1e3)
}

/// `[q, k, v, d_out]` of `case` with scores of `size`, rounded to `T` and given back
/// exactly in f64. `q` and `k` are scaled so that `scale * q.k` is about `mag * N(0, 1)`;
/// the shift is a last coordinate `shift / scale` in `q` against `1` in every `k` (so
/// `head_dim = 1` has no shift).
pub fn inputs<T: NdFloat>(case: &Case, size: Size) -> [Array4<f64>; 4] {
    let (q, k, v) = case.qkv();
    let d_out = normal_tensor(case.shape(), case.seed ^ 0xD0);
    let (d, scale) = (case.dim, case.spec.scale_for(case.dim));
    let random = if d > 1 { d - 1 } else { 1 };
    let amp = (size.mag / (scale * (random as f64).sqrt())).sqrt();
    let (mut q, mut k) = (q * amp, k * amp);
    if d > 1 {
        q.slice_mut(s![.., .., .., d - 1]).fill(size.shift / scale);
        k.slice_mut(s![.., .., .., d - 1]).fill(1.0);
    }
    [q, k, v, d_out].map(|x| wide(&narrow::<T>(&x)))
}

/// The f64 ground truth of one problem, and the magnitudes its errors are judged by.
pub struct Truth {
    /// Finished output `sigma_h O` and `M = sigma_h sum_j p_j |v_j|` (componentwise).
    out: Array4<f64>,
    out_mag: Array4<f64>,
    lse: Array3<f64>,
    /// dQ, dK, dV and their magnitudes (see [`Budget`]).
    grads: [Array4<f64>; 3],
    grad_mags: [Array4<f64>; 3],
    /// The largest `scale * sum_x |q_x k_x|` of an allowed pair: every `|s| <= a`.
    a: f64,
    /// A bound on any product of entries a gradient term has, for [`Budget::dust`].
    z: f64,
}

/// The forward from `naive_attention` (multiplicities from `spec_counts`), the backward
/// transcribed from `docs/semantics.md` section 10 with `P = c exp(s - lse)`: every
/// exponent is `<= 0`, so the oracle itself is exact to f64 rounding at any finite size.
pub fn truth(case: &Case, [q, k, v, d_out]: &[Array4<f64>; 4]) -> Truth {
    let (batch, n, heads, d) = q.dim();
    let dv = v.dim().3;
    let counts = spec_counts(&case.spec, &case.pattern_counts(), batch);
    let scale = case.spec.scale_for(d);
    let (o, lse) = naive_attention(q.view(), k.view(), v.view(), scale, |b, h, i, j| counts[[b, h, i, j]]);
    let (mut out, mut out_mag) = (o.clone(), Array4::zeros(o.raw_dim()));
    let mut grads = [q, k, v].map(|x| Array4::<f64>::zeros(x.raw_dim()));
    let mut mags = grads.clone();
    let mut a = 0.0f64;
    for (b, h, i) in rows(batch, heads, n) {
        let sigma = case.spec.pattern.output_scale(h, heads);
        let g: Vec<f64> = (0..dv).map(|x| sigma * d_out[[b, i, h, x]]).collect();
        out.slice_mut(s![b, i, h, ..]).mapv_inplace(|x| sigma * x);
        if lse[[b, h, i]] == f64::NEG_INFINITY {
            continue;
        }
        let delta: f64 = (0..dv).map(|x| g[x] * o[[b, i, h, x]]).sum();
        let keys: Vec<(usize, f64)> = (0..n)
            .filter(|&j| counts[[b, h, i, j]] > 0)
            .map(|j| {
                let dot: f64 = (0..d).map(|x| q[[b, i, h, x]] * k[[b, j, h, x]]).sum();
                a = a.max(scale * (0..d).map(|x| (q[[b, i, h, x]] * k[[b, j, h, x]]).abs()).sum::<f64>());
                (j, f64::from(counts[[b, h, i, j]]) * (scale * dot - lse[[b, h, i]]).exp())
            })
            .collect();
        let m: Vec<f64> = (0..dv).map(|x| keys.iter().map(|&(j, p)| p * v[[b, j, h, x]].abs()).sum()).collect();
        out_mag.slice_mut(s![b, i, h, ..]).assign(&Array::from_iter(m.iter().map(|x| sigma * x)));
        let gm: f64 = (0..dv).map(|x| g[x].abs() * m[x]).sum();
        let [dq, dk, dvv] = &mut grads;
        let [dq_mag, dk_mag, dv_mag] = &mut mags;
        for &(j, p) in &keys {
            let dp: f64 = (0..dv).map(|x| g[x] * v[[b, j, h, x]]).sum();
            let (ds, t) = (p * (dp - delta), p * ((0..dv).map(|x| (g[x] * v[[b, j, h, x]]).abs()).sum::<f64>() + gm));
            for x in 0..d {
                dq[[b, i, h, x]] += scale * ds * k[[b, j, h, x]];
                dq_mag[[b, i, h, x]] += scale * t * k[[b, j, h, x]].abs();
                dk[[b, j, h, x]] += scale * ds * q[[b, i, h, x]];
                dk_mag[[b, j, h, x]] += scale * t * q[[b, i, h, x]].abs();
            }
            for x in 0..dv {
                dvv[[b, j, h, x]] += p * g[x];
                dv_mag[[b, j, h, x]] += p * g[x].abs();
            }
        }
    }
    let max = |x: &Array4<f64>| 1.0 + x.iter().fold(0.0f64, |m, y| m.max(y.abs()));
    let z = (1.0 + scale) * max(q) * max(k) * max(v) * max(d_out) * (d + dv) as f64 * (3 * n) as f64;
    Truth { out, out_mag, lse, grads, grad_mags: mags, a, z }
}

/// Every `(batch, head, row)` in order.
pub fn rows(batch: usize, heads: usize, n: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..batch).flat_map(move |b| (0..heads).flat_map(move |h| (0..n).map(move |i| (b, h, i))))
}

/// The first-order error of an engine result in `T` against [`Truth`], derived for
/// unit roundoff `u` of `T` (`2^-24` in f32, `2^-53` in f64), head dims `d`, `d_v`, rows
/// of at most `n` keys (multiplicities up to 3, so `|L| <= a + ln(3n)`) and `merges`
/// merges of partials:
///
/// * **score**: `s = scale * q.k` is a dot product of `d` terms times `scale`, itself
///   rounded to `T`: absolute error `e_s = (d + 2) u a`. The error is *absolute* in the
///   score and becomes a *relative* error of `exp(s - L)`, i.e. of every weight: with
///   `|s| ~ 1e2` in f32 and `d = 5`, `e_s ~ 7 * 6e-8 * 1e2 ~ 4e-5`, where unit-scale
///   inputs give `~4e-7`. This is why the bound grows with the scores.
/// * **LSE**: `L = m + ln z` is 1-Lipschitz in the scores (a smooth maximum), so
///   `e_L = e_s + (n + 2) u` (the sum of `n` exponentials and `ln`) `+ u |L|` (rounding
///   the result), and each merge adds `u |L| + 4 u` (its `exp`s, sum, `ln` and result).
/// * **weights** `p = c exp(s - m) / z` or `c exp(s - L)`: relative error
///   `e_p = e_s + e_L + 2 u`; the output `sum_j p_j v_j` adds `n u` relative to
///   `M = sum_j p_j |v_j|`: `|out - out*| <= (e_p + n u) M`, componentwise.
/// * **backward**: `dP = dO~ V^T` and `delta = dO . out` add `(d_v + 2) u` and the
///   output's error, relative to `T_ij = p_ij (sum |dO~_i| |v_j| + sum |dO~_i| M_i)`,
///   which bounds `|dS_ij|`; `dQ = scale dS K`, `dK = scale dS^T Q`, `dV = P^T dO~` add
///   `(n + 2) u` relative to `scale T |K|`, `scale T^T |Q|`, `P^T |dO~|`.
///
/// A weight below `T`'s smallest normal number underflows, off by at most that number:
/// [`Budget::dust`] bounds the sum of such errors absolutely (about `1e-27` in f32).
pub struct Budget {
    u: f64,
    tiny: f64,
    d: f64,
    dv: f64,
    n: f64,
    merges: f64,
    a: f64,
    z: f64,
}

impl Budget {
    pub fn new<T: NdFloat>(case: &Case, truth: &Truth, merges: usize) -> Budget {
        let (d, n) = (case.dim as f64, case.n as f64);
        let tiny = cast(T::min_positive_value());
        Budget { u: unit::<T>(), tiny, d, dv: d, n, merges: merges as f64, a: truth.a, z: truth.z }
    }

    fn score(&self) -> f64 {
        (self.d + 2.0) * self.u * self.a
    }

    fn lse(&self) -> f64 {
        let big = self.a + (3.0 * self.n).ln();
        self.score() + (self.n + 2.0) * self.u + self.u * big + self.merges * (self.u * big + 4.0 * self.u)
    }

    fn weight(&self) -> f64 {
        self.score() + self.lse() + 2.0 * self.u
    }

    fn out(&self) -> f64 {
        self.weight() + self.n * self.u
    }

    fn grad(&self) -> f64 {
        self.weight() + self.out() + (self.dv + self.n + 4.0) * self.u
    }

    fn dust(&self) -> f64 {
        self.tiny * self.z
    }
}

/// `|got - want| <= tol * mag + dust` everywhere; NaN fails.
pub fn within<D: Dimension>(
    what: &str,
    got: &Array<f64, D>,
    want: &Array<f64, D>,
    mag: &Array<f64, D>,
    tol: f64,
    dust: f64,
) -> Result<(), TestCaseError> {
    for (((i, &g), &w), &m) in got.indexed_iter().zip(want).zip(mag) {
        let bound = tol * m + dust;
        prop_assert!((g - w).abs() <= bound, "{what} {i:?}: got {g:e}, want {w:e}, bound {bound:e} (tol {tol:e})");
    }
    Ok(())
}

/// Check an engine result in `T` (the gradients too when given) against the truth.
pub fn check<T: NdFloat>(
    what: &str,
    case: &Case,
    truth: &Truth,
    merges: usize,
    fwd: &Attention<T>,
    grads: Option<&Gradients<T>>,
) -> Result<(), TestCaseError> {
    let budget = Budget::new::<T>(case, truth, merges);
    let dust = budget.dust();
    within(&format!("{what}: out"), &wide(&fwd.out), &truth.out, &truth.out_mag, SAFETY * budget.out(), dust)?;
    for ((i, &g), &w) in wide(&fwd.lse).indexed_iter().zip(&truth.lse) {
        let tol = SAFETY * budget.lse();
        let ok = if w == f64::NEG_INFINITY { g == w } else { (g - w).abs() <= tol };
        prop_assert!(ok, "{what}: lse {i:?}: got {g:e}, want {w:e}, tol {tol:e}");
    }
    if let Some(grads) = grads {
        let got = [&grads.dq, &grads.dk, &grads.dv];
        for (((name, got), want), mag) in ["dq", "dk", "dv"].iter().zip(got).zip(&truth.grads).zip(&truth.grad_mags) {
            within(&format!("{what}: {name}"), &wide(got), want, mag, SAFETY * budget.grad(), dust)?;
        }
    }
    Ok(())
}

//! Shared support for the proofs: naive oracles written independently of the blocked
//! engine, error measures, and proptest strategies.
//!
//! The naive oracles below loop over every (query, key) pair with an explicit
//! multiplicity function. They are deliberately the most direct transcription of the
//! math, so that the blocked engine, the pattern code and the merge are all checked
//! against something that shares none of their code.

use ndarray::{Array3, Array4, ArrayView4};

/// Relative error `||x - r|| / ||r||` (Frobenius), the project's one error measure.
/// When `||r|| == 0` it is `||x||`, so an all-zero reference still catches garbage.
pub fn rel_err<'a>(x: impl IntoIterator<Item = &'a f64>, r: impl IntoIterator<Item = &'a f64>) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (a, b) in x.into_iter().zip(r) {
        num += (a - b) * (a - b);
        den += b * b;
    }
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// Naive attention with multiplicity `count(b, h, i, j)`: returns `(out, lse)` with
/// `out` normalised (no output scale) and `lse = -inf`, `out = 0` for empty rows.
pub fn naive_attention(
    q: ArrayView4<f64>,
    k: ArrayView4<f64>,
    v: ArrayView4<f64>,
    scale: f64,
    count: impl Fn(usize, usize, usize, usize) -> u32,
) -> (Array4<f64>, Array3<f64>) {
    let (batch, n, heads, d) = q.dim();
    let nk = k.dim().1;
    let dv = v.dim().3;
    let mut out = Array4::zeros((batch, n, heads, dv));
    let mut lse = Array3::from_elem((batch, heads, n), f64::NEG_INFINITY);
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..n {
                // (key, score, multiplicity) of every allowed key.
                let allowed: Vec<(usize, f64, f64)> = (0..nk)
                    .filter_map(|j| {
                        let c = count(b, h, i, j);
                        (c > 0).then(|| {
                            let s: f64 = (0..d).map(|x| q[[b, i, h, x]] * k[[b, j, h, x]]).sum::<f64>() * scale;
                            (j, s, c as f64)
                        })
                    })
                    .collect();
                if allowed.is_empty() {
                    continue;
                }
                let m = allowed.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = allowed.iter().map(|&(_, s, c)| c * (s - m).exp()).sum();
                lse[[b, h, i]] = m + z.ln();
                for &(j, s, c) in &allowed {
                    let p = c * (s - m).exp() / z;
                    for x in 0..dv {
                        out[[b, i, h, x]] += p * v[[b, j, h, x]];
                    }
                }
            }
        }
    }
    (out, lse)
}

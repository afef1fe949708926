//! Random test inputs in the kernels' element types: standard normals rounded to bf16
//! or f16, as the 16-bit words a kernel reads and their exact f64 values for the
//! reference (the one helper every check, test and benchmark draws inputs from), and
//! the large-score q and k of the kernel check ([`Logits`]), shaped from the same draws.

use crate::shape::Dtype;
use ndarray::Array4;
use ringdil_reference::random::SplitMix64;

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

/// The nominal magnitude of [`Logits::Large`]: every scaled score `|s| <= 1e4`.
pub const LARGE_LOGITS: f64 = 1e4;

/// The common score of [`Logits::Offset`]: every scaled score is about `5e3 + N(0, 1)`.
pub const OFFSET_LOGITS: f64 = 5e3;

/// What the scaled scores `s = q . k / sqrt(d)` of a case look like. `v` and `d_out` are
/// standard normals in every case; only q and k are shaped, row by row (one row: the `d`
/// values of one token and head), from the same normal draws as [`rounded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Standard normals: `s ~ N(0, 1)`.
    Unit,
    /// Every row of q and k a random direction (its normal draws, normalised) of length
    /// `R`, `R^2 = 1e4 sqrt(d) / (1 + 2^-8)^2`. Rounding moves each element by at most
    /// `2^-8` of itself (bf16; f16 by less), so a rounded row is at most `(1 + 2^-8) R`
    /// long and, by Cauchy-Schwarz, `|s| <= sum_i |q_i k_i| / sqrt(d) <= 1e4`. Random
    /// directions in `d` dims have cosines of about `1 / sqrt(d)`: a row's scores spread
    /// with a deviation of about `1e4 / sqrt(d)` (1.2e3 at d = 64; the largest `|s|` of a
    /// case is 3e3 to 6e3), far beyond f32 `exp`'s range (88), and the softmax of most
    /// rows is one-hot. A kernel that forgot to subtract the running maximum returns inf
    /// or NaN.
    Large,
    /// Component 0 of every q row is `5e3 sqrt(d)` (rounded), of every k row exactly 1; the
    /// other components are standard normals. Every score of every row is then `5e3 +
    /// N(0, (d-1)/d)` (the offset within 8 of 5e3 after rounding: bf16 turns 40000 into
    /// 39936 at d = 64): a large offset common to the row with differences of order 1, where
    /// many keys share the softmax, subtracting the maximum is all that keeps `exp` finite,
    /// and the f32 sum of a score (about `5e3 sqrt(d)` before scaling) keeps only about
    /// `2^-23 * 5e3` of absolute precision. (The offset is on one component of q, not
    /// spread over all of k: a k with a large component common to every key would make
    /// dQ = scale dS K cancel that component, since the rows of dS sum to 0, and measure
    /// the 16-bit rounding of dS instead of the kernel.) f16 holds `5e3 sqrt(128)` = 56569
    /// below its maximum 65504.
    Offset,
}

impl Logits {
    /// The nominal magnitude of the scaled scores (1 for unit normals).
    pub fn magnitude(self) -> f64 {
        match self {
            Logits::Unit => 1.0,
            Logits::Large => LARGE_LOGITS,
            Logits::Offset => OFFSET_LOGITS,
        }
    }

    /// The scores as a case's name states them (the host tests check the statement).
    pub fn describe(self) -> &'static str {
        match self {
            Logits::Unit => "unit logits (s ~ N(0, 1))",
            Logits::Large => "large logits (|s| <= 1e4)",
            Logits::Offset => "offset logits (s = 5e3 +- 20)",
        }
    }

    /// Rows of q (`query`) or of k, drawn from `rng` as [`rounded`] draws them, shaped as
    /// the variant says and then rounded to `dtype`. [`Logits::Unit`] gives exactly what
    /// [`rounded`] gives.
    pub fn rounded(self, dims: [usize; 4], dtype: Dtype, query: bool, rng: &mut SplitMix64) -> (Vec<u16>, Array4<f64>) {
        let d = dims[3];
        let mut draws: Vec<f64> = (0..dims.iter().product()).map(|_| rng.normal()).collect();
        for row in draws.chunks_mut(d) {
            match self {
                Logits::Unit => {}
                Logits::Large => {
                    let length = (LARGE_LOGITS * (d as f64).sqrt()).sqrt() / (1.0 + 2f64.powi(-8));
                    let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
                    row.iter_mut().for_each(|x| *x *= length / norm);
                }
                Logits::Offset => row[0] = if query { OFFSET_LOGITS * (d as f64).sqrt() } else { 1.0 },
            }
        }
        let (bits, values): (Vec<u16>, Vec<f64>) = draws.into_iter().map(|x| round(x, dtype)).unzip();
        (bits, Array4::from_shape_vec(dims, values).expect("sized by dims"))
    }
}

/// The words of [`rounded`] alone (same draws), for benchmarks that need no reference.
pub fn rounded_bits(len: usize, dtype: Dtype, rng: &mut SplitMix64) -> Vec<u16> {
    rounded_draws(len, dtype, rng).map(|(bits, _)| bits).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Unit logits are the plain rounded normals; the shaped rows keep the draws' order
    /// (the same generator state afterwards) and their stated form.
    #[test]
    fn shaped_rows_come_from_the_same_draws() {
        let dims = [1, 3, 2, 8];
        let (mut a, mut b) = (SplitMix64::new(5), SplitMix64::new(5));
        assert_eq!(Logits::Unit.rounded(dims, Dtype::Bf16, true, &mut a), rounded(dims, Dtype::Bf16, &mut b));
        let (_, q) = Logits::Offset.rounded(dims, Dtype::F16, true, &mut a);
        let (_, k) = Logits::Offset.rounded(dims, Dtype::F16, false, &mut b);
        assert_eq!(a.next_u64(), b.next_u64());
        assert!(q.iter().step_by(8).all(|&x| x == round(5e3 * 8f64.sqrt(), Dtype::F16).1));
        assert!(k.iter().step_by(8).all(|&x| x == 1.0));
        let (_, large) = Logits::Large.rounded(dims, Dtype::Bf16, true, &mut a);
        for row in large.as_slice().unwrap().chunks(8) {
            let length = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!((length / (LARGE_LOGITS * 8f64.sqrt()).sqrt() - 1.0).abs() < 1e-2, "{length}");
        }
    }
}

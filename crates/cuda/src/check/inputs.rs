//! Random test inputs in the kernels' element types: standard normals rounded to bf16
//! or f16, as the 16-bit words a kernel reads and their exact f64 values for the
//! reference (the one helper every check, test and benchmark draws inputs from).

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
}

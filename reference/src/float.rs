//! Element types. The reference is generic over `f32` and `f64` (ndarray's
//! [`NdFloat`]); `f64` is the ground truth every other result is compared with.
//! bf16 and f16 inputs are widened to f32 by [`crate::attention_low_precision`].

use ndarray::NdFloat;

/// Numeric conversion between float types (`f64 -> f32` rounds; never fails).
pub fn cast<A: NdFloat, B: NdFloat>(x: A) -> B {
    B::from(x).expect("float to float conversion is total")
}

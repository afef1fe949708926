//! Deterministic random tensors for tests, the CLI's `verify` sweep and benchmarks.
//!
//! A seeded SplitMix64 stream with Box-Muller normals: small, dependency-free and the
//! same on every platform, so a failing seed printed by one tool reproduces in another.

use ndarray::Array4;

/// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state, one multiply-xorshift output.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// Standard normal (Box-Muller; the second value is discarded for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform(); // (0, 1]: ln is finite
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// A `[batch, seq, heads, dim]` tensor of standard normals from `seed`.
pub fn normal_tensor(shape: [usize; 4], seed: u64) -> Array4<f64> {
    let mut rng = SplitMix64::new(seed);
    Array4::from_shape_simple_fn(shape, || rng.normal())
}

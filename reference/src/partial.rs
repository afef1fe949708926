//! The online-softmax algebra: partial attention results and their merge.
//!
//! A [`Partial`] is attention of some queries over *a subset* `K` of their keys:
//!
//! ```text
//!   lse_i = ln sum_{j in K} c_ij exp(s_ij)          (log of the softmax denominator)
//!   out_i = sum_{j in K} c_ij exp(s_ij - lse_i) v_j   (normalised over K only)
//! ```
//!
//! For disjoint key sets `A` and `B`, the partial over `A u B` is
//!
//! ```text
//!   lse = logaddexp(lse_A, lse_B) = m + ln(exp(lse_A - m) + exp(lse_B - m)),  m = max(lse_A, lse_B)
//!   out = exp(lse_A - lse) out_A + exp(lse_B - lse) out_B
//! ```
//!
//! which is [`Partial::merge`]. It is associative and commutative (exactly in real
//! arithmetic, to rounding in floats), and [`Partial::empty`] (`out = 0`,
//! `lse = -inf`) is its identity; a row with no key at all keeps `lse = -inf` and
//! `out = 0` and never produces a NaN. Ring attention, LongNet's branch combine and
//! flash attention's key tiles are all this one operation.
//!
//! **Magnitudes.** Both exponents are taken relative to `m`, so they are `<= 0` and the
//! larger is exactly `exp(0) = 1`: LSEs of any finite size (`+-1e3`, where `exp`
//! overflows or underflows f64, or `1e308`) merge to finite values with weights that sum
//! to 1 up to rounding. An LSE of `+inf` or NaN is no log of a sum of finite
//! exponentials (`+inf - m` would be NaN); merge refuses it with [`Error::BadLse`]
//! naming the operand and the first such `[batch, head, row]`.
//!
//! **Merge never writes into its inputs.** It returns a new value. Earlier PyTorch
//! ports of ring attention updated the running output in place (`out.mul_(...)`,
//! `out += ...`); autograd had saved that tensor for the backward of the previous step,
//! so the in-place update either raised "a variable needed for gradient computation has
//! been modified by an inplace operation" or, with `.data` tricks, silently gave wrong
//! gradients. A value-returning merge keeps every step's inputs intact for the backward
//! pass; the cost is one extra buffer, which is the right trade in a specification.

use crate::check;
use crate::error::{Error, Result};
use crate::float::cast;
use ndarray::{Array3, Array4, Axis, NdFloat, Zip};

/// Attention over a subset of keys: `out` is `[batch, seq, heads, head_dim]`, `lse` is
/// `[batch, heads, seq]` (the flash-attention layout of the log-sum-exp).
#[derive(Debug, Clone, PartialEq)]
pub struct Partial<T> {
    pub out: Array4<T>,
    pub lse: Array3<T>,
}

impl<T: NdFloat> Partial<T> {
    /// The merge identity: no keys seen yet.
    pub fn empty(batch: usize, seq: usize, heads: usize, head_dim: usize) -> Self {
        Partial {
            out: Array4::zeros((batch, seq, heads, head_dim)),
            lse: Array3::from_elem((batch, heads, seq), T::neg_infinity()),
        }
    }

    /// Attention over the union of both partials' (disjoint) key sets. Returns a new
    /// value; see the module docs for why it is never in place, and for the LSEs it
    /// refuses ([`Error::BadLse`]).
    pub fn merge(&self, other: &Partial<T>) -> Result<Partial<T>> {
        if self.out.shape() != other.out.shape() || self.lse.shape() != other.lse.shape() {
            return Err(Error::MergeShape { left: self.out.shape().to_vec(), right: other.out.shape().to_vec() });
        }
        check::lse("merge: left operand", &self.lse.view())?;
        check::lse("merge: right operand", &other.lse.view())?;
        let mut lse = Array3::zeros(self.lse.raw_dim());
        // Weights of each side, [batch, heads, seq]; both 0 when both sides are empty.
        let mut w_self = Array3::zeros(self.lse.raw_dim());
        let mut w_other = Array3::zeros(self.lse.raw_dim());
        Zip::from(&mut lse).and(&mut w_self).and(&mut w_other).and(&self.lse).and(&other.lse).for_each(
            |l, ws, wo, &a, &b| {
                let m = a.max(b);
                if m == T::neg_infinity() {
                    *l = m;
                    return;
                }
                let (ea, eb) = ((a - m).exp(), (b - m).exp());
                let sum = ea + eb;
                *l = m + sum.ln();
                *ws = ea / sum;
                *wo = eb / sum;
            },
        );
        let mut out = Array4::zeros(self.out.raw_dim());
        for ((((mut o, a), b), ws), wo) in out
            .axis_iter_mut(Axis(0))
            .zip(self.out.axis_iter(Axis(0)))
            .zip(other.out.axis_iter(Axis(0)))
            .zip(w_self.axis_iter(Axis(0)))
            .zip(w_other.axis_iter(Axis(0)))
        {
            // o, a, b: [seq, heads, dim]; ws, wo: [heads, seq].
            Zip::indexed(&mut o).and(&a).and(&b).for_each(|(s, h, _), o, &x, &y| {
                *o = ws[[h, s]] * x + wo[[h, s]] * y;
            });
        }
        Ok(Partial { out, lse })
    }

    /// Merge a list of partials left to right, starting from `empty`.
    pub fn merge_all<'a>(parts: impl IntoIterator<Item = &'a Partial<T>>, empty: Partial<T>) -> Result<Partial<T>>
    where
        T: 'a,
    {
        parts.into_iter().try_fold(empty, |acc, p| acc.merge(p))
    }

    /// `(batch, seq, heads, head_dim)` of the output.
    pub fn dims(&self) -> (usize, usize, usize, usize) {
        self.out.dim()
    }

    /// Convert the element type (e.g. f32 results to f64 for comparison).
    pub fn cast<U: NdFloat>(&self) -> Partial<U> {
        Partial { out: self.out.mapv(|x| cast(x)), lse: self.lse.mapv(|x| cast(x)) }
    }
}

//! Input checks shared by every entry point: shapes, finiteness, position lists.

use crate::error::{Error, Result};
use crate::float::cast;
use ndarray::{ArrayView, ArrayView3, ArrayView4, Dimension, IntoDimension, NdFloat};

/// `[batch, seq, heads, head_dim]` with every dimension positive.
pub(crate) fn dims4<T>(name: &'static str, x: &ArrayView4<T>) -> Result<[usize; 4]> {
    let (b, s, h, d) = x.dim();
    for (dim, size) in [("batch", b), ("seq", s), ("heads", h), ("head_dim", d)] {
        if size == 0 {
            return Err(Error::ZeroDim { tensor: name, dim });
        }
    }
    Ok([b, s, h, d])
}

/// The first index (in memory order of the logical layout) where `bad` holds, with its value.
fn first<T: NdFloat, D: Dimension>(x: &ArrayView<T, D>, bad: impl Fn(T) -> bool) -> Option<(Vec<usize>, f64)> {
    x.indexed_iter().find(|(_, v)| bad(**v)).map(|(i, &v)| (i.into_dimension().slice().to_vec(), cast(v)))
}

/// Fail with the first index of a NaN or infinity.
pub(crate) fn finite<T: NdFloat, D: Dimension>(name: &'static str, x: &ArrayView<T, D>) -> Result<()> {
    match first(x, |v| !v.is_finite()) {
        None => Ok(()),
        Some((index, value)) => Err(Error::NonFinite { tensor: name, index, value }),
    }
}

/// A log-sum-exp array `[batch, heads, rows]`: every entry finite, or `-inf` (a row with
/// no key, the merge identity); fail with the first NaN or `+inf`, which no sum of
/// finite exponentials produces.
pub(crate) fn lse<T: NdFloat>(what: &'static str, x: &ArrayView3<T>) -> Result<()> {
    match first(x, |v| v.is_nan() || v == T::infinity()) {
        None => Ok(()),
        Some((index, value)) => Err(Error::BadLse { what, index, value }),
    }
}

/// `got == expected`, or a shape error naming `what`.
pub(crate) fn same_shape(what: &'static str, expected: &[usize], got: &[usize]) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::ShapeMismatch { what, expected: expected.to_vec(), got: got.to_vec() })
    }
}

/// Every position is below `seq_len` and none repeats.
pub(crate) fn positions(what: &'static str, pos: &[usize], seq_len: usize) -> Result<()> {
    let mut seen = vec![false; seq_len];
    for &p in pos {
        if p >= seq_len || std::mem::replace(&mut seen[p], true) {
            return Err(Error::BadPosition { what, position: p, seq_len });
        }
    }
    Ok(())
}

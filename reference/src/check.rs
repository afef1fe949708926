//! Input checks shared by every entry point: shapes, finiteness, position lists.

use crate::error::{Error, Result};
use ndarray::{ArrayView4, NdFloat};

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

/// Fail with the first index of a NaN or infinity.
pub(crate) fn finite<T: NdFloat>(name: &'static str, x: &ArrayView4<T>) -> Result<()> {
    match x.indexed_iter().find(|(_, v)| !v.is_finite()) {
        None => Ok(()),
        Some(((a, b, c, d), v)) => {
            Err(Error::NonFinite { tensor: name, index: vec![a, b, c, d], value: v.to_f64().unwrap_or(f64::NAN) })
        }
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

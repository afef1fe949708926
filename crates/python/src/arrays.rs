//! NumPy arguments in, NumPy results out.
//!
//! Arrays are borrowed, not copied: a float64 or float32 array of any strides becomes an
//! `ndarray` view of the same memory. Every check names the argument, because a shape
//! error in attention code is otherwise a guessing game between four tensors.

use numpy::{
    Element, PyArray, PyArrayDescrMethods, PyArrayMethods, PyReadonlyArray, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::errors;

/// The element types the reference computes in; results have the inputs' type.
pub trait Float: Element + ndarray::NdFloat {}
impl Float for f32 {}
impl Float for f64 {}

/// Which of the two float types an argument holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
}

/// `name` as a NumPy array (any dtype), or `TypeError` naming it.
fn untyped<'a, 'py>(name: &str, obj: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    obj.cast::<PyUntypedArray>().map_err(|_| {
        let type_name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_string());
        PyTypeError::new_err(format!("{name}: expected a numpy.ndarray, got {type_name}"))
    })
}

/// The dtype of array `name`: float32 or float64, anything else is a `TypeError`.
pub fn dtype_of(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    let array = untyped(name, obj)?;
    let py = obj.py();
    let dtype = array.dtype();
    if dtype.is_equiv_to(&numpy::dtype::<f64>(py)) {
        Ok(Dtype::F64)
    } else if dtype.is_equiv_to(&numpy::dtype::<f32>(py)) {
        Ok(Dtype::F32)
    } else {
        Err(PyTypeError::new_err(format!("{name}: expected dtype float64 or float32, got {dtype}")))
    }
}

/// Array `name` with `layout.len()` dimensions and element type `T` (the dtype of `like`,
/// the argument that fixed it), borrowed read-only.
///
/// `layout` names the axes, e.g. `["batch", "seq", "heads", "head_dim"]`, for the message.
pub fn array<'py, T: Float, D: ndarray::Dimension>(
    name: &str,
    obj: &Bound<'py, PyAny>,
    layout: &[&str],
    like: &str,
) -> PyResult<PyReadonlyArray<'py, T, D>> {
    let array = untyped(name, obj)?;
    if array.ndim() != layout.len() {
        return Err(errors::value(
            name,
            format_args!("expected {} dimensions [{}], got {}", layout.len(), layout.join(", "), array.ndim()),
        ));
    }
    let expected = numpy::dtype::<T>(obj.py());
    let dtype = array.dtype();
    if !dtype.is_equiv_to(&expected) {
        let why = if like == name { String::new() } else { format!(" (the dtype of {like})") };
        return Err(PyTypeError::new_err(format!("{name}: expected dtype {expected}{why}, got {dtype}")));
    }
    Ok(obj.cast::<PyArray<T, D>>()?.readonly())
}

/// `[batch, seq, heads, head_dim]`: q, k, v, out, d_out and the gradients.
pub const TOKENS: [&str; 4] = ["batch", "seq", "heads", "head_dim"];
/// `[batch, heads, seq]`: the log-sum-exp.
pub const LSE: [&str; 3] = ["batch", "heads", "seq"];

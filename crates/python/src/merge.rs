//! `merge` of two partial results on NumPy arrays: `Partial::merge` of the reference.

use numpy::{IntoPyArray, PyReadonlyArray3, PyReadonlyArray4, PyUntypedArrayMethods};
use pyo3::prelude::*;
use ringdil_reference::Partial;

use crate::arrays::{self, Dtype, Float, LSE, TOKENS};
use crate::errors;

/// One operand `(out, lse)`, checked against `out1`'s shape: `out` like it and `lse`
/// `[batch, heads, seq]` of it (the reference only compares like with like, so a
/// transposed LSE would otherwise merge the wrong rows without complaint).
fn partial<'py, T: Float>(
    names: (&str, &str),
    (out, lse): (&Bound<'py, PyAny>, &Bound<'py, PyAny>),
    out_shape: Option<&[usize]>,
) -> PyResult<Partial<T>> {
    let out: PyReadonlyArray4<T> = arrays::array(names.0, out, &TOKENS, "out1")?;
    let lse: PyReadonlyArray3<T> = arrays::array(names.1, lse, &LSE, "out1")?;
    let shape = out_shape.unwrap_or(out.shape());
    if out.shape() != shape {
        return Err(errors::value(
            names.0,
            format_args!("expected shape {shape:?} (the shape of out1), got {:?}", out.shape()),
        ));
    }
    let [b, n, h, _] = [shape[0], shape[1], shape[2], shape[3]];
    if lse.shape() != [b, h, n] {
        return Err(errors::value(
            names.1,
            format_args!("expected shape {:?} ([batch, heads, seq] of out1), got {:?}", [b, h, n], lse.shape()),
        ));
    }
    Ok(Partial { out: out.as_array().to_owned(), lse: lse.as_array().to_owned() })
}

fn merge_as<'py, T: Float>(
    py: Python<'py>,
    one: (&Bound<'py, PyAny>, &Bound<'py, PyAny>),
    two: (&Bound<'py, PyAny>, &Bound<'py, PyAny>),
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let left: Partial<T> = partial(("out1", "lse1"), one, None)?;
    let right: Partial<T> = partial(("out2", "lse2"), two, Some(left.out.shape()))?;
    let merged = left.merge(&right).map_err(errors::reference)?;
    Ok((merged.out.into_pyarray(py).into_any(), merged.lse.into_pyarray(py).into_any()))
}

/// `(out, lse)` over the union of both operands' keys; see `ringdil.reference.merge`.
#[pyfunction]
pub fn merge<'py>(
    py: Python<'py>,
    out1: &Bound<'py, PyAny>,
    lse1: &Bound<'py, PyAny>,
    out2: &Bound<'py, PyAny>,
    lse2: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    match arrays::dtype_of("out1", out1)? {
        Dtype::F64 => merge_as::<f64>(py, (out1, lse1), (out2, lse2)),
        Dtype::F32 => merge_as::<f32>(py, (out1, lse1), (out2, lse2)),
    }
}

//! `attention` and `attention_backward` on NumPy arrays: argument checks, then the
//! reference's `attention` / `attention_backward` in the inputs' float type.

use numpy::{IntoPyArray, PyReadonlyArray4};
use pyo3::prelude::*;
use ringdil_reference::{self as reference, Spec};

use crate::arrays::{self, Dtype, Float, TOKENS};
use crate::errors;
use crate::pattern::PyPattern;

/// q, k, v (and d_out) of one dtype, fixed by `q`.
struct Inputs<'py, T: Float> {
    q: PyReadonlyArray4<'py, T>,
    k: PyReadonlyArray4<'py, T>,
    v: PyReadonlyArray4<'py, T>,
}

impl<'py, T: Float> Inputs<'py, T> {
    fn new(q: &Bound<'py, PyAny>, k: &Bound<'py, PyAny>, v: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(Inputs {
            q: arrays::array("q", q, &TOKENS, "q")?,
            k: arrays::array("k", k, &TOKENS, "q")?,
            v: arrays::array("v", v, &TOKENS, "q")?,
        })
    }

    fn forward(&self, spec: &Spec) -> PyResult<reference::Attention<T>> {
        reference::attention(self.q.as_array(), self.k.as_array(), self.v.as_array(), spec).map_err(errors::reference)
    }
}

/// Packed documents (`docs/semantics.md`, section 16): a list of boundary lists, one per
/// batch row, or one flat list over the batch rows laid end to end.
pub(crate) fn documents(value: &Bound<'_, PyAny>) -> PyResult<reference::Documents> {
    if let Ok(rows) = value.extract::<Vec<Vec<usize>>>() {
        return Ok(reference::Documents::per_row(rows));
    }
    value.extract::<Vec<usize>>().map(reference::Documents::flat).map_err(|_| {
        errors::value("documents", "expected one list of boundaries per batch row, or one flat list, of integers >= 0")
    })
}

/// The spec of one call: the pattern's (dense if none), the call's `causal` OR-ed in,
/// the call's `scale` if given, `key_lengths` (each a non-negative integer) and
/// `documents`.
pub(crate) fn spec(
    pattern: Option<PyRef<'_, PyPattern>>,
    causal: bool,
    scale: Option<f64>,
    (key_lengths, docs): (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
) -> PyResult<Spec> {
    let mut spec = PyPattern::spec(pattern.as_deref(), causal, scale);
    if let Some(lengths) = key_lengths {
        let lengths = lengths
            .try_iter()
            .map_err(|_| errors::value("key_lengths", "expected a sequence of integers, one per batch row"))?
            .enumerate()
            .map(|(b, length)| {
                let length = length?;
                length.extract::<usize>().map_err(|_| {
                    errors::value("key_lengths", format_args!("entry {b} is {length}; expected an integer >= 0"))
                })
            })
            .collect::<PyResult<Vec<usize>>>()?;
        spec.key_lengths = Some(lengths);
    }
    if let Some(docs) = docs {
        spec = spec.documents(documents(docs)?);
    }
    Ok(spec)
}

fn forward<'py, T: Float>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    spec: &Spec,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let result = Inputs::<T>::new(q, k, v)?.forward(spec)?;
    Ok((result.out.into_pyarray(py).into_any(), result.lse.into_pyarray(py).into_any()))
}

#[allow(clippy::type_complexity)]
fn backward<'py, T: Float>(
    py: Python<'py>,
    (q, k, v, d_out): (&Bound<'py, PyAny>, &Bound<'py, PyAny>, &Bound<'py, PyAny>, &Bound<'py, PyAny>),
    spec: &Spec,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let inputs = Inputs::<T>::new(q, k, v)?;
    let d_out: PyReadonlyArray4<T> = arrays::array("d_out", d_out, &TOKENS, "q")?;
    let forward = inputs.forward(spec)?;
    let grads = reference::attention_backward(
        inputs.q.as_array(),
        inputs.k.as_array(),
        inputs.v.as_array(),
        spec,
        &forward,
        d_out.as_array(),
    )
    .map_err(errors::reference)?;
    Ok((
        grads.dq.into_pyarray(py).into_any(),
        grads.dk.into_pyarray(py).into_any(),
        grads.dv.into_pyarray(py).into_any(),
    ))
}

/// `(out, lse)` of self-attention; see `ringdil.reference.attention`.
#[pyfunction]
#[pyo3(signature = (q, k, v, pattern, causal, scale, key_lengths, documents))]
#[allow(clippy::too_many_arguments)] // one parameter per argument of the Python function
pub fn attention<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    pattern: Option<PyRef<'py, PyPattern>>,
    causal: bool,
    scale: Option<f64>,
    key_lengths: Option<&Bound<'py, PyAny>>,
    documents: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let spec = spec(pattern, causal, scale, (key_lengths, documents))?;
    match arrays::dtype_of("q", q)? {
        Dtype::F64 => forward::<f64>(py, q, k, v, &spec),
        Dtype::F32 => forward::<f32>(py, q, k, v, &spec),
    }
}

/// `(dq, dk, dv)` of `attention` for the upstream gradient `d_out`; see
/// `ringdil.reference.attention_backward`.
#[pyfunction]
#[pyo3(signature = (q, k, v, d_out, pattern, causal, scale, key_lengths, documents))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // as `attention`, plus `d_out`
pub fn attention_backward<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    d_out: &Bound<'py, PyAny>,
    pattern: Option<PyRef<'py, PyPattern>>,
    causal: bool,
    scale: Option<f64>,
    key_lengths: Option<&Bound<'py, PyAny>>,
    documents: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let spec = spec(pattern, causal, scale, (key_lengths, documents))?;
    let args = (q, k, v, d_out);
    match arrays::dtype_of("q", q)? {
        Dtype::F64 => backward::<f64>(py, args, &spec),
        Dtype::F32 => backward::<f32>(py, args, &spec),
    }
}

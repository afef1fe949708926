//! `ringdil.Pattern`: a pattern file (JSON/TOML, or the same fields as a dict), parsed by
//! `ringdil-pattern-file` (the CLI's parser too) so that Python and `ringdil attend` read
//! one schema with one set of error messages (docs/guide/pattern-files.md).
//!
//! A pattern carries its file's `causal` and `scale`; the attention functions OR the
//! `causal` argument with the file's (as `ringdil attend --causal` does) and let an
//! explicit `scale` argument win over the file's.

use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyRange};
use ringdil_cuda::GpuPattern;
use ringdil_pattern_file::{FileError, PatternFile};
use ringdil_reference::pattern::Dense;
use ringdil_reference::{KeyRun, Pattern, Spec};
use std::path::PathBuf;
use std::sync::Arc;

use crate::errors;

/// An attention pattern built from a pattern file or dict. Immutable.
#[pyclass(name = "Pattern", module = "ringdil", frozen)]
pub struct PyPattern {
    file: PatternFile,
    spec: Spec,
}

impl PyPattern {
    fn new(file: PatternFile) -> PyResult<Self> {
        let spec = file.spec().map_err(errors::pattern_file)?;
        Ok(PyPattern { file, spec })
    }

    /// The spec of `pattern` (dense when `None`) for a call's `causal` and `scale`.
    pub fn spec(pattern: Option<&Self>, causal: bool, scale: Option<f64>) -> Spec {
        let mut spec = pattern.map_or_else(Spec::dense, |p| p.spec.clone());
        spec.causal |= causal;
        if scale.is_some() {
            spec.scale = scale;
        }
        spec
    }

    /// The GPU kernels' form of `pattern` (dense when `None`): the built-in kinds as
    /// themselves; a `dilated_expr` file as compact launches with offset tables where its
    /// branches allow (`ringdil_cuda::dilated_expr`), else as mask tables
    /// (`ringdil_cuda::mask_table`), identified by the file's contents so that a new
    /// object per call reuses them.
    pub fn gpu_pattern(pattern: Option<&Self>) -> PyResult<GpuPattern> {
        let Some(p) = pattern else { return Ok(GpuPattern::Dense) };
        GpuPattern::from_file(&p.file).map_err(errors::pattern_file)
    }

    fn pattern(pattern: Option<&Self>) -> Arc<dyn Pattern> {
        pattern.map_or_else(|| Arc::new(Dense) as Arc<dyn Pattern>, |p| p.spec.pattern.clone())
    }
}

/// Check `heads`, `seq_len` against the pattern, and each `(name, value, bound)` for
/// `value < bound`, before asking the pattern anything (it may assume valid arguments).
pub(crate) fn validate(
    pattern: &dyn Pattern,
    heads: usize,
    seq_len: usize,
    checks: &[(&str, usize, usize)],
) -> PyResult<()> {
    for (name, value) in [("heads", heads), ("seq_len", seq_len)] {
        if value == 0 {
            return Err(errors::value(name, "must be at least 1, got 0"));
        }
    }
    for &(name, value, bound) in checks {
        if value >= bound {
            return Err(errors::value(name, format_args!("{value} is out of range 0..{bound}")));
        }
    }
    pattern.validate(heads, seq_len).map_err(errors::reference)
}

/// The multiplicity `c[i, j]` of key `j` for query `i` (docs/semantics.md section 3),
/// after causality when `causal`.
fn counts(pattern: &dyn Pattern, seq_len: usize, head: usize, heads: usize, causal: bool) -> ndarray::Array2<u32> {
    let mut counts = ndarray::Array2::zeros((seq_len, seq_len));
    let mut runs = Vec::new();
    for (query, mut row) in counts.rows_mut().into_iter().enumerate() {
        runs.clear();
        pattern.key_runs(query, head, heads, seq_len, &mut runs);
        let limit = if causal { query + 1 } else { seq_len };
        for key in runs.iter().flat_map(|run| run.clipped(limit).iter()) {
            row[key] += 1;
        }
    }
    counts
}

#[pymethods]
impl PyPattern {
    /// Build a pattern from a dict with the fields of a pattern file
    /// (e.g. `{"kind": "dilated", "segment_lengths": [8, 16], "dilation_rates": [1, 2]}`).
    #[staticmethod]
    fn from_dict(fields: &Bound<'_, PyDict>) -> PyResult<Self> {
        // The parser's public entry point reads text; JSON is the lossless way there.
        let json = fields.py().import("json")?.call_method1("dumps", (fields,))?;
        let file = PatternFile::parse(&json.extract::<String>()?, false)
            .map_err(|message| errors::pattern_file(FileError::Parse { path: "dict".into(), message }))?;
        Self::new(file)
    }

    /// Read a pattern file: `.toml` is TOML, anything else JSON.
    #[staticmethod]
    fn from_file(path: PathBuf) -> PyResult<Self> {
        Self::new(PatternFile::load(&path).map_err(errors::pattern_file)?)
    }

    /// The file's `causal` field.
    #[getter]
    fn causal(&self) -> bool {
        self.spec.causal
    }

    /// The file's `scale` field (`None`: `1/sqrt(head_dim)`).
    #[getter]
    fn scale(&self) -> Option<f64> {
        self.spec.scale
    }

    fn __repr__(&self) -> String {
        format!("ringdil.Pattern({:?})", self.file)
    }
}

/// The pattern's key runs for `query` of `head`, as Python ranges (before causality).
#[pyfunction]
pub fn key_runs<'py>(
    py: Python<'py>,
    pattern: Option<PyRef<'py, PyPattern>>,
    query: usize,
    head: usize,
    heads: usize,
    seq_len: usize,
) -> PyResult<Vec<Bound<'py, PyRange>>> {
    let pattern = PyPattern::pattern(pattern.as_deref());
    validate(&*pattern, heads, seq_len, &[("query", query, seq_len), ("head", head, heads)])?;
    let mut runs = Vec::new();
    pattern.key_runs(query, head, heads, seq_len, &mut runs);
    runs.into_iter()
        .map(|KeyRun { start, end, step }| PyRange::new_with_step(py, start as isize, end as isize, step as isize))
        .collect()
}

/// Key multiplicities `[seq_len (query), seq_len (key)]` of `head`, uint32.
#[pyfunction]
pub fn key_counts<'py>(
    py: Python<'py>,
    pattern: Option<PyRef<'py, PyPattern>>,
    seq_len: usize,
    head: usize,
    heads: usize,
    causal: bool,
) -> PyResult<Bound<'py, PyArray2<u32>>> {
    let causal = causal || pattern.as_ref().is_some_and(|p| p.spec.causal);
    let pattern = PyPattern::pattern(pattern.as_deref());
    validate(&*pattern, heads, seq_len, &[("head", head, heads)])?;
    Ok(counts(&*pattern, seq_len, head, heads, causal).into_pyarray(py))
}

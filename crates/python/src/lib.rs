//! `ringdil._ringdil`: the native half of the `ringdil` Python package.
//!
//! It is a thin shell around `ringdil-reference`: every number comes from the reference
//! crate (the specification), and every pattern file goes through the CLI's parser (the
//! `ringdil-pattern-file` crate), so Python users get exactly the semantics of
//! `docs/semantics.md`. This crate only checks the NumPy arguments (naming the one that
//! is wrong), converts arrays and maps errors. The inspection tools (`pattern_stats`,
//! `verify`, `plan`) are the CLI library's own functions, returning its `--json` reports.
//! The public Python API, its defaults and docstrings live in `python/ringdil/`.

mod arrays;
mod attention;
mod cuda;
mod errors;
mod layout;
mod merge;
mod pattern;
mod ring_group;
mod tools;

use pyo3::prelude::*;

#[pymodule]
fn _ringdil(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<pattern::PyPattern>()?;
    m.add_function(wrap_pyfunction!(attention::attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention::attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(merge::merge, m)?)?;
    m.add_function(wrap_pyfunction!(layout::layout_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_forward, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_backward, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_backward_scratch, m)?)?;
    m.add_class::<ring_group::RingGroup>()?;
    m.add_function(wrap_pyfunction!(ring_group::nccl_unique_id, m)?)?;
    m.add_function(wrap_pyfunction!(pattern::key_runs, m)?)?;
    m.add_function(wrap_pyfunction!(pattern::key_counts, m)?)?;
    m.add_function(wrap_pyfunction!(tools::pattern_stats, m)?)?;
    m.add_function(wrap_pyfunction!(tools::verify, m)?)?;
    m.add_function(wrap_pyfunction!(tools::plan, m)?)?;
    Ok(())
}

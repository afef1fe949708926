//! The CLI's inspection tools from Python: `pattern_stats` (`ringdil pattern show`),
//! `verify` (`ringdil verify`) and `plan` (`ringdil plan`).
//!
//! Each calls the same function of the CLI's library (`ringdil_cli`) that the command
//! calls and returns what the command prints with `--json`, serialised by the same serde
//! code and read back with Python's `json`, so a notebook shows the CLI's numbers without
//! running the binary. Only the argument checks are this crate's: they name the Python
//! argument instead of the CLI flag.

use pyo3::prelude::*;
use ringdil_cli::distributed::{PlanCost, flag, kind_of_flag};
use ringdil_cli::pattern_view;
use ringdil_cli::verify::{Row, draw_case, run_case};
use ringdil_reference::pattern::Dense;
use ringdil_reference::ring::{ChunkPlan, Kind};
use ringdil_reference::{Heads, Spec};
use serde::Serialize;

use crate::errors;
use crate::pattern::{PyPattern, validate};

/// Check `heads`, `seq_len` and each `(name, value, bound)` (naming the argument), then the
/// pattern's parameters for them (`ValueError("pattern: ...")`).
fn check(spec: &Spec, heads: usize, seq_len: usize, checks: &[(&str, usize, usize)]) -> PyResult<()> {
    validate(&Dense, heads, seq_len, checks)?;
    spec.pattern.validate(heads, seq_len).map_err(|e| errors::value("pattern", e))
}

/// `value` as Python objects: serde's JSON (as the CLI prints it), through `json.loads`.
fn to_python<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).expect("the CLI's reports serialise (its --json prints them)");
    py.import("json")?.call_method1("loads", (text,))
}

/// The statistics of `ringdil pattern show --json`: density, keys per query, largest
/// multiplicity, empty queries and the receptive field over 1..=`layers` layers.
#[pyfunction]
pub fn pattern_stats<'py>(
    py: Python<'py>,
    pattern: Option<PyRef<'py, PyPattern>>,
    seq_len: usize,
    heads: usize,
    head: usize,
    layers: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = PyPattern::spec(pattern.as_deref(), false, None);
    check(&spec, heads, seq_len, &[("head", head, heads)])?;
    let stats = py
        .detach(|| pattern_view::stats(&spec, seq_len, heads, head, layers).map_err(|e| e.to_string()))
        .map_err(|e| errors::value("pattern", e))?;
    to_python(py, &stats)
}

/// The report of `ringdil verify --json`: `{"seed", "cases", "rows", "failed"}`. With a
/// pattern, every case uses it (named `name` in the rows); without, each case draws one.
#[pyfunction]
pub fn verify<'py>(
    py: Python<'py>,
    pattern: Option<PyRef<'py, PyPattern>>,
    name: String,
    cases: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let fixed = pattern.as_deref().map(|p| PyPattern::spec(Some(p), false, None));
    let rows = py.detach(|| -> Result<Vec<Row>, String> {
        let mut rows = Vec::new();
        for index in 0..cases {
            let case = draw_case(seed, index, fixed.as_ref().map(|s| (s, name.as_str())));
            let checked = run_case(&case)
                .map_err(|e| format!("case {index} (seed {}), pattern {}: {e}", case.seed, case.pattern))?;
            rows.extend(checked);
        }
        Ok(rows)
    });
    let rows = rows.map_err(|e| errors::value("pattern", e))?;
    let failed = rows.iter().filter(|r| !r.pass).count();
    let report = serde_json::json!({ "seed": seed, "cases": cases, "rows": rows, "failed": failed });
    to_python(py, &report)
}

/// The `cost` of `ringdil plan --json`: bytes each rank sends at each step of `schedule`
/// (forward and backward, batch 1) and the dense ring's totals on the same chunks;
/// `value_dim` (default `head_dim`) is v's head dim, at which V, dV, O and dO rows count.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn plan<'py>(
    py: Python<'py>,
    pattern: Option<PyRef<'py, PyPattern>>,
    seq_len: usize,
    ranks: usize,
    schedule: &str,
    layout: &Bound<'py, PyAny>,
    heads: usize,
    kv_heads: Option<usize>,
    head_dim: usize,
    value_dim: Option<usize>,
    element_bytes: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let value_dim = value_dim.unwrap_or(head_dim);
    let kind = kind_of_flag(schedule).ok_or_else(|| {
        let known: Vec<String> = Kind::ALL.iter().map(|&k| format!("{:?}", flag(k))).collect();
        errors::value("schedule", format_args!("unknown schedule {schedule:?}; expected one of {}", known.join(", ")))
    })?;
    for (name, value) in
        [("ranks", ranks), ("head_dim", head_dim), ("value_dim", value_dim), ("element_bytes", element_bytes)]
    {
        if value == 0 {
            return Err(errors::value(name, "must be at least 1, got 0"));
        }
    }
    let spec = PyPattern::spec(pattern.as_deref(), false, None);
    check(&spec, heads, seq_len, &[])?;
    let heads = Heads::new(heads, kv_heads.unwrap_or(heads)).map_err(|e| errors::value("kv_heads", e))?;
    let layout = crate::layout::parse(layout, seq_len, ranks, None)?;
    let chunks = ChunkPlan::new(seq_len, ranks, &layout).map_err(|e| errors::value("layout", e))?;
    let cost = py.detach(|| -> Result<PlanCost, ringdil_reference::Error> {
        let schedule = kind.build(&chunks, &spec, heads)?;
        let dense = Kind::Ring.build(&chunks, &Spec::dense(), heads)?;
        Ok(PlanCost::new(&schedule, &dense, (head_dim, value_dim), element_bytes))
    });
    to_python(py, &cost.map_err(errors::reference)?)
}

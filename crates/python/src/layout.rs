//! `ringdil.ring`'s layouts: which global tokens each rank of a ring owns, from the
//! reference's `ChunkPlan` (the same plans the ring simulation, the GPU ring and
//! `ringdil plan` use), so that Python shards a sequence exactly as the ring expects it.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use ringdil_reference::ring::{ChunkPlan, Layout, balanced_boundaries, causal_work};

use crate::errors;

/// `layout` as Python gives it: `"contiguous"`, `"zigzag"`, `"striped"`, `"balanced"`
/// (needs `documents`), `{"boundaries": [...]}` or `{"order": [...], "boundaries": [...]}`
/// (boundaries optional).
pub(crate) fn parse(
    layout: &Bound<'_, PyAny>,
    seq_len: usize,
    ranks: usize,
    documents: Option<(&Bound<'_, PyAny>, usize)>,
) -> PyResult<Layout> {
    const EXPECTED: &str = "expected \"contiguous\", \"zigzag\", \"striped\", \"balanced\", {\"boundaries\": [...]} \
                            or {\"order\": [...], \"boundaries\": [...]}";
    if layout.cast::<PyString>().is_ok() {
        return match layout.extract::<String>()?.as_str() {
            "contiguous" => Ok(Layout::Contiguous),
            "zigzag" => Ok(Layout::Zigzag),
            "striped" => Ok(Layout::Striped),
            "balanced" => {
                let Some((docs, batch)) = documents else {
                    return Err(errors::value(
                        "layout",
                        "\"balanced\" splits packed documents' causal work: pass documents",
                    ));
                };
                let docs = crate::attention::documents(docs)?;
                docs.validate(batch, seq_len).map_err(errors::reference)?;
                Ok(Layout::Boundaries(balanced_boundaries(&causal_work(&docs, batch, seq_len), ranks)))
            }
            other => Err(errors::value("layout", format_args!("unknown layout {other:?}; {EXPECTED}"))),
        };
    }
    let fields = layout.cast::<PyDict>().map_err(|_| errors::value("layout", EXPECTED))?;
    let list = |name: &str| -> PyResult<Option<Vec<usize>>> {
        fields
            .get_item(name)?
            .map(|v| v.extract::<Vec<usize>>())
            .transpose()
            .map_err(|_| errors::value("layout", format_args!("`{name}` must be a list of integers >= 0")))
    };
    match (list("order")?, list("boundaries")?) {
        (Some(order), boundaries) => Ok(Layout::Permuted { order, boundaries }),
        (None, Some(boundaries)) => Ok(Layout::Boundaries(boundaries)),
        (None, None) => Err(errors::value("layout", EXPECTED)),
    }
}

/// The global tokens of every rank, in the rank's local order: `tokens[r][i]` is the
/// global position of rank `r`'s local row `i`. `documents` (with `batch`) is needed by
/// the `"balanced"` layout only.
#[pyfunction]
#[pyo3(signature = (seq_len, ranks, layout, documents=None, batch=1))]
pub fn layout_tokens(
    seq_len: usize,
    ranks: usize,
    layout: &Bound<'_, PyAny>,
    documents: Option<&Bound<'_, PyAny>>,
    batch: usize,
) -> PyResult<Vec<Vec<usize>>> {
    if ranks == 0 {
        return Err(errors::value("ranks", "must be at least 1, got 0"));
    }
    let layout = parse(layout, seq_len, ranks, documents.map(|d| (d, batch)))?;
    let plan = ChunkPlan::new(seq_len, ranks, &layout).map_err(|e| errors::value("layout", e))?;
    Ok((0..ranks).map(|r| plan.tokens(r).to_vec()).collect())
}

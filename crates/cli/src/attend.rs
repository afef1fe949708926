//! `ringdil attend`: reference attention on tensors from files, on one device or on
//! simulated ranks.

use crate::tensor_io::{self, Tensor};
use ndarray::{Array3, Array4, NdFloat};
use ringdil_reference::ring::{ChunkPlan, Kind, Layout, Report, simulate};
use ringdil_reference::{Heads, Spec, attention};
use serde::Serialize;
use std::error::Error;
use std::path::Path;

/// Where the attention is computed.
pub enum How {
    SingleDevice,
    /// On `ranks` simulated ranks with `layout` and `schedule`; the output is gathered
    /// back into the original token order.
    Distributed {
        ranks: usize,
        layout: Layout,
        schedule: Kind,
    },
}

/// What `attend` did, for the terminal and for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct AttendReport {
    pub shape: Vec<usize>,
    pub dtype: &'static str,
    pub empty_rows: usize,
    pub seconds: f64,
    /// Elements sent per step and rank, and peak memory, when computed on ranks.
    pub distributed: Option<Report>,
}

/// Output, LSE and, for a distributed run, its communication report.
type Computed<T> = (Array4<T>, Array3<T>, Option<Report>);

/// Attention under `spec`; `how` says where.
fn compute<T: NdFloat>(
    q: Array4<T>,
    k: Array4<T>,
    v: Array4<T>,
    spec: &Spec,
    how: &How,
) -> Result<Computed<T>, Box<dyn Error>> {
    match how {
        How::SingleDevice => {
            let r = attention(q.view(), k.view(), v.view(), spec)?;
            Ok((r.out, r.lse, None))
        }
        How::Distributed { ranks, layout, schedule } => {
            let (seq, heads) = (q.dim().1, Heads::new(q.dim().2, k.dim().2)?);
            let chunks = ChunkPlan::new(seq, *ranks, layout)?;
            let plan = schedule.build(&chunks, spec, heads)?;
            let (r, _, report) = simulate(&plan, spec, q.view(), k.view(), v.view(), None)?;
            Ok((r.out, r.lse, Some(report)))
        }
    }
}

/// Read `q`, `k`, `v`, compute attention under `spec` in the inputs' precision (f64 if
/// all are f64, else f32), write the output (and the LSE, `[batch, heads, seq]`) as
/// `.npy` in that precision.
pub fn attend(
    q: &str,
    k: &str,
    v: &str,
    spec: &Spec,
    how: &How,
    out: &Path,
    lse: Option<&Path>,
) -> Result<AttendReport, Box<dyn Error>> {
    let (q, k, v) = (tensor_io::read(q)?, tensor_io::read(k)?, tensor_io::read(v)?);
    let shape = q.shape().to_vec();
    let all_f64 = [&q, &k, &v].iter().all(|t| matches!(t, Tensor::F64(_)));
    let start = std::time::Instant::now();
    let (dtype, lse_f64, distributed) = if all_f64 {
        let (o, l, report) = compute(q.to_f64(), k.to_f64(), v.to_f64(), spec, how)?;
        tensor_io::write_npy(out, &o)?;
        if let Some(path) = lse {
            tensor_io::write_npy(path, &l)?;
        }
        ("f64", l, report)
    } else {
        let (o, l, report) = compute(q.to_f32(), k.to_f32(), v.to_f32(), spec, how)?;
        tensor_io::write_npy(out, &o)?;
        if let Some(path) = lse {
            tensor_io::write_npy(path, &l)?;
        }
        ("f32", l.mapv(f64::from), report)
    };
    Ok(AttendReport {
        shape,
        dtype,
        empty_rows: lse_f64.iter().filter(|l| l.is_infinite()).count(),
        seconds: start.elapsed().as_secs_f64(),
        distributed,
    })
}

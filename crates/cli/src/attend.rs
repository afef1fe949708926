//! `ringdil attend`: attention on tensors from files, by the reference on one device or on
//! simulated ranks, or by the GPU kernels ([`crate::attend_gpu`]).

use crate::attend_gpu::{self, GpuReport};
use crate::tensor_io::{self, Tensor};
use ndarray::{Array3, Array4, NdFloat};
use ringdil_cuda::{Dtype, GpuPattern};
use ringdil_reference::ring::{ChunkPlan, Kind, Layout, Report, simulate};
use ringdil_reference::{Heads, Spec, attention};
use serde::Serialize;
use std::error::Error;
use std::path::Path;

/// Where the attention is computed.
pub enum How {
    /// The reference on one device.
    SingleDevice,
    /// The reference on simulated ranks.
    Distributed(Ranks),
    /// On the first CUDA device: the kernels' form of the pattern, the 16-bit type the
    /// inputs are rounded to, and whether to measure the error against the reference.
    Gpu { pattern: GpuPattern, dtype: Dtype, check: bool },
}

/// `ranks` simulated ranks with `layout` and `schedule`; the output is gathered back
/// into the original token order.
pub struct Ranks {
    pub ranks: usize,
    pub layout: Layout,
    pub schedule: Kind,
}

/// What `attend` did, for the terminal and for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct AttendReport {
    pub shape: Vec<usize>,
    pub dtype: &'static str,
    pub empty_rows: usize,
    pub seconds: f64,
    /// Elements sent per step and rank, and peak memory, when computed on ranks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Report>,
    /// The device, the inputs' rounding and the check, when computed on the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuReport>,
}

/// Output, LSE and, for a distributed run, its communication report.
type Computed<T> = (Array4<T>, Array3<T>, Option<Report>);

/// The reference's attention under `spec`, on simulated `ranks` if given.
fn compute<T: NdFloat>(
    q: Array4<T>,
    k: Array4<T>,
    v: Array4<T>,
    spec: &Spec,
    ranks: Option<&Ranks>,
) -> Result<Computed<T>, Box<dyn Error>> {
    match ranks {
        None => {
            let r = attention(q.view(), k.view(), v.view(), spec)?;
            Ok((r.out, r.lse, None))
        }
        Some(Ranks { ranks, layout, schedule }) => {
            let (seq, heads) = (q.dim().1, Heads::new(q.dim().2, k.dim().2)?);
            let chunks = ChunkPlan::new(seq, *ranks, layout)?;
            let plan = schedule.build(&chunks, spec, heads)?;
            let (r, _, report) = simulate(&plan, spec, q.view(), k.view(), v.view(), None)?;
            Ok((r.out, r.lse, Some(report)))
        }
    }
}

/// Read `q`, `k`, `v`, compute attention under `spec` in the inputs' precision (f64 if
/// all are f64, else f32; on the GPU: inputs rounded to 16 bits, f32 results), write the
/// output (and the LSE, `[batch, heads, seq]`) as `.npy` in that precision.
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
    let ranks = match how {
        How::SingleDevice => None,
        How::Distributed(r) => Some(r),
        How::Gpu { pattern, dtype, check } => {
            let result = attend_gpu::run(&q.to_f64(), &k.to_f64(), &v.to_f64(), spec, pattern.clone(), *dtype, *check)?;
            attend_gpu::write(out, lse, &result)?;
            return Ok(AttendReport {
                shape,
                dtype: "f32",
                empty_rows: result.1.iter().filter(|l| l.is_infinite()).count(),
                seconds: start.elapsed().as_secs_f64(),
                distributed: None,
                gpu: Some(result.2),
            });
        }
    };
    let (dtype, lse_f64, distributed) = if all_f64 {
        let (o, l, report) = compute(q.to_f64(), k.to_f64(), v.to_f64(), spec, ranks)?;
        tensor_io::write_npy(out, &o)?;
        if let Some(path) = lse {
            tensor_io::write_npy(path, &l)?;
        }
        ("f64", l, report)
    } else {
        let (o, l, report) = compute(q.to_f32(), k.to_f32(), v.to_f32(), spec, ranks)?;
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
        gpu: None,
    })
}

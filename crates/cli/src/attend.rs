//! `ringdil attend`: reference attention on tensors from files.

use crate::tensor_io::{self, Tensor};
use ndarray::Array3;
use ringdil_reference::{Spec, attention};
use serde::Serialize;
use std::error::Error;
use std::path::Path;

/// What `attend` did, for the terminal and for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct AttendReport {
    pub shape: Vec<usize>,
    pub dtype: &'static str,
    pub empty_rows: usize,
    pub seconds: f64,
}

/// Read `q`, `k`, `v`, compute attention under `spec` in the inputs' precision (f64 if
/// all are f64, else f32), write the output (and the LSE, `[batch, heads, seq]`) as
/// `.npy` in that precision.
pub fn attend(q: &str, k: &str, v: &str, spec: &Spec, out: &Path, lse: Option<&Path>) -> Result<AttendReport, Box<dyn Error>> {
    let (q, k, v) = (tensor_io::read(q)?, tensor_io::read(k)?, tensor_io::read(v)?);
    let all_f64 = [&q, &k, &v].iter().all(|t| matches!(t, Tensor::F64(_)));
    let start = std::time::Instant::now();
    let (dtype, lse_f64): (&'static str, Array3<f64>) = if all_f64 {
        let r = attention(q.to_f64().view(), k.to_f64().view(), v.to_f64().view(), spec)?;
        tensor_io::write_npy(out, &r.out)?;
        if let Some(path) = lse {
            tensor_io::write_npy(path, &r.lse)?;
        }
        ("f64", r.lse)
    } else {
        let r = attention(q.to_f32().view(), k.to_f32().view(), v.to_f32().view(), spec)?;
        tensor_io::write_npy(out, &r.out)?;
        if let Some(path) = lse {
            tensor_io::write_npy(path, &r.lse)?;
        }
        ("f32", r.lse.mapv(f64::from))
    };
    Ok(AttendReport {
        shape: q.shape().to_vec(),
        dtype,
        empty_rows: lse_f64.iter().filter(|l| l.is_infinite()).count(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

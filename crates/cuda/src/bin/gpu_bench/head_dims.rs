//! Head-dim rows of the benchmark: n = 16384, 16 heads of d = 96, 128, 192, 256 and MLA's
//! d = 192 with d_v = 128, bf16, causal and not, forward and forward + backward, against
//! torch SDPA's cuDNN and flash backends (`bench/torch_peer.py`'s `head_dims` rows) in the
//! same run. On sm_90 d = 96 and the MLA pair run the mma.sync kernels (`Gpu::family_for`);
//! d = 192 and 256 the wgmma forward with the mma backward (`Family::backward_family`):
//! the family column names each pass's, so these rows say what each costs against cuDNN
//! (issue 22 asks for the d = 256 forward at least cuDNN's).

use crate::{HostInputs, run, tflops};
use ringdil_cuda::{Gpu, GpuPattern, GpuSpec, Shape};
use serde_json::{Value, json};
use std::fmt::Write;

const SEQ: usize = 16384;
const HEADS: usize = 16;
/// The (q / k, v) head dims of the rows (128: the baseline the others are read against).
pub const DIMS: [(usize, usize); 5] = [(96, 96), (128, 128), (192, 192), (256, 256), (192, 128)];

/// Time every row (the forward + backward ones with `with_backward`), append the table to `md`
/// and return the rows as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, torch: &Value, md: &mut String, with_backward: bool) -> Vec<Value> {
    // A torch row without `value_dim` has v's head dim equal to q's.
    let torch_ms = |(d, dv): (usize, usize), causal: bool, backend: &str, key: &str| -> Option<f64> {
        torch["head_dims"].as_array()?.iter().find_map(|r| {
            let value_dim = r.get("value_dim").unwrap_or(&r["head_dim"]);
            (r["head_dim"] == d && *value_dim == dv && r["causal"] == causal && r["backend"] == backend)
                .then(|| r[key].as_f64())
                .flatten()
        })
    };
    writeln!(md, "\n### Head dims, n = {SEQ}, {HEADS} heads, bf16\n").unwrap();
    writeln!(
        md,
        "Family: the kernels that run the head dim on this device. torch SDPA in the same run;\n\
         vs cuDNN = cuDNN's time / ours (above 1: faster).\n"
    )
    .unwrap();
    writeln!(md, "| d | d_v | family | causal | pass | ms | TFLOP/s | cuDNN ms | vs cuDNN | flash ms |").unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|").unwrap();
    let mut out = Vec::new();
    for (d, dv) in DIMS {
        let (forward, backward) = match gpu.family_for(d, dv) {
            Ok(f) => (f.name(), f.backward_family(d).name()),
            Err(_) => ("none", "none"),
        };
        let both_passes = if forward == backward { forward.to_string() } else { format!("{forward} + {backward} bwd") };
        for causal in [false, true] {
            let spec = GpuSpec::new(GpuPattern::Dense).causal(causal);
            let (fwd, both) = run(gpu, host, &Shape::square(1, SEQ, HEADS, d).with_value_dim(dv), &spec, with_backward);
            // S = Q K^T over d, O = P V over d_v: 2 n^2 (d + d_v) per head.
            let flops = 2.0 * (HEADS * SEQ * SEQ * (d + dv)) as f64 / if causal { 2.0 } else { 1.0 };
            let passes = std::iter::once(("fwd", fwd, flops, "fwd_ms"))
                .chain(both.map(|ms| ("fwd+bwd", ms, 3.5 * flops, "fwd_bwd_ms")));
            for (pass, ms, work, key) in passes {
                let (cudnn, flash) = (torch_ms((d, dv), causal, "cudnn", key), torch_ms((d, dv), causal, "flash", key));
                let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
                let vs = cudnn.map_or("-".into(), |c| format!("{:.2}", c / ms));
                let rate = tflops(work, ms);
                let family = if pass == "fwd" { forward } else { &both_passes };
                writeln!(
                    md,
                    "| {d} | {dv} | {family} | {causal} | {pass} | {ms:.3} | {rate:.0} | {} | {vs} | {} |",
                    fmt(cudnn),
                    fmt(flash)
                )
                .unwrap();
                println!(
                    "head dim {d} / {dv} ({family}) causal {causal} {pass}: {ms:.3} ms (cudnn {cudnn:?}, flash {flash:?})"
                );
                out.push(json!({"seq": SEQ, "heads": HEADS, "head_dim": d, "value_dim": dv, "family": family,
                    "causal": causal, "pass": pass, "ms": ms, "tflops": rate, "torch_cudnn_ms": cudnn,
                    "torch_flash_ms": flash}));
            }
        }
    }
    out
}

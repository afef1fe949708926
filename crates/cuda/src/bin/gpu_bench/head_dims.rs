//! Head-dim rows of the benchmark: n = 16384, 16 heads of d = 96, 128, 192, 256, bf16,
//! causal and not, forward and forward + backward, against torch SDPA's cuDNN and flash
//! backends (`bench/torch_peer.py`'s `head_dims` rows) in the same run. On sm_90 d = 96
//! runs the mma.sync kernels (`Gpu::family_for`); d = 192 and 256 the wgmma forward with
//! the mma backward (`Family::backward_family`): the family column names each pass's, so
//! these rows say what each costs against cuDNN (issue 22 asks for the d = 256 forward at
//! least cuDNN's).

use crate::{HostInputs, run, tflops};
use ringdil_cuda::{Gpu, GpuPattern, GpuSpec, Shape};
use serde_json::{Value, json};
use std::fmt::Write;

const SEQ: usize = 16384;
const HEADS: usize = 16;
/// The head dims of the rows (128: the baseline the others are read against).
pub const DIMS: [usize; 4] = [96, 128, 192, 256];

/// Time every row, append the table to `md` and return the rows as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, torch: &Value, md: &mut String) -> Vec<Value> {
    let torch_ms = |d: usize, causal: bool, backend: &str, key: &str| -> Option<f64> {
        torch["head_dims"].as_array()?.iter().find_map(|r| {
            (r["head_dim"] == d && r["causal"] == causal && r["backend"] == backend).then(|| r[key].as_f64()).flatten()
        })
    };
    writeln!(md, "\n### Head dims, n = {SEQ}, {HEADS} heads, bf16\n").unwrap();
    writeln!(
        md,
        "Family: the kernels that run the head dim on this device. torch SDPA in the same run;\n\
         vs cuDNN = cuDNN's time / ours (above 1: faster).\n"
    )
    .unwrap();
    writeln!(md, "| d | family | causal | pass | ms | TFLOP/s | cuDNN ms | vs cuDNN | flash ms |").unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|").unwrap();
    let mut out = Vec::new();
    for d in DIMS {
        let (forward, backward) = match gpu.family_for(d, d) {
            Ok(f) => (f.name(), f.backward_family(d).name()),
            Err(_) => ("none", "none"),
        };
        let both_passes = if forward == backward { forward.to_string() } else { format!("{forward} + {backward} bwd") };
        for causal in [false, true] {
            let spec = GpuSpec::new(GpuPattern::Dense).causal(causal);
            let (fwd, both) = run(gpu, host, &Shape::square(1, SEQ, HEADS, d), &spec, true);
            let flops = 4.0 * (HEADS * SEQ * SEQ * d) as f64 / if causal { 2.0 } else { 1.0 };
            for (pass, ms, work, key) in [
                ("fwd", fwd, flops, "fwd_ms"),
                ("fwd+bwd", both.expect("timed with the backward"), 3.5 * flops, "fwd_bwd_ms"),
            ] {
                let (cudnn, flash) = (torch_ms(d, causal, "cudnn", key), torch_ms(d, causal, "flash", key));
                let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
                let vs = cudnn.map_or("-".into(), |c| format!("{:.2}", c / ms));
                let rate = tflops(work, ms);
                let family = if pass == "fwd" { forward } else { &both_passes };
                writeln!(
                    md,
                    "| {d} | {family} | {causal} | {pass} | {ms:.3} | {rate:.0} | {} | {vs} | {} |",
                    fmt(cudnn),
                    fmt(flash)
                )
                .unwrap();
                println!(
                    "head dim {d} ({family}) causal {causal} {pass}: {ms:.3} ms (cudnn {cudnn:?}, flash {flash:?})"
                );
                out.push(json!({"seq": SEQ, "heads": HEADS, "head_dim": d, "family": family, "causal": causal,
                    "pass": pass, "ms": ms, "tflops": rate, "torch_cudnn_ms": cudnn, "torch_flash_ms": flash}));
            }
        }
    }
    out
}

//! Grouped-query rows of the benchmark: n = 16384, 16 query heads of d = 128, bf16, with
//! 16 (multi-head), 2 (8:1) and 1 (multi-query) K/V heads, causal and not, forward and
//! forward + backward, against torch SDPA with `enable_gqa=True` (cuDNN and flash
//! backends, `bench/torch_peer.py`'s `gqa` rows) in the same run.
//!
//! The FLOPs are the multi-head ones (every query head still attends over every key):
//! grouping saves K/V memory and traffic, not arithmetic, so a grouped row should take
//! the multi-head time. The backward adds each query head's dK, dV into its K/V head by
//! f32 reductions, which the multi-head kernel writes directly: the "vs MHA" column is
//! what that costs.

use crate::{HostInputs, run, tflops};
use ringdil_cuda::{Gpu, GpuPattern, GpuSpec, Shape};
use serde_json::{Value, json};
use std::fmt::Write;

const SEQ: usize = 16384;
const HEADS: usize = 16;
const DIM: usize = 128;
/// K/V heads of the rows: multi-head first (the baseline), then 8:1 and multi-query.
const KV_HEADS: [usize; 3] = [16, 2, 1];

/// Time every row, append the table to `md` and return the rows as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, torch: &Value, md: &mut String) -> Vec<Value> {
    let torch_ms = |kv_heads: usize, causal: bool, backend: &str, key: &str| -> Option<f64> {
        torch["gqa"].as_array()?.iter().find_map(|r| {
            (r["kv_heads"] == kv_heads && r["causal"] == causal && r["backend"] == backend)
                .then(|| r[key].as_f64())
                .flatten()
        })
    };
    writeln!(md, "\n### Grouped-query attention, n = {SEQ}, {HEADS} query heads, d = {DIM}, bf16\n").unwrap();
    writeln!(
        md,
        "torch: scaled_dot_product_attention(enable_gqa=True) in the same run. TFLOP/s count the\n\
         multi-head FLOPs (grouping saves K/V memory, not arithmetic); vs MHA = time / the\n\
         16-K/V-head time of the same pass; vs cuDNN = cuDNN's time / ours (above 1: faster).\n"
    )
    .unwrap();
    writeln!(md, "| causal | K/V heads | group | pass | ms | TFLOP/s | vs MHA | cuDNN ms | vs cuDNN | flash ms |")
        .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|").unwrap();
    let mut out = Vec::new();
    for causal in [false, true] {
        let spec = GpuSpec::new(GpuPattern::Dense).causal(causal);
        let flops = 4.0 * (HEADS * SEQ * SEQ * DIM) as f64 / if causal { 2.0 } else { 1.0 };
        let mut mha: Option<(f64, f64)> = None;
        for kv_heads in KV_HEADS {
            let shape = Shape::square(1, SEQ, HEADS, DIM).with_kv_heads(kv_heads);
            let (fwd, both) = run(gpu, host, &shape, &spec, true);
            let both = both.expect("timed with the backward");
            let base = *mha.get_or_insert((fwd, both));
            for (pass, ms, work, key, base_ms) in
                [("fwd", fwd, flops, "fwd_ms", base.0), ("fwd+bwd", both, 3.5 * flops, "fwd_bwd_ms", base.1)]
            {
                let cudnn = torch_ms(kv_heads, causal, "cudnn", key);
                let flash = torch_ms(kv_heads, causal, "flash", key);
                let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
                let vs_cudnn = cudnn.map_or("-".into(), |c| format!("{:.2}", c / ms));
                writeln!(
                    md,
                    "| {causal} | {kv_heads} | {} | {pass} | {ms:.3} | {:.0} | {:.3} | {} | {vs_cudnn} | {} |",
                    HEADS / kv_heads,
                    tflops(work, ms),
                    ms / base_ms,
                    fmt(cudnn),
                    fmt(flash)
                )
                .unwrap();
                println!(
                    "gqa causal {causal} kv_heads {kv_heads} {pass}: {ms:.3} ms ({:.3} of MHA; cudnn {cudnn:?}, flash {flash:?})",
                    ms / base_ms
                );
                out.push(json!({"seq": SEQ, "heads": HEADS, "kv_heads": kv_heads, "head_dim": DIM, "causal": causal,
                    "pass": pass, "ms": ms, "tflops": tflops(work, ms), "vs_mha": ms / base_ms,
                    "torch_cudnn_ms": cudnn, "torch_flash_ms": flash}));
            }
        }
    }
    out
}

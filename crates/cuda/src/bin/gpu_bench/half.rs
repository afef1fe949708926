//! Dense rows with 16-bit results: what a training step stores and what the Python package
//! returns (`Gpu::forward_half_into`, `Gpu::backward_half_into`: the output, dK and dV
//! rounded by the kernels' epilogue, dQ summed in f32 and rounded by one pass). n = 4096
//! and 16384, bf16, d = 64 and 128, causal and not, against torch's cuDNN backend (which
//! returns bf16 too) from `bench/torch_peer.py`, same run.
//!
//! The main table times f32 results (the reference's precision, what checks read); this
//! one is the like-for-like comparison with torch, and the Rust figure the Python call
//! (`crates/python/bench/torch_bench.py`) is held to.

use crate::{HIDDEN, HostInputs, TOKENS, tflops, time};
use ringdil_cuda::shape::Dtype;
use ringdil_cuda::{Chunk, Gpu, GpuPattern, GpuSpec, Shape};
use serde_json::{Value, json};
use std::fmt::Write;

/// (forward ms, forward + backward ms) with 16-bit results; the f32 dQ sums are
/// allocated by each call, as in the Python package.
fn run_half(gpu: &Gpu, host: &HostInputs, shape: &Shape, spec: &GpuSpec) -> (f64, f64) {
    let mut prep = gpu.prepare(shape, Dtype::Bf16, spec, &Chunk::whole(shape)).expect("prepare");
    let x = host.upload(gpu, shape);
    let zeros = |dims: [usize; 4]| gpu.upload(&vec![0u16; dims.iter().product()], dims).expect("alloc");
    let (mut out, mut lse) = (zeros(shape.q_dims()), gpu.filled(shape.lse_len(), 0.0).expect("alloc"));
    let (mut dq, mut dk, mut dv) = (zeros(shape.q_dims()), zeros(shape.k_dims()), zeros(shape.k_dims()));
    let fwd = time(gpu, || gpu.forward_half_into(&mut prep, &x.q, &x.k, &x.v, &mut out, &mut lse).expect("forward"));
    let both = time(gpu, || {
        gpu.forward_half_into(&mut prep, &x.q, &x.k, &x.v, &mut out, &mut lse).expect("forward");
        gpu.backward_half_into(&mut prep, &x.q, &x.k, &x.v, (&out, &lse), &x.dout, [&mut dq, &mut dk, &mut dv])
            .expect("backward");
    });
    (fwd, both)
}

/// Time the rows, append their table to `md`, return them as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, torch: &Value, md: &mut String) -> Vec<Value> {
    let cudnn_ms = |seq: usize, d: usize, causal: bool, key: &str| -> Option<f64> {
        torch["rows"].as_array()?.iter().find_map(|r| {
            (r["seq"] == seq && r["head_dim"] == d && r["causal"] == causal && r["backend"] == "cudnn")
                .then(|| r[key].as_f64())
                .flatten()
        })
    };
    writeln!(md, "\n### 16-bit results (bf16 output and gradients, as torch returns them)\n").unwrap();
    writeln!(
        md,
        "`forward_half_into` / `backward_half_into`: the epilogue rounds the output, dK and dV; dQ is summed in \
         f32 and rounded by one pass. cuDNN from the same run; vs cuDNN = cuDNN's time / ours.\n"
    )
    .unwrap();
    writeln!(md, "| seq | b x h | d | causal | pass | ringdil ms | TFLOP/s | cuDNN ms | vs cuDNN |").unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|").unwrap();
    let mut out = Vec::new();
    for seq in [4096, 16384] {
        for d in [64, 128] {
            let (b, h) = (TOKENS / seq, HIDDEN / d);
            let shape = Shape::square(b, seq, h, d);
            for causal in [false, true] {
                let (fwd, both) = run_half(gpu, host, &shape, &GpuSpec::new(GpuPattern::Dense).causal(causal));
                let flops = 4.0 * (b * h * seq * seq * d) as f64 / if causal { 2.0 } else { 1.0 };
                for (pass, ms, work, key) in
                    [("fwd", fwd, flops, "fwd_ms"), ("fwd+bwd", both, 3.5 * flops, "fwd_bwd_ms")]
                {
                    let cudnn = cudnn_ms(seq, d, causal, key);
                    let (c, vs) =
                        cudnn.map_or(("-".into(), "-".into()), |c| (format!("{c:.3}"), format!("{:.2}", c / ms)));
                    writeln!(
                        md,
                        "| {seq} | {b} x {h} | {d} | {causal} | {pass} | {ms:.3} | {:.0} | {c} | {vs} |",
                        tflops(work, ms)
                    )
                    .unwrap();
                    println!("16-bit seq {seq} d {d} causal {causal} {pass}: {ms:.3} ms (cudnn {cudnn:?})");
                    out.push(json!({"seq": seq, "batch": b, "heads": h, "head_dim": d, "causal": causal, "pass": pass,
                        "ms": ms, "tflops": tflops(work, ms), "torch_cudnn_ms": cudnn}));
                }
            }
        }
    }
    out
}

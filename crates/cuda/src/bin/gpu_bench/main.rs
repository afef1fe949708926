//! The GPU benchmark: ringdil-cuda's kernels against torch's scaled_dot_product_attention
//! (flash and cuDNN backends, timed by `bench/torch_peer.py` in the same run), and LongNet's
//! branches and pattern against dense attention at the same length and against dense
//! attention of the same work (one branch's segments as a batch of short sequences), causal
//! and not, forward and forward + backward ([`dilated`]).
//!
//! `gpu_bench [--torch TORCH.json] [--flex FLEX.json] [--json OUT.json] [--md OUT.md]
//! [--label TEXT] [--date DATE] [--forward-only] [--sections LIST]`;
//! `gpu_bench --write-documents DOCS.json`
//! writes the packed rows' boundaries for `bench/flex_peer.py DOCS.json FLEX.json`.
//!
//! The report (JSON and Markdown) records the device, the date given and the command line,
//! so that a committed table says how and when it was made.
//!
//! `--forward-only` times the forward rows of the dense and head-dim sections alone (quick
//! A/B runs of kernel sources through `RINGDIL_CUDA_SOURCE`; naming another section with it
//! is an error). `--sections dense,head_groups` runs the named sections only (names as in
//! [`SECTIONS`]); the others are `null` in the JSON and absent from the table.
//!
//! Shapes: bf16, batch * seq = 16384 tokens, heads * head_dim = 2048, seq in {4096, 16384},
//! head_dim in {64, 128}, causal and not; then grouped-query attention ([`gqa`]),
//! packed sequences ([`packed`]) and LongNet inside them ([`packed_longnet`]), the other head dims ([`head_dims`]), the dense rows
//! with 16-bit results ([`half`]), mask expressions against the built-ins they equal
//! ([`expressions`]), a `dilated_expr` rule in compact launches ([`dilated_expr`]) and
//! the head-group combine ([`head_groups`]).
//! TFLOP/s counts `4 * b * h * n^2 * d` for the
//! forward (halved when causal) and 3.5 times that for forward + backward (the
//! flash-attention convention: the backward does 2.5 forwards' worth of matmuls).

use ringdil_cuda::check::rounded_bits;
use ringdil_cuda::programs::{Args, Program};
use ringdil_cuda::shape::Dtype;
use ringdil_cuda::{Chunk, Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::random::SplitMix64;
use serde_json::{Value, json};
use std::fmt::Write;

mod dilated;
mod dilated_expr;
mod expressions;
mod gqa;
mod half;
mod head_dims;
mod head_groups;
mod packed;
mod packed_longnet;

const TOKENS: usize = 16384;
const HIDDEN: usize = 2048;
const WARMUP: usize = 3;
const ITERS: usize = 10;

/// Mean milliseconds of `f` over ITERS runs after WARMUP, by CUDA events on the stream.
fn time(gpu: &Gpu, mut f: impl FnMut()) -> f64 {
    for _ in 0..WARMUP {
        f();
    }
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = gpu.context().new_event(flags).expect("event");
    let end = gpu.context().new_event(flags).expect("event");
    start.record(gpu.stream()).expect("record");
    for _ in 0..ITERS {
        f();
    }
    end.record(gpu.stream()).expect("record");
    end.synchronize().expect("sync");
    start.elapsed_ms(&end).expect("elapsed") as f64 / ITERS as f64
}

struct Inputs {
    q: ringdil_cuda::DeviceTensor,
    k: ringdil_cuda::DeviceTensor,
    v: ringdil_cuda::DeviceTensor,
    dout: ringdil_cuda::DeviceTensor,
}

/// Q, K, V and dO as bf16 bits: `TOKENS * HIDDEN` standard normals each (seeds 1-4), drawn
/// once and uploaded for every shape (all have that many elements; drawing them per shape
/// cost about 5 s of one core each time, 14 times a run).
struct HostInputs([Vec<u16>; 4]);

impl HostInputs {
    fn new() -> Self {
        HostInputs([1, 2, 3, 4].map(|seed| rounded_bits(TOKENS * HIDDEN, Dtype::Bf16, &mut SplitMix64::new(seed))))
    }

    /// The first `shape.q_len()` of q, `shape.k_len()` of k, `shape.v_len()` of v and
    /// `shape.out_len()` of dO; a larger shape (the packed rows' 64K tokens) repeats the
    /// draws.
    fn upload(&self, gpu: &Gpu, shape: &Shape) -> Inputs {
        let [q, k, v, dout] = &self.0;
        let put = |bits: &[u16], dims: [usize; 4]| {
            let n: usize = dims.iter().product();
            let repeated: Vec<u16>;
            let data = if n <= bits.len() {
                &bits[..n]
            } else {
                repeated = bits.iter().copied().cycle().take(n).collect();
                &repeated
            };
            gpu.upload(data, dims).expect("upload")
        };
        Inputs {
            q: put(q, shape.q_dims()),
            k: put(k, shape.k_dims()),
            v: put(v, shape.v_dims()),
            dout: put(dout, shape.out_dims()),
        }
    }
}

/// (forward ms, forward + backward ms) of one spec.
fn run(gpu: &Gpu, host: &HostInputs, shape: &Shape, spec: &GpuSpec, with_backward: bool) -> (f64, Option<f64>) {
    let mut prep = gpu.prepare(shape, Dtype::Bf16, spec, &Chunk::whole(shape)).expect("prepare");
    let x = host.upload(gpu, shape);
    let mut out = gpu.alloc_partial(&prep).expect("alloc");
    let fwd = time(gpu, || gpu.forward_into(&mut prep, &x.q, &x.k, &x.v, &mut out).expect("forward"));
    let both = with_backward.then(|| {
        let mut grads = gpu.alloc_grads(&prep).expect("alloc");
        time(gpu, || {
            gpu.forward_into(&mut prep, &x.q, &x.k, &x.v, &mut out).expect("forward");
            gpu.backward_into(&mut prep, &x.q, &x.k, &x.v, &out, &x.dout, &mut grads).expect("backward");
        })
    });
    (fwd, both)
}

fn tflops(flops: f64, ms: f64) -> f64 {
    flops / (ms * 1e-3) / 1e12
}

/// The benchmark's sections, in the order they run; `--sections` picks among them.
const SECTIONS: [&str; 10] = [
    "dense",
    "dilated",
    "gqa",
    "packed",
    "packed_longnet",
    "head_dims",
    "half",
    "expressions",
    "dilated_expr",
    "head_groups",
];

/// The sections whose forward rows `--forward-only` times.
const FORWARD_ONLY_SECTIONS: [&str; 2] = ["dense", "head_dims"];

/// The sections `--sections LIST` names (every section without the flag); an unknown name,
/// or with `--forward-only` a section it does not time, stops the run before any GPU work
/// rather than leave rows out of the report unsaid.
fn sections(args: &Args) -> Vec<&'static str> {
    let Some(list) = args.value("--sections") else { return SECTIONS.to_vec() };
    let named: Vec<&'static str> = list
        .split(',')
        .map(|name| {
            SECTIONS.iter().copied().find(|s| *s == name.trim()).unwrap_or_else(|| {
                args.fail(2, format!("unknown section {name:?}; sections are {}", SECTIONS.join(", ")))
            })
        })
        .collect();
    if args.switch("--forward-only") {
        let untimed: Vec<&str> = named.iter().copied().filter(|s| !FORWARD_ONLY_SECTIONS.contains(s)).collect();
        if !untimed.is_empty() {
            args.fail(
                2,
                format!(
                    "--forward-only times the forward rows of {} alone, not {}: drop the flag or those sections",
                    FORWARD_ONLY_SECTIONS.join(" and "),
                    untimed.join(", ")
                ),
            );
        }
    }
    named
}

fn main() {
    let args = Args::from_env(Program::GpuBench);
    let sections = sections(&args);
    let wanted = |name: &str| sections.contains(&name);
    // `--write-documents PATH`: the packed rows' boundaries as JSON, for flex_peer.py to
    // time the same documents; no GPU needed.
    if let Some(path) = args.value("--write-documents") {
        let list = json!({"seq": packed::SEQ, "boundaries": packed::boundaries()});
        std::fs::write(path, list.to_string()).expect("write the boundaries");
        return;
    }
    let gpu = args.gpu();
    let device = gpu.describe().expect("device");
    let date = args.date();
    let command = args.command();
    let forward_only = args.switch("--forward-only");
    let host = HostInputs::new();
    let torch: Value = args
        .value("--torch")
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).expect("torch json")).expect("torch json parses"))
        .unwrap_or(json!({"rows": []}));
    let flex: Value = args
        .value("--flex")
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).expect("flex json")).expect("flex json parses"))
        .unwrap_or(json!({"rows": []}));
    let torch_ms = |seq: usize, d: usize, causal: bool, backend: &str, key: &str| -> Option<f64> {
        torch["rows"].as_array()?.iter().find_map(|r| {
            (r["seq"] == seq && r["head_dim"] == d && r["causal"] == causal && r["backend"] == backend)
                .then(|| r[key].as_f64())
                .flatten()
        })
    };
    let mut rows = Vec::new();
    let mut md = String::new();
    writeln!(md, "## {} on {device}\n", args.value("--label").unwrap_or_else(|| "gpu_bench".into())).unwrap();
    writeln!(md, "Date {date}; command `{command}`.\n").unwrap();
    writeln!(
        md,
        "torch {} (same run). TFLOP/s = 4*b*h*n^2*d (halved if causal); fwd+bwd counts 3.5x that.\n",
        torch["torch"].as_str().unwrap_or("not run")
    )
    .unwrap();
    // The wgmma forward's wide head dims too where their rows run.
    let wide: &[usize] = if wanted("head_dims") { &[192, 256] } else { &[] };
    for &d in [64, 128].iter().chain(wide) {
        let res = gpu.kernel_resources(Dtype::Bf16, d).expect("kernel attributes");
        writeln!(md, "Kernels, bf16, d = {d}: {res}.\n").unwrap();
        println!("d={d}: {res}");
    }
    let dense_shapes: &[usize] = if wanted("dense") { &[4096, 16384] } else { &[] };
    if !dense_shapes.is_empty() {
        writeln!(
            md,
            "| seq | b x h | d | causal | pass | ringdil ms | TFLOP/s | flash TFLOP/s | ratio | cuDNN TFLOP/s | ratio |"
        )
        .unwrap();
        writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|").unwrap();
    }
    for &seq in dense_shapes {
        for d in [64, 128] {
            let (b, h) = (TOKENS / seq, HIDDEN / d);
            let shape = Shape::square(b, seq, h, d);
            for causal in [false, true] {
                let spec = GpuSpec::new(GpuPattern::Dense).causal(causal);
                let (fwd, both) = run(&gpu, &host, &shape, &spec, !forward_only);
                let flops = 4.0 * (b * h * seq * seq * d) as f64 / if causal { 2.0 } else { 1.0 };
                let passes = std::iter::once(("fwd", fwd, flops, "fwd_ms"))
                    .chain(both.map(|ms| ("fwd+bwd", ms, 3.5 * flops, "fwd_bwd_ms")));
                for (pass, ms, work, key) in passes {
                    let ours = tflops(work, ms);
                    let flash = torch_ms(seq, d, causal, "flash", key).map(|t| tflops(work, t));
                    let cudnn = torch_ms(seq, d, causal, "cudnn", key).map(|t| tflops(work, t));
                    let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.0}"));
                    let ratio = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.2}", ours / x));
                    writeln!(
                        md,
                        "| {seq} | {b} x {h} | {d} | {causal} | {pass} | {ms:.3} | {ours:.0} | {} | {} | {} | {} |",
                        fmt(flash),
                        ratio(flash),
                        fmt(cudnn),
                        ratio(cudnn)
                    )
                    .unwrap();
                    println!(
                        "seq {seq} d {d} causal {causal} {pass}: {ms:.3} ms {ours:.0} TFLOP/s (flash {flash:?}, cudnn {cudnn:?})"
                    );
                    rows.push(
                        json!({"seq": seq, "batch": b, "heads": h, "head_dim": d, "causal": causal, "pass": pass,
                        "ms": ms, "tflops": ours, "torch_flash_tflops": flash, "torch_cudnn_tflops": cudnn}),
                    );
                }
            }
        }
    }
    if forward_only {
        if wanted("head_dims") {
            head_dims::rows(&gpu, &host, &torch, &mut md, false);
        }
        if let Some(p) = args.value("--md") {
            std::fs::write(p, md).expect("write md");
        }
        return;
    }
    let dilated = wanted("dilated").then(|| dilated::rows(&gpu, &host, &flex, &mut md));
    let run_section = |name: &str, md: &mut String, f: &dyn Fn(&mut String) -> Value| -> Value {
        if wanted(name) { f(md) } else { Value::Null }
    };
    let gqa_rows = run_section("gqa", &mut md, &|md| json!(gqa::rows(&gpu, &host, &torch, md)));
    let packed_rows = run_section("packed", &mut md, &|md| packed::rows(&gpu, &host, &flex, md));
    let packed_longnet_rows = run_section("packed_longnet", &mut md, &|md| packed_longnet::rows(&gpu, &host, md));
    let head_dim_rows = run_section("head_dims", &mut md, &|md| json!(head_dims::rows(&gpu, &host, &torch, md, true)));
    let half_rows = run_section("half", &mut md, &|md| json!(half::rows(&gpu, &host, &torch, md)));
    let expression_rows = run_section("expressions", &mut md, &|md| expressions::rows(&gpu, &host, &flex, md));
    let dilated_expr_rows = run_section("dilated_expr", &mut md, &|md| dilated_expr::rows(&gpu, &host, &flex, md));
    let head_group_rows = run_section("head_groups", &mut md, &|md| head_groups::rows(&gpu, &host, md));
    let report = json!({"device": device, "date": date, "command": command, "torch": torch, "rows": rows,
        "dilated": dilated,
        "gqa": gqa_rows, "packed": packed_rows, "packed_longnet": packed_longnet_rows, "head_dims": head_dim_rows, "half": half_rows,
        "expressions": expression_rows, "dilated_expr": dilated_expr_rows, "head_groups": head_group_rows,
        "flex": flex});
    if let Some(p) = args.value("--json") {
        std::fs::write(p, serde_json::to_string_pretty(&report).unwrap()).expect("write json");
    }
    if let Some(p) = args.value("--md") {
        std::fs::write(p, md).expect("write md");
    }
}

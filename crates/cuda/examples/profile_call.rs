//! One attention call's launches, repeated a few times, for a kernel profiler:
//!
//! ```text
//! profile_call [--causal] [--backward] [--calls N] [--batch B] [--seq N] [--heads H] [--documents FILE] [BRANCH ...]
//!     BRANCH = SEGMENT,DILATION
//! ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
//!     profile_call --backward 4096,4
//! ```
//!
//! The call is the LongNet pattern of the branches given (dense attention without any) at
//! n = 16384, 16 heads, d = 128 (`--head-dim D`: `gpu_bench`'s head-dim rows), bf16, on
//! random bf16 inputs: `gpu_bench`'s dilated rows.
//! `--batch B --seq N` change the shape, so that a branch's equal-work baseline (dense
//! attention over n/w sequences of w/r tokens: `--batch 4 --seq 1024` for (4096, 4)) is
//! profiled the same way. `--heads H` changes the head count, so that launches of equal pairs
//! and different item counts (`--batch 32 --seq 2048` against `--seq 16384 --heads 8`)
//! separate a per-item cost from a per-pair one. `--documents FILE` packs the row with the documents of
//! `gpu_bench --write-documents FILE` (its boundaries and row length; batch 1): the packed
//! rows of `gpu_bench`, dense or LongNet inside the documents.
//! A profiler then shows each kernel of the call (fill, attention launches, scale, delta,
//! backward launches) with its duration and DRAM traffic: where a call's time goes beyond
//! its attention work, which `gpu_bench`'s totals cannot say. Memsets are not kernels and
//! do not appear. Without a CUDA device it says so and exits 0.

use ringdil_cuda::check::rounded_bits;
use ringdil_cuda::{Chunk, Dtype, Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::Documents;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use std::process::ExitCode;

const USAGE: &str = "usage: profile_call [--causal] [--backward] [--calls N] [--batch B] [--seq N] [--heads H] [--head-dim D] [--documents FILE] [SEGMENT,DILATION ...]";

/// The row length and boundary list that `gpu_bench --write-documents` wrote.
fn documents(path: &str) -> Result<(usize, Vec<usize>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--documents {path}: {e}"))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("--documents {path}: {e}"))?;
    let seq = json["seq"].as_u64().ok_or_else(|| format!("--documents {path}: no \"seq\""))?;
    let list = json["boundaries"]
        .as_array()
        .and_then(|b| b.iter().map(|x| x.as_u64().map(|x| x as usize)).collect::<Option<Vec<_>>>())
        .ok_or_else(|| format!("--documents {path}: no \"boundaries\" list of integers"))?;
    Ok((seq as usize, list))
}

fn branch(arg: &str) -> Result<(usize, usize), String> {
    let parse = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("branch {arg:?}: {e}"));
    match arg.split_once(',') {
        Some((w, r)) => Ok((parse(w)?, parse(r)?)),
        None => Err(format!("branch {arg:?}: expected SEGMENT,DILATION\n{USAGE}")),
    }
}

fn run() -> Result<(), String> {
    let (mut causal, mut backward, mut branches) = (false, false, Vec::new());
    let (mut calls, mut batch, mut seq, mut heads, mut head_dim) = (3, 1, 16384, 16, 128);
    let mut packed = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |flag: &str| -> Result<usize, String> {
            let n = args.next().ok_or(USAGE)?;
            match n.parse() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(format!("{flag} {n:?}: expected a positive integer")),
            }
        };
        match a.as_str() {
            "--causal" => causal = true,
            "--backward" => backward = true,
            "--calls" => calls = number("--calls")?,
            "--batch" => batch = number("--batch")?,
            "--seq" => seq = number("--seq")?,
            "--heads" => heads = number("--heads")?,
            "--head-dim" => head_dim = number("--head-dim")?,
            "--documents" => packed = Some(documents(&args.next().ok_or(USAGE)?)?),
            _ => branches.push(branch(&a)?),
        }
    }
    let Some(gpu) = Gpu::probe().map_err(|e| e.to_string())? else {
        println!("profile_call: skipped: no CUDA device");
        return Ok(());
    };
    let pattern = match branches.is_empty() {
        true => GpuPattern::Dense,
        false => GpuPattern::Dilated(Dilated::longnet(&branches)),
    };
    let mut spec = GpuSpec::new(pattern).causal(causal);
    let documents = packed.as_ref().map_or(0, |(_, list)| list.len().saturating_sub(1));
    if let Some((row, list)) = packed {
        (batch, seq) = (1, row);
        spec = spec.documents(Documents::flat(list));
    }
    let shape = Shape::square(batch, seq, heads, head_dim);
    let err = |e: ringdil_cuda::CudaError| e.to_string();
    let mut prep = gpu.prepare(&shape, Dtype::Bf16, &spec, &Chunk::whole(&shape)).map_err(err)?;
    let mut rng = SplitMix64::new(1);
    let mut input = || gpu.upload(&rounded_bits(shape.q_len(), Dtype::Bf16, &mut rng), shape.q_dims()).map_err(err);
    let (q, k, v, dout) = (input()?, input()?, input()?, input()?);
    let mut out = gpu.alloc_partial(&prep).map_err(err)?;
    let mut grads = gpu.alloc_grads(&prep).map_err(err)?;
    for _ in 0..calls {
        gpu.forward_into(&mut prep, &q, &k, &v, &mut out).map_err(err)?;
        if backward {
            gpu.backward_into(&mut prep, &q, &k, &v, &out, &dout, &mut grads).map_err(err)?;
        }
    }
    gpu.synchronize().map_err(err)?;
    println!(
        "profile_call: {calls} calls, batch {batch}, n = {seq}, {heads} heads, branches {branches:?} (none: dense), causal {causal}, \
         backward {backward}, documents {documents} (0: none)"
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("profile_call: {e}");
            ExitCode::from(2)
        }
    }
}

//! The GPU checks as a test (small sizes): every kernel against the f64 reference, and
//! ring attention on virtual ranks. Its own harness makes a machine without a CUDA
//! device report them as **skipped**, never as passed:
//!
//! ```text
//! skipped: no CUDA device
//! gpu: 0 passed, 0 failed, 2 skipped
//! ```
//!
//! On a GPU machine every case runs against the f64 reference and a failure exits
//! non-zero. The full proof with its committed log is the `gpu_check` binary.

use ringdil_cuda::Gpu;
use ringdil_cuda::check::{bound, cases, describe, rounded, run_case};
use ringdil_cuda::dist::{DistPlan, RankData, VirtualRanks};
use ringdil_cuda::shape::Dtype;
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::compare::rel_err;
use ringdil_reference::ring::{ChunkPlan, Layout};
use std::process::ExitCode;

/// Causal dense attention over 3 virtual ranks (zigzag, 300 tokens) on one GPU, gathered
/// back and compared with the reference; returns the relative error of the output.
fn virtual_ranks_error(gpu: &Gpu) -> Result<f64, Box<dyn std::error::Error>> {
    let (b, n, h, d) = (1, 300, 2, 64);
    let spec = GpuSpec::new(GpuPattern::Dense).causal(true);
    let plan = DistPlan::new(ChunkPlan::new(n, 3, &Layout::Zigzag)?, spec.clone(), b, h, d)?;
    let mut rng = ringdil_reference::random::SplitMix64::new(3);
    let (bits, f64s): (Vec<Vec<u16>>, Vec<ndarray::Array4<f64>>) =
        (0..3).map(|_| rounded([b, n, h, d], Dtype::Bf16, &mut rng)).unzip();
    let reference = ringdil_reference::attention(f64s[0].view(), f64s[1].view(), f64s[2].view(), &spec.to_reference())?;
    let data: Vec<RankData> =
        (0..3).map(|r| RankData::upload(gpu, &plan, r, &bits[0], &bits[1], &bits[2])).collect::<Result<_, _>>()?;
    let outs = VirtualRanks::new(gpu, &plan, Dtype::Bf16)?.forward(&data)?;
    let mut out = vec![f64::NAN; b * n * h * d];
    for (r, o) in outs.iter().enumerate() {
        let pieces: Vec<Vec<f64>> = o
            .iter()
            .map(|p| gpu.download(&p.out).map(|v| v.iter().map(|&x| x as f64).collect()))
            .collect::<Result<_, _>>()?;
        plan.gather_into(&mut out, d, r, &pieces);
    }
    Ok(rel_err(&out, reference.out.iter()))
}

fn main() -> ExitCode {
    let gpu = match Gpu::probe() {
        Ok(Some(gpu)) => gpu,
        Ok(None) => {
            println!("skipped: no CUDA device");
            println!("gpu: 0 passed, 0 failed, 2 skipped");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("CUDA is installed but unusable: {e}");
            println!("gpu: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64;
    println!("device {} seed {seed}", gpu.describe().unwrap_or_default());
    let (mut passed, mut failed) = (0, 0);
    for (i, case) in cases(seed, true).iter().enumerate() {
        match run_case(&gpu, case, seed ^ i as u64) {
            Ok(outcome) if outcome.passed() => passed += 1,
            Ok(outcome) => {
                failed += 1;
                println!("FAIL {} {:?}", outcome.case, outcome.metrics);
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {}: {e}", describe(case));
            }
        }
    }
    match virtual_ranks_error(&gpu) {
        Ok(err) if err < bound(Dtype::Bf16) => passed += 1,
        outcome => {
            failed += 1;
            println!("FAIL virtual ranks vs reference: {outcome:?}");
        }
    }
    println!("gpu: {passed} passed, {failed} failed");
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

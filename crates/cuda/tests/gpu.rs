//! The GPU check as a test (small sizes), with its own harness so that a machine without
//! a CUDA device reports the case as **skipped**, never as passed:
//!
//! ```text
//! skipped: no CUDA device
//! gpu: 0 passed, 0 failed, 1 skipped
//! ```
//!
//! On a GPU machine every case runs against the f64 reference and a failure exits
//! non-zero. The full proof with its committed log is the `gpu_check` binary.

use ringdil_cuda::Gpu;
use ringdil_cuda::check::{cases, describe, run_case};
use std::process::ExitCode;

fn main() -> ExitCode {
    let gpu = match Gpu::probe() {
        Ok(Some(gpu)) => gpu,
        Ok(None) => {
            println!("skipped: no CUDA device");
            println!("gpu: 0 passed, 0 failed, 1 skipped");
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
    println!("gpu: {passed} passed, {failed} failed");
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

//! The GPU check as a test (small sizes). On a machine without a CUDA device it prints
//! "skipped: no CUDA device" and returns: the GPU proof is the `gpu_check` binary's run
//! on the device, whose summary line says "skipped" explicitly instead of "passed".

use ringdil_cuda::Gpu;
use ringdil_cuda::check::{cases, describe, run_case};

#[test]
fn gpu_kernels_match_the_f64_reference() {
    let Some(gpu) = Gpu::probe().expect("CUDA is installed but unusable") else {
        println!("skipped: no CUDA device");
        return;
    };
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    println!("device {} seed {seed}", gpu.describe().unwrap());
    let mut failures = Vec::new();
    for (i, case) in cases(seed, true).iter().enumerate() {
        let outcome = run_case(&gpu, case, seed ^ i as u64).unwrap_or_else(|e| panic!("{}: {e}", describe(case)));
        if !outcome.passed() {
            failures.push(format!("{} {:?}", outcome.case, outcome.metrics));
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} failing cases:\n{}", failures.len(), failures.join("\n"));
}

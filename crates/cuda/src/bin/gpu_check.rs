//! The GPU check binary: every kernel against the f64 reference on fresh random inputs
//! (see `ringdil_cuda::check`), with a Markdown log of the run.
//!
//! `gpu_check [--seed N] [--log FILE.md] [--date TEXT] [--require-gpu]`
//!
//! Without a CUDA device it prints "GPU check: skipped: no CUDA device" and exits 0 (or 1
//! with `--require-gpu`): a skip is never reported as a pass.

use ringdil_cuda::Gpu;
use ringdil_cuda::check::{bound, cases, describe, run_case, worst};
use ringdil_cuda::launch::Dtype;
use std::fmt::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let seed = value("--seed").map(|s| s.parse().expect("--seed takes an integer")).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    let gpu = match Gpu::probe() {
        Ok(Some(gpu)) => gpu,
        Ok(None) => {
            println!("GPU check: skipped: no CUDA device (0 passed, 0 failed, all skipped)");
            std::process::exit(if args.iter().any(|a| a == "--require-gpu") { 1 } else { 0 });
        }
        Err(e) => {
            eprintln!("GPU check: error: {e}");
            std::process::exit(1);
        }
    };
    let device = gpu.describe().expect("device name");
    let list = cases(seed, false);
    let mut log = String::new();
    writeln!(log, "# GPU check log\n").unwrap();
    writeln!(log, "* device: {device}").unwrap();
    writeln!(log, "* date: {}", value("--date").unwrap_or_else(|| "unknown".into())).unwrap();
    writeln!(log, "* seed: {seed} (rerun: `gpu_check --seed {seed}`)").unwrap();
    writeln!(log, "* bounds (relative L2 error vs the f64 reference on the same rounded inputs): bf16 < {}, f16 < {}; merge kernel vs reference merge < {}", bound(Dtype::Bf16), bound(Dtype::F16), ringdil_cuda::check::MERGE_BOUND).unwrap();
    writeln!(log, "* outputs poisoned with NaN before every launch; NaN never passes\n").unwrap();
    writeln!(log, "## Cases\n\n| # | result | case | errors |\n|---|---|---|---|").unwrap();
    let (mut passed, mut failed) = (0, 0);
    let mut outcomes = Vec::new();
    let start = std::time::Instant::now();
    for (i, case) in list.iter().enumerate() {
        let outcome = match run_case(&gpu, case, seed ^ (i as u64 + 1)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("GPU check: case {i} ({}) errored: {e}", describe(case));
                std::process::exit(1);
            }
        };
        let ok = outcome.passed();
        if ok {
            passed += 1
        } else {
            failed += 1
        }
        let errs: Vec<String> = outcome.metrics.iter().map(|m| format!("{} {:.2e}", m.what, m.err)).collect();
        println!("{} {} | {}", if ok { "PASS" } else { "FAIL" }, outcome.case, errs.join(", "));
        writeln!(log, "| {i} | {} | {} | {} |", if ok { "pass" } else { "**FAIL**" }, outcome.case, errs.join(", "))
            .unwrap();
        outcomes.push(outcome);
    }
    writeln!(log, "\n## Worst errors\n\n| kernel / dtype / quantity | worst | bound |\n|---|---|---|").unwrap();
    for (key, err, b) in worst(&list, &outcomes) {
        writeln!(log, "| {key} | {err:.2e} | {b:.0e} |").unwrap();
    }
    let summary = format!(
        "GPU check: {passed} passed, {failed} failed, 0 skipped ({} cases, {:.1} s)",
        list.len(),
        start.elapsed().as_secs_f64()
    );
    writeln!(log, "\n{summary}").unwrap();
    println!("{summary}");
    if let Some(path) = value("--log") {
        std::fs::write(&path, log).expect("write the log");
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

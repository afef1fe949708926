//! The GPU check binary: every kernel against the f64 reference on fresh random inputs
//! (see `ringdil_cuda::check`), with a Markdown log of the run.
//!
//! `gpu_check [--seed N] [--log FILE.md] [--date TEXT] [--require-gpu] [--large-sweep COUNT]
//! [--only TEXT] [--shard K/N | --jobs N [--time-limit S]] [--from I] [--contend MS]`
//!
//! `--shard K/N` runs the cases whose index is K mod N, with the inputs they get in the
//! whole list: N processes (one per GPU) with the same seed run the whole check between
//! them, each compiling the kernel modules of its own cases only. `--from I` skips the
//! cases before index I (a run cut short, resumed with the same seed). `--jobs N` starts
//! the N shards itself, side by side on this machine's GPU (each process compiles its own
//! cases' kernel modules, one CPU core each: the slow part of a check), and merges their
//! logs into `--log` (`ringdil_cuda::programs::shards`); `--time-limit S` stops the shards
//! still running after S seconds, and the cases they did not reach fail.
//!
//! `--contend MS` runs the check beside a second process of this binary that keeps the
//! GPU busy with MS-millisecond spin kernels, so that the driver time-slices the two
//! contexts and preempts the kernels under check mid-flight (`ringdil_cuda::programs::contend`;
//! with `--jobs`, one contender for all shards).
//!
//! `--large-sweep COUNT` runs only the large-score backward cases of seeds `N..N + COUNT`
//! and prints one line per case (`ringdil_cuda::check::sweep`); it judges nothing.
//!
//! Without a CUDA device it prints "GPU check: skipped: no CUDA device" and exits 0 (or 1
//! with `--require-gpu`): a skip is never reported as a pass.

use ringdil_cuda::check::{
    GRAD_RMS_FLOOR, LARGE_LOGITS, Logits, MERGE_BOUND, OFFSET_LOGITS, bound, bound_for, cases, describe,
    large_lse_bound, run_case,
};
use ringdil_cuda::programs::contend::{self, Contender};
use ringdil_cuda::programs::{Args, CheckLog, Program, shards};
use ringdil_cuda::shape::Dtype;
use std::fmt::Write;
use std::time::{Duration, Instant};

fn main() {
    let args = Args::from_env(Program::GpuCheck);
    contend::child_main_if_asked(&args);
    let seed = args.integer("--seed").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    let _contender = Contender::start(&args).unwrap_or_else(|e| args.fail(2, e));
    let gpu = args.gpu();
    if let Some(count) = args.integer::<u64>("--large-sweep") {
        ringdil_cuda::check::sweep::run(&gpu, seed, count).expect("sweep");
        return;
    }
    let device = gpu.describe().expect("device name");
    // `--only TEXT`: the cases whose name contains TEXT (a plant's run), each with the
    // inputs it gets in the whole list (its seed is drawn from its index there).
    let only = args.value("--only");
    let shard = args.value("--shard");
    let from = args.integer::<usize>("--from").unwrap_or(0);
    let (k, n) = match shard.as_deref().map(shards::parse_shard) {
        None => (0, 1),
        Some(Ok(kn)) => kn,
        Some(Err(e)) => {
            eprintln!("gpu_check: {e}");
            std::process::exit(2);
        }
    };
    let jobs = args.integer::<usize>("--jobs");
    match (jobs, &shard) {
        (Some(0), _) => args.fail(2, "--jobs 0: expected at least 1 process"),
        (Some(j), Some(s)) => args.fail(2, format!("--jobs {j} with --shard {s}: --jobs runs the shards itself")),
        _ => {}
    }
    let limit = shards::time_limit(&args, jobs);
    let list: Vec<(usize, _)> = cases(seed, false)
        .into_iter()
        .enumerate()
        .filter(|(i, c)| *i >= from && i % n == k && only.as_deref().is_none_or(|t| c.name.contains(t)))
        .collect();
    let mut header = String::new();
    writeln!(header, "# GPU check log\n").unwrap();
    writeln!(header, "* device: {device}").unwrap();
    writeln!(header, "* date: {}", args.date()).unwrap();
    let mut filter = only.as_deref().map_or(String::new(), |t| format!(" --only '{t}'"));
    if let Some(s) = &shard {
        write!(filter, " --shard {s}").unwrap();
    }
    if let Some(j) = jobs {
        write!(filter, " --jobs {j}").unwrap();
    }
    if from > 0 {
        write!(filter, " --from {from}").unwrap();
    }
    writeln!(header, "* seed: {seed} (rerun: `gpu_check --seed {seed}{filter}`)").unwrap();
    writeln!(header, "* bounds (relative L2 error vs the f64 reference on the same rounded inputs): bf16 < {}, f16 < {}; merge kernel vs reference merge < {}", bound(Dtype::Bf16), bound(Dtype::F16), MERGE_BOUND).unwrap();
    writeln!(
        header,
        "* large scores (|s| <= {LARGE_LOGITS:.0e}, or s = {OFFSET_LOGITS:.0e} +- 20): out and gradients < bf16 {:.1e}, f16 {:.1e} (|s| <= 1e4) and bf16 {:.1e}, f16 {:.1e} (offset); LSE error relative to the magnitude < {:.1e}",
        bound_for(Dtype::Bf16, Logits::Large),
        bound_for(Dtype::F16, Logits::Large),
        bound_for(Dtype::Bf16, Logits::Offset),
        bound_for(Dtype::F16, Logits::Offset),
        large_lse_bound()
    )
    .unwrap();
    writeln!(header, "* gradients: relative error with the reference's RMS floored at {GRAD_RMS_FLOOR:.0e} times rms(K) for dQ, rms(Q) for dK (at least 1; the one-hot rows' noise scales with them)").unwrap();
    writeln!(header, "* 16-bit results (`out 16-bit`, `dq 16-bit`, ...): words that differ from round-to-nearest-even of the kernel's f32 value (counts, must be 0); `out 16-bit epilogue`: the same for the output the epilogue rounds as it stores it, `lse 16-bit call` its LSE's differing bits; `dq/dk/dv 16-bit from 16-bit out`: the backward from the 16-bit output, its 16-bit gradients against the reference's exact gradient at that rounded output (values beyond the type's range must be the infinity they round to)").unwrap();
    writeln!(header, "* rows with no key (reference LSE -inf): out exactly 0, LSE exactly -inf, their dQ and unseen keys' dK, dV exactly 0 (`empty rows`, `empty grads`: counts, must be 0)").unwrap();
    writeln!(header, "* outputs poisoned with NaN before every launch; NaN never passes; a case that errors fails\n")
        .unwrap();
    writeln!(header, "## Cases\n\n| # | result | case | errors |\n|---|---|---|---|").unwrap();
    if let Some(jobs) = jobs {
        let numbers: Vec<usize> = list.iter().map(|&(i, _)| i).collect();
        run_jobs(&args, jobs, limit, seed, &numbers, header);
    }
    let mut log = CheckLog::default();
    let start = Instant::now();
    println!("gpu_check: seed {seed}, {} cases", list.len());
    let log_path = args.value("--log");
    for (done, (i, case)) in list.iter().enumerate() {
        // The log so far, so that a run cut short (a time limit) leaves what it checked.
        if let Some(path) = &log_path {
            let partial = format!("{header}{}\n(run in progress: {done} of {} cases done)\n", log.rows(), list.len());
            std::fs::write(path, partial).expect("write the log");
        }
        let i = *i;
        // A case that errors (a launch failure, or a result the reference refuses, such
        // as an infinite LSE) fails, and the run goes on to the others.
        match run_case(&gpu, case, seed ^ (i as u64 + 1)) {
            Ok(outcome) => {
                let group = format!("{:?} {:?}", case.kind, case.dtype);
                log.record(Some(i), &outcome.case, &group, &outcome.metrics, "");
            }
            Err(e) => log.record_errored(i, &describe(case), &e.to_string()),
        }
    }
    let mut worst = String::new();
    for (key, err, b) in log.worst() {
        writeln!(worst, "| {key} | {err:.2e} | {b:.0e} |").unwrap();
    }
    let cases = format!("{} cases", list.len());
    finish(&args, header + log.rows(), &worst, (log.passed(), log.failed()), &cases, start);
}

/// The end of a run: the log's worst-error table (`worst`: its rows) and summary line
/// after `text`, written to `--log`; the summary printed; exit status 1 if a case failed.
fn finish(
    args: &Args,
    mut text: String,
    worst: &str,
    (passed, failed): (usize, usize),
    cases: &str,
    start: Instant,
) -> ! {
    writeln!(text, "\n## Worst errors\n\n| kernel / dtype / quantity | worst | bound |\n|---|---|---|").unwrap();
    text += worst;
    let summary = format!(
        "GPU check: {passed} passed, {failed} failed, 0 skipped ({cases}, {:.1} s)",
        start.elapsed().as_secs_f64()
    );
    writeln!(text, "\n{summary}").unwrap();
    println!("{summary}");
    if let Some(path) = args.value("--log") {
        std::fs::write(&path, text).expect("write the log");
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

/// `--jobs N`: this program `N` times as shards `K/N` with the same seed (the NVRTC
/// compiles, one CPU core each, run side by side), each writing its own log next to
/// `--log` (or in the temporary directory), then one log from theirs
/// ([`shards::merge_logs`]): `header`, the rows by case number, the worst errors, the
/// counts. A case of `numbers` in no shard's log (a shard that stopped, or was stopped at
/// `limit`, `--time-limit`) fails.
fn run_jobs(args: &Args, jobs: usize, limit: Option<Duration>, seed: u64, numbers: &[usize], header: String) -> ! {
    let start = Instant::now();
    let base = shards::log_base(args.value("--log"), "gpu-check");
    let add = ["--seed".to_string(), seed.to_string()];
    let logs =
        shards::run_shards(args.rest(), &["--seed"], &add, jobs, &base, limit).unwrap_or_else(|e| args.fail(1, e));
    let merged = shards::merge_logs(&logs).unwrap_or_else(|e| args.fail(1, e));
    let missing: Vec<usize> = numbers.iter().copied().filter(|n| merged.numbers.binary_search(n).is_err()).collect();
    let mut text = header + &merged.rows;
    if !missing.is_empty() {
        writeln!(text, "\nNot run (a shard stopped first; counted as failed): cases {missing:?}").unwrap();
    }
    let counts = (merged.passed, merged.failed + missing.len());
    finish(args, text, &merged.worst, counts, &format!("{} cases in {jobs} shards", numbers.len()), start);
}

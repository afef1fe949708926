//! `ringdil attend --device gpu` on a GPU, as a user runs it. Its own harness makes a
//! machine without a CUDA device report it as **skipped**, never as passed:
//!
//! ```text
//! skipped: no CUDA device
//! gpu_attend: 0 passed, 0 failed, 1 skipped
//! ```
//!
//! On a GPU the f32 output and LSE must equal the f64 reference on the inputs rounded to
//! bf16 within `gpu_check`'s bound (1e-2 relative for the output; LSE 1e-4 relative, the
//! f32 sums' error), with grouped-query heads, LongNet branches and causality, and
//! `--check` must print the errors.

use ndarray::{Array3, Array4};
use ndarray_npy::read_npy;
use ringdil_cuda::{Dtype, Gpu};
use ringdil_reference::compare::rel_err;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::normal_tensor;
use ringdil_reference::{Spec, attention};
use std::process::ExitCode;

mod common;
use common::{npy_files, ringdil};

/// Run the binary on the GPU and compare; the failures found, each a line.
fn failures() -> Vec<String> {
    let q = normal_tensor([1, 200, 4, 64], 31);
    let (k, v) = (normal_tensor([1, 200, 2, 64], 32), normal_tensor([1, 200, 2, 64], 33));
    let paths = npy_files("gpu", &[&q, &k, &v], &["o", "l"]);
    let [a, b, c, o, l] = [0, 1, 2, 3, 4].map(|i| paths[i].as_str());
    let pattern = "docs/patterns/longnet.json";
    let (stdout, stderr, code) = ringdil(&[
        "attend",
        "--q",
        a,
        "--k",
        b,
        "--v",
        c,
        "--pattern",
        pattern,
        "--device",
        "gpu",
        "--check",
        "--out",
        o,
        "--lse",
        l,
    ]);
    if code != 0 {
        return vec![format!("exit code {code}: {stderr}")];
    }
    let mut failed = Vec::new();
    if !(stdout.contains("inputs rounded to bf16") && stdout.contains("against the f64 reference: output")) {
        failed.push(format!("the report lacks the rounding or the check: {stdout}"));
    }
    let rounded = |x: &Array4<f64>| x.mapv(|e| ringdil_cuda::check::round(e, Dtype::Bf16).1);
    let spec = Spec::new(Dilated::longnet(&[(16, 1), (32, 2), (64, 4)])).causal(true);
    let expected = attention(rounded(&q).view(), rounded(&k).view(), rounded(&v).view(), &spec).expect("reference");
    let out: Array4<f32> = read_npy(o).expect("output .npy");
    let lse: Array3<f32> = read_npy(l).expect("LSE .npy");
    let (e_out, e_lse) = (rel_err(&out.mapv(f64::from), &expected.out), rel_err(&lse.mapv(f64::from), &expected.lse));
    println!("output {e_out:.2e} (bound 1e-2), LSE {e_lse:.2e} (bound 1e-4)");
    if e_out.is_nan() || e_out >= 1e-2 {
        failed.push(format!("output error {e_out:.3e} >= 1e-2"));
    }
    if e_lse.is_nan() || e_lse >= 1e-4 {
        failed.push(format!("LSE error {e_lse:.3e} >= 1e-4"));
    }
    failed
}

fn main() -> ExitCode {
    match Gpu::probe() {
        Ok(Some(_)) => {}
        Ok(None) => {
            println!("skipped: no CUDA device");
            println!("gpu_attend: 0 passed, 0 failed, 1 skipped");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("CUDA is installed but unusable: {e}");
            println!("gpu_attend: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    }
    let failed = failures();
    for f in &failed {
        println!("FAIL attend --device gpu: {f}");
    }
    println!("gpu_attend: {} passed, {} failed", usize::from(failed.is_empty()), usize::from(!failed.is_empty()));
    if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

//! `gpu_bench`'s argument errors. They stop it before any GPU work, so these run on any
//! machine; without the check, a machine without a CUDA device would print a skip and exit 0.

use std::process::Command;

/// Exit code and standard error of `gpu_bench ARGS`.
fn gpu_bench(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu_bench")).args(args).output().expect("run gpu_bench");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn forward_only_names_the_sections_it_would_not_time() {
    let (code, err) = gpu_bench(&["--forward-only", "--sections", "dense,packed,expressions"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--forward-only") && err.contains("not packed, expressions:"), "{err}");
}

#[test]
fn forward_only_takes_the_sections_it_times() {
    let (code, err) = gpu_bench(&["--forward-only", "--sections", "dense,head_dims", "--write-documents", "/dev/null"]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn an_unknown_section_is_named() {
    let (code, err) = gpu_bench(&["--sections", "dense,nope"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown section \"nope\""), "{err}");
}

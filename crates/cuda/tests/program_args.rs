//! The programs' argument errors that stop them before any GPU work, so these run on any
//! machine: without the checks, a machine without a CUDA device would print a skip and
//! exit 0. `gpu_bench`'s sections, `ring_check`'s sharding options, both checks' `--contend`.

use std::process::Command;

/// Exit code and standard error of `program ARGS` (`program`: a binary's path).
fn run(program: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(program).args(args).output().expect("run the program");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn gpu_bench(args: &[&str]) -> (Option<i32>, String) {
    run(env!("CARGO_BIN_EXE_gpu_bench"), args)
}

fn ring_check(args: &[&str]) -> (Option<i32>, String) {
    run(env!("CARGO_BIN_EXE_ring_check"), args)
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

#[test]
fn bad_jobs_and_shards_are_named() {
    for (args, says) in [
        (&["--jobs", "0"][..], "--jobs 0: expected at least 1 process"),
        (&["--jobs", "2", "--shard", "0/2"], "--jobs 2 with --shard"),
        (&["--shard", "2/2"], "--shard \"2/2\": expected K/N with 0 <= K < N"),
        (&["--shard", "x"], "--shard \"x\""),
        (&["--jobs", "2", "--threads", "2"], "--jobs 2 with 2 ranks"),
        (&["--shard", "0/2", "--nproc", "2"], "--shard with 2 ranks"),
        (&["--time-limit", "60"], "--time-limit 60 without --jobs"),
        (&["--jobs", "2", "--time-limit", "soon"], "--time-limit takes an integer, got \"soon\""),
    ] {
        let (code, err) = ring_check(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--contend MS` is milliseconds from 1 to 1000, refused otherwise by both checks before
/// any GPU work; the contender's own switch is checked the same way.
#[test]
fn a_bad_contend_length_is_named() {
    for program in [env!("CARGO_BIN_EXE_ring_check"), env!("CARGO_BIN_EXE_gpu_check")] {
        for (flag, value) in
            [("--contend", "0"), ("--contend", "1001"), ("--contend", "soon"), ("--contend-child", "0")]
        {
            let (code, err) = run(program, &[flag, value]);
            assert_eq!(code, Some(2), "{program} {flag} {value}: {err}");
            assert!(err.contains(&format!("{flag} takes milliseconds from 1 to 1000, got \"{value}\"")), "{err}");
        }
    }
}

//! `ring_check`'s sharding options refused before any GPU work, so these run on any
//! machine (without the checks, a machine without a CUDA device would print a skip and
//! exit 0).

use std::process::Command;

/// Exit code and standard error of `ring_check ARGS`.
fn ring_check(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ring_check")).args(args).output().expect("run ring_check");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
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
    ] {
        let (code, err) = ring_check(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

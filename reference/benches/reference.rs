//! How fast is the reference? A plain `main` benchmark (no criterion: one run of the
//! largest case takes tens of seconds, so statistical sampling would take hours).
//!
//! The reference is the oracle behind thousands of property cases and the GPU checks,
//! so it has to stay usable at realistic sizes, and a sparse pattern has to cost its
//! share of the dense work rather than the dense work itself. This binary measures
//! forward and forward+backward for batch 1, 8 heads, head_dim 64, in f32 and f64, for
//! dense, dense causal, LongNet dilated (causal and not) and a causal sliding window,
//! prints a table and records it in `docs/benchmarks/reference-cpu.json`.
//!
//! Effective GFLOP/s are computed from the pairs `(query, key)` the pattern actually
//! allows (distinct pairs with multiplicity > 0, after causality), not from `n^2`: that
//! is the work an ideal sparse kernel must do, so comparing a pattern's time ratio to
//! dense with its pair ratio to dense shows whether sparsity pays off.
//!
//! It also times the tile maps of mask expressions ([`TileMap`], issue 21: the class of
//! every 64 x 64 tile that a GPU plan caches) at `RINGDIL_BENCH_TILE_SEQS` (default
//! 131072), single- and multi-threaded, next to the GPU forward times they must stay
//! small against (`docs/benchmarks`).
//!
//! ```text
//! cargo bench -p ringdil-reference --bench reference
//! RINGDIL_BENCH_SEQS=512,1024 RINGDIL_BENCH_OUT=/tmp/smoke.json cargo bench -p ringdil-reference --bench reference
//! RINGDIL_BENCH_SEQS= RINGDIL_BENCH_OUT=/tmp/tiles.json cargo bench -p ringdil-reference --bench reference
//! ```

use ndarray::{Array4, NdFloat};
use rayon::prelude::*;
use ringdil_reference::float::cast;
use ringdil_reference::pattern::expr::{Constants, TileMap};
use ringdil_reference::pattern::{Dilated, ExprPattern, KeyRun, SlidingWindow};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::{Spec, attention, attention_backward};
use serde_json::json;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const HEADS: usize = 8;
const HEAD_DIM: usize = 64;
/// LongNet branches `(segment, dilation)`: the paper's geometric schedule, up to 16384.
const LONGNET: [(usize, usize); 4] = [(2048, 1), (4096, 2), (8192, 4), (16384, 8)];
/// Keys of the causal sliding window (the query and the 511 before it).
const WINDOW: usize = 512;
/// At most this many repetitions per case; the best (smallest) time is reported, since
/// on a shared machine interference only ever adds time.
const MAX_REPS: usize = 3;
/// No further repetition starts once a case has used this much time: the largest f64
/// cases take over a minute each, and three of them would not add information.
const REPEAT_BUDGET: Duration = Duration::from_secs(60);
/// Forward flops per allowed pair and head_dim unit: `Q K^T` and `P V`, a multiply-add
/// (2 flops) each.
const FWD_FLOPS: f64 = 4.0;
/// Forward plus backward: the backward recomputes `S` and forms `dV`, `dP`, `dQ`, `dK`,
/// five more products (FlashAttention-2's convention of 2.5x the forward).
const FWD_BWD_FLOPS: f64 = 14.0;

/// One attention problem to time.
struct Case {
    name: &'static str,
    spec: Spec,
}

fn cases() -> Vec<Case> {
    let longnet = || Dilated::longnet(&LONGNET);
    vec![
        Case { name: "dense", spec: Spec::dense() },
        Case { name: "dense", spec: Spec::dense().causal(true) },
        Case { name: "longnet", spec: Spec::new(longnet()) },
        Case { name: "longnet", spec: Spec::new(longnet()).causal(true) },
        Case { name: "window-512", spec: Spec::new(SlidingWindow { left: WINDOW - 1, right: 0 }).causal(true) },
    ]
}

/// The GPU plan's tile (rows and keys) for the tile maps.
const TILE: usize = 64;
/// A timed mask: its name, expression and constants.
type TileMask = (&'static str, &'static str, &'static [(&'static str, i64)]);
/// Mask expressions whose tile maps are timed.
const TILE_MASKS: [TileMask; 5] = [
    ("causal", "k <= q", &[]),
    ("window-4096", "abs(q - k) <= win", &[("win", 4096)]),
    ("documents-8192", "q / doc == k / doc && k <= q", &[("doc", 8192)]),
    ("window+global", "abs(q - k) <= win || k < g || q < g", &[("win", 512), ("g", 256)]),
    (
        "dilated-16384/8",
        "(q % seg) % rate == h % rate && (k % seg) % rate == h % rate && q / seg == k / seg",
        &[("seg", 16384), ("rate", 8)],
    ),
];

/// Time the tile map of every [`TILE_MASKS`] entry at `n` (head 3 of 8): the best of
/// three builds on all threads and one on a single thread, printed and returned as rows.
fn time_tile_maps(n: usize) -> Vec<serde_json::Value> {
    let single = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a one-thread pool");
    let mut rows = Vec::new();
    for (name, text, pairs) in TILE_MASKS {
        let constants: Constants = pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let pattern = ExprPattern::new(text, &constants).expect("the benchmark's masks are valid");
        let build = || TileMap::new(&pattern, 3, HEADS, n, TILE).expect("a positive tile");
        let timed = |build: &dyn Fn() -> TileMap| {
            let start = Instant::now();
            let map = black_box(build());
            (start.elapsed().as_secs_f64(), map)
        };
        let (t_single, map) = single.install(|| timed(&build));
        let t_all = (0..3).map(|_| timed(&build).0).fold(f64::INFINITY, f64::min);
        let ((full, partial), runs) = (map.counts(), map.runs());
        let tiles = map.tiles() * map.tiles();
        println!(
            "{name:<16} {n:>7} {tiles:>9} {full:>9} {partial:>9} {runs:>8} {:>10.2} {:>10.2}",
            t_single * 1e3,
            t_all * 1e3
        );
        rows.push(json!({
            "mask": name, "expression": text, "constants": pairs, "seq": n, "tile": TILE, "tiles": tiles,
            "full": full, "partial": partial, "runs": runs, "ms_one_thread": t_single * 1e3, "ms_all_threads": t_all * 1e3,
        }));
    }
    rows
}

/// Pairs a spec allows over all heads of one batch row: `(distinct, with multiplicity)`.
///
/// Walks the pattern's key runs the way the engine does (same causal clip), counting a
/// key covered by several runs once in `distinct`.
fn allowed_pairs(spec: &Spec, n: usize) -> (u64, u64) {
    (0..HEADS * n)
        .into_par_iter()
        .map_init(
            || (Vec::<KeyRun>::new(), vec![u32::MAX; n]),
            |(runs, seen), flat| {
                let (head, query) = (flat / n, flat % n);
                runs.clear();
                spec.pattern.key_runs(query, head, HEADS, n, runs);
                let limit = if spec.causal { query + 1 } else { n };
                let clipped = runs.iter().map(|r| r.clipped(limit));
                let entries: u64 = clipped.clone().map(|r| r.len() as u64).sum();
                if runs.len() <= 1 {
                    // One run holds no key twice; skip the O(keys) marking (dense, window).
                    return (entries, entries);
                }
                let stamp = flat as u32;
                let mut distinct = 0;
                for key in clipped.flat_map(KeyRun::iter) {
                    if std::mem::replace(&mut seen[key], stamp) != stamp {
                        distinct += 1;
                    }
                }
                (distinct, entries)
            },
        )
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// Forward and forward+backward times (seconds) of every repetition.
fn time_case<T: NdFloat>(inputs: &[Array4<f64>; 4], spec: &Spec) -> (Vec<f64>, Vec<f64>) {
    let [q, k, v, d_out] = inputs.each_ref().map(|x| x.mapv(cast::<f64, T>));
    let (mut fwd, mut fwd_bwd) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while fwd.len() < MAX_REPS && (fwd.is_empty() || started.elapsed() < REPEAT_BUDGET) {
        let t0 = Instant::now();
        let forward = attention(q.view(), k.view(), v.view(), spec).expect("valid benchmark spec");
        let t1 = Instant::now();
        let grads =
            attention_backward(q.view(), k.view(), v.view(), spec, &forward, d_out.view()).expect("valid gradient");
        let t2 = Instant::now();
        black_box((forward, grads));
        fwd.push((t1 - t0).as_secs_f64());
        fwd_bwd.push((t2 - t0).as_secs_f64());
    }
    (fwd, fwd_bwd)
}

fn best(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Output of a shell command run in the workspace, trimmed, if it succeeds.
fn shell(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// `HEAD`, with `+dirty` when the engine's sources differ from it (other work in progress
/// is then part of what was measured).
fn git_commit() -> String {
    match shell("git", &["rev-parse", "--short", "HEAD"]) {
        None => "unknown".into(),
        Some(head) => match shell("git", &["status", "--porcelain", "--", "src"]) {
            Some(changes) if changes.is_empty() => head,
            _ => format!("{head}+dirty"),
        },
    }
}

fn main() {
    let seqs: Vec<usize> = std::env::var("RINGDIL_BENCH_SEQS")
        .unwrap_or_else(|_| "4096,16384".into())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().expect("RINGDIL_BENCH_SEQS: comma-separated sequence lengths"))
        .collect();
    let tile_seqs: Vec<usize> = std::env::var("RINGDIL_BENCH_TILE_SEQS")
        .unwrap_or_else(|_| "131072".into())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().expect("RINGDIL_BENCH_TILE_SEQS: comma-separated sequence lengths"))
        .collect();
    let out_path = std::env::var("RINGDIL_BENCH_OUT").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks/reference-cpu.json"),
        PathBuf::from,
    );
    let knobs: String = ["RINGDIL_BENCH_SEQS", "RINGDIL_BENCH_TILE_SEQS", "RINGDIL_BENCH_OUT"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v} ")))
        .collect();
    let command = format!("{knobs}cargo bench -p ringdil-reference --bench reference");
    // The commit of the sources being measured: taken before the run, since others may
    // commit while it lasts.
    let commit = git_commit();
    let load_before = load_average();
    let threads = rayon::current_num_threads();
    println!("{command}\n{} threads, load average before: {load_before}", threads);
    println!(
        "{:<11} {:<6} {:<4} {:>6} {:>9} {:>10} {:>7} {:>9} {:>9} {:>10} {:>10}",
        "pattern",
        "causal",
        "type",
        "seq",
        "fwd s",
        "fwd+bwd s",
        "keys/q",
        "fwd GF/s",
        "f+b GF/s",
        "t/dense",
        "pairs/dense"
    );

    let mut rows = Vec::new();
    for &n in &seqs {
        let inputs = [1, 2, 3, 4].map(|seed| normal_tensor([1, n, HEADS, HEAD_DIM], seed));
        let cases = cases();
        let pairs: Vec<(u64, u64)> = cases.iter().map(|c| allowed_pairs(&c.spec, n)).collect();
        for dtype in ["f32", "f64"] {
            // Dense times of this (dtype, seq), by causality, for the ratio columns.
            let mut dense: [Option<(f64, f64, u64)>; 2] = [None, None];
            for (case, &(distinct, entries)) in cases.iter().zip(&pairs) {
                let (fwd, fwd_bwd) = match dtype {
                    "f32" => time_case::<f32>(&inputs, &case.spec),
                    _ => time_case::<f64>(&inputs, &case.spec),
                };
                let (t_fwd, t_fwd_bwd) = (best(&fwd), best(&fwd_bwd));
                let causal = case.spec.causal;
                if case.name == "dense" {
                    dense[causal as usize] = Some((t_fwd, t_fwd_bwd, distinct));
                }
                let (time_ratio, time_ratio_fwd_bwd, pair_ratio) = dense[causal as usize]
                    .map(|(df, dfb, dp)| (t_fwd / df, t_fwd_bwd / dfb, distinct as f64 / dp as f64))
                    .unwrap_or((f64::NAN, f64::NAN, f64::NAN));
                let flops = distinct as f64 * HEAD_DIM as f64;
                let (gf_fwd, gf_fwd_bwd) = (FWD_FLOPS * flops / t_fwd / 1e9, FWD_BWD_FLOPS * flops / t_fwd_bwd / 1e9);
                let keys_per_query = distinct as f64 / (HEADS * n) as f64;
                println!(
                    "{:<11} {:<6} {:<4} {:>6} {:>9.3} {:>10.3} {:>7.0} {:>9.2} {:>9.2} {:>10.3} {:>10.3}",
                    case.name,
                    causal,
                    dtype,
                    n,
                    t_fwd,
                    t_fwd_bwd,
                    keys_per_query,
                    gf_fwd,
                    gf_fwd_bwd,
                    time_ratio,
                    pair_ratio
                );
                rows.push(json!({
                    "pattern": case.name,
                    "causal": causal,
                    "dtype": dtype,
                    "seq": n,
                    "fwd_s": t_fwd,
                    "fwd_bwd_s": t_fwd_bwd,
                    "fwd_samples_s": fwd,
                    "fwd_bwd_samples_s": fwd_bwd,
                    "allowed_pairs": distinct,
                    "keys_per_query_mean": keys_per_query,
                    "softmax_entries_per_query_mean": entries as f64 / (HEADS * n) as f64,
                    "fwd_gflops": gf_fwd,
                    "fwd_bwd_gflops": gf_fwd_bwd,
                    "time_ratio_to_dense_fwd": time_ratio,
                    "time_ratio_to_dense_fwd_bwd": time_ratio_fwd_bwd,
                    "pairs_ratio_to_dense": pair_ratio,
                }));
            }
        }
    }

    println!(
        "\ntile maps ({TILE} x {TILE} tiles, head 3 of {HEADS})\n{:<16} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}",
        "mask", "seq", "tiles", "full", "partial", "runs", "ms 1 thr", "ms all thr"
    );
    let tile_rows: Vec<serde_json::Value> = tile_seqs.iter().flat_map(|&n| time_tile_maps(n)).collect();

    let load_after = load_average();
    println!("load average after: {load_after}");
    let report = json!({
        "command": command,
        "date_utc": shell("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_else(|| "unknown".into()),
        "git_commit": commit,
        "machine": { "cpu": cpu_model(), "threads": threads, "loadavg_before": load_before, "loadavg_after": load_after },
        "config": {
            "batch": 1,
            "heads": HEADS,
            "head_dim": HEAD_DIM,
            "longnet_branches": LONGNET,
            "longnet_offsets": "head mod r, softmax-denominator combine",
            "window_keys": WINDOW,
            "timing": format!("best of up to {MAX_REPS} runs; no new run after {}s per case", REPEAT_BUDGET.as_secs()),
            "flops": "fwd 4*pairs*head_dim, fwd+bwd 14*pairs*head_dim, pairs = distinct allowed (query, key) pairs over all heads",
        },
        "rows": rows,
        "tile_maps": tile_rows,
    });
    // NaN ratios (no dense row to compare with) are written as null by serde_json.
    let text = serde_json::to_string_pretty(&report).expect("JSON of plain values") + "\n";
    std::fs::write(&out_path, text).unwrap_or_else(|e| panic!("write {}: {e}", out_path.display()));
    println!("wrote {}", out_path.display());
}

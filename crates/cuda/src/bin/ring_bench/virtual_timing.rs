//! `ring_bench --virtual P`: the ring's kernel time on one GPU. `P` virtual ranks run
//! every ring step's launches (`dist::VirtualRanks`: the ring's launches and merge order,
//! no transfers) one after another, so their total time is what the ring's steps cost in
//! kernels, against the whole sequence on one GPU (`single`). A ratio of 1 means the ring
//! adds no kernel cost; the excess is what the per-step, per-branch and per-piece launches
//! cost (issue 24, item 2, measures this before changing it).
//!
//! Rows: LongNet `(4096,1)(16384,2)(65536,4)(262144,8)` causal on contiguous ranks,
//! dense causal on zigzag ranks, and dense causal over long-tailed packed documents
//! (`packed_documents`) on contiguous ranks and on the work-balanced split
//! (`dist::balanced_layout`: every rank's causal work within `W / P +- w_max`, where an
//! even split of packed documents is not), and that LongNet inside the same documents
//! on both (launches over the documents on every piece pair, `crate::spec_documents`),
//! at 128K tokens, 8 heads of d = 128, bf16, P given. Times are medians of 3 after a
//! warm-up; the single-GPU time of the packed rows is the whole packed sequence's.

use crate::configs::{packed_documents, pattern};
use crate::measure::{median, random_bits};
use crate::single::single;
use crate::{DIM, HEADS};
use ringdil_cuda::Gpu;
use ringdil_cuda::dist::{DistPlan, RankData, VirtualRanks, balanced_layout};
use ringdil_cuda::programs::Args;
use ringdil_cuda::shape::Dtype;
use ringdil_reference::ring::{ChunkPlan, Layout};
use serde_json::json;
use std::fmt::Write;
use std::time::Instant;

/// (forward s, forward + backward s) of the virtual ring of `pat` over `p` ranks.
fn virtual_ring(gpu: &Gpu, pat: &str, layout: &Layout, n: usize, p: usize) -> (f64, f64) {
    let plan =
        DistPlan::new(ChunkPlan::new(n, p, layout).expect("chunks"), pattern(pat, n), 1, HEADS, DIM).expect("plan");
    let len = n * HEADS * DIM;
    let (q, k, v, g) = (random_bits(len, 1), random_bits(len, 2), random_bits(len, 3), random_bits(len, 4));
    let data: Vec<RankData> = (0..p).map(|r| RankData::upload(gpu, &plan, r, &q, &k, &v).expect("upload")).collect();
    let dout: Vec<_> =
        (0..p).map(|r| ringdil_cuda::dist::ring::upload_dout(gpu, &plan, r, &g).expect("upload")).collect();
    let mut vr = VirtualRanks::new(gpu, &plan, Dtype::Bf16).expect("virtual ranks");
    let (mut fwd, mut both) = (Vec::new(), Vec::new());
    for i in 0..4 {
        gpu.synchronize().unwrap();
        let t = Instant::now();
        let out = vr.forward(&data).expect("forward");
        gpu.synchronize().unwrap();
        let f = t.elapsed().as_secs_f64();
        let grads = vr.backward(&data, &out, &dout).expect("backward");
        gpu.synchronize().unwrap();
        if i > 0 {
            fwd.push(f);
            both.push(t.elapsed().as_secs_f64());
        }
        drop((out, grads));
    }
    (median(fwd), median(both))
}

/// The rows: (pattern, layout).
const ROWS: [(&str, &str); 6] = [
    ("longnet dilated causal", "contiguous"),
    ("dense causal", "zigzag"),
    ("packed dense causal", "contiguous"),
    ("packed dense causal", "balanced"),
    ("packed longnet dilated causal", "contiguous"),
    ("packed longnet dilated causal", "balanced"),
];

/// The rows `--only TEXT` picks: those whose "pattern layout" contains TEXT (all without
/// it), so that a profiler can be run over one row; none is an error naming TEXT.
fn selected(only: Option<&str>) -> Result<Vec<(&'static str, &'static str)>, String> {
    let rows: Vec<_> =
        ROWS.into_iter().filter(|(pat, layout)| only.is_none_or(|t| format!("{pat} {layout}").contains(t))).collect();
    if rows.is_empty() {
        let names: Vec<String> = ROWS.iter().map(|(pat, layout)| format!("{pat} {layout}")).collect();
        return Err(format!("--only {:?} matches no row; the rows are: {}", only.unwrap_or(""), names.join(", ")));
    }
    Ok(rows)
}

/// Time every row (or `--only`'s) and write the table (`--md`) and JSON (`--json`).
pub fn run(args: &Args, p: usize) {
    let rows_wanted = selected(args.value("--only").as_deref()).unwrap_or_else(|e| args.fail(2, e));
    let gpu = args.gpu();
    let device = gpu.describe().expect("device");
    let n = 128 * 1024;
    let mut md = String::new();
    writeln!(md, "## Ring kernel time on virtual ranks, {device}\n").unwrap();
    writeln!(md, "Date {}; command `{}`. N = {n}, {HEADS} heads, d = {DIM}, bf16; P = {p} virtual ranks (the ring's launches in sequence, no transfers) against one GPU over the whole sequence; ratio = virtual / single (1 = no added kernel cost).\n", args.date(), args.command()).unwrap();
    writeln!(
        md,
        "| pattern | layout | single fwd ms | virtual fwd ms | ratio | single fwd+bwd ms | virtual fwd+bwd ms | ratio |"
    )
    .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|").unwrap();
    let mut rows = Vec::new();
    for (pat, name) in rows_wanted {
        let layout = match name {
            "zigzag" => Layout::Zigzag,
            "balanced" => balanced_layout(&packed_documents(n), 1, n, p).expect("balanced split"),
            _ => Layout::Contiguous,
        };
        let one = single(&gpu, pat, n);
        let (f, b) = virtual_ring(&gpu, pat, &layout, n, p);
        let (f, b) = (f * 1e3, b * 1e3);
        writeln!(
            md,
            "| {pat} | {name} | {:.2} | {f:.2} | {:.2} | {:.2} | {b:.2} | {:.2} |",
            one.fwd_ms,
            f / one.fwd_ms,
            one.fwd_bwd_ms,
            b / one.fwd_bwd_ms
        )
        .unwrap();
        println!(
            "{pat} {name} P={p}: fwd {f:.2} ms vs {:.2} single, fwd+bwd {b:.2} vs {:.2}",
            one.fwd_ms, one.fwd_bwd_ms
        );
        rows.push(json!({"pattern": pat, "layout": name, "ranks": p, "seq_len": n,
            "single_fwd_ms": one.fwd_ms, "virtual_fwd_ms": f, "single_fwd_bwd_ms": one.fwd_bwd_ms, "virtual_fwd_bwd_ms": b}));
    }
    let report = json!({"device": device, "date": args.date(), "command": args.command(), "rows": rows});
    if let Some(path) = args.value("--json") {
        std::fs::write(path, serde_json::to_string_pretty(&report).unwrap()).expect("write json");
    }
    if let Some(path) = args.value("--md") {
        std::fs::write(path, md).expect("write md");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_picks_the_rows_whose_name_contains_it() {
        assert_eq!(selected(None).unwrap().len(), 6);
        assert_eq!(selected(Some("packed")).unwrap(), ROWS[2..]);
        assert_eq!(selected(Some("dense causal zigzag")).unwrap(), [ROWS[1]]);
        assert_eq!(selected(Some("causal balanced")).unwrap(), [ROWS[3], ROWS[5]]);
        assert_eq!(selected(Some("packed longnet")).unwrap(), ROWS[4..]);
        let e = selected(Some("ulysses")).unwrap_err();
        assert!(e.contains("\"ulysses\"") && e.contains("packed dense causal balanced"), "{e}");
    }
}

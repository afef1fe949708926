//! Packed LongNet rows of the benchmark (issue 22): LongNet `(2048, 1)`, `(4096, 4)`,
//! `(8192, 8)`, `(16384, 16)` causal inside the packed section's documents ([`boundaries`]:
//! 24 documents of 142 to 13410 tokens in one row of 65536), 16 heads of d = 128, bf16,
//! forward and forward + backward, run two ways in the same process:
//!
//! * one launch per branch over every document (what `GpuSpec::lowered` picks on
//!   contiguous rows; segments restart at each document's start): the
//!   dilation-1 branch as dense attention inside its segments, the others compact,
//!   visiting the branch's kept rows only;
//! * mask tables of the pattern inside the documents (`GpuSpec::in_documents`: what runs
//!   on a striped layout's ring pieces; each branch visits every tile its lattice
//!   touches), tables built before timing.
//!
//! Each branch also runs alone inside the documents (its own rate), so the pattern's time
//! splits into its branches'.
//!
//! Work: the causal pairs the pattern keeps, per head on average, counted with their
//! multiplicity over branches (the softmax-denominator combine): per branch, document
//! and segment of `l` tokens, head `h` keeps `k = ceil((l - o(h)) / r)` positions and
//! `k (k + 1) / 2` causal pairs. "Rate vs dense" is (ms per pair) / (ms per pair of dense
//! causal attention over the row, same run): 1 means the pattern costs its pairs at the
//! dense-causal rate.

use crate::packed::{SEQ, boundaries};
use crate::{HostInputs, run};
use ringdil_cuda::{Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::Documents;
use ringdil_reference::pattern::Dilated;
use serde_json::{Value, json};
use std::fmt::Write;

const HEADS: usize = 16;
const DIM: usize = 128;
const BRANCHES: [(usize, usize); 4] = [(2048, 1), (4096, 4), (8192, 8), (16384, 16)];

/// Causal pairs per head (mean over heads) that `pattern` keeps inside the documents
/// `list` (module docs).
fn pairs(pattern: &Dilated, list: &[usize]) -> f64 {
    let mut total = 0.0;
    for b in &pattern.branches {
        for d in list.windows(2) {
            let len = d[1] - d[0];
            for s in (0..len).step_by(b.segment) {
                let l = (len - s).min(b.segment);
                for h in 0..HEADS {
                    let o = pattern.offset(b, h, HEADS);
                    let k = if l > o { (l - o).div_ceil(b.dilation) } else { 0 };
                    total += (k * (k + 1) / 2) as f64;
                }
            }
        }
    }
    total / HEADS as f64
}

/// Time the rows, append the table to `md`, return them as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, md: &mut String) -> Value {
    let list = boundaries();
    let shape = Shape::square(1, SEQ, HEADS, DIM);
    let longnet = Dilated::longnet(&BRANCHES);
    let compact = GpuSpec::new(GpuPattern::Dilated(longnet.clone()))
        .causal(true)
        .documents(Documents::per_row(vec![list.clone()]));
    let tables = GpuSpec::new(compact.in_documents(list.clone())).causal(true);
    let dense = GpuSpec::new(GpuPattern::Dense).causal(true);
    let (work, dense_pairs) = (pairs(&longnet, &list), (SEQ * (SEQ + 1) / 2) as f64);
    let (df, db) = run(gpu, host, &shape, &dense, true);
    writeln!(md, "\n### Packed LongNet, {SEQ} tokens in one row, {HEADS} heads, d = {DIM}, bf16, causal\n").unwrap();
    writeln!(
        md,
        "LongNet {BRANCHES:?} (softmax-denominator combine) inside the packed section's {} documents. Pairs kept \
         (per head, with multiplicity): {:.5} of dense causal's. Rate vs dense = (ms per pair) / (ms per pair, \
         dense causal over the row: {df:.3} ms forward, {:.3} ms forward + backward, same run). Compact: one launch \
         per branch over every document (dilation 1: dense inside its segments; the others compact, reading a \
         segment table); tables: mask tables of the pattern inside the documents (built before timing).\n",
        list.len() - 1,
        work / dense_pairs,
        db.expect("timed")
    )
    .unwrap();
    writeln!(md, "| how | pass | ms | rate vs dense | tables / compact |").unwrap();
    writeln!(md, "|---|---|---|---|---|").unwrap();
    let (cf, cb) = run(gpu, host, &shape, &compact, true);
    let (tf, tb) = run(gpu, host, &shape, &tables, true);
    let mut out = Vec::new();
    for (pass, c, t, d) in
        [("fwd", cf, tf, df), ("fwd+bwd", cb.expect("timed"), tb.expect("timed"), db.expect("timed"))]
    {
        for (how, ms) in [("compact", c), ("mask tables", t)] {
            let rate = (ms / work) / (d / dense_pairs);
            let over = if how == "mask tables" { format!("{:.2}", t / c) } else { "-".into() };
            writeln!(md, "| {how} | {pass} | {ms:.3} | {rate:.2} | {over} |").unwrap();
            println!("packed longnet {how} {pass}: {ms:.3} ms, rate vs dense {rate:.2}");
            out.push(json!({"how": how, "pass": pass, "ms": ms, "rate_vs_dense": rate, "dense_causal_ms": d}));
        }
    }
    let branches = branch_rows(gpu, host, &shape, &list, (df, db.expect("timed"), dense_pairs), md);
    json!({"seq": SEQ, "heads": HEADS, "head_dim": DIM, "branches": BRANCHES, "documents": list.len() - 1,
        "pairs_per_head": work, "dense_pairs": dense_pairs, "rows": out, "branch_rows": branches})
}

/// Each branch alone inside the documents (one launch, as in the pattern), with its rate
/// against dense causal's (`dense`: forward ms, forward + backward ms, pairs), so that the
/// pattern's time splits into its branches'.
fn branch_rows(
    gpu: &Gpu,
    host: &HostInputs,
    shape: &Shape,
    list: &[usize],
    (df, db, dense_pairs): (f64, f64, f64),
    md: &mut String,
) -> Vec<Value> {
    writeln!(md, "\nEach branch alone, compact, inside the same documents:\n").unwrap();
    writeln!(md, "| branch | pairs / dense causal's | fwd ms | rate | fwd+bwd ms | rate |").unwrap();
    writeln!(md, "|---|---|---|---|---|---|").unwrap();
    BRANCHES
        .iter()
        .map(|&b| {
            let one = Dilated::longnet(&[b]);
            let spec = GpuSpec::new(GpuPattern::Dilated(one.clone()))
                .causal(true)
                .documents(Documents::per_row(vec![list.to_vec()]));
            let work = pairs(&one, list);
            let (f, fb) = run(gpu, host, shape, &spec, true);
            let fb = fb.expect("timed");
            let (rf, rb) = ((f / work) / (df / dense_pairs), (fb / work) / (db / dense_pairs));
            writeln!(md, "| {b:?} | {:.5} | {f:.3} | {rf:.2} | {fb:.3} | {rb:.2} |", work / dense_pairs).unwrap();
            println!("packed longnet branch {b:?}: fwd {f:.3} ms (rate {rf:.2}), fwd+bwd {fb:.3} ms (rate {rb:.2})");
            json!({"branch": b, "pairs_per_head": work, "fwd_ms": f, "fwd_rate_vs_dense": rf, "fwd_bwd_ms": fb,
                "fwd_bwd_rate_vs_dense": rb})
        })
        .collect()
}

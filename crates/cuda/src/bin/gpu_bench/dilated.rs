//! LongNet's branches alone and as one pattern against dense attention at the same length
//! and against dense attention of the same work, causal and not, forward and forward +
//! backward, with FlexAttention's time for the same branches (`bench/flex_peer.py`, same run).
//!
//! Branch (w, r) at length n: each of the n/w segments keeps the w/r positions of its
//! dilation lattice (offset h mod r per head), which attend one another: n/w attentions of
//! w/r tokens, (n/w) (w/r)^2 = n w/r^2 of the dense n^2 score entries per head (work share
//! w/(r^2 n); causal about halves both sides). Its equal-work baseline is that attention as a
//! dense batch, `Shape::square(n/w, w/r, h, d)` with the same causal flag: the same FLOPs
//! without the index map, so ms / equal is what the compact launch costs over its work.
//! A pattern's baseline is the sum of its branches' (the work it cannot avoid), so its
//! ms / equal also counts the combine. The goal (issue 24) is ms / equal <= 1.1 on every
//! row, the r = 1 branch included.

use crate::{HostInputs, run};
use ringdil_cuda::{Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::pattern::Dilated;
use serde_json::{Value, json};
use std::fmt::Write;

const SEQ: usize = 16384;
const HEADS: usize = 16;
const DIM: usize = 128;
/// LongNet's branches (w, r): each runs alone, then all four as one pattern.
const BRANCHES: [(usize, usize); 4] = [(2048, 1), (4096, 4), (8192, 8), (16384, 16)];
/// The passes, indexing the pairs `timed` returns; with flex_peer.py's key for each.
const PASSES: [(&str, &str); 2] = [("fwd", "fwd_ms"), ("fwd+bwd", "fwd_bwd_ms")];
const CAUSAL: [bool; 2] = [false, true];

/// [forward ms, forward + backward ms] of `pattern` on `shape`.
fn timed(gpu: &Gpu, host: &HostInputs, shape: &Shape, pattern: GpuPattern, causal: bool) -> [f64; 2] {
    let (fwd, both) = run(gpu, host, shape, &GpuSpec::new(pattern).causal(causal), true);
    [fwd, both.expect("timed with the backward")]
}

/// FlexAttention's ms for branch (w, r) (flex_peer.py's "longnet (w, r)" [" causal"] row).
fn flex_ms(flex: &Value, (w, r): (usize, usize), causal: bool, key: &str) -> Option<f64> {
    let what = format!("longnet ({w}, {r}){}", if causal { " causal" } else { "" });
    flex["rows"].as_array()?.iter().find(|x| x["what"] == what)?[key].as_f64()
}

/// Time the rows, append their table to `md`, return them as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, flex: &Value, md: &mut String) -> Value {
    let shape = Shape::square(1, SEQ, HEADS, DIM);
    let dense = CAUSAL.map(|causal| timed(gpu, host, &shape, GpuPattern::Dense, causal));
    // Each branch's equal-work time, once per causal flag: its own row's and the pattern's sum.
    let equal = CAUSAL.map(|causal| {
        BRANCHES.map(|(w, r)| timed(gpu, host, &Shape::square(SEQ / w, w / r, HEADS, DIM), GpuPattern::Dense, causal))
    });
    let [[f, fb], [cf, cfb]] = dense;
    writeln!(
        md,
        "\n### LongNet branches vs dense, n = {SEQ}, h = {HEADS}, d = {DIM}, bf16, forward and forward + backward\n\n\
         Dense: fwd {f:.3} ms, fwd+bwd {fb:.3} ms; causal fwd {cf:.3} ms, fwd+bwd {cfb:.3} ms. A branch (w, r) \
         does n*w/r^2 of the dense n^2 work per head (work share w/(r^2 n)); a pattern, the sum of its branches'.\n\
         Equal work: dense attention over n/w sequences of w/r tokens (batch n/w), same causal flag and pass, the \
         FLOPs of one branch without its index map; a pattern's is the sum of its branches' (each timed once). \
         ms / equal is what the compact launches (and a pattern's combine) cost over that; the goal is <= 1.1.\n\
         Flex: compiled flex_attention with the branch's mask (offset h mod r, `& (q >= kv)` when causal; block \
         mask built once, not timed), same run (`bench/flex_peer.py`); Flex / ringdil > 1 means ringdil is faster.\n\n\
         | branches | causal | pass | work share | ms | time / dense | equal-work ms | ms / equal | Flex ms | \
         Flex / ringdil |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    .unwrap();
    let (mut branch_rows, mut passes) = (Vec::new(), Vec::new());
    let sets = (0..BRANCHES.len()).map(|i| i..i + 1).chain(std::iter::once(0..BRANCHES.len()));
    for set in sets {
        let branches = &BRANCHES[set.clone()];
        let share: f64 = branches.iter().map(|&(w, r)| w as f64 / (r * r * SEQ) as f64).sum();
        for (c, causal) in CAUSAL.into_iter().enumerate() {
            let times = timed(gpu, host, &shape, GpuPattern::Dilated(Dilated::longnet(branches)), causal);
            for (p, (pass, key)) in PASSES.into_iter().enumerate() {
                let (ms, vs_dense) = (times[p], times[p] / dense[c][p]);
                let equal_ms: f64 = equal[c][set.clone()].iter().map(|e| e[p]).sum();
                let flex_ms = match branches {
                    &[branch] => flex_ms(flex, branch, causal, key),
                    _ => None,
                };
                let (flex_col, flex_over) =
                    flex_ms.map_or(("-".into(), "-".into()), |f| (format!("{f:.3}"), format!("{:.1}", f / ms)));
                writeln!(
                    md,
                    "| {branches:?} | {causal} | {pass} | {share:.4} | {ms:.3} | {vs_dense:.4} | {equal_ms:.3} | {:.2} \
                     | {flex_col} | {flex_over} |",
                    ms / equal_ms
                )
                .unwrap();
                println!(
                    "dilated {branches:?} causal {causal} {pass}: {ms:.3} ms = {vs_dense:.4} of dense (work share \
                     {share:.4}), {:.2} x equal-work {equal_ms:.3} ms, Flex {flex_col} ms",
                    ms / equal_ms
                );
                if !causal && pass == "fwd" {
                    // The rows' form before issue 24, which history.py and notebook 02 read.
                    branch_rows.push(json!({"branches": branches, "work_share": share, "ms": ms,
                        "time_vs_dense": vs_dense, "equal_work_dense_ms": equal_ms, "flex_ms": flex_ms}));
                }
                passes.push(json!({"branches": branches, "causal": causal, "pass": pass, "work_share": share,
                    "ms": ms, "time_vs_dense": vs_dense, "equal_work_ms": equal_ms, "over_equal": ms / equal_ms,
                    "flex_ms": flex_ms}));
            }
        }
    }
    let dense_rows: Vec<Value> = CAUSAL
        .iter()
        .zip(dense)
        .flat_map(|(&causal, ms)| {
            PASSES.iter().zip(ms).map(move |(&(pass, _), ms)| json!({"causal": causal, "pass": pass, "ms": ms}))
        })
        .collect();
    json!({"seq": SEQ, "heads": HEADS, "head_dim": DIM, "dense": dense_rows, "branches": branch_rows,
        "passes": passes})
}

//! Packed-sequence rows of the benchmark (issue 22): one row of 65536 tokens holding
//! documents of long-tailed lengths, 16 heads of d = 128, bf16, causal within each
//! document, forward and forward + backward; against dense causal attention over the
//! whole row (the rate to match, per pair that exists) and against FlexAttention with a
//! document mask (`bench/flex_peer.py`, same run, same boundaries).
//!
//! Document lengths ([`boundaries`]): log-normal, `round(1024 * exp(1.25 z))` tokens with
//! `z` standard normal (median 1024, mean about 2240; 5% under 130 tokens, 1.3% over 16K),
//! at least 1, the last one cut at the row's end; drawn from seed 22, which gives 24
//! documents of 142 to 13410 tokens (the table prints them). The pairs
//! that exist are `sum L (L + 1) / 2` over the documents; "rate vs dense" is
//! (ms per pair packed) / (ms per pair of dense causal over the row): 1 means the packed
//! batch costs exactly its pairs at the dense-causal rate.

use crate::{HostInputs, run};
use ringdil_cuda::{Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::Documents;
use ringdil_reference::random::SplitMix64;
use serde_json::{Value, json};
use std::fmt::Write;

pub const SEQ: usize = 65536;
const HEADS: usize = 16;
const DIM: usize = 128;

/// The row's boundary list `0 = c_0 < ... < c_m = SEQ` (see the module docs).
pub fn boundaries() -> Vec<usize> {
    let mut rng = SplitMix64::new(22);
    let mut list = vec![0];
    while *list.last().expect("starts at 0") < SEQ {
        let len = (1024.0 * (1.25 * rng.normal()).exp()).round().max(1.0) as usize;
        list.push((list.last().expect("non-empty") + len).min(SEQ));
    }
    list
}

/// Causal pairs of a document list: `sum L (L + 1) / 2`.
fn causal_pairs(list: &[usize]) -> f64 {
    list.windows(2).map(|w| (w[1] - w[0]) as f64 * (w[1] - w[0] + 1) as f64 / 2.0).sum()
}

/// Time the rows, append the table to `md`, return them as JSON. `flex` is flex_peer.py's
/// report (`{"rows": []}` when not run); its boundaries must be ours.
pub fn rows(gpu: &Gpu, host: &HostInputs, flex: &Value, md: &mut String) -> Value {
    let list = boundaries();
    let peer = |what: &str, implementation: &str, key: &str| -> Option<f64> {
        if flex["boundaries"].as_array().map(|b| b.len()) != Some(list.len()) {
            return None;
        }
        flex["rows"]
            .as_array()?
            .iter()
            .find_map(|r| (r["what"] == what && r["impl"] == implementation).then(|| r[key].as_f64()).flatten())
    };
    if !flex["boundaries"].is_null()
        && flex["boundaries"].as_array().map(|b| b.iter().map(|x| x.as_u64().unwrap_or(0) as usize).collect::<Vec<_>>())
            != Some(list.clone())
    {
        panic!("flex_peer.py timed other boundaries than gpu_bench's (rerun `gpu_bench --write-documents`)");
    }
    let shape = Shape::square(1, SEQ, HEADS, DIM);
    let docs = Documents::per_row(vec![list.clone()]);
    let packed = GpuSpec::new(GpuPattern::Dense).causal(true).documents(docs);
    let dense = GpuSpec::new(GpuPattern::Dense).causal(true);
    let (pf, pb) = run(gpu, host, &shape, &packed, true);
    let (df, db) = run(gpu, host, &shape, &dense, true);
    let (pb, db) = (pb.expect("timed"), db.expect("timed"));
    let (pairs, dense_pairs) = (causal_pairs(&list), causal_pairs(&[0, SEQ]));
    let lengths: Vec<usize> = list.windows(2).map(|w| w[1] - w[0]).collect();
    let (shortest, longest) = (lengths.iter().min().copied(), lengths.iter().max().copied());
    writeln!(md, "\n### Packed sequences, {SEQ} tokens in one row, {HEADS} heads, d = {DIM}, bf16, causal\n").unwrap();
    writeln!(
        md,
        "{} documents, log-normal lengths round(1024 exp(1.25 z)) (seed 22; shortest {shortest:?}, longest \
         {longest:?}); pairs that exist: {:.4} of dense causal's. Rate vs dense = (ms per pair, packed) / (ms per \
         pair, dense causal over the row). FlexAttention: compiled flex_attention with a document + causal \
         block mask (mask built once, not timed), same boundaries, same run.\n",
        lengths.len(),
        pairs / dense_pairs
    )
    .unwrap();
    writeln!(md, "| pass | packed ms | dense causal ms | rate vs dense | Flex packed ms | Flex / ringdil | Flex dense causal ms |")
        .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|").unwrap();
    let mut out = Vec::new();
    for (pass, p_ms, d_ms, key) in [("fwd", pf, df, "fwd_ms"), ("fwd+bwd", pb, db, "fwd_bwd_ms")] {
        let rate = (p_ms / pairs) / (d_ms / dense_pairs);
        let flex_packed = peer("documents causal", "flex", key);
        let flex_dense = peer("dense causal", "flex", key);
        let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        let over = flex_packed.map_or("-".into(), |f| format!("{:.2}", f / p_ms));
        writeln!(
            md,
            "| {pass} | {p_ms:.3} | {d_ms:.3} | {rate:.3} | {} | {over} | {} |",
            fmt(flex_packed),
            fmt(flex_dense)
        )
        .unwrap();
        println!("packed {pass}: {p_ms:.3} ms, dense causal {d_ms:.3} ms, rate {rate:.3}; flex {flex_packed:?}");
        out.push(json!({"pass": pass, "ms": p_ms, "dense_causal_ms": d_ms, "rate_vs_dense": rate,
            "flex_ms": flex_packed, "flex_dense_causal_ms": flex_dense}));
    }
    json!({"seq": SEQ, "heads": HEADS, "head_dim": DIM, "boundaries": list, "pairs": pairs,
        "dense_pairs": dense_pairs, "rows": out})
}

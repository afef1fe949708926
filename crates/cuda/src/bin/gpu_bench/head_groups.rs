//! The head-group combine of the PyTorch ports (`dilated-attention-pytorch`'s default
//! branches (2048, 1), (4096, 2), (8192, 4), causal and not) as one GPU call, against its
//! groups run as separate calls on their heads alone (each a single branch at its fixed
//! offset: the work of the combine with nothing else, what `ringdil.nn` ran before the
//! combine had a GPU form, less its slicing copies, concatenation and division).
//!
//! The one call runs a compact launch per branch over its group's heads
//! (`Params::head_first`, `head_count`), then scales the output by `1/G`
//! (`ringdil_cuda::output_scale`); the ratio says what the shared call and the scaling
//! passes cost over the groups' own work.

use crate::{HostInputs, run};
use ringdil_cuda::{GpuPattern, GpuSpec, Shape};
use ringdil_reference::pattern::Dilated;
use serde_json::{Value, json};
use std::fmt::Write;

const SEQ: usize = 16384;
const HEADS: usize = 16;
const DIM: usize = 128;
const BRANCHES: [(usize, usize); 3] = [(2048, 1), (4096, 2), (8192, 4)];

/// Time the rows, append their table to `md`, return them as JSON.
pub fn rows(gpu: &ringdil_cuda::Gpu, host: &HostInputs, md: &mut String) -> Value {
    writeln!(
        md,
        "\n### Head-group combine (the PyTorch ports' rule), n = {SEQ}, {HEADS} heads, d = {DIM}, bf16\n\n\
         Branches {BRANCHES:?}, one contiguous group of heads per branch at offset `g mod r_g`, outputs divided \
         by the number of groups: one call (a compact launch per branch over its group's heads, then the \
         scale) against the sum of the groups as separate calls on their heads alone.\n\n\
         | causal | pass | one call ms | groups apart ms | one call / apart |\n|---|---|---|---|---|"
    )
    .unwrap();
    let pattern = Dilated::head_groups(&BRANCHES);
    let shape = Shape::square(1, SEQ, HEADS, DIM);
    let mut out = Vec::new();
    for causal in [false, true] {
        let (f, b) = run(gpu, host, &shape, &GpuSpec::new(GpuPattern::Dilated(pattern.clone())).causal(causal), true);
        let (mut fa, mut ba) = (0.0, 0.0);
        for g in 0..pattern.branches.len() {
            let heads = (0..HEADS).filter(|&h| pattern.head_group(h, HEADS) == g).count();
            // Branch g alone, at its fixed offset g mod r_g.
            let spec = GpuSpec::new(GpuPattern::Dilated(pattern.single_branch(g))).causal(causal);
            let (gf, gb) = run(gpu, host, &Shape::square(1, SEQ, heads, DIM), &spec, true);
            fa += gf;
            ba += gb.expect("timed with the backward");
        }
        let b = b.expect("timed with the backward");
        for (pass, one, apart) in [("fwd", f, fa), ("fwd+bwd", b, ba)] {
            writeln!(md, "| {causal} | {pass} | {one:.3} | {apart:.3} | {:.2} |", one / apart).unwrap();
            println!("head groups causal {causal} {pass}: one call {one:.3} ms, groups apart {apart:.3} ms");
            out.push(json!({"causal": causal, "pass": pass, "one_call_ms": one, "groups_apart_ms": apart,
                "one_over_apart": one / apart}));
        }
    }
    json!({"seq": SEQ, "heads": HEADS, "head_dim": DIM, "branches": BRANCHES, "rows": out})
}

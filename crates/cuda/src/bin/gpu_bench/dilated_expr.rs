//! A new dilation rule written as a `dilated_expr` file, against the built-in it varies:
//! LongNet (2048, 1), (4096, 4), (8192, 8) with offsets rotating per segment (head `h`
//! keeps residue `(h + s) mod r` in segment `s`), softmax-denominator combine, causal and
//! not; and its (4096, 4) and (8192, 8) branches alone. Such a file has a compact form
//! (`ringdil_cuda::dilated_expr`): one gathered launch per branch, offsets from a table,
//! so each row is compared with the built-in LongNet of fixed offsets `h mod r` (the same
//! work) and, for single branches, with FlexAttention's time for the built-in's mask
//! (`flex_peer.py`'s "longnet (w, r)", same run; the offsets do not change its tiles).

use crate::{HostInputs, run};
use ringdil_cuda::{GpuPattern, GpuSpec, Shape};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};
use serde_json::{Value, json};
use std::fmt::Write;

const SEQ: usize = 16384;
const HEADS: usize = 16;
const DIM: usize = 128;

/// `branches` with offset `h + s` (rotating) as a compact `dilated_expr` pattern.
fn rotating(branches: &[(usize, usize)]) -> GpuPattern {
    let c = Constants::new();
    let branches = branches
        .iter()
        .map(|&(w, r)| ExprBranch::new(&w.to_string(), &r.to_string(), "h + s", None, &c).expect("parses"))
        .collect();
    let pattern = GpuPattern::dilated_expr(
        ExprDilated { branches, combine: ExprCombine::SoftmaxDenominator },
        "gpu_bench rotating".into(),
    );
    assert!(matches!(pattern, GpuPattern::DilatedExpr(_)), "the rotating rule has a compact form");
    pattern
}

/// Time the rows, append their table to `md`, return them as JSON.
pub fn rows(gpu: &ringdil_cuda::Gpu, host: &HostInputs, flex: &Value, md: &mut String) -> Value {
    let flex_ms = |w: usize, r: usize| -> Option<f64> {
        flex["rows"]
            .as_array()?
            .iter()
            .find_map(|x| (x["what"] == format!("longnet ({w}, {r})")).then(|| x["fwd_ms"].as_f64()).flatten())
    };
    let shape = Shape::square(1, SEQ, HEADS, DIM);
    writeln!(
        md,
        "\n### A `dilated_expr` rule in compact launches: offsets rotating per segment, n = {SEQ}, {HEADS} heads, \
         d = {DIM}, bf16\n\n\
         Offset `h + s` (residue `(h + s) mod r` in segment `s`), softmax-denominator combine: one gathered launch \
         per branch with the offsets read from a table, against the built-in LongNet of fixed offsets `h mod r` \
         (the same work). Flex: FlexAttention's forward for the built-in branch's mask (same run).\n\n\
         | branches | causal | pass | dilated_expr ms | built-in ms | dilated_expr / built-in | Flex ms | Flex / dilated_expr |\n\
         |---|---|---|---|---|---|---|---|"
    )
    .unwrap();
    let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
    let mut out = Vec::new();
    let cases: [(&[(usize, usize)], bool); 4] = [
        (&[(2048, 1), (4096, 4), (8192, 8)], false),
        (&[(2048, 1), (4096, 4), (8192, 8)], true),
        (&[(4096, 4)], false),
        (&[(8192, 8)], false),
    ];
    for (branches, causal) in cases {
        let with_backward = branches.len() > 1;
        let (ef, eb) = run(gpu, host, &shape, &GpuSpec::new(rotating(branches)).causal(causal), with_backward);
        let builtin = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(branches))).causal(causal);
        let (bf, bb) = run(gpu, host, &shape, &builtin, with_backward);
        let flex = match (branches, causal) {
            (&[(w, r)], false) => flex_ms(w, r),
            _ => None,
        };
        for (pass, e, b, f) in [("fwd", Some(ef), Some(bf), flex), ("fwd+bwd", eb, bb, None)] {
            let (Some(e), Some(b)) = (e, b) else { continue };
            let over = f.map_or("-".into(), |f| format!("{:.1}", f / e));
            writeln!(md, "| {branches:?} | {causal} | {pass} | {e:.3} | {b:.3} | {:.2} | {} | {over} |", e / b, fmt(f))
                .unwrap();
            println!("dilated_expr rotating {branches:?} causal {causal} {pass}: {e:.3} ms, built-in {b:.3} ms");
            out.push(json!({"branches": branches, "causal": causal, "pass": pass, "dilated_expr_ms": e,
                "builtin_ms": b, "over_builtin": e / b, "flex_ms": f}));
        }
    }
    json!({"seq": SEQ, "heads": HEADS, "head_dim": DIM, "offset": "h + s", "rows": out})
}

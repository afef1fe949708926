//! Mask expressions against the built-in patterns they equal (issue 21): n = 16384, 16
//! heads of d = 128, bf16, forward and forward + backward, and FlexAttention with the same
//! mask (`bench/flex_peer.py`, same run). Then the cost of the tile classification that
//! builds an expression's plan, at n = 131072, against one forward there.
//!
//! Each expression's key sets are checked against its built-in's on sampled query rows of
//! every head before anything is timed (a benchmark of two different masks would compare
//! nothing). A LongNet branch written as a mask is recognised as that branch
//! (`ExprPattern::as_dilated`) and runs as its compact launch.
//!
//! Then a rule no built-in has, notebook 01's: LongNet branches (2048, 1), (4096, 4),
//! (8192, 8), causal, whose offsets rotate per segment (head h keeps residue (h + s) mod r
//! in segment s), as one boolean mask ([`ROTATING`]), against the built-in LongNet with
//! fixed offsets h mod r (the same work, combined by softmax denominator rather than
//! union) and FlexAttention with the same mask; and the same rule as a pattern file
//! writes it, a `dilated_expr` union of the three branches ([`rotating_union`]), whose
//! branches nest and so run as disjoint compact pieces (`ringdil_cuda::union_pieces`).
//! The mask is recognised as that union (`ExprPattern::as_nested_union`), so both columns
//! time the same launches, built from two descriptions.

use crate::{HostInputs, run};
use ringdil_cuda::shape::Dtype;
use ringdil_cuda::{Chunk, Gpu, GpuPattern, GpuSpec, Shape};
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated, ExprPattern};
use ringdil_reference::pattern::{BlockSparse, Dilated, Pattern, SlidingWindow, key_counts};
use serde_json::{Value, json};
use std::fmt::Write;
use std::time::Instant;

const SEQ: usize = 16384;
const HEADS: usize = 16;
const DIM: usize = 128;
/// Notebook 01's rotating-offset rule (module docs), in the mask language; `w1`..`r3` are
/// the file's constants ([`rotating`]).
pub const ROTATING: &str = "k <= q && (q / w1 == k / w1 \
    || (q / w2 == k / w2 && q % w2 % r2 == (h + q / w2) % r2 && k % w2 % r2 == (h + k / w2) % r2) \
    || (q / w3 == k / w3 && q % w3 % r3 == (h + q / w3) % r3 && k % w3 % r3 == (h + k / w3) % r3))";

/// [`ROTATING`] with the bench's branches.
fn rotating() -> ExprPattern {
    ExprPattern::new(ROTATING, &rotating_constants()).expect("the rotating rule parses")
}

/// [`ROTATING`]'s constants.
fn rotating_constants() -> Constants {
    [("w1", 2048), ("w2", 4096), ("r2", 4), ("w3", 8192), ("r3", 8)].map(|(n, v)| (n.to_string(), v)).into()
}

/// [`ROTATING`] as a pattern file's `dilated_expr` union of its branches.
fn rotating_union() -> ExprDilated {
    let c = Constants::new();
    let branches = [("2048", "1", "0"), ("4096", "4", "h + s"), ("8192", "8", "h + s")]
        .map(|(w, r, o)| ExprBranch::new(w, r, o, None, &c).expect("the union's branches parse"))
        .to_vec();
    ExprDilated { branches, combine: ExprCombine::Union }
}

/// The length at which the plan's classification is timed.
const LONG_SEQ: usize = 131072;

/// (name as flex_peer.py names it, built-in pattern, the expression that equals it, time
/// the backward too).
fn cases() -> Vec<(&'static str, GpuPattern, &'static str, bool)> {
    vec![
        ("window 512 causal", GpuPattern::Window { left: 511, right: 0 }, "k <= q && q - k < 512", true),
        ("block local 128", GpuPattern::BlockSparse(BlockSparse::local(128, 1)), "abs(q / 128 - k / 128) <= 1", true),
        (
            "longnet (4096, 4)",
            GpuPattern::Dilated(Dilated::longnet(&[(4096, 4)])),
            "q / 4096 == k / 4096 && q % 4 == h % 4 && k % 4 == h % 4",
            false,
        ),
    ]
}

/// The reference pattern of a built-in.
fn reference(p: &GpuPattern) -> Box<dyn Pattern> {
    match p {
        GpuPattern::Window { left, right } => Box::new(SlidingWindow { left: *left, right: *right }),
        GpuPattern::BlockSparse(b) => Box::new(b.clone()),
        GpuPattern::Dilated(d) => Box::new(d.clone()),
        other => panic!("no built-in case for {other:?}"),
    }
}

fn expression(mask: &str) -> ExprPattern {
    ExprPattern::new(mask, &Constants::new()).expect("the bench's expressions parse")
}

/// Panics unless `a` and `b` give every head the same key multiplicities on 67 query rows
/// spread over the sequence (both ends included).
fn assert_same_keys(name: &str, a: &dyn Pattern, b: &dyn Pattern) {
    for i in 0..=66 {
        let q = (i * (SEQ - 1)) / 66;
        for h in 0..HEADS {
            assert!(
                key_counts(a, q, h, HEADS, SEQ) == key_counts(b, q, h, HEADS, SEQ),
                "{name}: the expression's keys differ from the built-in's at query {q}, head {h}"
            );
        }
    }
}

/// Time the rows, append their table to `md`, return them as JSON.
pub fn rows(gpu: &Gpu, host: &HostInputs, flex: &Value, md: &mut String) -> Value {
    let flex_ms = |what: &str, key: &str| -> Option<f64> {
        flex["rows"].as_array()?.iter().find_map(|r| (r["what"] == what).then(|| r[key].as_f64()).flatten())
    };
    let shape = Shape::square(1, SEQ, HEADS, DIM);
    writeln!(md, "\n### Mask expressions vs the built-ins they equal, n = {SEQ}, {HEADS} heads, d = {DIM}, bf16\n")
        .unwrap();
    writeln!(
        md,
        "Each expression's key sets equal its built-in's (checked on 67 query rows of every head before timing). \
         Flex: compiled flex_attention with the same mask (block mask built once, not timed), same run. \
         The LongNet branch as a mask is recognised as that branch and runs as its compact launch.\n"
    )
    .unwrap();
    writeln!(md, "| mask | pass | built-in ms | expression ms | expression / built-in | Flex ms | Flex / expression |")
        .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|").unwrap();
    let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
    let mut out = Vec::new();
    for (name, builtin, mask, backward) in cases() {
        let expr = expression(mask);
        assert_same_keys(name, &expr, reference(&builtin).as_ref());
        let (bf, bb) = run(gpu, host, &shape, &GpuSpec::new(builtin), backward);
        let (ef, eb) = run(gpu, host, &shape, &GpuSpec::new(GpuPattern::Expr(expr)), backward);
        let passes = [("fwd", Some(bf), Some(ef), "fwd_ms"), ("fwd+bwd", bb, eb, "fwd_bwd_ms")];
        for (pass, b_ms, e_ms, key) in passes {
            let (Some(b_ms), Some(e_ms)) = (b_ms, e_ms) else { continue };
            let f = flex_ms(name, key);
            let over = f.map_or("-".into(), |f| format!("{:.2}", f / e_ms));
            writeln!(md, "| `{mask}` | {pass} | {b_ms:.3} | {e_ms:.3} | {:.2} | {} | {over} |", e_ms / b_ms, fmt(f))
                .unwrap();
            println!("expression {name} {pass}: {e_ms:.3} ms, built-in {b_ms:.3} ms, flex {f:?}");
            out.push(json!({"name": name, "mask": mask, "pass": pass, "builtin_ms": b_ms, "expr_ms": e_ms,
                "expr_over_builtin": e_ms / b_ms, "flex_ms": f}));
        }
    }
    let fixed = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(2048, 1), (4096, 4), (8192, 8)]))).causal(true);
    let (ff, fb) = run(gpu, host, &shape, &fixed, true);
    let (rf, rb) = run(gpu, host, &shape, &GpuSpec::new(GpuPattern::Expr(rotating())), true);
    let union = rotating_union();
    // The mask is causal itself; the union's causality is the call's.
    let unmasked = ROTATING.strip_prefix("k <= q && ").expect("ROTATING starts with its causal test");
    let constants = rotating_constants();
    let unmasked = ExprPattern::new(unmasked, &constants).expect("the rotating rule parses");
    assert_same_keys("rotating offsets", &unmasked, &union);
    let union = GpuSpec::new(GpuPattern::dilated_expr(union, "rotating union".into())).causal(true);
    let (uf, ub) = run(gpu, host, &shape, &union, true);
    writeln!(
        md,
        "\nA new rule as a mask (notebook 01): LongNet (2048, 1), (4096, 4), (8192, 8), causal, offsets rotating per \
         segment (`(h + s) mod r`), union of branches; against the built-in LongNet with fixed offsets `h mod r` \
         (softmax-denominator combine, same work) and FlexAttention with the same mask. The mask is recognised as \
         the union of its branches, which nest, and runs as disjoint compact pieces, as does the same rule written as \
         a pattern file's `dilated_expr` union (same keys, checked).\n"
    )
    .unwrap();
    writeln!(
        md,
        "| pass | rotating (mask) ms | rotating (`dilated_expr` union) ms | fixed offsets (built-in) ms | Flex ms | \
         Flex / mask | Flex / union |"
    )
    .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|").unwrap();
    let mut new_rule = Vec::new();
    for (pass, r_ms, u_ms, f_ms, key) in [
        ("fwd", rf, uf, ff, "fwd_ms"),
        ("fwd+bwd", rb.expect("timed"), ub.expect("timed"), fb.expect("timed"), "fwd_bwd_ms"),
    ] {
        let f = flex_ms("rotating offsets", key);
        let over = |ms: f64| f.map_or("-".into(), |f| format!("{:.2}", f / ms));
        writeln!(md, "| {pass} | {r_ms:.3} | {u_ms:.3} | {f_ms:.3} | {} | {} | {} |", fmt(f), over(r_ms), over(u_ms))
            .unwrap();
        println!(
            "rotating offsets {pass}: mask {r_ms:.3} ms, union {u_ms:.3} ms, fixed built-in {f_ms:.3} ms, flex {f:?}"
        );
        new_rule.push(json!({"pass": pass, "expr_ms": r_ms, "union_ms": u_ms, "fixed_builtin_ms": f_ms, "flex_ms": f}));
    }
    let classification = classification_cost(gpu, host);
    writeln!(
        md,
        "\nTile classification of `{}` at n = {LONG_SEQ} (`Gpu::prepare`, on the host, once per shape: a \
         `Prepared` call is reused): {:.1} ms, against {:.3} ms for one forward there ({:.1}%).",
        classification["mask"].as_str().unwrap_or(""),
        classification["prepare_ms"].as_f64().unwrap_or(f64::NAN),
        classification["forward_ms"].as_f64().unwrap_or(f64::NAN),
        classification["percent"].as_f64().unwrap_or(f64::NAN)
    )
    .unwrap();
    json!({"seq": SEQ, "heads": HEADS, "head_dim": DIM, "rows": out, "rotating_offsets": new_rule,
        "classification": classification})
}

/// `Gpu::prepare` (which classifies every tile) of the block-local expression at
/// n = LONG_SEQ, 16 heads of d = 128, against one forward with it. Its kernel module was
/// compiled for its row above (same expression), so the time is the plan's. (The causal
/// window written as a mask runs as the built-in window: no classification to time.)
fn classification_cost(gpu: &Gpu, host: &HostInputs) -> Value {
    let mask = "abs(q / 128 - k / 128) <= 1";
    let shape = Shape::square(1, LONG_SEQ, HEADS, DIM);
    let spec = GpuSpec::new(GpuPattern::Expr(expression(mask)));
    let start = Instant::now();
    let prep = gpu.prepare(&shape, Dtype::Bf16, &spec, &Chunk::whole(&shape)).expect("prepare");
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    drop(prep);
    let (forward_ms, _) = run(gpu, host, &shape, &spec, false);
    println!("classification at n = {LONG_SEQ}: {prepare_ms:.1} ms, forward {forward_ms:.3} ms");
    json!({"mask": mask, "seq": LONG_SEQ, "prepare_ms": prepare_ms, "forward_ms": forward_ms,
        "percent": 100.0 * prepare_ms / forward_ms})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rotating rule is what its docs say: transcribed as a closure, on 300 positions
    /// of 3 heads with small branches.
    #[test]
    fn the_rotating_rule_keeps_residue_h_plus_s_per_segment() {
        let constants: Constants =
            [("w1", 8), ("w2", 16), ("r2", 2), ("w3", 32), ("r3", 4)].map(|(n, v)| (n.to_string(), v)).into();
        let p = ExprPattern::new(ROTATING, &constants).unwrap();
        let branch = |q: usize, k: usize, h: usize, w: usize, r: usize| {
            let s = q / w;
            k / w == s && (q - s * w) % r == (h + s) % r && (k - s * w) % r == (h + s) % r
        };
        let (n, heads) = (300, 3);
        for h in 0..heads {
            for q in 0..n {
                let counts = key_counts(&p, q, h, heads, n);
                for (k, &c) in counts.iter().enumerate() {
                    let want = k <= q && (q / 8 == k / 8 || branch(q, k, h, 16, 2) || branch(q, k, h, 32, 4));
                    assert_eq!(c, u32::from(want), "q {q} k {k} h {h}");
                }
            }
        }
    }

    /// The bench's premise, checked without a GPU: each expression is its built-in.
    #[test]
    fn each_expression_has_its_builtins_key_sets() {
        for (name, builtin, mask, _) in cases() {
            assert_same_keys(name, &expression(mask), reference(&builtin).as_ref());
        }
    }
}

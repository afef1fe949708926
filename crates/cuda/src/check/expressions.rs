//! The mask-expression cases of the kernel check (issue 21; `docs/semantics.md`, section
//! 14): pattern-file masks compiled into their own kernel modules (`expr_source`) and
//! evaluated from global positions, against the reference's `ExprPattern` (its
//! evaluator, proven equal to the C source by `tests/expr_c.rs`).
//!
//! For each element type and head dim: a forward with a band whose width depends on the
//! head plus global keys (causal or not), a backward over diagonal blocks and a lattice
//! (tiles the plan keeps only partly, and tiles it skips), a ring step (query and key
//! pieces at offsets: the expression sees global positions), a grouped-query forward
//! whose heads of one group see different keys, and a backward of a mask whose
//! arithmetic leaves 32 bits (so its module keeps the 64-bit transcription, while the
//! others run the 32-bit one: `expr_source`, "Width").

use super::cases::{Case, Kind, fit_spec, sizes};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::ExprPattern;
use ringdil_reference::pattern::expr::Constants;
use ringdil_reference::random::SplitMix64;

/// The masks, each with the constants it names.
const MASKS: [(&str, &str); 5] = [
    ("band per head + globals", "abs(q - k) <= width + 9 * h || k < globals"),
    ("blocks + lattice", "q / 64 == k / 64 || (q - k) % 7 == 0"),
    ("late keys for upper heads", "if h < H / 2 then q - k < 90 && k <= q + 5 else k >= n - 70"),
    ("residues per head", "(q + h) % 3 == k % 3 && abs(q - k) < 300"),
    ("64-bit hash + band", "(q * 5000000000 + k) % 1000003 < 700000 || abs(q - k) < 20"),
];

fn spec(mask: &str) -> GpuSpec {
    let constants: Constants = [("width".to_string(), 30), ("globals".to_string(), 4)].into_iter().collect();
    GpuSpec::new(GpuPattern::Expr(ExprPattern::new(mask, &constants).expect("the check's masks parse")))
}

/// The expression cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let combo = (dtype, head_dim);
            let causal = rng.uniform() < 0.5;
            let mut add =
                |kind: Kind, (what, mask): (&str, &str), causal: bool, kv_group: usize, rng: &mut SplitMix64| {
                    let (seq, batch, heads) = sizes(quick, rng);
                    // At n = 1 the 64-bit mask multiplies only q = 0: a second query makes its product leave 32 bits.
                    let seq = if what.contains("64-bit") { seq.max(2) } else { seq };
                    let heads = heads * kv_group;
                    let spec = fit_spec(spec(mask).causal(causal), batch, seq, rng);
                    let name = format!("expr {what}{}", if kv_group > 1 { " (gqa)" } else { "" });
                    out.push(Case {
                        kv_heads: heads / kv_group,
                        ..Case::new(kind, &name, combo, [batch, seq, heads], spec)
                    });
                };
            add(Kind::Forward, MASKS[0], causal, 1, rng);
            add(Kind::Backward, MASKS[1], !causal, 1, rng);
            add(Kind::RingStep, MASKS[2], false, 1, rng);
            add(Kind::Forward, MASKS[3], true, 2, rng);
            add(Kind::Backward, MASKS[4], causal, 1, rng);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first four masks run 32-bit at every size the check draws, the last 64-bit
    /// with a query past 0 (whose product leaves 32 bits), so both transcriptions run
    /// on the GPU.
    #[test]
    fn both_widths_are_checked() {
        for seed in 0..64 {
            for quick in [false, true] {
                for c in cases(&mut SplitMix64::new(seed), quick) {
                    let GpuPattern::Expr(e) = &c.spec.pattern else { panic!("{}: not an expression", c.name) };
                    let narrow = e.fits_i32(c.seq, c.heads);
                    let wide = c.name.contains("64-bit");
                    assert_eq!(narrow, !wide, "{} at n = {} (seed {seed})", c.name, c.seq);
                    assert!(!wide || c.seq >= 2, "{} at n = {} (seed {seed})", c.name, c.seq);
                }
            }
        }
    }
}

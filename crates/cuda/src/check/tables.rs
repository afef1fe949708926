//! Materialised patterns in the kernel check (issue 21, item 4): reference patterns with
//! no GPU mask of their own, which the kernels read from a mask table built on the host
//! (`crate::mask_table`), against the reference evaluating the same `Pattern` object.
//!
//! The patterns: Sparse Transformer's strided pattern written as a Rust `Pattern` impl
//! outside the crate's built-ins (as `reference/examples/custom_pattern.rs` writes it), a
//! `dilated_expr` file whose offsets rotate per segment (branches combined by union, one
//! table; or by softmax denominator, one table and launch per branch, merged), and a
//! random mask with whole empty, whole full and partial 64 x 64 blocks. For each element
//! type and head dim: a forward, a backward, a ring step (pieces at offsets: the table is
//! indexed by global positions) and a grouped-query forward.

use super::cases::{Case, Kind, fit_spec, sizes};
use crate::mask_table::TablePattern;
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_pattern_file::PatternFile;
use ringdil_reference::pattern::{Explicit, KeyRun, Pattern};
use ringdil_reference::random::SplitMix64;
use std::sync::Arc;

/// Query `i` sees the `stride` most recent keys (itself included) and every `stride`-th
/// key before them (Child et al. 2019, "strided"); the runs never overlap.
#[derive(Debug, Clone, Copy)]
pub struct Strided(pub usize);

impl Pattern for Strided {
    fn validate(&self, _heads: usize, _seq_len: usize) -> ringdil_reference::Result<()> {
        if self.0 == 0 {
            return Err(ringdil_reference::Error::ZeroParameter { pattern: "strided", parameter: "stride" });
        }
        Ok(())
    }

    fn key_runs(&self, query: usize, _head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let band = query.saturating_sub(self.0 - 1);
        out.push(KeyRun::range(band, (query + 1).min(seq_len)));
        let first = query % self.0;
        if first < band {
            out.push(KeyRun { start: first, end: band, step: self.0 });
        }
    }
}

/// A `dilated_expr` file: branches (32, 1), (96, 3) and (192, 4) whose offsets rotate per
/// segment, combined by union.
pub fn rotating_union() -> Arc<dyn Pattern> {
    let text = r#"{"kind": "dilated_expr", "combine": "union", "branches": [
        {"segment": "32", "dilation": 1, "offset": 0},
        {"segment": "96", "dilation": 3, "offset": "h + s"},
        {"segment": "192", "dilation": 4, "offset": "h + 2 * s"}]}"#;
    PatternFile::parse(text, false).expect("the check's file parses").pattern().expect("and builds")
}

/// The same branches combined by softmax denominator (a key two branches keep counts
/// twice), as the GPU runs it: one table part per branch (`PatternFile::table_parts`).
pub fn rotating_softmax() -> TablePattern {
    let text = r#"{"kind": "dilated_expr", "branches": [
        {"segment": "32", "dilation": 1, "offset": 0},
        {"segment": "96", "dilation": 3, "offset": "h + s"},
        {"segment": "192", "dilation": 4, "offset": "h + 2 * s"}]}"#;
    let file = PatternFile::parse(text, false).expect("the check's file parses");
    TablePattern::new(file.pattern().expect("builds")).with_parts(file.table_parts().expect("splits"))
}

/// A random mask over `heads` heads and `seq` positions: each 64 x 64 block (per head) is
/// empty, full or random pairs, one third each.
pub fn random_blocks(heads: usize, seq: usize, seed: u64) -> Arc<dyn Pattern> {
    let mut rng = SplitMix64::new(seed);
    let blocks = seq.div_ceil(64);
    let kinds: Vec<u64> = (0..heads * blocks * blocks).map(|_| rng.next_u64() % 3).collect();
    let bits: Vec<bool> = (0..heads * seq * seq).map(|_| rng.next_u64() % 3 == 0).collect();
    Arc::new(Explicit::from_fn(heads, seq, |h, i, j| {
        u32::from(match kinds[(h * blocks + i / 64) * blocks + j / 64] {
            0 => false,
            1 => true,
            _ => bits[(h * seq + i) * seq + j],
        })
    }))
}

/// The table cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let combo = (dtype, head_dim);
            let causal = rng.uniform() < 0.5;
            for (kind, what, causal, kv_group) in [
                (Kind::Forward, "strided 7 (a Rust Pattern impl)", causal, 1),
                (Kind::Backward, "rotating offsets (dilated_expr, softmax denominator: 3 parts)", !causal, 1),
                (Kind::RingStep, "random blocks", false, 1),
                (Kind::Forward, "rotating offsets (dilated_expr, union)", true, 2),
            ] {
                let (seq, batch, heads) = sizes(quick, rng);
                let heads = heads * kv_group;
                let pattern = match what {
                    "random blocks" => GpuPattern::table(random_blocks(heads, seq, rng.next_u64())),
                    w if w.starts_with("strided") => GpuPattern::table(Arc::new(Strided(7))),
                    w if w.contains("softmax") => GpuPattern::Table(rotating_softmax()),
                    _ => GpuPattern::table(rotating_union()),
                };
                let spec = fit_spec(GpuSpec::new(pattern).causal(causal), batch, seq, rng);
                let name = format!("table {what}{}", if kv_group > 1 { " (gqa)" } else { "" });
                out.push(Case {
                    kv_heads: heads / kv_group,
                    ..Case::new(kind, &name, combo, [batch, seq, heads], spec)
                });
            }
        }
    }
    out
}

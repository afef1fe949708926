//! Tile plans of packed sequences (`docs/semantics.md`, section 16): a query of document
//! `[s, e)` sees only keys in `[s, e)`, so a tile pair is visited only when a row of the
//! query tile and a row of the key tile share a document in some batch row.
//!
//! Documents are ordered: the documents the query positions `[q0, q1]` of a tile touch in
//! batch row `b` cover exactly the key positions `[start_b(q0), end_b(q1))`, so the pair
//! may attend iff the key tile's positions `[k0, k1]` meet that span in some row. Exact
//! for one batch row on contiguous axes (every position between `q0` and `q1` is a row of
//! the tile); a plan is per launch, not per batch row, so several rows take the union.
//! This restricts a pattern's plan ([`super::plan`]); the pattern's own test still runs
//! on positions, which for Dense and Window equal the document-relative rule (a window is
//! a difference of positions), and for the others does not (not allowed on the GPU).
//!
//! Work in progress (issue 22, packed sequences on the GPU): the kernels do not yet mask
//! across documents, so nothing calls this outside its tests.

use super::{IndexMap, TilePlan};
use ringdil_reference::Documents;

/// The boundary lists of every batch row of a launch.
#[derive(Debug, Clone)]
pub struct DocumentSpans {
    rows: Vec<Vec<usize>>,
}

impl DocumentSpans {
    /// The rows of `documents` for `batch` rows of `seq_len` (validated by the caller).
    pub fn new(documents: &Documents, batch: usize, seq_len: usize) -> Self {
        DocumentSpans { rows: (0..batch).map(|b| documents.row(b, seq_len)).collect() }
    }

    /// Do the query positions `q` and key positions `k` (inclusive ranges) share a
    /// document in some row?
    fn meet(&self, q: (usize, usize), k: (usize, usize)) -> bool {
        self.rows.iter().any(|list| {
            let start = list[list.partition_point(|&c| c <= q.0) - 1];
            let end = list[list.partition_point(|&c| c <= q.1)];
            k.1 >= start && k.0 < end
        })
    }
}

/// `plan` (query tiles of `q_tile` rows over key tiles of `k_tile`, identity `map`)
/// without the tile pairs that share no document.
pub fn restrict(plan: &TilePlan, map: IndexMap, (q_tile, k_tile): (usize, usize), spans: &DocumentSpans) -> TilePlan {
    let IndexMap::Identity { q, k } = map else {
        panic!("documents restrict identity launches only (compact branches are refused before)");
    };
    let span = |tile: usize, size: usize, axis: super::Axis| {
        super::positions(tile * size, (tile + 1) * size, axis).expect("a planned tile lies on its axis")
    };
    TilePlan::build(plan.row_tiles, plan.col_tiles, |r, c| {
        plan.row(r).contains(&(c as i32)) && spans.meet(span(r, q_tile, q), span(c, k_tile, k))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan;
    use crate::spec::GpuPattern;
    use ringdil_reference::random::SplitMix64;
    use ringdil_reference::{Spec, pattern::Dense};

    /// Random boundaries of `n` with some empty and one-token documents.
    fn random_docs(n: usize, rng: &mut SplitMix64) -> Vec<usize> {
        let mut b = vec![0];
        while *b.last().unwrap() < n {
            let len = [0, 1, rng.range(2, 40), rng.range(40, 300)][rng.range(0, 3)];
            b.push((b.last().unwrap() + len).min(n));
        }
        b
    }

    /// Sound (every pair the reference allows lies in a visited tile) for any rows, and
    /// exact for one row (every visited tile holds an allowed pair), dense causal or not.
    #[test]
    fn restricted_plans_visit_exactly_the_tiles_documents_allow() {
        let mut rng = SplitMix64::new(5);
        for case in 0..60 {
            let (n, batch, causal) = (rng.range(1, 700), rng.range(1, 2), rng.uniform() < 0.5);
            let docs = Documents::per_row((0..batch).map(|_| random_docs(n, &mut rng)).collect());
            let spec = Spec::new(Dense).causal(causal).documents(docs.clone());
            spec.validate(batch, 1, n).unwrap();
            let map = IndexMap::whole(n);
            let tiles = (64, 64);
            let p = restrict(
                &plan(&GpuPattern::Dense, None, causal, map, tiles),
                map,
                tiles,
                &DocumentSpans::new(&docs, batch, n),
            );
            let mut allowed = vec![vec![false; p.col_tiles]; p.row_tiles];
            for b in 0..batch {
                for i in 0..n {
                    for (j, &c) in spec.key_counts(b, i, 0, 1, n).iter().enumerate() {
                        if c > 0 {
                            allowed[i / 64][j / 64] = true;
                        }
                    }
                }
            }
            for (r, row) in allowed.iter().enumerate() {
                for (c, &a) in row.iter().enumerate() {
                    let visited = p.row(r).contains(&(c as i32));
                    assert!(!a || visited, "case {case}: tile ({r}, {c}) holds an allowed pair but is not visited");
                    if batch == 1 {
                        assert!(a || !visited, "case {case}: tile ({r}, {c}) is visited but holds no allowed pair");
                    }
                }
            }
        }
    }
}

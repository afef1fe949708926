//! Packed sequences on the GPU (`docs/semantics.md`, section 16): the tile plans of each
//! batch row's documents, and the per-position document ends the kernels read.
//!
//! A query of document `[s, e)` sees only keys in `[s, e)`. The GPU runs documents with
//! the patterns whose rule is a difference of positions (dense, sliding window), for which
//! the document-relative rule is the global one cut to the document: the kernels cut each
//! query's key interval to `[doc_first(i), doc_last(i)]` ([`position_spans`]), and the plan
//! leaves out the tile pairs that share no document ([`restrict`]). Documents differ per
//! batch row, so a launch with documents has one plan per row ([`per_row`]; the kernels
//! pick row `b`'s with `Params::plan_rows`): no row pays for another row's boundaries.

use super::{IndexMap, TilePlan};
use ringdil_reference::Documents;

/// `plan` (one batch row's, query tiles of `q_tile` rows over key tiles of `k_tile`,
/// identity `map`) without the tile pairs that share no document of the row whose
/// boundary list is `row` (`0 = c_0 <= ... <= c_m = seq_len`).
///
/// Documents are ordered, so the documents the query positions `[q0, q1]` of a tile
/// touch cover exactly the key positions `[start(q0), end(q1))`: the pair may attend iff
/// the key tile's positions `[k0, k1]` meet that span. Exact on contiguous axes (every
/// position from `q0` to `q1` is a row of the tile), sound on strided ones.
pub fn restrict(plan: &TilePlan, map: IndexMap, (q_tile, k_tile): (usize, usize), row: &[usize]) -> TilePlan {
    let IndexMap::Identity { q, k } = map else {
        panic!("documents restrict identity launches only (compact branches are refused by GpuSpec::validate)");
    };
    let span = |tile: usize, size: usize, axis: super::Axis| {
        super::positions(tile * size, (tile + 1) * size, axis).expect("a planned tile lies on its axis")
    };
    TilePlan::build(plan.row_tiles, plan.col_tiles, |r, c| {
        if !plan.contains(r, c) {
            return false;
        }
        let ((q0, q1), (k0, k1)) = (span(r, q_tile, q), span(c, k_tile, k));
        let start = row[row.partition_point(|&x| x <= q0) - 1];
        let end = row[row.partition_point(|&x| x <= q1)];
        k1 >= start && k0 < end
    })
}

/// The forward plan of every batch row of a launch: `plan` restricted to each row's
/// documents, stacked ([`TilePlan::stack`]).
pub fn per_row(
    plan: &TilePlan,
    map: IndexMap,
    tiles: (usize, usize),
    documents: &Documents,
    batch: usize,
    seq_len: usize,
) -> TilePlan {
    TilePlan::stack(&(0..batch).map(|b| restrict(plan, map, tiles, &documents.row(b, seq_len))).collect::<Vec<_>>())
}

/// Per (batch row, position), row-major `[batch, seq_len]`: the first and the last
/// position of the document that holds it (`Params::doc_first`, `doc_last`). Every
/// position lies in exactly one non-empty document; empty documents hold none.
pub fn position_spans(documents: &Documents, batch: usize, seq_len: usize) -> (Vec<i32>, Vec<i32>) {
    let (mut first, mut last) = (Vec::with_capacity(batch * seq_len), Vec::with_capacity(batch * seq_len));
    for b in 0..batch {
        for w in documents.row(b, seq_len).windows(2) {
            let (s, e) = (w[0], w[1]);
            first.extend(std::iter::repeat_n(s as i32, e - s));
            last.extend(std::iter::repeat_n(e as i32 - 1, e - s));
        }
    }
    (first, last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan;
    use crate::spec::GpuPattern;
    use ringdil_reference::random::SplitMix64;
    use ringdil_reference::{Spec, pattern::Dense, pattern::SlidingWindow};

    /// Random boundaries of `n` with some empty and one-token documents.
    fn random_docs(n: usize, rng: &mut SplitMix64) -> Vec<usize> {
        let mut b = vec![0];
        while *b.last().unwrap() < n {
            let len = [0, 1, rng.range(2, 40), rng.range(40, 300)][rng.range(0, 3)];
            b.push((b.last().unwrap() + len).min(n));
        }
        b
    }

    /// Every batch row's plan is sound (every pair the reference allows in that row lies
    /// in a visited tile), and exact for dense (a visited tile holds an allowed pair);
    /// causal or not, any rows. (A window's plan and the documents' are each exact, but a
    /// tile may meet the window and a shared document in different pairs.)
    #[test]
    fn per_row_plans_visit_exactly_the_tiles_documents_allow() {
        let mut rng = SplitMix64::new(5);
        for case in 0..60 {
            let (n, batch, causal) = (rng.range(1, 700), rng.range(1, 3), rng.uniform() < 0.5);
            let docs = Documents::per_row((0..batch).map(|_| random_docs(n, &mut rng)).collect());
            let window = (rng.uniform() < 0.3).then(|| (rng.range(0, 100), rng.range(0, 100)));
            let (gpu, spec) = match window {
                Some((left, right)) => (GpuPattern::Window { left, right }, Spec::new(SlidingWindow { left, right })),
                None => (GpuPattern::Dense, Spec::new(Dense)),
            };
            let spec = spec.causal(causal).documents(docs.clone());
            spec.validate(batch, 1, n).unwrap();
            let map = IndexMap::whole(n);
            let tiles = (64, 64);
            let p = per_row(&plan(&gpu, None, causal, map, tiles), map, tiles, &docs, batch, n);
            assert_eq!(p.batches, batch);
            for b in 0..batch {
                let mut allowed = vec![vec![false; p.col_tiles]; p.row_tiles];
                for i in 0..n {
                    for (j, &c) in spec.key_counts(b, i, 0, 1, n).iter().enumerate() {
                        if c > 0 {
                            allowed[i / 64][j / 64] = true;
                        }
                    }
                }
                for (r, row) in allowed.iter().enumerate() {
                    for (c, &a) in row.iter().enumerate() {
                        let visited = p.contains(b * p.row_tiles + r, c);
                        assert!(!a || visited, "case {case}, row {b}: tile ({r}, {c}) is allowed, not visited");
                        assert!(a || !visited || window.is_some(), "case {case}, row {b}: ({r}, {c}) visited, empty");
                    }
                }
            }
        }
    }

    /// Each position's ends are those of the reference's document (`Documents::document`),
    /// for per-row and flat lists with empty and one-token documents.
    #[test]
    fn position_spans_are_the_reference_documents() {
        let mut rng = SplitMix64::new(9);
        for _ in 0..40 {
            let (n, batch) = (rng.range(1, 300), rng.range(1, 4));
            let rows: Vec<Vec<usize>> = (0..batch).map(|_| random_docs(n, &mut rng)).collect();
            let flat: Vec<usize> = rows
                .iter()
                .enumerate()
                .flat_map(|(b, r)| r[..r.len() - 1].iter().map(move |&c| c + b * n))
                .chain([batch * n])
                .collect();
            for docs in [Documents::per_row(rows.clone()), Documents::flat(flat)] {
                docs.validate(batch, n).unwrap();
                let (first, last) = position_spans(&docs, batch, n);
                assert_eq!((first.len(), last.len()), (batch * n, batch * n));
                for b in 0..batch {
                    for i in 0..n {
                        let d = docs.document(b, i, n);
                        assert_eq!((first[b * n + i], last[b * n + i]), (d.start as i32, d.end as i32 - 1));
                    }
                }
            }
        }
    }
}

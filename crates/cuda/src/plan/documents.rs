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

use super::{IndexMap, TilePlan, Visit};
use ringdil_reference::Documents;

/// `plan` (one batch row's, query tiles of `q_tile` rows over key tiles of `k_tile`,
/// identity `map`) without the tile pairs that share no document of the row whose
/// boundary list is `row` (`0 = c_0 <= ... <= c_m = seq_len`).
///
/// A tile's positions are the lattice `p0, p0 + stride, ..., p1` of its axis (stride 1
/// on a contiguous piece, `P` on a striped rank). The pair is kept iff some document
/// `[s, e)` holds a query position and a key position of the two tiles
/// (`share_document`): exact on every axis, so a rank whose documents all lie in its
/// own tokens (striped ranks with one-token documents included) needs no other rank.
pub fn restrict(plan: &TilePlan, map: &IndexMap, (q_tile, k_tile): (usize, usize), row: &[usize]) -> TilePlan {
    let &IndexMap::Identity { q, k } = map else {
        panic!("documents restrict identity launches only (compact branches are refused by GpuSpec::validate)");
    };
    let span = |tile: usize, size: usize, axis: super::Axis| {
        let (p0, p1) = super::positions(tile * size, (tile + 1) * size, axis).expect("a planned tile lies on its axis");
        Lattice { first: p0, last: p1, stride: axis.stride }
    };
    // A full tile stays marked: the kernels test the documents of a full tile themselves.
    TilePlan::build(plan.row_tiles, plan.col_tiles, |r, c| match plan.visit(r, c) {
        Visit::Skip => Visit::Skip,
        v if share_document(row, span(r, q_tile, q), span(c, k_tile, k)) => v,
        _ => Visit::Skip,
    })
}

/// The positions `first, first + stride, ..., last` of one tile.
#[derive(Debug, Clone, Copy)]
struct Lattice {
    first: usize,
    last: usize,
    stride: usize,
}

impl Lattice {
    /// The first position `>= p` (may lie past `last`).
    fn at_or_after(&self, p: usize) -> usize {
        self.first + p.saturating_sub(self.first).div_ceil(self.stride) * self.stride
    }
}

/// Whether one document of `row` holds a position of `q` and a position of `k`. Walks the
/// documents that hold a query position, in order: from query position `p` in `[s, e)`,
/// the key lattice meets the document iff its first position `>= s` is `< e`; the next
/// document to try holds the first query position `>= e`. At most `min(tile rows,
/// documents)` steps, one when a document covers the query tile. On contiguous tiles the
/// documents of the query positions cover exactly `[start(q0), end(q1))` and the key tile
/// is an interval, so one test decides (O(1) for tiles of many short documents).
fn share_document(row: &[usize], q: Lattice, k: Lattice) -> bool {
    if q.stride == 1 && k.stride == 1 {
        let start = row[row.partition_point(|&x| x <= q.first) - 1];
        let end = row[row.partition_point(|&x| x <= q.last)];
        return k.last >= start && k.first < end;
    }
    let mut p = q.first;
    while p <= q.last {
        let at = row.partition_point(|&x| x <= p);
        let (s, e) = (row[at - 1], row[at]);
        let key = k.at_or_after(s);
        if key <= k.last && key < e {
            return true;
        }
        if k.last < e {
            return false; // later documents lie past every key
        }
        p = q.at_or_after(e);
    }
    false
}

/// The forward plan of every batch row of a launch: `plan` restricted to each row's
/// documents, stacked ([`TilePlan::stack`]).
pub fn per_row(
    plan: &TilePlan,
    map: &IndexMap,
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
            let p = per_row(&plan(&gpu, None, causal, &map, tiles), &map, tiles, &docs, batch, n);
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

    /// On strided axes (striped ranks, any offsets and strides, short and one-token
    /// documents) a tile pair is kept iff one document holds a query and a key position of
    /// it: the transcription enumerates every position pair of every tile pair.
    #[test]
    fn strided_tiles_are_kept_iff_they_share_a_document() {
        use crate::plan::Axis;
        let mut rng = SplitMix64::new(21);
        let mut dropped = 0;
        for case in 0..80 {
            let n = rng.range(1, 1500);
            let row = if rng.uniform() < 0.3 {
                (0..=n).collect() // one-token documents
            } else {
                random_docs(n, &mut rng)
            };
            let axis = |rng: &mut SplitMix64| {
                let (offset, stride) = (rng.range(0, n - 1), rng.range(1, 5));
                Axis { offset, stride, rows: rng.range(1, (n - 1 - offset) / stride + 1) }
            };
            let (qa, ka) = (axis(&mut rng), axis(&mut rng));
            let map = IndexMap::Identity { q: qa, k: ka };
            let tiles = (64, 64);
            let p = restrict(&plan(&GpuPattern::Dense, None, false, &map, tiles), &map, tiles, &row);
            let doc = |t: usize| row.partition_point(|&x| x <= t);
            let rows =
                |a: Axis, tile: usize| (tile * 64..((tile + 1) * 64).min(a.rows)).map(move |i| a.offset + i * a.stride);
            for r in 0..p.row_tiles {
                for c in 0..p.col_tiles {
                    let share = rows(qa, r).any(|i| rows(ka, c).any(|j| doc(i) == doc(j)));
                    assert_eq!(p.contains(r, c), share, "case {case}: tiles ({r}, {c}) of {qa:?} x {ka:?}, {row:?}");
                    dropped += usize::from(!share);
                }
            }
        }
        assert!(dropped > 100, "only {dropped} dropped tile pairs: the test checks too little");
    }
}

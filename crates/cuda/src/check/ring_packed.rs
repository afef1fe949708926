//! The ring check's packed-sequence cases (issue 22, item 2; `docs/semantics.md` 16):
//! documents inside each batch row, with the patterns the GPU runs them with (dense
//! causal, dense non-causal, causal window), on contiguous, zigzag, striped and the
//! work-balanced split ([`balanced_layout`]), compared with the f64 reference exactly as
//! the other ring cases ([`super::ring::compare`]).
//!
//! Documents are long-tailed ([`draw_boundaries`]: empty and one-token documents, short
//! ones and ones of up to 400 tokens), so that with `P = 2..4` ranks of 200..500 tokens
//! some documents cross a rank boundary (their rows travel, packed), others lie inside one
//! rank (nothing travels for them), and tiles meet several documents. The draw is fixed
//! per size (seeded here, not by `--seed`), so a failing case is the same on every run;
//! `--seed` still draws the inputs. Sizes: per-row lists (`d = 64`), a flat list
//! (`cu_seqlens` over the batch, `d = 128`, uneven length), and grouped-query attention
//! (8 query heads over 2 K/V heads, which travel at K/V heads). One more size runs
//! LongNet (64, 1), (256, 2) causal inside the documents of rows packed alike
//! (`crate::spec_documents`): launches over the documents on contiguous pieces and
//! Ulysses' whole-sequence calls, mask tables indexed by global positions on striped
//! pieces.

use super::packed::draw_boundaries;
use super::ring::Case;
use crate::dist::balanced_layout;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::Layout;

/// First cache key of the packed cases (after the unpacked sizes of `super::ring`).
const KEY: usize = 100;

/// How a size's boundary lists are given.
#[derive(Clone, Copy, PartialEq)]
enum Lists {
    PerRow,
    Flat,
    /// Per row, one list for every row (what mask tables need, and striped pieces of
    /// LongNet inside documents).
    Alike,
}

/// One packed size: `(seq, head_dim, batch, heads, kv_heads)`, its lists, and which of
/// [`patterns`] it runs.
type Size = ((usize, usize, usize, usize, usize), Lists, std::ops::Range<usize>);

const SIZES: [Size; 4] = [
    ((1000, 64, 2, 4, 4), Lists::PerRow, 0..3),
    ((777, 128, 2, 4, 4), Lists::Flat, 0..3),
    ((1000, 128, 1, 8, 2), Lists::PerRow, 0..1),
    ((1000, 64, 1, 4, 4), Lists::Alike, 3..4),
];

/// The patterns: those the kernels cut per document, then LongNet (launches over the
/// documents on contiguous pieces, mask tables on striped ones).
fn patterns() -> [(&'static str, GpuSpec); 4] {
    [
        ("packed dense causal", GpuSpec::new(GpuPattern::Dense).causal(true)),
        ("packed dense", GpuSpec::new(GpuPattern::Dense)),
        ("packed window 100/0 causal", GpuSpec::new(GpuPattern::Window { left: 100, right: 0 }).causal(true)),
        (
            "packed LongNet (64,1)(256,2) causal",
            GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(64, 1), (256, 2)]))).causal(true),
        ),
    ]
}

/// The documents of size `i`: lists of `batch` rows of `seq` tokens, given as `lists` says.
fn documents(i: usize, batch: usize, seq: usize, lists: Lists) -> Documents {
    let mut rng = SplitMix64::new(0xD0C5 + i as u64);
    let rows: Vec<Vec<usize>> = match lists {
        Lists::Alike => vec![draw_boundaries(seq, &mut rng); batch],
        _ => (0..batch).map(|_| draw_boundaries(seq, &mut rng)).collect(),
    };
    match lists {
        Lists::PerRow | Lists::Alike => Documents::per_row(rows),
        Lists::Flat => Documents::flat(
            rows.iter()
                .enumerate()
                .flat_map(|(b, r)| r[..r.len() - 1].iter().map(move |&c| c + b * seq))
                .chain([batch * seq])
                .collect(),
        ),
    }
}

/// The layouts of a packed case, named for the log (one rank: the identity only).
fn layouts(documents: &Documents, batch: usize, seq: usize, p: usize) -> Vec<(String, Layout)> {
    if p == 1 {
        return vec![("contiguous".into(), Layout::Contiguous)];
    }
    let balanced = balanced_layout(documents, batch, seq, p).expect("drawn documents are valid");
    let Layout::Boundaries(b) = &balanced else { unreachable!("balanced_layout gives boundaries") };
    vec![
        ("contiguous".into(), Layout::Contiguous),
        ("zigzag".into(), Layout::Zigzag),
        ("striped".into(), Layout::Striped),
        (format!("balanced {b:?}"), balanced),
    ]
}

/// The packed cases for `ranks` per ring and `rings` rings (the batch grows by
/// `rings - 1`, as for the other cases, and the documents are drawn for it).
pub fn cases(ranks: &[usize], rings: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for &p in ranks {
        for (i, ((seq, head_dim, batch, heads, kv_heads), lists, which)) in SIZES.into_iter().enumerate() {
            let batch = batch + rings - 1;
            let docs = documents(i, batch, seq, lists);
            let list = match lists {
                Lists::PerRow => ", per-row lists",
                Lists::Flat => ", flat list",
                Lists::Alike => ", rows packed alike",
            };
            for (layout_name, layout) in layouts(&docs, batch, seq, p) {
                for (j, (name, spec)) in patterns().into_iter().enumerate().filter(|(j, _)| which.contains(j)) {
                    out.push(Case {
                        ranks: p,
                        rings,
                        layout: layout.clone(),
                        layout_name: format!("{layout_name}{list}"),
                        pattern: (name, spec.documents(docs.clone())),
                        batch,
                        heads,
                        kv_heads,
                        head_dim,
                        value_dim: head_dim,
                        seq,
                        key: (KEY + i, j),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::ring::ring_parts;
    use crate::dist::Grid;

    /// Every packed case plans on one ring and on rings side by side (each ring's spec
    /// holds its own rows' documents, `GpuSpec::batch_rows`), and documents cross ranks:
    /// for every ring size, some pieces travel as their documents' rows.
    #[test]
    fn packed_cases_plan_on_every_grid_and_move_document_rows() {
        for (world, rings) in [(2, 1), (3, 1), (4, 1), (4, 2), (2, 2)] {
            let grid = Grid::new(world, rings).unwrap();
            let cases = cases(&[grid.ring_size()], rings);
            assert_eq!(cases.len(), if grid.ring_size() == 1 { 8 } else { 32 });
            let mut packed = 0;
            for c in &cases {
                let parts = ring_parts(c, &grid).unwrap_or_else(|e| panic!("{}: {e}", super::super::ring::describe(c)));
                for plan in parts.iter().map(|p| &p.plan) {
                    let p = plan.ranks();
                    for (dst, src) in (0..p).flat_map(|d| (0..p).filter(move |&s| s != d).map(move |s| (d, s))) {
                        packed += plan
                            .needed_pieces(dst, src)
                            .iter()
                            .filter(|&&kj| plan.kept_rows(dst, src, kj).is_some())
                            .count();
                    }
                }
            }
            assert!(grid.ring_size() == 1 || packed > 0, "W={world} R={rings}: no piece travels packed");
        }
    }
}

//! The transcriptions of `dist_plan.rs`: the layouts and masks as the reference crate's
//! docs state them, written out here so that they share no code with what they check.

use super::{Case, Pat};
use ringdil_reference::pattern::Offset;
use ringdil_reference::ring::Layout;
use std::ops::Range;

/// `parts` consecutive ranges splitting `0..n` as evenly as possible, the first
/// `n mod parts` one token longer (the even split of the `Layout` docs).
fn even_ranges(n: usize, parts: usize) -> Vec<Range<usize>> {
    let mut start = 0;
    (0..parts)
        .map(|k| {
            let len = n / parts + usize::from(k < n % parts);
            start += len;
            start - len..start
        })
        .collect()
}

/// The tokens each rank must hold, in local row order, as the `Layout` docs define them.
pub(super) fn assigned(n: usize, ranks: usize, layout: &Layout) -> Vec<Vec<usize>> {
    match layout {
        Layout::Contiguous => even_ranges(n, ranks).into_iter().map(Iterator::collect).collect(),
        Layout::Zigzag => {
            let c = even_ranges(n, 2 * ranks);
            (0..ranks).map(|i| c[i].clone().chain(c[2 * ranks - 1 - i].clone()).collect()).collect()
        }
        Layout::Striped => (0..ranks).map(|r| (0..n).filter(|t| t % ranks == r).collect()).collect(),
        Layout::Boundaries(b) => (0..ranks).map(|r| (b[r]..b[r + 1]).collect()).collect(),
        Layout::Permuted { order, boundaries } => {
            let spans = match boundaries {
                Some(b) => (0..ranks).map(|r| b[r]..b[r + 1]).collect(),
                None => even_ranges(n, ranks),
            };
            spans.into_iter().map(|s| order[s].to_vec()).collect()
        }
    }
}

/// LongNet offset `o(h)` of a branch: `h mod r`; torchscale's head blocks (heads padded
/// to a multiple of `r`, `r` equal blocks, block `t` keeps offset `t`); or fixed.
pub(super) fn offset(rule: Offset, r: usize, h: usize, heads: usize) -> usize {
    match rule {
        Offset::HeadMod => h % r,
        Offset::HeadBlock => h / ((heads + (r - heads % r) % r) / r),
        Offset::Fixed(o) => o,
    }
}

/// Mask expressions and their rules written out (`h`, `i`, `j`, `n`, `H`), independently
/// of the evaluator: floor division and modulo agree with Rust's on the signs used here
/// (a difference `i - j` only meets `% 5 == 0`, which truncation and floor decide alike).
#[allow(clippy::type_complexity)]
pub(super) const EXPRESSIONS: [(&str, fn(usize, i64, i64, i64, i64) -> bool); 5] = [
    ("abs(q - k) <= 50 || k < 3", |_, i, j, _, _| (i - j).abs() <= 50 || j < 3),
    ("q / 64 == k / 64 || (q - k) % 5 == 0", |_, i, j, _, _| i / 64 == j / 64 || (i - j) % 5 == 0),
    ("if h < H / 2 then q - k < 90 && k <= q + 5 else k >= n - 70", |h, i, j, n, heads| {
        if (h as i64) < heads / 2 { i - j < 90 && j <= i + 5 } else { j >= n - 70 }
    }),
    ("(q + h) % 3 == k % 3", |h, i, j, _, _| (i + h as i64) % 3 == j % 3),
    // LongNet branch (40, 3) with offset (h + 1) mod 3, which runs as that branch
    // (compact launches; its K/V pieces travel as kept rows): [`LONGNET_EXPRESSION`].
    ("q / 40 == k / 40 && q % 40 % 3 == (h + 1) % 3 && k % 40 % 3 == (h + 1) % 3", |h, i, j, _, _| {
        let o = (h as i64 + 1) % 3;
        i / 40 == j / 40 && i % 40 % 3 == o && j % 40 % 3 == o
    }),
];

/// A mask of [`EXPRESSIONS`] that is one LongNet branch.
pub(super) struct LongnetExpression {
    pub index: usize,
    pub branch: (usize, usize),
    pub offset: fn(usize) -> usize,
}

/// The mask of [`EXPRESSIONS`] that is LongNet branch (40, 3) with offset `(h + 1) mod 3`.
pub(super) const LONGNET_EXPRESSION: LongnetExpression =
    LongnetExpression { index: 4, branch: (40, 3), offset: |h| (h + 1) % 3 };

/// Whether LongNet branch `(w, r)` keeps position `t` in a head of offset `o`: segments
/// `[s w, min((s + 1) w, n))`, kept positions `start + o + k r`.
pub(super) fn branch_keeps(w: usize, r: usize, o: usize, t: usize) -> bool {
    (t - t / w * w) % r == o
}

/// Rotating-offset `dilated_expr` branches `(w, r, c)`: in segment `s`, head `h` keeps
/// residue `(h + c s) mod r`. `check::tables::rotating_softmax`'s file, and
/// [`Pat::Rotating`]'s (no dilation 1, so that its K/V pieces travel as kept rows).
pub(super) const TABLE_PARTS_BRANCHES: [(usize, usize, usize); 3] = [(32, 1, 0), (96, 3, 1), (192, 4, 2)];
pub(super) const ROTATING_BRANCHES: [(usize, usize, usize); 2] = [(48, 2, 1), (96, 4, 3)];

/// The count of key `j` for query `i` in head `h` under rotating branches (counts add).
fn rotating_count(branches: &[(usize, usize, usize)], h: usize, i: usize, j: usize) -> u32 {
    branches
        .iter()
        .map(|&(w, r, per_segment)| {
            let s = i / w;
            let o = (h + per_segment * s) % r;
            u32::from(j / w == s && branch_keeps(w, r, o, i) && branch_keeps(w, r, o, j))
        })
        .sum()
}

/// The multiplicity of key `j` for query `i` in head `h` under the documented rules of
/// the pattern alone (no causality, no padding).
fn pattern_count(case: &Case, h: usize, i: usize, j: usize) -> u32 {
    match &case.pat {
        Pat::Dense => 1,
        Pat::Window { left, right } => u32::from(j + left >= i && j <= i + right),
        Pat::BlockSparse(p) => {
            let (a, c) = (i / p.block, j / p.block);
            let dist = a.abs_diff(c);
            let global = i < p.global_tokens || j < p.global_tokens;
            let local = p.local_radius.is_some_and(|w| dist <= w);
            let strided = p.dilated_stride.is_some_and(|s| dist % s == 0);
            let user = p.block_mask.as_ref().is_some_and(|m| m[a][c]);
            u32::from(global || local || strided || user)
        }
        Pat::Dilated(bs) => bs
            .iter()
            .map(|&(w, r, rule)| {
                let o = offset(rule, r, h, case.heads);
                u32::from(i / w == j / w && branch_keeps(w, r, o, i) && branch_keeps(w, r, o, j))
            })
            .sum(),
        Pat::Expr(e) => u32::from(EXPRESSIONS[*e].1(h, i as i64, j as i64, case.n as i64, case.heads as i64)),
        // Strided: the `stride` most recent keys and every `stride`-th before them.
        Pat::Table(stride) => u32::from(j <= i && ((i - j) < *stride || (i - j) % stride == 0)),
        Pat::TableParts => rotating_count(&TABLE_PARTS_BRANCHES, h, i, j),
        Pat::Rotating => rotating_count(&ROTATING_BRANCHES, h, i, j),
    }
}

/// Whether query `i` attends key `j` in head `h` of batch row `b`: the pattern's count,
/// cut by causality (`j <= i`) and key padding (`j < key_lengths[b]`).
pub(super) fn attends(case: &Case, b: usize, h: usize, i: usize, j: usize) -> bool {
    let padded = case.key_lengths.as_ref().is_some_and(|l| j >= l[b]);
    if padded || (case.causal && j > i) {
        return false;
    }
    pattern_count(case, h, i, j) > 0
}

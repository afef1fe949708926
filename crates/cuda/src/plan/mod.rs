//! Tile plans: which key tiles each query tile visits (and the transpose for dK/dV).
//!
//! The kernels evaluate the mask per element from global positions; the plan decides, per
//! tile, whether the tile can hold *any* allowed pair. A tile the plan leaves out is
//! never loaded nor multiplied: that is how a causal, windowed, block-sparse or dilated
//! pattern costs its share of the dense work. The plan must be *sound* (every allowed
//! pair lies in a planned tile; the tests check it against the reference's key sets) and
//! is exact for dense and causal masks on any [`Axis`], and for windows on contiguous
//! ones. It does not depend on the head. One plan serves every batch row, except with
//! packed sequences ([`documents`]: one plan per row); key padding, which depends on the
//! batch row, is cut in the kernel (the padded tail of a plan row).
//!
//! A visited tile is also marked *full* ([`Visit::Full`]) when the planner proves every
//! pair of it allowed, for every head of the launch and under causality: the kernels then
//! skip the per-element mask there (what remains is the launch's end, key padding and
//! documents, checked in the kernel). Inside a window or a block-sparse band most visited
//! tiles are full, and a mask expression's per-element test is its most expensive part.

use crate::spec::GpuPattern;
use std::sync::Arc;

pub mod documents;
pub mod expression;
pub mod table;
pub mod union;
use ringdil_reference::pattern::{BlockSparse, Branch};

/// One side (queries or keys) of a launch: `rows` tensor rows at the global positions
/// `offset + i * stride`. Stride 1 is a contiguous chunk (a whole sequence, a ring
/// piece); stride `P` with offset `r` is rank `r`'s rows of a striped layout, so the
/// kernels see *true* positions for every layout and every mask stays exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Axis {
    pub offset: usize,
    pub stride: usize,
    pub rows: usize,
}

impl Axis {
    /// `rows` consecutive positions from `offset`.
    pub fn contiguous(offset: usize, rows: usize) -> Self {
        Axis { offset, stride: 1, rows }
    }

    /// Global position of the last row (`rows >= 1`).
    fn last(&self) -> usize {
        self.offset + (self.rows - 1) * self.stride
    }
}

/// How a launch index becomes a row of the tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexMap {
    /// Index `c` is row `c`, at global position `offset + c * stride` of its axis.
    Identity { q: Axis, k: Axis },
    /// One dilated branch `(w, r)` on contiguous axes, compacted. Index `c` is the global
    /// compact index `G = c + base` (`base = (offset div w) * m`, `m = ceil(w / r)`):
    /// kept position `t = G mod m` of segment `s = G div m`, i.e. position
    /// `s*w + o(h) + t*r`; a *hole* when that lies past the segment's end or outside the
    /// axis (a chunk that starts or ends inside a segment). Only kept rows are visited, so
    /// a branch costs `rows_q * w / r^2` per head on a whole sequence *and* on a ring
    /// step, instead of the `rows_q * w` of evaluating its mask in place.
    ///
    /// With `starts` (a launch over packed documents, whole sequences only: both axes
    /// from position 0), segment `s` is positions `starts[s] .. starts[s + 1]` instead of
    /// `s*w .. (s+1)*w`: segments of at most `w` positions that restart at each
    /// document's start (`crate::spec_documents::segment_starts`). Each still has `m`
    /// indices, the ones past its kept positions holes.
    Compact { segment: usize, dilation: usize, q: Axis, k: Axis, starts: Option<Arc<[usize]>> },
}

impl IndexMap {
    /// Both sides of a self-attention over a whole sequence of `n` tokens.
    pub fn whole(n: usize) -> Self {
        IndexMap::Identity { q: Axis::contiguous(0, n), k: Axis::contiguous(0, n) }
    }

    /// The query and key axes.
    pub fn axes(&self) -> (Axis, Axis) {
        match *self {
            IndexMap::Identity { q, k } | IndexMap::Compact { q, k, .. } => (q, k),
        }
    }

    /// Launch indices on the query and key side.
    pub fn extents(&self) -> (usize, usize) {
        match *self {
            IndexMap::Identity { q, k } => (q.rows, k.rows),
            // The segments from the axis's first position's to its last's, m indices each.
            IndexMap::Compact { segment, dilation, q, k, .. } => {
                let ext =
                    |a: Axis| (self.segment_of(a.last()) - self.segment_of(a.offset) + 1) * segment.div_ceil(dilation);
                (ext(q), ext(k))
            }
        }
    }

    /// Global compact index of launch index 0 on the query and key side (0 for identity).
    pub fn bases(&self) -> (usize, usize) {
        match *self {
            IndexMap::Identity { .. } => (0, 0),
            IndexMap::Compact { segment, dilation, q, k, .. } => {
                let base = |a: Axis| self.segment_of(a.offset) * segment.div_ceil(dilation);
                (base(q), base(k))
            }
        }
    }

    /// The launch index whose row is global position `pos` on `side`, for a head whose
    /// branch offset is `o` (read by compact maps only): the inverse of the kernels'
    /// `row_of` / `pos_of`. None when the launch holds no such row: outside the axis, off
    /// its stride, or (compact) not kept by the branch for that head.
    pub fn index_of(&self, side: Side, pos: usize, o: usize) -> Option<usize> {
        let ((q, k), (qb, kb)) = (self.axes(), self.bases());
        let (axis, base) = match side {
            Side::Query => (q, qb),
            Side::Key => (k, kb),
        };
        let i = pos.checked_sub(axis.offset)?;
        if i % axis.stride != 0 || i / axis.stride >= axis.rows {
            return None;
        }
        match *self {
            IndexMap::Identity { .. } => Some(i / axis.stride),
            IndexMap::Compact { segment, dilation, .. } => {
                let s = self.segment_of(pos);
                let t = (pos - self.segment_bounds(s).0).checked_sub(o)?;
                (t % dilation == 0).then(|| s * segment.div_ceil(dilation) + t / dilation - base)
            }
        }
    }

    /// The compact segment holding position `pos` (compact maps).
    fn segment_of(&self, pos: usize) -> usize {
        match self {
            IndexMap::Compact { starts: Some(s), .. } => s.partition_point(|&x| x <= pos) - 1,
            IndexMap::Compact { segment, .. } => pos / segment,
            IndexMap::Identity { .. } => unreachable!("an identity map has no segments"),
        }
    }

    /// The positions `first..end` of compact segment `s` (compact maps): `s*w..(s+1)*w`,
    /// or the segment table's.
    fn segment_bounds(&self, s: usize) -> (usize, usize) {
        match self {
            IndexMap::Compact { starts: Some(t), .. } => (t[s], t[s + 1]),
            IndexMap::Compact { segment, .. } => (s * segment, (s + 1) * segment),
            IndexMap::Identity { .. } => unreachable!("an identity map has no segments"),
        }
    }
}

/// The two sides of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Query,
    Key,
}

/// What a tile pair holds, as far as the planner can tell: no allowed pair (not
/// visited), some (visited, masked per element), or every pair (visited unmasked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    Skip,
    Partial,
    Full,
}

impl From<bool> for Visit {
    /// A planner that only decides "may hold a pair": visited tiles are partial.
    fn from(visited: bool) -> Self {
        if visited { Visit::Partial } else { Visit::Skip }
    }
}

/// A CSR list: for each row tile, the ascending column tiles it visits; one list for
/// every batch row, or one per batch row (`batches`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TilePlan {
    pub row_tiles: usize,
    pub col_tiles: usize,
    /// 1: the plan serves every batch row; else batch row `b` has plan rows
    /// `b * row_tiles .. (b + 1) * row_tiles` (the kernels' `plan_row`).
    pub batches: usize,
    /// `ptr[r]..ptr[r + 1]` indexes `idx` (i32: what the kernels read).
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
    /// Per entry of `idx`: 1 where every pair of the tile pair is allowed ([`Visit::Full`]).
    pub full: Vec<u8>,
}

impl TilePlan {
    /// The plan of `visit(row tile, column tile)`.
    pub(crate) fn build<V: Into<Visit>>(
        row_tiles: usize,
        col_tiles: usize,
        visit: impl Fn(usize, usize) -> V + Sync,
    ) -> Self {
        Self::build_rows(row_tiles, col_tiles, |r, out| {
            out.extend((0..col_tiles).map(|c| (c as i32, visit(r, c).into())).filter(|e| e.1 != Visit::Skip))
        })
    }

    /// The plan of `visit(query span, key span)` under an identity map: the inclusive
    /// global positions of each tile pair's rows ([`positions`]); a tile past its axis is
    /// not visited.
    pub(crate) fn build_spans<V: Into<Visit>>(
        map: &IndexMap,
        (q_tile, k_tile): (usize, usize),
        visit: impl Fn((usize, usize), (usize, usize)) -> V + Sync,
    ) -> Self {
        let ((nq, nk), (qa, ka)) = (map.extents(), map.axes());
        Self::build(nq.div_ceil(q_tile), nk.div_ceil(k_tile), |r, c| {
            match (positions(r * q_tile, (r + 1) * q_tile, qa), positions(c * k_tile, (c + 1) * k_tile, ka)) {
                (Some(q), Some(k)) => visit(q, k).into(),
                _ => Visit::Skip,
            }
        })
    }

    /// The plan of `visit(query span, key span)` like [`Self::build_spans`], asked of
    /// runs of key tiles: a run `visit` calls empty (or full) is so for each tile in it
    /// (the run's span is a superset of each tile's), and an undecided run splits in
    /// halves down to single tiles, whose result is the tile's own. For a planner whose
    /// `visit` decides a whole span at once (a window or a block band over `c` key tiles)
    /// a query tile costs about `2 log2 c` calls instead of `c`.
    pub(crate) fn build_runs(
        map: &IndexMap,
        (q_tile, k_tile): (usize, usize),
        visit: impl Fn((usize, usize), (usize, usize)) -> Visit + Sync,
    ) -> Self {
        let ((nq, nk), (qa, ka)) = (map.extents(), map.axes());
        let cols = nk.div_ceil(k_tile);
        // Appends the visited tiles of run c0..c1 (non-empty) of the query span q.
        fn split(
            visit: &impl Fn((usize, usize), (usize, usize)) -> Visit,
            q: (usize, usize),
            (c0, c1): (usize, usize),
            (k_tile, ka): (usize, Axis),
            out: &mut Vec<(i32, Visit)>,
        ) {
            let Some(k) = positions(c0 * k_tile, c1 * k_tile, ka) else { return };
            match visit(q, k) {
                Visit::Skip => {}
                Visit::Full => out.extend((c0..c1).map(|c| (c as i32, Visit::Full))),
                Visit::Partial if c1 - c0 == 1 => out.push((c0 as i32, Visit::Partial)),
                Visit::Partial => {
                    let mid = c0 + (c1 - c0) / 2;
                    split(visit, q, (c0, mid), (k_tile, ka), out);
                    split(visit, q, (mid, c1), (k_tile, ka), out);
                }
            }
        }
        Self::build_rows(nq.div_ceil(q_tile), cols, |r, out| {
            if let (Some(q), true) = (positions(r * q_tile, (r + 1) * q_tile, qa), cols > 0) {
                split(&visit, q, (0, cols), (k_tile, ka), out)
            }
        })
    }

    /// The plan whose row `r` is what `row(r, out)` appends to `out`: ascending column
    /// tiles, each visited (not `Skip`). Rows are made in parallel (a mask expression's
    /// plan over 131072 positions has thousands of rows).
    pub(crate) fn build_rows(
        row_tiles: usize,
        col_tiles: usize,
        row: impl Fn(usize, &mut Vec<(i32, Visit)>) + Sync,
    ) -> Self {
        use rayon::prelude::*;
        let rows: Vec<Vec<(i32, Visit)>> = (0..row_tiles)
            .into_par_iter()
            .map(|r| {
                let mut out = Vec::new();
                row(r, &mut out);
                out
            })
            .collect();
        let mut ptr = Vec::with_capacity(row_tiles + 1);
        ptr.push(0);
        let (mut idx, mut full) = (Vec::new(), Vec::new());
        for row in rows {
            debug_assert!(row.windows(2).all(|w| w[0].0 < w[1].0) && row.iter().all(|e| e.1 != Visit::Skip));
            idx.extend(row.iter().map(|e| e.0));
            full.extend(row.iter().map(|e| (e.1 == Visit::Full) as u8));
            ptr.push(idx.len() as i32);
        }
        TilePlan { row_tiles, col_tiles, batches: 1, ptr, idx, full }
    }

    /// One plan per batch row, row `b` from `plans[b]` (single-row plans of one size).
    pub fn stack(plans: &[TilePlan]) -> TilePlan {
        let (row_tiles, col_tiles) = (plans[0].row_tiles, plans[0].col_tiles);
        let (mut ptr, mut idx, mut full) = (vec![0], Vec::new(), Vec::new());
        for p in plans {
            assert!(p.batches == 1 && (p.row_tiles, p.col_tiles) == (row_tiles, col_tiles), "stack: same sizes");
            ptr.extend(p.ptr[1..].iter().map(|&x| x + idx.len() as i32));
            idx.extend_from_slice(&p.idx);
            full.extend_from_slice(&p.full);
        }
        TilePlan { row_tiles, col_tiles, batches: plans.len(), ptr, idx, full }
    }

    /// The same tiles seen from the columns (key tile -> query tiles), for dK/dV; per
    /// batch row for a per-row plan. Full marks travel with their tiles.
    pub fn transpose(&self) -> TilePlan {
        let mut ptr = vec![0];
        let (mut idx, mut full) = (Vec::with_capacity(self.idx.len()), Vec::with_capacity(self.idx.len()));
        for b in 0..self.batches {
            let mut cols: Vec<Vec<(i32, u8)>> = vec![Vec::new(); self.col_tiles];
            for r in 0..self.row_tiles {
                let row = b * self.row_tiles + r;
                let at = self.ptr[row] as usize;
                for (i, &c) in self.row(row).iter().enumerate() {
                    cols[c as usize].push((r as i32, self.full[at + i]));
                }
            }
            for c in cols {
                idx.extend(c.iter().map(|e| e.0));
                full.extend(c.iter().map(|e| e.1));
                ptr.push(idx.len() as i32);
            }
        }
        TilePlan { row_tiles: self.col_tiles, col_tiles: self.row_tiles, batches: self.batches, ptr, idx, full }
    }

    /// How row tile `r` visits column tile `c`.
    pub fn visit(&self, r: usize, c: usize) -> Visit {
        match self.row(r).binary_search(&(c as i32)) {
            Ok(i) if self.full[self.ptr[r] as usize + i] == 1 => Visit::Full,
            Ok(_) => Visit::Partial,
            Err(_) => Visit::Skip,
        }
    }

    /// `Params::plan_rows`: 0 for a plan that serves every batch row, else its rows per
    /// batch row.
    pub fn rows_per_batch(&self) -> i32 {
        if self.batches > 1 { self.row_tiles as i32 } else { 0 }
    }

    pub fn row(&self, r: usize) -> &[i32] {
        &self.idx[self.ptr[r] as usize..self.ptr[r + 1] as usize]
    }

    pub fn contains(&self, r: usize, c: usize) -> bool {
        self.row(r).binary_search(&(c as i32)).is_ok()
    }

    /// Tiles computed (over every batch row of a per-row plan); `row_tiles * col_tiles`
    /// for a dense non-causal plan.
    pub fn visits(&self) -> usize {
        self.idx.len()
    }
}

/// Inclusive global position range of the rows of launch indices `a..b` (clipped to the
/// axis), or None past its end.
pub(crate) fn positions(a: usize, b: usize, axis: Axis) -> Option<(usize, usize)> {
    (a < axis.rows).then(|| (axis.offset + a * axis.stride, axis.offset + (b.min(axis.rows) - 1) * axis.stride))
}

/// The positions that compact indices `g0..=g1` (global compact indices) can take inside
/// segment `s` (positions `first..end`, `m` indices), over every head offset `o in 0..r`,
/// clipped to the segment and the axis: `[first + t0*r, first + (r-1) + t1*r]`. None when
/// the indices miss `s` or are all holes.
fn compact_span(
    (m, dilation): (usize, usize),
    (s, (first, end)): (usize, (usize, usize)),
    (g0, g1): (usize, usize),
    axis: Axis,
) -> Option<(usize, usize)> {
    let (t0, t1) = (g0.max(s * m).checked_sub(s * m)?, g1.min(s * m + m - 1).checked_sub(s * m)?);
    if t0 > t1 {
        return None;
    }
    let lo = (first + t0 * dilation).max(axis.offset);
    let hi = (first + dilation - 1 + t1 * dilation).min(end.checked_sub(1)?).min(axis.last());
    (lo <= hi).then_some((lo, hi))
}

/// The tile plan of one launch under `map`: query indices in tiles of `q_tile`, key
/// indices in tiles of `k_tile` (the extents of `map`). `pattern` is the launch's pattern
/// (for a dilated pattern, `branch` is the branch).
pub fn plan(
    pattern: &GpuPattern,
    branch: Option<&Branch>,
    causal: bool,
    map: &IndexMap,
    (q_tile, k_tile): (usize, usize),
) -> TilePlan {
    match *map {
        // With (causal) some key position at or before some query position.
        IndexMap::Compact { .. } => {
            build_compact(map, (q_tile, k_tile), |(_, q_hi), (k_lo, _)| !causal || k_lo <= q_hi)
        }
        // Dense, window and dilated spans are decided in O(1) for any run of tiles, so a
        // query tile costs about `2 log2 c` of them (`build_runs`) instead of `c`; the
        // block rule's cost grows with the blocks a span holds, so it is asked per tile.
        IndexMap::Identity { .. } if matches!(pattern, GpuPattern::BlockSparse(_)) => {
            TilePlan::build_spans(map, (q_tile, k_tile), |q, k| ranges_visit(pattern, branch, causal, q, k))
        }
        IndexMap::Identity { .. } => {
            TilePlan::build_runs(map, (q_tile, k_tile), |q, k| ranges_visit(pattern, branch, causal, q, k))
        }
    }
}

/// The plan of a compact launch (`map` compact): a tile pair can hold a kept pair only
/// inside a segment both tiles reach, so it is visited when, in some such segment,
/// `sees(query positions, key positions)` holds of the inclusive position spans its tiles
/// may hold there (over every head offset, [`compact_span`]).
pub(crate) fn build_compact(
    map: &IndexMap,
    (q_tile, k_tile): (usize, usize),
    sees: impl Fn((usize, usize), (usize, usize)) -> bool + Sync,
) -> TilePlan {
    let IndexMap::Compact { segment, dilation, q: qa, k: ka, .. } = *map else {
        unreachable!("build_compact takes a compact map")
    };
    let ((nq, nk), (qb, kb)) = (map.extents(), map.bases());
    let m = segment.div_ceil(dilation);
    TilePlan::build(nq.div_ceil(q_tile), nk.div_ceil(k_tile), |r, c| {
        let q = (qb + r * q_tile, qb + ((r + 1) * q_tile).min(nq) - 1);
        let k = (kb + c * k_tile, kb + ((c + 1) * k_tile).min(nk) - 1);
        ((q.0 / m).max(k.0 / m)..=(q.1 / m).min(k.1 / m)).any(|s| {
            let seg = (s, map.segment_bounds(s));
            match (compact_span((m, dilation), seg, q, qa), compact_span((m, dilation), seg, k, ka)) {
                (Some(qs), Some(ks)) => sees(qs, ks),
                _ => false,
            }
        })
    })
}

/// Every pair of query range `q` and key range `k` (inclusive) passes causality: the last
/// key is at or before the first query.
pub(crate) fn causal_full(causal: bool, q: (usize, usize), k: (usize, usize)) -> bool {
    !causal || k.1 <= q.0
}

/// How query positions `q` (inclusive) see key positions `k`: no pair, some, or (as far
/// as the interval test decides) every pair.
fn ranges_visit(
    pattern: &GpuPattern,
    branch: Option<&Branch>,
    causal: bool,
    q: (usize, usize),
    k: (usize, usize),
) -> Visit {
    if causal && k.0 > q.1 {
        return Visit::Skip;
    }
    let full = |all: bool| if all && causal_full(causal, q, k) { Visit::Full } else { Visit::Partial };
    match pattern {
        GpuPattern::Dense => full(true),
        // Keys seen by the tile's queries form the interval [q.0 - left, q.1 + right']
        // (right' = 0 when causal): exact. Every pair when the nearest query's window
        // reaches the farthest key on both sides: k.0 >= q.1 - left and k.1 <= q.0 + right.
        GpuPattern::Window { left, right } => {
            let hi = if causal { q.1 } else { q.1.saturating_add(*right) };
            if k.1.saturating_add(*left) < q.0 || k.0 > hi {
                return Visit::Skip;
            }
            full(k.0.saturating_add(*left) >= q.1 && k.1 <= q.0.saturating_add(*right))
        }
        GpuPattern::BlockSparse(bs) if block_sparse_may_attend(bs, causal, q, k) => full(block_sparse_all(bs, q, k)),
        GpuPattern::BlockSparse(_) => Visit::Skip,
        // Same segment needed; residues are left to the element mask. A branch of
        // dilation 1 keeps every position of its segments (a compact `dilated_expr`
        // branch has no extra mask): a tile pair inside one segment holds only allowed
        // pairs.
        GpuPattern::Dilated(_) | GpuPattern::DilatedExpr(_) | GpuPattern::DilatedInDocuments(..) => {
            let b = branch.expect("a dilated launch names its branch");
            let w = b.segment;
            if (q.0 / w).max(k.0 / w) > (q.1 / w).min(k.1 / w) {
                return Visit::Skip;
            }
            // Past the test above, both spans inside one segment each means the same one.
            full(b.dilation == 1 && q.0 / w == q.1 / w && k.0 / w == k.1 / w)
        }
        // Expression and table launches are planned by `expression::plan` and
        // `table::plan`, which know the heads and the sequence length; without them every
        // tile is kept (sound).
        GpuPattern::Expr(_) | GpuPattern::Table(_) => Visit::Partial,
    }
}

/// Block pairs one tile pair may span before [`block_sparse_all`] stops looking (and
/// answers "not all": the element mask stays exact).
const BLOCK_PAIRS_CHECKED: usize = 64;

/// Does the block rule keep every pair of `q` x `k`? A pair with a global token is
/// always kept; otherwise every block pair the ranges span must be kept (conservative
/// where a range mixes global and plain positions).
fn block_sparse_all(bs: &BlockSparse, q: (usize, usize), k: (usize, usize)) -> bool {
    if q.1 < bs.global_tokens || k.1 < bs.global_tokens {
        return true;
    }
    let b = bs.block;
    let (qb, kb) = ((q.0 / b)..=(q.1 / b), (k.0 / b)..=(k.1 / b));
    qb.clone().count() * kb.clone().count() <= BLOCK_PAIRS_CHECKED
        && qb.into_iter().all(|qa| kb.clone().all(|ka| bs.block_allowed(qa, ka)))
}

fn block_sparse_may_attend(bs: &BlockSparse, causal: bool, q: (usize, usize), k: (usize, usize)) -> bool {
    if q.0 < bs.global_tokens || k.0 < bs.global_tokens {
        return true;
    }
    let b = bs.block;
    ((q.0 / b)..=(q.1 / b)).any(|qa| {
        let q_hi = q.1.min(qa * b + b - 1);
        ((k.0 / b)..=(k.1 / b)).any(|kb| (!causal || kb * b <= q_hi) && bs.block_allowed(qa, kb))
    })
}

#[cfg(test)]
mod tests;

//! Tile plans: which key tiles each query tile visits (and the transpose for dK/dV).
//!
//! The kernels evaluate the mask per element from global positions; the plan decides, per
//! tile, whether the tile can hold *any* allowed pair. A tile the plan leaves out is
//! never loaded nor multiplied: that is how a causal, windowed, block-sparse or dilated
//! pattern costs its share of the dense work. The plan must be *sound* (every allowed
//! pair lies in a planned tile; the tests check it against the reference's key sets) and
//! is exact for dense and causal masks on any [`Axis`], and for windows on contiguous
//! ones. It does not depend on the batch row or the head; key padding, which depends on
//! the batch row, is cut in the kernel (the padded tail of a plan row).

use crate::spec::GpuPattern;
use ringdil_reference::pattern::{BlockSparse, Branch};

pub use crate::family::{FWD_Q_TILE, TILE};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    Compact { segment: usize, dilation: usize, q: Axis, k: Axis },
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

    /// Compact rows per segment and the first segment an axis touches.
    fn compact_seg(segment: usize, dilation: usize, a: Axis) -> (usize, usize) {
        (segment.div_ceil(dilation), a.offset / segment)
    }

    /// Launch indices on the query and key side.
    pub fn extents(&self) -> (usize, usize) {
        match *self {
            IndexMap::Identity { q, k } => (q.rows, k.rows),
            IndexMap::Compact { segment, dilation, q, k } => {
                let ext = |a: Axis| {
                    let (m, first) = Self::compact_seg(segment, dilation, a);
                    (a.last() / segment - first + 1) * m
                };
                (ext(q), ext(k))
            }
        }
    }

    /// Global compact index of launch index 0 on the query and key side (0 for identity).
    pub fn bases(&self) -> (usize, usize) {
        match *self {
            IndexMap::Identity { .. } => (0, 0),
            IndexMap::Compact { segment, dilation, q, k } => {
                let base = |a: Axis| {
                    let (m, first) = Self::compact_seg(segment, dilation, a);
                    first * m
                };
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
                let t = (pos % segment).checked_sub(o)?;
                (t % dilation == 0).then(|| (pos / segment) * segment.div_ceil(dilation) + t / dilation - base)
            }
        }
    }
}

/// The two sides of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Query,
    Key,
}

/// A CSR list: for each row tile, the ascending column tiles it visits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TilePlan {
    pub row_tiles: usize,
    pub col_tiles: usize,
    /// `ptr[r]..ptr[r + 1]` indexes `idx` (i32: what the kernels read).
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
}

impl TilePlan {
    fn build(row_tiles: usize, col_tiles: usize, visit: impl Fn(usize, usize) -> bool) -> Self {
        let mut ptr = Vec::with_capacity(row_tiles + 1);
        let mut idx = Vec::new();
        ptr.push(0);
        for r in 0..row_tiles {
            idx.extend((0..col_tiles).filter(|&c| visit(r, c)).map(|c| c as i32));
            ptr.push(idx.len() as i32);
        }
        TilePlan { row_tiles, col_tiles, ptr, idx }
    }

    /// The same tiles seen from the columns (key tile -> query tiles), for dK/dV.
    pub fn transpose(&self) -> TilePlan {
        let mut cols: Vec<Vec<i32>> = vec![Vec::new(); self.col_tiles];
        for r in 0..self.row_tiles {
            for &c in self.row(r) {
                cols[c as usize].push(r as i32);
            }
        }
        let mut ptr = vec![0];
        let mut idx = Vec::with_capacity(self.idx.len());
        for c in cols {
            idx.extend(c);
            ptr.push(idx.len() as i32);
        }
        TilePlan { row_tiles: self.col_tiles, col_tiles: self.row_tiles, ptr, idx }
    }

    pub fn row(&self, r: usize) -> &[i32] {
        &self.idx[self.ptr[r] as usize..self.ptr[r + 1] as usize]
    }

    pub fn contains(&self, r: usize, c: usize) -> bool {
        self.row(r).binary_search(&(c as i32)).is_ok()
    }

    /// Tiles computed; `row_tiles * col_tiles` for a dense non-causal plan.
    pub fn visits(&self) -> usize {
        self.idx.len()
    }
}

/// Inclusive global position range of the rows of launch indices `a..b` (clipped to the
/// axis), or None past its end.
fn positions(a: usize, b: usize, axis: Axis) -> Option<(usize, usize)> {
    (a < axis.rows).then(|| (axis.offset + a * axis.stride, axis.offset + (b.min(axis.rows) - 1) * axis.stride))
}

/// The positions that compact indices `g0..=g1` (global compact indices) can take inside
/// segment `s`, over every head offset `o in 0..r`, clipped to the segment and the axis:
/// `[s*w + t0*r, s*w + (r-1) + t1*r]`. None when the indices miss `s` or are all holes.
fn compact_span(
    (segment, dilation): (usize, usize),
    s: usize,
    (g0, g1): (usize, usize),
    axis: Axis,
) -> Option<(usize, usize)> {
    let m = segment.div_ceil(dilation);
    let (t0, t1) = (g0.max(s * m).checked_sub(s * m)?, g1.min(s * m + m - 1).checked_sub(s * m)?);
    if t0 > t1 {
        return None;
    }
    let lo = (s * segment + t0 * dilation).max(axis.offset);
    let hi = (s * segment + dilation - 1 + t1 * dilation).min(s * segment + segment - 1).min(axis.last());
    (lo <= hi).then_some((lo, hi))
}

/// The tile plan of one launch under `map`: query indices in tiles of `q_tile`, key
/// indices in tiles of `k_tile` (the extents of `map`). `pattern` is the launch's pattern
/// (for a dilated pattern, `branch` is the branch).
pub fn plan(
    pattern: &GpuPattern,
    branch: Option<&Branch>,
    causal: bool,
    map: IndexMap,
    (q_tile, k_tile): (usize, usize),
) -> TilePlan {
    let (nq, nk) = map.extents();
    let (qa, ka) = map.axes();
    let (rt, ct) = (nq.div_ceil(q_tile), nk.div_ceil(k_tile));
    match map {
        IndexMap::Compact { segment, dilation, .. } => {
            // A tile pair can hold a kept pair only inside a segment both tiles reach,
            // with (causal) some key position at or before some query position there.
            let m = segment.div_ceil(dilation);
            let (qb, kb) = map.bases();
            TilePlan::build(rt, ct, |r, c| {
                let q = (qb + r * q_tile, qb + ((r + 1) * q_tile).min(nq) - 1);
                let k = (kb + c * k_tile, kb + ((c + 1) * k_tile).min(nk) - 1);
                ((q.0 / m).max(k.0 / m)..=(q.1 / m).min(k.1 / m)).any(|s| {
                    match (compact_span((segment, dilation), s, q, qa), compact_span((segment, dilation), s, k, ka)) {
                        (Some((_, q_hi)), Some((k_lo, _))) => !causal || k_lo <= q_hi,
                        _ => false,
                    }
                })
            })
        }
        IndexMap::Identity { .. } => TilePlan::build(rt, ct, |r, c| {
            let (Some(q), Some(k)) =
                (positions(r * q_tile, (r + 1) * q_tile, qa), positions(c * k_tile, (c + 1) * k_tile, ka))
            else {
                return false;
            };
            ranges_may_attend(pattern, branch, causal, q, k)
        }),
    }
}

/// Can some query position in `q` (inclusive) see some key position in `k`?
fn ranges_may_attend(
    pattern: &GpuPattern,
    branch: Option<&Branch>,
    causal: bool,
    q: (usize, usize),
    k: (usize, usize),
) -> bool {
    if causal && k.0 > q.1 {
        return false;
    }
    match pattern {
        GpuPattern::Dense => true,
        // Keys seen by the tile's queries form the interval [q.0 - left, q.1 + right']
        // (right' = 0 when causal): exact.
        GpuPattern::Window { left, right } => {
            let hi = if causal { q.1 } else { q.1.saturating_add(*right) };
            k.1.saturating_add(*left) >= q.0 && k.0 <= hi
        }
        GpuPattern::BlockSparse(bs) => block_sparse_may_attend(bs, causal, q, k),
        // Same segment needed; residues are left to the element mask.
        GpuPattern::Dilated(_) => {
            let w = branch.expect("a dilated launch names its branch").segment;
            (q.0 / w).max(k.0 / w) <= (q.1 / w).min(k.1 / w)
        }
    }
}

fn block_sparse_may_attend(bs: &BlockSparse, causal: bool, q: (usize, usize), k: (usize, usize)) -> bool {
    if q.0 < bs.global_tokens || k.0 < bs.global_tokens {
        return true;
    }
    let b = bs.block;
    ((q.0 / b)..=(q.1 / b)).any(|qa| {
        let q_hi = q.1.min(qa * b + b - 1);
        ((k.0 / b)..=(k.1 / b)).any(|kb| {
            (!causal || kb * b <= q_hi)
                && (bs.local_radius.is_some_and(|w| qa.abs_diff(kb) <= w)
                    || bs.dilated_stride.is_some_and(|s| qa.abs_diff(kb) % s == 0)
                    || bs.block_mask.as_ref().is_some_and(|m| m[qa][kb]))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::GpuSpec;
    use ringdil_reference::pattern::{Dilated, key_counts};

    /// Tiles (of `TILE` x `TILE`) holding at least one allowed (query, key) pair of any head,
    /// from the reference's key multiplicities (causality and padding applied as the
    /// reference does).
    fn needed_tiles(spec: &GpuSpec, heads: usize, n: usize) -> Vec<(usize, usize)> {
        needed_tiles_of(spec, heads, n, (TILE, TILE))
    }

    /// The same for tiles of `q_tile` x `k_tile`.
    fn needed_tiles_of(
        spec: &GpuSpec,
        heads: usize,
        n: usize,
        (q_tile, k_tile): (usize, usize),
    ) -> Vec<(usize, usize)> {
        let reference = spec.to_reference();
        let mut tiles = std::collections::BTreeSet::new();
        for h in 0..heads {
            for i in 0..n {
                for (j, &c) in key_counts(reference.pattern.as_ref(), i, h, heads, n).iter().enumerate() {
                    if c > 0 && (!spec.causal || j <= i) {
                        tiles.insert((i / q_tile, j / k_tile));
                    }
                }
            }
        }
        tiles.into_iter().collect()
    }

    fn identity_plan(spec: &GpuSpec, n: usize) -> TilePlan {
        plan(&spec.pattern, None, spec.causal, IndexMap::whole(n), (TILE, TILE))
    }

    /// Tile shapes the kernels plan over: the backward's, the mma forward's and the wgmma
    /// forward's at d = 64 (`Family::forward_q_tile`, `Family::forward_key_tile`).
    const SHAPES: [(usize, usize); 3] = [(TILE, TILE), (FWD_Q_TILE, TILE), (3 * TILE, 2 * TILE)];

    fn planned(p: &TilePlan) -> Vec<(usize, usize)> {
        (0..p.row_tiles).flat_map(|r| p.row(r).iter().map(move |&c| (r, c as usize))).collect()
    }

    #[test]
    fn dense_causal_and_window_plans_are_exactly_the_needed_tiles() {
        for n in [1, 63, 64, 65, 257, 331] {
            for causal in [false, true] {
                for pattern in [
                    GpuPattern::Dense,
                    GpuPattern::Window { left: 70, right: 5 },
                    GpuPattern::Window { left: 0, right: 130 },
                ] {
                    let spec = GpuSpec::new(pattern).causal(causal);
                    for shape in SHAPES {
                        let p = plan(&spec.pattern, None, causal, IndexMap::whole(n), shape);
                        assert_eq!(planned(&p), needed_tiles_of(&spec, 1, n, shape), "{spec:?} n={n} {shape:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn causal_plan_visits_the_lower_triangle() {
        let p = identity_plan(&GpuSpec::new(GpuPattern::Dense).causal(true), 64 * 10);
        assert_eq!(p.visits(), 10 * 11 / 2);
        assert_eq!(p.row(3), &[0, 1, 2, 3]);
    }

    #[test]
    fn block_sparse_plan_is_sound_and_skips_tiles() {
        let n: usize = 300;
        let nb = n.div_ceil(16);
        let mask: Vec<Vec<bool>> = (0..nb).map(|a| (0..nb).map(|b| (a * 7 + b * 3) % 11 == 0).collect()).collect();
        for (bs, causal) in [
            (BlockSparse::local(16, 1), false),
            (BlockSparse { dilated_stride: Some(9), global_tokens: 3, ..BlockSparse::local(16, 0) }, true),
            (BlockSparse { block_mask: Some(mask), local_radius: None, ..BlockSparse::local(16, 0) }, false),
        ] {
            let spec = GpuSpec::new(GpuPattern::BlockSparse(bs)).causal(causal);
            let p = identity_plan(&spec, n);
            let needed = needed_tiles(&spec, 1, n);
            for &(r, c) in &needed {
                assert!(p.contains(r, c), "{spec:?}: needed tile ({r}, {c}) not planned");
            }
            assert!(p.visits() < 25, "{spec:?}: {} of 25 tiles planned", p.visits());
        }
    }

    #[test]
    fn dilated_identity_plan_is_sound_per_branch() {
        let d = Dilated::longnet(&[(64, 1), (100, 2), (256, 8)]);
        let n = 333;
        for (i, branch) in d.branches.iter().enumerate() {
            for causal in [false, true] {
                let spec = GpuSpec::new(GpuPattern::Dilated(d.single_branch(i))).causal(causal);
                let p = plan(&spec.pattern, Some(branch), causal, IndexMap::whole(n), (TILE, TILE));
                for (r, c) in needed_tiles(&spec, 8, n) {
                    assert!(p.contains(r, c), "branch {i} causal={causal}: tile ({r}, {c}) not planned");
                }
            }
        }
        // A 64-token segment: only the diagonal tiles.
        let spec = GpuSpec::new(GpuPattern::Dilated(d.single_branch(0)));
        let p = plan(&spec.pattern, Some(&d.branches[0]), false, IndexMap::whole(640), (TILE, TILE));
        assert_eq!(p.visits(), 10);
    }

    #[test]
    fn ring_chunk_plan_uses_global_positions() {
        // Queries 128..256 against keys 0..128 under causality: every tile is below the
        // diagonal; the reverse chunk pair is empty.
        let spec = GpuSpec::new(GpuPattern::Dense).causal(true);
        let below = plan(&spec.pattern, None, true, chunk(128, 0, 128), (TILE, TILE));
        assert_eq!(below.visits(), 4);
        let above = plan(&spec.pattern, None, true, chunk(0, 128, 128), (TILE, TILE));
        assert_eq!(above.visits(), 0);
    }

    #[test]
    fn compact_plan_covers_segments_and_costs_the_branch_share() {
        // n = 4096, w = 1024, r = 4: 4 segments of 256 compact rows = 4 tiles each, so
        // 4 * 4 * 4 = 64 tiles of 64x64, i.e. n*w/r^2 / 64^2 = 64: the branch's share.
        let (n, w, r) = (4096, 1024, 4);
        let map = IndexMap::Compact { segment: w, dilation: r, q: Axis::contiguous(0, n), k: Axis::contiguous(0, n) };
        assert_eq!(map.extents(), (1024, 1024));
        let p = plan(&GpuPattern::Dense, None, false, map, (TILE, TILE));
        assert_eq!(p.visits(), n * w / (r * r) / (TILE * TILE));
        let causal = plan(&GpuPattern::Dense, None, true, map, (TILE, TILE));
        assert_eq!(causal.visits(), 4 * (4 * 5 / 2));
        // Segments that do not fill tiles (w = 100, r = 3: 34 compact rows per segment).
        let whole = Axis::contiguous(0, 1000);
        let map = IndexMap::Compact { segment: 100, dilation: 3, q: whole, k: whole };
        let p = plan(&GpuPattern::Dense, None, false, map, (TILE, TILE));
        for s in 0..10 {
            let (a, b) = (s * 34 / TILE, (s * 34 + 33) / TILE);
            assert!(p.contains(a, b) && p.contains(b, a));
        }
    }

    #[test]
    fn forward_plan_with_128_row_query_tiles() {
        // Causal, 300 tokens: query tiles [0,128), [128,256), [256,300) see key tiles up
        // to their last row: 2, 4 and 5 tiles.
        let p = plan(&GpuPattern::Dense, None, true, IndexMap::whole(300), (FWD_Q_TILE, TILE));
        assert_eq!((p.row_tiles, p.col_tiles), (3, 5));
        assert_eq!((p.row(0).len(), p.row(1).len(), p.row(2).len()), (2, 4, 5));
        let spec = GpuSpec::new(GpuPattern::Window { left: 10, right: 0 }).causal(true);
        for (r, c) in needed_tiles(&spec, 1, 300) {
            let q_tile = r * TILE / FWD_Q_TILE;
            let p = plan(&spec.pattern, None, true, IndexMap::whole(300), (FWD_Q_TILE, TILE));
            assert!(p.contains(q_tile, c));
        }
    }

    #[test]
    fn transpose_lists_query_tiles_per_key_tile() {
        let p = identity_plan(&GpuSpec::new(GpuPattern::Dense).causal(true), 64 * 3 + 5);
        let t = p.transpose();
        assert_eq!(t.row(0), &[0, 1, 2, 3]);
        assert_eq!(t.row(3), &[3]);
        assert_eq!(t.visits(), p.visits());
        assert_eq!(t.transpose(), p);
    }

    fn chunk(q_offset: usize, k_offset: usize, rows: usize) -> IndexMap {
        IndexMap::Identity { q: Axis::contiguous(q_offset, rows), k: Axis::contiguous(k_offset, rows) }
    }

    /// Every allowed pair between two axes lies in a planned tile (forward and backward tiles).
    fn assert_sound(spec: &GpuSpec, d: Option<&Dilated>, map: IndexMap, n: usize, heads: usize) {
        let reference = spec.to_reference();
        let branch = d.map(|d| &d.branches[0]);
        let (qa, ka) = map.axes();
        for (q_tile, k_tile) in SHAPES {
            let p = plan(&spec.pattern, branch, spec.causal, map, (q_tile, k_tile));
            for h in 0..heads {
                for i in 0..qa.rows {
                    let qpos = qa.offset + i * qa.stride;
                    let counts = key_counts(reference.pattern.as_ref(), qpos, h, heads, n);
                    for j in 0..ka.rows {
                        let kpos = ka.offset + j * ka.stride;
                        if counts[kpos] == 0 || (spec.causal && kpos > qpos) {
                            continue;
                        }
                        let o = d.map_or(0, |d| d.offset(&d.branches[0], h, heads));
                        let qc = map.index_of(Side::Query, qpos, o).expect("an allowed query has an index");
                        let kc = map.index_of(Side::Key, kpos, o).expect("an allowed key has an index");
                        assert!(
                            p.contains(qc / q_tile, kc / k_tile),
                            "{map:?} h {h}: q {qpos} (index {qc}) k {kpos} (index {kc}) not planned"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn compact_ring_chunks_are_sound_and_cost_the_branch_share() {
        let n = 1000;
        let d = Dilated::longnet(&[(256, 4), (300, 2), (1000, 8)]);
        // (q offset, q rows, k offset, k rows): aligned and unaligned chunks, same and other segments.
        let chunks =
            [(0, 250, 250, 250), (250, 250, 0, 250), (333, 201, 100, 300), (700, 300, 700, 300), (5, 7, 990, 10)];
        for i in 0..d.branches.len() {
            let one = d.single_branch(i);
            let (segment, dilation) = (one.branches[0].segment, one.branches[0].dilation);
            for causal in [false, true] {
                let spec = GpuSpec::new(GpuPattern::Dilated(one.clone())).causal(causal);
                for &(qo, qr, ko, kr) in &chunks {
                    let map = IndexMap::Compact {
                        segment,
                        dilation,
                        q: Axis::contiguous(qo, qr),
                        k: Axis::contiguous(ko, kr),
                    };
                    assert_sound(&spec, Some(&one), map, n, 5);
                }
            }
        }
        // A ring step of 1024 queries over 1024 keys in one 4096-token segment, r = 8: the
        // branch's share (1024/8)^2 / 64^2 = 4 tiles, not the 256 of the mask in place.
        let map = IndexMap::Compact {
            segment: 4096,
            dilation: 8,
            q: Axis::contiguous(2048, 1024),
            k: Axis::contiguous(1024, 1024),
        };
        let p = plan(&GpuPattern::Dense, None, false, map, (TILE, TILE));
        assert_eq!(map.extents(), (512, 512));
        assert_eq!(map.bases(), (0, 0));
        assert_eq!(p.visits(), 4);
        // Causal, keys after the queries: nothing.
        let after = IndexMap::Compact {
            segment: 4096,
            dilation: 8,
            q: Axis::contiguous(1024, 1024),
            k: Axis::contiguous(2048, 1024),
        };
        assert_eq!(plan(&GpuPattern::Dense, None, true, after, (TILE, TILE)).visits(), 0);
    }

    #[test]
    fn strided_axes_are_sound_for_every_mask() {
        // Rank r of a striped layout over P ranks holds positions r, r + P, ...
        let (n, ranks) = (301, 3);
        let d = Dilated::longnet(&[(64, 2)]);
        let specs = [
            (GpuSpec::new(GpuPattern::Dense).causal(true), None),
            (GpuSpec::new(GpuPattern::Window { left: 40, right: 3 }), None),
            (GpuSpec::new(GpuPattern::Window { left: 40, right: 0 }).causal(true), None),
            (GpuSpec::new(GpuPattern::Dilated(d.clone())).causal(true), Some(&d)),
        ];
        for (spec, dil) in &specs {
            for r in 0..ranks {
                for src in 0..ranks {
                    let axis = |x: usize| Axis { offset: x, stride: ranks, rows: (n - x).div_ceil(ranks) };
                    let map = IndexMap::Identity { q: axis(r), k: axis(src) };
                    assert_sound(spec, *dil, map, n, 2);
                }
            }
        }
        // Causal striped: the plan is the lower triangle of local indices (exact).
        let axis = |x: usize| Axis { offset: x, stride: ranks, rows: 64 * 4 };
        let p = plan(&GpuPattern::Dense, None, true, IndexMap::Identity { q: axis(0), k: axis(1) }, (TILE, TILE));
        assert_eq!(p.visits(), 4 * 5 / 2);
    }
}

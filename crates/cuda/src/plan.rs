//! Tile plans: which key tiles each query tile visits (and the transpose for dK/dV).
//!
//! The kernels evaluate the mask per element from global indices; the plan decides, per
//! 64x64 tile, whether the tile can hold *any* allowed pair. A tile the plan leaves out is
//! never loaded nor multiplied: that is how a causal, windowed, block-sparse or dilated
//! pattern costs its share of the dense work. The plan must be *sound* (every allowed
//! pair lies in a planned tile; the tests check it against the reference's key sets) and
//! is exact for dense, causal and window masks. It does not depend on the batch row or the
//! head; key padding, which does, is cut in the kernel (the padded tail of a plan row).

use crate::spec::GpuPattern;
use ringdil_reference::pattern::{BlockSparse, Branch};

/// Rows of a key tile, and of a query tile of the backward kernels (`BN`, `BM` in the kernels).
pub const TILE: usize = 64;

/// Query rows per forward block (`FBM`: 4 warps of 2 m16 tiles each).
pub const FWD_Q_TILE: usize = 128;

/// How a launch index becomes a row of the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexMap {
    /// Index `c` is row `c`, at global position `offset + c` (a ring chunk when offset > 0).
    Identity { q_offset: usize, k_offset: usize },
    /// One dilated branch over the whole sequence, compacted: index `c` is the
    /// `c mod m`-th kept row of segment `c div m` (`m = ceil(segment / dilation)`),
    /// i.e. row `s*w + o(h) + t*r`; indices past a short segment's end are holes.
    /// Only the kept rows are visited, so a branch costs `n*w/r^2` per head.
    Compact { segment: usize, dilation: usize },
}

impl IndexMap {
    /// Launch indices on each side for tensors of `rows` rows and a sequence of `seq_len`.
    pub fn extent(&self, rows: usize, seq_len: usize) -> usize {
        match *self {
            IndexMap::Identity { .. } => rows,
            IndexMap::Compact { segment, dilation } => seq_len.div_ceil(segment) * segment.div_ceil(dilation),
        }
    }
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

/// Inclusive global position range of launch indices `a..b` (clipped to `n`), or None.
fn positions(a: usize, b: usize, n: usize, offset: usize) -> Option<(usize, usize)> {
    (a < n).then(|| (offset + a, offset + b.min(n) - 1))
}

/// The tile plan of one launch: query indices `0..nq` in tiles of `q_tile`, key indices
/// `0..nk` in tiles of [`TILE`], under `map`. `pattern` is the launch's pattern (for a
/// dilated pattern, `branch` is the branch).
pub fn plan(
    pattern: &GpuPattern,
    branch: Option<&Branch>,
    causal: bool,
    map: IndexMap,
    (nq, q_tile): (usize, usize),
    nk: usize,
) -> TilePlan {
    let (rt, ct) = (nq.div_ceil(q_tile), nk.div_ceil(TILE));
    match map {
        IndexMap::Compact { segment, dilation } => {
            // Kept rows of one segment are m consecutive indices; rows grow with the index,
            // so causality is `first key index <= last query index`.
            let m = segment.div_ceil(dilation);
            TilePlan::build(rt, ct, |r, c| {
                let (q0, q1) = (r * q_tile, ((r + 1) * q_tile).min(nq) - 1);
                let (k0, k1) = (c * TILE, ((c + 1) * TILE).min(nk) - 1);
                (!causal || k0 <= q1) && (q0 / m).max(k0 / m) <= (q1 / m).min(k1 / m)
            })
        }
        IndexMap::Identity { q_offset, k_offset } => TilePlan::build(rt, ct, |r, c| {
            let (Some(q), Some(k)) = (
                positions(r * q_tile, (r + 1) * q_tile, nq, q_offset),
                positions(c * TILE, (c + 1) * TILE, nk, k_offset),
            ) else {
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

    /// Tiles holding at least one allowed (query, key) pair of any head, from the
    /// reference's key multiplicities (causality and padding applied as the reference does).
    fn needed_tiles(spec: &GpuSpec, heads: usize, n: usize) -> Vec<(usize, usize)> {
        let reference = spec.to_reference();
        let mut tiles = std::collections::BTreeSet::new();
        for h in 0..heads {
            for i in 0..n {
                for (j, &c) in key_counts(reference.pattern.as_ref(), i, h, heads, n).iter().enumerate() {
                    if c > 0 && (!spec.causal || j <= i) {
                        tiles.insert((i / TILE, j / TILE));
                    }
                }
            }
        }
        tiles.into_iter().collect()
    }

    fn identity_plan(spec: &GpuSpec, n: usize) -> TilePlan {
        plan(&spec.pattern, None, spec.causal, IndexMap::Identity { q_offset: 0, k_offset: 0 }, (n, TILE), n)
    }

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
                    assert_eq!(planned(&identity_plan(&spec, n)), needed_tiles(&spec, 1, n), "{spec:?} n={n}");
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
                let p = plan(
                    &spec.pattern,
                    Some(branch),
                    causal,
                    IndexMap::Identity { q_offset: 0, k_offset: 0 },
                    (n, TILE),
                    n,
                );
                for (r, c) in needed_tiles(&spec, 8, n) {
                    assert!(p.contains(r, c), "branch {i} causal={causal}: tile ({r}, {c}) not planned");
                }
            }
        }
        // A 64-token segment: only the diagonal tiles.
        let spec = GpuSpec::new(GpuPattern::Dilated(d.single_branch(0)));
        let p = plan(
            &spec.pattern,
            Some(&d.branches[0]),
            false,
            IndexMap::Identity { q_offset: 0, k_offset: 0 },
            (640, TILE),
            640,
        );
        assert_eq!(p.visits(), 10);
    }

    #[test]
    fn ring_chunk_plan_uses_global_positions() {
        // Queries 128..256 against keys 0..128 under causality: every tile is below the
        // diagonal; the reverse chunk pair is empty.
        let spec = GpuSpec::new(GpuPattern::Dense).causal(true);
        let below =
            plan(&spec.pattern, None, true, IndexMap::Identity { q_offset: 128, k_offset: 0 }, (128, TILE), 128);
        assert_eq!(below.visits(), 4);
        let above =
            plan(&spec.pattern, None, true, IndexMap::Identity { q_offset: 0, k_offset: 128 }, (128, TILE), 128);
        assert_eq!(above.visits(), 0);
    }

    #[test]
    fn compact_plan_covers_segments_and_costs_the_branch_share() {
        // n = 4096, w = 1024, r = 4: 4 segments of 256 compact rows = 4 tiles each, so
        // 4 * 4 * 4 = 64 tiles of 64x64, i.e. n*w/r^2 / 64^2 = 64: the branch's share.
        let (n, w, r) = (4096, 1024, 4);
        let map = IndexMap::Compact { segment: w, dilation: r };
        let nc = map.extent(n, n);
        assert_eq!(nc, 1024);
        let p = plan(&GpuPattern::Dense, None, false, map, (nc, TILE), nc);
        assert_eq!(p.visits(), n * w / (r * r) / (TILE * TILE));
        let causal = plan(&GpuPattern::Dense, None, true, map, (nc, TILE), nc);
        assert_eq!(causal.visits(), 4 * (4 * 5 / 2));
        // Segments that do not fill tiles (w = 100, r = 3: 34 compact rows per segment).
        let map = IndexMap::Compact { segment: 100, dilation: 3 };
        let nc = map.extent(1000, 1000);
        let p = plan(&GpuPattern::Dense, None, false, map, (nc, TILE), nc);
        for s in 0..10 {
            let (a, b) = (s * 34 / TILE, (s * 34 + 33) / TILE);
            assert!(p.contains(a, b) && p.contains(b, a));
        }
    }

    #[test]
    fn forward_plan_with_128_row_query_tiles() {
        // Causal, 300 tokens: query tiles [0,128), [128,256), [256,300) see key tiles up
        // to their last row: 2, 4 and 5 tiles.
        let p = plan(
            &GpuPattern::Dense,
            None,
            true,
            IndexMap::Identity { q_offset: 0, k_offset: 0 },
            (300, FWD_Q_TILE),
            300,
        );
        assert_eq!((p.row_tiles, p.col_tiles), (3, 5));
        assert_eq!((p.row(0).len(), p.row(1).len(), p.row(2).len()), (2, 4, 5));
        let spec = GpuSpec::new(GpuPattern::Window { left: 10, right: 0 }).causal(true);
        for (r, c) in needed_tiles(&spec, 1, 300) {
            let q_tile = r * TILE / FWD_Q_TILE;
            let p = plan(
                &spec.pattern,
                None,
                true,
                IndexMap::Identity { q_offset: 0, k_offset: 0 },
                (300, FWD_Q_TILE),
                300,
            );
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
}

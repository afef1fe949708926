//! How a forward launch cuts its query launch indices into row tiles (one block's work
//! item each), shared by the tile plan (one plan row per tile) and the kernels
//! (`fwd_rows` in `kernels/tile_scheduler.cuh`, from `Params::fwd_seg_tiles`).
//!
//! *Contiguous* tiles hold rows `[t * rows, (t + 1) * rows)`. A compact dilated launch
//! whose segments keep `m` rows (launch index `s * m` starts segment `s`: compact indices
//! start at a segment boundary) may instead cut *per segment*: segment `s` has
//! `T = ceil(m / rows)` tiles, tile `s * T + i` holding rows
//! `[s * m + i * rows, min(s * m + (i + 1) * rows, (s + 1) * m))`. No tile then straddles
//! two segments, whose keys differ (a straddling tile would visit both segments' key
//! tiles, each of its rows masking the other's), and the last tile of a segment is short.
//! The wgmma forward uses it to run 192-row tiles (three consumer warpgroups) over
//! segments of, say, 1024 kept rows: 6 work items per segment (the last with 64 rows)
//! instead of 8 of the 128-row kernel (`Family::forward_rows_for`).

/// The row tiles of a forward launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowTiles {
    /// Query rows per tile (the block's height).
    pub rows: usize,
    /// Kept rows per segment when each segment starts its own tiles; 0: contiguous tiles.
    pub segment: usize,
}

impl RowTiles {
    /// Contiguous tiles of `rows` rows.
    pub fn contiguous(rows: usize) -> Self {
        RowTiles { rows, segment: 0 }
    }

    /// Tiles per segment (`Params::fwd_seg_tiles`); 0 for contiguous tiles.
    pub fn per_segment(self) -> usize {
        if self.segment == 0 { 0 } else { self.segment.div_ceil(self.rows) }
    }

    /// Tiles over `n` launch rows (a tile of a segment past `n` is empty).
    pub fn count(self, n: usize) -> usize {
        match self.segment {
            0 => n.div_ceil(self.rows),
            m => n.div_ceil(m) * self.per_segment(),
        }
    }

    /// Launch rows `[lo, hi)` of tile `t` over `n` launch rows; None when it holds none.
    pub fn span(self, t: usize, n: usize) -> Option<(usize, usize)> {
        let (lo, end) = match self.segment {
            0 => (t * self.rows, n),
            m => {
                let (s, i) = (t / self.per_segment(), t % self.per_segment());
                (s * m + i * self.rows, (s * m + m).min(n))
            }
        };
        (lo < end).then(|| (lo, (lo + self.rows).min(end)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every launch row lies in exactly one tile, each tile's rows are consecutive, at
    /// most `rows` of them, inside one segment, and tiles ascend: checked row by row
    /// against the rule written out (segment of a row = row / m).
    #[test]
    fn tiles_partition_the_rows_without_straddling() {
        for (rows, segment) in [(192, 0), (128, 0), (192, 1024), (192, 64), (192, 320), (128, 448), (192, 2048)] {
            for n in [1, 63, 64, 191, 192, 1000, 1024, 1025, 3000, 4096] {
                let t = RowTiles { rows, segment };
                let mut owner = vec![None; n];
                let mut last_hi = 0;
                for tile in 0..t.count(n) {
                    let Some((lo, hi)) = t.span(tile, n) else { continue };
                    assert!(lo >= last_hi && hi > lo && hi - lo <= rows, "{t:?} n {n} tile {tile}: [{lo}, {hi})");
                    last_hi = hi;
                    for (row, o) in owner.iter_mut().enumerate().take(hi).skip(lo) {
                        assert_eq!(*o, None, "{t:?} n {n}: row {row} in two tiles");
                        *o = Some(tile);
                        if let Some(s) = row.checked_div(segment) {
                            assert_eq!(s, lo / segment, "{t:?} n {n}: tile {tile} straddles");
                        }
                    }
                }
                assert!(owner.iter().all(Option::is_some), "{t:?} n {n}: a row in no tile");
            }
        }
        // 1024 kept rows in 192-row tiles: 5 full and one of 64 per segment.
        let t = RowTiles { rows: 192, segment: 1024 };
        assert_eq!(
            (t.per_segment(), t.count(4096), t.span(5, 4096), t.span(6, 4096)),
            (6, 24, Some((960, 1024)), Some((1024, 1216)))
        );
    }
}

//! From the reference's [`ChunkPlan`] to GPU launches: pieces, per-pair kernel positions
//! and the pattern-aware "who needs what" table. Pure host code, tested without a GPU.
//!
//! # Pieces
//! The kernels take one contiguous range of query positions and one of key positions per
//! launch ([`Chunk`]). A rank's tokens are cut into **pieces**, maximal runs of
//! consecutive global positions: one piece for contiguous layouts and any boundaries, two
//! for zigzag (`c_i` and `c_{2P-1-i}`). Each piece is its own device tensor, so one ring
//! step of rank `r` over the block of `src` is `|pieces(r)| x |pieces(src)|` launches
//! whose partials are merged per query piece.
//!
//! **Striped** layouts (token `t` on rank `t mod P`) are not runs: rank `r`'s local row
//! `i` is global `r + iP`. For a dense pattern the causal test between rank `r` and `src`
//! depends only on local indices: `src + jP <= r + iP  <=>  j <= i - [src > r]`, so
//! the launch uses *virtual* positions `q = i`, `k = j + [src > r]` with the same causal
//! kernel. Other patterns (windows, dilation, padding) need true positions per row and
//! are rejected with a typed error for striped layouts.
//!
//! # Needs
//! Pair `(r, qi) x (src, kj)` is **needed** when its tile plan (the list of 64x64 tiles
//! the kernel visits) is non-empty. The tile plan is exact at tile granularity (a tile
//! is listed iff it may hold an allowed pair), so a dilated branch whose segments all lie
//! inside one rank gives empty cross-rank pairs: the pattern-aware plan moves nothing
//! for it. Tile granularity can list a piece that holds no allowed key (a segment
//! boundary inside a tile); that piece is then sent and computed to no effect, never
//! left out wrongly.

use super::error::{DistError, DistResult};
use crate::launch::{Chunk, Shape, launches};
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::ring::{ChunkPlan, Layout};

/// The most pieces one rank may have: each step launches `pieces(r) x pieces(src)` kernels.
pub const MAX_PIECES: usize = 16;

/// A run of a rank's rows: local rows `local..local + rows`, kernel position `start`
/// of the first row (the global token, or a virtual position for striped layouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub local: usize,
    pub rows: usize,
    pub start: usize,
}

/// A chunk plan made ready for the GPU ring: pieces per rank, problem sizes, spec, and
/// the needed pairs.
#[derive(Debug, Clone)]
pub struct DistPlan {
    pub chunks: ChunkPlan,
    pub spec: GpuSpec,
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    pieces: Vec<Vec<Piece>>,
    striped: bool,
    /// `needed[r][src]`: the piece pairs `(qi, kj)` with a non-empty tile plan.
    needed: Vec<Vec<Vec<(usize, usize)>>>,
}

impl DistPlan {
    /// Cut `chunks` into pieces and find the needed pairs. Errors name the rank or the
    /// layout that cannot run.
    pub fn new(chunks: ChunkPlan, spec: GpuSpec, batch: usize, heads: usize, head_dim: usize) -> DistResult<Self> {
        chunks.validate()?;
        let (n, p) = (chunks.seq_len, chunks.ranks());
        spec.validate(batch, heads, n)?;
        let striped = p > 1
            && chunks == ChunkPlan::new(n, p, &Layout::Striped)?
            && chunks != ChunkPlan::new(n, p, &Layout::Contiguous)?;
        if striped && (spec.pattern != GpuPattern::Dense || spec.key_lengths.is_some()) {
            return Err(DistError::UnsupportedLayout {
                layout: "striped",
                reason: "only dense patterns without key padding (other masks need a true position per row)",
            });
        }
        let mut pieces = Vec::with_capacity(p);
        for r in 0..p {
            let tokens = chunks.tokens(r);
            let mut mine: Vec<Piece> = Vec::new();
            if striped {
                if !tokens.is_empty() {
                    mine.push(Piece { local: 0, rows: tokens.len(), start: 0 });
                }
            } else {
                for (i, &t) in tokens.iter().enumerate() {
                    match mine.last_mut() {
                        Some(last) if last.start + last.rows == t => last.rows += 1,
                        _ => mine.push(Piece { local: i, rows: 1, start: t }),
                    }
                }
            }
            if mine.len() > MAX_PIECES {
                return Err(DistError::TooManyPieces { rank: r, pieces: mine.len(), max: MAX_PIECES });
            }
            pieces.push(mine);
        }
        let mut plan = DistPlan { chunks, spec, batch, heads, head_dim, pieces, striped, needed: Vec::new() };
        plan.needed = (0..p)
            .map(|r| {
                (0..p)
                    .map(|src| {
                        let mut pairs = Vec::new();
                        for qi in 0..plan.pieces[r].len() {
                            for kj in 0..plan.pieces[src].len() {
                                let (shape, chunk) = plan.pair(r, qi, src, kj);
                                if launches(&shape, &plan.spec, &chunk)?.iter().any(|l| !l.fwd.idx.is_empty()) {
                                    pairs.push((qi, kj));
                                }
                            }
                        }
                        Ok(pairs)
                    })
                    .collect::<DistResult<Vec<_>>>()
            })
            .collect::<DistResult<Vec<_>>>()?;
        Ok(plan)
    }

    pub fn ranks(&self) -> usize {
        self.chunks.ranks()
    }

    pub fn seq_len(&self) -> usize {
        self.chunks.seq_len
    }

    pub fn pieces(&self, rank: usize) -> &[Piece] {
        &self.pieces[rank]
    }

    /// `[batch, rows, heads, head_dim]` of piece `i` of `rank`.
    pub fn piece_dims(&self, rank: usize, i: usize) -> [usize; 4] {
        [self.batch, self.pieces[rank][i].rows, self.heads, self.head_dim]
    }

    /// Elements of one `[batch, rows, heads, head_dim]` tensor of each piece of `rank`.
    pub fn piece_lens(&self, rank: usize) -> Vec<usize> {
        self.pieces[rank].iter().map(|p| self.batch * p.rows * self.heads * self.head_dim).collect()
    }

    /// Shape and kernel positions of the launch of query piece `qi` of `r` over key piece
    /// `kj` of `src` (see the module docs for striped virtual positions).
    pub fn pair(&self, r: usize, qi: usize, src: usize, kj: usize) -> (Shape, Chunk) {
        let (qp, kp) = (self.pieces[r][qi], self.pieces[src][kj]);
        let shape =
            Shape { batch: self.batch, heads: self.heads, head_dim: self.head_dim, q_rows: qp.rows, k_rows: kp.rows };
        let chunk = if self.striped {
            let shift = (src > r) as usize;
            Chunk { q_offset: 0, k_offset: shift, seq_len: qp.rows.max(kp.rows + shift) }
        } else {
            Chunk { q_offset: qp.start, k_offset: kp.start, seq_len: self.chunks.seq_len }
        };
        (shape, chunk)
    }

    /// The piece pairs `(qi, kj)` of `r` over `src` that the kernel must visit.
    pub fn needed(&self, r: usize, src: usize) -> &[(usize, usize)] {
        &self.needed[r][src]
    }

    /// The pieces of `src` that `dst` needs (ascending): what the pattern-aware plan sends.
    pub fn needed_pieces(&self, dst: usize, src: usize) -> Vec<usize> {
        let mut k: Vec<usize> = self.needed[dst][src].iter().map(|&(_, kj)| kj).collect();
        k.sort_unstable();
        k.dedup();
        k
    }

    /// Key/value elements (K and V together) that `src` sends `dst` under the
    /// pattern-aware plan: `2 sum_{kj needed} B n_kj H d`.
    pub fn pattern_volume(&self, dst: usize, src: usize) -> usize {
        let lens = self.piece_lens(src);
        2 * self.needed_pieces(dst, src).iter().map(|&kj| lens[kj]).sum::<usize>()
    }

    /// Key/value elements a rank sends in the forward dense ring:
    /// `sum_{s=1}^{P-1} 2 B H d n_{(r-s+1) mod P} = 2 B H d (N - n_{r+1})`.
    pub fn ring_volume(&self, rank: usize) -> usize {
        let p = self.ranks();
        if p == 1 {
            return 0;
        }
        2 * self.batch * self.heads * self.head_dim * (self.seq_len() - self.chunks.tokens((rank + 1) % p).len())
    }

    /// Split a host tensor `[batch, seq, heads, dim]` (global token order) into the pieces
    /// of `rank`, each `[batch, rows, heads, dim]`.
    pub fn scatter<T: Copy>(&self, x: &[T], dim: usize, rank: usize) -> Vec<Vec<T>> {
        let (b, n, h) = (self.batch, self.seq_len(), self.heads);
        let tokens = self.chunks.tokens(rank);
        self.pieces[rank]
            .iter()
            .map(|p| {
                let mut out = Vec::with_capacity(b * p.rows * h * dim);
                for bi in 0..b {
                    for &t in &tokens[p.local..p.local + p.rows] {
                        let at = (bi * n + t) * h * dim;
                        out.extend_from_slice(&x[at..at + h * dim]);
                    }
                }
                out
            })
            .collect()
    }

    /// The inverse of [`DistPlan::scatter`]: write the pieces of `rank` into the global
    /// `[batch, seq, heads, dim]` tensor `x`.
    pub fn gather_into<T: Copy>(&self, x: &mut [T], dim: usize, rank: usize, pieces: &[Vec<T>]) {
        let (b, n, h) = (self.batch, self.seq_len(), self.heads);
        let tokens = self.chunks.tokens(rank);
        for (p, data) in self.pieces[rank].iter().zip(pieces) {
            for bi in 0..b {
                for (i, &t) in tokens[p.local..p.local + p.rows].iter().enumerate() {
                    let at = (bi * n + t) * h * dim;
                    let from = ((bi * p.rows) + i) * h * dim;
                    x[at..at + h * dim].copy_from_slice(&data[from..from + h * dim]);
                }
            }
        }
    }

    /// Like [`DistPlan::gather_into`] for a `[batch, heads, rows]` LSE.
    pub fn gather_lse_into<T: Copy>(&self, x: &mut [T], rank: usize, pieces: &[Vec<T>]) {
        let (b, n, h) = (self.batch, self.seq_len(), self.heads);
        let tokens = self.chunks.tokens(rank);
        for (p, data) in self.pieces[rank].iter().zip(pieces) {
            for bi in 0..b {
                for hi in 0..h {
                    for (i, &t) in tokens[p.local..p.local + p.rows].iter().enumerate() {
                        x[(bi * h + hi) * n + t] = data[(bi * h + hi) * p.rows + i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::pattern::Dilated;

    fn plan(n: usize, p: usize, layout: Layout, spec: GpuSpec) -> DistResult<DistPlan> {
        DistPlan::new(ChunkPlan::new(n, p, &layout).unwrap(), spec, 1, 2, 64)
    }

    #[test]
    fn pieces_per_layout() {
        let causal = GpuSpec::new(GpuPattern::Dense).causal(true);
        let c = plan(10, 3, Layout::Contiguous, causal.clone()).unwrap();
        assert_eq!(c.pieces(0), &[Piece { local: 0, rows: 4, start: 0 }]);
        assert_eq!(c.pieces(2), &[Piece { local: 0, rows: 3, start: 7 }]);
        let z = plan(10, 2, Layout::Zigzag, causal.clone()).unwrap();
        // c = [0,3,5,8,10]: rank 0 owns 0..3 and 8..10.
        assert_eq!(z.pieces(0), &[Piece { local: 0, rows: 3, start: 0 }, Piece { local: 3, rows: 2, start: 8 }]);
        let s = plan(9, 2, Layout::Striped, causal.clone()).unwrap();
        assert_eq!(s.pieces(1), &[Piece { local: 0, rows: 4, start: 0 }]);
        let b = plan(10, 3, Layout::Boundaries(vec![0, 1, 1, 10]), causal).unwrap();
        assert!(b.pieces(1).is_empty());
        assert_eq!(b.pieces(2)[0], Piece { local: 0, rows: 9, start: 1 });
    }

    #[test]
    fn causal_ring_needs_only_earlier_blocks() {
        let p = plan(256, 2, Layout::Contiguous, GpuSpec::new(GpuPattern::Dense).causal(true)).unwrap();
        assert_eq!(p.needed(0, 1), &[] as &[(usize, usize)]);
        assert_eq!(p.needed(1, 0), &[(0, 0)]);
        assert_eq!(p.pattern_volume(0, 1), 0);
        assert_eq!(p.pattern_volume(1, 0), 2 * 128 * 2 * 64);
        assert_eq!(p.ring_volume(0), 2 * 2 * 64 * 128);
    }

    #[test]
    fn striped_virtual_positions_reproduce_the_causal_mask() {
        // rank r local i is global r + iP; the virtual launch must allow exactly k <= q.
        let (n, ranks) = (23, 3);
        let p = plan(n, ranks, Layout::Striped, GpuSpec::new(GpuPattern::Dense).causal(true)).unwrap();
        for r in 0..ranks {
            for src in 0..ranks {
                let (shape, chunk) = p.pair(r, 0, src, 0);
                for i in 0..shape.q_rows {
                    for j in 0..shape.k_rows {
                        let global = src + j * ranks <= r + i * ranks;
                        let virt = chunk.k_offset + j <= chunk.q_offset + i;
                        assert_eq!(global, virt, "r {r} src {src} i {i} j {j}");
                    }
                }
            }
        }
    }

    #[test]
    fn striped_rejects_masks_that_need_true_positions() {
        let w = GpuSpec::new(GpuPattern::Window { left: 3, right: 0 });
        let e = plan(40, 2, Layout::Striped, w).unwrap_err().to_string();
        assert!(e.contains("striped"), "{e}");
    }

    #[test]
    fn dilated_segments_inside_ranks_need_nothing_across_ranks() {
        let d = Dilated::longnet(&[(256, 2)]);
        let p = plan(1024, 4, Layout::Contiguous, GpuSpec::new(GpuPattern::Dilated(d))).unwrap();
        for r in 0..4 {
            for src in (0..4).filter(|&s| s != r) {
                assert!(p.needed(r, src).is_empty(), "r {r} src {src}");
            }
            assert_eq!(p.needed(r, r), &[(0, 0)]);
        }
    }

    #[test]
    fn too_many_pieces_is_a_typed_error_naming_the_rank() {
        let order: Vec<usize> = (0..64).map(|i| if i % 2 == 0 { i / 2 } else { 32 + i / 2 }).collect();
        let chunks = ChunkPlan::new(64, 2, &Layout::Permuted { order, boundaries: None }).unwrap();
        let e = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense), 1, 1, 64).unwrap_err();
        assert!(matches!(e, DistError::TooManyPieces { rank: 0, pieces: 32, max: MAX_PIECES }), "{e}");
    }

    #[test]
    fn scatter_then_gather_is_the_identity() {
        let p = plan(11, 3, Layout::Zigzag, GpuSpec::new(GpuPattern::Dense)).unwrap();
        let (b, n, h, d) = (1, 11, 2, 3);
        let x: Vec<u32> = (0..(b * n * h * d) as u32).collect();
        let mut y = vec![0; x.len()];
        for r in 0..3 {
            let pieces = p.scatter(&x, d, r);
            p.gather_into(&mut y, d, r, &pieces);
        }
        assert_eq!(x, y);
    }
}

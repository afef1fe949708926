//! From the reference's [`ChunkPlan`] to GPU launches: pieces, per-pair kernel positions
//! and the pattern-aware "who needs what" table. Pure host code, tested without a GPU.
//!
//! # Pieces
//! The kernels take one *arithmetic* run of query positions and one of key positions per
//! launch ([`Chunk`]: offset and stride). A rank's tokens are cut greedily into
//! **pieces**, maximal runs with a constant positive step: one piece for contiguous
//! layouts and any boundaries, two for zigzag (`c_i` and `c_{2P-1-i}`), one of stride
//! `P` for striped layouts (rank `r` holds `r, r + P, ...`). Each piece is its own device
//! tensor, so one ring step of rank `r` over the block of `src` is
//! `|pieces(r)| x |pieces(src)|` launches whose partials are merged per query piece.
//! Since the kernels see true global positions, every mask (causal, window, dilated,
//! padding) is exact on every layout; dilated branches are compacted on contiguous pieces
//! and evaluated in place on strided ones.
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
use crate::launch::launches;
use crate::shape::{Chunk, Shape};
use crate::spec::GpuSpec;
use ringdil_reference::Documents;
use ringdil_reference::ring::ChunkPlan;
use std::sync::OnceLock;

/// The most pieces one rank may have: each step launches `pieces(r) x pieces(src)` kernels.
pub const MAX_PIECES: usize = 16;

/// A run of a rank's rows: local rows `local..local + rows` hold the global tokens
/// `start + i * stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub local: usize,
    pub rows: usize,
    pub start: usize,
    pub stride: usize,
}

/// Cut a rank's tokens (in local order) into maximal runs of constant positive step.
/// A run of one token has stride 1.
pub fn pieces_of(tokens: &[usize]) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for (i, &t) in tokens.iter().enumerate() {
        match out.last_mut() {
            Some(last) if last.rows == 1 && t > last.start => {
                last.stride = t - last.start;
                last.rows = 2;
            }
            Some(last) if last.rows > 1 && t == last.start + last.rows * last.stride => last.rows += 1,
            _ => out.push(Piece { local: i, rows: 1, start: t, stride: 1 }),
        }
    }
    out
}

/// A chunk plan made ready for the GPU ring: pieces per rank, problem sizes, spec, and
/// the needed pairs.
#[derive(Debug, Clone)]
pub struct DistPlan {
    pub chunks: ChunkPlan,
    pub spec: GpuSpec,
    pub batch: usize,
    pub heads: usize,
    /// K/V heads ([`DistPlan::with_kv_heads`]; `heads` unless grouped-query): K, V and
    /// their gradients are pieces of `kv_heads` heads, and that is what travels.
    pub kv_heads: usize,
    /// q's and k's head dim.
    pub head_dim: usize,
    /// v's head dim ([`DistPlan::with_value_dim`]; `head_dim` unless MLA-style): V, dV,
    /// the output and d_out are `value_dim` wide, Q, K, dQ, dK `head_dim`.
    pub value_dim: usize,
    /// The plan's query heads are heads `first_head ..` of `all_heads` ([`DistPlan::for_heads`];
    /// `0` of `heads` otherwise): the kernels and the kept rows see global head indices,
    /// so per-head dilated offsets stay those of the whole problem.
    pub first_head: usize,
    pub all_heads: usize,
    /// The pattern's output scale (`GpuSpec::output_scale`: `1/G` for the head-group
    /// combine, else 1), applied once to each finished output and summed gradient
    /// ([`DistPlan::output_scale`]).
    out_scale: f32,
    /// Ranks per Ulysses group of [`Kind::Hybrid`](ringdil_reference::ring::Kind::Hybrid)
    /// ([`DistPlan::with_hybrid_degree`]; `None`: the reference's rule).
    hybrid: Option<usize>,
    pieces: Vec<Vec<Piece>>,
    /// `needed[r][src]`: the piece pairs `(qi, kj)` with a non-empty tile plan.
    needed: Vec<Vec<Vec<(usize, usize)>>>,
    /// `kept[r][src][kj]`: what `r` needs of piece `kj` of `src`.
    kept: Vec<Vec<Vec<KeptRows>>>,
}

/// What a rank needs of another rank's key piece.
#[derive(Debug, Clone)]
struct KeptRows {
    /// Which launches (dilated branches) some query piece of the rank needs.
    live: Vec<bool>,
    /// The K/V head rows those launches keep, when fewer than all (see
    /// [`DistPlan::kept_rows`]). Built on first use: a rank asks only for the lists it
    /// sends or receives (2P of the P^2), each `batch * rows * kv_heads` long.
    rows: OnceLock<Option<Vec<u32>>>,
}

impl DistPlan {
    /// Cut `chunks` into pieces and find the needed pairs. Errors name the rank or the
    /// layout that cannot run.
    pub fn new(chunks: ChunkPlan, spec: GpuSpec, batch: usize, heads: usize, head_dim: usize) -> DistResult<Self> {
        Self::for_heads(chunks, spec, batch, 0..heads, heads, head_dim)
    }

    /// The plan of query heads `heads` of `all_heads` (one head run of the Ulysses x ring
    /// hybrid, `dist::hybrid_split`): tensors hold those heads only, and every launch and
    /// kept-row list sees their global indices. Errors as [`DistPlan::new`], and an empty
    /// or out-of-range head range.
    pub fn for_heads(
        chunks: ChunkPlan,
        spec: GpuSpec,
        batch: usize,
        heads: std::ops::Range<usize>,
        all_heads: usize,
        head_dim: usize,
    ) -> DistResult<Self> {
        chunks.validate()?;
        let (n, p) = (chunks.seq_len, chunks.ranks());
        spec.validate(batch, all_heads, n)?;
        let out_scale = spec.output_scale(all_heads)? as f32;
        if heads.is_empty() || heads.end > all_heads {
            return Err(DistError::BadHeads { heads, all: all_heads });
        }
        let pieces = (0..p)
            .map(|r| {
                let mine = pieces_of(chunks.tokens(r));
                if mine.len() > MAX_PIECES {
                    return Err(DistError::TooManyPieces { rank: r, pieces: mine.len(), max: MAX_PIECES });
                }
                Ok(mine)
            })
            .collect::<DistResult<Vec<_>>>()?;
        let mut plan = DistPlan {
            chunks,
            spec,
            batch,
            heads: heads.len(),
            kv_heads: heads.len(),
            head_dim,
            value_dim: head_dim,
            first_head: heads.start,
            all_heads,
            out_scale,
            hybrid: None,
            pieces,
            needed: vec![vec![]; p],
            kept: vec![vec![]; p],
        };
        for r in 0..p {
            for src in 0..p {
                // Per key piece: which launches (dilated branches) some query piece needs.
                let mut live: Vec<Vec<bool>> = vec![Vec::new(); plan.pieces[src].len()];
                let mut pairs = Vec::new();
                for qi in 0..plan.pieces[r].len() {
                    for (kj, live_kj) in live.iter_mut().enumerate() {
                        let (shape, chunk) = plan.pair(r, qi, src, kj);
                        let nonempty: Vec<bool> =
                            launches(&shape, &plan.spec, &chunk)?.iter().map(|l| !l.fwd.idx.is_empty()).collect();
                        if nonempty.iter().any(|&x| x) {
                            pairs.push((qi, kj));
                            live_kj.resize(nonempty.len(), false);
                            live_kj.iter_mut().zip(&nonempty).for_each(|(a, &b)| *a |= b);
                        }
                    }
                }
                plan.needed[r].push(pairs);
                plan.kept[r].push(live.into_iter().map(|live| KeptRows { live, rows: OnceLock::new() }).collect());
            }
        }
        Ok(plan)
    }

    /// Grouped-query attention: K, V (and dK, dV) at `kv_heads` heads, query head `h`
    /// reading K/V head `h / (heads / kv_heads)`. Every K/V transfer of the ring then
    /// moves `kv_heads / heads` of the multi-head volume. Errors: `kv_heads` 0 or not
    /// dividing `heads`.
    pub fn with_kv_heads(self, kv_heads: usize) -> DistResult<Self> {
        crate::launch::validate_kv_heads(self.heads, kv_heads)?;
        // Kept-row lists are per K/V head: drop any built for the old count.
        let kept = self
            .kept
            .into_iter()
            .map(|by_src| {
                by_src
                    .into_iter()
                    .map(|pieces| {
                        pieces.into_iter().map(|k| KeptRows { live: k.live, rows: OnceLock::new() }).collect()
                    })
                    .collect()
            })
            .collect();
        Ok(DistPlan { kv_heads, kept, ..self })
    }

    /// v's head dim `value_dim` (MLA's 192 / 128): V and dV pieces, the outputs and d_out
    /// are `value_dim` wide and travel so; the tile plans and kept rows do not depend on
    /// it. Errors: a (head_dim, value_dim) pair no kernel family runs
    /// ([`crate::Family::value_dim_pairs`]).
    pub fn with_value_dim(self, value_dim: usize) -> DistResult<Self> {
        crate::launch::validate_value_dim(crate::family::Family::Mma, self.head_dim, value_dim)?;
        Ok(DistPlan { value_dim, ..self })
    }

    /// The Ulysses x ring hybrid with groups of `degree` ranks (Ulysses inside a group,
    /// the ring across groups). Errors: `degree` 0, not dividing the ranks, or above the
    /// query heads.
    pub fn with_hybrid_degree(self, degree: usize) -> DistResult<Self> {
        if degree == 0 || self.ranks() % degree != 0 || degree > self.heads {
            return Err(DistError::HybridDegree { degree, ranks: self.ranks(), heads: self.heads });
        }
        Ok(DistPlan { hybrid: Some(degree), ..self })
    }

    /// Ranks per Ulysses group of the hybrid: as set, or the reference's rule (the largest
    /// divisor of the ranks not above the query heads, `ring::hybrid_degree`).
    pub fn hybrid_degree(&self) -> usize {
        self.hybrid.unwrap_or_else(|| ringdil_reference::ring::hybrid_degree(self.ranks(), self.heads))
    }

    /// Query heads per K/V head.
    pub fn kv_group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// The K/V head rows of piece `kj` of `src` that the live branches keep, as indices
    /// of `d`-vectors in the K/V piece tensor: `(b * rows + i) * kv_heads + g`, ascending.
    /// A K/V head's row is kept when a live branch keeps it for some query head of its
    /// group (offsets stay per query head). `None` when that is every head row, or the
    /// pattern is not dilated (built-in, or `dilated_expr` in compact form), or a live
    /// branch has dilation 1 (it keeps every row).
    /// With packed documents, [`DistPlan::document_entries`] for `dst`.
    fn kept_entries(&self, dst: usize, src: usize, kj: usize, live: &[bool]) -> Option<Vec<u32>> {
        if let Some(documents) = &self.spec.documents {
            // A piece no query piece needs never travels (and has no list to upload).
            return live.iter().any(|&l| l).then(|| self.document_entries(documents, dst, src, kj)).flatten();
        }
        let (n, piece, all, kv_heads) = (self.seq_len(), self.pieces[src][kj], self.all_heads, self.kv_heads);
        // Each branch as a segment, a dilation and an offset per (global) head and segment
        // (a built-in branch's offset is the same in every segment).
        let forms = crate::dilated_expr::compact_branches(&self.spec.pattern, all, n)?;
        let branches: Vec<_> = forms.iter().zip(live).filter(|(_, l)| **l).map(|(b, _)| b).collect();
        if branches.is_empty() || branches.iter().any(|b| b.dilation == 1) {
            return None;
        }
        if self.batch * piece.rows * kv_heads > u32::MAX as usize {
            return None;
        }
        // A K/V head's row at `pos` is kept when a live branch keeps it for a query head of
        // the group: (pos mod w) mod r = o(h, floor(pos / w)), h global.
        let (group, first) = (self.kv_group(), self.first_head);
        let kept = |g: usize, pos: usize| {
            branches.iter().any(|b| {
                let (w, s) = (b.segment, pos / b.segment);
                (g * group..(g + 1) * group).any(|h| (pos % w) % b.dilation == b.offset(first + h, s))
            })
        };
        let mut out = Vec::new();
        for bi in 0..self.batch {
            for i in 0..piece.rows {
                let pos = piece.start + i * piece.stride;
                for g in 0..kv_heads {
                    if kept(g, pos) {
                        out.push(((bi * piece.rows + i) * kv_heads + g) as u32);
                    }
                }
            }
        }
        (out.len() < self.batch * piece.rows * kv_heads).then_some(out)
    }

    /// Packed documents: the K/V head rows of piece `kj` of `src` whose document (in their
    /// batch row) holds a token of `dst`, every K/V head; `None` when that is every row. A
    /// query sees only keys of its own document, so `dst` reads no other row unmasked:
    /// a long document crossing the rank split moves only its own rows, not the whole
    /// block of `src`. (A pattern keeps at most the rows of a query's document; the rows
    /// of a document a pattern inside it does not keep still travel.)
    fn document_entries(&self, documents: &Documents, dst: usize, src: usize, kj: usize) -> Option<Vec<u32>> {
        let (n, piece, kv_heads) = (self.seq_len(), self.pieces[src][kj], self.kv_heads);
        if self.batch * piece.rows * kv_heads > u32::MAX as usize {
            return None;
        }
        let mut out = Vec::new();
        for b in 0..self.batch {
            let row = documents.row(b, n);
            let doc = |t: usize| row.partition_point(|&c| c <= t) - 1;
            let mut holds = vec![false; row.len() - 1];
            self.chunks.tokens(dst).iter().for_each(|&t| holds[doc(t)] = true);
            for i in (0..piece.rows).filter(|&i| holds[doc(piece.start + i * piece.stride)]) {
                out.extend((0..kv_heads).map(|g| ((b * piece.rows + i) * kv_heads + g) as u32));
            }
        }
        (out.len() < self.batch * piece.rows * kv_heads).then_some(out)
    }

    pub fn ranks(&self) -> usize {
        self.chunks.ranks()
    }

    /// The factor of every finished output and gradient (`crate::output_scale`): the
    /// token-split schedules run their steps unscaled and apply it once at the end
    /// (`dist::exec`); Ulysses' whole-sequence calls apply it themselves.
    pub fn output_scale(&self) -> f32 {
        self.out_scale
    }

    pub fn seq_len(&self) -> usize {
        self.chunks.seq_len
    }

    pub fn pieces(&self, rank: usize) -> &[Piece] {
        &self.pieces[rank]
    }

    /// `[batch, rows, heads, head_dim]` of query piece `i` of `rank` (q, dq).
    pub fn piece_dims(&self, rank: usize, i: usize) -> [usize; 4] {
        self.dims_at(rank, i, self.heads, self.head_dim)
    }

    /// Elements of one `[batch, rows, heads, head_dim]` tensor (q, dq) of each piece of `rank`.
    pub fn piece_lens(&self, rank: usize) -> Vec<usize> {
        self.lens_at(rank, self.heads, self.head_dim)
    }

    /// `[batch, rows, heads, value_dim]` of output piece `i` of `rank` (out, d_out).
    pub fn out_piece_dims(&self, rank: usize, i: usize) -> [usize; 4] {
        self.dims_at(rank, i, self.heads, self.value_dim)
    }

    /// Elements of one output-side tensor (out, d_out) of each piece of `rank`.
    pub fn out_piece_lens(&self, rank: usize) -> Vec<usize> {
        self.lens_at(rank, self.heads, self.value_dim)
    }

    /// `[batch, rows, kv_heads, head_dim]` of key piece `i` of `rank` (k, dk).
    pub fn kv_piece_dims(&self, rank: usize, i: usize) -> [usize; 4] {
        self.dims_at(rank, i, self.kv_heads, self.head_dim)
    }

    /// Elements of one key-side tensor (k, dk) of each piece of `rank`.
    pub fn kv_piece_lens(&self, rank: usize) -> Vec<usize> {
        self.lens_at(rank, self.kv_heads, self.head_dim)
    }

    /// `[batch, rows, kv_heads, value_dim]` of value piece `i` of `rank` (v, dv).
    pub fn v_piece_dims(&self, rank: usize, i: usize) -> [usize; 4] {
        self.dims_at(rank, i, self.kv_heads, self.value_dim)
    }

    /// Elements of one value-side tensor (v, dv) of each piece of `rank`.
    pub fn v_piece_lens(&self, rank: usize) -> Vec<usize> {
        self.lens_at(rank, self.kv_heads, self.value_dim)
    }

    /// `[batch, rows, heads, width]` of piece `i` of `rank`.
    pub(crate) fn dims_at(&self, rank: usize, i: usize, heads: usize, width: usize) -> [usize; 4] {
        [self.batch, self.pieces[rank][i].rows, heads, width]
    }

    /// Elements of a `[batch, rows, heads, width]` tensor of each piece of `rank`.
    fn lens_at(&self, rank: usize, heads: usize, width: usize) -> Vec<usize> {
        (0..self.pieces[rank].len()).map(|i| self.dims_at(rank, i, heads, width).iter().product()).collect()
    }

    /// Shape and kernel positions of the launch of query piece `qi` of `r` over key piece
    /// `kj` of `src`.
    pub fn pair(&self, r: usize, qi: usize, src: usize, kj: usize) -> (Shape, Chunk) {
        let (qp, kp) = (self.pieces[r][qi], self.pieces[src][kj]);
        let shape = Shape {
            batch: self.batch,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            value_dim: self.value_dim,
            q_rows: qp.rows,
            k_rows: kp.rows,
        };
        let chunk =
            Chunk { q_stride: qp.stride, k_stride: kp.stride, ..Chunk::new(qp.start, kp.start, self.seq_len()) };
        let chunk = if self.all_heads == self.heads { chunk } else { chunk.heads_of(self.first_head, self.all_heads) };
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

    /// The K/V head rows of piece `kj` of `src` that `dst` needs, when fewer than all: for
    /// a LongNet pattern, the rows kept by the branches that reach across the two ranks
    /// (the others stay home), for each query head its own offset; with packed documents,
    /// the rows of the documents that hold a token of `dst`, per batch row. Indices of
    /// head rows in the K/V piece tensors (`head_dim` wide in K, `value_dim` in V), `(b * rows + i) * kv_heads + g`, ascending. The pattern-aware plan sends
    /// only these (a gather into a send buffer) and the receiver scatters them into a
    /// zeroed piece: every row a kernel reads unmasked is there (the kernels read only kept
    /// rows of the branches they launch; a zeroed row of another document is masked), and
    /// dK/dV contributions of the other rows are exactly zero, so they are returned the
    /// same way. `None`: the whole piece.
    pub fn kept_rows(&self, dst: usize, src: usize, kj: usize) -> Option<&[u32]> {
        if dst == src {
            return None;
        }
        let kept = self.kept[dst][src].get(kj)?;
        kept.rows.get_or_init(|| self.kept_entries(dst, src, kj, &kept.live)).as_deref()
    }

    /// Elements of K (or of dK: `head_dim` wide) of piece `kj` of `src` that `dst` receives.
    pub fn sent_len(&self, dst: usize, src: usize, kj: usize) -> usize {
        self.sent_at(dst, src, kj, self.head_dim)
    }

    /// Elements of V (or of dV: `value_dim` wide) of piece `kj` of `src` that `dst` receives.
    pub fn sent_v_len(&self, dst: usize, src: usize, kj: usize) -> usize {
        self.sent_at(dst, src, kj, self.value_dim)
    }

    /// Elements of piece `kj` of `src` that `dst` receives, `width` per K/V head row:
    /// the whole piece, or its kept head rows.
    fn sent_at(&self, dst: usize, src: usize, kj: usize, width: usize) -> usize {
        let whole = self.batch * self.pieces[src][kj].rows * self.kv_heads * width;
        self.kept_rows(dst, src, kj).map_or(whole, |k| k.len() * width)
    }

    /// Key/value elements (K and V together) that `src` sends `dst` under the
    /// pattern-aware plan: `sum_{kj needed} sent_len(kj) + sent_v_len(kj)` (whole pieces,
    /// or their kept head rows; `2 sent_len` when `value_dim = head_dim`).
    pub fn pattern_volume(&self, dst: usize, src: usize) -> usize {
        self.needed_pieces(dst, src).iter().map(|&kj| self.sent_len(dst, src, kj) + self.sent_v_len(dst, src, kj)).sum()
    }

    /// Key/value elements a rank sends in the forward dense ring:
    /// `sum_{s=1}^{P-1} B H_kv (d + d_v) n_{(r-s+1) mod P} = B H_kv (d + d_v) (N - n_{r+1})`.
    pub fn ring_volume(&self, rank: usize) -> usize {
        let p = self.ranks();
        if p == 1 {
            return 0;
        }
        let width = self.head_dim + self.value_dim;
        self.batch * self.kv_heads * width * (self.seq_len() - self.chunks.tokens((rank + 1) % p).len())
    }

    /// Split a host tensor `[batch, seq, heads, dim]` (global token order) into the pieces
    /// of `rank`, each `[batch, rows, heads, dim]`.
    pub fn scatter<T: Copy>(&self, x: &[T], dim: usize, rank: usize) -> Vec<Vec<T>> {
        self.scatter_heads(x, self.heads, dim, rank)
    }

    /// [`DistPlan::scatter`] of a K/V-side tensor `[batch, seq, kv_heads, dim]`.
    pub fn scatter_kv<T: Copy>(&self, x: &[T], dim: usize, rank: usize) -> Vec<Vec<T>> {
        self.scatter_heads(x, self.kv_heads, dim, rank)
    }

    /// [`DistPlan::scatter`] of a tensor `[batch, seq, h, dim]`.
    pub fn scatter_heads<T: Copy>(&self, x: &[T], h: usize, dim: usize, rank: usize) -> Vec<Vec<T>> {
        let (b, n) = (self.batch, self.seq_len());
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
        self.gather_heads_into(x, self.heads, dim, rank, pieces)
    }

    /// [`DistPlan::gather_into`] of K/V-side pieces (dK, dV) into `[batch, seq, kv_heads, dim]`.
    pub fn gather_kv_into<T: Copy>(&self, x: &mut [T], dim: usize, rank: usize, pieces: &[Vec<T>]) {
        self.gather_heads_into(x, self.kv_heads, dim, rank, pieces)
    }

    fn gather_heads_into<T: Copy>(&self, x: &mut [T], h: usize, dim: usize, rank: usize, pieces: &[Vec<T>]) {
        let (b, n) = (self.batch, self.seq_len());
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
#[path = "layout_tests.rs"]
mod tests;

//! Head-parallel attention (DeepSpeed-Ulysses), host side: which rank computes which
//! heads, and the index lists that move rows between the token split and the head split.
//!
//! The reference's schedule (`ringdil_reference::ring::ulysses`): query heads are split
//! evenly, rank `r` computing heads `H_r = even_boundaries(H, P)[r..r + 2]` over **all**
//! `N` tokens; it receives the K/V heads its query heads read, `kv_range(H_r)` (a K/V
//! head shared by two ranks' query heads goes to both, and both send their `dK`, `dV` of
//! it home, where they are added). `H_r` is cut into *runs* that each run alone
//! ([`Heads::pieces`]: whole groups, or heads inside one group), one single-GPU call per
//! run, with the run's global first head in the kernels' [`Chunk`](crate::shape::Chunk)
//! so that a dilated branch's offset `o(h)` is the global head's.
//!
//! # Index lists
//! Rows move as `d`-vectors through the gather / scatter kernels of
//! `exec::Helpers`. For a token piece of `rows` tokens at positions
//! `start + i * stride` and a run of heads `first..first + m` (query or K/V side), the
//! packed message is `[batch, rows, m, d]` in `(b, i, j)` order, and
//!
//! ```text
//!   token side   (piece tensor  [B, rows, H, d]):  (b rows + i) H + first + j      (token_rows)
//!   head side    (run tensor    [B, N,    m, d]):  (b N + start + i stride) m + j   (sequence_rows)
//!   LSE, token   ([B, H, rows]):                   (b H + first + j) rows + i       (token_lse)
//!   LSE, head    ([B, m, N]):                      (b m + j) N + start + i stride   (sequence_lse)
//! ```
//! Both sides enumerate `(b, i, j)` in the same order, so a gather on one side and a
//! scatter on the other move every row to its place; the pieces of all ranks cover the
//! sequence once, so a run tensor assembled from them has every row written once.
//!
//! # Volume (elements sent by rank `p` in the forward, `n_p` its tokens)
//! `B n_p sum_{r != p} (d |H_r| + (d + d_v) |K_r|)` (Q, K, V out) `+ B (d_v + 1) |H_p| (N - n_p)`
//! (output and LSE back), the reference module's formula ([`HeadSplit::forward_volume`]).
//! Rows are `d`-vectors for Q and K, `d_v`-vectors for V and the output.

use super::layout::{DistPlan, Piece};
use ringdil_reference::Heads;
use ringdil_reference::ring::even_boundaries;
use std::ops::Range;

/// The head split of a plan: query-head boundaries per rank and the runs of each rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadSplit {
    heads: Heads,
    bounds: Vec<usize>,
}

impl HeadSplit {
    /// The split of `plan`'s query heads over its ranks.
    pub fn of(plan: &DistPlan) -> Self {
        let heads = Heads::new(plan.heads, plan.kv_heads).expect("a DistPlan's head counts are validated");
        HeadSplit { heads, bounds: even_boundaries(plan.heads, plan.ranks()) }
    }

    /// The query heads rank `r` computes (empty when `H < P` leaves it none).
    pub fn heads_of(&self, r: usize) -> Range<usize> {
        self.bounds[r]..self.bounds[r + 1]
    }

    /// Rank `r`'s heads cut into runs that each run alone, with the K/V heads each reads.
    pub fn runs(&self, r: usize) -> Vec<Run> {
        self.heads.pieces(&self.heads_of(r)).into_iter().map(|q| Run { kv: self.heads.kv_range(&q), q }).collect()
    }

    /// Elements rank `p` of `plan` sends in the forward (module docs).
    pub fn forward_volume(&self, plan: &DistPlan, p: usize) -> usize {
        let mine: usize = plan.pieces(p).iter().map(|x| x.rows).sum();
        let (b, n) = (plan.batch as f64, plan.seq_len() as f64);
        let (d, dv) = (plan.head_dim as f64, plan.value_dim as f64);
        forward_elements(self.heads, b, (d, dv), n, plan.ranks(), p, mine as f64) as usize
    }
}

/// Elements rank `p` of `ranks` sends in the Ulysses forward when it holds `tokens` of the
/// `n` (module docs): `Q` of its tokens at every other rank's query heads, `K` and `V` at
/// the K/V heads every other rank reads (replicated when ranks share a K/V head), then the
/// output and LSE of its query heads over every other rank's tokens; with `(d, d_v)` the
/// head dims of q/k and of v,
/// `B d n_p (H - |H_p|) + B (d + d_v) n_p sum_{r != p} |K_r| + B (d_v + 1) |H_p| (N - n_p)`.
/// Shared by the runtime's count ([`HeadSplit::forward_volume`]) and the auto rule,
/// which prices `N / P` tokens per rank.
pub fn forward_elements(heads: Heads, b: f64, (d, dv): (f64, f64), n: f64, ranks: usize, p: usize, tokens: f64) -> f64 {
    let split = even_boundaries(heads.query(), ranks.max(1));
    let of = |r: usize| split[r]..split[r + 1];
    let own = of(p).len() as f64;
    let kv_others: usize = (0..ranks).filter(|&r| r != p).map(|r| heads.kv_range(&of(r)).len()).sum();
    b * d * tokens * (heads.query() as f64 - own)
        + b * (d + dv) * tokens * kv_others as f64
        + b * (dv + 1.0) * own * (n - tokens)
}

/// One single-GPU call of a rank: query heads `q`, reading K/V heads `kv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub q: Range<usize>,
    pub kv: Range<usize>,
}

/// `(b, i, j)` in the packing order of the module docs.
fn packed_order(batch: usize, piece: &Piece, m: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let rows = piece.rows;
    (0..batch).flat_map(move |b| (0..rows).flat_map(move |i| (0..m).map(move |j| (b, i, j))))
}

fn u32_of(x: usize) -> u32 {
    u32::try_from(x).expect("row indices fit 32 bits (the kernels' limit on sizes)")
}

/// Rows of heads `heads` of a token piece tensor `[batch, rows, all, d]`.
pub fn token_rows(batch: usize, piece: &Piece, all: usize, heads: &Range<usize>) -> Vec<u32> {
    packed_order(batch, piece, heads.len())
        .map(|(b, i, j)| u32_of((b * piece.rows + i) * all + heads.start + j))
        .collect()
}

/// Rows of the piece's tokens in a run tensor `[batch, n, m, d]`.
pub fn sequence_rows(batch: usize, piece: &Piece, n: usize, m: usize) -> Vec<u32> {
    packed_order(batch, piece, m).map(|(b, i, j)| u32_of((b * n + piece.start + i * piece.stride) * m + j)).collect()
}

/// LSE entries of heads `heads` of a token piece's `[batch, all, rows]` LSE.
pub fn token_lse(batch: usize, piece: &Piece, all: usize, heads: &Range<usize>) -> Vec<u32> {
    packed_order(batch, piece, heads.len())
        .map(|(b, i, j)| u32_of((b * all + heads.start + j) * piece.rows + i))
        .collect()
}

/// LSE entries of the piece's tokens in a run's `[batch, m, n]` LSE.
pub fn sequence_lse(batch: usize, piece: &Piece, n: usize, m: usize) -> Vec<u32> {
    packed_order(batch, piece, m).map(|(b, i, j)| u32_of((b * m + j) * n + piece.start + i * piece.stride)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{GpuPattern, GpuSpec};
    use ringdil_reference::ring::{ChunkPlan, Layout};

    fn plan(n: usize, p: usize, layout: Layout, heads: usize, kv: usize) -> DistPlan {
        let chunks = ChunkPlan::new(n, p, &layout).unwrap();
        DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense), 2, heads, 64).unwrap().with_kv_heads(kv).unwrap()
    }

    /// Every query head is computed by exactly one rank's run, and each run reads the K/V
    /// heads of its query heads (`h / group`), written out independently of `Heads`.
    #[test]
    fn runs_cover_every_head_once_with_their_kv_heads() {
        for (h, kv, p) in [(8, 8, 3), (8, 2, 3), (6, 2, 4), (8, 1, 3), (2, 2, 4), (12, 4, 5)] {
            let split = HeadSplit::of(&plan(64, p, Layout::Contiguous, h, kv));
            let g = h / kv;
            let mut seen = vec![0; h];
            for r in 0..p {
                for run in split.runs(r) {
                    assert!(run.q.start >= split.heads_of(r).start && run.q.end <= split.heads_of(r).end);
                    let want = run.q.start / g..(run.q.end - 1) / g + 1;
                    assert_eq!(run.kv, want, "h {h} kv {kv} p {p} run {run:?}");
                    // A run runs alone: whole groups, or inside one group.
                    assert!(run.kv.len() == 1 || (run.q.start % g == 0 && run.q.end % g == 0), "{run:?}");
                    run.q.clone().for_each(|x| seen[x] += 1);
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "h {h} p {p}: {seen:?}");
        }
    }

    /// Gathering a piece's rows by `token_rows` and scattering them by `sequence_rows`
    /// puts every (batch, position, head) of the global tensor where a direct transcription
    /// says, on every layout; together the pieces fill the run tensor exactly once. Same
    /// for the LSE lists.
    #[test]
    fn index_lists_move_every_row_to_its_place() {
        let (b, n, h) = (2, 37, 5);
        for layout in [Layout::Contiguous, Layout::Zigzag, Layout::Striped] {
            let pl = plan(n, 3, layout.clone(), h, h);
            let run = 1..4;
            let m = run.len();
            let mut filled = vec![usize::MAX; b * n * m];
            let mut lse_filled = vec![usize::MAX; b * m * n];
            for r in 0..3 {
                let tokens = pl.chunks.tokens(r);
                for p in pl.pieces(r) {
                    let (src, dst) = (token_rows(b, p, h, &run), sequence_rows(b, p, n, m));
                    let (lsrc, ldst) = (token_lse(b, p, h, &run), sequence_lse(b, p, n, m));
                    assert_eq!((src.len(), lsrc.len()), (b * p.rows * m, b * p.rows * m));
                    for (e, (&s, &t)) in src.iter().zip(&dst).enumerate() {
                        let (bi, rest) = (e / (p.rows * m), e % (p.rows * m));
                        let (i, j) = (rest / m, rest % m);
                        assert_eq!(s as usize, (bi * p.rows + i) * h + run.start + j);
                        let pos = tokens[p.local + i];
                        assert_eq!(t as usize, (bi * n + pos) * m + j, "{layout:?}");
                        assert_eq!(filled[t as usize], usize::MAX, "row written twice");
                        filled[t as usize] = e;
                        assert_eq!(lsrc[e] as usize, (bi * h + run.start + j) * p.rows + i);
                        let lt = ldst[e] as usize;
                        assert_eq!(lt, (bi * m + j) * n + pos);
                        assert_eq!(lse_filled[lt], usize::MAX);
                        lse_filled[lt] = e;
                    }
                }
            }
            assert!(filled.iter().all(|&x| x != usize::MAX), "{layout:?}: a row of the run tensor is missing");
            assert!(lse_filled.iter().all(|&x| x != usize::MAX));
        }
    }

    /// The forward volume equals the sum of the messages the schedule sends, counted
    /// message by message (MHA: the reference's closed form `B d n_p 3 (H - |H_p|) + B (d+1)
    /// |H_p| (N - n_p)`).
    #[test]
    fn forward_volume_is_the_reference_formula() {
        let (n, p, h) = (50, 3, 8);
        let pl = plan(n, p, Layout::Zigzag, h, h);
        let split = HeadSplit::of(&pl);
        for r in 0..p {
            let np: usize = pl.pieces(r).iter().map(|x| x.rows).sum();
            let hp = split.heads_of(r).len();
            assert_eq!(split.forward_volume(&pl, r), 2 * 64 * np * 3 * (h - hp) + 2 * 65 * hp * (n - np));
        }
        // MLA's widths: Q and K rows at d = 192, V and the output at d_v = 128.
        let chunks = ChunkPlan::new(n, p, &Layout::Zigzag).unwrap();
        let mla =
            DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense), 2, h, 192).unwrap().with_value_dim(128).unwrap();
        for r in 0..p {
            let np: usize = mla.pieces(r).iter().map(|x| x.rows).sum();
            let hp = split.heads_of(r).len();
            let want = 2 * np * (192 + 192 + 128) * (h - hp) + 2 * 129 * hp * (n - np);
            assert_eq!(split.forward_volume(&mla, r), want);
        }
    }
}

//! The GPU ring plan's guarantees (issue 20), each stated directly on
//! [`DistPlan`] (host code: no GPU needed), against transcriptions that share no code
//! with it: the layouts as `ringdil_reference::ring::Layout` documents them and the
//! masks of the documented rules (the same transcriptions as `tests/support.rs`'s
//! `window_counts`, `block_sparse_counts`, `longnet_counts` and `spec_counts`, written
//! out here because this crate does not depend on the proof crate).
//!
//! * (a) [`pieces_partition_the_sequence`]: every position `0..n` lies in exactly one
//!   piece of one rank (pieces are both the query and the key tensors of a rank);
//! * (b) [`pieces_hold_exactly_the_rows_the_layout_assigns`] and
//!   [`scatter_and_gather_move_exactly_each_pieces_rows`]: a rank's pieces, read in local
//!   order, are the rows the layout assigns it (an empty rank has no piece), their sizes
//!   are `piece_lens` / `piece_dims`, and `scatter` / `gather_into` / `gather_lse_into`
//!   move exactly those rows;
//! * (c) [`every_attended_key_is_needed_and_kept`] and, for LongNet's short last segment,
//!   [`short_last_segment_keys_are_kept`]: for every query and every key it attends,
//!   the (query piece, key piece) pair is in `needed`, the key piece in `needed_pieces`,
//!   and when only some head rows travel (`kept_rows`) the key's row is among them;
//! * (d) [`kept_rows_are_rows_a_branch_keeps`]: the docs' claim that `kept_rows` lists
//!   rows kept by the dilated branches (no other rows travel packed; under grouped-query
//!   attention a K/V head row kept for some query head of its group), and nothing but
//!   whole pieces for the other patterns. (The plan claims no minimality for whole
//!   pieces: tile granularity may send a piece no query attends, see `layout.rs`.)
//!
//! Patterns: dense, window, block sparse, LongNet, mask expressions and a Rust `Pattern`
//! impl read from a mask table (whose rules `dist_plan/transcriptions.rs` writes out as
//! closures).
//!
//! This crate has no `proptest`: each test runs a fixed number of cases drawn from
//! seeded SplitMix64 streams (`PROPTEST_CASES` overrides the count, as in the proof
//! crate), and a failure prints its case seed, the case and what went wrong.

use ringdil_cuda::check::tables::{Strided, rotating_softmax};
use ringdil_cuda::dist::{DistPlan, Piece};
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_pattern_file::PatternFile;
use ringdil_reference::pattern::expr::Constants;
use ringdil_reference::pattern::{BlockSparse, Branch, Combine, Dilated, ExprPattern, Offset};
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Layout};
use std::ops::Range;

/// Head dim of every plan (one of the kernels' head dims; the plan does not depend on it
/// otherwise).
#[path = "dist_plan/transcriptions.rs"]
mod transcriptions;
use transcriptions::{EXPRESSIONS, LONGNET_EXPRESSION, ROTATING_BRANCHES, assigned, attends, branch_keeps, offset};

const HEAD_DIM: usize = 64;

/// A dilated branch as `(w, r, o(h, s))`, the kept residue of head `h` in segment `s`.
type BranchRule = (usize, usize, Box<dyn Fn(usize, usize) -> usize>);

/// [`Pat::Rotating`]'s file (its rule: [`ROTATING_BRANCHES`]).
const ROTATING_SOFTMAX: &str = r#"{"kind": "dilated_expr", "branches": [
    {"segment": "48", "dilation": 2, "offset": "h + s"},
    {"segment": "96", "dilation": 4, "offset": "h + 3 * s"}]}"#;

/// `Err(message)` from a check unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

// ---------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------

/// A pattern the GPU supports, with its parameters readable by the transcriptions.
#[derive(Debug, Clone)]
enum Pat {
    Dense,
    Window {
        left: usize,
        right: usize,
    },
    BlockSparse(BlockSparse),
    /// LongNet branches `(w, r, offset rule)`, softmax-denominator combine.
    Dilated(Vec<(usize, usize, Offset)>),
    /// Mask expression `transcriptions::EXPRESSIONS[i]` (its source and its rule).
    Expr(usize),
    /// Sparse Transformer's strided pattern of this stride, a Rust `Pattern` impl read
    /// from a mask table (`GpuPattern::Table`).
    Table(usize),
    /// `check::tables::rotating_softmax`: a `dilated_expr` file with rotating offsets
    /// under the softmax combine, one mask table and launch per branch.
    TableParts,
    /// A rotating-offset `dilated_expr` file as compact launches with offset tables
    /// (`GpuPattern::DilatedExpr`).
    Rotating,
}

/// One GPU plan to check.
#[derive(Debug, Clone)]
struct Case {
    n: usize,
    ranks: usize,
    batch: usize,
    heads: usize,
    /// A divisor of `heads` (grouped-query attention when smaller).
    kv_heads: usize,
    layout: Layout,
    causal: bool,
    key_lengths: Option<Vec<usize>>,
    pat: Pat,
}

impl Case {
    fn spec(&self) -> GpuSpec {
        let pattern = match &self.pat {
            Pat::Dense => GpuPattern::Dense,
            Pat::Window { left, right } => GpuPattern::Window { left: *left, right: *right },
            Pat::BlockSparse(b) => GpuPattern::BlockSparse(b.clone()),
            Pat::Dilated(bs) => {
                let branches = bs.iter().map(|&(segment, dilation, offset)| Branch { segment, dilation, offset });
                GpuPattern::Dilated(Dilated { branches: branches.collect(), combine: Combine::SoftmaxDenominator })
            }
            Pat::Expr(i) => {
                let source = EXPRESSIONS[*i].0;
                GpuPattern::Expr(ExprPattern::new(source, &Constants::new()).expect("the test's masks parse"))
            }
            Pat::Table(stride) => GpuPattern::table(std::sync::Arc::new(Strided(*stride))),
            Pat::TableParts => GpuPattern::Table(rotating_softmax()),
            Pat::Rotating => {
                let file = PatternFile::parse(ROTATING_SOFTMAX, false).expect("the test's file parses");
                let pattern = GpuPattern::from_file(&file).expect("builds");
                assert!(matches!(pattern, GpuPattern::DilatedExpr(_)), "compact launches");
                pattern
            }
        };
        let spec = GpuSpec::new(pattern).causal(self.causal);
        match &self.key_lengths {
            Some(l) => spec.key_lengths(l.clone()),
            None => spec,
        }
    }

    fn plan(&self) -> Result<DistPlan, String> {
        let chunks = ChunkPlan::new(self.n, self.ranks, &self.layout).map_err(|e| format!("chunk plan: {e}"))?;
        DistPlan::new(chunks, self.spec(), self.batch, self.heads, HEAD_DIM)
            .and_then(|p| p.with_kv_heads(self.kv_heads))
            .map_err(|e| format!("DistPlan::new: {e}"))
    }
}

/// The number of cases: `PROPTEST_CASES` or `default`.
fn cases(default: u64) -> u64 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Run `check` on `cases(default)` cases drawn by `draw` from seeded streams; panic with
/// the seed, the case and the message of the first failure.
fn for_cases<C: std::fmt::Debug>(
    default: u64,
    draw: impl Fn(&mut SplitMix64) -> C,
    mut check: impl FnMut(&C) -> Result<(), String>,
) {
    for seed in 0..cases(default) {
        let case = draw(&mut SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED));
        if let Err(e) = check(&case) {
            panic!("case seed {seed}: {e}\n{case:#?}");
        }
    }
}

fn chance(rng: &mut SplitMix64, percent: usize) -> bool {
    rng.range(0, 99) < percent
}

/// `ranks + 1` random non-decreasing boundaries from 0 to `n`, often with an empty rank.
fn random_boundaries(rng: &mut SplitMix64, n: usize, ranks: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = (1..ranks).map(|_| rng.range(0, n)).collect();
    if ranks > 2 && chance(rng, 30) {
        cuts[1] = cuts[0]; // an empty rank between two equal cuts
    }
    cuts.sort_unstable();
    let mut b = vec![0];
    b.extend(cuts);
    b.push(n);
    b
}

/// Any layout the GPU runs: contiguous, zigzag, striped, random boundaries, or a
/// permutation made of up to four shuffled blocks (few pieces per rank, under the
/// runtime's `MAX_PIECES`), with random or even boundaries.
fn random_layout(rng: &mut SplitMix64, n: usize, ranks: usize) -> Layout {
    match rng.range(0, 4) {
        0 => Layout::Contiguous,
        1 => Layout::Zigzag,
        2 => Layout::Striped,
        3 => Layout::Boundaries(random_boundaries(rng, n, ranks)),
        _ => {
            let blocks = rng.range(1, 4);
            let mut cuts: Vec<usize> = (1..blocks).map(|_| rng.range(0, n)).collect();
            cuts.sort_unstable();
            let mut edges = vec![0];
            edges.extend(cuts);
            edges.push(n);
            let mut spans: Vec<Range<usize>> = edges.windows(2).map(|w| w[0]..w[1]).collect();
            for i in (1..spans.len()).rev() {
                spans.swap(i, rng.range(0, i));
            }
            let boundaries = chance(rng, 50).then(|| random_boundaries(rng, n, ranks));
            Layout::Permuted { order: spans.into_iter().flatten().collect(), boundaries }
        }
    }
}

/// LongNet branches with segments up to `max_w` and every offset rule.
fn random_branches(rng: &mut SplitMix64, max_w: usize, count: usize, min_r: usize) -> Vec<(usize, usize, Offset)> {
    (0..count)
        .map(|_| {
            let w = rng.range(min_r.max(1), max_w.max(min_r));
            let r = if chance(rng, 50) { rng.range(min_r, w) } else { rng.range(min_r, w.min(4).max(min_r)) };
            let offset = match rng.range(0, 2) {
                0 => Offset::HeadMod,
                1 => Offset::HeadBlock,
                _ => Offset::Fixed(rng.range(0, r - 1)),
            };
            (w, r, offset)
        })
        .collect()
}

/// A pattern for `n` tokens: dense, window (reaching across 64-row tiles), block sparse
/// (every rule, a user mask sometimes), a mask expression, a mask table, or LongNet (three
/// eighths of the draws; segments up to `n + 16`, so short last segments and whole-sequence segments
/// are common).
fn random_pattern(rng: &mut SplitMix64, n: usize) -> Pat {
    match rng.range(0, 7) {
        0 => Pat::Dense,
        1 => Pat::Window { left: rng.range(0, 80), right: rng.range(0, 80) },
        2 => {
            let block = rng.range(1, 40);
            let blocks = n.div_ceil(block);
            Pat::BlockSparse(BlockSparse {
                block,
                local_radius: chance(rng, 50).then(|| rng.range(0, 2)),
                dilated_stride: chance(rng, 50).then(|| rng.range(1, 3)),
                global_tokens: if chance(rng, 50) { 0 } else { rng.range(0, 70) },
                block_mask: chance(rng, 50)
                    .then(|| (0..blocks).map(|_| (0..blocks).map(|_| chance(rng, 20)).collect()).collect()),
            })
        }
        3 => Pat::Expr(rng.range(0, EXPRESSIONS.len() - 1)),
        4 if chance(rng, 50) => Pat::Table(rng.range(2, 90)),
        4 if chance(rng, 50) => Pat::TableParts,
        4 => Pat::Rotating,
        _ => {
            let count = rng.range(1, 3);
            Pat::Dilated(random_branches(rng, n + 16, count, 1))
        }
    }
}

/// Any case: `n` in `1..=48` or `49..=320` (one to five 64-row tiles), `P` in `1..=6`,
/// every layout, batch 1..=2, heads 1..=4 over any divisor as K/V heads, causal or not,
/// key padding sometimes, any GPU pattern.
fn any_case(rng: &mut SplitMix64) -> Case {
    let n = if chance(rng, 50) { rng.range(1, 48) } else { rng.range(49, 320) };
    let ranks = rng.range(1, 6);
    let batch = rng.range(1, 2);
    let heads = rng.range(1, 4);
    let kv_heads = divisor(rng, heads);
    let layout = random_layout(rng, n, ranks);
    let causal = chance(rng, 50);
    let key_lengths = chance(rng, 30).then(|| (0..batch).map(|_| rng.range(0, n)).collect());
    let pat = random_pattern(rng, n);
    Case { n, ranks, batch, heads, kv_heads, layout, causal, key_lengths, pat }
}

/// A random divisor of `n`.
fn divisor(rng: &mut SplitMix64, n: usize) -> usize {
    let all: Vec<usize> = (1..=n).filter(|d| n % d == 0).collect();
    all[rng.range(0, all.len() - 1)]
}

/// A LongNet case whose short last segment straddles a rank boundary (the GPU twin of
/// the reference proof): `n = q w + s`, `3 <= s < w`; the main branch `(w, r)` has
/// `2 <= r < s` and gives head 0 offset 0, so the segment `[a, n)` keeps `a` and `a + r`
/// in head 0; a forced cut in `a + 1..=a + r` puts them on different ranks. Other cuts
/// are random; up to two more branches, all dilated (`r >= 2`), so the crossing pieces
/// travel as kept head rows. Returns the case and `a`.
fn short_last_segment_case(rng: &mut SplitMix64) -> (Case, usize) {
    let w = rng.range(4, 130);
    let s = rng.range(3, w - 1);
    let r = rng.range(2, s - 1);
    let a = rng.range(0, 2) * w;
    let n = a + s;
    let ranks = rng.range(2, 6);
    let mut b = random_boundaries(rng, n, ranks - 1);
    b.push(rng.range(a + 1, a + r));
    b.sort_unstable();
    let rule = [Offset::HeadMod, Offset::HeadBlock, Offset::Fixed(0)][rng.range(0, 2)];
    let mut branches = vec![(w, r, rule)];
    let extra = rng.range(0, 2);
    branches.extend(random_branches(rng, n + 8, extra, 2));
    let (batch, heads, causal) = (rng.range(1, 2), rng.range(1, 4), chance(rng, 50));
    let kv_heads = divisor(rng, heads);
    let pat = Pat::Dilated(branches);
    (Case { n, ranks, batch, heads, kv_heads, layout: Layout::Boundaries(b), causal, key_lengths: None, pat }, a)
}

// ---------------------------------------------------------------------------------
// Pieces read back
// ---------------------------------------------------------------------------------

/// The global tokens of a piece, in its row order.
fn rows_of(p: &Piece) -> impl Iterator<Item = usize> + '_ {
    (0..p.rows).map(move |i| p.start + i * p.stride)
}

/// Where each token lives in the plan's pieces: `(rank, piece, row)`, checking on the way
/// that the pieces partition `0..n` (a).
fn locate(plan: &DistPlan) -> Result<Vec<(usize, usize, usize)>, String> {
    let n = plan.seq_len();
    let mut at: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); n];
    for r in 0..plan.ranks() {
        for (pi, p) in plan.pieces(r).iter().enumerate() {
            ensure!(p.rows > 0 && p.stride > 0, "rank {r} piece {pi} {p:?} is empty or has stride 0");
            for (i, t) in rows_of(p).enumerate() {
                ensure!(t < n, "rank {r} piece {pi} {p:?} claims position {t} outside 0..{n}");
                at[t].push((r, pi, i));
            }
        }
    }
    at.into_iter()
        .enumerate()
        .map(|(t, owners)| match owners[..] {
            [one] => Ok(one),
            _ => Err(format!("position {t} lies in {} pieces (rank, piece, row) {owners:?}, not one", owners.len())),
        })
        .collect()
}

/// (c) for one case: every attended key is in a needed pair, a needed piece and, when
/// packed, the kept rows. Returns how many cross-rank pairs went through a kept list
/// with both ends at or after `from` (the short last segment in the targeted test).
fn check_needed_and_kept(case: &Case, from: usize) -> Result<usize, String> {
    let plan = case.plan()?;
    let at = locate(&plan)?;
    let mut packed = 0;
    for r in 0..case.ranks {
        for (qi, qp) in plan.pieces(r).iter().enumerate() {
            for q in rows_of(qp) {
                for h in 0..case.heads {
                    for (k, &(src, kj, i)) in at.iter().enumerate() {
                        let rows: Vec<usize> = (0..case.batch).filter(|&b| attends(case, b, h, q, k)).collect();
                        if rows.is_empty() {
                            continue;
                        }
                        ensure!(
                            plan.needed(r, src).contains(&(qi, kj)),
                            "query {q} (rank {r} piece {qi}) attends key {k} (rank {src} piece {kj}) in head {h}, \
                             but the pair is not in needed({r}, {src}) = {:?}",
                            plan.needed(r, src)
                        );
                        if src == r {
                            continue;
                        }
                        ensure!(
                            plan.needed_pieces(r, src).contains(&kj),
                            "key {k} (rank {src} piece {kj}) is attended by rank {r} but not among the pieces sent to it"
                        );
                        let Some(kept) = plan.kept_rows(r, src, kj) else { continue };
                        let piece_rows = plan.pieces(src)[kj].rows;
                        for b in rows {
                            // K/V head rows: query head h reads K/V head h / group.
                            let kvh = h / (case.heads / case.kv_heads);
                            let e = ((b * piece_rows + i) * case.kv_heads + kvh) as u32;
                            ensure!(
                                kept.binary_search(&e).is_ok(),
                                "key {k} (rank {src} piece {kj} row {i}), head {h}, batch {b}: attended by query {q} \
                                 of rank {r} but not in kept_rows({r}, {src}, {kj}) ({} entries)",
                                kept.len()
                            );
                        }
                        packed += usize::from(q >= from && k >= from);
                    }
                }
            }
        }
    }
    Ok(packed)
}

// ---------------------------------------------------------------------------------
// The proofs
// ---------------------------------------------------------------------------------

/// (a) Every position `0..n` is in exactly one piece of exactly one rank: no gap, no
/// overlap, no empty piece, for every layout (empty ranks included) and pattern. A
/// rank's pieces are its query tensors and the key tensors it sends, so this is the
/// partition of both.
#[test]
fn pieces_partition_the_sequence() {
    for_cases(512, any_case, |case| locate(&case.plan()?).map(|_| ()));
}

/// (b) A rank's pieces, read in local order (`local` counting up from 0, rows
/// `start + i stride`), are exactly the rows the layout's documented rule assigns it,
/// in its order: a piece that drops or gains a row fails here by name, an empty rank
/// has no piece; `piece_dims` / `piece_lens` are `[batch, rows, heads, head_dim]`, `kv_piece_dims` /
/// `kv_piece_lens` `[batch, rows, kv_heads, head_dim]`.
#[test]
fn pieces_hold_exactly_the_rows_the_layout_assigns() {
    for_cases(512, any_case, |case| {
        let plan = case.plan()?;
        for (r, want) in assigned(case.n, case.ranks, &case.layout).iter().enumerate() {
            let mut local = 0;
            let mut got = Vec::new();
            for (i, p) in plan.pieces(r).iter().enumerate() {
                ensure!(p.local == local, "rank {r} piece {i} {p:?} starts at local row {} not {local}", p.local);
                local += p.rows;
                got.extend(rows_of(p));
                let dims = [case.batch, p.rows, case.heads, HEAD_DIM];
                ensure!(plan.piece_dims(r, i) == dims, "rank {r} piece {i}: dims {:?}", plan.piece_dims(r, i));
                ensure!(plan.piece_lens(r)[i] == dims.iter().product::<usize>(), "rank {r} piece {i}: len");
                let kv = [case.batch, p.rows, case.kv_heads, HEAD_DIM];
                ensure!(plan.kv_piece_dims(r, i) == kv, "rank {r} piece {i}: K/V dims {:?}", plan.kv_piece_dims(r, i));
                ensure!(plan.kv_piece_lens(r)[i] == kv.iter().product::<usize>(), "rank {r} piece {i}: K/V len");
            }
            ensure!(plan.piece_lens(r).len() == plan.pieces(r).len(), "rank {r}: one len per piece");
            ensure!(&got == want, "rank {r}: pieces hold rows {got:?}, the layout assigns {want:?}");
        }
        Ok(())
    });
}

/// (b) `scatter` cuts a `[batch, n, heads, dim]` tensor into exactly each piece's rows
/// (`[batch, rows, heads, dim]`, row `i` = token `start + i stride`), and `gather_into` /
/// `gather_lse_into` write back exactly the rank's rows and no other: over all ranks,
/// every element is written once and the tensor comes back whole.
#[test]
fn scatter_and_gather_move_exactly_each_pieces_rows() {
    for_cases(256, any_case, |case| {
        let plan = case.plan()?;
        let (b, n, h, dim) = (case.batch, case.n, case.heads, 3);
        let x: Vec<u32> = (0..(b * n * h * dim) as u32).collect();
        let lse: Vec<u32> = (0..(b * h * n) as u32).collect();
        let mut writes = vec![0u32; x.len()];
        let mut lse_writes = vec![0u32; lse.len()];
        let mut back = vec![u32::MAX; x.len()];
        let mut lse_back = vec![u32::MAX; lse.len()];
        for r in 0..case.ranks {
            // scatter and gather read a piece's tokens at local rows `local..local + rows`.
            for (pi, p) in plan.pieces(r).iter().enumerate() {
                let held = plan.chunks.tokens(r).len();
                ensure!(p.local + p.rows <= held, "rank {r} piece {pi} {p:?} runs past the rank's {held} rows");
            }
            let pieces = plan.scatter(&x, dim, r);
            ensure!(pieces.len() == plan.pieces(r).len(), "rank {r}: scatter gives {} pieces", pieces.len());
            for (pi, (p, data)) in plan.pieces(r).iter().zip(&pieces).enumerate() {
                ensure!(data.len() == b * p.rows * h * dim, "rank {r} piece {pi}: {} elements", data.len());
                for bi in 0..b {
                    for (i, t) in rows_of(p).enumerate() {
                        let (from, to) = (((bi * p.rows) + i) * h * dim, (bi * n + t) * h * dim);
                        ensure!(
                            data[from..from + h * dim] == x[to..to + h * dim],
                            "rank {r} piece {pi} row {i} (batch {bi}) does not hold token {t}"
                        );
                    }
                }
            }
            let mut mine = vec![u32::MAX; x.len()];
            plan.gather_into(&mut mine, dim, r, &pieces);
            let lse_pieces: Vec<Vec<u32>> = plan
                .pieces(r)
                .iter()
                .map(|p| (0..b * h).flat_map(|bh| rows_of(p).map(move |t| (bh * n + t) as u32)).collect())
                .collect();
            let mut mine_lse = vec![u32::MAX; lse.len()];
            plan.gather_lse_into(&mut mine_lse, r, &lse_pieces);
            let owned = &assigned(n, case.ranks, &case.layout)[r];
            for (e, &v) in mine.iter().enumerate() {
                let t = e / (h * dim) % n;
                ensure!((v != u32::MAX) == owned.contains(&t), "gather_into of rank {r}: element {e} (token {t})");
                if v != u32::MAX {
                    writes[e] += 1;
                    back[e] = v;
                }
            }
            for (e, &v) in mine_lse.iter().enumerate() {
                let t = e % n;
                ensure!((v != u32::MAX) == owned.contains(&t), "gather_lse_into of rank {r}: entry {e} (token {t})");
                if v != u32::MAX {
                    lse_writes[e] += 1;
                    lse_back[e] = v;
                }
            }
        }
        ensure!(
            writes.iter().all(|&w| w == 1),
            "some element of the output is written {:?} times",
            writes.iter().max()
        );
        ensure!(lse_writes.iter().all(|&w| w == 1), "some LSE entry is written other than once");
        ensure!(back == x, "gathering every rank's pieces does not give the tensor back");
        ensure!(lse_back == lse, "gathering every rank's LSE pieces does not give the LSE back");
        Ok(())
    });
}

/// (c) Every key a rank attends is there when its kernel runs: for every query `q` of
/// piece `qi` of rank `r`, head `h` and key `k` (piece `kj` of rank `src`) that `q`
/// attends in some batch row `b` (the documented masks, causality and padding applied
/// here), `(qi, kj)` is in `needed(r, src)`; when `src != r`, `kj` is in
/// `needed_pieces(r, src)` and, if the piece travels packed, `kept_rows(r, src, kj)` holds
/// the entry `(b * rows + row(k)) * heads + h`. Every GPU pattern (LongNet with every
/// offset rule and short last segments), every layout, empty ranks.
#[test]
fn every_attended_key_is_needed_and_kept() {
    let mut packed = 0;
    for_cases(384, any_case, |case| check_needed_and_kept(case, 0).map(|p| packed += p));
    assert!(packed > 0, "no case sent packed rows: the kept-row half of the check never ran");
}

/// (c) for LongNet's short last segment: `n = q w + s`, the segment `[q w, n)` split over
/// two ranks; every key of it that a query of another rank attends is in a needed pair
/// and, when packed, in the kept rows. Over the run, such keys must go through kept lists
/// (the test checks it saw them).
#[test]
fn short_last_segment_keys_are_kept() {
    let mut packed = 0;
    for_cases(384, short_last_segment_case, |(case, start)| check_needed_and_kept(case, *start).map(|p| packed += p));
    assert!(packed > 0, "no short-last-segment key travelled packed: the test checks too little");
}

/// (d) `kept_rows` lists only rows a dilated branch keeps: every entry is in range, the
/// list is strictly ascending, and its position is kept in its head by some branch
/// (`(t - segment start) mod r = o(h)`); a rank's own pieces and every non-dilated
/// pattern travel whole (`None`); `sent_len` is the kept rows' elements.
#[test]
fn kept_rows_are_rows_a_branch_keeps() {
    for_cases(384, any_case, |case| {
        let plan = case.plan()?;
        for r in 0..case.ranks {
            for src in 0..case.ranks {
                for (kj, p) in plan.pieces(src).iter().enumerate() {
                    let kept = plan.kept_rows(r, src, kj);
                    let dilated: Vec<BranchRule> = match &case.pat {
                        Pat::Dilated(bs) if src != r => bs
                            .iter()
                            .map(|&(w, rate, rule)| {
                                let heads = case.heads;
                                let o: Box<dyn Fn(usize, usize) -> usize> =
                                    Box::new(move |h, _| offset(rule, rate, h, heads));
                                (w, rate, o)
                            })
                            .collect(),
                        Pat::Expr(e) if src != r && *e == LONGNET_EXPRESSION.index => {
                            let ((w, rate), o) = (LONGNET_EXPRESSION.branch, LONGNET_EXPRESSION.offset);
                            let o: Box<dyn Fn(usize, usize) -> usize> = Box::new(move |h, _| o(h));
                            vec![(w, rate, o)]
                        }
                        Pat::Rotating if src != r => ROTATING_BRANCHES
                            .iter()
                            .map(|&(w, rate, per_segment)| {
                                let o: Box<dyn Fn(usize, usize) -> usize> =
                                    Box::new(move |h, s| (h + per_segment * s) % rate);
                                (w, rate, o)
                            })
                            .collect(),
                        _ => {
                            ensure!(kept.is_none(), "kept_rows({r}, {src}, {kj}) is a list for {:?}", case.pat);
                            continue;
                        }
                    };
                    let Some(kept) = kept else { continue };
                    ensure!(kept.windows(2).all(|w| w[0] < w[1]), "kept_rows({r}, {src}, {kj}) not strictly ascending");
                    ensure!(plan.sent_len(r, src, kj) == kept.len() * HEAD_DIM, "sent_len({r}, {src}, {kj})");
                    for &e in kept {
                        let e = e as usize;
                        let hk = case.kv_heads;
                        let (g, i, b) = (e % hk, e / hk % p.rows, e / hk / p.rows);
                        ensure!(b < case.batch, "kept_rows({r}, {src}, {kj}): entry {e} out of range");
                        let t = p.start + i * p.stride;
                        // K/V head g serves query heads g * group .. (g + 1) * group.
                        let group = case.heads / hk;
                        let kept_by_a_branch = (g * group..(g + 1) * group)
                            .any(|h| dilated.iter().any(|(w, rate, o)| branch_keeps(*w, *rate, o(h, t / w), t)));
                        ensure!(
                            kept_by_a_branch,
                            "kept_rows({r}, {src}, {kj}) lists token {t} K/V head {g}, kept by no branch for its query heads"
                        );
                    }
                }
            }
        }
        Ok(())
    });
}

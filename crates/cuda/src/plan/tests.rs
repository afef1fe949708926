//! The tile planner's tests: soundness against the reference's key sets for every pattern
//! and tile shape the kernels use, exactness where the plan claims it.

use super::*;
use crate::family::{FWD_Q_TILE, TILE};
use crate::spec::GpuSpec;
use ringdil_reference::pattern::{Dilated, key_counts};

/// Tiles (of `TILE` x `TILE`) holding at least one allowed (query, key) pair of any head,
/// from the reference's key multiplicities (causality and padding applied as the
/// reference does).
fn needed_tiles(spec: &GpuSpec, heads: usize, n: usize) -> Vec<(usize, usize)> {
    needed_tiles_of(spec, heads, n, (TILE, TILE))
}

/// The same for tiles of `q_tile` x `k_tile`.
fn needed_tiles_of(spec: &GpuSpec, heads: usize, n: usize, (q_tile, k_tile): (usize, usize)) -> Vec<(usize, usize)> {
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
    plan(&spec.pattern, None, spec.causal, &IndexMap::whole(n), (TILE, TILE))
}

/// Tile shapes the kernels plan over: the backward's, the mma forward's and the wgmma
/// forward's at d = 64 (`Family::forward_q_tile`, `Family::forward_key_tile`).
const SHAPES: [(usize, usize); 3] = [(TILE, TILE), (FWD_Q_TILE, TILE), (3 * TILE, 2 * TILE)];

fn planned(p: &TilePlan) -> Vec<(usize, usize)> {
    (0..p.row_tiles).flat_map(|r| p.row(r).iter().map(move |&c| (r, c as usize))).collect()
}

/// The planned tiles marked full.
fn marked_full(p: &TilePlan) -> Vec<(usize, usize)> {
    planned(p).into_iter().filter(|&(r, c)| p.visit(r, c) == Visit::Full).collect()
}

/// Tiles of a whole sequence of `n` whose every pair (positions below `n`) is allowed for
/// every head, from the reference's key multiplicities with causality applied.
fn full_tiles_of(spec: &GpuSpec, heads: usize, n: usize, (q_tile, k_tile): (usize, usize)) -> Vec<(usize, usize)> {
    let reference = spec.to_reference();
    let (rt, ct) = (n.div_ceil(q_tile), n.div_ceil(k_tile));
    let mut full = vec![vec![true; ct]; rt];
    for h in 0..heads {
        for i in 0..n {
            for (j, &c) in key_counts(reference.pattern.as_ref(), i, h, heads, n).iter().enumerate() {
                if c == 0 || (spec.causal && j > i) {
                    full[i / q_tile][j / k_tile] = false;
                }
            }
        }
    }
    (0..rt).flat_map(|r| (0..ct).map(move |c| (r, c))).filter(|&(r, c)| full[r][c]).collect()
}

#[test]
fn dense_causal_and_window_plans_are_exactly_the_needed_tiles() {
    for n in [1, 63, 64, 65, 257, 331] {
        for causal in [false, true] {
            for pattern in [
                GpuPattern::Dense,
                GpuPattern::Window { left: 70, right: 5 },
                GpuPattern::Window { left: 0, right: 130 },
                // Tile edges (multiples of 64) one position inside and at each window edge.
                GpuPattern::Window { left: 126, right: 62 },
                GpuPattern::Window { left: 127, right: 63 },
            ] {
                let spec = GpuSpec::new(pattern).causal(causal);
                for shape in SHAPES {
                    let p = plan(&spec.pattern, None, causal, &IndexMap::whole(n), shape);
                    assert_eq!(planned(&p), needed_tiles_of(&spec, 1, n, shape), "{spec:?} n={n} {shape:?}");
                    assert_eq!(marked_full(&p), full_tiles_of(&spec, 1, n, shape), "{spec:?} n={n} {shape:?}: marks");
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
        let full = full_tiles_of(&spec, 1, n, (TILE, TILE));
        assert!(marked_full(&p).iter().all(|t| full.contains(t)), "{spec:?}: a tile marked full is not");
    }
}

/// Block-sparse marks are exact where tiles hold whole blocks and no global token: a
/// local band of 128-token blocks (the benchmark's) and a strided one, every tile shape.
#[test]
fn block_sparse_marks_are_exact_on_whole_blocks() {
    let n = 1000;
    for (bs, causal) in [
        (BlockSparse::local(128, 1), false),
        (BlockSparse::local(128, 1), true),
        (BlockSparse { dilated_stride: Some(3), ..BlockSparse::local(192, 0) }, false),
    ] {
        let spec = GpuSpec::new(GpuPattern::BlockSparse(bs)).causal(causal);
        for shape in SHAPES {
            let p = plan(&spec.pattern, None, causal, &IndexMap::whole(n), shape);
            let full = full_tiles_of(&spec, 1, n, shape);
            assert_eq!(marked_full(&p), full, "{spec:?} {shape:?}");
            assert!(!full.is_empty());
        }
    }
}

#[test]
fn dilated_identity_plan_is_sound_per_branch() {
    let d = Dilated::longnet(&[(64, 1), (100, 2), (256, 8)]);
    let n = 333;
    for (i, branch) in d.branches.iter().enumerate() {
        for causal in [false, true] {
            let spec = GpuSpec::new(GpuPattern::Dilated(d.single_branch(i))).causal(causal);
            let p = plan(&spec.pattern, Some(branch), causal, &IndexMap::whole(n), (TILE, TILE));
            for (r, c) in needed_tiles(&spec, 8, n) {
                assert!(p.contains(r, c), "branch {i} causal={causal}: tile ({r}, {c}) not planned");
            }
        }
    }
    // A 64-token segment: only the diagonal tiles.
    let spec = GpuSpec::new(GpuPattern::Dilated(d.single_branch(0)));
    let p = plan(&spec.pattern, Some(&d.branches[0]), false, &IndexMap::whole(640), (TILE, TILE));
    assert_eq!(p.visits(), 10);
}

/// A built-in branch of dilation 1 on a plain launch: planned and marked exactly (every
/// pair of a tile inside one segment is allowed, for every head and offset rule), on every
/// tile shape, with segments that tiles straddle (100) and that they divide (128).
#[test]
fn dilation_one_plans_and_marks_are_exact() {
    use ringdil_reference::pattern::Offset;
    let n = 333;
    for (w, offset) in [(100, Offset::HeadMod), (128, Offset::HeadBlock), (64, Offset::Fixed(0))] {
        let mut d = Dilated::longnet(&[(w, 1)]);
        d.branches[0].offset = offset;
        for causal in [false, true] {
            let spec = GpuSpec::new(GpuPattern::Dilated(d.clone())).causal(causal);
            for shape in SHAPES {
                let p = plan(&spec.pattern, Some(&d.branches[0]), causal, &IndexMap::whole(n), shape);
                let what = format!("w {w} causal {causal} {shape:?}");
                assert_eq!(planned(&p), needed_tiles_of(&spec, 4, n, shape), "{what}");
                assert_eq!(marked_full(&p), full_tiles_of(&spec, 4, n, shape), "{what}: marks");
            }
        }
    }
    // Dilation 2 keeps half the positions: never marked.
    let d = Dilated::longnet(&[(128, 2)]);
    let p = plan(&GpuPattern::Dilated(d.clone()), Some(&d.branches[0]), false, &IndexMap::whole(n), (TILE, TILE));
    assert!(marked_full(&p).is_empty());
}

#[test]
fn ring_chunk_plan_uses_global_positions() {
    // Queries 128..256 against keys 0..128 under causality: every tile is below the
    // diagonal; the reverse chunk pair is empty.
    let spec = GpuSpec::new(GpuPattern::Dense).causal(true);
    let below = plan(&spec.pattern, None, true, &chunk(128, 0, 128), (TILE, TILE));
    assert_eq!(below.visits(), 4);
    let above = plan(&spec.pattern, None, true, &chunk(0, 128, 128), (TILE, TILE));
    assert_eq!(above.visits(), 0);
}

#[test]
fn compact_plan_covers_segments_and_costs_the_branch_share() {
    // n = 4096, w = 1024, r = 4: 4 segments of 256 compact rows = 4 tiles each, so
    // 4 * 4 * 4 = 64 tiles of 64x64, i.e. n*w/r^2 / 64^2 = 64: the branch's share.
    let (n, w, r) = (4096, 1024, 4);
    let map = IndexMap::Compact {
        segment: w,
        dilation: r,
        q: Axis::contiguous(0, n),
        k: Axis::contiguous(0, n),
        starts: None,
    };
    assert_eq!(map.extents(), (1024, 1024));
    let p = plan(&GpuPattern::Dense, None, false, &map, (TILE, TILE));
    assert_eq!(p.visits(), n * w / (r * r) / (TILE * TILE));
    let causal = plan(&GpuPattern::Dense, None, true, &map, (TILE, TILE));
    assert_eq!(causal.visits(), 4 * (4 * 5 / 2));
    // Segments that do not fill tiles (w = 100, r = 3: 34 compact rows per segment).
    let whole = Axis::contiguous(0, 1000);
    let map = IndexMap::Compact { segment: 100, dilation: 3, q: whole, k: whole, starts: None };
    let p = plan(&GpuPattern::Dense, None, false, &map, (TILE, TILE));
    for s in 0..10 {
        let (a, b) = (s * 34 / TILE, (s * 34 + 33) / TILE);
        assert!(p.contains(a, b) && p.contains(b, a));
    }
}

#[test]
fn forward_plan_with_128_row_query_tiles() {
    // Causal, 300 tokens: query tiles [0,128), [128,256), [256,300) see key tiles up
    // to their last row: 2, 4 and 5 tiles.
    let p = plan(&GpuPattern::Dense, None, true, &IndexMap::whole(300), (FWD_Q_TILE, TILE));
    assert_eq!((p.row_tiles, p.col_tiles), (3, 5));
    assert_eq!((p.row(0).len(), p.row(1).len(), p.row(2).len()), (2, 4, 5));
    let spec = GpuSpec::new(GpuPattern::Window { left: 10, right: 0 }).causal(true);
    for (r, c) in needed_tiles(&spec, 1, 300) {
        let q_tile = r * TILE / FWD_Q_TILE;
        let p = plan(&spec.pattern, None, true, &IndexMap::whole(300), (FWD_Q_TILE, TILE));
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
    // Marks travel with their tiles: below the diagonal full, on it partial.
    for (r, c) in planned(&p) {
        assert_eq!(t.visit(c, r), p.visit(r, c));
        assert_eq!(p.visit(r, c), if c < r { Visit::Full } else { Visit::Partial }, "({r}, {c})");
    }
}

fn chunk(q_offset: usize, k_offset: usize, rows: usize) -> IndexMap {
    IndexMap::Identity { q: Axis::contiguous(q_offset, rows), k: Axis::contiguous(k_offset, rows) }
}

/// Every allowed pair between two axes lies in a planned tile (forward and backward tiles).
fn assert_sound(spec: &GpuSpec, d: Option<&Dilated>, map: &IndexMap, n: usize, heads: usize) {
    let branch = d.map(|d| &d.branches[0]);
    assert_sound_with(spec, d, map, n, heads, |tiles| plan(&spec.pattern, branch, spec.causal, map, tiles));
}

/// [`assert_sound`] for the plans `plan_of` makes for each tile shape.
fn assert_sound_with(
    spec: &GpuSpec,
    d: Option<&Dilated>,
    map: &IndexMap,
    n: usize,
    heads: usize,
    plan_of: impl Fn((usize, usize)) -> TilePlan,
) {
    let reference = spec.to_reference();
    let (qa, ka) = map.axes();
    for (q_tile, k_tile) in SHAPES {
        let p = plan_of((q_tile, k_tile));
        // A full mark is sound when every pair of the marked tile is allowed; compact
        // launches are never marked (the kernels decide their full tiles themselves).
        let identity = matches!(map, IndexMap::Identity { .. });
        assert!(identity || p.full.iter().all(|&f| f == 0), "{map:?}: a compact plan is marked");
        for h in 0..heads {
            for i in 0..qa.rows {
                let qpos = qa.offset + i * qa.stride;
                let counts = key_counts(reference.pattern.as_ref(), qpos, h, heads, n);
                for j in 0..ka.rows {
                    let kpos = ka.offset + j * ka.stride;
                    if counts[kpos] == 0 || (spec.causal && kpos > qpos) {
                        assert!(
                            !identity || p.visit(i / q_tile, j / k_tile) != Visit::Full,
                            "{map:?} h {h}: q {qpos} k {kpos} is not allowed in a tile marked full"
                        );
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
    let chunks = [(0, 250, 250, 250), (250, 250, 0, 250), (333, 201, 100, 300), (700, 300, 700, 300), (5, 7, 990, 10)];
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
                    starts: None,
                };
                assert_sound(&spec, Some(&one), &map, n, 5);
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
        starts: None,
    };
    let p = plan(&GpuPattern::Dense, None, false, &map, (TILE, TILE));
    assert_eq!(map.extents(), (512, 512));
    assert_eq!(map.bases(), (0, 0));
    assert_eq!(p.visits(), 4);
    // Causal, keys after the queries: nothing.
    let after = IndexMap::Compact {
        segment: 4096,
        dilation: 8,
        q: Axis::contiguous(1024, 1024),
        k: Axis::contiguous(2048, 1024),
        starts: None,
    };
    assert_eq!(plan(&GpuPattern::Dense, None, true, &after, (TILE, TILE)).visits(), 0);
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
                assert_sound(spec, *dil, &map, n, 2);
            }
        }
    }
    // Causal striped: the plan is the lower triangle of local indices (exact).
    let axis = |x: usize| Axis { offset: x, stride: ranks, rows: 64 * 4 };
    let p = plan(&GpuPattern::Dense, None, true, &IndexMap::Identity { q: axis(0), k: axis(1) }, (TILE, TILE));
    assert_eq!(p.visits(), 4 * 5 / 2);
}

/// Mask expressions: the plan holds every allowed pair of every head (whole sequences,
/// ring chunks, striped axes, each tile shape), and for masks the classification decides
/// in one evaluation (a band, blocks on the diagonal) it is exactly the needed tiles.
#[test]
fn expression_plans_are_sound_and_exact_where_one_evaluation_decides() {
    use super::expression::{self, ExprScope};
    use ringdil_reference::pattern::ExprPattern;
    use ringdil_reference::pattern::expr::Constants;
    let expr = |text: &str| ExprPattern::new(text, &Constants::new()).unwrap();
    let masks = [
        ("abs(q - k) <= 40", true),
        ("q / 96 == k / 96", true),
        ("k < 8 || q - k <= 70 && q - k >= -5", false),
        ("(q - k) % (h + 2) == 0 || k % 64 == h", false),
        ("if h < H / 2 then abs(q - k) < 100 else k >= n - 50", false),
    ];
    let heads = 4;
    for (text, exact) in masks {
        for causal in [false, true] {
            let spec = GpuSpec::new(GpuPattern::Expr(expr(text))).causal(causal);
            let GpuPattern::Expr(e) = &spec.pattern else { unreachable!() };
            for n in [1, 100, 257] {
                let scope = ExprScope { first: 0, count: heads, total: heads, seq_len: n };
                for shape in SHAPES {
                    let p = expression::plan(e, scope, causal, &IndexMap::whole(n), shape);
                    let needed = needed_tiles_of(&spec, heads, n, shape);
                    let got = planned(&p);
                    assert!(needed.iter().all(|t| got.contains(t)), "{text} causal {causal} n {n} {shape:?}: unsound");
                    let full = full_tiles_of(&spec, heads, n, shape);
                    let marked = marked_full(&p);
                    assert!(marked.iter().all(|t| full.contains(t)), "{text} causal {causal} n {n} {shape:?}: a mark");
                    if exact {
                        assert_eq!(got, needed, "{text} causal {causal} n {n} {shape:?}: not exact");
                        assert_eq!(marked, full, "{text} causal {causal} n {n} {shape:?}: marks not exact");
                    }
                }
            }
            // Ring chunks and a striped rank's rows (stride 3), every head.
            let n = 300;
            let scope = ExprScope { first: 0, count: heads, total: heads, seq_len: n };
            let maps = [
                chunk(150, 0, 150),
                chunk(0, 150, 150),
                IndexMap::Identity {
                    q: Axis { offset: 1, stride: 3, rows: 100 },
                    k: Axis { offset: 2, stride: 3, rows: 99 },
                },
            ];
            for map in maps {
                assert_sound_with(&spec, None, &map, n, heads, |tiles| expression::plan(e, scope, causal, &map, tiles));
            }
        }
    }
}

//! Host tests of a nested union's launches (`crate::union_pieces`): the kernels' rules,
//! transcribed here from `kernels/index_map.cuh` and `kernels/mask.cuh` (`row_of`,
//! `compact_key_indices`, `compact_query_span`, `allowed` with `hole_keys`), applied to
//! every launch's parameters and the call's buffer (offset and hole tables as the kernels
//! read them), must give exactly the reference's union key sets, each pair from one launch
//! only, inside the launch's tile plans; the backward's rule must give the transpose. On a
//! whole sequence and on ring pieces (contiguous at offsets, and strided: a striped
//! layout, which evaluates the branch in place), causal and not.

use super::*;
use ringdil_reference::pattern::Pattern;
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};
use std::collections::BTreeSet;

/// A nested union of `(segment, dilation, offset)` branches.
fn union(branches: &[(usize, usize, &str)]) -> ExprDilated {
    let c = Constants::new();
    let branches = branches
        .iter()
        .map(|&(w, r, o)| ExprBranch::new(&w.to_string(), &r.to_string(), o, None, &c).unwrap())
        .collect();
    ExprDilated { branches, combine: ExprCombine::Union }
}

/// The i32 at byte `at` of the call's buffer.
fn int(bytes: &[u8], at: usize) -> i64 {
    i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as i64
}

/// The (head, query position, key position) pairs of every launch by the kernels' forward
/// rule, checking that each lies in its launch's tile plans and that the backward rule
/// gives the same pairs of each launch.
fn kernel_pairs(shape: &Shape, spec: &GpuSpec, chunk: &Chunk) -> Vec<(usize, usize, usize)> {
    let l = launches(shape, spec, chunk).unwrap();
    let bytes = block_mask_bytes(spec, shape, chunk).unwrap().unwrap();
    let mut out = Vec::new();
    for l in &l {
        let p = l.params;
        let buf = |at: usize| int(&bytes, l.table_offset + at);
        let (w, r, m) = (p.dil_segment as i64, p.dil_rate as i64, p.dil_per_seg as i64);
        let n = p.seq_len as i64;
        let offset = |h: i64, s: i64| buf(4 * ((p.head_base as i64 + h) * p.dil_segments as i64 + s) as usize);
        // hole_keys / hole_queries: the kept side of position x's hole, keys or queries.
        let side = |h: i64, x: i64, keys: bool| -> (i64, i64) {
            if p.hole_side == 0 {
                return (0, i64::MAX);
            }
            let at =
                p.hole_table as i64 + 4 * ((p.head_base as i64 + h) * p.hole_units as i64 + x / p.hole_unit as i64);
            let hw = buf(at as usize);
            let start = if hw > 0 { x - x % hw } else { x };
            let below = p.hole_side == PieceSide::Below as i32;
            match (keys, below, hw > 0) {
                (true, true, true) => (0, start - 1),
                (true, true, false) => (0, x),
                (true, false, true) => (start + hw, i64::MAX),
                (true, false, false) => (x + 1, i64::MAX),
                (false, true, true) => (start + hw, i64::MAX),
                (false, true, false) => (x, i64::MAX),
                (false, false, true) => (0, start - 1),
                (false, false, false) => (0, x - 1),
            }
        };
        let (qa, ka) = (l.map.axes().0, l.map.axes().1);
        let (qb, kb) = l.map.bases();
        // row_of then pos_of: the position of launch index c on an axis, or None.
        let pos = |c: usize, h: i64, axis: crate::plan::Axis, cbase: usize, n_idx: i32| -> Option<i64> {
            if c >= n_idx as usize {
                return None;
            }
            if p.compact == 0 {
                return Some((axis.offset + c * axis.stride) as i64);
            }
            let g = (c + cbase) as i64;
            let (s, t) = (g / m, g % m);
            let x = s * w + offset(h, s) + t * r;
            let row = x - axis.offset as i64;
            (x < ((s + 1) * w).min(n) && row >= 0 && row < axis.rows as i64).then_some(x)
        };
        let klimit = n;
        // The launch indices of compact segment s (every index on an identity map).
        let segment_indices = |s: i64, cbase: usize, n_idx: i32| {
            if p.compact == 0 {
                return 0..n_idx as usize;
            }
            let first = (s * m) as usize;
            first.saturating_sub(cbase)..((first + m as usize).saturating_sub(cbase)).min(n_idx as usize)
        };
        for h in p.head_first as i64..(p.head_first + p.head_count) as i64 {
            let global = p.head_base as i64 + h;
            let mut fwd = BTreeSet::new();
            for qc in 0..p.nq as usize {
                let Some(q) = pos(qc, h, qa, qb, p.nq) else { continue };
                for kc in segment_indices(q / w, kb, p.nk) {
                    let Some(k) = pos(kc, h, ka, kb, p.nk) else { continue };
                    let (lo, hi) = side(h, q, true);
                    let seen = if p.compact == 1 {
                        // compact_key_indices: q's segment, the key axis, padding, causality.
                        let s = q / w;
                        k / w == s && k >= lo && k <= hi && k < klimit && (p.causal == 0 || k <= q)
                    } else {
                        // allowed: same segment, both on the lattice, causality, the hole.
                        let s = q / w;
                        let o = offset(h, s);
                        k / w == s
                            && (q - s * w) % r == o
                            && (k - s * w) % r == o
                            && (p.causal == 0 || k <= q)
                            && k >= lo
                            && k <= hi
                    };
                    if seen {
                        assert!(l.fwd.contains(qc / l.fwd_q_tile, kc / l.fwd_k_tile), "forward plan misses {qc}, {kc}");
                        assert!(l.cols.contains(kc / TILE, qc / TILE), "backward plan misses {kc}, {qc}");
                        fwd.insert((q, k));
                        out.push((global as usize, q as usize, k as usize));
                    }
                }
            }
            // The backward's rule, per key (compact_query_span / allowed transposed).
            let mut bwd = BTreeSet::new();
            for kc in 0..p.nk as usize {
                let Some(k) = pos(kc, h, ka, kb, p.nk) else { continue };
                let (lo, hi) = side(h, k, false);
                for qc in segment_indices(k / w, qb, p.nq) {
                    let Some(q) = pos(qc, h, qa, qb, p.nq) else { continue };
                    let s = k / w;
                    let o = offset(h, s);
                    let lattice = p.compact == 1 || ((q - s * w) % r == o && (k - s * w) % r == o);
                    if q / w == s && lattice && q >= lo && q <= hi && (p.causal == 0 || q >= k) {
                        bwd.insert((q, k));
                    }
                }
            }
            assert_eq!(fwd, bwd, "launch {:?} head {h}: the backward's pairs", (p.dil_segment, p.hole_side));
        }
    }
    out
}

/// [`kernel_pairs`] sorted, checking that no pair came from two launches (`what` names
/// the call in a failure).
fn pairs_once(shape: &Shape, spec: &GpuSpec, chunk: &Chunk, what: &str) -> Vec<(usize, usize, usize)> {
    let mut pairs = kernel_pairs(shape, spec, chunk);
    let len = pairs.len();
    pairs.sort_unstable();
    pairs.dedup();
    assert_eq!(pairs.len(), len, "{what}: a pair from two launches");
    pairs
}

/// The reference's pairs of the query rows `qs` and key rows `ks` (positions).
fn reference_pairs(
    pattern: &dyn Pattern,
    heads: usize,
    n: usize,
    causal: bool,
    (qs, ks): (&[usize], &[usize]),
) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut runs = Vec::new();
    for h in 0..heads {
        for &q in qs {
            runs.clear();
            pattern.key_runs(q, h, heads, n, &mut runs);
            let keys: BTreeSet<usize> = runs.iter().flat_map(|r| r.iter()).collect();
            out.extend(keys.into_iter().filter(|k| ks.contains(k) && (!causal || *k <= q)).map(|k| (h, q, k)));
        }
    }
    out
}

#[test]
fn a_nested_union_runs_as_disjoint_pieces_with_the_references_keys() {
    let geometries: [&[(usize, usize, &str)]; 4] = [
        &[(16, 1, "0"), (32, 4, "h + s"), (64, 8, "h * s + 1")],
        &[(12, 2, "h"), (24, 2, "s"), (48, 4, "3 * h - s * s")],
        &[(8, 4, "h + s"), (40, 4, "if s % 2 == 0 then h else h + 1"), (80, 8, "s / 2 - h")],
        &[(10, 1, "0"), (20, 1, "0"), (60, 3, "h + s")],
    ];
    // And one over several tiles per segment (the plans' skipping).
    let long: &[(usize, usize, &str)] = &[(48, 2, "h"), (96, 2, "h + s"), (384, 4, "h * s + 1")];
    for (branches, n) in geometries.into_iter().map(|g| (g, 150)).chain([(long, 2100)]) {
        let heads = 3;
        let pattern = union(branches);
        assert!(pattern.is_nested_union(), "{branches:?}");
        let gpu = GpuPattern::dilated_expr(pattern.clone(), format!("{branches:?}"));
        assert!(matches!(gpu, GpuPattern::DilatedExpr(_)), "{branches:?}: compact launches");
        for causal in [false, true] {
            let spec = GpuSpec::new(gpu.clone()).causal(causal);
            // The whole sequence, two ring pieces at offsets (queries after keys, and the
            // diagonal piece), and a striped piece.
            let (a, b) = (n / 5, n / 3);
            let pieces: [(usize, usize, usize, usize, usize); 4] =
                [(0, n, 0, n, 1), (3 * a, a, a, b, 1), (b, a, b, a, 1), (1, n / 3, 2, n / 3, 3)];
            for (q0, q_rows, k0, k_rows, stride) in pieces {
                let shape = Shape { q_rows, k_rows, ..Shape::square(1, n, heads, 64) };
                let chunk = Chunk { q_stride: stride, k_stride: stride, ..Chunk::new(q0, k0, n) };
                let what = format!("{branches:?} causal {causal}, piece {q0}+{q_rows}, {k0}+{k_rows} / {stride}");
                let ours = pairs_once(&shape, &spec, &chunk, &what);
                let qs: Vec<usize> = (0..q_rows).map(|i| q0 + i * stride).collect();
                let ks: Vec<usize> = (0..k_rows).map(|i| k0 + i * stride).collect();
                let mut want = reference_pairs(&pattern, heads, n, causal, (&qs, &ks));
                want.sort_unstable();
                assert_eq!(ours, want, "{what}");
            }
            // One launch for the first branch, then one per kept side of the holes.
            let shape = Shape::square(1, n, heads, 64);
            let l = launches(&shape, &spec, &Chunk::whole(&shape)).unwrap();
            assert_eq!(l.len(), 1 + (branches.len() - 1) * if causal { 1 } else { 2 });
            assert!(l.iter().skip(1).all(|l| l.params.hole_side != 0 && l.params.compact == 1));
        }
    }
}

/// The pieces cost less than the branches: LongNet (2048, 1), (4096, 4), (8192, 8) with
/// rotating offsets, causal, at n = 16384 visits fewer forward tiles as a union than the
/// same branches merged by their softmax denominators (which count shared keys twice).
#[test]
fn union_pieces_skip_the_tiles_inside_every_heads_hole() {
    let branches = [(2048, 1, "0"), (4096, 4, "h + s"), (8192, 8, "h + s")];
    let shape = Shape::square(1, 16384, 16, 128);
    let launches = |combine| {
        let p = ExprDilated { combine, ..union(&branches) };
        let spec = GpuSpec::new(GpuPattern::dilated_expr(p, format!("{combine:?}"))).causal(true);
        launches_for(&shape, &spec, &Chunk::whole(&shape), Family::Wgmma).unwrap()
    };
    let (pieces, merged) = (launches(ExprCombine::Union), launches(ExprCombine::SoftmaxDenominator));
    assert_eq!((pieces.len(), merged.len()), (3, 3));
    // Branch (4096, 4): 1024 kept rows in each of 4 segments, in tiles of Q query and K
    // key rows. Causal, query tile t sees the key tiles up to its last row; the piece
    // only the second half's rows against the first half's keys: each row's hole is its
    // 2048-segment, for every head.
    let (q, k) = (pieces[1].fwd_q_tile, pieces[1].fwd_k_tile);
    assert!(512 % q == 0 && 512 % k == 0);
    let causal: usize = (0..1024 / q).map(|t| ((t + 1) * q - 1) / k + 1).sum();
    assert_eq!((merged[1].fwd.visits(), pieces[1].fwd.visits()), (4 * causal, 4 * (512 / q) * (512 / k)));
    assert_eq!(pieces[0].fwd, merged[0].fwd);
    assert!(pieces[2].fwd.visits() < merged[2].fwd.visits());
}

/// Random nested unions (2 to 4 branches, each segment a multiple of the last, each
/// dilation a multiple of the last dividing its segment, offsets from a list of rules in
/// `h` and `s`), lengths no segment divides, causal or not, on a whole sequence, a ring
/// piece, a striped piece or a head slice (Ulysses: the hole table is indexed by global
/// heads): the kernels' rules over the launches give the reference's union, each pair once.
#[test]
fn random_nested_unions_match_the_reference() {
    use ringdil_reference::random::SplitMix64;
    const RULES: [&str; 5] = ["h + s", "0", "3 * h - s * s", "h * s + 1", "if s % 2 == 0 then h else h + 1"];
    let mut rng = SplitMix64::new(21);
    for case in 0..40 {
        let mut geometry = vec![(0, 0, ""); rng.range(2, 4)];
        let (mut w, mut r) = (0, 0);
        for (i, g) in geometry.iter_mut().enumerate() {
            (w, r) = if i == 0 {
                let r0 = rng.range(1, 3);
                (r0 * rng.range(1, 4), r0)
            } else {
                // Grow the dilation only where it still divides the grown segment.
                let w2 = w * rng.range(1, 3);
                let r2 = r * rng.range(1, 3);
                (w2, if w2 % r2 == 0 { r2 } else { r })
            };
            *g = (w, r, RULES[rng.range(0, RULES.len() - 1)]);
        }
        let pattern = union(&geometry);
        assert!(pattern.is_nested_union(), "case {case}: {geometry:?}");
        let (heads, n, causal) = (rng.range(1, 4), rng.range(1, 200), rng.uniform() < 0.5);
        let spec = GpuSpec::new(GpuPattern::dilated_expr(pattern.clone(), format!("{geometry:?}"))).causal(causal);
        let (shape, chunk, qs, ks, first) = match rng.range(0, 3) {
            0 => (Shape::square(1, n, heads, 64), Chunk::new(0, 0, n), (0..n).collect(), (0..n).collect(), 0),
            1 => {
                let (q0, k0) = (rng.range(0, n - 1), rng.range(0, n - 1));
                let (qr, kr) = (rng.range(1, n - q0), rng.range(1, n - k0));
                let shape = Shape { q_rows: qr, k_rows: kr, ..Shape::square(1, n, heads, 64) };
                (shape, Chunk::new(q0, k0, n), (q0..q0 + qr).collect(), (k0..k0 + kr).collect(), 0)
            }
            2 => {
                let p = rng.range(2, 3).min(n);
                let (q0, k0) = (rng.range(0, p - 1), rng.range(0, p - 1));
                let (qr, kr) = ((n - q0).div_ceil(p), (n - k0).div_ceil(p));
                let shape = Shape { q_rows: qr, k_rows: kr, ..Shape::square(1, n, heads, 64) };
                let chunk = Chunk { q_stride: p, k_stride: p, ..Chunk::new(q0, k0, n) };
                let qs: Vec<usize> = (0..qr).map(|i| q0 + i * p).collect();
                let ks: Vec<usize> = (0..kr).map(|i| k0 + i * p).collect();
                (shape, chunk, qs, ks, 0)
            }
            _ => {
                // Heads first..first + count of `heads + 1`.
                let all = heads + 1;
                let first = rng.range(0, all - 1);
                let count = rng.range(1, all - first);
                let shape = Shape::square(1, n, count, 64);
                (shape, Chunk::new(0, 0, n).heads_of(first, all), (0..n).collect(), (0..n).collect(), first)
            }
        };
        let what = format!("case {case}: {geometry:?} n {n} heads {heads} causal {causal} chunk {chunk:?}");
        let ours = pairs_once(&shape, &spec, &chunk, &what);
        let all = chunk.pattern_heads(shape.heads);
        let mut want: Vec<_> = reference_pairs(&pattern, all, n, causal, (&qs, &ks))
            .into_iter()
            .filter(|&(h, _, _)| (first..first + shape.heads).contains(&h))
            .collect();
        want.sort_unstable();
        assert_eq!(ours, want, "{what}");
    }
}

/// A mask expression that is a nested union (the bench's rotating rule, scaled down) runs
/// as that `dilated_expr` union: its own `k <= q` becomes the call's causality, and the
/// launches, plans and buffer are the union's; their keys are the mask's.
#[test]
fn a_mask_that_is_a_nested_union_runs_as_that_union() {
    use ringdil_reference::pattern::ExprPattern;
    let branches = "q / 128 == k / 128 \
        || (q / 256 == k / 256 && q % 256 % 4 == (h + q / 256) % 4 && k % 256 % 4 == (h + k / 256) % 4) \
        || (q / 512 == k / 512 && q % 512 % 8 == (h + q / 512) % 8 && k % 512 % 8 == (h + k / 512) % 8)";
    let geometry = [(128, 1, "h + s"), (256, 4, "h + s"), (512, 8, "h + s")];
    let (shape, n) = (Shape::square(1, 1500, 4, 128), 1500);
    let chunk = Chunk::whole(&shape);
    for causal_mask in [true, false] {
        let text = if causal_mask { format!("k <= q && ({branches})") } else { branches.to_string() };
        let mask = ExprPattern::new(&text, &Constants::new()).unwrap();
        let expr = GpuSpec::new(GpuPattern::Expr(mask.clone()));
        let lowered = expr.lowered(&shape, &chunk).unwrap().expect("the mask is a nested union");
        assert_eq!(lowered.causal, causal_mask);
        let GpuPattern::DilatedExpr(u) = &lowered.pattern else { panic!("{:?}", lowered.pattern) };
        assert_eq!(u.compact_branches(4, n), union(&geometry).compact_branches(4, n), "dilation 1 keeps any offset");
        let ours = launches_for(&shape, &expr, &chunk, Family::Wgmma).unwrap();
        let theirs = launches_for(&shape, &lowered, &chunk, Family::Wgmma).unwrap();
        assert_eq!(ours.len(), if causal_mask { 3 } else { 5 });
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(format!("{:?}", a.params), format!("{:?}", b.params));
            assert_eq!((&a.fwd, &a.cols, a.table_offset), (&b.fwd, &b.cols, b.table_offset));
        }
        let got = pairs_once(&shape, &lowered, &chunk, &format!("causal mask {causal_mask}"));
        let all: Vec<usize> = (0..n).collect();
        let mut want = reference_pairs(&mask, 4, n, false, (&all, &all));
        want.sort_unstable();
        assert_eq!(got, want, "causal mask {causal_mask}");
    }
    // Inside documents the mask stays a mask (as mask tables).
    let mask = ExprPattern::new(branches, &Constants::new()).unwrap();
    let with_documents =
        GpuSpec::new(GpuPattern::Expr(mask)).documents(ringdil_reference::Documents::flat(vec![0, 700, 1500]));
    assert!(with_documents.nested_union().is_none());
}

//! The ring check's cases and comparisons (run by `ring_check`): distributed attention
//! against the f64 reference for every schedule the GPU runs, layout (contiguous,
//! zigzag, striped, unequal boundaries with a nearly empty or empty rank) and pattern
//! (dense, causal, window, LongNet dilated, with segments inside one rank and across
//! ranks; the head-group combine, whose 1/G scale is applied once after the steps; a
//! mask expression, a mask table, and compact `dilated_expr` patterns whose offsets
//! change per segment), on lengths that do not divide evenly; grouped-query
//! attention (8 query heads over 2 K/V heads, and multi-query), whose K/V pieces travel
//! at K/V heads; and packed documents ([`super::ring_packed`], also on the work-balanced split).
//!
//! Inputs are bf16-rounded normals ([`super::rounded`]). The ranks' output, LSE, dQ, dK
//! and dV pieces are gathered into host arrays that start as NaN (a row nobody wrote
//! fails) and compared with the reference's `attention` / `attention_backward` on the
//! same rounded inputs: relative L2 error below `bound(Bf16)` ([`compare`], in
//! [`super::ring_compare`] with the by-rank breakdown of a failure). With `R`
//! rings side by side (`dist::grid`) each ring covers a slice of the batch (cases use
//! batch `b + R - 1`, so an uneven split is covered) and its ranks' pieces go back into
//! its rows. [`run_virtual`] runs one ring on virtual ranks of one GPU, which the real
//! dense ring must match bit for bit ([`max_diff`]).

use super::rounded;
use crate::dist::ring::upload_dout;
use crate::dist::{DistPlan, DistResult, Grid, RankData, RankGrads, VirtualRanks};
use crate::gpu::Gpu;
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use crate::tensors::DevicePartial;
use cudarc::driver::CudaSlice;
use ndarray::{Array3, Array4};
use ringdil_reference::pattern::{Dilated, ExprCombine, ExprPattern};
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout};
use ringdil_reference::{Attention, attention, attention_backward};
use std::ops::Range;

pub use super::ring_compare::{compare, compare_explained, gradient_breakdown, max_diff};

/// One ring-check case: ranks per ring, rings side by side, the layout and pattern, and
/// the sizes.
pub struct Case {
    /// Ranks per ring.
    pub ranks: usize,
    /// Rings side by side (1: the plain ring).
    pub rings: usize,
    pub layout: Layout,
    pub layout_name: String,
    pub pattern: (&'static str, GpuSpec),
    pub batch: usize,
    pub heads: usize,
    /// K/V heads: `heads`, or a divisor (grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// v's head dim: `head_dim`, or MLA's 128 beside 192.
    pub value_dim: usize,
    pub seq: usize,
    /// Inputs and reference depend only on (size, pattern): computed once, shared by
    /// every rank count, layout and schedule.
    pub key: (usize, usize),
}

/// The patterns of a sequence of `n` tokens (the longest LongNet segment capped at `n`).
fn patterns(n: usize) -> Vec<(&'static str, GpuSpec)> {
    vec![
        ("dense", GpuSpec::new(GpuPattern::Dense)),
        ("causal", GpuSpec::new(GpuPattern::Dense).causal(true)),
        ("window 100/0 causal", GpuSpec::new(GpuPattern::Window { left: 100, right: 0 }).causal(true)),
        (
            "dilated (64,1)(256,2)(512,4) causal",
            GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(64, 1), (256, 2), (512.min(n), 4)]))).causal(true),
        ),
        ("dilated (128,2)", GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(128, 2)])))),
        // The head-group combine: each group of heads sees its own branch, and outputs and
        // gradients are scaled by 1/G once, after the steps' unscaled merges and sums.
        (
            "head groups (64,1)(256,2) causal",
            GpuSpec::new(GpuPattern::Dilated(Dilated::head_groups(&[(64, 1), (256, 2)]))).causal(true),
        ),
        // A mask expression (its own kernel module): a band whose width grows with the
        // head, plus global keys, at global positions on every rank's pieces.
        ("expr band per head + globals causal", expression("abs(q - k) <= 40 + 20 * h || k < 4").causal(true)),
        // A reference pattern read from a mask table (indexed by global positions).
        (
            "table: rotating offsets (dilated_expr, union) causal",
            GpuSpec::new(GpuPattern::table(super::tables::rotating_union())).causal(true),
        ),
        // Compact dilated_expr patterns (`GpuPattern::DilatedExpr`): the LongNet launches
        // with an offset per head and segment from a table, so a rank's pieces must keep
        // the rows of each segment's own offset. The longest segment is capped at `n` by
        // its own expression.
        (
            "dilated_expr: rotating offsets h + s (64,1)(128,2)(512,4) causal",
            GpuSpec::new(super::dilated_expr::pattern(
                &[("64", "1", "h + s"), ("128", "2", "h + s"), ("min(512, n)", "4", "h + s")],
                ExprCombine::SoftmaxDenominator,
            ))
            .causal(true),
        ),
        // A nested union (`crate::union_pieces`): pieces cut by every row's hole, whose
        // table is indexed by global positions; causal, and not (two launches per later
        // branch).
        (
            "dilated_expr: nested union (32,1)(96,3)(192,6) causal",
            GpuSpec::new(super::dilated_expr::pattern(
                &[("32", "1", "0"), ("96", "3", "h + s"), ("192", "6", "h + 2 * s")],
                ExprCombine::Union,
            ))
            .causal(true),
        ),
        (
            "dilated_expr: nested union (32,2)(64,2)(256,4)",
            GpuSpec::new(super::dilated_expr::pattern(
                &[("32", "2", "h"), ("64", "2", "h + s"), ("256", "4", "h * s + 1")],
                ExprCombine::Union,
            )),
        ),
        // Offsets quadratic in the segment and alternating per segment, on segments that
        // follow the length (n / 3 + 1: boundaries that are no rank's).
        (
            "dilated_expr: offsets 3h - s^2, alternating (96,3)(n/3+1,2)",
            GpuSpec::new(super::dilated_expr::pattern(
                &[("96", "3", "3 * h - s * s"), ("n / 3 + 1", "2", "if s % 2 == 0 then h else h + 1")],
                ExprCombine::SoftmaxDenominator,
            )),
        ),
    ]
}

/// The GPU spec of mask expression `mask`.
fn expression(mask: &str) -> GpuSpec {
    let pattern = ExprPattern::new(mask, &Default::default()).expect("the check's masks parse");
    GpuSpec::new(GpuPattern::Expr(pattern))
}

/// The layouts of `n` tokens over `p` ranks, named for the log.
fn layouts(n: usize, p: usize) -> Vec<(String, Layout)> {
    if p == 1 {
        // One rank per ring (pure data parallelism): every layout is the identity.
        return vec![("contiguous".into(), Layout::Contiguous)];
    }
    let mut v = vec![
        ("contiguous".into(), Layout::Contiguous),
        ("zigzag".into(), Layout::Zigzag),
        ("striped".into(), Layout::Striped),
    ];
    // Unequal: rank 0 gets 7 tokens, the rest split unevenly; with 3+ ranks one is empty.
    let mut b = vec![0, 7];
    if p >= 3 {
        b.push(7);
    }
    while b.len() < p {
        let last = *b.last().unwrap();
        b.push(last + (n - last) * 2 / 3);
    }
    b.push(n);
    v.push((format!("boundaries {b:?}"), Layout::Boundaries(b)));
    v
}

/// One size of the cases: `(seq, (head_dim, value_dim), batch, heads, kv_heads)` and which
/// patterns (by name prefix) it skips.
type Size = ((usize, (usize, usize), usize, usize, usize), &'static [&'static str]);

/// The sizes: two multi-head ones, then grouped-query (8:2, with LongNet offsets that
/// differ within a group) and multi-query attention; then the head dims beyond 64 and 128
/// (96, 192, 256: on sm_90 96 runs the wgmma kernels of d = 128 over rows of 96 and 192,
/// 256 the wgmma forward with the mma backward), causal and dilated only; last MLA's v narrower than q and k (192 /
/// 128, on the mma kernels), grouped-query, with a LongNet pattern whose pieces travel
/// as kept head rows (V's rows at 128, K's at 192).
const SIZES: [Size; 8] = [
    ((1000, (64, 64), 1, 4, 4), &[]),
    ((777, (128, 128), 2, 4, 4), &["window"]),
    ((1000, (128, 128), 1, 8, 2), &["dense", "window"]),
    ((777, (64, 64), 2, 4, 1), &["dense", "window", "dilated (64", "dilated_expr: offsets"]),
    ((600, (96, 96), 1, 2, 2), &["dense", "window", "dilated_expr: nested"]),
    ((500, (192, 192), 2, 2, 2), &["dense", "window", "dilated (64", "dilated_expr: offsets", "dilated_expr: nested"]),
    ((400, (256, 256), 1, 4, 2), &["dense", "window", "dilated (64", "dilated_expr: offsets", "dilated_expr: nested"]),
    ((500, (192, 128), 1, 4, 2), &["dense", "window", "expr", "table", "dilated_expr"]),
];

/// The cases for `ranks` per ring and `rings` rings, the packed ones last; with several
/// rings the batch grows by `rings - 1` so that every ring gets rows and the split is
/// uneven for one size.
pub fn cases(ranks: &[usize], rings: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for &p in ranks {
        for (i, &((seq, (head_dim, value_dim), batch, heads, kv_heads), skip)) in SIZES.iter().enumerate() {
            for (layout_name, layout) in layouts(seq, p) {
                for (j, pattern) in patterns(seq).into_iter().enumerate() {
                    if skip.iter().any(|s| pattern.0.starts_with(s)) {
                        continue;
                    }
                    out.push(Case {
                        ranks: p,
                        rings,
                        layout: layout.clone(),
                        layout_name: layout_name.clone(),
                        pattern,
                        batch: batch + rings - 1,
                        heads,
                        kv_heads,
                        head_dim,
                        value_dim,
                        seq,
                        key: (i, j),
                    });
                }
            }
        }
    }
    out.extend(super::ring_packed::cases(ranks, rings));
    out
}

/// One line naming the case (the log's case column).
pub fn describe(c: &Case) -> String {
    let rings = if c.rings > 1 { format!(" x R={}", c.rings) } else { String::new() };
    let kv = if c.kv_heads != c.heads { format!(" H_kv={}", c.kv_heads) } else { String::new() };
    let dv = if c.value_dim != c.head_dim { format!(" d_v={}", c.value_dim) } else { String::new() };
    format!(
        "P={}{rings} {} | {} | B={} N={} H={}{kv} d={}{dv}",
        c.ranks, c.layout_name, c.pattern.0, c.batch, c.seq, c.heads, c.head_dim
    )
}

/// A case's inputs as bf16 words (q, k, v, d_out) and the reference forward and
/// gradients on their exact values (empty unless asked for: only rank 0 compares).
pub struct Inputs {
    pub bits: [Vec<u16>; 4],
    pub reference: (Attention<f64>, ringdil_reference::Gradients<f64>),
}

/// Inputs by case key, shared by every rank count, layout and schedule.
pub type Cache = std::collections::HashMap<(usize, usize), std::rc::Rc<Inputs>>;

/// The inputs (and, when asked, the reference) of `c`, computed once per key.
pub fn cached(cache: &mut Cache, c: &Case, seed: u64, with_reference: bool) -> std::rc::Rc<Inputs> {
    cache
        .entry(c.key)
        .or_insert_with(|| {
            std::rc::Rc::new(inputs(c, seed ^ (c.key.0 as u64 * 1000 + c.key.1 as u64 + 1), with_reference))
        })
        .clone()
}

/// The inputs of `c` drawn from `seed`, with the reference when `with_reference`.
fn inputs(c: &Case, seed: u64, with_reference: bool) -> Inputs {
    let [q, k, v, g] =
        [(c.heads, c.head_dim), (c.kv_heads, c.head_dim), (c.kv_heads, c.value_dim), (c.heads, c.value_dim)]
            .map(|(h, w)| [c.batch, c.seq, h, w]);
    let mut rng = SplitMix64::new(seed);
    let (q, qf) = rounded(q, Dtype::Bf16, &mut rng);
    let (k, kf) = rounded(k, Dtype::Bf16, &mut rng);
    let (v, vf) = rounded(v, Dtype::Bf16, &mut rng);
    let (g, gf) = rounded(g, Dtype::Bf16, &mut rng);
    let reference = if with_reference {
        let spec = c.pattern.1.to_reference();
        let fwd = attention(qf.view(), kf.view(), vf.view(), &spec).expect("reference forward");
        let grads =
            attention_backward(qf.view(), kf.view(), vf.view(), &spec, &fwd, gf.view()).expect("reference backward");
        (fwd, grads)
    } else {
        let z = Array4::zeros((0, 0, 0, 0));
        (
            Attention { out: z.clone(), lse: Array3::zeros((0, 0, 0)) },
            ringdil_reference::Gradients { dq: z.clone(), dk: z.clone(), dv: z },
        )
    };
    Inputs { bits: [q, k, v, g], reference }
}

/// Per rank: [out, lse, dq, dk, dv], each per piece, on the host.
pub type HostResult = Vec<[Vec<Vec<f32>>; 5]>;

/// One ring's share of a case: its plan (over its batch rows) and those rows.
pub struct RingPart {
    pub plan: DistPlan,
    pub rows: Range<usize>,
}

/// The ring parts of `c` on `grid` (one part covering the whole batch when `R = 1`),
/// each with its rows' key lengths and documents ([`GpuSpec::batch_rows`]).
pub fn ring_parts(c: &Case, grid: &Grid) -> DistResult<Vec<RingPart>> {
    grid.batch_rows(c.batch)?
        .into_iter()
        .map(|rows| {
            let chunks = ChunkPlan::new(c.seq, c.ranks, &c.layout)?;
            let spec = c.pattern.1.batch_rows(rows.clone(), c.batch, c.seq)?;
            let plan = DistPlan::new(chunks, spec, rows.len(), c.heads, c.head_dim)?
                .with_kv_heads(c.kv_heads)?
                .with_value_dim(c.value_dim)?
                .with_hybrid_degree(crate::dist::hybrid_split::grid_degree(c.ranks, c.heads))?;
            Ok(RingPart { plan, rows })
        })
        .collect()
}

/// Batch rows `rows` of a `[batch, seq, heads, width]` host tensor of `c`.
pub fn batch_slice<'a>(x: &'a [u16], c: &Case, (heads, width): (usize, usize), rows: &Range<usize>) -> &'a [u16] {
    let per_row = c.seq * heads * width;
    &x[rows.start * per_row..rows.end * per_row]
}

/// [`batch_slice`] of the four inputs q, k, v, d_out (k and v at the K/V heads; v and
/// d_out at v's head dim).
pub fn batch_slices<'a>(bits: &'a [Vec<u16>; 4], c: &Case, rows: &Range<usize>) -> [&'a [u16]; 4] {
    let [q, k, v, g] = bits;
    let (h, hk, d, dv) = (c.heads, c.kv_heads, c.head_dim, c.value_dim);
    [
        batch_slice(q, c, (h, d), rows),
        batch_slice(k, c, (hk, d), rows),
        batch_slice(v, c, (hk, dv), rows),
        batch_slice(g, c, (h, dv), rows),
    ]
}

/// A rank's output, LSE and gradient pieces, on the host.
pub fn download(gpu: &Gpu, out: &[DevicePartial], grads: &RankGrads) -> [Vec<Vec<f32>>; 5] {
    let dl = |xs: Vec<&CudaSlice<f32>>| xs.into_iter().map(|x| gpu.download(x).expect("download")).collect::<Vec<_>>();
    [
        dl(out.iter().map(|p| &p.out).collect()),
        dl(out.iter().map(|p| &p.lse).collect()),
        dl(grads.dq.iter().collect()),
        dl(grads.dk.iter().collect()),
        dl(grads.dv.iter().collect()),
    ]
}

/// One ring's part of `c` on virtual ranks of one GPU.
pub fn run_virtual(gpu: &Gpu, c: &Case, part: &RingPart, inp: &Inputs) -> DistResult<HostResult> {
    run_virtual_schedule(gpu, c, part, inp, Kind::Ring)
}

/// [`run_virtual`] for the ring, Ulysses (`VirtualRanks::ulysses_forward`) or the hybrid
/// (`VirtualRanks::hybrid_forward`); other
/// schedules run the ring's arithmetic on virtual ranks.
pub fn run_virtual_schedule(
    gpu: &Gpu,
    c: &Case,
    part: &RingPart,
    inp: &Inputs,
    schedule: Kind,
) -> DistResult<HostResult> {
    let [q, k, v, g] = batch_slices(&inp.bits, c, &part.rows);
    let plan = &part.plan;
    let data: Vec<RankData> =
        (0..plan.ranks()).map(|r| RankData::upload(gpu, plan, r, q, k, v)).collect::<Result<_, _>>()?;
    let dout: Vec<_> = (0..plan.ranks()).map(|r| upload_dout(gpu, plan, r, g)).collect::<Result<_, _>>()?;
    let mut vr = VirtualRanks::new(gpu, plan, Dtype::Bf16)?;
    let (outs, grads) = if schedule == Kind::Ulysses {
        let outs = vr.ulysses_forward(&data)?;
        let grads = vr.ulysses_backward(&data, &outs, &dout)?;
        (outs, grads)
    } else if schedule == Kind::Hybrid {
        let outs = vr.hybrid_forward(&data)?;
        let grads = vr.hybrid_backward(&data, &outs, &dout)?;
        (outs, grads)
    } else {
        let outs = vr.forward(&data)?;
        let grads = vr.backward(&data, &outs, &dout)?;
        (outs, grads)
    };
    Ok(outs.iter().zip(&grads).map(|(o, g)| download(gpu, o, g)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(ranks: usize, rings: usize, batch: usize, layout: Layout, (head_dim, value_dim): (usize, usize)) -> Case {
        let pattern = ("causal", GpuSpec::new(GpuPattern::Dense).causal(true));
        let layout_name = format!("{layout:?}");
        Case {
            ranks,
            rings,
            layout,
            layout_name,
            pattern,
            batch,
            heads: 4,
            kv_heads: 2,
            head_dim,
            value_dim,
            seq: 200,
            key: (0, 0),
        }
    }

    /// What every rank would hold if it computed exactly: the reference (as f32) cut into
    /// ring rows and rank pieces, `[ring][position]`.
    fn exact(c: &Case, parts: &[RingPart], inp: &Inputs) -> Vec<HostResult> {
        let (n, h, hk, d, d_v) = (c.seq, c.heads, c.kv_heads, c.head_dim, c.value_dim);
        let (fwd, g) = &inp.reference;
        let [out, dq, dk, dv] =
            [&fwd.out, &g.dq, &g.dk, &g.dv].map(|x| x.iter().map(|&v| v as f32).collect::<Vec<_>>());
        let lse: Vec<f32> = fwd.lse.iter().map(|&v| v as f32).collect();
        let ring = |part: &RingPart| -> HostResult {
            let rows =
                |x: &[f32], h: usize, w: usize| x[part.rows.start * n * h * w..part.rows.end * n * h * w].to_vec();
            (0..part.plan.ranks())
                .map(|r| {
                    let tokens = part.plan.chunks.tokens(r);
                    let lse_pieces = part
                        .plan
                        .pieces(r)
                        .iter()
                        .map(|pc| {
                            let mut v = Vec::new();
                            for bi in part.rows.clone() {
                                for hi in 0..h {
                                    v.extend(
                                        tokens[pc.local..pc.local + pc.rows]
                                            .iter()
                                            .map(|&t| lse[(bi * h + hi) * n + t]),
                                    );
                                }
                            }
                            v
                        })
                        .collect();
                    let pieces = |x: &[f32], w| part.plan.scatter(&rows(x, h, w), w, r);
                    let kv_pieces = |x: &[f32], w| part.plan.scatter_kv(&rows(x, hk, w), w, r);
                    [pieces(&out, d_v), lse_pieces, pieces(&dq, d), kv_pieces(&dk, d), kv_pieces(&dv, d_v)]
                })
                .collect()
        };
        parts.iter().map(ring).collect()
    }

    /// The 2-D assembly on the host: exact per-rank pieces of every ring, put back by
    /// `compare`, reproduce the reference; rings put in each other's rows do not. With
    /// v's head dim apart from q's, each tensor is cut and put back at its own width.
    #[test]
    fn rings_are_assembled_into_their_batch_rows() {
        for (world, rings, batch, layout, dims) in [
            (4, 2, 3, Layout::Zigzag, (64, 64)),       // 2 rings x 2 ranks, uneven batch 2 + 1
            (1, 1, 2, Layout::Contiguous, (64, 64)),   // the plain ring (and the virtual-rank path)
            (3, 3, 4, Layout::Contiguous, (64, 64)),   // pure data parallelism, 2 + 1 + 1
            (6, 2, 2, Layout::Striped, (64, 64)),      // 2 rings x 3 ranks, striped
            (4, 2, 3, Layout::Zigzag, (192, 128)),     // MLA's widths
            (3, 1, 1, Layout::Contiguous, (192, 128)), // one ring of 3
        ] {
            let grid = Grid::new(world, rings).unwrap();
            let c = case(grid.ring_size(), rings, batch, layout, dims);
            let parts = ring_parts(&c, &grid).unwrap();
            assert_eq!(parts.iter().map(|p| p.rows.len()).sum::<usize>(), batch);
            let inp = inputs(&c, 3, true);
            let mut res = exact(&c, &parts, &inp);
            for m in compare(&c, &parts, &res, &inp.reference) {
                assert!(m.err < 1e-6, "W={world} R={rings} {}: {}", m.what, m.err);
            }
            if rings > 1 && parts[0].rows.len() == parts[1].rows.len() {
                res.swap(0, 1);
                let errs = compare(&c, &parts, &res, &inp.reference);
                assert!(errs.iter().all(|m| !m.passed()), "swapped rings must fail: {errs:?}");
            }
        }
    }

    /// The breakdown names the rank whose gradient piece is off: exact results give cells of
    /// 0 (up to f32 rounding), and rank 1's dq scaled by 1.1 gives its dq cell 0.1 and leaves
    /// the other ranks' cells, and dk and dv, at 0.
    #[test]
    fn gradient_breakdown_names_the_rank_whose_piece_is_off() {
        let c = case(3, 1, 1, Layout::Striped, (64, 64));
        let parts = ring_parts(&c, &Grid::new(3, 1).unwrap()).unwrap();
        let inp = inputs(&c, 3, true);
        let mut res = exact(&c, &parts, &inp);
        let cells = |res: &[HostResult], what: &str| -> Vec<f64> {
            let text = gradient_breakdown(&c, &parts, res, &inp.reference);
            let at = text.find(&format!("{what} by rank ")).unwrap_or_else(|| panic!("{what} in {text}"));
            let rest = &text[at + what.len() + " by rank ".len()..];
            rest[..rest.find(" by head").unwrap()].split(' ').map(|x| x.parse().unwrap()).collect()
        };
        for what in ["dq", "dk", "dv"] {
            let exact_cells = cells(&res, what);
            assert_eq!(exact_cells.len(), 3, "{what}: {exact_cells:?}");
            assert!(exact_cells.iter().all(|&e| e < 1e-6), "{what}: {exact_cells:?}");
        }
        res[0][1][2].iter_mut().flatten().for_each(|x| *x *= 1.1);
        let dq = cells(&res, "dq");
        assert!(dq[0] < 1e-6 && dq[2] < 1e-6 && (dq[1] - 0.1).abs() < 1e-3, "{dq:?}");
        for what in ["dk", "dv"] {
            assert!(cells(&res, what).iter().all(|&e| e < 1e-6), "{what}");
        }
    }

    #[test]
    fn a_ring_with_no_batch_rows_is_a_typed_error() {
        let c = case(1, 2, 1, Layout::Contiguous, (64, 64));
        let e = ring_parts(&c, &Grid::new(2, 2).unwrap()).err().unwrap();
        assert!(matches!(e, crate::dist::DistError::EmptyRing { batch: 1, rings: 2 }), "{e}");
    }

    /// The `dilated_expr` patterns run as compact launches (`GpuPattern::dilated_expr`
    /// chose them, not mask tables) and plan on every ring size, layout and size they
    /// run at.
    #[test]
    fn dilated_expr_patterns_are_compact_and_plan() {
        let all = cases(&[2, 3, 4], 1);
        let compact: Vec<&Case> = all.iter().filter(|c| c.pattern.0.starts_with("dilated_expr")).collect();
        // Rotating offsets at all 7 sizes, the other formulas and the two nested unions
        // at 4; 4 layouts, 3 ring sizes.
        assert_eq!(compact.len(), (7 + 4 + 2 * 4) * 4 * 3);
        for c in compact {
            assert!(matches!(c.pattern.1.pattern, GpuPattern::DilatedExpr(_)), "{}", describe(c));
            ring_parts(c, &Grid::new(c.ranks, 1).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", describe(c)));
        }
    }

    #[test]
    fn cases_grow_the_batch_with_the_rings() {
        let one: Vec<usize> = cases(&[2], 1).iter().map(|c| c.batch).collect();
        let two: Vec<usize> = cases(&[2], 2).iter().map(|c| c.batch).collect();
        assert_eq!(one.len(), two.len());
        assert!(one.iter().zip(&two).all(|(a, b)| b == &(a + 1)));
        assert!(cases(&[1], 2).iter().all(|c| c.layout == Layout::Contiguous));
    }
}

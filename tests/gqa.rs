//! Proofs of grouped-query and multi-query attention (issue 22).
//!
//! The rule: `H` query heads over `H_kv` K/V heads (`H_kv | H`, `g = H / H_kv`), query
//! head `h` reads K/V head `h / g`, `dK`, `dV` of a K/V head are the sums over its group.
//! The oracles here share no grouping code with the reference:
//!
//! * **Replication.** GQA on `k`, `v` equals multi-head attention on `k`, `v` whose head
//!   `h` is a copy of K/V head `h / g` (built here, one loop), with the MHA `dK`, `dV`
//!   summed over each group (summed here, ascending heads). Same blocks, same sums: the
//!   equality is exact (bitwise), for every pattern family (dense, window, block sparse,
//!   LongNet with both combines, pattern expressions), causality, key padding, `H` in
//!   `1..=8` with every divisor as `H_kv` (MQA included).
//! * **Finite differences** of `L = sum(out * G)` with respect to `q`, `k`, `v` (f64),
//!   the same bounds as `tests/backward.rs`.
//! * **Distribution.** Every schedule, on every layout, equals the replicated MHA
//!   oracle, forward and backward, and its K/V traffic is what the rule predicts: `H_kv
//!   / H` of the MHA run's for the ring and all-gather, the group unions of needs (from
//!   the pattern's counts) for the pattern ring, the K/V heads each rank reads for
//!   Ulysses; query-side traffic is unchanged.
//! * **Errors** name the values.

use ndarray::{Array3, Array4};
use proptest::prelude::*;
use ringdil_proofs::{assert_close_floor, config, fd_gradient, on_ranks, pattern_counts, spec_counts};
use ringdil_reference::pattern::expr::Constants;
use ringdil_reference::pattern::{Dilated, ExprBranch, ExprCombine, ExprDilated, ExprPattern};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout, Report, Schedule, Simulation, Tensor, hybrid, simulate};
use ringdil_reference::{
    Attention, Error, Heads, OutputGrad, Pattern, Spec, attend_chunk, attention, attention_backward,
    attention_low_precision, backward_chunk,
};
use std::collections::HashSet;
use std::sync::Arc;

// ---------------------------------------------------------------------------------
// Oracles
// ---------------------------------------------------------------------------------

/// `x` (`H_kv` heads) with head `h` of the result a copy of head `h / (heads / H_kv)`.
fn replicate(x: &Array4<f64>, heads: usize) -> Array4<f64> {
    let (b, n, kv, d) = x.dim();
    let g = heads / kv;
    Array4::from_shape_fn((b, n, heads, d), |(bb, i, h, c)| x[[bb, i, h / g, c]])
}

/// `x` (`H` heads) summed over groups of `H / kv` consecutive heads, ascending.
fn sum_groups(x: &Array4<f64>, kv: usize) -> Array4<f64> {
    let (b, n, heads, d) = x.dim();
    let g = heads / kv;
    let mut sum = Array4::zeros((b, n, kv, d));
    for h in 0..heads {
        for bb in 0..b {
            for i in 0..n {
                for c in 0..d {
                    sum[[bb, i, h / g, c]] += x[[bb, i, h, c]];
                }
            }
        }
    }
    sum
}

/// One GQA problem: shape, K/V heads, value width, spec, seed.
#[derive(Debug, Clone)]
struct Gqa {
    batch: usize,
    n: usize,
    heads: usize,
    kv: usize,
    dim: usize,
    dv: usize,
    spec: Spec,
    seed: u64,
}

impl Gqa {
    /// `q` with `H` heads, `k`, `v` with `H_kv`, and an upstream gradient.
    fn tensors(&self) -> [Array4<f64>; 4] {
        let (b, n, s) = (self.batch, self.n, self.seed * 4);
        [
            normal_tensor([b, n, self.heads, self.dim], s),
            normal_tensor([b, n, self.kv, self.dim], s + 1),
            normal_tensor([b, n, self.kv, self.dv], s + 2),
            normal_tensor([b, n, self.heads, self.dv], s + 3),
        ]
    }
}

/// The replicated-MHA oracle: output, LSE and dQ, dK, dV (summed over groups).
fn oracle(case: &Gqa) -> (Attention<f64>, [Array4<f64>; 3]) {
    let [q, k, v, g] = case.tensors();
    let (k, v) = (replicate(&k, case.heads), replicate(&v, case.heads));
    let fwd = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
    let grads = attention_backward(q.view(), k.view(), v.view(), &case.spec, &fwd, g.view()).unwrap();
    (fwd, [grads.dq, sum_groups(&grads.dk, case.kv), sum_groups(&grads.dv, case.kv)])
}

// ---------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------

/// A head-dependent mask expression (the band widens with `h`, `H` keys are global).
fn expr_mask() -> ExprPattern {
    ExprPattern::new("abs(q - k) <= 1 + h % 3 || k < H / 2", &Constants::new()).unwrap()
}

/// Expression LongNet branches: offsets rotating per segment, a per-head branch mask;
/// softmax-denominator or union combine.
fn expr_dilated(union: bool) -> ExprDilated {
    let branches = vec![
        ExprBranch::new("4", "2", "(h + s) % r", None, &Constants::new()).unwrap(),
        ExprBranch::new("6", "3", "h % r", Some("k <= q + h"), &Constants::new()).unwrap(),
    ];
    ExprDilated { branches, combine: if union { ExprCombine::Union } else { ExprCombine::SoftmaxDenominator } }
}

/// Any pattern of the shared strategy (dense, window, block sparse, LongNet, torchscale,
/// head groups) or a pattern expression.
fn gqa_pattern(heads: usize, max_n: usize) -> BoxedStrategy<Arc<dyn Pattern>> {
    prop_oneof![
        4 => ringdil_proofs::any_pattern(heads, max_n),
        1 => Just(Arc::new(expr_mask()) as Arc<dyn Pattern>),
        1 => any::<bool>().prop_map(|u| Arc::new(expr_dilated(u)) as Arc<dyn Pattern>),
    ]
    .boxed()
}

/// `H` in `1..=max_heads`, `H_kv` any divisor (MQA and MHA included), `n` in
/// `1..=max_n`, any pattern, causality, key padding (fully padded rows too), scale.
fn gqa_case(max_heads: usize, max_n: usize) -> impl Strategy<Value = Gqa> {
    (1..=2usize, 1..=max_n, 1..=max_heads, 1..=4usize, 1..=4usize)
        .prop_flat_map(move |(batch, n, heads, dim, dv)| {
            let divisors: Vec<usize> = (1..=heads).filter(|kv| heads % kv == 0).collect();
            (
                Just((batch, n, heads, dim, dv)),
                prop::sample::select(divisors),
                gqa_pattern(heads, max_n),
                any::<bool>(),
                prop::option::of(prop::collection::vec(0..=n, batch)),
                prop::option::of(0.1f64..1.5),
                0u64..1 << 40,
            )
        })
        .prop_map(|((batch, n, heads, dim, dv), kv, pattern, causal, key_lengths, scale, seed)| Gqa {
            batch,
            n,
            heads,
            kv,
            dim,
            dv,
            spec: Spec { pattern, causal, key_lengths, scale, documents: None },
            seed,
        })
}

// ---------------------------------------------------------------------------------
// Single device
// ---------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(96))]

    /// GQA equals MHA on replicated K/V, bit for bit: output, LSE, dQ, and dK, dV equal
    /// to the group sums of the MHA gradients; the chunk entry points agree too.
    #[test]
    fn gqa_is_mha_on_replicated_kv(case in gqa_case(8, 17)) {
        let [q, k, v, g] = case.tensors();
        let (want, [dq, dk, dv]) = oracle(&case);
        let got = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
        prop_assert_eq!(&got.out, &want.out);
        prop_assert_eq!(&got.lse, &want.lse);
        let grads = attention_backward(q.view(), k.view(), v.view(), &case.spec, &got, g.view()).unwrap();
        prop_assert_eq!(grads.dk.dim(), k.dim());
        prop_assert_eq!(grads.dv.dim(), v.dim());
        prop_assert_eq!(&grads.dq, &dq);
        prop_assert_eq!(&grads.dk, &dk);
        prop_assert_eq!(&grads.dv, &dv);
        // The chunk API with the queries in reverse order and keys split in two halves:
        // partials merge to the same output, dK rows of each half are the full rows.
        let n = case.n;
        let rows: Vec<usize> = (0..n).rev().collect();
        let (front, back): (Vec<usize>, Vec<usize>) = (0..n).partition(|&j| j < n / 2);
        let q_rows = q.select(ndarray::Axis(1), &rows);
        let grad = OutputGrad::new(&case.spec, &got, g.view()).unwrap().select_rows(&rows);
        let mut merged = ringdil_reference::Partial::empty(case.batch, n, case.heads, case.dv);
        for keys in [&front, &back].into_iter().filter(|keys| !keys.is_empty()) {
            let (kk, vv) = (k.select(ndarray::Axis(1), keys), v.select(ndarray::Axis(1), keys));
            let part = attend_chunk(q_rows.view(), &rows, kk.view(), vv.view(), keys, n, &case.spec).unwrap();
            merged = merged.merge(&part).unwrap();
            let chunk = backward_chunk(q_rows.view(), &rows, kk.view(), vv.view(), keys, n, &case.spec, &grad).unwrap();
            let floor = (dk.len() as f64).sqrt();
            assert_close_floor("chunk dk", &chunk.dk, &dk.select(ndarray::Axis(1), keys), 1e-12, floor);
            assert_close_floor("chunk dv", &chunk.dv, &dv.select(ndarray::Axis(1), keys), 1e-12, floor);
        }
        let finished = merged.finish(&case.spec);
        let want_rows = want.out.select(ndarray::Axis(1), &rows);
        assert_close_floor("chunked out", &finished.out, &want_rows, 1e-12, 1.0);
    }
}

/// Finite-difference step and bound, as derived in `tests/backward.rs`.
const EPS: f64 = 1e-6;
const FD_TOL: f64 = 1e-6;

/// dQ, dK, dV of GQA (K/V at `kv` heads) against central finite differences of
/// `L = sum(out * G)`.
fn check_fd(what: &str, spec: &Spec, shape: [usize; 4], kv: usize, seed: u64) {
    let [b, n, h, d] = shape;
    let case = Gqa { batch: b, n, heads: h, kv, dim: d, dv: d, spec: spec.clone(), seed };
    let [q, k, v, g] = case.tensors();
    let loss = |q: &Array4<f64>, k: &Array4<f64>, v: &Array4<f64>| -> f64 {
        (&attention(q.view(), k.view(), v.view(), spec).unwrap().out * &g).sum()
    };
    let fwd = attention(q.view(), k.view(), v.view(), spec).unwrap();
    let grads = attention_backward(q.view(), k.view(), v.view(), spec, &fwd, g.view()).unwrap();
    assert_close_floor(&format!("{what}: dq"), &grads.dq, &fd_gradient(&q, EPS, |x| loss(x, &k, &v)), FD_TOL, 1.0);
    assert_close_floor(&format!("{what}: dk"), &grads.dk, &fd_gradient(&k, EPS, |x| loss(&q, x, &v)), FD_TOL, 1.0);
    assert_close_floor(&format!("{what}: dv"), &grads.dv, &fd_gradient(&v, EPS, |x| loss(&q, &k, x)), FD_TOL, 1.0);
}

/// Four query heads over two K/V heads and over one (MQA), on patterns whose key sets
/// differ between the heads of a group (LongNet offsets, the head-group combine's
/// per-head scale, a head-dependent expression), with causality and key padding.
#[test]
fn gradients_match_finite_differences() {
    let shape = [2, 9, 4, 3];
    let longnet = Spec::new(Dilated::longnet(&[(3, 1), (6, 2)])).causal(true);
    let head_groups = Spec::new(Dilated::head_groups(&[(3, 1), (6, 2)])).key_lengths(vec![9, 5]);
    let expr = Spec::new(expr_dilated(false)).scale(0.8);
    let mask = Spec::new(expr_mask()).causal(true).key_lengths(vec![7, 9]);
    for (kv, seed) in [(2, 1), (1, 2)] {
        check_fd(&format!("dense kv={kv}"), &Spec::dense(), shape, kv, seed);
        check_fd(&format!("longnet kv={kv}"), &longnet, shape, kv, seed + 10);
        check_fd(&format!("head groups kv={kv}"), &head_groups, shape, kv, seed + 20);
        check_fd(&format!("expr dilated kv={kv}"), &expr, shape, kv, seed + 30);
        check_fd(&format!("expr mask kv={kv}"), &mask, shape, kv, seed + 40);
    }
}

// ---------------------------------------------------------------------------------
// Distributed
// ---------------------------------------------------------------------------------

const K_SIDE: [Tensor; 4] = [Tensor::K, Tensor::V, Tensor::DK, Tensor::DV];
const Q_SIDE: [Tensor; 4] = [Tensor::Q, Tensor::DOut, Tensor::Out, Tensor::DQ];

/// Replay `schedule` on the case and compare with the replicated-MHA oracle.
fn replay(case: &Gqa, schedule: &Schedule) -> Result<Report, TestCaseError> {
    let [q, k, v, g] = case.tensors();
    let (want, [dq, dk, dv]) = oracle(case);
    let (got, grads, report) = simulate(schedule, &case.spec, q.view(), k.view(), v.view(), Some(g.view()))
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", schedule.kind)))?;
    let grads = grads.unwrap();
    let kind = schedule.kind;
    assert_close_floor(&format!("{kind} out"), &got.out, &want.out, 1e-12, 1.0);
    let lse_err =
        got.lse.iter().zip(&want.lse).map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() }).fold(0.0, f64::max);
    prop_assert!(lse_err <= 1e-12, "{} lse: {}", kind, lse_err);
    for (what, x, w) in [("dq", &grads.dq, &dq), ("dk", &grads.dk, &dk), ("dv", &grads.dv, &dv)] {
        assert_close_floor(&format!("{kind} {what}"), x, w, 1e-12, (w.len() as f64).sqrt());
    }
    Ok(report)
}

/// The K/V elements the pattern ring sends, from the pattern's counts: for each rank
/// `r`, other rank `s` and K/V head `j`, the keys of `s` that some query of `r` sees in
/// some query head of group `j` (some batch row). Each such row carries `K`, `V` in
/// the forward phase, and `K`, `V` in and `dK`, `dV` back in the backward phase.
fn pattern_ring_kv_volume(case: &Gqa, plan: &ChunkPlan) -> usize {
    let counts = spec_counts(&case.spec, &pattern_counts(&*case.spec.pattern, case.heads, case.n), case.batch);
    let (g, owner) = (case.heads / case.kv, plan.token_map().rank);
    let mut rows = 0;
    for r in 0..plan.ranks() {
        for j in 0..case.kv {
            let needed: HashSet<usize> = (0..case.n)
                .filter(|&key| owner[key] != r)
                .filter(|&key| {
                    (j * g..(j + 1) * g)
                        .any(|h| (0..case.batch).any(|b| plan.tokens(r).iter().any(|&q| counts[[b, h, q, key]] > 0)))
                })
                .collect();
            rows += needed.len();
        }
    }
    3 * rows * case.batch * (case.dim + case.dv)
}

/// The K/V elements Ulysses sends: rank `r` with query heads `H_r` receives `K`, `V` of
/// the other ranks' tokens at the K/V heads `{h / g : h in H_r}` in each phase, and
/// returns their `dK`, `dV` in the backward phase.
fn ulysses_kv_volume(case: &Gqa, schedule: &Schedule) -> usize {
    let (g, chunks) = (case.heads / case.kv, &schedule.chunks);
    let split = ringdil_reference::ring::even_boundaries(case.heads, chunks.ranks());
    (0..chunks.ranks())
        .map(|r| {
            let kv_heads: HashSet<usize> = (split[r]..split[r + 1]).map(|h| h / g).collect();
            3 * kv_heads.len() * case.batch * (case.dim + case.dv) * (case.n - chunks.tokens(r).len())
        })
        .sum()
}

proptest! {
    #![proptest_config(config(48))]

    /// Every schedule on every layout (contiguous, zigzag, striped, random boundaries
    /// with empty ranks, permutations) equals the single-device oracle for GQA, forward
    /// and backward; K/V traffic is `H_kv / H` of the same schedule's MHA traffic (ring,
    /// all-gather), the group unions of needs (pattern ring), the K/V heads each rank
    /// reads (Ulysses); query-side traffic equals the MHA run's.
    #[test]
    fn every_schedule_equals_single_device(
        (case, ranks, layout) in on_ranks(gqa_case(6, 19), |c| c.n, 6)
    ) {
        let plan = ChunkPlan::new(case.n, ranks, &layout).unwrap();
        let heads = Heads::new(case.heads, case.kv).unwrap();
        let [q, k, v, g] = case.tensors();
        let (k_mha, v_mha) = (replicate(&k, case.heads), replicate(&v, case.heads));
        for kind in Kind::ALL {
            let schedule = kind.build(&plan, &case.spec, heads).unwrap();
            prop_assert_eq!((schedule.heads, schedule.kv_heads), (case.heads, case.kv));
            let json: Schedule = serde_json::from_str(&serde_json::to_string(&schedule).unwrap()).unwrap();
            prop_assert_eq!(&json, &schedule);
            let report = replay(&case, &schedule)?;
            let mha = kind.build(&plan, &case.spec, case.heads).unwrap();
            let mha_report = simulate(&mha, &case.spec, q.view(), k_mha.view(), v_mha.view(), Some(g.view())).unwrap().2;
            let (kv_sent, mha_kv_sent) = (report.sent_of(&K_SIDE), mha_report.sent_of(&K_SIDE));
            prop_assert_eq!(report.sent_of(&Q_SIDE), mha_report.sent_of(&Q_SIDE), "{} query side", kind);
            match kind {
                Kind::Ring | Kind::AllGather => {
                    prop_assert_eq!(kv_sent * case.heads, mha_kv_sent * case.kv, "{} K/V volume", kind)
                }
                Kind::PatternRing => prop_assert_eq!(kv_sent, pattern_ring_kv_volume(&case, &plan)),
                Kind::Ulysses => prop_assert_eq!(kv_sent, ulysses_kv_volume(&case, &schedule)),
                // Its K/V volume per degree: hybrid_with_grouped_heads_is_exact (below) and
                // tests/ring.rs's documented formula.
                Kind::Hybrid => {}
            }
            // The cost read off the schedule alone is what the simulation measured.
            let [fwd, bwd] = schedule.sent_elements(case.batch, case.dim, case.dv);
            prop_assert_eq!(fwd, report.forward_sent.clone());
            prop_assert_eq!(bwd, report.backward_sent.clone());
        }
    }

    /// The Ulysses x ring hybrid with grouped-query heads, for every Ulysses degree
    /// dividing P (members whose query heads cut a K/V group compute pieces and share
    /// that K/V head), equals the single-device oracle forward and backward, and moves
    /// the query-side rows the MHA run moves.
    #[test]
    fn hybrid_with_grouped_heads_is_exact(
        (case, ranks, layout) in on_ranks(gqa_case(6, 13), |c| c.n, 6)
    ) {
        let plan = ChunkPlan::new(case.n, ranks, &layout).unwrap();
        let heads = Heads::new(case.heads, case.kv).unwrap();
        let [q, _, _, g] = case.tensors();
        for degree in (1..=ranks).filter(|u| ranks % u == 0) {
            let schedule = hybrid(&plan, &case.spec, heads, degree).unwrap();
            let report = replay(&case, &schedule)?;
            let [_, k, v, _] = case.tensors();
            let (k_mha, v_mha) = (replicate(&k, case.heads), replicate(&v, case.heads));
            let mha = hybrid(&plan, &case.spec, case.heads, degree).unwrap();
            let mha_report = simulate(&mha, &case.spec, q.view(), k_mha.view(), v_mha.view(), Some(g.view())).unwrap().2;
            prop_assert_eq!(report.sent_of(&Q_SIDE), mha_report.sent_of(&Q_SIDE), "degree {}", degree);
            prop_assert!(report.sent_of(&K_SIDE) <= mha_report.sent_of(&K_SIDE), "degree {}", degree);
        }
    }
}

/// Ulysses where ranks share K/V heads: 8 query heads over 2 K/V heads on 8 ranks (one
/// query head each, every K/V head replicated to 4 ranks), and 6 over 2 on 4 ranks
/// (`H_r` = 0..2, 2..4, 4..5, 5..6 with groups 0..3, 3..6: rank 1 cuts a group and
/// computes two pieces). Exact, and the MHA-divisible case `P | H_kv` moves `H_kv / H`.
#[test]
fn ulysses_replicates_shared_kv_heads() {
    for (heads, kv, ranks, pieces_of_rank_1) in [(8, 2, 8, 1), (6, 2, 4, 2), (8, 4, 2, 1)] {
        let case = Gqa { batch: 1, n: 11, heads, kv, dim: 3, dv: 2, spec: Spec::dense().causal(true), seed: 5 };
        let plan = ChunkPlan::new(case.n, ranks, &Layout::Zigzag).unwrap();
        let schedule = Kind::Ulysses.build(&plan, &case.spec, Heads::new(heads, kv).unwrap()).unwrap();
        let computes_of_rank_1 = schedule.forward[1]
            .ops
            .iter()
            .filter(|op| matches!(op, ringdil_reference::ring::Op::Attend { rank: 1, .. }))
            .count();
        assert_eq!(computes_of_rank_1, pieces_of_rank_1, "H {heads}, H_kv {kv}, P {ranks}");
        let report = replay(&case, &schedule).unwrap();
        assert_eq!(report.sent_of(&K_SIDE), ulysses_kv_volume(&case, &schedule));
    }
    // P = 2 divides H_kv = 4: no K/V head is shared, so K/V traffic is H_kv / H = 1/2 of MHA's.
    let plan = ChunkPlan::new(10, 2, &Layout::Contiguous).unwrap();
    let [gqa, mha] = [Heads::new(8, 4).unwrap(), Heads::from(8)]
        .map(|h| Kind::Ulysses.build(&plan, &Spec::dense(), h).unwrap().sent_elements(1, 4, 4));
    let kv_part = |s: &[Vec<Vec<usize>>; 2]| s.iter().flatten().flatten().sum::<usize>();
    // Q-side forward: Q out (4 heads x 5 tokens x 4) and Out back (4 x 5 x 5) per rank, both ranks.
    let q_side_forward = 2 * (4 * 5 * 4 + 4 * 5 * 5);
    let q_side_backward = 2 * (4 * 5 * (4 + 4 + 5) + 4 * 5 * 4);
    let q_side = q_side_forward + q_side_backward;
    assert_eq!(2 * (kv_part(&gqa) - q_side), kv_part(&mha) - q_side);
}

// ---------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------

/// `H_kv` not dividing `H` is `Error::KvHeads` naming both, from every entry point; a
/// `v` with other heads than `k` is a shape error naming `v`; no K/V heads is `ZeroDim`.
#[test]
fn bad_head_counts_are_typed_errors() {
    let q = normal_tensor([1, 5, 6, 2], 1);
    let (k, v) = (normal_tensor([1, 5, 4, 2], 2), normal_tensor([1, 5, 4, 2], 3));
    let want = Error::KvHeads { heads: 6, kv_heads: 4 };
    let spec = Spec::dense();
    let all: Vec<usize> = (0..5).collect();
    let fwd = Attention { out: Array4::zeros((1, 5, 6, 2)), lse: Array3::zeros((1, 6, 5)) };
    let grad = OutputGrad::new(&spec, &fwd, q.view()).unwrap();
    let errors = [
        attention(q.view(), k.view(), v.view(), &spec).unwrap_err(),
        attention_backward(q.view(), k.view(), v.view(), &spec, &fwd, q.view()).unwrap_err(),
        attend_chunk(q.view(), &all, k.view(), v.view(), &all, 5, &spec).unwrap_err(),
        backward_chunk(q.view(), &all, k.view(), v.view(), &all, 5, &spec, &grad).unwrap_err(),
        attention_low_precision(
            q.mapv(|x| x as f32).view(),
            k.mapv(|x| x as f32).view(),
            v.mapv(|x| x as f32).view(),
            &spec,
        )
        .unwrap_err(),
        Heads::new(6, 4).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err, want);
        let text = err.to_string();
        assert!(text.contains("4 K/V heads do not divide 6 query heads"), "{text}");
    }
    let plan = ChunkPlan::new(5, 2, &Layout::Contiguous).unwrap();
    let schedule = Kind::Ring.build(&plan, &spec, 6).unwrap();
    assert_eq!(Simulation::new(&schedule, &spec, q.view(), k.view(), v.view()).unwrap_err(), want);

    let v3 = normal_tensor([1, 5, 3, 2], 4);
    let err = attention(q.view(), k.view(), v3.view(), &spec).unwrap_err();
    assert_eq!(err, Error::ShapeMismatch { what: "v", expected: vec![1, 5, 4, 2], got: vec![1, 5, 3, 2] });
    assert!(err.to_string().starts_with("v: expected shape [1, 5, 4, 2]"), "{err}");
    let none = Array4::<f64>::zeros((1, 5, 0, 2));
    let err = attention(q.view(), none.view(), none.view(), &spec).unwrap_err();
    assert_eq!(err, Error::ZeroDim { tensor: "k", dim: "heads" });
    assert_eq!(Heads::new(6, 0).unwrap_err(), Error::ZeroDim { tensor: "k", dim: "heads" });
}

/// A schedule must match the tensors' K/V heads, and a compute must not cut a group
/// and reach into the next (its heads would pair with the wrong K/V head).
#[test]
fn schedules_check_kv_heads_and_groups() {
    let spec = Spec::dense();
    let plan = ChunkPlan::new(6, 2, &Layout::Contiguous).unwrap();
    let q = normal_tensor([1, 6, 4, 2], 1);
    let (k, v) = (normal_tensor([1, 6, 2, 2], 2), normal_tensor([1, 6, 2, 2], 3));
    let mha = Kind::Ring.build(&plan, &spec, 4).unwrap();
    let err = Simulation::new(&mha, &spec, q.view(), k.view(), v.view()).unwrap_err();
    assert_eq!(
        err,
        Error::ShapeMismatch { what: "schedule (seq, heads, kv_heads)", expected: vec![6, 4, 4], got: vec![6, 4, 2] }
    );
    let mut schedule = Kind::AllGather.build(&plan, &spec, Heads::new(4, 2).unwrap()).unwrap();
    schedule.validate(&spec).unwrap();
    for op in &mut schedule.forward[1].ops {
        if let ringdil_reference::ring::Op::Attend { heads, .. } = op {
            *heads = 1..3;
        }
    }
    let err = schedule.validate(&spec).unwrap_err();
    assert_eq!(err, Error::GroupSplit { start: 1, end: 3, group: 2 });
    assert!(err.to_string().contains("query heads 1..3 cuts a group of 2"), "{err}");
    schedule.kv_heads = 3;
    assert_eq!(schedule.validate(&spec).unwrap_err(), Error::KvHeads { heads: 4, kv_heads: 3 });
}

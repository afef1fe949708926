//! Proofs of the distributed simulation (issue 3): every schedule, on every chunk plan,
//! equals single-device attention, forward and backward; schedules survive a JSON round
//! trip and replay to the same numbers; ring memory per rank is O(N/P); bad input is a
//! typed error.

use ndarray::Array4;
use proptest::prelude::*;
use ringdil_proofs::{Case, any_case_value_dim, assert_schedule_exact, config, on_ranks, ring_layout};
use ringdil_reference::compare::rel_err;
use ringdil_reference::pattern::{Dense, Dilated, SlidingWindow};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::ring::{
    ChunkPlan, Kind, Layout, Op, Schedule, Simulation, all_gather, hybrid, pattern_ring, ring, simulate, ulysses,
};
use ringdil_reference::{Error, Spec, attention, attention_backward};

/// The four schedule families for one plan.
fn all_schedules(plan: &ChunkPlan, spec: &Spec, heads: usize) -> Vec<Schedule> {
    vec![
        ring(plan, spec, heads).unwrap(),
        pattern_ring(plan, spec, heads).unwrap(),
        all_gather(plan, heads),
        ulysses(plan, heads),
    ]
}

/// f64 tolerance of every distributed result against the single-device reference.
const TOL_F64: f64 = 1e-12;

/// A JSON round trip of `schedule`, then the replay checked against single-device
/// attention, forward and backward.
fn check_schedule(case: &Case, schedule: &Schedule) -> Result<(), TestCaseError> {
    let json = serde_json::to_string(schedule).unwrap();
    let replayed: Schedule = serde_json::from_str(&json).unwrap();
    prop_assert_eq!(&replayed, schedule);
    let report = assert_schedule_exact(case, &replayed, TOL_F64)?;
    prop_assert_eq!(report.skipped, schedule.skipped());
    Ok(())
}

/// A causal two-token case from a CI run whose dQ cancels to rounding noise (query 0 sees
/// one key, so its dS is 0 up to rounding): a pure relative 1e-12 bound failed at 2.9e-12
/// on it; gradients are judged relative above a floor (`assert_schedule_exact`).
#[test]
fn cancelled_gradients_are_judged_above_the_floor() {
    let spec = Spec::new(Dense).causal(true).scale(1.8434624170885694);
    let case = Case { batch: 1, n: 2, heads: 1, dim: 4, value_dim: 4, spec, seed: 53791694015693272 };
    let plan = ChunkPlan::new(2, 2, &Layout::Permuted { order: vec![0, 1], boundaries: None }).unwrap();
    for schedule in all_schedules(&plan, &case.spec, case.heads) {
        check_schedule(&case, &schedule).unwrap();
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// Ring, pattern-aware ring, all-gather and Ulysses, forward and backward, equal the
    /// single-device reference to 1e-12 (f64) for random N (primes and N < P included),
    /// P in 1..=8, every layout (random boundaries with empty ranks, random permutations),
    /// causal or not, key padding, every pattern family, and v's head dim apart from q's.
    #[test]
    fn every_schedule_equals_single_device(
        (case, ranks, layout) in on_ranks(any_case_value_dim(29), |c| c.n, 8)
    ) {
        let plan = ChunkPlan::new(case.n, ranks, &layout).unwrap();
        for schedule in all_schedules(&plan, &case.spec, case.heads) {
            check_schedule(&case, &schedule)?;
        }
    }

    /// The Ulysses x ring hybrid, for every Ulysses degree dividing P (1: the ring over
    /// all ranks, P: Ulysses), forward and backward, equals the single-device reference
    /// to 1e-12 on the same cases; `Kind::build` picks a degree that divides P.
    #[test]
    fn hybrid_equals_single_device_for_every_degree(
        (case, ranks, layout) in on_ranks(any_case_value_dim(29), |c| c.n, 8)
    ) {
        let plan = ChunkPlan::new(case.n, ranks, &layout).unwrap();
        for degree in (1..=ranks).filter(|u| ranks % u == 0) {
            let schedule = hybrid(&plan, &case.spec, case.heads, degree).unwrap();
            prop_assert_eq!(schedule.kind, Kind::Hybrid);
            check_schedule(&case, &schedule)?;
        }
        check_schedule(&case, &Kind::Hybrid.build(&plan, &case.spec, case.heads).unwrap())?;
    }

    /// The hybrid's per-rank volume is the formula of its docs (`ring::hybrid`), forward
    /// and backward, for every degree, any boundaries (empty ranks included).
    #[test]
    fn hybrid_volume_is_the_documented_formula(
        (n, ranks, layout) in (1..=40usize, 1..=8usize).prop_flat_map(|(n, p)| (Just(n), Just(p), ring_layout(n, p))),
        heads in 1..=5usize,
    ) {
        let (batch, d) = (2, 3);
        let plan = ChunkPlan::new(n, ranks, &layout).unwrap();
        let spec = Spec::dense();
        for degree in (1..=ranks).filter(|u| ranks % u == 0) {
            let schedule = hybrid(&plan, &spec, heads, degree).unwrap();
            let [fwd, bwd] = schedule.sent_elements(batch, d, d);
            let groups = ranks / degree;
            let split = ringdil_reference::ring::even_boundaries(heads, degree);
            for p in 0..ranks {
                let (g, u) = (p / degree, p % degree);
                let hu = split[u + 1] - split[u];
                let np = plan.tokens(p).len();
                let group_len = |g: usize| (g * degree..(g + 1) * degree).map(|r| plan.tokens(r).len()).sum::<usize>();
                let (ng, next) = (group_len(g), group_len((g + 1) % groups));
                let ring_hops = if groups > 1 { n - next } else { 0 };
                let last_hop = if groups > 1 { next } else { 0 };
                let want_fwd = 3 * batch * d * np * (heads - hu)
                    + 2 * batch * d * hu * ring_hops
                    + batch * (d + 1) * hu * (ng - np);
                let want_bwd = batch * (5 * d + 1) * np * (heads - hu)
                    + 4 * batch * d * hu * ring_hops
                    + 2 * batch * d * hu * last_hop
                    + 3 * batch * d * hu * (ng - np);
                let got_fwd: usize = fwd.iter().map(|step| step[p]).sum();
                let got_bwd: usize = bwd.iter().map(|step| step[p]).sum();
                prop_assert_eq!(got_fwd, want_fwd, "forward, rank {}, degree {}", p, degree);
                prop_assert_eq!(got_bwd, want_bwd, "backward, rank {}, degree {}", p, degree);
            }
        }
    }

    /// Per-rank peak memory of the ring is O(N/P): at most a fixed number of token rows
    /// per owned-or-visiting token, measured by the simulation's meter; the all-gather
    /// schedule on the same input holds all N keys (the meter sees the difference).
    #[test]
    fn ring_memory_is_o_n_over_p(
        n in 8..=96usize,
        ranks in 1..=8usize,
        layout in prop_oneof![Just(Layout::Contiguous), Just(Layout::Zigzag), Just(Layout::Striped)],
        causal in any::<bool>(),
    ) {
        let (batch, heads, dim) = (1, 2, 3);
        let plan = ChunkPlan::new(n, ranks, &layout).unwrap();
        let spec = Spec::dense().causal(causal);
        let shape = [batch, n, heads, dim];
        let (q, k, v) = (normal_tensor(shape, 1), normal_tensor(shape, 2), normal_tensor(shape, 3));
        let d_out = normal_tensor(shape, 4);
        let per_token = batch * heads * (dim + 1);
        // Owned rows: Q K V dOut Out dQ dK dV (8); visiting blocks: K V dK dV, at most two
        // blocks resident while one arrives and the other leaves (8). Block size <= 2 ceil(N/2P).
        let bound = 16 * per_token * (n.div_ceil(ranks) + 1);
        let (_, _, report) = simulate(&ring(&plan, &spec, heads).unwrap(), &spec, q.view(), k.view(), v.view(), Some(d_out.view())).unwrap();
        for (r, &peak) in report.peak.iter().enumerate() {
            prop_assert!(peak <= bound, "rank {r}: peak {peak} > bound {bound} (N {n}, P {ranks})");
        }
        let (_, _, gathered) = simulate(&all_gather(&plan, heads), &spec, q.view(), k.view(), v.view(), None).unwrap();
        prop_assert!(gathered.peak.iter().all(|&p| p >= 2 * batch * heads * dim * n));
    }
}

/// f32: the ring in single precision stays within a documented bound of the f64
/// reference: relative error < 1e-5 for the output and < 1e-4 for the gradients
/// (f32 epsilon is 1.2e-7; the sums have at most a few hundred terms).
#[test]
fn ring_f32_within_documented_bound() {
    let (b, n, h, d) = (2, 61, 3, 8);
    let spec = Spec::new(Dilated::longnet(&[(8, 1), (16, 2), (32, 4)])).causal(true);
    let plan = ChunkPlan::new(n, 5, &Layout::Zigzag).unwrap();
    let shape = [b, n, h, d];
    let (q, k, v, g) =
        (normal_tensor(shape, 11), normal_tensor(shape, 12), normal_tensor(shape, 13), normal_tensor(shape, 14));
    let want = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let want_grad = attention_backward(q.view(), k.view(), v.view(), &spec, &want, g.view()).unwrap();
    let f = |x: &Array4<f64>| x.mapv(|x| x as f32);
    let schedule = ring(&plan, &spec, h).unwrap();
    let (out, grad, _) =
        simulate(&schedule, &spec, f(&q).view(), f(&k).view(), f(&v).view(), Some(f(&g).view())).unwrap();
    let grad = grad.unwrap();
    let wide = |x: &Array4<f32>| x.mapv(f64::from);
    let e_out = rel_err(wide(&out.out).iter(), want.out.iter());
    assert!(e_out < 1e-5, "out {e_out}");
    for (what, x, w) in
        [("dq", &grad.dq, &want_grad.dq), ("dk", &grad.dk, &want_grad.dk), ("dv", &grad.dv, &want_grad.dv)]
    {
        let e = rel_err(wide(x).iter(), w.iter());
        assert!(e < 1e-4, "{what} {e}");
    }
}

/// Causal dense attention on a contiguous layout: the ring skips exactly the
/// `P (P - 1) / 2` blocks above the diagonal, forward and backward; the zigzag layout
/// skips none (every rank holds a late chunk); a narrow sliding window skips all but
/// the neighbouring blocks.
#[test]
fn ring_skips_exactly_the_empty_blocks() {
    let (n, p, h) = (32, 4, 2);
    let causal = Spec::dense().causal(true);
    let contiguous = ChunkPlan::new(n, p, &Layout::Contiguous).unwrap();
    let zigzag = ChunkPlan::new(n, p, &Layout::Zigzag).unwrap();
    let skipped = |plan: &ChunkPlan, spec: &Spec| {
        let s = ring(plan, spec, h).unwrap();
        let per_phase = |steps: &[ringdil_reference::ring::Step]| steps.iter().map(|s| s.skipped.len()).sum::<usize>();
        (per_phase(&s.forward), per_phase(&s.backward))
    };
    assert_eq!(skipped(&contiguous, &causal), (6, 6));
    assert_eq!(skipped(&zigzag, &causal), (0, 0));
    assert_eq!(skipped(&contiguous, &Spec::new(Dense)), (0, 0));
    // Window of 3 on blocks of 8: rank r sees only blocks r-1, r, r+1.
    let window = Spec::new(SlidingWindow { left: 3, right: 3 });
    assert_eq!(skipped(&contiguous, &window), (6, 6));
    // And the report counts the computes actually run: P^2 - skipped per phase.
    let shape = [1, n, h, 4];
    let (q, k, v) = (normal_tensor(shape, 1), normal_tensor(shape, 2), normal_tensor(shape, 3));
    let (_, _, report) =
        simulate(&ring(&contiguous, &causal, h).unwrap(), &causal, q.view(), k.view(), v.view(), Some(q.view()))
            .unwrap();
    assert_eq!((report.computes, report.skipped), (2 * 10, 12));
}

/// The output of a permuted layout comes back in the original token order, and the
/// per-rank store really is partitioned: a replayed schedule with a send removed fails
/// with the missing row named, not with wrong numbers.
#[test]
fn missing_send_is_a_typed_error() {
    let (n, h) = (6, 1);
    let spec = Spec::dense();
    let plan = ChunkPlan::new(n, 2, &Layout::Permuted { order: vec![5, 0, 3, 1, 4, 2], boundaries: None }).unwrap();
    let mut schedule = ring(&plan, &spec, h).unwrap();
    let shape = [1, n, h, 2];
    let (q, k, v) = (normal_tensor(shape, 1), normal_tensor(shape, 2), normal_tensor(shape, 3));
    let (out, _, _) = simulate(&schedule, &spec, q.view(), k.view(), v.view(), None).unwrap();
    let want = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    assert!(rel_err(out.out.iter(), want.out.iter()) < TOL_F64);
    schedule.forward[1].ops.retain(|op| !matches!(op, Op::Send { to: 1, .. }));
    let err = simulate(&schedule, &spec, q.view(), k.view(), v.view(), None).unwrap_err();
    assert_eq!(err, Error::MissingRow { rank: 1, tensor: "K", token: 5, head: 0 });
    assert!(err.to_string().contains("rank 1 needs K of token 5"), "{err}");
}

/// Every bad input is a typed error whose message names the bad value.
#[test]
fn bad_plans_and_schedules_are_typed_errors() {
    let msg = |e: Error| e.to_string();
    assert_eq!(ChunkPlan::new(5, 0, &Layout::Contiguous).unwrap_err(), Error::ZeroRanks);
    let e = ChunkPlan::new(5, 2, &Layout::Boundaries(vec![0, 4, 3])).unwrap_err();
    assert!(msg(e).contains("[0, 4, 3]"));
    let e = ChunkPlan::new(5, 2, &Layout::Boundaries(vec![0, 5])).unwrap_err();
    assert_eq!(e, Error::BadBoundaries { boundaries: vec![0, 5], ranks: 2, seq_len: 5 });
    let e = ChunkPlan::new(3, 1, &Layout::Permuted { order: vec![0, 2, 2], boundaries: None }).unwrap_err();
    assert_eq!(e, Error::NotAPermutation { len: 3, seq_len: 3, token: Some(2) });
    assert!(msg(e).contains("token 2"));
    let e = ChunkPlan::new(3, 1, &Layout::Permuted { order: vec![0, 1], boundaries: None }).unwrap_err();
    assert!(msg(e).contains("2 entries"));
    // A hybrid whose Ulysses degree is 0 or does not divide the ranks.
    let six = ChunkPlan::new(12, 6, &Layout::Zigzag).unwrap();
    for degree in [0, 4, 7] {
        let e = hybrid(&six, &Spec::dense(), 4, degree).unwrap_err();
        assert_eq!(e, Error::UlyssesDegree { ulysses: degree, ranks: 6 });
        assert!(msg(e).contains(&format!("Ulysses degree {degree} does not divide 6 ranks")));
    }
    // A schedule read back from JSON with a rank out of range, heads out of range, or a
    // pair computed twice.
    let spec = Spec::dense();
    let plan = ChunkPlan::new(4, 2, &Layout::Contiguous).unwrap();
    let shape = [1, 4, 1, 2];
    let (q, k, v) = (normal_tensor(shape, 1), normal_tensor(shape, 2), normal_tensor(shape, 3));
    let good = ring(&plan, &spec, 1).unwrap();
    let mut bad = good.clone();
    bad.forward[0].ops.push(Op::compute(false, 7, 0..1, &[0], &[0]));
    assert_eq!(
        Simulation::new(&bad, &spec, q.view(), k.view(), v.view()).unwrap_err(),
        Error::BadRank { rank: 7, ranks: 2 }
    );
    let mut bad = good.clone();
    bad.forward[0].ops.push(Op::free(0, &[], 0..3, &[]));
    assert_eq!(
        Simulation::new(&bad, &spec, q.view(), k.view(), v.view()).unwrap_err(),
        Error::BadHeads { start: 0, end: 3, heads: 1 }
    );
    let mut bad = good.clone();
    bad.forward[0].ops.push(Op::compute(false, 0, 0..1, &[1], &[0]));
    let e = Simulation::new(&bad, &spec, q.view(), k.view(), v.view()).unwrap_err();
    assert_eq!(e, Error::PairCoverage { query: 1, key: 0, head: 0, count: 2 });
    assert!(msg(e).contains("computed 2 times"));
    let mut bad = good.clone();
    bad.forward[0].ops.clear();
    let e = Simulation::new(&bad, &spec, q.view(), k.view(), v.view()).unwrap_err();
    assert_eq!(e, Error::PairCoverage { query: 0, key: 0, head: 0, count: 0 });
    // Tensors of another length than the schedule's plan.
    let short = normal_tensor([1, 3, 1, 2], 1);
    assert!(matches!(
        Simulation::new(&good, &spec, short.view(), short.view(), short.view()),
        Err(Error::ShapeMismatch { .. })
    ));
    // Backward before forward.
    let mut sim = Simulation::new(&good, &spec, q.view(), k.view(), v.view()).unwrap();
    assert_eq!(sim.backward(q.view()).unwrap_err(), Error::BackwardBeforeForward);
}

//! Numerical robustness under extreme inputs (issue 20): scores beyond the range where
//! `exp` is finite, equal and single-key rows at any magnitude, and finite inputs whose
//! scores overflow.
//!
//! The other proofs use unit-scale inputs, where a softmax or a merge that forgot to
//! subtract the running maximum still passes. Here the scores reach about `1e2` in f32
//! and `1e3` in f64 and are often shifted as a whole past the edge of `exp`'s range
//! (`ln f32::MAX = 88.72`, `ln f64::MAX = 709.78`): formed without the maximum subtracted,
//! `exp(s)` is `inf` (or, for a negative shift, every term underflows to 0) and the
//! result NaN. Every path (attention, chunks merged in any order, the backward, every
//! ring schedule, every pattern kind through `any_case`) is compared with f64 oracles on
//! the same, already rounded inputs: `naive_attention` of `ringdil_proofs` for the
//! forward (it subtracts the row maximum, so it is exact to f64 rounding at these
//! magnitudes) and [`oracle::truth`]'s transcription of the backward formulas of
//! `docs/semantics.md` section 10, within the derived bound of [`oracle::Budget`]
//! (`extreme/oracle.rs`).
//!
//! Past `1/u` (u the unit roundoff) a score's own rounding exceeds 1 and only exactly
//! representable inputs have a meaningful answer: [`equal_scores_give_the_mean`] and
//! [`one_key_rows_are_exact`] use such inputs up to scores of `2^110` (f32) and `2^1000`
//! (f64). Finite inputs whose scores are not finite are [`Error::ScoreOverflow`].

#[path = "extreme/oracle.rs"]
mod oracle;

use ndarray::{Array3, Array4, Axis, NdFloat, s};
use oracle::{SAFETY, Size, check, inputs, narrow, rows, size_f32, size_f64, truth, unit, wide};
use proptest::prelude::*;
use ringdil_proofs::{Case, any_case, config, on_ranks, partition, pattern_counts, shuffled, spec_counts};
use ringdil_reference::float::cast;
use ringdil_reference::pattern::{BlockSparse, Dense, Dilated, SlidingWindow};
use ringdil_reference::random::{SplitMix64, normal_tensor};
use ringdil_reference::ring::{ChunkPlan, Schedule, all_gather, pattern_ring, ring, simulate, ulysses};
use ringdil_reference::{
    Attention, Error, Gradients, OutputGrad, Partial, Spec, attend_chunk, attention, attention_backward, backward_chunk,
};

// ---------------------------------------------------------------------------------
// Large scores against the oracle
// ---------------------------------------------------------------------------------

/// `attention` and `attention_backward` in `T` on inputs of `size`.
fn full_attention<T: NdFloat>(case: &Case, size: Size) -> Result<(), TestCaseError> {
    let x = inputs::<T>(case, size);
    let truth = truth(case, &x);
    let [q, k, v, d_out] = x.each_ref().map(narrow::<T>);
    let fwd = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
    let grads = attention_backward(q.view(), k.view(), v.view(), &case.spec, &fwd, d_out.view()).unwrap();
    check("attention", case, &truth, 0, &fwd, Some(&grads))
}

/// Keys split into `parts`: `attend_chunk` per part, merged in a random binary tree
/// (any order, any grouping), then `backward_chunk` per part with the merged result's
/// `OutputGrad`, dq summed and dk, dv scattered to the part's rows.
fn key_partition<T: NdFloat>(case: &Case, size: Size, parts: &[Vec<usize>], seed: u64) -> Result<(), TestCaseError> {
    let x = inputs::<T>(case, size);
    let truth = truth(case, &x);
    let [q, k, v, d_out] = x.each_ref().map(narrow::<T>);
    let (n, spec, all) = (case.n, &case.spec, (0..case.n).collect::<Vec<_>>());
    let (b, h, d) = (case.batch, case.heads, case.dim);
    let chunk = |part: &[usize]| (k.select(Axis(1), part), v.select(Axis(1), part));
    let mut partials: Vec<Partial<T>> = parts
        .iter()
        .map(|part| {
            if part.is_empty() {
                return Partial::empty(b, n, h, d);
            }
            let (kp, vp) = chunk(part);
            attend_chunk(q.view(), &all, kp.view(), vp.view(), part, n, spec).unwrap()
        })
        .collect();
    let mut rng = SplitMix64::new(seed);
    while partials.len() > 1 {
        partials = shuffled(partials, &mut rng);
        let (right, left) = (partials.pop().unwrap(), partials.pop().unwrap());
        partials.push(left.merge(&right).unwrap());
    }
    let fwd = partials.pop().unwrap().finish(spec);
    let grad = OutputGrad::new(spec, &fwd, d_out.view()).unwrap();
    let mut grads =
        Gradients { dq: Array4::zeros(q.raw_dim()), dk: Array4::zeros(k.raw_dim()), dv: v.mapv(|_| T::zero()) };
    for part in parts.iter().filter(|p| !p.is_empty()) {
        let (kp, vp) = chunk(part);
        let g = backward_chunk(q.view(), &all, kp.view(), vp.view(), part, n, spec, &grad).unwrap();
        grads.dq = grads.dq + g.dq;
        for (c, &j) in part.iter().enumerate() {
            grads.dk.slice_mut(s![.., j, .., ..]).assign(&g.dk.slice(s![.., c, .., ..]));
            grads.dv.slice_mut(s![.., j, .., ..]).assign(&g.dv.slice(s![.., c, .., ..]));
        }
    }
    check("key partition", case, &truth, parts.len(), &fwd, Some(&grads))
}

/// Every schedule family replayed on the plan's simulated ranks, forward and backward.
fn schedules<T: NdFloat>(case: &Case, size: Size, plan: &ChunkPlan) -> Result<(), TestCaseError> {
    let x = inputs::<T>(case, size);
    let truth = truth(case, &x);
    let [q, k, v, d_out] = x.each_ref().map(narrow::<T>);
    let (spec, heads) = (&case.spec, case.heads);
    let all: [Schedule; 4] = [
        ring(plan, spec, heads).unwrap(),
        pattern_ring(plan, spec, heads).unwrap(),
        all_gather(plan, heads),
        ulysses(plan, heads),
    ];
    for schedule in &all {
        let (fwd, grads, _) = simulate(schedule, spec, q.view(), k.view(), v.view(), Some(d_out.view())).unwrap();
        check(&format!("{:?}", schedule.kind), case, &truth, plan.ranks() + 1, &fwd, grads.as_ref())?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Full attention and its backward, every pattern kind, scores about `1e3` in f64
    /// (often all past `exp`'s edge), within the derived bound of the f64 oracle.
    #[test]
    fn attention_matches_the_oracle_f64(case in any_case(12), size in size_f64()) {
        full_attention::<f64>(&case, size)?;
    }

    /// The same in f32 (scores about `1e2`, shifts past `88.72`), against the f64 oracle
    /// on the same rounded inputs, within the f32 budget.
    #[test]
    fn attention_matches_the_oracle_f32(case in any_case(12), size in size_f32()) {
        full_attention::<f32>(&case, size)?;
    }

    /// Any key partition, merged in any order and grouping, forward and backward, f64.
    #[test]
    fn key_partitions_merge_to_the_oracle_f64(
        (case, parts) in any_case(12).prop_flat_map(|c| { let n = c.n; (Just(c), partition(n, 5)) }),
        size in size_f64(),
        seed in any::<u64>(),
    ) {
        key_partition::<f64>(&case, size, &parts, seed)?;
    }

    /// The same in f32.
    #[test]
    fn key_partitions_merge_to_the_oracle_f32(
        (case, parts) in any_case(12).prop_flat_map(|c| { let n = c.n; (Just(c), partition(n, 5)) }),
        size in size_f32(),
        seed in any::<u64>(),
    ) {
        key_partition::<f32>(&case, size, &parts, seed)?;
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// Ring, pattern-aware ring, all-gather and Ulysses on 1..=4 ranks, any layout, in
    /// f64 and f32 at their large sizes.
    #[test]
    fn ring_schedules_match_the_oracle(
        (case, plan) in on_ranks(any_case(12), |c| c.n, 4).prop_map(|(c, p, layout)| { let plan = ChunkPlan::new(c.n, p, &layout).unwrap(); (c, plan) }),
        (s64, s32) in (size_f64(), size_f32()),
    ) {
        schedules::<f64>(&case, s64, &plan)?;
        schedules::<f32>(&case, s32, &plan)?;
    }
}

// ---------------------------------------------------------------------------------
// Exactly representable inputs at any magnitude
// ---------------------------------------------------------------------------------

/// Entries `a * 2^e` with small integers `a` in `-8..=8`: products and sums of a few
/// hundred of them are exact in both types, so every score is computed exactly
/// whatever the summation order, and equal scores are equal bit for bit.
fn exact(shape: [usize; 4], e: i32, seed: u64) -> Array4<f64> {
    let mut rng = SplitMix64::new(seed);
    Array4::from_shape_simple_fn(shape, || (rng.range(0, 16) as f64 - 8.0) * 2f64.powi(e))
}

/// Score exponents `t` (scores `|s| <= 320 * 2^t`): around the edge of `exp`'s range,
/// or huge (up to `2^110` for f32, `2^1000` for f64; `320 * 2^t` stays finite).
fn exponent(f32: bool) -> impl Strategy<Value = i32> {
    let top = if f32 { 110 } else { 1000 };
    prop_oneof![-4..=12i32, 12..=top]
}

/// `q` of `case` as exact entries, `k` the same row for every key (so every allowed
/// score of a row is the same number `s_i`), scale `1/2`: scores `2^t` times integers.
fn equal_rows<T: NdFloat>(case: &Case, t: i32) -> Result<(), TestCaseError> {
    let spec = Spec { scale: Some(0.5), ..case.spec.clone() };
    let (b, n, h, d) = (case.batch, case.n, case.heads, case.dim);
    let q = exact(case.shape(), t / 2, case.seed);
    let one_key = exact([b, 1, h, d], t + 1 - t / 2, case.seed ^ 1);
    let k = Array4::from_shape_fn(case.shape(), |(b, _, h, x)| one_key[[b, 0, h, x]]);
    let v = wide(&narrow::<T>(&normal_tensor([b, n, h, d], case.seed ^ 2)));
    let counts = spec_counts(&spec, &case.pattern_counts(), b);
    let got = attention(narrow::<T>(&q).view(), narrow::<T>(&k).view(), narrow::<T>(&v).view(), &spec).unwrap();
    let (out, lse) = (wide(&got.out), wide(&got.lse));
    let u = unit::<T>();
    for (b, h, i) in rows(b, h, n) {
        let sigma = spec.pattern.output_scale(h, case.heads);
        let c = |j: usize| f64::from(counts[[b, h, i, j]]);
        let total: f64 = (0..n).map(c).sum();
        if total == 0.0 {
            prop_assert_eq!(lse[[b, h, i]], f64::NEG_INFINITY);
            continue;
        }
        let s = 0.5 * (0..d).map(|x| q[[b, i, h, x]] * one_key[[b, 0, h, x]]).sum::<f64>();
        let (want, got) = (s + total.ln(), lse[[b, h, i]]);
        prop_assert!((got - want).abs() <= SAFETY * u * (s.abs() + total.ln() + 1.0), "lse {got:e} vs {want:e}");
        for x in 0..d {
            let mean = sigma * (0..n).map(|j| c(j) * v[[b, j, h, x]]).sum::<f64>() / total;
            let mag = sigma * (0..n).map(|j| c(j) * v[[b, j, h, x]].abs()).sum::<f64>() / total;
            let o = out[[b, i, h, x]];
            prop_assert!((o - mean).abs() <= SAFETY * (n as f64 + 3.0) * u * mag, "out {o:e} vs mean {mean:e}");
        }
    }
    Ok(())
}

/// Patterns that give every query exactly one key, with count 1.
fn one_key_specs(batch: usize) -> Vec<Spec> {
    vec![
        Spec::new(SlidingWindow { left: 0, right: 0 }),
        Spec::new(Dilated::longnet(&[(1, 1)])),
        Spec::new(BlockSparse::local(1, 0)),
        Spec::new(Dense).key_lengths(vec![1; batch]),
    ]
    .into_iter()
    .map(|s| s.scale(0.5))
    .collect()
}

/// Exact `q`, `k` with scores `2^t` times integers, exact `v` and `d_out`: each query
/// `i`'s single key `j(i)` gives `out_i = v_j`, `lse_i = s_ij` and, since `P = exp(0) = 1`
/// and `dP = delta = dO . v_j`, `dq = dk = 0` and `dv_j = sum_{i: j(i) = j} dO_i`, all bit
/// for bit. Masked scores may be huge; they must not matter.
fn one_key<T: NdFloat>(spec: &Spec, shape: [usize; 4], t: i32, seed: u64) -> Result<(), TestCaseError> {
    let (b, n, h, d) = (shape[0], shape[1], shape[2], shape[3]);
    let [q, k, v, d_out] = [(t / 2, 0), (t + 1 - t / 2, 1), (-3, 2), (0, 3)].map(|(e, s)| exact(shape, e, seed ^ s));
    let [qt, kt, vt, dt] = [&q, &k, &v, &d_out].map(narrow::<T>);
    let fwd = attention(qt.view(), kt.view(), vt.view(), spec).unwrap();
    let grads = attention_backward(qt.view(), kt.view(), vt.view(), spec, &fwd, dt.view()).unwrap();
    let counts = spec_counts(spec, &pattern_counts(&*spec.pattern, h, n), b);
    let mut dv = Array4::<f64>::zeros(v.raw_dim());
    for (b, h, i) in rows(b, h, n) {
        let keys: Vec<usize> = (0..n).filter(|&j| counts[[b, h, i, j]] > 0).collect();
        prop_assert_eq!(keys.len(), 1);
        let j = keys[0];
        let s = 0.5 * (0..d).map(|x| q[[b, i, h, x]] * k[[b, j, h, x]]).sum::<f64>();
        prop_assert_eq!(cast::<T, f64>(fwd.lse[[b, h, i]]), s);
        for x in 0..d {
            prop_assert_eq!(cast::<T, f64>(fwd.out[[b, i, h, x]]), v[[b, j, h, x]]);
            dv[[b, j, h, x]] += d_out[[b, i, h, x]];
        }
    }
    prop_assert!(grads.dq.iter().chain(&grads.dk).all(|&g| g == T::zero()), "dq, dk must vanish");
    prop_assert_eq!(wide(&grads.dv), dv);
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Rows whose keys all have the same score (any pattern, multiplicities included):
    /// output = the count-weighted mean of their `v` rows, LSE = `s + ln(count)`, at
    /// the edge of `exp`'s range and far past `1/u`, in both types.
    #[test]
    fn equal_scores_give_the_mean(
        case in any_case(12),
        (f32, t) in any::<bool>().prop_flat_map(|f32| (Just(f32), exponent(f32))),
    ) {
        if f32 {
            equal_rows::<f32>(&case, t)?;
        } else {
            equal_rows::<f64>(&case, t)?;
        }
    }

    /// Rows with exactly one key: output = that `v` row and LSE = its score, exactly,
    /// and the gradients of the backward, at any magnitude, in both types.
    #[test]
    fn one_key_rows_are_exact(
        (b, n, h, d) in (1..=2usize, 1..=12usize, 1..=3usize, 1..=5usize),
        (f32, t) in any::<bool>().prop_flat_map(|f32| (Just(f32), exponent(f32))),
        seed in any::<u64>(),
    ) {
        for spec in one_key_specs(b) {
            if f32 {
                one_key::<f32>(&spec, [b, n, h, d], t, seed)?;
            } else {
                one_key::<f64>(&spec, [b, n, h, d], t, seed)?;
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Finite inputs, overflowing scores: a typed error
// ---------------------------------------------------------------------------------

/// The error of all four entry points (forward and backward, full and chunked over all
/// positions), which must agree; the backward is given a finite forward result, so
/// only its own scores can fail.
fn error_everywhere<T: NdFloat>(spec: &Spec, [q, k, v]: &[Array4<T>; 3]) -> Option<Error> {
    let (b, n, h, _) = q.dim();
    let all: Vec<usize> = (0..n).collect();
    let fwd = Attention { out: v.mapv(|_| T::one()), lse: Array3::zeros((b, h, n)) };
    let grad = OutputGrad::new(spec, &fwd, fwd.out.view()).unwrap();
    let results = [
        attention(q.view(), k.view(), v.view(), spec).err(),
        attend_chunk(q.view(), &all, k.view(), v.view(), &all, n, spec).err(),
        attention_backward(q.view(), k.view(), v.view(), spec, &fwd, fwd.out.view()).err(),
        backward_chunk(q.view(), &all, k.view(), v.view(), &all, n, spec, &grad).err(),
    ];
    let shown = results.each_ref().map(|e| format!("{e:?}"));
    assert!(shown.iter().all(|s| *s == shown[0]), "entry points disagree: {shown:?}");
    results.into_iter().next().unwrap()
}

/// `q`, `k`, `v` of `case` (standard normals) with `q[b, i, h, :]` and `k[b, j, h, :]`
/// set to `big`.
fn with_big_pair<T: NdFloat>(case: &Case, (b, h, i, j): (usize, usize, usize, usize), big: f64) -> [Array4<T>; 3] {
    let (mut q, mut k, v) = case.qkv();
    q.slice_mut(s![b, i, h, ..]).fill(big);
    k.slice_mut(s![b, j, h, ..]).fill(big);
    [narrow(&q), narrow(&k), narrow(&v)]
}

/// One pair `(b, h, i, j)` whose entries are all `big`, so that its score overflows `T`
/// (`1e20^2 > 3.4e38`, `1e160^2 > 1.8e308`) while every other score stays finite: the
/// result is `ScoreOverflow` naming exactly that pair iff the spec allows it, and
/// finite results otherwise (masked scores are not part of the function); the ring
/// schedules report the same error.
fn overflow_case<T: NdFloat>(case: &Case, at: (usize, usize, usize, usize), big: f64) -> Result<(), TestCaseError> {
    let (b, h, i, j) = at;
    let qkv = with_big_pair::<T>(case, at, big);
    let [q, k, v] = &qkv;
    let d_out = narrow::<T>(&normal_tensor(case.shape(), case.seed ^ 0xD0));
    let allowed = spec_counts(&case.spec, &case.pattern_counts(), case.batch)[[b, h, i, j]] > 0;
    let dtype = std::any::type_name::<T>();
    let overflow = |head| Error::ScoreOverflow { batch: b, head, query: i, key: j, score: f64::INFINITY, dtype };
    let want = overflow(h);
    match error_everywhere(&case.spec, &qkv) {
        Some(err) => {
            prop_assert!(allowed, "masked pair refused: {err}");
            prop_assert_eq!(&err, &want);
            let text = err.to_string();
            prop_assert!(text.contains(&format!("batch row {b}, head {h}, query {i}, key {j}")), "{text}");
            prop_assert!(text.contains(&format!("inf is not finite in {dtype}")), "{text}");
        }
        None => {
            prop_assert!(!allowed, "allowed overflowing pair accepted");
            let fwd = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
            let g = attention_backward(q.view(), k.view(), v.view(), &case.spec, &fwd, d_out.view()).unwrap();
            let finite = |x: &Array4<T>| x.iter().all(|v| v.is_finite());
            prop_assert!(finite(&fwd.out) && finite(&g.dq) && finite(&g.dk) && finite(&g.dv));
        }
    }
    let plan = ChunkPlan::new(case.n, 2, &ringdil_reference::ring::Layout::Zigzag).unwrap();
    let (spec, heads) = (&case.spec, case.heads);
    let all = [ring(&plan, spec, heads).unwrap(), pattern_ring(&plan, spec, heads).unwrap(), all_gather(&plan, heads)];
    for schedule in all.iter().chain([&ulysses(&plan, heads)]) {
        // A simulated compute runs on a slice of the heads, and names its head within it.
        let err = simulate(schedule, spec, q.view(), k.view(), v.view(), Some(d_out.view())).err();
        let same = |e: &Error| match *e {
            Error::ScoreOverflow { head, .. } => head <= h && *e == overflow(head),
            _ => false,
        };
        prop_assert_eq!(err.as_ref().is_some_and(same), allowed, "{:?}: {:?}", schedule.kind, err);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Finite inputs near the type's maximum whose score overflows: a typed error
    /// exactly on allowed pairs, for every pattern kind, causality and padding.
    #[test]
    fn overflow_is_an_error_exactly_on_allowed_pairs(
        (case, at) in any_case(10).prop_flat_map(|c| {
            let (b, h, n) = (c.batch, c.heads, c.n);
            (Just(c), (0..b, 0..h, 0..n, 0..n))
        }),
        f32 in any::<bool>(),
    ) {
        if f32 {
            overflow_case::<f32>(&case, at, 1e20)?;
        } else {
            overflow_case::<f64>(&case, at, 1e160)?;
        }
    }
}

/// Several overflowing pairs: the error names the first in (batch, head, query, key)
/// order, whatever the blocking (70 queries: two blocks), with its value: `-inf` for a
/// negative overflow, and NaN or `+-inf` when products of both signs overflow (`+inf +
/// -inf` is NaN, but a fused multiply-add of the matrix product may give `+-inf`).
#[test]
fn overflow_error_names_the_first_pair_and_its_value() {
    let case = Case { batch: 2, n: 70, heads: 2, dim: 2, value_dim: 2, spec: Spec::dense(), seed: 5 };
    let (mut q, mut k, v) = case.qkv();
    let big = 1e160;
    for (b, h, i) in [(1, 0, 2), (0, 1, 66), (0, 1, 3)] {
        q.slice_mut(s![b, i, h, ..]).fill(big);
    }
    k.slice_mut(s![1, 4, 0, ..]).fill(big); // (1, 0, 2, 4): +inf
    k.slice_mut(s![0, 5, 1, ..]).fill(big); // (0, 1, 66, 5) and (0, 1, 3, 5): +inf
    k.slice_mut(s![0, 40, 1, ..]).fill(-big); // (0, 1, 66, 40) and (0, 1, 3, 40): -inf
    k.slice_mut(s![0, 1, 1, ..]).assign(&ndarray::arr1(&[big, -big])); // (0, 1, 3, 1): NaN
    let err = error_everywhere(&case.spec, &[q.clone(), k.clone(), v.clone()]).unwrap();
    assert!(
        matches!(err, Error::ScoreOverflow { batch: 0, head: 1, query: 3, key: 1, score, dtype: "f64" } if !score.is_finite()),
        "{err:?}"
    );
    assert!(err.to_string().contains("batch row 0, head 1, query 3, key 1: scale * q.k = "), "{err}");
    // In f32 (entries 1e20, the rest underflows to 0) without the NaN pair: key 5 first;
    // causal masks keys 5 and 40 of query 3, so query 66 is first; without key 5, -inf.
    k.slice_mut(s![0, 1, 1, ..]).fill(0.0);
    let want = |query, key, score| Some(Error::ScoreOverflow { batch: 0, head: 1, query, key, score, dtype: "f32" });
    let mut x = [&q, &k, &v].map(|x| x.mapv(|x| (x * 1e-140) as f32));
    assert_eq!(error_everywhere(&case.spec, &x), want(3, 5, f64::INFINITY));
    assert_eq!(error_everywhere(&case.spec.clone().causal(true), &x), want(66, 5, f64::INFINITY));
    x[1].slice_mut(s![0, 5, 1, ..]).fill(0.0);
    assert_eq!(error_everywhere(&case.spec, &x), want(3, 40, f64::NEG_INFINITY));
}

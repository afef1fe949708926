//! The online-softmax merge (`Partial`) is the one operation behind ring attention,
//! LongNet's branch combine and key tiling. These proofs show that splitting the keys
//! (and the queries) of any problem into arbitrary pieces, attending piece by piece and
//! merging gives full attention, forward and backward, and that the merge is a
//! commutative monoid with `Partial::empty` as its exact identity.
//!
//! Tolerances: every comparison is f64 against f64 computed in a different order, so
//! the only differences are rounding: `1e-12` relative (Frobenius), about 5000 ulps,
//! leaves room for the few dozen terms per sum these sizes have while still catching
//! any real mistake (a wrong weight, a missing key) by many orders of magnitude.
//! Gradients use an absolute floor (see `assert_close_floor`) because they can vanish
//! by cancellation.

use ndarray::{Array3, Array4, Axis};
use proptest::prelude::*;
use ringdil_proofs::{Case, any_case, assert_close, assert_close_floor, assert_lse_close, config, partition, qkv};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::{
    Attention, Error, OutputGrad, Partial, Spec, attend_chunk, attention, attention_backward, backward_chunk,
    pattern::SlidingWindow,
};

/// Relative tolerance of f64-vs-f64 comparisons (see the module docs).
const TOL: f64 = 1e-12;

/// Everything a chunked evaluation is compared with: full forward and backward.
struct Full {
    q: Array4<f64>,
    k: Array4<f64>,
    v: Array4<f64>,
    fwd: Attention<f64>,
    grad: OutputGrad<f64>,
    dq: Array4<f64>,
    dk: Array4<f64>,
    dv: Array4<f64>,
}

impl Full {
    fn new(case: &Case) -> Full {
        let (q, k, v) = case.qkv();
        let d_out = normal_tensor(case.shape(), case.seed ^ 0xD0);
        let fwd = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
        let g = attention_backward(q.view(), k.view(), v.view(), &case.spec, &fwd, d_out.view()).unwrap();
        let grad = OutputGrad::new(&case.spec, &fwd, d_out.view()).unwrap();
        Full { q, k, v, fwd, grad, dq: g.dq, dk: g.dk, dv: g.dv }
    }

    /// The magnitude below which gradient errors are judged absolutely.
    fn floor(&self) -> f64 {
        (self.q.len() as f64).sqrt()
    }
}

/// Attend the query rows `q_rows` over each key part, merge the partials in the given
/// order, and return the merged (unfinished) partial. Empty key parts contribute
/// `Partial::empty` (a chunk with no keys is what the identity stands for).
fn merged_over(full: &Full, spec: &Spec, n: usize, q_rows: &[usize], key_parts: &[Vec<usize>]) -> Partial<f64> {
    let q = full.q.select(Axis(1), q_rows);
    let (b, h, d) = (q.dim().0, q.dim().2, full.v.dim().3);
    let partials: Vec<Partial<f64>> = key_parts
        .iter()
        .map(|part| {
            if part.is_empty() {
                return Partial::empty(b, q_rows.len(), h, d);
            }
            let (k, v) = (full.k.select(Axis(1), part), full.v.select(Axis(1), part));
            attend_chunk(q.view(), q_rows, k.view(), v.view(), part, n, spec).unwrap()
        })
        .collect();
    Partial::merge_all(&partials, Partial::empty(b, q_rows.len(), h, d)).unwrap()
}

/// Backward of every (query part, key part) pair, scattered into full-size gradients:
/// dq rows add over key parts, dk/dv rows add over query parts.
fn backward_over(
    full: &Full,
    spec: &Spec,
    n: usize,
    q_parts: &[Vec<usize>],
    key_parts: &[Vec<usize>],
) -> [Array4<f64>; 3] {
    let mut dq = Array4::zeros(full.q.raw_dim());
    let mut dk = Array4::zeros(full.k.raw_dim());
    let mut dv = Array4::zeros(full.v.raw_dim());
    for rows in q_parts.iter().filter(|p| !p.is_empty()) {
        let q = full.q.select(Axis(1), rows);
        let grad = full.grad.select_rows(rows);
        for keys in key_parts.iter().filter(|p| !p.is_empty()) {
            let (k, v) = (full.k.select(Axis(1), keys), full.v.select(Axis(1), keys));
            let g = backward_chunk(q.view(), rows, k.view(), v.view(), keys, n, spec, &grad).unwrap();
            for (local, &global) in rows.iter().enumerate() {
                dq.index_axis_mut(Axis(1), global).scaled_add(1.0, &g.dq.index_axis(Axis(1), local));
            }
            for (local, &global) in keys.iter().enumerate() {
                dk.index_axis_mut(Axis(1), global).scaled_add(1.0, &g.dk.index_axis(Axis(1), local));
                dv.index_axis_mut(Axis(1), global).scaled_add(1.0, &g.dv.index_axis(Axis(1), local));
            }
        }
    }
    [dq, dk, dv]
}

/// A case together with a key partition and a query partition of its sequence.
fn case_with_partitions(max_n: usize) -> impl Strategy<Value = (Case, Vec<Vec<usize>>, Vec<Vec<usize>>)> {
    any_case(max_n).prop_flat_map(|case| {
        let n = case.n;
        (Just(case), partition(n, 5), partition(n, 3))
    })
}

proptest! {
    #![proptest_config(config(128))]

    /// All queries, keys split into random non-contiguous parts merged in random order:
    /// the merged partial, finished, is full attention (out and lse); the dq of the
    /// parts add up to the full dq and each part's dk/dv rows are the full rows.
    #[test]
    fn key_partition_equals_full_attention((case, key_parts, _) in case_with_partitions(24)) {
        let full = Full::new(&case);
        let all: Vec<usize> = (0..case.n).collect();
        let merged = merged_over(&full, &case.spec, case.n, &all, &key_parts).finish(&case.spec);
        assert_close("out", &merged.out, &full.fwd.out, TOL);
        assert_lse_close("lse", &merged.lse, &full.fwd.lse, TOL);

        let floor = full.floor();
        let mut dq_sum = Array4::zeros(full.q.raw_dim());
        for keys in key_parts.iter().filter(|p| !p.is_empty()) {
            let (k, v) = (full.k.select(Axis(1), keys), full.v.select(Axis(1), keys));
            let g = backward_chunk(full.q.view(), &all, k.view(), v.view(), keys, case.n, &case.spec, &full.grad).unwrap();
            dq_sum += &g.dq;
            assert_close_floor("dk rows of a part", &g.dk, &full.dk.select(Axis(1), keys), TOL, floor);
            assert_close_floor("dv rows of a part", &g.dv, &full.dv.select(Axis(1), keys), TOL, floor);
        }
        assert_close_floor("sum of dq over parts", &dq_sum, &full.dq, TOL, floor);
    }

    /// Queries split too (a ring rank holds a query chunk and sees key chunks in turn):
    /// every query chunk's merged partial is the full result's rows, and the gradients
    /// assembled from all (query chunk, key chunk) pairs are the full gradients. This
    /// also checks `OutputGrad::select_rows`.
    #[test]
    fn query_and_key_partition_equals_full_attention((case, key_parts, q_parts) in case_with_partitions(24)) {
        let full = Full::new(&case);
        for rows in q_parts.iter().filter(|p| !p.is_empty()) {
            let merged = merged_over(&full, &case.spec, case.n, rows, &key_parts).finish(&case.spec);
            assert_close("out rows", &merged.out, &full.fwd.out.select(Axis(1), rows), TOL);
            assert_lse_close("lse rows", &merged.lse, &full.fwd.lse.select(Axis(2), rows), TOL);
        }
        let [dq, dk, dv] = backward_over(&full, &case.spec, case.n, &q_parts, &key_parts);
        let floor = full.floor();
        assert_close_floor("dq", &dq, &full.dq, TOL, floor);
        assert_close_floor("dk", &dk, &full.dk, TOL, floor);
        assert_close_floor("dv", &dv, &full.dv, TOL, floor);
    }

    /// Merge is commutative and associative (to rounding) on partials over three
    /// disjoint key sets, and `empty()` is an exact two-sided identity.
    #[test]
    fn merge_is_a_commutative_monoid((case, parts, _) in case_with_partitions(20)) {
        let full = Full::new(&case);
        let all: Vec<usize> = (0..case.n).collect();
        // Three partials (pad with empty key sets when the partition has fewer parts).
        let mut sets = parts;
        sets.resize(3, Vec::new());
        let p: Vec<Partial<f64>> = sets.iter().map(|s| merged_over(&full, &case.spec, case.n, &all, std::slice::from_ref(s))).collect();
        let (a, b, c) = (&p[0], &p[1], &p[2]);

        let ab = a.merge(b).unwrap();
        let ba = b.merge(a).unwrap();
        assert_close("a+b vs b+a out", &ab.out, &ba.out, TOL);
        assert_lse_close("a+b vs b+a lse", &ab.lse, &ba.lse, TOL);

        let left = ab.merge(c).unwrap();
        let right = a.merge(&b.merge(c).unwrap()).unwrap();
        assert_close("(a+b)+c vs a+(b+c) out", &left.out, &right.out, TOL);
        assert_lse_close("(a+b)+c vs a+(b+c) lse", &left.lse, &right.lse, TOL);

        let (batch, n, heads, d) = a.dims();
        let empty = Partial::empty(batch, n, heads, d);
        prop_assert_eq!(&a.merge(&empty).unwrap(), a);
        prop_assert_eq!(&empty.merge(a).unwrap(), a);
    }
}

/// Rows that see no key in either partial stay empty after the merge: `lse = -inf`,
/// `out = 0`, no NaN. The partials come from real chunks: under causality a query
/// sees nothing in a chunk of later keys.
#[test]
fn merging_empty_rows_gives_empty_rows_without_nan() {
    let (q, k, v) = qkv([1, 6, 2, 3], 7);
    let spec = Spec::dense().causal(true);
    // Queries 0..2 against the disjoint key chunks {4} and {3, 5}: all strictly later.
    let rows = [0, 1, 2];
    let qs = q.select(Axis(1), &rows);
    let chunk = |keys: &[usize]| {
        let (ks, vs) = (k.select(Axis(1), keys), v.select(Axis(1), keys));
        attend_chunk(qs.view(), &rows, ks.view(), vs.view(), keys, 6, &spec).unwrap()
    };
    let (a, b) = (chunk(&[4]), chunk(&[3, 5]));
    for p in [&a, &b, &a.merge(&b).unwrap(), &Partial::empty(1, 3, 2, 3).merge(&Partial::empty(1, 3, 2, 3)).unwrap()] {
        assert!(p.lse.iter().all(|&l| l == f64::NEG_INFINITY), "lse {:?}", p.lse);
        assert!(p.out.iter().all(|&o| o == 0.0), "out {:?}", p.out);
    }
    // Merging an empty row with a non-empty one gives the non-empty one exactly.
    let c = chunk(&[0]);
    assert!(c.lse.iter().all(|l| l.is_finite()));
    assert_eq!(a.merge(&c).unwrap(), c);
}

/// The merge is computed relative to the larger LSE, so partials whose denominators
/// are `e^{+1000}` and `e^{-1000}` merge to finite values, although formed naively
/// `exp(1000)` overflows f64 (its `exp` is finite only below `ln f64::MAX = 709.78`) and
/// `exp(-1000)` underflows to 0: the result is the heavy side's output and LSE (the
/// light one's weight `e^{-2000}` underflows to 0). Equal LSEs at `1e3` and at `1e308`
/// (near `f64::MAX`) weigh `1/2` each, where the naive `exp(a) / (exp(a) + exp(b))` is
/// `inf / inf = NaN`.
#[test]
fn merge_is_stable_for_extreme_lse() {
    let mut heavy = Partial::<f64>::empty(1, 2, 1, 2);
    heavy.out.fill(0.5);
    heavy.lse.fill(1e3);
    let mut light = Partial::<f64>::empty(1, 2, 1, 2);
    light.out.fill(-3.0);
    light.lse.fill(-1e3);
    let m = heavy.merge(&light).unwrap();
    assert!(m.out.iter().chain(m.lse.iter()).all(|x| x.is_finite()));
    assert_eq!(m, heavy);
    // Equal LSEs: weights 1/2 each, LSE + ln 2 (which rounds away next to 1e308).
    for lse in [1e3, 1e308] {
        heavy.lse.fill(lse);
        let mut twin = heavy.clone();
        twin.out.fill(1.5);
        let m = heavy.merge(&twin).unwrap();
        m.out.iter().for_each(|&o| approx::assert_relative_eq!(o, 1.0, max_relative = 1e-15));
        m.lse.iter().for_each(|&l| approx::assert_relative_eq!(l, lse + 2f64.ln(), max_relative = 1e-15));
    }
}

/// `merge` and `merge_all` return new values and leave their inputs as they were (the
/// in-place updates of early PyTorch ring ports corrupted tensors saved for backward).
#[test]
fn merge_does_not_modify_inputs() {
    let (q, k, v) = qkv([2, 5, 2, 4], 11);
    let spec = Spec::new(SlidingWindow { left: 2, right: 1 });
    let all: Vec<usize> = (0..5).collect();
    let part = |keys: &[usize]| {
        let (ks, vs) = (k.select(Axis(1), keys), v.select(Axis(1), keys));
        attend_chunk(q.view(), &all, ks.view(), vs.view(), keys, 5, &spec).unwrap()
    };
    let (a, b) = (part(&[0, 3]), part(&[4, 1, 2]));
    let (a0, b0) = (a.clone(), b.clone());
    let m = a.merge(&b).unwrap();
    let _ = Partial::merge_all([&a, &b, &m], Partial::empty(2, 5, 2, 4)).unwrap();
    assert_eq!(a, a0);
    assert_eq!(b, b0);
    assert_ne!(m, a0, "the merge must have produced something new");
}

/// Partials of different shapes are refused with a typed error naming both shapes,
/// whether the outputs or only the LSEs disagree, and `merge_all` passes it on.
#[test]
fn merge_refuses_mismatched_shapes() {
    let a = Partial::<f64>::empty(1, 4, 2, 3);
    let b = Partial::<f64>::empty(1, 5, 2, 3);
    assert_eq!(a.merge(&b), Err(Error::MergeShape { left: vec![1, 4, 2, 3], right: vec![1, 5, 2, 3] }));
    let e = Partial::merge_all([&a, &b], Partial::empty(1, 4, 2, 3)).unwrap_err();
    assert!(matches!(e, Error::MergeShape { .. }));
    assert!(e.to_string().contains("[1, 4, 2, 3]") && e.to_string().contains("[1, 5, 2, 3]"), "{e}");
    // Same output shape, LSE of another length.
    let bad_lse =
        Partial { out: Array4::<f64>::zeros((1, 4, 2, 3)), lse: Array3::from_elem((1, 2, 5), f64::NEG_INFINITY) };
    assert!(matches!(a.merge(&bad_lse), Err(Error::MergeShape { .. })));
    assert!(matches!(bad_lse.merge(&a), Err(Error::MergeShape { .. })));
}

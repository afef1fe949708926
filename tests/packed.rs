//! Proofs of packed variable-length sequences (issue 22, item 2; `docs/semantics.md`
//! section 16).
//!
//! The rule: query `i` of batch row `b` lies in the document `[s, e)` of that row's
//! boundary list; it sees key `j` iff `s <= j < e` and the pattern, applied to the
//! document as its own sequence of `e - s` tokens at `i - s`, `j - s`, allows it; then
//! causality and key padding (absolute positions). The oracles here share no document
//! code with the reference:
//!
//! * **Per-document attention.** Packed attention equals plain `attention` run on every
//!   document sliced out as its own tensors (length `e - s`, key padding shifted into the
//!   document), stitched back: out, LSE and dQ, dK, dV, for every pattern family,
//!   causality, key padding, empty and length-1 documents, GQA.
//! * **Distribution.** Every schedule on every layout equals full packed attention,
//!   forward and backward; the pattern ring's needs are exactly the pairs of the rule
//!   (transcribed here from the pattern's own counts on document-relative positions),
//!   and documents inside one rank cost no cross-rank K/V traffic.
//! * **One row as a pattern.** `InDocuments` (a row's documents and pattern as one
//!   `Pattern`, what the GPU's mask tables evaluate) counts every key as the rule does.
//! * **Finite differences** of a small packed case.
//! * **Errors** name the values.

use ndarray::{Array3, Array4, s};
use proptest::prelude::*;
use ringdil_proofs::{assert_close_floor, assert_lse_close, block_sparse, branches, branches_with_offsets, config};
use ringdil_proofs::{fd_gradient, ring_layout};
use ringdil_reference::pattern::expr::Constants;
use ringdil_reference::pattern::{
    Branch, Combine, Dense, Dilated, ExprBranch, ExprCombine, ExprDilated, ExprPattern, InDocuments, SlidingWindow,
    key_counts,
};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout, Needs, Tensor, simulate};
use ringdil_reference::{Documents, Error, Heads, Pattern, Spec, attention, attention_backward};
use std::sync::Arc;

// ---------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------

/// A boundary list of one row of `n` tokens: 0..=5 random cuts (repeats are empty
/// documents, neighbours one apart are length-1 documents).
fn row_boundaries(n: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=n, 0..=5).prop_map(move |mut cuts| {
        cuts.sort_unstable();
        let mut list = vec![0];
        list.extend(cuts);
        list.push(n);
        list
    })
}

fn expr_mask() -> ExprPattern {
    ExprPattern::new("abs(q - k) <= 1 + h % 2 || k < n / 3", &Constants::new()).unwrap()
}

fn expr_dilated(union: bool) -> ExprDilated {
    let branches = vec![
        ExprBranch::new("3", "1 + h % 2", "(h + s) % r", None, &Constants::new()).unwrap(),
        ExprBranch::new("n / 2 + 1", "min(2, n / 2 + 1)", "h % r", Some("k <= q + h"), &Constants::new()).unwrap(),
    ];
    ExprDilated { branches, combine: if union { ExprCombine::Union } else { ExprCombine::SoftmaxDenominator } }
}

/// Every pattern family for `heads` heads and rows up to `max_n`.
fn any_pattern(heads: usize, max_n: usize) -> BoxedStrategy<Arc<dyn Pattern>> {
    let max_groups = heads.min(3);
    prop_oneof![
        Just(Arc::new(Dense) as Arc<dyn Pattern>),
        (0..5usize, 0..5usize).prop_map(|(left, right)| Arc::new(SlidingWindow { left, right }) as Arc<dyn Pattern>),
        block_sparse(max_n).prop_map(|p| Arc::new(p) as Arc<dyn Pattern>),
        branches_with_offsets(8, 3).prop_map(|b| {
            let branches = b.iter().map(|&(segment, dilation, offset)| Branch { segment, dilation, offset }).collect();
            Arc::new(Dilated { branches, combine: Combine::SoftmaxDenominator }) as Arc<dyn Pattern>
        }),
        branches(8, max_groups).prop_map(|b| Arc::new(Dilated::head_groups(&b)) as Arc<dyn Pattern>),
        Just(Arc::new(expr_mask()) as Arc<dyn Pattern>),
        any::<bool>().prop_map(|u| Arc::new(expr_dilated(u)) as Arc<dyn Pattern>),
    ]
    .boxed()
}

/// One packed problem.
#[derive(Debug, Clone)]
struct Packed {
    batch: usize,
    n: usize,
    heads: usize,
    kv_heads: usize,
    dim: usize,
    spec: Spec,
    seed: u64,
}

impl Packed {
    fn tensors(&self) -> (Array4<f64>, Array4<f64>, Array4<f64>, Array4<f64>) {
        let (b, n, h, kv, d) = (self.batch, self.n, self.heads, self.kv_heads, self.dim);
        let s = self.seed.wrapping_mul(5);
        (
            normal_tensor([b, n, h, d], s),
            normal_tensor([b, n, kv, d], s + 1),
            normal_tensor([b, n, kv, d], s + 2),
            normal_tensor([b, n, h, d], s + 3),
        )
    }

    fn lists(&self) -> Vec<Vec<usize>> {
        self.spec.documents.as_ref().unwrap().split(self.n)
    }
}

/// Batch 1..=2, `n` in 1..=max_n, `H` in 1..=4 with any divisor as `H_kv`, per-row
/// documents (sometimes given as one flat list), any pattern, causal or not, key padding
/// sometimes.
fn packed(max_n: usize) -> impl Strategy<Value = Packed> {
    (1..=2usize, 1..=max_n, 1..=4usize, 1..=4usize)
        .prop_flat_map(move |(batch, n, heads, dim)| {
            let divisors: Vec<usize> = (1..=heads).filter(|d| heads % d == 0).collect();
            (
                Just((batch, n, heads, dim)),
                prop::sample::select(divisors),
                any_pattern(heads, max_n),
                prop::collection::vec(row_boundaries(n), batch),
                any::<bool>(),
                any::<bool>(),
                prop::option::of(prop::collection::vec(0..=n, batch)),
                any::<u64>(),
            )
        })
        .prop_map(|((batch, n, heads, dim), kv_heads, pattern, lists, flat, causal, key_lengths, seed)| {
            let documents = if flat {
                let mut all = vec![0];
                for (b, list) in lists.iter().enumerate() {
                    all.extend(list[1..].iter().map(|c| b * n + c));
                }
                Documents::flat(all)
            } else {
                Documents::per_row(lists)
            };
            let mut spec = Spec { pattern, causal, key_lengths, scale: None, documents: Some(documents) };
            if seed % 3 == 0 {
                spec.scale = Some(0.7);
            }
            Packed { batch, n, heads, kv_heads, dim, spec, seed: seed >> 8 }
        })
}

// ---------------------------------------------------------------------------------
// Oracles
// ---------------------------------------------------------------------------------

/// Out, LSE and dQ, dK, dV of packed attention computed document by document: each
/// document sliced out as tensors of its own (batch 1, `e - s` tokens), plain
/// `attention` with key padding `clamp(L_b - s, 0, e - s)`, results stitched back.
#[allow(clippy::type_complexity)]
fn per_document(case: &Packed) -> (Array4<f64>, Array3<f64>, Array4<f64>, Array4<f64>, Array4<f64>) {
    let (q, k, v, d_out) = case.tensors();
    let (b_n, n, h, kv, d) = (case.batch, case.n, case.heads, case.kv_heads, case.dim);
    let mut out = Array4::zeros((b_n, n, h, d));
    let mut lse = Array3::from_elem((b_n, h, n), f64::NEG_INFINITY);
    let (mut dq, mut dk, mut dv) =
        (Array4::zeros((b_n, n, h, d)), Array4::zeros((b_n, n, kv, d)), Array4::zeros((b_n, n, kv, d)));
    for (b, list) in case.lists().iter().enumerate() {
        for w in list.windows(2) {
            let (start, end) = (w[0], w[1]);
            if start == end {
                continue;
            }
            let mut spec = Spec::new(Dense).causal(case.spec.causal);
            spec.pattern = case.spec.pattern.clone();
            spec.scale = case.spec.scale;
            if let Some(lengths) = &case.spec.key_lengths {
                spec = spec.key_lengths(vec![lengths[b].clamp(start, end) - start]);
            }
            let cut = |x: &Array4<f64>| x.slice(s![b..b + 1, start..end, .., ..]).to_owned();
            let (qd, kd, vd, god) = (cut(&q), cut(&k), cut(&v), cut(&d_out));
            let fwd = attention(qd.view(), kd.view(), vd.view(), &spec).unwrap();
            let grad = attention_backward(qd.view(), kd.view(), vd.view(), &spec, &fwd, god.view()).unwrap();
            out.slice_mut(s![b..b + 1, start..end, .., ..]).assign(&fwd.out);
            lse.slice_mut(s![b..b + 1, .., start..end]).assign(&fwd.lse);
            dq.slice_mut(s![b..b + 1, start..end, .., ..]).assign(&grad.dq);
            dk.slice_mut(s![b..b + 1, start..end, .., ..]).assign(&grad.dk);
            dv.slice_mut(s![b..b + 1, start..end, .., ..]).assign(&grad.dv);
        }
    }
    (out, lse, dq, dk, dv)
}

/// The rule, transcribed: does query `i` of row `b`, head `h` see key `j`? Documents
/// from the boundary list, the pattern's own counts on document-relative positions.
fn allowed(case: &Packed, lists: &[Vec<usize>], b: usize, h: usize, i: usize, j: usize) -> bool {
    let list = &lists[b];
    let k = (0..list.len() - 1).find(|&k| list[k] <= i && i < list[k + 1]).unwrap();
    let (start, end) = (list[k], list[k + 1]);
    if j < start || j >= end || (case.spec.causal && j > i) {
        return false;
    }
    if case.spec.key_lengths.as_ref().is_some_and(|l| j >= l[b]) {
        return false;
    }
    key_counts(&*case.spec.pattern, i - start, h, case.heads, end - start)[j - start] > 0
}

fn floor(x: &Array4<f64>) -> f64 {
    (x.len() as f64).sqrt()
}

// ---------------------------------------------------------------------------------
// Proofs
// ---------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(96))]

    /// Packed attention == per-document attention, stitched: forward and backward.
    #[test]
    fn packed_equals_per_document(case in packed(20)) {
        let (q, k, v, d_out) = case.tensors();
        let got = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
        let grad = attention_backward(q.view(), k.view(), v.view(), &case.spec, &got, d_out.view()).unwrap();
        let (out, lse, dq, dk, dv) = per_document(&case);
        assert_close_floor("out", &got.out, &out, 1e-12, floor(&out));
        assert_lse_close("lse", &got.lse, &lse, 1e-12);
        assert_close_floor("dq", &grad.dq, &dq, 1e-11, floor(&dq));
        assert_close_floor("dk", &grad.dk, &dk, 1e-11, floor(&dk));
        assert_close_floor("dv", &grad.dv, &dv, 1e-11, floor(&dv));
    }

    /// `Spec::key_counts` (documents, pattern, causality, padding) is the transcribed rule.
    #[test]
    fn key_counts_follow_the_rule(case in packed(16)) {
        let lists = case.lists();
        for b in 0..case.batch {
            for h in 0..case.heads {
                for i in 0..case.n {
                    let counts = case.spec.key_counts(b, i, h, case.heads, case.n);
                    for (j, &c) in counts.iter().enumerate() {
                        prop_assert_eq!(c > 0, allowed(&case, &lists, b, h, i, j), "b {} h {} i {} j {}", b, h, i, j);
                    }
                }
            }
        }
    }

    /// `InDocuments` (the pattern inside one row's boundary list, as a pattern of its own,
    /// which the GPU's mask tables evaluate) is the transcribed rule, counts included: a
    /// row's spec without documents over it sees what the rule allows, each key as often
    /// as the pattern counts it on document-relative positions.
    #[test]
    fn in_documents_is_the_rule(case in packed(16)) {
        let lists = case.lists();
        for (b, list) in lists.iter().enumerate() {
            let row = Spec {
                pattern: Arc::new(InDocuments::shared(case.spec.pattern.clone(), list.clone())),
                causal: case.spec.causal,
                key_lengths: case.spec.key_lengths.as_ref().map(|l| vec![l[b]]),
                scale: None,
                documents: None,
            };
            row.validate(1, case.heads, case.n).unwrap();
            for h in 0..case.heads {
                for i in 0..case.n {
                    let counts = row.key_counts(0, i, h, case.heads, case.n);
                    let start = list[list.partition_point(|&c| c <= i) - 1];
                    let end = list[list.partition_point(|&c| c <= i)];
                    let own = key_counts(&*case.spec.pattern, i - start, h, case.heads, end - start);
                    for (j, &c) in counts.iter().enumerate() {
                        let want = if allowed(&case, &lists, b, h, i, j) { own[j - start] } else { 0 };
                        prop_assert_eq!(c, want, "b {} h {} i {} j {}", b, h, i, j);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(40))]

    /// Every schedule on every layout == full packed attention (forward and backward),
    /// and the needs of the pattern ring are exactly the rule's pairs, unioned over the
    /// batch rows and each K/V head's group.
    #[test]
    fn ring_equals_full_with_documents(
        (case, ranks, layout) in packed(16).prop_flat_map(|c| {
            let n = c.n;
            (Just(c), 1..=4usize).prop_flat_map(move |(c, r)| (Just(c), Just(r), ring_layout(n, r)))
        })
    ) {
        let (q, k, v, d_out) = case.tensors();
        let want = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
        let want_grad = attention_backward(q.view(), k.view(), v.view(), &case.spec, &want, d_out.view()).unwrap();
        let plan = ChunkPlan::new(case.n, ranks, &layout).unwrap();
        let heads = Heads::new(case.heads, case.kv_heads).unwrap();
        for kind in Kind::ALL {
            let schedule = kind.build(&plan, &case.spec, heads).unwrap();
            let (got, grad, _) = simulate(&schedule, &case.spec, q.view(), k.view(), v.view(), Some(d_out.view()))
                .map_err(|e| TestCaseError::fail(format!("{kind}: {e}")))?;
            let grad = grad.unwrap();
            assert_close_floor(&format!("{kind} out"), &got.out, &want.out, 1e-12, floor(&want.out));
            assert_lse_close(&format!("{kind} lse"), &got.lse, &want.lse, 1e-12);
            assert_close_floor(&format!("{kind} dq"), &grad.dq, &want_grad.dq, 1e-11, floor(&want_grad.dq));
            assert_close_floor(&format!("{kind} dk"), &grad.dk, &want_grad.dk, 1e-11, floor(&want_grad.dk));
            assert_close_floor(&format!("{kind} dv"), &grad.dv, &want_grad.dv, 1e-11, floor(&want_grad.dv));
        }
        // Needs: exactly the keys some query of dst sees (any batch row, any head of the group).
        let needs = Needs::new(&case.spec, &plan, heads).unwrap();
        let lists = case.lists();
        let owner = plan.token_map().rank;
        let g = case.heads / case.kv_heads;
        for dst in 0..ranks {
            for src in 0..ranks {
                for j_kv in 0..case.kv_heads {
                    let want: Vec<usize> = (0..case.n)
                        .filter(|&key| owner[key] == src)
                        .filter(|&key| {
                            plan.tokens(dst).iter().any(|&i| {
                                (0..case.batch).any(|b| (j_kv * g..(j_kv + 1) * g).any(|h| allowed(&case, &lists, b, h, i, key)))
                            })
                        })
                        .collect();
                    prop_assert_eq!(needs.kv_keys(dst, src, j_kv), want.as_slice(), "dst {} src {} kv head {}", dst, src, j_kv);
                }
            }
        }
    }
}

/// Documents that each lie inside one rank: the pattern ring ships no K/V row, and the
/// dense ring's result is still exact (it ships everything and skips nothing it needs).
#[test]
fn documents_inside_ranks_cost_no_traffic() {
    let (n, heads) = (24, 2);
    let plan = ChunkPlan::new(n, 3, &Layout::Contiguous).unwrap(); // 0..8, 8..16, 16..24
    let documents = Documents::per_row(vec![vec![0, 3, 8, 8, 12, 16, 24], vec![0, 8, 9, 16, 24]]);
    for pattern in
        [Arc::new(Dense) as Arc<dyn Pattern>, Arc::new(Dilated::longnet(&[(4, 1), (16, 4)])), Arc::new(expr_mask())]
    {
        for causal in [false, true] {
            let mut spec = Spec::new(Dense).causal(causal).documents(documents.clone());
            spec.pattern = pattern.clone();
            let schedule = Kind::PatternRing.build(&plan, &spec, heads).unwrap();
            let (q, k, v) = (
                normal_tensor([2, n, heads, 4], 1),
                normal_tensor([2, n, heads, 4], 2),
                normal_tensor([2, n, heads, 4], 3),
            );
            let d_out = normal_tensor([2, n, heads, 4], 4);
            let (got, _, report) =
                simulate(&schedule, &spec, q.view(), k.view(), v.view(), Some(d_out.view())).unwrap();
            assert_eq!(report.sent_of(&[Tensor::K, Tensor::V, Tensor::DK, Tensor::DV]), 0, "{pattern:?}");
            let want = attention(q.view(), k.view(), v.view(), &spec).unwrap();
            assert_close_floor("out", &got.out, &want.out, 1e-12, floor(&want.out));
            // Every cross-rank step is skipped: each rank computes only its own block.
            assert_eq!(report.computes, 2 * 3, "{pattern:?} causal {causal}");
        }
    }
    // One document crossing the 8 | 16 boundary: only rank 1 <-> 2 traffic, and only
    // the rows of that document.
    let spec = Spec::dense().documents(Documents::per_row(vec![vec![0, 8, 12, 20, 24]]));
    let needs = Needs::new(&spec, &plan, 1).unwrap();
    assert_eq!(needs.keys(1, 2, 0), &[16, 17, 18, 19]);
    assert_eq!(needs.keys(2, 1, 0), &[12, 13, 14, 15]);
    assert!(needs.keys(0, 1, 0).is_empty() && needs.keys(1, 0, 0).is_empty() && needs.keys(0, 2, 0).is_empty());
}

/// Finite differences of `L = sum(out * G)` on a small packed case (GQA, causal,
/// LongNet with a segment longer than some documents, an empty document).
#[test]
fn finite_differences_packed() {
    let (b, n, h, kv, d) = (2, 9, 2, 1, 3);
    let spec = Spec::new(Dilated::longnet(&[(2, 1), (4, 2)]))
        .causal(true)
        .documents(Documents::per_row(vec![vec![0, 1, 4, 4, 9], vec![0, 6, 9]]))
        .key_lengths(vec![9, 8]);
    let (q, k, v) =
        (normal_tensor([b, n, h, d], 11), normal_tensor([b, n, kv, d], 12), normal_tensor([b, n, kv, d], 13));
    let g = normal_tensor([b, n, h, d], 14);
    let fwd = attention(q.view(), k.view(), v.view(), &spec).unwrap();
    let grad = attention_backward(q.view(), k.view(), v.view(), &spec, &fwd, g.view()).unwrap();
    let loss = |q: &Array4<f64>, k: &Array4<f64>, v: &Array4<f64>| {
        (attention(q.view(), k.view(), v.view(), &spec).unwrap().out * &g).sum()
    };
    let eps = 1e-6;
    let fd_q = fd_gradient(&q, eps, |x| loss(x, &k, &v));
    let fd_k = fd_gradient(&k, eps, |x| loss(&q, x, &v));
    let fd_v = fd_gradient(&v, eps, |x| loss(&q, &k, x));
    assert_close_floor("dq", &grad.dq, &fd_q, 1e-6, 1.0);
    assert_close_floor("dk", &grad.dk, &fd_k, 1e-6, 1.0);
    assert_close_floor("dv", &grad.dv, &fd_v, 1e-6, 1.0);
}

/// Packing with one document per row is attention without documents, bit for bit.
#[test]
fn whole_rows_are_unpacked_attention() {
    let (q, k, v) = (normal_tensor([2, 30, 2, 4], 1), normal_tensor([2, 30, 2, 4], 2), normal_tensor([2, 30, 2, 4], 3));
    let plain = Spec::new(Dilated::longnet(&[(8, 1), (16, 4)])).causal(true);
    let packed = plain.clone().documents(Documents::whole(2, 30));
    let a = attention(q.view(), k.view(), v.view(), &plain).unwrap();
    let b = attention(q.view(), k.view(), v.view(), &packed).unwrap();
    assert_eq!(a, b);
}

/// Every validation error, with its message.
#[test]
fn errors_name_the_values() {
    let (q, k, v) = (normal_tensor([2, 6, 1, 2], 1), normal_tensor([2, 6, 1, 2], 2), normal_tensor([2, 6, 1, 2], 3));
    let run = |documents: Documents| {
        attention(q.view(), k.view(), v.view(), &Spec::dense().documents(documents)).unwrap_err()
    };
    let cases: Vec<(Documents, Error, &str)> = vec![
        (
            Documents::per_row(vec![vec![0, 6]]),
            Error::DocumentRows { lists: 1, batch: 2 },
            "documents: 1 boundary lists for 2 batch rows; one list per batch row is required",
        ),
        (
            Documents::per_row(vec![vec![0, 6], vec![1, 6]]),
            Error::DocumentStart { row: Some(1), first: Some(1) },
            "documents: boundaries of batch row 1 start at 1; the first boundary must be 0",
        ),
        (
            Documents::per_row(vec![vec![0, 6], vec![]]),
            Error::DocumentStart { row: Some(1), first: None },
            "documents: boundaries of batch row 1 are empty; it must start at 0 and end at the row length",
        ),
        (
            Documents::per_row(vec![vec![0, 4, 3, 6], vec![0, 6]]),
            Error::DocumentOrder { row: Some(0), index: 2, previous: 4, boundary: 3 },
            "documents: boundaries of batch row 0: boundary 2 is 3, smaller than boundary 1 = 4; \
             boundaries must be non-decreasing",
        ),
        (
            Documents::per_row(vec![vec![0, 6], vec![0, 2, 5]]),
            Error::DocumentEnd { row: Some(1), last: 5, expected: 6 },
            "documents: boundaries of batch row 1 end at 5; the last boundary must be 6 (the row length)",
        ),
        (
            Documents::flat(vec![0, 3, 7, 12]),
            Error::DocumentRowStart { row: 1, position: 6 },
            "documents: flat boundary list has no boundary at 6, the start of batch row 1; \
             a document must not span two rows",
        ),
        (
            Documents::flat(vec![0, 3, 6, 11]),
            Error::DocumentEnd { row: None, last: 11, expected: 12 },
            "documents: boundaries of the flat list end at 11; the last boundary must be 12 (the row length)",
        ),
        (
            Documents::flat(vec![2, 6, 12]),
            Error::DocumentStart { row: None, first: Some(2) },
            "documents: boundaries of the flat list start at 2; the first boundary must be 0",
        ),
        (
            Documents::flat(vec![0, 6, 5, 12]),
            Error::DocumentOrder { row: None, index: 2, previous: 6, boundary: 5 },
            "documents: boundaries of the flat list: boundary 2 is 5, smaller than boundary 1 = 6; \
             boundaries must be non-decreasing",
        ),
    ];
    for (documents, error, message) in cases {
        let got = run(documents);
        assert_eq!(got, error);
        assert_eq!(got.to_string(), message);
    }
    // A flat list is split into the rows' lists (empty documents at a row start hold no
    // token and are dropped); a valid one is accepted.
    let flat = Documents::flat(vec![0, 2, 6, 6, 9, 12]);
    flat.validate(2, 6).unwrap();
    assert_eq!(flat.split(6), vec![vec![0, 2, 6], vec![0, 3, 6]]);
    // Schedules (no batch size) check the documents against their own row count, and
    // key padding against it.
    let plan = ChunkPlan::new(6, 2, &Layout::Contiguous).unwrap();
    let spec = Spec::dense().documents(Documents::per_row(vec![vec![0, 6], vec![0, 3, 6]])).key_lengths(vec![6]);
    assert_eq!(
        Needs::new(&spec, &plan, 1).unwrap_err(),
        Error::ShapeMismatch { what: "key_lengths", expected: vec![2], got: vec![1] }
    );
    let spec = Spec::dense().documents(Documents::per_row(vec![vec![0, 7]]));
    assert_eq!(
        Kind::Ring.build(&plan, &spec, 1).unwrap_err(),
        Error::DocumentEnd { row: Some(0), last: 7, expected: 6 }
    );
    // A pattern is validated for every document length: an explicit mask for the whole
    // row does not fit documents of other lengths.
    let explicit = ringdil_reference::pattern::Explicit::from_fn(1, 6, |_, _, _| 1);
    let spec = Spec::new(explicit).documents(Documents::per_row(vec![vec![0, 6], vec![0, 2, 6]]));
    assert!(matches!(attention(q.view(), k.view(), v.view(), &spec), Err(Error::MaskShape { .. })));
}

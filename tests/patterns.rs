//! Every pattern is checked against an independent transcription of its documented
//! rule (written in `support.rs` from the paper / the docs, not from the pattern code):
//! first the key sets themselves (exact integer counts), then the attention computed
//! by the blocked engine against the naive O(n^2) oracle under that mask.
//!
//! LongNet gets three more proofs: the multiset semantics (all branches at once ==
//! merge of per-branch partials == torchscale's explicit softmax-of-LSE weighted sum),
//! the head-group variant against a transcription of the PyTorch port's loop, and the
//! short-last-segment rule on awkward lengths. Snapshots of small key grids make any
//! change of semantics a visible diff in review.
//!
//! Tolerance: f64 engine vs f64 naive oracle, `1e-12` relative (rounding only; the two
//! sum in different orders). Key sets are compared exactly.

use ndarray::{Array3, Array4, Axis, s};
use proptest::prelude::*;
use ringdil_proofs::{
    any_case, assert_close, assert_lse_close, block_sparse, block_sparse_counts, branches, branches_with_offsets,
    config, longnet_counts, naive_spec, pattern_counts, qkv, render_grid, spec_counts, window_counts,
};
use ringdil_reference::pattern::{BlockSparse, Branch, Combine, Dilated, Explicit, KeyRun, Offset, SlidingWindow};
use ringdil_reference::{Attention, Partial, Pattern, Spec, attention};

/// Relative tolerance of f64-vs-f64 comparisons (see the module docs).
const TOL: f64 = 1e-12;

/// The engine's result for `spec` on seeded inputs.
fn run(spec: &Spec, shape: [usize; 4], seed: u64) -> Attention<f64> {
    let (q, k, v) = qkv(shape, seed);
    attention(q.view(), k.view(), v.view(), spec).unwrap()
}

/// Assert that the engine under `spec` equals the naive oracle under the independent
/// mask `counts` (`[heads, n, n]`), output scale `out_scale(head)` applied to the oracle.
fn assert_engine_matches_mask(
    spec: &Spec,
    counts: &Array3<u32>,
    shape: [usize; 4],
    seed: u64,
    out_scale: impl Fn(usize) -> f64,
) {
    let (q, k, v) = qkv(shape, seed);
    let got = attention(q.view(), k.view(), v.view(), spec).unwrap();
    let (mut out, lse) = naive_spec(q.view(), k.view(), v.view(), spec, counts);
    for h in 0..shape[2] {
        out.slice_mut(s![.., .., h, ..]).mapv_inplace(|x| x * out_scale(h));
    }
    assert_close("out vs naive", &got.out, &out, TOL);
    assert_lse_close("lse vs naive", &got.lse, &lse, TOL);
}

/// A dilated pattern with the given branches and the softmax-denominator combine.
fn dilated(branches: &[(usize, usize, Offset)]) -> Dilated {
    let branches = branches.iter().map(|&(segment, dilation, offset)| Branch { segment, dilation, offset }).collect();
    Dilated { branches, combine: Combine::SoftmaxDenominator }
}

/// Shapes for the dilated proofs: batch 1..=2, n 1..=40 (mostly not a multiple of
/// the segments), heads 1..=5, head_dim 1..=4.
fn shape() -> impl Strategy<Value = [usize; 4]> {
    (1..=2usize, 1..=40usize, 1..=5usize, 1..=4usize).prop_map(|(b, n, h, d)| [b, n, h, d])
}

proptest! {
    #![proptest_config(config(128))]

    /// (a) Dilated attention == the independent LongNet mask: same key multiset for every
    /// head and query, same attention as the naive oracle under that mask, and the same
    /// as the `Explicit` pattern built from it, for random branches, offset rules,
    /// head counts, causality and lengths.
    #[test]
    fn dilated_equals_longnet_mask(shape in shape(), bs in branches_with_offsets(12, 3), causal: bool, seed in 0u64..1 << 40) {
        let [_, n, heads, _] = shape;
        let pattern = dilated(&bs);
        let mask = longnet_counts(&bs, heads, n);
        prop_assert_eq!(pattern_counts(&pattern, heads, n), mask.clone());
        let spec = Spec::new(pattern).causal(causal);
        assert_engine_matches_mask(&spec, &mask, shape, seed, |_| 1.0);
        let explicit = run(&Spec::new(Explicit { counts: mask }).causal(causal), shape, seed);
        let got = run(&spec, shape, seed);
        assert_close("dilated vs explicit out", &got.out, &explicit.out, TOL);
        assert_lse_close("dilated vs explicit lse", &got.lse, &explicit.lse, TOL);
    }

    /// (b) The LongNet identity: attention with all branches == online-softmax merge of
    /// the single-branch attentions == torchscale's combine `sum_b softmax(L)_b O_b`
    /// written out here, for the paper's and torchscale's offsets, with causality and
    /// key padding (rows empty in some branches have weight 0 there).
    #[test]
    fn longnet_combine_is_merge_of_branches(
        shape in shape(), bs in branches(12, 3), torchscale: bool, causal: bool, pad in 0usize..8, seed in 0u64..1 << 40,
    ) {
        let [batch, n, heads, dim] = shape;
        let pattern = if torchscale { Dilated::torchscale(&bs) } else { Dilated::longnet(&bs) };
        let with = |p: Dilated| Spec::new(p).causal(causal).key_lengths(vec![n.saturating_sub(pad); batch]);
        let all = run(&with(pattern.clone()), shape, seed);
        let per_branch: Vec<Attention<f64>> = (0..bs.len()).map(|i| run(&with(pattern.single_branch(i)), shape, seed)).collect();

        let partials: Vec<Partial<f64>> = per_branch.iter().map(|a| Partial { out: a.out.clone(), lse: a.lse.clone() }).collect();
        let merged = Partial::merge_all(&partials, Partial::empty(batch, n, heads, dim)).unwrap();
        assert_close("merge of branches out", &merged.out, &all.out, TOL);
        assert_lse_close("merge of branches lse", &merged.lse, &all.lse, TOL);

        // torchscale: w_b = exp(L_b) / sum_c exp(L_c) (stabilised by the max), O = sum_b w_b O_b.
        let mut out = Array4::<f64>::zeros((batch, n, heads, dim));
        let mut lse = Array3::<f64>::from_elem((batch, heads, n), f64::NEG_INFINITY);
        for ((b, h, i), l) in lse.indexed_iter_mut() {
            let ls: Vec<f64> = per_branch.iter().map(|a| a.lse[[b, h, i]]).collect();
            let m = ls.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                continue;
            }
            let z: f64 = ls.iter().map(|x| (x - m).exp()).sum();
            *l = m + z.ln();
            for (a, x) in per_branch.iter().zip(&ls) {
                let w = (x - m).exp() / z;
                let row = &a.out.slice(s![b, i, h, ..]) * w;
                out.slice_mut(s![b, i, h, ..]).scaled_add(1.0, &row);
            }
        }
        assert_close("torchscale weighted sum out", &all.out, &out, TOL);
        assert_lse_close("torchscale weighted sum lse", &all.lse, &lse, TOL);
    }

    /// (c) The head-group variant reproduces the PyTorch port's algorithm (below), on
    /// lengths divisible by every segment as that port requires.
    #[test]
    fn head_groups_match_pytorch_port(
        (bs, heads) in prop::collection::vec(
            prop::sample::select(vec![1usize, 2, 3, 4, 6, 12]).prop_flat_map(|w| (Just(w), 1..=w)), 1..=3,
        ).prop_flat_map(|bs| { let g = bs.len(); (Just(bs), g..=6usize) }),
        segments in 1usize..=3, batch in 1usize..=2, dim in 1usize..=4, causal: bool, seed in 0u64..1 << 40,
    ) {
        let shape = [batch, 12 * segments, heads, dim];
        let got = run(&Spec::new(Dilated::head_groups(&bs)).causal(causal), shape, seed);
        let (q, k, v) = qkv(shape, seed);
        let want = pytorch_port_head_groups(&q, &k, &v, &bs, causal);
        assert_close("head groups vs port", &got.out, &want, TOL);
    }

    /// (e) Sliding window == `i - left <= j <= i + right`, with causality and padding.
    #[test]
    fn sliding_window_equals_band_mask(
        shape in shape(), left in 0usize..8, right in 0usize..8, causal: bool, pad in prop::option::of(0usize..45), seed in 0u64..1 << 40,
    ) {
        let [batch, n, heads, _] = shape;
        let pattern = SlidingWindow { left, right };
        let mask = window_counts(left, right, heads, n);
        prop_assert_eq!(pattern_counts(&pattern, heads, n), mask.clone());
        let mut spec = Spec::new(pattern).causal(causal);
        spec.key_lengths = pad.map(|p| vec![p.min(n); batch]);
        assert_engine_matches_mask(&spec, &mask, shape, seed, |_| 1.0);
    }

    /// (e) Block sparse == the OR of its rules (local band, global tokens, dilated
    /// stride, user block mask), non-divisible lengths included.
    #[test]
    fn block_sparse_equals_rule_mask(shape in shape(), p in block_sparse(40), causal: bool, seed in 0u64..1 << 40) {
        let [_, n, heads, _] = shape;
        let mask = block_sparse_counts(&p, heads, n);
        prop_assert_eq!(pattern_counts(&p, heads, n), mask.clone());
        assert_engine_matches_mask(&Spec::new(p).causal(causal), &mask, shape, seed, |_| 1.0);
    }

    /// The engine (blocks, unions, counts) against the naive oracle under the pattern's
    /// own key counts, for every pattern kind with padding and custom scales; the
    /// pattern's output scale is applied to the oracle (1/G for head groups).
    #[test]
    fn engine_equals_naive_for_any_pattern(case in any_case(40)) {
        let counts = case.pattern_counts();
        let pattern = case.spec.pattern.clone();
        assert_engine_matches_mask(&case.spec, &counts, case.shape(), case.seed, |h| pattern.output_scale(h, case.heads));
    }
}

/// `Dilated::head_group_range` (the heads a GPU launch of one branch covers) and
/// `head_group` agree with the port's group sizes (`H / G`, the first `H % G` one larger,
/// contiguous), for every `G <= H <= 40`.
#[test]
fn head_group_ranges_are_the_ports_contiguous_groups() {
    for groups in 1..=8 {
        let d = Dilated::head_groups(&vec![(4, 1); groups]);
        for heads in groups..=40 {
            let mut start = 0;
            for g in 0..groups {
                let size = heads / groups + usize::from(g < heads % groups);
                assert_eq!(d.head_group_range(g, heads), start..start + size, "G = {groups}, H = {heads}, group {g}");
                assert!((start..start + size).all(|h| d.head_group(h, heads) == g));
                start += size;
            }
            assert_eq!(start, heads);
        }
    }
}

/// The `dilated-attention-pytorch` head-group loop (fkodom), transcribed: heads are
/// split into `G = branches` contiguous groups of `H / G` (the first `H % G` one
/// larger); group `i` uses segment `w_i`, dilation `r_i` and offset `i % r_i`: each
/// segment keeps the positions `offset::r`, runs ordinary softmax attention among them
/// (causal in the kept order, which is the global order), scatters the result back,
/// and the sum over groups is divided by `G`.
///
/// Two details of the port's literal code are deliberately not reproduced, as the
/// crate documents: its `x / x.sum(dim=(1, 2))` renormalisation of each branch output
/// (not part of LongNet's formula), and `hmin = i * g`, which makes groups overlap
/// when `H % G != 0`; here group `i` starts after the previous groups.
fn pytorch_port_head_groups(
    q: &Array4<f64>,
    k: &Array4<f64>,
    v: &Array4<f64>,
    branches: &[(usize, usize)],
    causal: bool,
) -> Array4<f64> {
    let (batch, n, heads, dim) = q.dim();
    let groups = branches.len();
    let sizes: Vec<usize> = (0..groups).map(|i| heads / groups + usize::from(i < heads % groups)).collect();
    let scale = 1.0 / (dim as f64).sqrt();
    let mut out = Array4::<f64>::zeros(q.raw_dim());
    let mut hmin = 0;
    for (i, (&(w, r), &g)) in branches.iter().zip(&sizes).enumerate() {
        let offset = i % r;
        for b in 0..batch {
            for h in hmin..hmin + g {
                for seg in 0..n / w {
                    let kept: Vec<usize> = (seg * w + offset..(seg + 1) * w).step_by(r).collect();
                    for (a, &qi) in kept.iter().enumerate() {
                        let visible = if causal { &kept[..=a] } else { &kept[..] };
                        let scores: Vec<f64> = visible
                            .iter()
                            .map(|&kj| scale * q.slice(s![b, qi, h, ..]).dot(&k.slice(s![b, kj, h, ..])))
                            .collect();
                        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                        for (&kj, sc) in visible.iter().zip(&scores) {
                            let p = (sc - m).exp() / z;
                            let row = &v.slice(s![b, kj, h, ..]) * p;
                            out.slice_mut(s![b, qi, h, ..]).scaled_add(1.0, &row);
                        }
                    }
                }
            }
        }
        hmin += g;
    }
    out / groups as f64
}

/// (d) Awkward lengths: 1, primes, `w - 1`, `w + 1`, `2w +- 1`. For each, every key run
/// stays inside the sequence, the key sets equal the LongNet mask, the last (short)
/// segment is used: each of its queries kept by its head's offset sees exactly the
/// kept keys `[start, n)` of that segment (so it gets a finite LSE), and the attention
/// matches the naive oracle there. A head whose offset lies beyond a short segment
/// keeps no query there, which gives `lse = -inf`, `out = 0`, never NaN.
#[test]
fn short_last_segment_is_used_and_stays_inside() {
    let heads = 3;
    for bs in [vec![(8, 2)], vec![(5, 1), (8, 2)], vec![(6, 3), (4, 4)]] {
        let rules: Vec<(usize, usize, Offset)> = bs.iter().map(|&(w, r)| (w, r, Offset::HeadMod)).collect();
        let pattern = Dilated::longnet(&bs);
        let w_max = bs.iter().map(|b| b.0).max().unwrap();
        for n in [1, 2, 3, 5, 7, 11, 13, 17, w_max - 1, w_max + 1, 2 * w_max - 1, 2 * w_max + 1] {
            let mut runs: Vec<KeyRun> = Vec::new();
            for h in 0..heads {
                for i in 0..n {
                    runs.clear();
                    pattern.key_runs(i, h, heads, n, &mut runs);
                    for key in runs.iter().flat_map(|r| r.iter()) {
                        assert!(key < n, "{bs:?} n={n} h={h} q={i}: key {key} outside the sequence");
                    }
                }
            }
            let counts = pattern_counts(&pattern, heads, n);
            assert_eq!(counts, longnet_counts(&rules, heads, n), "{bs:?} n={n}");

            let spec = Spec::new(pattern.clone());
            let out = run(&spec, [1, n, heads, 2], n as u64);
            for &(w, r) in &bs {
                let start = (n - 1) / w * w; // the last segment, short unless w divides n
                for h in 0..heads {
                    let o = h % r;
                    let kept: Vec<usize> = (start + o..n).step_by(r).collect();
                    for &i in &kept {
                        for &j in &kept {
                            assert!(
                                counts[[h, i, j]] >= 1,
                                "{bs:?} n={n} h={h}: query {i} misses key {j} of the last segment"
                            );
                        }
                        assert!(out.lse[[0, h, i]].is_finite(), "{bs:?} n={n} h={h}: query {i} got no key");
                    }
                }
            }
            assert!(out.out.iter().chain(out.lse.iter()).all(|x| !x.is_nan()));
            // Rows with no key at all (offset beyond a short sequence) are exactly empty.
            for ((_, h, i), &l) in out.lse.indexed_iter() {
                let row_keys: u32 = counts.slice(s![h, i, ..]).sum();
                assert_eq!(l == f64::NEG_INFINITY, row_keys == 0, "{bs:?} n={n} h={h} q={i}");
                if row_keys == 0 {
                    assert!(out.out.slice(s![0, i, h, ..]).iter().all(|&x| x == 0.0));
                }
            }
            assert_engine_matches_mask(&spec, &counts, [1, n, heads, 2], n as u64, |_| 1.0);
        }
    }
}

/// On a one-token sequence, under `[(4, 1), (8, 2)]` head 0 (offsets 0, 0) sees its one
/// key twice, head 1 (offsets 0, 1) once; under `[(8, 2)]` alone head 1's offset lies
/// outside the one-token segment, so it sees nothing.
#[test]
fn one_token_sequence() {
    let counts = pattern_counts(&Dilated::longnet(&[(4, 1), (8, 2)]), 2, 1);
    assert_eq!(counts.as_slice().unwrap(), &[2, 1]);
    let pattern = Dilated::longnet(&[(8, 2)]);
    assert_eq!(pattern_counts(&pattern, 2, 1).as_slice().unwrap(), &[1, 0]);
    let out = run(&Spec::new(pattern), [1, 1, 2, 3], 5);
    assert!(out.lse[[0, 0, 0]].is_finite());
    assert_eq!(out.lse[[0, 1, 0]], f64::NEG_INFINITY);
}

// ---------------------------------------------------------------------------------
// (f) Snapshots of exact key sets.
// ---------------------------------------------------------------------------------

/// The key grid of every head of `spec` on `n` tokens (causality applied), one block
/// per head.
fn grids(title: &str, spec: &Spec, heads: usize, n: usize) -> String {
    let counts = spec_counts(spec, &pattern_counts(&*spec.pattern, heads, n), 1);
    (0..heads)
        .map(|h| {
            let c = counts.index_axis(Axis(0), 0).index_axis(Axis(0), h).to_owned();
            render_grid(&format!("{title}, head {h} of {heads}"), n, |i, j| c[[i, j]])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn snapshot_longnet_n12_two_heads() {
    let spec = Spec::new(Dilated::longnet(&[(4, 1), (8, 2)]));
    insta::assert_snapshot!(grids("longnet [(4,1),(8,2)] n=12", &spec, 2, 12));
}

#[test]
fn snapshot_longnet_n12_three_heads() {
    let spec = Spec::new(Dilated::longnet(&[(4, 1), (8, 2)]));
    insta::assert_snapshot!(grids("longnet [(4,1),(8,2)] n=12", &spec, 3, 12));
}

#[test]
fn snapshot_torchscale_n12_three_heads() {
    let spec = Spec::new(Dilated::torchscale(&[(4, 1), (8, 2)]));
    insta::assert_snapshot!(grids("torchscale [(4,1),(8,2)] n=12", &spec, 3, 12));
}

#[test]
fn snapshot_head_groups_n12_three_heads() {
    let spec = Spec::new(Dilated::head_groups(&[(4, 1), (8, 2)]));
    insta::assert_snapshot!(grids("head_groups [(4,1),(8,2)] n=12 (outputs / 2)", &spec, 3, 12));
}

#[test]
fn snapshot_longnet_causal_short_last_segment() {
    let spec = Spec::new(Dilated::longnet(&[(4, 1), (8, 2)])).causal(true);
    insta::assert_snapshot!(grids("longnet [(4,1),(8,2)] n=10 causal", &spec, 2, 10));
}

#[test]
fn snapshot_causal_window() {
    let spec = Spec::new(SlidingWindow { left: 3, right: 2 }).causal(true);
    insta::assert_snapshot!(grids("window left=3 right=2 causal n=12", &spec, 1, 12));
}

#[test]
fn snapshot_block_sparse() {
    let mut mask = vec![vec![false; 4]; 4];
    mask[3][1] = true;
    let pattern = BlockSparse {
        block: 3,
        local_radius: Some(0),
        dilated_stride: Some(3),
        global_tokens: 1,
        block_mask: Some(mask),
    };
    let spec = Spec::new(pattern);
    insta::assert_snapshot!(grids("block_sparse block=3 local=0 stride=3 global=1 mask[3][1] n=11", &spec, 1, 11));
}

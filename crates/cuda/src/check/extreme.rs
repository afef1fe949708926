//! The kernel check's extreme cases: large-magnitude scores, and rows with no key.
//!
//! # Large scores (16 cases)
//! For each element type and head dim: a dense forward with every `|s| <= 1e4`
//! ([`Logits::Large`]), a LongNet forward with every score `5e3 + O(1)`
//! ([`Logits::Offset`]; its branches' partials merge at LSEs of 5e3), a backward (causal,
//! key padding) and a ring merge (causal), one of each magnitude, alternating with the
//! head dim. They are judged by [`super::bound_for`] and [`super::lse_err`] (the
//! derivation is in the module docs of [`super`]). Their lengths are at least
//! [`LARGE_MIN_SEQ`], so that the largest `|s|` of a case exceeds 1e3 (its pairs' cosines
//! are about `1 / sqrt(d)`).
//!
//! # Rows with no key (5 cases)
//! One case per GPU pattern kind, built so that some query rows have no allowed key,
//! spread over the element types and head dims:
//! * dense, causal + key padding (backward): causality always leaves key 0, so one batch
//!   row gets key length 0, which empties all its rows;
//! * sliding window + key padding: a row `i >= L + left` sees only padded keys, and every
//!   length is drawn in `0..=n - 1 - left`, so the last row is always one;
//! * block sparse, a user mask with one block row all false and no other rule;
//! * LongNet dilated (backward): branches `(w, 2)` and `(m w, 4)` over `n = j m w + 1`
//!   tokens, at least two heads, no branch of rate 1. Head `h` keeps the positions `a +
//!   (h mod r) + t r` of a segment starting at `a`, and a query takes part only in the
//!   branches that keep it, so about half the rows of every head have no key. Among them,
//!   for head 1: query 0, and the last position, the whole of a short last segment (one
//!   token, at offset 0) of which head 1 keeps nothing, so that nothing sees its key
//!   either;
//! * a ring step, causal, whose key rows start after its first query row and (where it
//!   has more than one) at or before its last: rows with and without keys in one launch.
//!
//! Those rows must come back as the merge identity exactly ([`exact_empty`],
//! [`exact_zero_grads`]), and a case built to have them fails if its reference has none.

use super::cases::{fit_spec, sizes};
use super::{Case, Kind, Logits};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ndarray::{Array3, s};
use ringdil_reference::pattern::{BlockSparse, Dilated};
use ringdil_reference::random::SplitMix64;
use ringdil_reference::{Partial, Spec};

/// The shortest sequence of a large-score case (see the module docs).
pub const LARGE_MIN_SEQ: usize = 61;

/// The extreme cases, sizes and parameters drawn from `rng` (quick: small sizes).
pub(super) fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let combos = [(Dtype::Bf16, 64), (Dtype::Bf16, 128), (Dtype::F16, 64), (Dtype::F16, 128)];
    let dense = GpuSpec::new(GpuPattern::Dense);
    let mut out = Vec::new();
    for combo in combos {
        let causal = rng.uniform() < 0.5;
        let (backward, merge) =
            if combo.1 == 64 { (Logits::Large, Logits::Offset) } else { (Logits::Offset, Logits::Large) };
        let mut add = |kind, what, logits, spec, rng: &mut SplitMix64| {
            out.push(large(kind, what, logits, combo, spec, quick, rng));
        };
        add(Kind::Forward, "forward dense", Logits::Large, dense.clone().causal(causal), rng);
        let branches = [(rng.range(16, 128), 1), (rng.range(100, 400), 2), (rng.range(400, 2000), 4)];
        let longnet = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&branches))).causal(causal);
        add(Kind::Forward, "dilated longnet", Logits::Offset, longnet, rng);
        let padded = dense.clone().causal(true).key_lengths(vec![]);
        add(Kind::Backward, "backward causal + padding", backward, padded, rng);
        add(Kind::Merge, "ring merge causal", merge, dense.clone().causal(true), rng);
    }
    let [c0, c1, c2, c3] = combos;

    let (seq, batch, heads) = sizes(quick, rng);
    let mut lengths: Vec<usize> = (0..batch).map(|_| rng.range(0, seq)).collect();
    lengths[rng.range(0, batch - 1)] = 0;
    let spec = dense.clone().causal(true).key_lengths(lengths);
    let name = "backward causal + padding, all-masked rows (a key length 0)";
    out.push(masked(Kind::Backward, name, c0, [batch, seq, heads], spec));

    let (seq, batch, heads) = sizes(quick, rng);
    let left = rng.range(0, 150.min(seq - 1));
    let window = GpuPattern::Window { left, right: rng.range(0, 80) };
    let lengths = (0..batch).map(|_| rng.range(0, seq - 1 - left)).collect();
    let spec = GpuSpec::new(window).causal(rng.uniform() < 0.5).key_lengths(lengths);
    let name = "sliding window + padding, all-masked rows (past the padding)";
    out.push(masked(Kind::Forward, name, c1, [batch, seq, heads], spec));

    let (seq, batch, heads) = sizes(quick, rng);
    let seq = seq.max(2);
    let name = "ring step causal, all-masked rows (keys after the first query)";
    out.push(masked(Kind::RingStep, name, c1, [batch, seq, heads], dense.causal(true)));

    // Blocks of 16 or 32 rows, so that the empty block row e shares its 64-row tile with
    // block row e ^ 1, which sees key block 0: the tile is visited (forward and backward)
    // with rows that have no key inside it, the case where the backward's P of an empty
    // row must come out 0 (lse2 = +inf), not exp2(-inf + inf).
    let (seq, batch, heads) = sizes(quick, rng);
    let block = [16, 32][rng.range(0, 1)];
    let seq = seq.max(2 * block);
    let nb = seq.div_ceil(block);
    let mut mask: Vec<Vec<bool>> = (0..nb).map(|_| (0..nb).map(|_| rng.uniform() < 0.3).collect()).collect();
    let empty = rng.range(0, nb / 2 * 2 - 1);
    mask[empty] = vec![false; nb];
    mask[empty ^ 1][0] = true;
    let bs = BlockSparse { block, local_radius: None, dilated_stride: None, global_tokens: 0, block_mask: Some(mask) };
    let spec = GpuSpec::new(GpuPattern::BlockSparse(bs)).causal(rng.uniform() < 0.5);
    let name = "backward block sparse user mask, all-masked rows (an empty block row in a visited tile)";
    out.push(masked(Kind::Backward, name, c2, [batch, seq, heads], spec));

    let w = if quick { 16 } else { [16, 32, 64][rng.range(0, 2)] };
    let segment = w * rng.range(2, 4);
    let longest = if quick { 200 } else { 1100 };
    let seq = segment * rng.range(1, (longest - 1) / segment) + 1;
    let (batch, heads) = (rng.range(1, 2), rng.range(2, 4));
    let dilated = GpuPattern::Dilated(Dilated::longnet(&[(w, 2), (segment, 4)]));
    let spec = GpuSpec::new(dilated).causal(rng.uniform() < 0.5);
    let name = "backward dilated, all-masked rows (no rate-1 branch, short last segment)";
    out.push(masked(Kind::Backward, name, c3, [batch, seq, heads], spec));
    out
}

/// A large-score case: its magnitude in its name, sizes from `rng`, length at least
/// [`LARGE_MIN_SEQ`].
fn large(
    kind: Kind,
    what: &str,
    logits: Logits,
    combo: (Dtype, usize),
    spec: GpuSpec,
    quick: bool,
    rng: &mut SplitMix64,
) -> Case {
    let (seq, batch, heads) = sizes(quick, rng);
    let seq = seq.max(LARGE_MIN_SEQ);
    let mut spec = fit_spec(spec, batch, seq, rng);
    // At least 2 keys per batch row (module docs of `check`, "Large scores": the gradient
    // floor does not cover one key that is every row's only key).
    if let Some(lengths) = &mut spec.key_lengths {
        lengths.iter_mut().for_each(|l| *l = (*l).max(2));
    }
    let name = format!("{what}, {}", logits.describe());
    Case { logits, ..Case::new(kind, &name, combo, [batch, seq, heads], spec) }
}

/// A case built to have query rows with no key.
fn masked(kind: Kind, name: &str, combo: (Dtype, usize), sizes: [usize; 3], spec: GpuSpec) -> Case {
    Case { empty_rows: true, ..Case::new(kind, name, combo, sizes, spec) }
}

/// The keys (global positions, with multiplicity) that query `query` of batch row `b` and
/// head `h` sees under `spec` in a sequence of `seq` tokens: the key runs of its document
/// (`Spec::key_runs`: the pattern inside the document, or over the row without documents)
/// cut by key padding and causality, as the reference cuts them.
pub fn keys(spec: &Spec, (b, h, heads): (usize, usize, usize), seq: usize, query: usize) -> Vec<usize> {
    let mut runs = Vec::new();
    spec.key_runs(b, query, h, heads, seq, &mut runs);
    let limit = spec.key_limit(b, seq);
    let limit = if spec.causal { limit.min(query + 1) } else { limit };
    runs.into_iter().flat_map(|run| run.clipped(limit).iter()).collect()
}

/// How many values of `got` are not the merge identity in the rows where `want` has no
/// key (LSE `-inf`): out must be exactly 0 and the LSE exactly `-inf` (NaN is neither).
/// None when `want` has no such row.
pub fn exact_empty(got: &Partial<f64>, want: &Partial<f64>) -> Option<usize> {
    let mut rows = 0;
    let mut violations = 0;
    for ((b, h, i), &lse) in want.lse.indexed_iter() {
        if lse == f64::NEG_INFINITY {
            rows += 1;
            violations += usize::from(got.lse[[b, h, i]] != f64::NEG_INFINITY);
            violations += got.out.slice(s![b, i, h, ..]).iter().filter(|&&x| x != 0.0).count();
        }
    }
    (rows > 0).then_some(violations)
}

/// How many gradient values that must be exactly 0 are not (NaN included): dQ in the rows
/// of queries with no key (reference LSE `-inf`), dK and dV in the rows of keys that no
/// query sees (under grouped-query attention: no query of any head of the K/V head's
/// group). `grads` are dQ `[batch, seq, heads, dim]`, dK `[batch, seq, kv_heads, dim]` and
/// dV `[batch, seq, kv_heads, value_dim]` of the full sequence. None when there is no
/// such row.
pub fn exact_zero_grads(case: &Case, lse: &Array3<f64>, grads: [&[f64]; 3]) -> Option<usize> {
    let (n, heads, kv_heads) = (case.seq, case.heads, case.kv_heads);
    let group = heads / kv_heads;
    let spec = case.spec.to_reference();
    // The nonzero values of row (b, i, h) of a tensor of `width` heads of `d` values.
    let row = |x: &[f64], (width, d): (usize, usize), b: usize, i: usize, h: usize| -> usize {
        let at = ((b * n + i) * width + h) * d;
        x[at..at + d].iter().filter(|&&v| v != 0.0).count()
    };
    let (q_row, k_row, v_row) = ((heads, case.head_dim), (kv_heads, case.head_dim), (kv_heads, case.value_dim));
    let (mut rows, mut violations) = (0, 0);
    for b in 0..case.batch {
        for kvh in 0..kv_heads {
            let mut seen = vec![false; n];
            for h in kvh * group..(kvh + 1) * group {
                for i in 0..n {
                    keys(&spec, (b, h, heads), n, i).into_iter().for_each(|j| seen[j] = true);
                    if lse[[b, h, i]] == f64::NEG_INFINITY {
                        rows += 1;
                        violations += row(grads[0], q_row, b, i, h);
                    }
                }
            }
            for j in (0..n).filter(|&j| !seen[j]) {
                rows += 1;
                violations += row(grads[1], k_row, b, j, kvh) + row(grads[2], v_row, b, j, kvh);
            }
        }
    }
    (rows > 0).then_some(violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::kernels::{draw, ring_reference, ring_rows};
    use crate::check::{LARGE_LOGITS, OFFSET_LOGITS, describe, partial_bound};
    use ndarray::Array4;
    use ringdil_reference::attention;

    /// The keys the exact-zero checks call seen are the reference's, documents included:
    /// LongNet's (8, 2) branch inside documents 0..5, 5..20 (segments 5..13, 13..20)
    /// keeps, for head 0, query 6 (position 1 of its document, not kept) nothing and query
    /// 9 keys 5, 7, 9, 11 (not the global lattice's 8, 10, 12, 14); for head 1, query 10
    /// keys 6, 8, 10, 12, cut by causality at 10.
    #[test]
    fn seen_keys_are_those_of_the_query_document() {
        use ringdil_reference::Documents;
        use ringdil_reference::pattern::Dilated;
        let spec = Spec::new(Dilated::longnet(&[(8, 2)])).documents(Documents::per_row(vec![vec![0, 5, 20]; 2]));
        assert_eq!(keys(&spec, (1, 0, 2), 20, 6), Vec::<usize>::new());
        assert_eq!(keys(&spec, (1, 0, 2), 20, 9), [5, 7, 9, 11]);
        assert_eq!(keys(&spec, (0, 1, 2), 20, 10), [6, 8, 10, 12]);
        assert_eq!(keys(&spec.causal(true), (0, 1, 2), 20, 10), [6, 8, 10]);
    }

    /// The smallest and largest scaled score `q . k / sqrt(d)` over every (query, key) pair
    /// of every batch row and head, and the largest scaled partial-sum bound
    /// `sum_i |q_i k_i| / sqrt(d)`, in f64 from the rounded values.
    fn score_range(q: &Array4<f64>, k: &Array4<f64>) -> [f64; 3] {
        let scale = 1.0 / (q.dim().3 as f64).sqrt();
        let [mut lo, mut hi, mut partial] = [f64::INFINITY, f64::NEG_INFINITY, 0.0f64];
        for b in 0..q.dim().0 {
            for h in 0..q.dim().2 {
                let (qh, kh) = (q.slice(s![b, .., h, ..]), k.slice(s![b, .., h, ..]));
                let scores = qh.dot(&kh.t()) * scale;
                let sums = qh.mapv(f64::abs).dot(&kh.mapv(f64::abs).t()) * scale;
                lo = scores.iter().fold(lo, |a, &x| a.min(x));
                hi = scores.iter().fold(hi, |a, &x| a.max(x));
                partial = sums.iter().fold(partial, |a, &x| a.max(x));
            }
        }
        [lo, hi, partial]
    }

    /// What a large-score case's name and tolerance say, on the inputs `run_case` draws:
    /// `|s| <= 1e4` with a largest `|s|` above 1e3 and partial sums within 1e4 (Cauchy-
    /// Schwarz); or every score in `5e3 +- 20` with partial sums within 1.01 * 5e3.
    #[test]
    fn large_score_cases_have_the_stated_magnitudes() {
        for (seed, quick) in [(1, true), (2, true), (3, false), (4, false)] {
            let list = crate::check::cases(seed, quick);
            let large: Vec<_> = list.iter().enumerate().filter(|(_, c)| c.logits != Logits::Unit).collect();
            assert_eq!(large.len(), 16);
            for (i, case) in large {
                let (_, [(_, q), (_, k), _]) = draw(case, seed ^ (i as u64 + 1));
                let [lo, hi, partial] = score_range(&q, &k);
                let what = format!("{}: s in [{lo}, {hi}], partial sums <= {partial}", describe(case));
                assert!(partial <= partial_bound(case.logits), "{what}");
                match case.logits {
                    Logits::Large => {
                        assert!(partial <= LARGE_LOGITS, "{what}");
                        assert!(lo.abs().max(hi) > 1e3, "{what}");
                    }
                    _ => assert!(lo >= OFFSET_LOGITS - 20.0 && hi <= OFFSET_LOGITS + 20.0, "{what}"),
                }
            }
        }
    }

    /// Every case built to have rows with no key has some, in the reference the GPU is
    /// compared with: exactly the rows whose key set (cut to the ring step's key rows) is
    /// empty have LSE `-inf`, and their output is 0. The backward ones also have keys that
    /// no query sees (their dK and dV must be exactly 0).
    #[test]
    fn all_masked_cases_have_rows_with_no_key() {
        for (seed, quick) in [(1, true), (2, true), (3, false), (4, false)] {
            let list = crate::check::cases(seed, quick);
            let masked: Vec<_> = list.iter().enumerate().filter(|(_, c)| c.empty_rows).collect();
            assert_eq!(masked.len(), 5);
            for (i, case) in masked {
                let (mut rng, [(_, q), (_, k), (_, v)]) = draw(case, seed ^ (i as u64 + 1));
                let spec = case.spec.to_reference();
                let all: Vec<usize> = (0..case.seq).collect();
                let (want, qpos, kpos) = match case.kind {
                    Kind::RingStep => {
                        let (qc, kc) = ring_rows(case, &mut rng);
                        (ring_reference(&q, &k, &v, (qc, kc), &spec).unwrap(), qc.positions(), kc.positions())
                    }
                    _ => {
                        let a = attention(q.view(), k.view(), v.view(), &spec).unwrap();
                        (Partial { out: a.out, lse: a.lse }, all.clone(), all)
                    }
                };
                let mut in_chunk = vec![false; case.seq];
                kpos.iter().for_each(|&j| in_chunk[j] = true);
                let mut empty = 0;
                for ((b, h, r), &lse) in want.lse.indexed_iter() {
                    let seen = keys(&spec, (b, h, case.heads), case.seq, qpos[r]).into_iter().filter(|&j| in_chunk[j]);
                    let no_key = seen.count() == 0;
                    assert_eq!(lse == f64::NEG_INFINITY, no_key, "{} row {r}", describe(case));
                    if no_key {
                        empty += 1;
                        assert!(want.out.slice(s![b, r, h, ..]).iter().all(|&x| x == 0.0));
                    }
                }
                assert!(empty > 0, "{}", describe(case));
                assert_eq!(exact_empty(&want, &want), Some(0));
                if case.kind == Kind::Backward {
                    let zero = vec![0.0; q.len()];
                    assert_eq!(exact_zero_grads(case, &want.lse, [&zero, &zero, &zero]), Some(0));
                }
            }
        }
    }

    /// A small causal case with key lengths [0, 3] over 4 tokens: batch row 0 has no key
    /// at all, key 3 of batch row 1 is padded. The exact checks count NaN, tiny values and
    /// a finite LSE in those rows, and nothing elsewhere.
    #[test]
    fn exact_checks_count_every_value_that_is_not_the_identity() {
        let spec = GpuSpec::new(GpuPattern::Dense).causal(true).key_lengths(vec![0, 3]);
        let case = masked(Kind::Backward, "tiny", (Dtype::Bf16, 2), [2, 4, 1], spec);
        let (_, [(_, q), (_, k), (_, v)]) = draw(&case, 1);
        let a = attention(q.view(), k.view(), v.view(), &case.spec.to_reference()).unwrap();
        let want = Partial { out: a.out, lse: a.lse };
        assert_eq!(exact_empty(&want, &want), Some(0));
        for (at, x) in [([0, 2, 0, 1], f64::NAN), ([0, 0, 0, 0], 1e-30), ([1, 1, 0, 0], f64::NAN)] {
            let mut got = want.clone();
            got.out[at] = x;
            assert_eq!(exact_empty(&got, &want), Some(usize::from(at[0] == 0)), "{at:?}");
        }
        let mut got = want.clone();
        got.lse[[0, 0, 3]] = -1e30;
        assert_eq!(exact_empty(&got, &want), Some(1));
        let unit = Partial { out: want.out.mapv(|_| 1.0), lse: want.lse.mapv(|_| 0.0) };
        assert_eq!(exact_empty(&want, &unit), None);

        let zero = vec![0.0; 16];
        assert_eq!(exact_zero_grads(&case, &want.lse, [&zero, &zero, &zero]), Some(0));
        // [b, n, h, d] offsets: dQ of batch row 0 (no key), dK of padded key 3 of batch
        // row 1, and dK of its key 1, which queries 1..=2 see.
        for (grad, at, counted) in [(0, 2, 1), (1, 8 + 6, 1), (2, 8 + 7, 1), (1, 8 + 2, 0), (0, 8 + 2, 0)] {
            let mut g = [zero.clone(), zero.clone(), zero.clone()];
            g[grad][at] = f64::NAN;
            assert_eq!(exact_zero_grads(&case, &want.lse, [&g[0], &g[1], &g[2]]), Some(counted), "{grad} {at}");
        }
        // dV 4 wide beside dQ, dK 2 wide: the last value of padded key 3's dV row (batch
        // row 1) is counted; a value of key 1's is not.
        let wide = Case { value_dim: 4, ..case };
        let dv = vec![0.0; 32];
        assert_eq!(exact_zero_grads(&wide, &want.lse, [&zero, &zero, &dv]), Some(0));
        for (at, counted) in [(16 + 15, 1), (16 + 12, 1), (16 + 4, 0)] {
            let mut g = dv.clone();
            g[at] = f64::NAN;
            assert_eq!(exact_zero_grads(&wide, &want.lse, [&zero, &zero, &g]), Some(counted), "{at}");
        }
    }
}

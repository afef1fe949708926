//! Shared support for the proofs: naive oracles written independently of the blocked
//! engine, assertions on the error measures, proptest strategies and small renderers.
//!
//! The naive oracles below loop over every (query, key) pair with an explicit
//! multiplicity function. They are deliberately the most direct transcription of the
//! math, so that the blocked engine, the pattern code and the merge are all checked
//! against something that shares none of their code. The mask builders
//! ([`longnet_counts`], [`window_counts`], [`block_sparse_counts`], [`spec_counts`]) are
//! likewise transcriptions of the *documented rules*, never calls into the pattern code
//! (except [`pattern_counts`], which exists to read a pattern's answer).

use ndarray::{Array, Array3, Array4, ArrayView4, Dimension};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use ringdil_reference::compare::{floor_err, pointwise_err, rel_err};
use ringdil_reference::pattern::{BlockSparse, Dense, Dilated, Offset, SlidingWindow, key_counts};
use ringdil_reference::random::{SplitMix64, normal_tensor};
use ringdil_reference::{Pattern, Spec};
use std::sync::Arc;

// ---------------------------------------------------------------------------------
// Assertions on the project's error measures (`ringdil_reference::compare`)
// ---------------------------------------------------------------------------------

/// Assert `rel_err(got, want) <= tol` for two arrays of the same shape, with a message
/// naming `what`. NaN anywhere fails (the error is then NaN, which is not `<= tol`).
pub fn assert_close<D: Dimension>(what: &str, got: &Array<f64, D>, want: &Array<f64, D>, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes differ");
    let e = rel_err(got.iter(), want.iter());
    assert!(e <= tol, "{what}: relative error {e:e} > {tol:e}");
}

/// Assert `||got - want|| <= tol * max(||want||, floor)` (Frobenius). Gradients can be
/// nearly zero by cancellation (a row with one key has `dS = p (dP - delta) = 0` up to
/// rounding), where a pure relative error would compare two rounding noises; `floor`
/// is the magnitude at which errors stop being judged relative to `want` (use the
/// norm of unit-scale inputs, e.g. `sqrt(len)` for standard-normal data).
pub fn assert_close_floor<D: Dimension>(what: &str, got: &Array<f64, D>, want: &Array<f64, D>, tol: f64, floor: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes differ");
    let e = floor_err(got.iter(), want.iter(), floor);
    let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
    assert!(e <= tol, "{what}: error {e:e} > {tol:e} (||want|| = {norm:e}, floor {floor:e})");
}

/// Assert [`pointwise_err`]`(got, want) <= tol` for two log-sum-exp arrays of the same
/// shape: `-inf` (rows without keys) exactly where `want` has it, close elsewhere.
pub fn assert_lse_close<D: Dimension>(what: &str, got: &Array<f64, D>, want: &Array<f64, D>, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: lse shapes differ");
    let e = pointwise_err(got.iter(), want.iter());
    assert!(e <= tol, "{what}: lse error {e:e} > {tol:e}");
}

// ---------------------------------------------------------------------------------
// Naive oracles and independent masks
// ---------------------------------------------------------------------------------

/// Naive attention with multiplicity `count(b, h, i, j)`: returns `(out, lse)` with
/// `out` normalised (no output scale) and `lse = -inf`, `out = 0` for empty rows.
pub fn naive_attention(
    q: ArrayView4<f64>,
    k: ArrayView4<f64>,
    v: ArrayView4<f64>,
    scale: f64,
    count: impl Fn(usize, usize, usize, usize) -> u32,
) -> (Array4<f64>, Array3<f64>) {
    let (batch, n, heads, d) = q.dim();
    let nk = k.dim().1;
    let dv = v.dim().3;
    let mut out = Array4::zeros((batch, n, heads, dv));
    let mut lse = Array3::from_elem((batch, heads, n), f64::NEG_INFINITY);
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..n {
                // (key, score, multiplicity) of every allowed key.
                let allowed: Vec<(usize, f64, f64)> = (0..nk)
                    .filter_map(|j| {
                        let c = count(b, h, i, j);
                        (c > 0).then(|| {
                            let s: f64 = (0..d).map(|x| q[[b, i, h, x]] * k[[b, j, h, x]]).sum::<f64>() * scale;
                            (j, s, c as f64)
                        })
                    })
                    .collect();
                if allowed.is_empty() {
                    continue;
                }
                let m = allowed.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = allowed.iter().map(|&(_, s, c)| c * (s - m).exp()).sum();
                lse[[b, h, i]] = m + z.ln();
                for &(j, s, c) in &allowed {
                    let p = c * (s - m).exp() / z;
                    for x in 0..dv {
                        out[[b, i, h, x]] += p * v[[b, j, h, x]];
                    }
                }
            }
        }
    }
    (out, lse)
}

/// The pattern's own answer as a `[heads, n, n]` count array (via `key_counts`).
pub fn pattern_counts(pattern: &dyn Pattern, heads: usize, n: usize) -> Array3<u32> {
    let mut counts = Array3::zeros((heads, n, n));
    for h in 0..heads {
        for i in 0..n {
            for (j, c) in key_counts(pattern, i, h, heads, n).into_iter().enumerate() {
                counts[[h, i, j]] = c;
            }
        }
    }
    counts
}

/// Pattern counts `[heads, n, n]` with causality and key padding of `spec` applied, as
/// `spec`'s docs state them (`j <= i` when causal, `j < key_lengths[b]`):
/// `[batch, heads, n, n]`. Written here, not taken from the engine's masking.
pub fn spec_counts(spec: &Spec, pattern: &Array3<u32>, batch: usize) -> Array4<u32> {
    let (heads, n, _) = pattern.dim();
    Array4::from_shape_fn((batch, heads, n, n), |(b, h, i, j)| {
        let padded = spec.key_lengths.as_ref().is_some_and(|l| j >= l[b]);
        if (spec.causal && j > i) || padded { 0 } else { pattern[[h, i, j]] }
    })
}

/// [`naive_attention`] of `spec` when its pattern has the multiplicities `pattern`
/// (`[heads, n, n]`), with causality, padding and scale applied here.
pub fn naive_spec(
    q: ArrayView4<f64>,
    k: ArrayView4<f64>,
    v: ArrayView4<f64>,
    spec: &Spec,
    pattern: &Array3<u32>,
) -> (Array4<f64>, Array3<f64>) {
    let counts = spec_counts(spec, pattern, q.dim().0);
    let scale = spec.scale_for(q.dim().3);
    naive_attention(q, k, v, scale, |b, h, i, j| counts[[b, h, i, j]])
}

/// LongNet's rule, transcribed from the paper and torchscale independently of
/// `pattern::dilated`: for each branch `(w, r, offset rule)`, query `i` and key `j` of
/// head `h` pair up iff they lie in the same segment `[s*w, min((s+1)*w, n))` and both
/// `(i - start) % r == o(h)` and `(j - start) % r == o(h)`. Counts add over branches.
/// `o(h)`: `h mod r` (HeadMod); torchscale's `dense_to_sparse` pads the heads to a
/// multiple of `r` and splits them into `r` equal blocks, block `t` keeping offset `t`
/// (HeadBlock); a fixed value (Fixed).
pub fn longnet_counts(branches: &[(usize, usize, Offset)], heads: usize, n: usize) -> Array3<u32> {
    let mut counts = Array3::zeros((heads, n, n));
    for &(w, r, rule) in branches {
        let padded_heads = heads + (r - heads % r) % r;
        let block = padded_heads / r;
        for h in 0..heads {
            let o = match rule {
                Offset::HeadMod => h % r,
                Offset::HeadBlock => h / block,
                Offset::Fixed(o) => o,
            };
            for i in 0..n {
                for j in 0..n {
                    let (si, sj) = (i / w, j / w);
                    let start = si * w;
                    if si == sj && (i - start) % r == o && (j - start) % r == o {
                        counts[[h, i, j]] += 1;
                    }
                }
            }
        }
    }
    counts
}

/// Sliding window rule: `i - left <= j <= i + right`.
pub fn window_counts(left: usize, right: usize, heads: usize, n: usize) -> Array3<u32> {
    Array3::from_shape_fn((heads, n, n), |(_, i, j)| u32::from(j + left >= i && j <= i + right))
}

/// Block-sparse rules OR-ed (a key counts once however many rules allow it): query
/// block `a = i / block`, key block `c = j / block`; allowed when `i < g` or `j < g`
/// (global tokens), `|a - c| <= radius`, `|a - c|` a multiple of the stride, or the user
/// mask says so.
pub fn block_sparse_counts(p: &BlockSparse, heads: usize, n: usize) -> Array3<u32> {
    Array3::from_shape_fn((heads, n, n), |(_, i, j)| {
        let (a, c) = (i / p.block, j / p.block);
        let dist = a.abs_diff(c);
        let global = i < p.global_tokens || j < p.global_tokens;
        let local = p.local_radius.is_some_and(|w| dist <= w);
        let strided = p.dilated_stride.is_some_and(|s| dist % s == 0);
        let user = p.block_mask.as_ref().is_some_and(|m| m[a][c]);
        u32::from(global || local || strided || user)
    })
}

// ---------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------

/// Independent standard-normal `q`, `k`, `v` of one shape, from one seed.
pub fn qkv(shape: [usize; 4], seed: u64) -> (Array4<f64>, Array4<f64>, Array4<f64>) {
    let s = seed.wrapping_mul(3);
    (normal_tensor(shape, s), normal_tensor(shape, s + 1), normal_tensor(shape, s + 2))
}

/// A random permutation of `items` (Fisher-Yates on SplitMix64).
pub fn shuffled<T>(mut items: Vec<T>, rng: &mut SplitMix64) -> Vec<T> {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.range(0, i));
    }
    items
}

/// Central finite-difference gradient of `f` at `x`, one coordinate at a time.
pub fn fd_gradient(x: &Array4<f64>, eps: f64, f: impl Fn(&Array4<f64>) -> f64) -> Array4<f64> {
    let mut grad = Array4::zeros(x.raw_dim());
    let mut probe = x.clone();
    for (idx, g) in grad.indexed_iter_mut() {
        let x0 = x[idx];
        probe[idx] = x0 + eps;
        let up = f(&probe);
        probe[idx] = x0 - eps;
        let down = f(&probe);
        probe[idx] = x0;
        *g = (up - down) / (2.0 * eps);
    }
    grad
}

// ---------------------------------------------------------------------------------
// Proptest
// ---------------------------------------------------------------------------------

/// A proptest config with `default` cases unless `PROPTEST_CASES` is set. (Proptest's
/// `with_cases` would ignore the variable.) Failures are not persisted to files: the
/// shrunk case is printed, and these proofs own no regression files.
pub fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// One attention problem: shape, spec and the seed of its tensors.
#[derive(Debug, Clone)]
pub struct Case {
    pub batch: usize,
    pub n: usize,
    pub heads: usize,
    pub dim: usize,
    /// v's head dim (and the output's): `dim`, unless a test draws another
    /// ([`any_case_value_dim`]).
    pub value_dim: usize,
    pub spec: Spec,
    pub seed: u64,
}

impl Case {
    pub fn shape(&self) -> [usize; 4] {
        [self.batch, self.n, self.heads, self.dim]
    }

    /// `[batch, n, heads, value_dim]`: v, the output and its upstream gradient.
    pub fn out_shape(&self) -> [usize; 4] {
        [self.batch, self.n, self.heads, self.value_dim]
    }

    /// q and k of [`Case::shape`], v of [`Case::out_shape`] (with `value_dim = dim`, the
    /// three tensors of [`qkv`]).
    pub fn qkv(&self) -> (Array4<f64>, Array4<f64>, Array4<f64>) {
        let (q, k, _) = qkv(self.shape(), self.seed);
        (q, k, normal_tensor(self.out_shape(), self.seed.wrapping_mul(3) + 2))
    }

    /// The pattern counts `[heads, n, n]` (the pattern's own answer).
    pub fn pattern_counts(&self) -> Array3<u32> {
        pattern_counts(&*self.spec.pattern, self.heads, self.n)
    }
}

/// LongNet branches `(w, r)` with `1 <= r <= w <= max_w`.
pub fn branches(max_w: usize, max_branches: usize) -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((1..=max_w).prop_flat_map(|w| (Just(w), 1..=w)), 1..=max_branches)
}

/// Branches with an offset rule each (HeadMod, HeadBlock or a valid fixed offset).
pub fn branches_with_offsets(max_w: usize, max_branches: usize) -> impl Strategy<Value = Vec<(usize, usize, Offset)>> {
    let one = (1..=max_w).prop_flat_map(|w| (Just(w), 1..=w)).prop_flat_map(|(w, r)| {
        let rule = prop_oneof![Just(Offset::HeadMod), Just(Offset::HeadBlock), (0..r).prop_map(Offset::Fixed)];
        (Just(w), Just(r), rule)
    });
    prop::collection::vec(one, 1..=max_branches)
}

/// A block-sparse pattern with every rule sometimes on, including a user block mask,
/// for sequences of up to `max_n` tokens (the mask is built for that many blocks).
pub fn block_sparse(max_n: usize) -> impl Strategy<Value = BlockSparse> {
    (1..=5usize).prop_flat_map(move |block| {
        let blocks = max_n.div_ceil(block);
        (
            Just(block),
            prop::option::of(0..3usize),
            prop::option::of(1..4usize),
            0..4usize,
            prop::option::of(prop::collection::vec(prop::collection::vec(any::<bool>(), blocks), blocks)),
        )
            .prop_map(|(block, local_radius, dilated_stride, global_tokens, block_mask)| BlockSparse {
                block,
                local_radius,
                dilated_stride,
                global_tokens,
                block_mask,
            })
    })
}

/// A pattern for `heads` heads and sequences up to `max_n`: dense, sliding window,
/// block sparse, or dilated (LongNet, torchscale offsets, head groups).
pub fn any_pattern(heads: usize, max_n: usize) -> BoxedStrategy<Arc<dyn Pattern>> {
    let max_groups = heads.min(3);
    prop_oneof![
        Just(Arc::new(Dense) as Arc<dyn Pattern>),
        (0..6usize, 0..6usize).prop_map(|(left, right)| Arc::new(SlidingWindow { left, right }) as Arc<dyn Pattern>),
        block_sparse(max_n).prop_map(|p| Arc::new(p) as Arc<dyn Pattern>),
        branches(10, 3).prop_map(|b| Arc::new(Dilated::longnet(&b)) as Arc<dyn Pattern>),
        branches(10, 3).prop_map(|b| Arc::new(Dilated::torchscale(&b)) as Arc<dyn Pattern>),
        branches(10, max_groups).prop_map(|b| Arc::new(Dilated::head_groups(&b)) as Arc<dyn Pattern>),
    ]
    .boxed()
}

/// A whole [`Case`]: batch 1..=2, `n` in `1..=max_n`, heads 1..=3, head_dim 1..=5, any
/// pattern, causal on/off, key padding sometimes (lengths `0..=n`, so fully padded rows
/// occur), the default or a random scale.
pub fn any_case(max_n: usize) -> impl Strategy<Value = Case> {
    (1..=2usize, 1..=max_n, 1..=3usize, 1..=5usize)
        .prop_flat_map(move |(batch, n, heads, dim)| {
            (
                Just((batch, n, heads, dim)),
                any_pattern(heads, max_n),
                any::<bool>(),
                prop::option::of(prop::collection::vec(0..=n, batch)),
                prop::option::of(0.05f64..2.0),
                any::<u64>(),
            )
        })
        .prop_map(|((batch, n, heads, dim), pattern, causal, key_lengths, scale, seed)| Case {
            batch,
            n,
            heads,
            dim,
            value_dim: dim,
            spec: Spec { pattern, causal, key_lengths, scale, documents: None },
            seed: seed >> 8,
        })
}

/// [`any_case`] with v's head dim drawn apart from q's (1..=5, equal a fifth of the time):
/// `d_v != d` as MLA's 192 / 128 has it, on every pattern, layout and schedule.
pub fn any_case_value_dim(max_n: usize) -> impl Strategy<Value = Case> {
    (any_case(max_n), 1..=5usize).prop_map(|(case, value_dim)| Case { value_dim, ..case })
}

/// A random partition of `0..n` into `1..=max_parts` parts: each key goes to a random
/// part (so parts are non-contiguous and of random sizes, possibly empty), the keys
/// inside a part and the parts themselves are in random order.
pub fn partition(n: usize, max_parts: usize) -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1..=max_parts)
        .prop_flat_map(move |parts| (Just(parts), prop::collection::vec(0..parts, n), any::<u64>()))
        .prop_map(|(parts, owner, seed)| {
            let mut rng = SplitMix64::new(seed);
            let groups =
                (0..parts).map(|p| shuffled((0..owner.len()).filter(|&j| owner[j] == p).collect(), &mut rng)).collect();
            shuffled(groups, &mut rng)
        })
}

// ---------------------------------------------------------------------------------
// Pictures
// ---------------------------------------------------------------------------------

/// A readable grid of multiplicities: one line per query, one column per key, `.` for
/// 0 and the count otherwise (counts are single digits in the snapshots), followed by
/// the exact key list of the row.
pub fn render_grid(title: &str, n: usize, count: impl Fn(usize, usize) -> u32) -> String {
    let mut s = format!("{title}\nkey:  ");
    for j in 0..n {
        s.push(char::from_digit((j % 10) as u32, 10).unwrap());
    }
    s.push('\n');
    for i in 0..n {
        let row: Vec<u32> = (0..n).map(|j| count(i, j)).collect();
        let cells: String =
            row.iter().map(|&c| if c == 0 { '.' } else { char::from_digit(c.min(9), 10).unwrap() }).collect();
        let keys: Vec<String> = row
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(j, &c)| if c == 1 { j.to_string() } else { format!("{j}x{c}") })
            .collect();
        s.push_str(&format!("q{i:>3} {cells}  {{{}}}\n", keys.join(", ")));
    }
    s
}

// ---------------------------------------------------------------------------------
// Distributed layouts (issue 3)
// ---------------------------------------------------------------------------------

/// `ranks + 1` random non-decreasing boundaries from 0 to `n` (unequal parts, empty
/// ranks included).
pub fn boundaries(n: usize, ranks: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=n, ranks - 1).prop_map(move |mut cuts| {
        cuts.sort_unstable();
        let mut b = vec![0];
        b.extend(cuts);
        b.push(n);
        b
    })
}

/// A case from `cases` (`n_of`: its token count) on `1..=max_ranks` ranks, with any
/// layout of its tokens over them ([`ring_layout`]).
pub fn on_ranks<C: Clone + std::fmt::Debug + 'static>(
    cases: impl Strategy<Value = C> + 'static,
    n_of: fn(&C) -> usize,
    max_ranks: usize,
) -> BoxedStrategy<(C, usize, ringdil_reference::ring::Layout)> {
    cases
        .prop_flat_map(move |c| {
            let n = n_of(&c);
            (Just(c), 1..=max_ranks).prop_flat_map(move |(c, p)| (Just(c), Just(p), ring_layout(n, p)))
        })
        .boxed()
}

/// Any layout of `n` tokens over `ranks` ranks: contiguous, zigzag, striped, random
/// boundaries, or a random permutation with random or even boundaries.
pub fn ring_layout(n: usize, ranks: usize) -> BoxedStrategy<ringdil_reference::ring::Layout> {
    use ringdil_reference::ring::Layout;
    prop_oneof![
        Just(Layout::Contiguous),
        Just(Layout::Zigzag),
        Just(Layout::Striped),
        boundaries(n, ranks).prop_map(Layout::Boundaries),
        (any::<u64>(), prop::option::of(boundaries(n, ranks))).prop_map(move |(seed, boundaries)| Layout::Permuted {
            order: shuffled((0..n).collect(), &mut SplitMix64::new(seed)),
            boundaries,
        }),
    ]
    .boxed()
}

/// Replay `schedule` on the case's tensors (forward and backward with a random upstream
/// gradient) and check output, LSE and dQ, dK, dV against the single-device
/// `attention` / `attention_backward` to `tol`: relative for the output, relative above a
/// floor of `sqrt(len)` (the norm of unit-scale data) for the gradients, which can cancel
/// to rounding noise (a causal query with one key has dS = 0). Returns the simulation
/// report.
pub fn assert_schedule_exact(
    case: &Case,
    schedule: &ringdil_reference::ring::Schedule,
    tol: f64,
) -> Result<ringdil_reference::ring::Report, TestCaseError> {
    use ringdil_reference::{attention, attention_backward, ring::simulate};
    let (q, k, v) = case.qkv();
    let d_out = normal_tensor(case.out_shape(), case.seed + 7);
    let want = attention(q.view(), k.view(), v.view(), &case.spec).unwrap();
    let want_grad = attention_backward(q.view(), k.view(), v.view(), &case.spec, &want, d_out.view()).unwrap();
    let (got, grad, report) = simulate(schedule, &case.spec, q.view(), k.view(), v.view(), Some(d_out.view()))
        .map_err(|e| TestCaseError::fail(format!("{:?}: {e}", schedule.kind)))?;
    let grad = grad.expect("backward was requested");
    let kind = schedule.kind;
    let e = rel_err(got.out.iter(), want.out.iter());
    prop_assert!(e < tol, "{kind:?} out: rel err {e}");
    for (what, g, w) in
        [("dq", &grad.dq, &want_grad.dq), ("dk", &grad.dk, &want_grad.dk), ("dv", &grad.dv, &want_grad.dv)]
    {
        let e = floor_err(g.iter(), w.iter(), (w.len() as f64).sqrt());
        prop_assert!(e < tol, "{kind:?} {what}: error {e} (relative above the floor)");
    }
    // LSE: -inf exactly where the reference has no key, close elsewhere.
    let e = pointwise_err(got.lse.iter(), want.lse.iter());
    prop_assert!(e <= tol, "{kind:?} lse: pointwise error {e}");
    Ok(report)
}

//! The ring's and the pattern-aware plan's guarantees (issue 20), each stated directly by
//! a property test of its own, against transcriptions that share no code with what they
//! check: the layouts as `reference/src/ring/chunking.rs` documents them (written out
//! below) and the masks of `tests/support.rs` (`longnet_counts`, `window_counts`,
//! `block_sparse_counts`, with causality and padding applied by `spec_counts`).
//!
//! * (a) [`pieces_partition_the_sequence`]: every position `0..n` is owned by exactly one
//!   rank, as a query row and as a key row;
//! * (b) [`pieces_hold_exactly_the_rows_the_layout_assigns`]: what each rank claims (its
//!   tokens, the query rows it computes, the key block the ring passes on) is what the
//!   layout assigns it, no row more and none less;
//! * (c) [`every_attended_key_is_received`] and, for LongNet's short last segment,
//!   [`short_last_segment_keys_are_received`]: every key a query attends is held by its
//!   rank or sent to it (`Needs`, forward and backward sends), and the pair is computed;
//! * (d) [`nothing_is_sent_that_no_query_attends`]: the plan's minimality claim
//!   (`comm_plan.rs` docs) against the independent masks.
//!
//! `tests/comm_plan.rs` checks the plan against the pattern's *own* counts and by replay;
//! a bug shared by the pattern code and the plan (say, both dropping a short last
//! segment) would pass there and fails here. Empty ranks occur through random boundaries
//! and through `n < P`.

use ndarray::{Array3, Array4};
use proptest::prelude::*;
use ringdil_proofs::{
    block_sparse, block_sparse_counts, branches_with_offsets, config, longnet_counts, ring_layout, spec_counts,
    window_counts,
};
use ringdil_reference::pattern::{BlockSparse, Branch, Combine, Dense, Dilated, Offset, SlidingWindow};
use ringdil_reference::ring::{ChunkPlan, Layout, Needs, Op, Schedule, Tensor, pattern_ring, ring};
use ringdil_reference::{Pattern, Spec};
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

/// The longest sequence of the proofs (n ranges over `1..=MAX_N`, primes included).
const MAX_N: usize = 40;

// ---------------------------------------------------------------------------------
// The layouts, transcribed from the docs of `Layout`
// ---------------------------------------------------------------------------------

/// `parts` consecutive ranges splitting `0..n` as evenly as possible, the first
/// `n mod parts` of them one token longer ("the first `N mod P` ranks get `ceil(N/P)`
/// tokens, the others `floor(N/P)`").
fn even_ranges(n: usize, parts: usize) -> Vec<Range<usize>> {
    let mut start = 0;
    (0..parts)
        .map(|k| {
            let len = n / parts + usize::from(k < n % parts);
            start += len;
            start - len..start
        })
        .collect()
}

/// The tokens each rank must hold, in local row order, as the docs of [`Layout`] define
/// them: contiguous = even split; zigzag = `2P` even chunks, rank `i` holds `c_i` then
/// `c_{2P-1-i}`; striped = token `t` on rank `t mod P`; boundaries = `b_r..b_{r+1}`;
/// permuted = `order[b_r..b_{r+1}]` with the given or even boundaries.
fn assigned(n: usize, ranks: usize, layout: &Layout) -> Vec<Vec<usize>> {
    match layout {
        Layout::Contiguous => even_ranges(n, ranks).into_iter().map(Iterator::collect).collect(),
        Layout::Zigzag => {
            let c = even_ranges(n, 2 * ranks);
            (0..ranks).map(|i| c[i].clone().chain(c[2 * ranks - 1 - i].clone()).collect()).collect()
        }
        Layout::Striped => (0..ranks).map(|r| (0..n).filter(|t| t % ranks == r).collect()).collect(),
        Layout::Boundaries(b) => (0..ranks).map(|r| (b[r]..b[r + 1]).collect()).collect(),
        Layout::Permuted { order, boundaries } => {
            let spans = match boundaries {
                Some(b) => (0..ranks).map(|r| b[r]..b[r + 1]).collect(),
                None => even_ranges(n, ranks),
            };
            spans.into_iter().map(|s| order[s].to_vec()).collect()
        }
    }
}

/// `owner[t]`: the rank the layout assigns token `t` to.
fn owners(assigned: &[Vec<usize>], n: usize) -> Vec<usize> {
    let mut owner = vec![usize::MAX; n];
    for (r, tokens) in assigned.iter().enumerate() {
        tokens.iter().for_each(|&t| owner[t] = r);
    }
    owner
}

/// Assert that `pieces[r]` (the rows rank `r` claims) cover `0..n` exactly once.
fn assert_partition(what: &str, n: usize, pieces: &[Vec<usize>]) -> Result<(), TestCaseError> {
    let mut owned_by = vec![Vec::new(); n];
    for (r, rows) in pieces.iter().enumerate() {
        for &t in rows {
            prop_assert!(t < n, "{}: rank {} claims position {} outside 0..{}", what, r, t, n);
            owned_by[t].push(r);
        }
    }
    for (t, ranks) in owned_by.iter().enumerate() {
        prop_assert!(ranks.len() == 1, "{}: position {} is owned by ranks {:?}, not by exactly one", what, t, ranks);
    }
    Ok(())
}

/// `(n, P, layout)` with `n` in `0..=MAX_N` (so `n < P` and empty sequences occur), `P` in
/// `1..=8` and every layout (random boundaries with empty ranks, random permutations).
fn any_layout() -> impl Strategy<Value = (usize, usize, Layout)> {
    (0..=MAX_N, 1..=8usize).prop_flat_map(|(n, p)| (Just(n), Just(p), ring_layout(n, p)))
}

/// The dense, non-causal ring of `plan`: every rank computes every block, so its
/// computes and sends show each rank's query and key pieces.
fn dense_ring(plan: &ChunkPlan) -> Schedule {
    ring(plan, &Spec::new(Dense), 1).unwrap()
}

/// `(rank, queries, keys)` of the forward computes of one step.
fn computes(step: &ringdil_reference::ring::Step) -> Vec<(usize, &[usize], &[usize])> {
    step.ops
        .iter()
        .filter_map(|op| match op {
            Op::Attend { rank, queries, keys, .. } => Some((*rank, queries.as_slice(), keys.as_slice())),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Patterns with an independent mask
// ---------------------------------------------------------------------------------

/// A pattern and the way to its mask that does not go through the pattern code.
#[derive(Debug, Clone)]
enum Pat {
    Dense,
    Window {
        left: usize,
        right: usize,
    },
    BlockSparse(BlockSparse),
    /// LongNet branches `(w, r, offset rule)`, softmax-denominator combine.
    Dilated(Vec<(usize, usize, Offset)>),
}

impl Pat {
    fn pattern(&self) -> Arc<dyn Pattern> {
        match self {
            Pat::Dense => Arc::new(Dense),
            Pat::Window { left, right } => Arc::new(SlidingWindow { left: *left, right: *right }),
            Pat::BlockSparse(b) => Arc::new(b.clone()),
            Pat::Dilated(bs) => {
                let branches = bs.iter().map(|&(segment, dilation, offset)| Branch { segment, dilation, offset });
                Arc::new(Dilated { branches: branches.collect(), combine: Combine::SoftmaxDenominator })
            }
        }
    }

    /// `[heads, n, n]` multiplicities from `tests/support.rs`'s transcriptions.
    fn mask(&self, heads: usize, n: usize) -> Array3<u32> {
        match self {
            Pat::Dense => Array3::from_elem((heads, n, n), 1),
            Pat::Window { left, right } => window_counts(*left, *right, heads, n),
            Pat::BlockSparse(b) => block_sparse_counts(b, heads, n),
            Pat::Dilated(bs) => longnet_counts(bs, heads, n),
        }
    }
}

/// One plan to check: layout, spec and problem size.
#[derive(Debug, Clone)]
struct PlanCase {
    n: usize,
    ranks: usize,
    heads: usize,
    batch: usize,
    layout: Layout,
    causal: bool,
    key_lengths: Option<Vec<usize>>,
    pat: Pat,
}

impl PlanCase {
    fn spec(&self) -> Spec {
        Spec {
            pattern: self.pat.pattern(),
            causal: self.causal,
            key_lengths: self.key_lengths.clone(),
            scale: None,
            documents: None,
        }
    }

    /// `[batch, heads, n, n]`: what query `i` attends in head `h` of batch row `b`.
    fn attended(&self) -> Array4<u32> {
        spec_counts(&self.spec(), &self.pat.mask(self.heads, self.n), self.batch)
    }
}

/// Any pattern for sequences up to [`MAX_N`], LongNet most often: segments up to
/// `MAX_N + 8` long, so a short last segment (`w` not dividing `n`) or one segment
/// longer than the sequence is the common case, with every offset rule.
fn any_pat() -> impl Strategy<Value = Pat> {
    prop_oneof![
        1 => Just(Pat::Dense),
        1 => (0..8usize, 0..8usize).prop_map(|(left, right)| Pat::Window { left, right }),
        1 => block_sparse(MAX_N).prop_map(Pat::BlockSparse),
        3 => branches_with_offsets(MAX_N + 8, 3).prop_map(Pat::Dilated),
    ]
}

/// Any [`PlanCase`]: `n` in `1..=MAX_N`, `P` in `1..=6`, every layout, 1..=4 heads, batch
/// 1..=2, causal or not, key padding sometimes, any pattern.
fn any_plan_case() -> impl Strategy<Value = PlanCase> {
    (1..=MAX_N, 1..=6usize, 1..=4usize, 1..=2usize)
        .prop_flat_map(|(n, ranks, heads, batch)| {
            (
                Just((n, ranks, heads, batch)),
                ring_layout(n, ranks),
                any::<bool>(),
                prop::option::of(prop::collection::vec(0..=n, batch)),
                any_pat(),
            )
        })
        .prop_map(|((n, ranks, heads, batch), layout, causal, key_lengths, pat)| PlanCase {
            n,
            ranks,
            heads,
            batch,
            layout,
            causal,
            key_lengths,
            pat,
        })
}

/// A LongNet case whose last segment is short and straddles a rank boundary:
/// `n = q w + s` with `2 <= s < w`; the main branch `(w, r)` has `r < s` and an offset rule
/// giving head 0 offset 0, so the last segment `[a, n)` keeps `a` and `a + r` in head 0;
/// a forced cut in `a + 1..=a + r` puts them on different ranks. Other cuts are random
/// (empty ranks included), up to two more branches of any kind are added. Returns the
/// case and `a`, the start of the short segment.
fn short_last_segment_case() -> impl Strategy<Value = (PlanCase, usize)> {
    (3..=12usize, 0..=3usize)
        .prop_flat_map(|(w, q)| (Just((w, q)), 2..w))
        .prop_flat_map(|((w, q), s)| (Just((w, q, s)), 1..s))
        .prop_flat_map(|((w, q, s), r)| {
            let (a, n) = (q * w, q * w + s);
            (
                Just((w, r, a, n)),
                prop_oneof![Just(Offset::HeadMod), Just(Offset::HeadBlock), Just(Offset::Fixed(0))],
                a + 1..=a + r,
                2..=6usize,
                1..=4usize,
                1..=2usize,
                any::<bool>(),
                branches_with_offsets(n + 4, 2),
                0..=2usize,
            )
        })
        .prop_flat_map(|((w, r, a, n), rule, cut, ranks, heads, batch, causal, extra, extra_len)| {
            let others = prop::collection::vec(0..=n, ranks - 2);
            (Just(((w, r, a, n), rule, cut, ranks, heads, batch, causal, extra, extra_len)), others)
        })
        .prop_map(|(((w, r, a, n), rule, cut, ranks, heads, batch, causal, extra, extra_len), others)| {
            let mut cuts = others;
            cuts.push(cut);
            cuts.sort_unstable();
            let mut b = vec![0];
            b.extend(cuts);
            b.push(n);
            let mut branches = vec![(w, r, rule)];
            branches.extend(extra.into_iter().take(extra_len));
            let pat = Pat::Dilated(branches);
            (PlanCase { n, ranks, heads, batch, layout: Layout::Boundaries(b), causal, key_lengths: None, pat }, a)
        })
}

// ---------------------------------------------------------------------------------
// What the plan sends and computes
// ---------------------------------------------------------------------------------

/// The pattern-aware plan of a case, read as sets.
struct PlanView {
    plan: ChunkPlan,
    needs: Needs,
    /// `[forward, backward]`: `(to, head, key)` of every K/V row sent.
    received: [HashSet<(usize, usize, usize)>; 2],
    /// `[forward, backward]`: `(rank, head, query, key)` of every pair computed.
    computed: [HashSet<(usize, usize, usize, usize)>; 2],
}

impl PlanView {
    fn new(case: &PlanCase) -> Self {
        let plan = ChunkPlan::new(case.n, case.ranks, &case.layout).unwrap();
        let spec = case.spec();
        let needs = Needs::new(&spec, &plan, case.heads).unwrap();
        let schedule = pattern_ring(&plan, &spec, case.heads).unwrap();
        let mut received = [HashSet::new(), HashSet::new()];
        let mut computed = [HashSet::new(), HashSet::new()];
        for (phase, steps) in [&schedule.forward, &schedule.backward].into_iter().enumerate() {
            for op in steps.iter().flat_map(|s| &s.ops) {
                match op {
                    Op::Send { to, tensors, heads, tokens, .. } if tensors.contains(&Tensor::K) => {
                        for h in heads.clone() {
                            received[phase].extend(tokens.iter().map(|&k| (*to, h, k)));
                        }
                    }
                    Op::Attend { rank, heads, queries, keys } | Op::AttendBackward { rank, heads, queries, keys } => {
                        for h in heads.clone() {
                            for &q in queries {
                                computed[phase].extend(keys.iter().map(|&k| (*rank, h, q, k)));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        PlanView { plan, needs, received, computed }
    }
}

/// (c) for one case: for every query `q` (on the rank `r` the layout assigns it), head `h`
/// and key `k` that `q` attends in some batch row (independent mask), `k` is in
/// `need(r, owner(k), h)` and is held by `r` or, when another rank owns it, sent to `r` in
/// the forward and in the backward pass; and `(q, k, h)` is computed by `r` in both
/// passes. Returns the cross-rank `(q, k)` pairs it checked.
fn check_received(case: &PlanCase) -> Result<Vec<(usize, usize)>, TestCaseError> {
    let owner = owners(&assigned(case.n, case.ranks, &case.layout), case.n);
    let counts = case.attended();
    let view = PlanView::new(case);
    let mut cross = Vec::new();
    for q in 0..case.n {
        let r = owner[q];
        for h in 0..case.heads {
            for k in (0..case.n).filter(|&k| (0..case.batch).any(|b| counts[[b, h, q, k]] > 0)) {
                let src = owner[k];
                prop_assert!(
                    view.needs.keys(r, src, h).binary_search(&k).is_ok(),
                    "need({}, {}, head {}) = {:?} lacks key {}, which query {} attends",
                    r,
                    src,
                    h,
                    view.needs.keys(r, src, h),
                    k,
                    q
                );
                if src == r {
                    prop_assert!(
                        view.plan.tokens(r).contains(&k),
                        "rank {} does not hold its own key {} (attended by its query {}, head {})",
                        r,
                        k,
                        q,
                        h
                    );
                } else {
                    cross.push((q, k));
                    for (phase, name) in [(0, "forward"), (1, "backward")] {
                        prop_assert!(
                            view.received[phase].contains(&(r, h, k)),
                            "{}: key {} (head {}) of rank {} is never sent to rank {}, whose query {} attends it",
                            name,
                            k,
                            h,
                            src,
                            r,
                            q
                        );
                    }
                }
                for (phase, name) in [(0, "forward"), (1, "backward")] {
                    prop_assert!(
                        view.computed[phase].contains(&(r, h, q, k)),
                        "{}: rank {} never computes query {} over key {} in head {}",
                        name,
                        r,
                        q,
                        k,
                        h
                    );
                }
            }
        }
    }
    Ok(cross)
}

proptest! {
    #![proptest_config(config(1024))]

    /// (a) Every position `0..n` is owned by exactly one rank as a query row (the rank's
    /// `tokens`, the query rows of its computes) and by exactly one as a key row (the key
    /// block it computes at step 0 of the ring, the rows `token_map` places on it): no
    /// gap, no overlap, for every layout, `n < P` and empty ranks included. Stated on the
    /// plan alone, without the layout rules.
    #[test]
    fn pieces_partition_the_sequence((n, ranks, layout) in any_layout()) {
        let plan = ChunkPlan::new(n, ranks, &layout).unwrap();
        prop_assert_eq!(plan.ranks(), ranks);
        let tokens: Vec<Vec<usize>> = (0..ranks).map(|r| plan.tokens(r).to_vec()).collect();
        assert_partition("tokens (query and key rows)", n, &tokens)?;
        let map = plan.token_map();
        let mapped: Vec<Vec<usize>> = (0..ranks).map(|r| (0..n).filter(|&t| map.rank[t] == r).collect()).collect();
        assert_partition("token_map", n, &mapped)?;
        for t in 0..n {
            prop_assert_eq!(plan.tokens(map.rank[t]).get(map.local[t]), Some(&t), "token_map of token {}", t);
        }
        // Step 0 of the dense ring: rank r computes its own queries over its own keys.
        let schedule = dense_ring(&plan);
        let step0 = computes(&schedule.forward[0]);
        let queries: Vec<Vec<usize>> =
            (0..ranks).map(|r| step0.iter().filter(|c| c.0 == r).flat_map(|c| c.1.to_vec()).collect()).collect();
        let keys: Vec<Vec<usize>> =
            (0..ranks).map(|r| step0.iter().filter(|c| c.0 == r).flat_map(|c| c.2.to_vec()).collect()).collect();
        assert_partition("ring query pieces", n, &queries)?;
        assert_partition("ring key pieces", n, &keys)?;
    }

    /// (b) Every piece holds exactly its rows: rank `r`'s tokens are the positions the
    /// layout's documented rule assigns it, in its order (an empty rank holds nothing),
    /// and in the dense ring every compute of `r` at step `s` runs exactly those queries
    /// over exactly the key block of `src = (r - s) mod P`, the block that arrives at `r`
    /// is exactly `src`'s rows (a piece that drops its last key row fails here, by
    /// name), and a rank with no rows sends nothing.
    #[test]
    fn pieces_hold_exactly_the_rows_the_layout_assigns((n, ranks, layout) in any_layout()) {
        let plan = ChunkPlan::new(n, ranks, &layout).unwrap();
        let want = assigned(n, ranks, &layout);
        for (r, rows) in want.iter().enumerate() {
            prop_assert_eq!(plan.tokens(r), rows.as_slice(), "rank {} of {:?}: claimed rows vs assigned rows", r, layout);
        }
        prop_assert_eq!(plan.max_tokens(), want.iter().map(Vec::len).max().unwrap_or(0));
        let schedule = dense_ring(&plan);
        for (s, step) in schedule.forward.iter().enumerate().take(ranks) {
            let computed = computes(step);
            for (r, rows) in want.iter().enumerate() {
                let src = (r + ranks - s) % ranks;
                let mine: Vec<_> = computed.iter().filter(|c| c.0 == r).collect();
                if rows.is_empty() || want[src].is_empty() {
                    prop_assert!(mine.is_empty(), "step {}: rank {} computes with an empty piece", s, r);
                    continue;
                }
                prop_assert_eq!(mine.len(), 1, "step {}: rank {} computes once", s, r);
                prop_assert_eq!(mine[0].1, rows.as_slice(), "step {}: query rows of rank {}", s, r);
                prop_assert_eq!(mine[0].2, want[src].as_slice(), "step {}: key rows rank {} uses from rank {}", s, r, src);
            }
            for (r, _) in want.iter().enumerate().filter(|_| s > 0) {
                let src = (r + ranks - s) % ranks;
                let arriving: Vec<&[usize]> = step
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        Op::Send { to, tokens, .. } if *to == r => Some(tokens.as_slice()),
                        _ => None,
                    })
                    .collect();
                let expected: Vec<&[usize]> = if want[src].is_empty() { vec![] } else { vec![want[src].as_slice()] };
                prop_assert_eq!(arriving, expected, "step {}: the key block arriving at rank {} from rank {}", s, r, src);
            }
        }
    }

    /// (c) Every key a rank attends is received: for every query `q` on rank `r`, head `h`
    /// and key `k` with a nonzero multiplicity (the support masks, causality and padding
    /// applied by `spec_counts`), `k` is `r`'s own or in `need(r, owner(k), h)` and sent
    /// to `r` in both passes, and the pair is computed in both passes. Every layout, empty
    /// ranks, dense, window, block-sparse and LongNet with every offset rule and short
    /// last segments.
    #[test]
    fn every_attended_key_is_received(case in any_plan_case()) {
        check_received(&case)?;
    }

    /// (c) for LongNet's short last segment: `n = q w + s` (`2 <= s < w`), the segment
    /// `[q w, n)` split over two ranks; every key of it that a query of another rank
    /// attends is in that rank's need and sent (head 0 always has such a pair, which the
    /// test checks it saw).
    #[test]
    fn short_last_segment_keys_are_received((case, start) in short_last_segment_case()) {
        let cross = check_received(&case)?;
        prop_assert!(
            cross.iter().any(|&(q, k)| q >= start && k >= start),
            "no cross-rank pair in the short last segment [{}, {}) was checked", start, case.n
        );
    }

    /// (d) Minimality, as `comm_plan.rs` claims it ("a row is sent to `r` for head `h` only
    /// if some query of `r` sees it in head `h`"), against the independent masks: every
    /// key in `need(d, s, h)` and every K/V row the plan sends `d` (forward and backward)
    /// is attended in head `h` by some query the layout puts on `d`, in some batch row
    /// (rows ship for the whole batch: the union over batch rows counts), and is owned
    /// by the source.
    #[test]
    fn nothing_is_sent_that_no_query_attends(case in any_plan_case()) {
        let want = assigned(case.n, case.ranks, &case.layout);
        let owner = owners(&want, case.n);
        let counts = case.attended();
        let seen = |d: usize, h: usize, k: usize| {
            want[d].iter().any(|&q| (0..case.batch).any(|b| counts[[b, h, q, k]] > 0))
        };
        let view = PlanView::new(&case);
        for d in 0..case.ranks {
            for s in 0..case.ranks {
                for h in 0..case.heads {
                    for &k in view.needs.keys(d, s, h) {
                        prop_assert_eq!(owner[k], s, "need({}, {}, head {}) holds key {} of another rank", d, s, h, k);
                        prop_assert!(seen(d, h, k), "need({}, {}, head {}) holds key {}, which no query of {} attends", d, s, h, k, d);
                    }
                }
            }
        }
        for (phase, name) in [(0, "forward"), (1, "backward")] {
            for &(to, h, k) in &view.received[phase] {
                prop_assert!(owner[k] != to, "{}: rank {} is sent its own key {}", name, to, k);
                prop_assert!(seen(to, h, k), "{}: key {} (head {}) sent to rank {}, where no query attends it", name, k, h, to);
            }
        }
    }
}

/// The short last segment worked by hand: LongNet `(8, 2)` over 11 tokens, cut at 9. The
/// last segment is `[8, 11)` (3 tokens); head 0 keeps 8 and 10, so rank 1 (9..11) needs
/// key 8 of rank 0 and rank 0 (0..9) needs key 10 of rank 1; head 1 keeps only 9, which
/// is rank 1's own. Full segment `[0, 8)` lies in rank 0: nothing else crosses.
#[test]
fn short_last_segment_example() {
    let spec = Spec::new(Dilated::longnet(&[(8, 2)]));
    let plan = ChunkPlan::new(11, 2, &Layout::Boundaries(vec![0, 9, 11])).unwrap();
    let needs = Needs::new(&spec, &plan, 2).unwrap();
    assert_eq!(needs.keys(1, 0, 0), &[8]);
    assert_eq!(needs.keys(0, 1, 0), &[10]);
    assert_eq!((needs.keys(1, 0, 1), needs.keys(0, 1, 1)), (&[] as &[usize], &[] as &[usize]));
}

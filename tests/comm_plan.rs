//! Proofs of the pattern-aware communication plan (issue 3): it never misses a needed
//! row and never sends an unused one; dilated branches cost 1/r of a dense ring, and
//! nothing when their segments fit inside a rank; every schedule's measured volume
//! matches the formula in its docs; snapshots of small plans.

use proptest::prelude::*;
use ringdil_proofs::{any_case, assert_schedule_exact, config, on_ranks, spec_counts};
use ringdil_reference::Spec;
use ringdil_reference::pattern::{Dilated, SlidingWindow};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::ring::{
    ChunkPlan, Layout, Op, Report, Schedule, Tensor, all_gather, even_boundaries, pattern_ring, ring, simulate, ulysses,
};
use std::collections::HashMap;

/// Forward and backward simulation of `schedule` on random tensors `[batch, n, heads, dim]`.
///
/// Every measurement also checks that the volume read off the schedule's `Send`
/// operations alone (what `ringdil plan` prints for long sequences) is what the replay
/// actually moved.
fn measure(schedule: &Schedule, spec: &Spec, batch: usize, dim: usize) -> Report {
    let shape = [batch, schedule.chunks.seq_len, schedule.heads, dim];
    let (q, k, v, g) =
        (normal_tensor(shape, 1), normal_tensor(shape, 2), normal_tensor(shape, 3), normal_tensor(shape, 4));
    let report = simulate(schedule, spec, q.view(), k.view(), v.view(), Some(g.view())).unwrap().2;
    let [forward, backward] = schedule.sent_elements(batch, dim, dim);
    assert_eq!(
        (&forward, &backward),
        (&report.forward_sent, &report.backward_sent),
        "static volume != measured volume"
    );
    report
}

/// Elements sent by each rank over a phase.
fn per_rank(sent: &[Vec<usize>], ranks: usize) -> Vec<usize> {
    (0..ranks).map(|r| sent.iter().map(|step| step[r]).sum()).collect()
}

proptest! {
    #![proptest_config(config(128))]

    /// For random cases, ranks and layouts: every key row the plan ships (`src -> dst`,
    /// head `h`) is seen by some query of `dst` in head `h` (minimal), every allowed
    /// cross-rank pair's key reaches its query's rank exactly once (complete), the
    /// backward returns exactly those rows' dK, dV to their owner, and the replay equals
    /// single-device attention forward and backward.
    #[test]
    fn plan_is_complete_minimal_and_exact(
        (case, ranks, layout) in on_ranks(any_case(29), |c| c.n, 8)
    ) {
        let plan = ChunkPlan::new(case.n, ranks, &layout).unwrap();
        let schedule = pattern_ring(&plan, &case.spec, case.heads).unwrap();
        let counts = spec_counts(&case.spec, &case.pattern_counts(), case.batch);
        let allowed = |h: usize, q: usize, k: usize| (0..case.batch).any(|b| counts[[b, h, q, k]] > 0);
        let owner = plan.token_map().rank;
        let mut received: HashMap<(usize, usize, usize), usize> = HashMap::new();
        let mut returned: HashMap<(usize, usize, usize), usize> = HashMap::new();
        for (phase, steps) in [(0, &schedule.forward), (1, &schedule.backward)] {
            for op in steps.iter().flat_map(|s| &s.ops) {
                let Op::Send { from, to, tensors, heads, tokens } = op else { continue };
                for h in heads.clone() {
                    for &k in tokens {
                        if tensors == &[Tensor::K, Tensor::V] {
                            prop_assert_eq!(owner[k], *from);
                            prop_assert!(plan.tokens(*to).iter().any(|&q| allowed(h, q, k)), "row {k} head {h} sent to {to} unused");
                            *received.entry((phase, *to, h * case.n + k)).or_default() += 1;
                        } else {
                            prop_assert_eq!(tensors, &vec![Tensor::DK, Tensor::DV]);
                            prop_assert_eq!(owner[k], *to);
                            *returned.entry((phase, *from, h * case.n + k)).or_default() += 1;
                        }
                    }
                }
            }
        }
        prop_assert!(received.values().all(|&c| c == 1), "a row was sent twice");
        let backward_received: HashMap<_, _> = received.iter().filter(|(k, _)| k.0 == 1).map(|(k, v)| (*k, *v)).collect();
        prop_assert_eq!(&returned, &backward_received);
        for h in 0..case.heads {
            for q in 0..case.n {
                for k in (0..case.n).filter(|&k| owner[k] != owner[q] && allowed(h, q, k)) {
                    for phase in 0..2 {
                        prop_assert!(received.contains_key(&(phase, owner[q], h * case.n + k)), "key {k} head {h} never reaches rank {}", owner[q]);
                    }
                }
            }
        }
        assert_schedule_exact(&case, &schedule, 1e-12)?;
    }

    /// One dilated branch whose segment spans every rank: head `h` needs only the kept
    /// positions `a + o(h) + t r`, so the plan moves `1/r` of the dense ring's rows, up to
    /// one row of rounding per (destination, source, head).
    #[test]
    fn dilated_plan_moves_one_over_r(ranks in 2..=6usize, r in 1..=6usize, extra in 0..40usize, causal in any::<bool>()) {
        let (batch, dim, heads) = (1, 2, r);
        let n = ranks * r + extra;
        let spec = Spec::new(Dilated::longnet(&[(n, r)])).causal(causal);
        let plan = ChunkPlan::new(n, ranks, &Layout::Contiguous).unwrap();
        let dense = measure(&ring(&plan, &spec, heads).unwrap(), &spec, batch, dim).forward_total();
        let sparse = measure(&pattern_ring(&plan, &spec, heads).unwrap(), &spec, batch, dim).forward_total();
        if causal {
            // Causal: the plan may drop whole blocks too, so only the upper bound holds.
            prop_assert!(sparse * r <= dense + r * 2 * batch * dim * heads * ranks * ranks);
        } else {
            let slack = 2 * batch * dim * heads * ranks * (ranks - 1);
            prop_assert!((sparse * r).abs_diff(dense) <= r * slack, "sparse {sparse} * r {r} vs dense {dense}");
        }
    }

    /// LongNet branches whose segments never cross a rank boundary (`w` divides the
    /// tokens per rank) need no communication at all, forward or backward.
    #[test]
    fn segments_inside_ranks_send_nothing(
        ranks in 1..=6usize,
        (per_rank, branches) in (1..=12usize).prop_flat_map(|m| {
            let divisors: Vec<usize> = (1..=m).filter(|w| m % w == 0).collect();
            let branch = prop::sample::select(divisors).prop_flat_map(|w| (Just(w), 1..=w));
            (Just(m), prop::collection::vec(branch, 1..=3))
        }),
        causal in any::<bool>(),
    ) {
        let n = ranks * per_rank;
        let spec = Spec::new(Dilated::longnet(&branches)).causal(causal);
        let plan = ChunkPlan::new(n, ranks, &Layout::Contiguous).unwrap();
        let schedule = pattern_ring(&plan, &spec, 3).unwrap();
        let report = measure(&schedule, &spec, 1, 2);
        prop_assert_eq!((report.forward_total(), report.backward_total()), (0, 0));
        // Only step 0 (each rank on its own keys) does anything.
        prop_assert!(schedule.forward[1..].iter().chain(&schedule.backward[1..]).all(|s| s.ops.is_empty()));
    }

    /// The volume formulas of `docs/schedules.md` (and each module's docs), per rank, for
    /// any boundaries: ring, all-gather and Ulysses.
    #[test]
    fn measured_volume_matches_formulas(
        (n, ranks, cuts) in (1..=24usize, 1..=6usize).prop_flat_map(|(n, p)| (Just(n), Just(p), ringdil_proofs::boundaries(n, p))),
        heads in 1..=5usize,
    ) {
        let (b, d) = (2, 3);
        let plan = ChunkPlan::new(n, ranks, &Layout::Boundaries(cuts)).unwrap();
        let spec = Spec::dense();
        let sizes: Vec<usize> = (0..ranks).map(|r| plan.tokens(r).len()).collect();
        let next = |r: usize| sizes[(r + 1) % ranks];
        let (bhd, p) = (b * heads * d, ranks);
        let ring_report = measure(&ring(&plan, &spec, heads).unwrap(), &spec, b, d);
        let gather_report = measure(&all_gather(&plan, heads), &spec, b, d);
        let ulysses_report = measure(&ulysses(&plan, heads), &spec, b, d);
        let split = even_boundaries(heads, p);
        for r in 0..p {
            let hr = split[r + 1] - split[r];
            let last_hop = if p > 1 { 2 * bhd * next(r) } else { 0 };
            prop_assert_eq!(per_rank(&ring_report.forward_sent, p)[r], 2 * bhd * (n - next(r)));
            prop_assert_eq!(per_rank(&ring_report.backward_sent, p)[r], 4 * bhd * (n - next(r)) + last_hop);
            prop_assert_eq!(per_rank(&gather_report.forward_sent, p)[r], 2 * bhd * sizes[r] * (p - 1));
            prop_assert_eq!(per_rank(&gather_report.backward_sent, p)[r], 2 * bhd * sizes[r] * (p - 1) + 2 * bhd * (n - sizes[r]));
            prop_assert_eq!(
                per_rank(&ulysses_report.forward_sent, p)[r],
                3 * b * d * sizes[r] * (heads - hr) + b * (d + 1) * hr * (n - sizes[r])
            );
            prop_assert_eq!(
                per_rank(&ulysses_report.backward_sent, p)[r],
                b * (5 * d + 1) * sizes[r] * (heads - hr) + 3 * b * d * hr * (n - sizes[r])
            );
        }
    }
}

/// Numbers quoted in `docs/schedules.md`: LongNet `(8,1), (32,2), (96,4)` on 96 tokens
/// over 4 ranks, 4 heads: the plan moves `1/3` of the dense ring's forward volume
/// (the first branch fits in a rank; the second needs 1/2 of the rows its segments reach
/// across a boundary, the third 1/4 of every other rank's rows; per head the union is
/// 96 of the 288 rows a dense ring moves).
#[test]
fn longnet_plan_volume_example() {
    let spec = Spec::new(Dilated::longnet(&[(8, 1), (32, 2), (96, 4)]));
    let plan = ChunkPlan::new(96, 4, &Layout::Contiguous).unwrap();
    let dense = measure(&ring(&plan, &spec, 4).unwrap(), &spec, 1, 2).forward_total();
    let sparse = measure(&pattern_ring(&plan, &spec, 4).unwrap(), &spec, 1, 2).forward_total();
    assert_eq!((dense, sparse), (4 * 3 * 24 * 4 * 2 * 2, 96 * 4 * 2 * 2));
    assert_eq!(sparse * 3, dense);
}

fn contiguous(n: usize, p: usize) -> ChunkPlan {
    ChunkPlan::new(n, p, &Layout::Contiguous).unwrap()
}

#[test]
fn snapshot_layouts() {
    let mut s = String::new();
    for layout in [
        Layout::Contiguous,
        Layout::Zigzag,
        Layout::Striped,
        Layout::Boundaries(vec![0, 0, 7, 10]),
        Layout::Permuted { order: vec![9, 0, 8, 1, 7, 2, 6, 3, 5, 4], boundaries: None },
    ] {
        let plan = ChunkPlan::new(10, 3, &layout).unwrap();
        s.push_str(&format!("{layout:?}\n"));
        for r in 0..3 {
            s.push_str(&format!("  rank {r}: {:?}\n", plan.tokens(r)));
        }
    }
    insta::assert_snapshot!(s);
}

#[test]
fn snapshot_ring_causal_n6_p3() {
    insta::assert_snapshot!(ring(&contiguous(6, 3), &Spec::dense().causal(true), 1).unwrap().to_string());
}

#[test]
fn snapshot_ring_zigzag_causal_n8_p2() {
    let plan = ChunkPlan::new(8, 2, &Layout::Zigzag).unwrap();
    insta::assert_snapshot!(ring(&plan, &Spec::dense().causal(true), 1).unwrap().to_string());
}

#[test]
fn snapshot_pattern_ring_longnet_n8_p2_h2() {
    let spec = Spec::new(Dilated::longnet(&[(4, 1), (8, 2)]));
    insta::assert_snapshot!(pattern_ring(&contiguous(8, 2), &spec, 2).unwrap().to_string());
}

#[test]
fn snapshot_pattern_ring_window_n9_p3() {
    let spec = Spec::new(SlidingWindow { left: 1, right: 0 });
    insta::assert_snapshot!(pattern_ring(&contiguous(9, 3), &spec, 1).unwrap().to_string());
}

#[test]
fn snapshot_all_gather_n4_p2() {
    insta::assert_snapshot!(all_gather(&contiguous(4, 2), 1).to_string());
}

#[test]
fn snapshot_ulysses_n4_p2_h2() {
    insta::assert_snapshot!(ulysses(&contiguous(4, 2), 2).to_string());
}

/// The printed form that users replay: JSON of a small plan.
#[test]
fn snapshot_pattern_ring_json() {
    let spec = Spec::new(SlidingWindow { left: 1, right: 0 });
    insta::assert_json_snapshot!(pattern_ring(&contiguous(4, 2), &spec, 1).unwrap());
}

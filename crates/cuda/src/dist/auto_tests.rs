//! Tests of the auto rule (`super`): each regime, the formula, ties, plans as problems.

use super::*;

/// H200-like numbers: 400 TFLOP/s, 150 GB/s sent per GPU in every shape, 30 us per
/// step, 140 GB.
fn h200() -> Speeds {
    Speeds {
        flops: 400e12,
        link_bytes: 150e9,
        all_to_all_bytes: 150e9,
        all_gather_bytes: 150e9,
        step_overhead: 30e-6,
        exchange_overhead: 30e-6,
        memory: 140e9,
    }
}

fn causal(n: usize) -> Problem {
    Problem {
        batch: 1,
        heads: 8,
        kv_heads: 8,
        head_dim: 128,
        value_dim: 128,
        seq_len: n,
        pair_fraction: 0.5,
        moved_fraction: 1.0,
        hybrid_degree: None,
    }
}

/// Grouped-query attention moves K/V at `kv_heads`: where the multi-head ring waits on
/// its transfers (16K tokens on 8 GPUs: 56 us of K/V per step against 21 us of
/// compute), 8:1 grouping makes the step compute-bound and all-gather 8x cheaper to move.
#[test]
fn grouped_query_attention_moves_kv_heads_only() {
    let (mha, gqa) = (causal(16_384), Problem { kv_heads: 1, ..causal(16_384) });
    let (a, b) = (choose(&mha, 8, &h200()), choose(&gqa, 8, &h200()));
    let p = 8.0;
    let compute = 4.0 * 8.0 * 128.0 * 16_384f64.powi(2) * 0.5 / (p * p * 400e12);
    let transfer = |kv: f64| 4.0 * kv * 128.0 * (16_384.0 / p) / 150e9;
    assert!(transfer(8.0) > compute && transfer(1.0) < compute);
    assert!((a.ring_s.unwrap() - (p * transfer(8.0) + p * 30e-6)).abs() < 1e-12, "{a:?}");
    assert!((b.ring_s.unwrap() - (p * compute + p * 30e-6)).abs() < 1e-12, "{b:?}");
    let moved = |d: Decision| d.gather_s.unwrap() - p * compute - 30e-6;
    assert!((moved(a) / moved(b) - 8.0).abs() < 1e-9);
}

#[test]
fn short_sequences_stay_on_one_gpu() {
    for n in [256, 1024, 4096] {
        let d = choose(&causal(n), 2, &h200());
        assert_eq!(d.choice, Choice::Single, "n {n}: {d:?}");
    }
}

#[test]
fn long_compute_bound_sequences_use_the_ring() {
    let d = choose(&causal(131_072), 2, &h200());
    assert_eq!(d.choice, Choice::Ring, "{d:?}");
    assert!(d.ring_s.unwrap() < 0.6 * d.single_s.unwrap());
}

#[test]
fn one_rank_is_always_single() {
    assert_eq!(choose(&causal(1 << 20), 1, &h200()).choice, Choice::Single);
}

#[test]
fn too_long_for_one_gpu_is_distributed_even_if_slower_per_flop() {
    let mut s = h200();
    s.memory = 1e9;
    let d = choose(&causal(1 << 20), 8, &s);
    assert_eq!(d.single_s, None);
    assert_eq!(d.gather_s, None, "all-gather holds all K/V: does not fit either");
    assert_eq!(d.ulysses_s, None, "Ulysses holds the whole sequence at 1 head of 8: does not fit either");
    assert_eq!(d.choice, Choice::Ring);
}

#[test]
fn a_sparse_pattern_with_many_ranks_prefers_all_gather_when_steps_are_costly() {
    // Very sparse (f tiny) and too big for one GPU's memory (671 MB > 500 MB; the
    // gather needs 352 MB): per-step compute is negligible, 8 step overheads dominate
    // the ring, one gather is cheaper (and cheaper than Ulysses' two exchanges, at the
    // same 2 ms per collective).
    let p = Problem { pair_fraction: 1e-3, moved_fraction: 1.0, ..causal(65_536) };
    let mut s = h200();
    s.step_overhead = 2e-3;
    s.exchange_overhead = 2e-3;
    s.memory = 500e6;
    let d = choose(&p, 8, &s);
    assert_eq!(d.choice, Choice::AllGather, "{d:?}");
}

#[test]
fn the_rule_follows_its_formula() {
    let s = h200();
    let p = causal(65_536);
    let d = choose(&p, 4, &s);
    let w = 4.0 * 8.0 * 128.0 * 65_536f64.powi(2) * 0.5;
    assert!((d.single_s.unwrap() - w / s.flops).abs() < 1e-12);
    let step = (w / (16.0 * s.flops)).max(4.0 * 8.0 * 128.0 * 16_384.0 / s.link_bytes);
    assert!((d.ring_s.unwrap() - (4.0 * step + 4.0 * s.step_overhead)).abs() < 1e-12);
}

/// MLA's q / k at 192 and v at 128: the forward's two products and the K/V bytes are
/// priced at their own widths, and Ulysses' exchange moves Q, K rows of 192 and V, output
/// rows of 128 (written out here for multi-head attention, where every other rank's K/V
/// heads are `H - |H_p|`).
#[test]
fn mla_is_priced_at_each_tensors_width() {
    let s = h200();
    let p = Problem { head_dim: 192, value_dim: 128, ..causal(65_536) };
    let d = choose(&p, 4, &s);
    let n = 65_536f64;
    // Q K^T: 2 n^2 d, P V: 2 n^2 d_v per head, halved by causality.
    let w = 8.0 * 2.0 * (192.0 + 128.0) * n * n * 0.5;
    assert!((d.single_s.unwrap() - w / s.flops).abs() < 1e-12);
    // A ring hop sends K (192) and V (128) of n / 4 tokens at 8 heads, 2 bytes each.
    let step = (w / (16.0 * s.flops)).max(2.0 * 8.0 * (192.0 + 128.0) * (n / 4.0) / s.link_bytes);
    assert!((d.ring_s.unwrap() - (4.0 * step + 4.0 * s.step_overhead)).abs() < 1e-12);
    // Ulysses, 2 of the 8 heads per rank: out go Q, K, V of its n / 4 tokens at the other
    // 6 heads, back come output and LSE of its 2 heads over the other 3n / 4 tokens.
    let (np, others, mine) = (n / 4.0, 6.0, 2.0);
    let elements = np * others * (192.0 + 192.0 + 128.0) + (128.0 + 1.0) * mine * (n - np);
    assert!((p.ulysses(4).sent_bytes - 2.0 * elements).abs() < 1e-6);
    // Equal widths price as before.
    let same = Problem { head_dim: 160, value_dim: 160, ..causal(65_536) };
    let w160 = 4.0 * 8.0 * 160.0 * n * n * 0.5;
    assert!((choose(&same, 4, &s).single_s.unwrap() - w160 / s.flops).abs() < 1e-12);
    assert_eq!(w160, w, "(192 + 128) / 2 = 160: the same work");
}

/// The 4-GPU H200 run's figures (`docs/benchmarks/ring-bench-4gpu-h200.md`: 260
/// TFLOP/s, 64.9 GB/s ring hop): priced at the ring hop's speed, all-gather won at 16K
/// and measured 2.03 ms against the ring's 1.58-1.70. With the step overhead the
/// ring's measured 1.70 ms implies (0.17 ms; that run charged 0.30, the whole 8K
/// forward over P) all-gather still predicts 1.47 ms at 64.9 GB/s; at the ~42 GB/s a
/// 4-way all-gather sends per GPU (what its 2.03 ms implies) the ring is in front.
#[test]
fn all_gather_is_priced_at_the_all_gather_speed() {
    let at = |gather: f64| Speeds {
        flops: 260e12,
        link_bytes: 64.9e9,
        all_to_all_bytes: 1e9,
        all_gather_bytes: gather,
        step_overhead: 0.17e-3,
        exchange_overhead: 0.17e-3,
        memory: 140e9,
    };
    let (p, n) = (4.0, 16_384.0);
    let (old, new) = (choose(&causal(16_384), 4, &at(64.9e9)), choose(&causal(16_384), 4, &at(42e9)));
    assert_eq!(old.choice, Choice::AllGather, "{old:?}");
    assert_eq!(new.choice, Choice::Ring, "{new:?}");
    assert_eq!(old.ring_s, new.ring_s);
    let sent = 4.0 * 8.0 * 128.0 * (n / p) * (p - 1.0);
    let w = 4.0 * 8.0 * 128.0 * n * n * 0.5;
    assert!((new.gather_s.unwrap() - (sent / 42e9 + w / (p * 260e12) + 0.17e-3)).abs() < 1e-12, "{new:?}");
    assert!((new.ring_s.unwrap() - 1.70e-3).abs() < 0.02e-3, "{new:?}");
}

/// 32 heads, 4K tokens per GPU on 8 GPUs, 100 us per step: every ring step waits on
/// a 67 MB transfer (447 us against 344 us of compute) and pays its overhead 8 times;
/// Ulysses sends 117 MB once (783 us) and computes 4 of the 32 heads over the whole
/// sequence (the same 2.75 ms as the ring's 8 steps).
#[test]
fn ulysses_wins_with_many_heads_where_ring_steps_cost() {
    let mut s = h200();
    s.step_overhead = 100e-6;
    let pr = Problem { heads: 32, kv_heads: 32, ..causal(32_768) };
    let d = choose(&pr, 8, &s);
    assert_eq!(d.choice, Choice::Ulysses, "{d:?}");
    assert!(d.ulysses_s.unwrap() < 0.9 * d.ring_s.unwrap(), "{d:?}");
    // The same problem at 64K tokens per GPU: the ring hides its transfers behind
    // longer steps and pays 8 overheads on 50x the work; Ulysses still moves
    // everything once, unhidden.
    let long = choose(&Problem { seq_len: 524_288, ..pr }, 8, &s);
    assert_eq!(long.choice, Choice::Ring, "{long:?}");
    // Ulysses pays its exchange cost twice: at 1 ms each (gathers and scatters of many
    // small pieces) it loses the short problem it won, by exactly that difference.
    let costly = choose(&pr, 8, &Speeds { exchange_overhead: 1e-3, ..s });
    assert_ne!(costly.choice, Choice::Ulysses, "{costly:?}");
    let gap = costly.ulysses_s.unwrap() - d.ulysses_s.unwrap();
    assert!((gap - 2.0 * (1e-3 - s.exchange_overhead)).abs() < 1e-12, "{gap}");
}

/// 4 heads on 8 GPUs: half the ranks get no head, the busiest computes a quarter of
/// the work over the whole sequence (W / (H F) instead of W / (P F)), so the ring beats
/// Ulysses on the problem Ulysses wins with 32 heads (at 30 us per step); the hybrid
/// (groups of 4, every rank busy, 2 ring steps) beats both.
#[test]
fn ulysses_loses_with_fewer_heads_than_gpus() {
    let pr = Problem { heads: 4, kv_heads: 4, ..causal(32_768) };
    let u = pr.ulysses(8);
    assert_eq!(u.busiest_heads, 1);
    let d = choose(&pr, 8, &h200());
    assert!(d.ring_s.unwrap() < d.ulysses_s.unwrap(), "{d:?}");
    assert_eq!(d.choice, Choice::Hybrid, "{d:?}");
    let w = 4.0 * 4.0 * 128.0 * 32_768f64.powi(2) * 0.5;
    assert!((d.ulysses_s.unwrap() - (u.sent_bytes / 150e9 + w / (4.0 * 400e12) + 60e-6)).abs() < 1e-12);
}

/// `V_a2a` as the module docs write it, multi-head and 8:1 grouped-query (each rank's
/// 2 query heads read the one K/V head, which is replicated to every rank), and the
/// Ulysses time built from it.
#[test]
fn the_ulysses_term_follows_its_formula() {
    let (b, d, n, p) = (1.0, 128.0, 65_536.0, 4.0);
    let per = n / p;
    let mha = causal(65_536).ulysses(4);
    let want = 2.0 * (3.0 * b * d * per * (8.0 - 2.0) + b * (d + 1.0) * 2.0 * (n - per));
    assert!((mha.sent_bytes - want).abs() < 1e-6, "{mha:?} vs {want}");
    assert_eq!(mha.busiest_heads, 2);
    assert!((mha.memory_bytes - b * d * (n * 20.0 + 10.0 * 8.0 * per)).abs() < 1e-6, "{mha:?}");
    let gqa = Problem { kv_heads: 1, ..causal(65_536) }.ulysses(4);
    let want = 2.0 * (b * d * per * 6.0 + 2.0 * b * d * per * 3.0 + b * (d + 1.0) * 2.0 * (n - per));
    assert!((gqa.sent_bytes - want).abs() < 1e-6, "{gqa:?} vs {want}");
    assert!((gqa.memory_bytes - b * d * (n * 16.0 + 10.0 * 8.0 * per)).abs() < 1e-6, "{gqa:?}");
    // 8 heads on 3 ranks: 3, 3, 2; the busiest rank computes 3 of 8 heads.
    let three = causal(65_536).ulysses(3);
    assert_eq!(three.busiest_heads, 3);
    let s = h200();
    let dec = choose(&causal(65_536), 4, &s);
    let w = 4.0 * 8.0 * 128.0 * n * n * 0.5;
    let t = mha.sent_bytes / s.all_to_all_bytes + w / (p * s.flops) + 2.0 * s.exchange_overhead;
    assert!((dec.ulysses_s.unwrap() - t).abs() < 1e-12, "{dec:?} vs {t}");
}

/// Equal predictions go to the simpler schedule: single, ring, all-gather, Ulysses, hybrid.
#[test]
fn ties_go_to_the_simpler_schedule() {
    use Choice::*;
    let (t, two) = (Some(1.0), Some(2.0));
    assert_eq!(fastest([(Single, t), (Ring, t), (AllGather, t), (Ulysses, t), (Hybrid, t)]), Single);
    assert_eq!(fastest([(Single, None), (Ring, t), (AllGather, t), (Ulysses, t), (Hybrid, t)]), Ring);
    assert_eq!(fastest([(Single, two), (Ring, two), (AllGather, t), (Ulysses, t), (Hybrid, t)]), AllGather);
    assert_eq!(fastest([(Single, None), (Ring, two), (AllGather, None), (Ulysses, t), (Hybrid, t)]), Ulysses);
    assert_eq!(fastest([(Single, None), (Ring, two), (AllGather, None), (Ulysses, two), (Hybrid, t)]), Hybrid);
}

/// The hybrid term's ends: one rank per group is the dense ring (no exchange, `P` steps
/// over `n` tokens), all ranks in one group is Ulysses plus one step's overhead; grouped-
/// query heads change both the same way.
#[test]
fn the_hybrid_term_spans_the_ring_and_ulysses() {
    let s = h200();
    for pr in [causal(65_536), Problem { kv_heads: 1, ..causal(65_536) }] {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
        let ring = choose(&Problem { hybrid_degree: Some(1), ..pr }, 4, &s);
        assert!(close(ring.hybrid_s.unwrap(), ring.ring_s.unwrap()), "{ring:?}");
        let all = choose(&Problem { hybrid_degree: Some(4), ..pr }, 4, &s);
        assert!(close(all.hybrid_s.unwrap(), all.ulysses_s.unwrap() + s.step_overhead), "{all:?}");
        // The reference's rule by default: 4 ranks, 8 heads -> one group of 4.
        assert_eq!(pr.hybrid(4).unwrap().degree, 4);
        // A degree that does not divide the ranks, or exceeds the heads, has no term.
        for degree in [3, 16] {
            assert_eq!(choose(&Problem { hybrid_degree: Some(degree), ..pr }, 4, &s).hybrid_s, None);
        }
    }
}

/// 4 heads on 8 GPUs, 100 us per step: Ulysses leaves half the ranks idle (each busy one
/// computes a quarter of the heads over the whole sequence) and the ring pays 8 steps'
/// overhead; groups of 4 keep every rank busy over 2 ring steps, and win.
#[test]
fn the_hybrid_wins_with_fewer_heads_than_gpus_where_steps_cost() {
    let mut s = h200();
    s.step_overhead = 100e-6;
    let pr = Problem { heads: 4, kv_heads: 4, ..causal(65_536) };
    let d = choose(&pr, 8, &s);
    assert_eq!(pr.hybrid(8).unwrap().degree, 4);
    assert_eq!(d.choice, Choice::Hybrid, "{d:?}");
    assert!(d.hybrid_s.unwrap() < d.ring_s.unwrap() && d.hybrid_s.unwrap() < d.ulysses_s.unwrap(), "{d:?}");
}

fn plan(n: usize, p: usize, spec: crate::spec::GpuSpec, layout: ringdil_reference::ring::Layout) -> DistPlan {
    let chunks = ringdil_reference::ring::ChunkPlan::new(n, p, &layout).unwrap();
    DistPlan::new(chunks, spec, 1, 8, 128).unwrap()
}

#[test]
fn a_plan_becomes_its_problem() {
    use crate::spec::{GpuPattern, GpuSpec};
    use ringdil_reference::pattern::Dilated;
    use ringdil_reference::ring::Layout;
    let causal =
        Problem::of_plan(&plan(4096, 2, GpuSpec::new(GpuPattern::Dense).causal(true), Layout::Zigzag)).unwrap();
    // 32 query tiles of 128 see 2, 4, ..., 64 key tiles of 64: 1056 of 32 * 64.
    assert!((causal.pair_fraction - 1056.0 / 2048.0).abs() < 1e-12, "{causal:?}");
    // Zigzag causal: rank 0's late piece needs all of rank 1, rank 1 needs rank 0's early piece.
    assert!(causal.moved_fraction > 0.7 && causal.moved_fraction < 1.0, "{causal:?}");
    let dense = Problem::of_plan(&plan(4096, 2, GpuSpec::new(GpuPattern::Dense), Layout::Contiguous)).unwrap();
    assert_eq!((dense.pair_fraction, dense.moved_fraction), (1.0, 1.0));
    // LongNet segments inside each rank: a fraction of the work, nothing moves.
    let d = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(512, 1), (2048, 4)])));
    let local = Problem::of_plan(&plan(4096, 2, d, Layout::Contiguous)).unwrap();
    assert_eq!(local.moved_fraction, 0.0);
    let share = (512.0 + 2048.0 / 16.0) / 4096.0;
    assert!(local.pair_fraction < 1.5 * share, "{local:?} vs share {share}");
}

/// Packed documents (per batch row) that never cross the rank split: the problem of a
/// two-row plan is the rows' mean tile fraction, and nothing moves. A causal document
/// of `L` tokens visits `2 + 4 + ... + 2 L / 128` tiles of 128 x 64: row 0's four
/// documents of 1024 tokens 4 x 72, row 1's two of 2048 2 x 272, of 32 x 64 tiles.
#[test]
fn a_packed_plan_becomes_its_problem() {
    use crate::spec::{GpuPattern, GpuSpec};
    use ringdil_reference::Documents;
    use ringdil_reference::ring::{ChunkPlan, Layout};
    let docs = Documents::per_row(vec![vec![0, 1024, 2048, 3072, 4096], vec![0, 2048, 4096]]);
    let spec = GpuSpec::new(GpuPattern::Dense).causal(true).documents(docs);
    let chunks = ChunkPlan::new(4096, 2, &Layout::Contiguous).unwrap();
    let packed = Problem::of_plan(&DistPlan::new(chunks, spec, 2, 8, 128).unwrap()).unwrap();
    let tiles = |docs: usize, len: usize| docs * (1..=len / 128).map(|t| 2 * t).sum::<usize>();
    assert_eq!((tiles(4, 1024), tiles(2, 2048)), (4 * 72, 2 * 272));
    let want = (tiles(4, 1024) + tiles(2, 2048)) as f64 / 2.0 / 2048.0;
    assert!((packed.pair_fraction - want).abs() < 1e-12, "{packed:?} vs {want}");
    assert_eq!(packed.moved_fraction, 0.0);
}

#[test]
fn selection_maps_choices_to_schedules() {
    use crate::spec::{GpuPattern, GpuSpec};
    use ringdil_reference::ring::Layout;
    let s = h200();
    let short = plan(1024, 2, GpuSpec::new(GpuPattern::Dense).causal(true), Layout::Zigzag);
    assert_eq!(select(&short, &s).unwrap().1, Selected::Single);
    let long = plan(131_072, 2, GpuSpec::new(GpuPattern::Dense), Layout::Contiguous);
    assert_eq!(select(&long, &s).unwrap().1, Selected::Distributed(Kind::Ring));
    let causal = plan(131_072, 2, GpuSpec::new(GpuPattern::Dense).causal(true), Layout::Contiguous);
    // Contiguous causal: rank 0 needs nothing from rank 1, so the pattern-aware ring moves half.
    assert_eq!(select(&causal, &s).unwrap().1, Selected::Distributed(Kind::PatternRing));
    // 32 heads, 4K tokens per GPU on 8 GPUs at 200 us per step (see
    // `ulysses_wins_with_many_heads_where_ring_steps_cost`; the pattern-aware ring
    // moves less than the dense ring there, so its steps must cost more here).
    let chunks = ringdil_reference::ring::ChunkPlan::new(32_768, 8, &Layout::Zigzag).unwrap();
    let heads = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense).causal(true), 1, 32, 128).unwrap();
    let slow = Speeds { step_overhead: 200e-6, ..s };
    let (d, sel) = select(&heads, &slow).unwrap();
    assert_eq!(sel, Selected::Distributed(Kind::Ulysses), "{d:?}");
    // Every rank decides from the same broadcast numbers: the same decision.
    let shared = Speeds::from_slice(&slow.to_vec()).unwrap();
    assert_eq!(select(&heads, &shared).unwrap(), (d, sel));
    // 4 heads on 8 GPUs at 100 us per step, the plan's hybrid in groups of 4: the hybrid.
    let chunks = ringdil_reference::ring::ChunkPlan::new(65_536, 8, &Layout::Zigzag).unwrap();
    let few = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense).causal(true), 1, 4, 128)
        .unwrap()
        .with_hybrid_degree(4)
        .unwrap();
    let (d, sel) = select(&few, &Speeds { step_overhead: 100e-6, ..s }).unwrap();
    assert_eq!(sel, Selected::Distributed(Kind::Hybrid), "{d:?}");
}

#[test]
fn speeds_round_trip_through_a_vector() {
    let s = Speeds { all_to_all_bytes: 90e9, all_gather_bytes: 40e9, ..h200() };
    assert_eq!(s.to_vec().len(), Speeds::LEN);
    assert_eq!(Speeds::from_slice(&s.to_vec()), Some(s));
    assert_eq!(Speeds::from_slice(&[1.0]), None);
    assert_eq!(Speeds::from_slice(&[1.0; 4]), None, "the four numbers of an old layout");
    assert_eq!(Speeds::from_slice(&[1.0; 6]), None, "the six numbers of an old layout");
    let v = s.to_vec();
    assert_eq!((v[4], v[5]), (s.step_overhead, s.exchange_overhead), "both overheads, in order");
}

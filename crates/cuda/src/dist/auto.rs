//! The automatic choice between one GPU, the ring and all-gather: a pure function of
//! the problem and of *measured* speeds, so it is tested without a GPU and the numbers
//! behind each decision are printed.
//!
//! # The rule
//! With `W = 4 B H d N^2 f` forward FLOPs (`f`: fraction of (query, key) pairs the
//! pattern allows, ~1/2 causal), `H_kv` the K/V heads (`H` unless grouped-query: K and V
//! are what moves), `F` one GPU's attention FLOP/s, `L` the per-GPU link
//! bandwidth (bytes/s), `o` the fixed cost of one ring step (launches, NCCL latency),
//! `m` the fraction of the dense ring's K/V bytes that the pattern-aware plan moves and
//! `M` the per-GPU memory:
//!
//! ```text
//!   t_single = W / F                                       if B N H d * 10 bytes <= M
//!   t_ring   = P * max(W / (P^2 F), m * 4 B H_kv d (N/P) / L) + P * o
//!   t_gather = 4 B H_kv d N (P-1)/P / L + W / (P F) + o    if (B H_kv d N * 4 + B H d (N/P) * 10) bytes <= M
//! ```
//! (bf16 K+V are 4 bytes per element pair; Q, K, V, O, dO-free forward memory is
//! `10` bytes per element: three bf16 inputs and the f32 output.) The ring assumes a
//! balanced layout (zigzag for causal) so that every step costs `W / P^2`, and full
//! overlap (the step costs the larger of compute and transfer). The choice is the
//! smallest predicted time; on a tie the simpler schedule wins (single, then ring, then
//! all-gather), so a short sequence, where `P o` dominates, never pays ring overhead.
//!
//! # At run time
//! [`select`] turns a [`DistPlan`] into a [`Problem`] ([`Problem::of_plan`]: `f` is the
//! work the kernels really do, the tiles of the whole-sequence launches relative to
//! dense; `m` is the pattern-aware plan's volume relative to the dense ring's) and the
//! decision into what to run ([`Selected`]): one GPU, the pattern-aware ring when it
//! moves less than the dense ring, else the dense ring, or all-gather. Every rank must
//! take the same decision, so the speeds are rank 0's, shared with
//! [`Communicator::broadcast_f64`](super::Communicator::broadcast_f64) (see
//! [`Speeds::to_vec`]); `ring_bench` measures them and checks the choice against the
//! measured times of all three.

use super::error::DistResult;
use super::layout::DistPlan;
use crate::family::{FWD_Q_TILE, TILE};
use crate::launch::launches;
use crate::shape::{Chunk, Shape};
use ringdil_reference::ring::Kind;
use serde::Serialize;

/// Sizes and sparsity of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Problem {
    pub batch: usize,
    pub heads: usize,
    /// K/V heads (`heads` unless grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    pub seq_len: usize,
    /// Fraction of (query, key) pairs the pattern allows.
    pub pair_fraction: f64,
    /// Fraction of the dense ring's K/V volume the pattern-aware plan moves (1 dense).
    pub moved_fraction: f64,
}

/// Measured speeds of the machine (from `ring_bench`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Speeds {
    /// Attention forward FLOP/s of one GPU.
    pub flops: f64,
    /// Bytes per second one GPU sends to its neighbour.
    pub link_bytes: f64,
    /// Seconds of fixed cost per ring step.
    pub step_overhead: f64,
    /// Bytes of memory per GPU.
    pub memory: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    Single,
    Ring,
    AllGather,
}

/// The decision with its predicted times (`None`: does not fit in memory).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Decision {
    pub choice: Choice,
    pub single_s: Option<f64>,
    pub ring_s: Option<f64>,
    pub gather_s: Option<f64>,
}

/// Pick a schedule for `problem` on `ranks` GPUs (see the module docs).
pub fn choose(problem: &Problem, ranks: usize, speeds: &Speeds) -> Decision {
    let (b, h, d, n) = (problem.batch as f64, problem.heads as f64, problem.head_dim as f64, problem.seq_len as f64);
    let p = ranks.max(1) as f64;
    let w = 4.0 * b * h * d * n * n * problem.pair_fraction;
    let (elems, kv) = (b * h * d, b * problem.kv_heads as f64 * d);
    let single_s = (elems * n * 10.0 <= speeds.memory).then(|| w / speeds.flops);
    let (ring_s, gather_s) = if ranks > 1 {
        let step = (w / (p * p * speeds.flops)).max(problem.moved_fraction * 4.0 * kv * (n / p) / speeds.link_bytes);
        let ring = p * step + p * speeds.step_overhead;
        let gather = 4.0 * kv * n * (p - 1.0) / p / speeds.link_bytes + w / (p * speeds.flops) + speeds.step_overhead;
        let gather_fits = kv * n * 4.0 + elems * n / p * 10.0 <= speeds.memory;
        (Some(ring), gather_fits.then_some(gather))
    } else {
        (None, None)
    };
    let mut best = (Choice::Single, single_s.unwrap_or(f64::INFINITY));
    for (c, t) in [(Choice::Ring, ring_s), (Choice::AllGather, gather_s)] {
        if let Some(t) = t
            && t < best.1
        {
            best = (c, t);
        }
    }
    Decision { choice: best.0, single_s, ring_s, gather_s }
}

impl Problem {
    /// The problem `plan` describes (see the module docs). The pair fraction counts the
    /// kernel's tiles, so a dilated pattern counts its compacted branches' work, and
    /// packed documents the tiles their rows share: over the plan's batch rows (the spec's
    /// key lengths and documents are per row), a per-row plan's visits divided by its rows.
    pub fn of_plan(plan: &DistPlan) -> DistResult<Problem> {
        let n = plan.seq_len();
        let shape = Shape::square(plan.batch, n, 1, plan.head_dim);
        let visits: f64 = launches(&shape, &plan.spec, &Chunk::whole(&shape))?
            .iter()
            .map(|l| l.fwd.visits() as f64 / l.fwd.batches as f64)
            .sum();
        let dense = (n.div_ceil(FWD_Q_TILE) * n.div_ceil(TILE)) as f64;
        let p = plan.ranks();
        let ring: usize = (0..p).map(|r| plan.ring_volume(r)).sum();
        let moved: usize = (0..p)
            .flat_map(|dst| (0..p).filter(move |&src| src != dst).map(move |src| (dst, src)))
            .map(|(dst, src)| plan.pattern_volume(dst, src))
            .sum();
        Ok(Problem {
            batch: plan.batch,
            heads: plan.heads,
            kv_heads: plan.kv_heads,
            head_dim: plan.head_dim,
            seq_len: n,
            pair_fraction: visits / dense,
            moved_fraction: if ring == 0 { 0.0 } else { moved as f64 / ring as f64 },
        })
    }
}

impl Speeds {
    /// The four numbers in a fixed order, for [`Communicator::broadcast_f64`](super::Communicator::broadcast_f64).
    pub fn to_vec(&self) -> Vec<f64> {
        vec![self.flops, self.link_bytes, self.step_overhead, self.memory]
    }

    /// The inverse of [`Speeds::to_vec`] (`None` unless there are exactly four numbers).
    pub fn from_slice(v: &[f64]) -> Option<Speeds> {
        match *v {
            [flops, link_bytes, step_overhead, memory] => Some(Speeds { flops, link_bytes, step_overhead, memory }),
            _ => None,
        }
    }
}

/// What a distributed call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Selected {
    /// The whole problem on one GPU (rank 0); the others wait.
    Single,
    Distributed(Kind),
}

/// Decide for `plan` on its ranks with `speeds`: the rule's decision and what to run.
/// A ring uses the pattern-aware plan when it moves less than the dense ring.
pub fn select(plan: &DistPlan, speeds: &Speeds) -> DistResult<(Decision, Selected)> {
    let problem = Problem::of_plan(plan)?;
    let d = choose(&problem, plan.ranks(), speeds);
    let selected = match d.choice {
        Choice::Single => Selected::Single,
        Choice::AllGather => Selected::Distributed(Kind::AllGather),
        Choice::Ring if problem.moved_fraction < 1.0 => Selected::Distributed(Kind::PatternRing),
        Choice::Ring => Selected::Distributed(Kind::Ring),
    };
    Ok((d, selected))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// H200-like numbers: 400 TFLOP/s, 150 GB/s per direction, 30 us per step, 140 GB.
    fn h200() -> Speeds {
        Speeds { flops: 400e12, link_bytes: 150e9, step_overhead: 30e-6, memory: 140e9 }
    }

    fn causal(n: usize) -> Problem {
        Problem { batch: 1, heads: 8, kv_heads: 8, head_dim: 128, seq_len: n, pair_fraction: 0.5, moved_fraction: 1.0 }
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
        assert_eq!(d.choice, Choice::Ring);
    }

    #[test]
    fn a_sparse_pattern_with_many_ranks_prefers_all_gather_when_steps_are_costly() {
        // Very sparse (f tiny) and too big for one GPU's memory (671 MB > 500 MB; the
        // gather needs 352 MB): per-step compute is negligible, 8 step overheads dominate
        // the ring, one gather is cheaper.
        let p = Problem { pair_fraction: 1e-3, moved_fraction: 1.0, ..causal(65_536) };
        let mut s = h200();
        s.step_overhead = 2e-3;
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
    }

    #[test]
    fn speeds_round_trip_through_a_vector() {
        let s = h200();
        assert_eq!(Speeds::from_slice(&s.to_vec()), Some(s));
        assert_eq!(Speeds::from_slice(&[1.0]), None);
    }
}

//! The automatic choice between one GPU, the ring and all-gather: a pure function of
//! the problem and of *measured* speeds, so it is tested without a GPU and the numbers
//! behind each decision are printed.
//!
//! # The rule
//! With `W = 4 B H d N^2 f` forward FLOPs (`f`: fraction of (query, key) pairs the
//! pattern allows, ~1/2 causal), `F` one GPU's attention FLOP/s, `L` the per-GPU link
//! bandwidth (bytes/s), `o` the fixed cost of one ring step (launches, NCCL latency),
//! `m` the fraction of the dense ring's K/V bytes that the pattern-aware plan moves and
//! `M` the per-GPU memory:
//!
//! ```text
//!   t_single = W / F                                       if B N H d * 10 bytes <= M
//!   t_ring   = P * max(W / (P^2 F), m * 4 B H d (N/P) / L) + P * o
//!   t_gather = 4 B H d N (P-1)/P / L + W / (P F) + o       if B H d (N * 4 + (N/P) * 10) bytes <= M
//! ```
//! (bf16 K+V are 4 bytes per element pair; Q, K, V, O, dO-free forward memory is
//! `10` bytes per element: three bf16 inputs and the f32 output.) The ring assumes a
//! balanced layout (zigzag for causal) so that every step costs `W / P^2`, and full
//! overlap (the step costs the larger of compute and transfer). The choice is the
//! smallest predicted time; on a tie the simpler schedule wins (single, then ring, then
//! all-gather), so a short sequence, where `P o` dominates, never pays ring overhead.

use serde::Serialize;

/// Sizes and sparsity of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Problem {
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub seq_len: usize,
    /// Fraction of (query, key) pairs the pattern allows.
    pub pair_fraction: f64,
    /// Fraction of the dense ring's K/V volume the pattern-aware plan moves (1 dense).
    pub moved_fraction: f64,
}

/// Measured speeds of the machine (from `ring_bench`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
    let elems = b * h * d;
    let single_s = (elems * n * 10.0 <= speeds.memory).then(|| w / speeds.flops);
    let (ring_s, gather_s) = if ranks > 1 {
        let step = (w / (p * p * speeds.flops)).max(problem.moved_fraction * 4.0 * elems * (n / p) / speeds.link_bytes);
        let ring = p * step + p * speeds.step_overhead;
        let gather =
            4.0 * elems * n * (p - 1.0) / p / speeds.link_bytes + w / (p * speeds.flops) + speeds.step_overhead;
        let gather_fits = elems * (n * 4.0 + n / p * 10.0) <= speeds.memory;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// H200-like numbers: 400 TFLOP/s, 150 GB/s per direction, 30 us per step, 140 GB.
    fn h200() -> Speeds {
        Speeds { flops: 400e12, link_bytes: 150e9, step_overhead: 30e-6, memory: 140e9 }
    }

    fn causal(n: usize) -> Problem {
        Problem { batch: 1, heads: 8, head_dim: 128, seq_len: n, pair_fraction: 0.5, moved_fraction: 1.0 }
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
}

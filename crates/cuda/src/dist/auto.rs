//! The automatic choice between one GPU, the ring, all-gather, Ulysses and the Ulysses x
//! ring hybrid: a pure
//! function of the problem and of *measured* speeds, so it is tested without a GPU and
//! the numbers behind each decision are printed.
//!
//! # The rule
//! With `W = 4 B H d N^2 f` forward FLOPs (`f`: fraction of (query, key) pairs the
//! pattern allows, ~1/2 causal), `H_kv` the K/V heads (`H` unless grouped-query: K and V
//! are what moves), `n = N/P` the tokens per rank, `F` one GPU's attention FLOP/s, `L`,
//! `A`, `G` the bytes/s one GPU *sends* in a ring hop, an all-to-all and an all-gather
//! (each measured in its own shape: a 4-way all-gather does not run at the ring
//! neighbour's speed), `o` the fixed cost of one step (launches, NCCL latency), `u` that
//! of one Ulysses exchange (its gathers and scatters of rows, the NCCL group), `m` the
//! fraction of the dense ring's K/V bytes that the pattern-aware plan moves and `M` the
//! per-GPU memory:
//!
//! ```text
//!   t_single  = W / F                                      if 10 B N H d bytes <= M
//!   t_ring    = P max(W / (P^2 F), m 4 B H_kv d n / L) + P o
//!   t_gather  = 4 B H_kv d n (P-1) / G + W / (P F) + o     if B d (4 H_kv N + 10 H n) bytes <= M
//!   t_ulysses = V_a2a / A + W |H_p| / (H F) + 2 u          if B d (N (6 |H_p| + 4 |K_p|) + 10 H n) bytes <= M
//!   V_a2a     = 2 max_p [B d n (H - |H_p|) + 2 B d n sum_{r != p} |K_r| + B (d+1) |H_p| (N - n)]
//!   t_hybrid  = [U > 1] (V_grp / A + 2 u) + G max(W |H_u| / (H G^2 F), [G > 1] 4 B |K_u| d N_g / L) + G o
//!                                                          if B d (N_g (6 |H_u| + 12 |K_u|) + 10 H n) bytes <= M
//! ```
//! The hybrid (`U` ranks per group, `G = P / U` groups of `N_g = N / G` tokens): `V_grp` is
//! Ulysses' `V_a2a` inside one group (`U` ranks over `N_g` tokens), `|H_u| = ceil(H / U)` the
//! busiest member's query heads and `|K_u|` the K/V heads they read; its ring is the dense
//! ring over the groups at those heads. `U = 1` gives `t_ring` (dense), `U = P` gives
//! `t_ulysses + o`.
//! (bf16 K+V are 4 bytes per element pair; Q, K, V, O, dO-free forward memory is `10`
//! bytes per element: three bf16 inputs and the f32 output.) The ring assumes a balanced
//! layout (zigzag for causal) so that every step costs `W / P^2`, and full overlap (the
//! step costs the larger of compute and transfer). Ulysses (the reference's
//! `ring::ulysses`) splits the `H` query heads evenly (`|H_p|` of them on rank `p`, the
//! first ranks one more; idle ranks when `H < P`), and rank `p` reads the K/V heads
//! `K_p` of its query heads (`Heads::kv_range`; a K/V head shared by several ranks is
//! replicated to each). Its forward is two all-to-alls that overlap nothing: `Q`, `K`,
//! `V` of the rank's `n` tokens out to the head owners, then the output and LSE of its
//! heads over the other `N - n` tokens back (`V_a2a` counts 2 bytes per element, the LSE
//! as one more element per row), and the busiest rank computes `|H_p| = ceil(H / P)`
//! heads over the whole sequence: `W / (P F)` when `P` divides `H`, `W / (H F)` when
//! `H < P`. For multi-head attention `V_a2a = 2 B d n (H - |H_p|) 3 + 2 B (d+1) |H_p|
//! (N - n)`: it moves all of Q, K, V once regardless of the pattern, so it wins where
//! the ring's per-step costs (`P o`, transfers it cannot hide at short per-GPU lengths)
//! weigh more than one exchange of everything, and only with at least as many heads as
//! GPUs. The choice is the smallest predicted time; on a tie the simpler schedule wins
//! (single, then ring, then all-gather, then Ulysses, then the hybrid), so a short sequence, where `P o`
//! dominates, never pays ring overhead.
//!
//! With v's head dim `d_v` apart from q's (MLA), `d` reads `(d + d_v) / 2` in `W` (the
//! two products, `Q K^T` over `d` and `P V` over `d_v`) and in every K/V term (K rows of
//! `d`, V rows of `d_v`), and `(4 d + 6 d_v) / 10` in the memory terms (bf16 Q and K, bf16
//! V and the f32 output); `V_a2a` counts Q and K rows at `d`, V and output rows at `d_v`
//! ([`head_split::forward_elements`]).
//!
//! # At run time
//! [`select`] turns a [`DistPlan`] into a [`Problem`] ([`Problem::of_plan`]: `f` is the
//! work the kernels really do, the tiles of the whole-sequence launches relative to
//! dense; `m` is the pattern-aware plan's volume relative to the dense ring's) and the
//! decision into what to run ([`Selected`]): one GPU, the pattern-aware ring when it
//! moves less than the dense ring, else the dense ring, all-gather or Ulysses. Every
//! rank must take the same decision, so the speeds are rank 0's, shared with
//! [`Communicator::broadcast_f64`](super::Communicator::broadcast_f64) (see
//! [`Speeds::to_vec`]); `ring_bench` measures them and checks the choice against the
//! measured times of every option.

use super::error::DistResult;
use super::head_split;
use super::layout::DistPlan;
use crate::family::{FWD_Q_TILE, TILE};
use crate::launch::launches;
use crate::shape::{Chunk, Shape};
use ringdil_reference::Heads;
use ringdil_reference::ring::{Kind, even_boundaries};
use serde::Serialize;

/// Sizes and sparsity of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Problem {
    pub batch: usize,
    pub heads: usize,
    /// K/V heads (`heads` unless grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// v's head dim (`head_dim` unless MLA-style: [`DistPlan::with_value_dim`]).
    pub value_dim: usize,
    pub seq_len: usize,
    /// Fraction of (query, key) pairs the pattern allows.
    pub pair_fraction: f64,
    /// Fraction of the dense ring's K/V volume the pattern-aware plan moves (1 dense).
    pub moved_fraction: f64,
    /// Ranks per Ulysses group of the hybrid term (`None`: the reference's rule for the
    /// ranks, `ring::hybrid_degree`).
    pub hybrid_degree: Option<usize>,
}

/// Measured speeds of the machine (from `ring_bench`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Speeds {
    /// Attention forward FLOP/s of one GPU.
    pub flops: f64,
    /// Bytes per second one GPU sends to its neighbour (a ring hop).
    pub link_bytes: f64,
    /// Bytes per second one GPU sends in an all-to-all (a `1/P` part to every peer).
    pub all_to_all_bytes: f64,
    /// Bytes per second one GPU sends in an all-gather (its block to every peer).
    pub all_gather_bytes: f64,
    /// Seconds of fixed cost per ring step (and per all-gather).
    pub step_overhead: f64,
    /// Seconds of fixed cost per Ulysses exchange (its gathers, scatters and NCCL group,
    /// beyond the bytes at the all-to-all speed).
    pub exchange_overhead: f64,
    /// Bytes of memory per GPU.
    pub memory: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    Single,
    Ring,
    AllGather,
    Ulysses,
    Hybrid,
}

/// The decision with its predicted times (`None`: does not fit in memory).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Decision {
    pub choice: Choice,
    pub single_s: Option<f64>,
    pub ring_s: Option<f64>,
    pub gather_s: Option<f64>,
    pub ulysses_s: Option<f64>,
    pub hybrid_s: Option<f64>,
}

/// Pick a schedule for `problem` on `ranks` GPUs (see the module docs).
pub fn choose(problem: &Problem, ranks: usize, speeds: &Speeds) -> Decision {
    let (b, h, n) = (problem.batch as f64, problem.heads as f64, problem.seq_len as f64);
    let (d, dm) = (problem.kv_width(), problem.memory_width());
    let p = ranks.max(1) as f64;
    let w = 4.0 * b * h * d * n * n * problem.pair_fraction;
    let (elems, kv) = (b * h * dm, b * problem.kv_heads as f64 * d);
    let single_s = (elems * n * 10.0 <= speeds.memory).then(|| w / speeds.flops);
    if ranks <= 1 {
        return Decision {
            choice: Choice::Single,
            single_s,
            ring_s: None,
            gather_s: None,
            ulysses_s: None,
            hybrid_s: None,
        };
    }
    let per = n / p;
    let step = (w / (p * p * speeds.flops)).max(problem.moved_fraction * 4.0 * kv * per / speeds.link_bytes);
    let ring_s = p * step + p * speeds.step_overhead;
    let gather = 4.0 * kv * per * (p - 1.0) / speeds.all_gather_bytes + w / (p * speeds.flops) + speeds.step_overhead;
    let gather_fits = kv * n * 4.0 + elems * per * 10.0 <= speeds.memory;
    let u = problem.ulysses(ranks);
    let ulysses = u.sent_bytes / speeds.all_to_all_bytes
        + w * u.busiest_heads as f64 / (h * speeds.flops)
        + 2.0 * speeds.exchange_overhead;
    let ulysses_fits = u.memory_bytes <= speeds.memory;
    let (gather_s, ulysses_s) = (gather_fits.then_some(gather), ulysses_fits.then_some(ulysses));
    let hybrid_s = problem.hybrid(ranks).map(|c| {
        let g = c.groups as f64;
        let exchange = if c.degree > 1 {
            c.group_sent_bytes / speeds.all_to_all_bytes + 2.0 * speeds.exchange_overhead
        } else {
            0.0
        };
        let hop =
            if c.groups > 1 { 4.0 * b * c.busiest_kv_heads as f64 * d * (n / g) / speeds.link_bytes } else { 0.0 };
        let compute = w * c.busiest_heads as f64 / (h * g * g * speeds.flops);
        (exchange + g * compute.max(hop) + g * speeds.step_overhead, c.memory_bytes <= speeds.memory)
    });
    let hybrid_s = hybrid_s.and_then(|(t, fits)| fits.then_some(t));
    let choice = fastest([
        (Choice::Single, single_s),
        (Choice::Ring, Some(ring_s)),
        (Choice::AllGather, gather_s),
        (Choice::Ulysses, ulysses_s),
        (Choice::Hybrid, hybrid_s),
    ]);
    Decision { choice, single_s, ring_s: Some(ring_s), gather_s, ulysses_s, hybrid_s }
}

/// The option with the smallest time, the first listed on a tie (`None`: does not fit;
/// one GPU when nothing fits, the ring always does).
fn fastest(options: [(Choice, Option<f64>); 5]) -> Choice {
    let mut best = (Choice::Single, f64::INFINITY);
    for (c, t) in options {
        if let Some(t) = t
            && t < best.1
        {
            best = (c, t);
        }
    }
    best.0
}

/// What the Ulysses term of the rule needs of a problem on `P` ranks ([`Problem::ulysses`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UlyssesCost {
    /// `V_a2a`: bytes the busiest rank sends in the forward's two all-to-alls.
    pub sent_bytes: f64,
    /// `ceil(H / P)`: the query heads of the busiest rank.
    pub busiest_heads: usize,
    /// Forward memory of the busiest rank in bytes (own tokens at all heads, the whole
    /// sequence at its heads).
    pub memory_bytes: f64,
}

/// What the hybrid term of the rule needs of a problem on `P` ranks ([`Problem::hybrid`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HybridCost {
    /// `U`: ranks per group.
    pub degree: usize,
    /// `G = P / U`: groups, the ring's length.
    pub groups: usize,
    /// `V_grp`: bytes the busiest member sends in the forward's two all-to-alls inside its
    /// group (Ulysses over `U` ranks and `N / G` tokens).
    pub group_sent_bytes: f64,
    /// `|H_u| = ceil(H / U)`: the query heads of the busiest member.
    pub busiest_heads: usize,
    /// `|K_u|`: the K/V heads the busiest member's query heads read.
    pub busiest_kv_heads: usize,
    /// Forward memory of the busiest member in bytes (own tokens at all heads; the group's
    /// tokens at its heads, its output and two travelling K/V blocks).
    pub memory_bytes: f64,
}

impl Problem {
    /// The query and K/V head counts (multi-head when `kv_heads` does not divide `heads`).
    fn head_counts(&self) -> Heads {
        Heads::new(self.heads, self.kv_heads).unwrap_or(Heads::mha(self.heads))
    }

    /// `(d, d_v)` as reals.
    fn dims(&self) -> (f64, f64) {
        (self.head_dim as f64, self.value_dim as f64)
    }

    /// The width that prices `W` and the K/V terms: `(d + d_v) / 2` (module docs).
    fn kv_width(&self) -> f64 {
        let (d, dv) = self.dims();
        (d + dv) / 2.0
    }

    /// The width that prices memory: `(4 d + 6 d_v) / 10` (module docs).
    fn memory_width(&self) -> f64 {
        let (d, dv) = self.dims();
        (4.0 * d + 6.0 * dv) / 10.0
    }

    /// Elements rank `rank` of `ranks` sends in the Ulysses forward when it holds `tokens`
    /// of the sequence ([`head_split::forward_elements`], the reference's `ring::ulysses`
    /// volume).
    pub fn ulysses_volume(&self, ranks: usize, rank: usize, tokens: f64) -> f64 {
        let (b, n) = (self.batch as f64, self.seq_len as f64);
        head_split::forward_elements(self.head_counts(), b, self.dims(), n, ranks, rank, tokens)
    }

    /// Dense causal attention of `seq_len` tokens, `heads` heads of `head_dim`, batch 1:
    /// the problem benchmarks price (half the pairs, the whole K/V volume moved).
    pub fn dense_causal(heads: usize, head_dim: usize, seq_len: usize) -> Problem {
        Problem {
            batch: 1,
            heads,
            kv_heads: heads,
            head_dim,
            value_dim: head_dim,
            seq_len,
            pair_fraction: 0.5,
            moved_fraction: 1.0,
            hybrid_degree: None,
        }
    }

    /// The hybrid term's inputs on `ranks` ranks holding `N / P` tokens each (module docs);
    /// `None` when the degree does not divide the ranks or exceeds the heads.
    pub fn hybrid(&self, ranks: usize) -> Option<HybridCost> {
        let p = ranks.max(1);
        let degree = self.hybrid_degree.unwrap_or_else(|| ringdil_reference::ring::hybrid_degree(p, self.heads));
        if degree == 0 || p % degree != 0 || degree > self.heads {
            return None;
        }
        let heads = self.head_counts();
        let groups = p / degree;
        let (b, n) = (self.batch as f64, self.seq_len as f64);
        let (group_len, per) = (n / groups as f64, n / p as f64);
        let sent = (0..degree)
            .map(|u| head_split::forward_elements(heads, b, self.dims(), group_len, degree, u, per))
            .fold(0.0, f64::max);
        let split = even_boundaries(heads.query(), degree);
        let member = |u: usize| split[u]..split[u + 1];
        let busiest_kv = (0..degree).map(|u| heads.kv_range(&member(u)).len()).max().unwrap_or(0);
        let busiest = heads.query().div_ceil(degree);
        let (d, dm) = (self.kv_width(), self.memory_width());
        let memory = b
            * (group_len * (6.0 * busiest as f64 * dm + 12.0 * busiest_kv as f64 * d)
                + 10.0 * self.heads as f64 * per * dm);
        Some(HybridCost {
            degree,
            groups,
            group_sent_bytes: 2.0 * sent,
            busiest_heads: busiest,
            busiest_kv_heads: busiest_kv,
            memory_bytes: memory,
        })
    }

    /// The Ulysses term's inputs on `ranks` ranks holding `N / P` tokens each (see the
    /// module docs): the busiest rank's bytes sent (2 per element), query heads and memory.
    pub fn ulysses(&self, ranks: usize) -> UlyssesCost {
        let p = ranks.max(1);
        let heads = self.head_counts();
        let split = even_boundaries(heads.query(), p);
        let (b, n) = (self.batch as f64, self.seq_len as f64);
        let (d, dm) = (self.kv_width(), self.memory_width());
        let per = n / p as f64;
        let sent = (0..p).map(|r| self.ulysses_volume(p, r, per)).fold(0.0, f64::max);
        let memory = (0..p)
            .map(|r| {
                let hp = split[r + 1] - split[r];
                let kp = heads.kv_range(&(split[r]..split[r + 1])).len();
                b * (n * (6.0 * hp as f64 * dm + 4.0 * kp as f64 * d) + 10.0 * self.heads as f64 * per * dm)
            })
            .fold(0.0, f64::max);
        UlyssesCost { sent_bytes: 2.0 * sent, busiest_heads: heads.query().div_ceil(p), memory_bytes: memory }
    }

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
            value_dim: plan.value_dim,
            seq_len: n,
            pair_fraction: visits / dense,
            moved_fraction: if ring == 0 { 0.0 } else { moved as f64 / ring as f64 },
            hybrid_degree: Some(plan.hybrid_degree()),
        })
    }
}

impl Speeds {
    /// How many numbers [`Speeds::to_vec`] gives.
    pub const LEN: usize = 7;

    /// The seven numbers in a fixed order, for [`Communicator::broadcast_f64`](super::Communicator::broadcast_f64).
    pub fn to_vec(&self) -> Vec<f64> {
        vec![
            self.flops,
            self.link_bytes,
            self.all_to_all_bytes,
            self.all_gather_bytes,
            self.step_overhead,
            self.exchange_overhead,
            self.memory,
        ]
    }

    /// The inverse of [`Speeds::to_vec`] (`None` unless there are exactly [`Speeds::LEN`] numbers).
    pub fn from_slice(v: &[f64]) -> Option<Speeds> {
        match *v {
            [flops, link_bytes, all_to_all_bytes, all_gather_bytes, step_overhead, exchange_overhead, memory] => {
                Some(Speeds {
                    flops,
                    link_bytes,
                    all_to_all_bytes,
                    all_gather_bytes,
                    step_overhead,
                    exchange_overhead,
                    memory,
                })
            }
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
/// A ring uses the pattern-aware plan when it moves less than the dense ring. A pure
/// function of the plan and the speeds: ranks that share the speeds decide alike.
pub fn select(plan: &DistPlan, speeds: &Speeds) -> DistResult<(Decision, Selected)> {
    let problem = Problem::of_plan(plan)?;
    let d = choose(&problem, plan.ranks(), speeds);
    let selected = match d.choice {
        Choice::Single => Selected::Single,
        Choice::AllGather => Selected::Distributed(Kind::AllGather),
        Choice::Ulysses => Selected::Distributed(Kind::Ulysses),
        Choice::Hybrid => Selected::Distributed(Kind::Hybrid),
        Choice::Ring if problem.moved_fraction < 1.0 => Selected::Distributed(Kind::PatternRing),
        Choice::Ring => Selected::Distributed(Kind::Ring),
    };
    Ok((d, selected))
}

#[cfg(test)]
#[path = "auto_tests.rs"]
mod tests;

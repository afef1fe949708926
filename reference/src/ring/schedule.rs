//! A schedule as a value: who sends which rows to whom, and who computes what, step by
//! step. Schedules are built by [`super::ring()`], [`super::pattern_ring`],
//! [`super::all_gather`] and [`super::ulysses`], printed as JSON, and replayed by
//! [`super::Simulation`].
//!
//! # Rows and their rules
//! A *row* is one tensor's values for one global token and one head, over the whole
//! batch. Inputs ([`Tensor::Q`], `K`, `V`, `DOut`) are **copied** by a [`Op::Send`] and
//! dropped only by an explicit [`Op::Free`]. Accumulators ([`Tensor::Out`], the partial
//! output with its log-sum-exp, and `DQ`, `DK`, `DV`) are **moved**: the sender's row is
//! gone, and the receiver combines it into its own (online-softmax merge for `Out`,
//! addition for gradients; a missing accumulator row is the identity). Moving is what
//! makes every gradient contribution count exactly once.
//!
//! # Heads
//! Head ranges in operations are ranges of *query* heads. Under grouped-query attention
//! ([`Schedule::kv_heads`] `< heads`) the `K`, `V`, `DK`, `DV` rows an operation moves
//! are those of the K/V heads its query heads read ([`Heads::kv_range`]); so a send of
//! `K` for query heads `0..H` moves the rows of all `H_kv` K/V heads, `H_kv / H` of a
//! multi-head send. A compute's query heads must cover whole groups or lie inside one
//! group ([`Heads::runs_alone`]), so that it is grouped-query attention of its own.

use super::chunking::ChunkPlan;
use crate::error::{Error, Result};
use crate::heads::Heads;
use crate::pattern::KeyRun;
use crate::spec::Spec;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::ops::Range;

/// The tensors a rank can hold rows of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Tensor {
    Q,
    K,
    V,
    DOut,
    /// The partial (later final) output and its log-sum-exp.
    Out,
    DQ,
    DK,
    DV,
}

impl Tensor {
    pub fn name(self) -> &'static str {
        match self {
            Tensor::Q => "Q",
            Tensor::K => "K",
            Tensor::V => "V",
            Tensor::DOut => "dOut",
            Tensor::Out => "Out",
            Tensor::DQ => "dQ",
            Tensor::DK => "dK",
            Tensor::DV => "dV",
        }
    }

    /// Elements of one row (one token, one head, one batch row) of this tensor, for
    /// query/key width `d` and value width `dv`; `Out` carries its LSE along.
    pub fn width(self, d: usize, dv: usize) -> usize {
        match self {
            Tensor::Q | Tensor::K | Tensor::DQ | Tensor::DK => d,
            Tensor::V | Tensor::DOut | Tensor::DV => dv,
            Tensor::Out => dv + 1,
        }
    }

    /// Accumulators move and combine; inputs are copied (see the module docs).
    pub fn is_accumulator(self) -> bool {
        matches!(self, Tensor::Out | Tensor::DQ | Tensor::DK | Tensor::DV)
    }

    /// Tensors with the K/V heads (`K`, `V`, `dK`, `dV`); the others have the query heads.
    pub fn on_kv_heads(self) -> bool {
        matches!(self, Tensor::K | Tensor::V | Tensor::DK | Tensor::DV)
    }
}

/// One operation of a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Rows `tensors x tokens x heads` go from `from` to `to` (`heads` are query heads;
    /// K/V-side tensors move the K/V heads they read, see the module docs).
    Send { from: usize, to: usize, tensors: Vec<Tensor>, heads: Range<usize>, tokens: Vec<usize> },
    /// `rank` drops the rows `tensors x tokens x heads`.
    Free { rank: usize, tensors: Vec<Tensor>, heads: Range<usize>, tokens: Vec<usize> },
    /// `rank` attends `queries` over `keys` in `heads` and merges into its `Out` rows.
    Attend { rank: usize, heads: Range<usize>, queries: Vec<usize>, keys: Vec<usize> },
    /// `rank` adds the backward contributions of the same pairs to its `DQ`, `DK`, `DV` rows.
    AttendBackward { rank: usize, heads: Range<usize>, queries: Vec<usize>, keys: Vec<usize> },
}

/// A compute that a schedule left out because the pattern allows no (query, key) pair
/// between the queries of `rank` and the keys of `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skip {
    pub rank: usize,
    pub source: usize,
}

/// The operations of one step, in order, and the computes it skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub ops: Vec<Op>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skip>,
}

/// Which schedule family built a [`Schedule`]: the one list of distributed schedules,
/// shared by the reference, the CLI (`--schedule`) and the GPU runtime
/// (`ringdil_cuda::dist`, which runs all but [`Kind::Ulysses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Ring attention: K/V blocks travel around the ring ([`super::ring()`]).
    Ring,
    /// The ring, moving only the rows the pattern needs ([`super::pattern_ring`]).
    PatternRing,
    /// Context parallelism: all-gather K and V ([`super::all_gather`]).
    AllGather,
    /// Head parallelism: all-to-all to heads and back ([`super::ulysses`]).
    Ulysses,
    /// Ulysses inside groups of ranks, the ring between groups ([`super::hybrid`]).
    /// [`Kind::build`] takes the widest Ulysses groups the heads fill: the largest
    /// divisor of the ranks not above the query heads ([`super::hybrid_degree`]).
    Hybrid,
}

impl Kind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Kind; 5] = [Kind::Ring, Kind::PatternRing, Kind::AllGather, Kind::Ulysses, Kind::Hybrid];

    /// The kind's name in JSON (its serde name) and in the GPU programs' logs.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ring => "ring",
            Kind::PatternRing => "pattern_ring",
            Kind::AllGather => "all_gather",
            Kind::Ulysses => "ulysses",
            Kind::Hybrid => "hybrid",
        }
    }

    /// The schedule of this kind for `chunks` and `heads` (a head count for multi-head
    /// attention, or [`Heads`] for grouped-query attention) under `spec`. The pattern
    /// is validated for every kind, also for those whose steps do not read it
    /// (all-gather and Ulysses move every row), so a bad spec never yields a schedule.
    pub fn build(self, chunks: &ChunkPlan, spec: &Spec, heads: impl Into<Heads>) -> Result<Schedule> {
        let heads = heads.into();
        spec.validate_pattern(heads.query(), chunks.seq_len)?;
        match self {
            Kind::Ring => super::ring(chunks, spec, heads),
            Kind::PatternRing => super::pattern_ring(chunks, spec, heads),
            Kind::AllGather => Ok(super::all_gather(chunks, heads)),
            Kind::Ulysses => Ok(super::ulysses(chunks, heads)),
            Kind::Hybrid => super::hybrid(chunks, spec, heads, super::hybrid_degree(chunks.ranks(), heads.query())),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A complete distributed schedule for one chunk plan and head counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub kind: Kind,
    pub chunks: ChunkPlan,
    /// Query heads `H`.
    pub heads: usize,
    /// K/V heads `H_kv`, dividing `heads` (equal to it for multi-head attention).
    pub kv_heads: usize,
    pub forward: Vec<Step>,
    pub backward: Vec<Step>,
}

impl Schedule {
    pub fn ranks(&self) -> usize {
        self.chunks.ranks()
    }

    /// The query and K/V heads, checked ([`Heads::new`]).
    pub fn head_counts(&self) -> Result<Heads> {
        Heads::new(self.heads, self.kv_heads)
    }

    /// How many computes the schedule skipped (forward and backward).
    pub fn skipped(&self) -> usize {
        self.forward.iter().chain(&self.backward).map(|s| s.skipped.len()).sum()
    }

    /// Check a schedule (built here or read back from JSON) against `spec`: ranks, heads
    /// and tokens in range, and every (query, key) pair that `spec` allows computed
    /// **exactly once** in the forward phase and exactly once in the backward phase,
    /// each compute over whole head groups or inside one ([`Error::GroupSplit`]).
    /// Returns the first violation.
    pub fn validate(&self, spec: &Spec) -> Result<()> {
        self.chunks.validate()?;
        let (ranks, heads, n) = (self.ranks(), self.heads, self.chunks.seq_len);
        let counts = self.head_counts()?;
        spec.validate_pattern(heads, n)?;
        for op in self.forward.iter().chain(&self.backward).flat_map(|s| &s.ops) {
            let (rank_list, head_range, token_lists): (Vec<usize>, &Range<usize>, Vec<&[usize]>) = match op {
                Op::Send { from, to, heads, tokens, .. } => (vec![*from, *to], heads, vec![tokens]),
                Op::Free { rank, heads, tokens, .. } => (vec![*rank], heads, vec![tokens]),
                Op::Attend { rank, heads, queries, keys } | Op::AttendBackward { rank, heads, queries, keys } => {
                    (vec![*rank], heads, vec![queries, keys])
                }
            };
            if let Some(&rank) = rank_list.iter().find(|&&r| r >= ranks) {
                return Err(Error::BadRank { rank, ranks });
            }
            if head_range.start > head_range.end || head_range.end > heads {
                return Err(Error::BadHeads { start: head_range.start, end: head_range.end, heads });
            }
            if matches!(op, Op::Attend { .. } | Op::AttendBackward { .. }) && !counts.runs_alone(head_range) {
                let (start, end) = (head_range.start, head_range.end);
                return Err(Error::GroupSplit { start, end, group: counts.group() });
            }
            for (what, list) in ["tokens", "keys"].into_iter().zip(token_lists) {
                crate::check::positions(what, list, n)?;
            }
        }
        let is_forward = |op: &Op| matches!(op, Op::Attend { .. });
        let is_backward = |op: &Op| matches!(op, Op::AttendBackward { .. });
        self.check_coverage(spec, &self.forward, is_forward)?;
        self.check_coverage(spec, &self.backward, is_backward)
    }

    /// Every allowed pair `(q, k, h)` lies in exactly one compute of `steps`.
    fn check_coverage(&self, spec: &Spec, steps: &[Step], select: impl Fn(&Op) -> bool) -> Result<()> {
        let (heads, n) = (self.heads, self.chunks.seq_len);
        // Per compute: its heads, its query set and its key set.
        let computes: Vec<(Range<usize>, HashSet<usize>, HashSet<usize>)> = steps
            .iter()
            .flat_map(|s| &s.ops)
            .filter(|op| select(op))
            .filter_map(|op| match op {
                Op::Attend { heads, queries, keys, .. } | Op::AttendBackward { heads, queries, keys, .. } => {
                    Some((heads.clone(), queries.iter().copied().collect(), keys.iter().copied().collect()))
                }
                _ => None,
            })
            .collect();
        let mut runs: Vec<KeyRun> = Vec::new();
        let mut allowed: Vec<usize> = Vec::new();
        for q in 0..n {
            for h in 0..heads {
                allowed.clear();
                spec.for_each_row(q, n, |b, cut| {
                    runs.clear();
                    spec.key_runs(b, q, h, heads, n, &mut runs);
                    allowed.extend(runs.iter().flat_map(|r| r.clipped(cut).iter()));
                });
                allowed.sort_unstable();
                allowed.dedup();
                let covering: Vec<&HashSet<usize>> =
                    computes.iter().filter(|(hs, qs, _)| hs.contains(&h) && qs.contains(&q)).map(|c| &c.2).collect();
                for &key in &allowed {
                    let count = covering.iter().filter(|keys| keys.contains(&key)).count();
                    if count != 1 {
                        return Err(Error::PairCoverage { query: q, key, head: h, count });
                    }
                }
            }
        }
        Ok(())
    }
}

impl Op {
    /// `Send` of all of `tensors` for `tokens` in `heads`.
    pub fn send(from: usize, to: usize, tensors: &[Tensor], heads: Range<usize>, tokens: &[usize]) -> Op {
        Op::Send { from, to, tensors: tensors.to_vec(), heads, tokens: tokens.to_vec() }
    }

    /// `Free` of all of `tensors` for `tokens` in `heads`.
    pub fn free(rank: usize, tensors: &[Tensor], heads: Range<usize>, tokens: &[usize]) -> Op {
        Op::Free { rank, tensors: tensors.to_vec(), heads, tokens: tokens.to_vec() }
    }

    /// The forward (`backward = false`) or backward compute of `queries` over `keys`.
    pub fn compute(backward: bool, rank: usize, heads: Range<usize>, queries: &[usize], keys: &[usize]) -> Op {
        let (queries, keys) = (queries.to_vec(), keys.to_vec());
        if backward {
            Op::AttendBackward { rank, heads, queries, keys }
        } else {
            Op::Attend { rank, heads, queries, keys }
        }
    }
}

impl Schedule {
    /// Elements each rank sends at each step, `[forward, backward][step][rank]`, read off
    /// the `Send` operations alone for `batch` rows and widths `d`, `dv` (K/V-side rows
    /// counted at the K/V heads): what a [`super::Simulation`] measures, without needing
    /// tensors (so plans for long sequences can be costed).
    pub fn sent_elements(&self, batch: usize, d: usize, dv: usize) -> [Vec<Vec<usize>>; 2] {
        let ranks = self.ranks();
        // Costing does not validate: a schedule whose kv_heads do not divide heads is costed as MHA.
        let counts = self.head_counts().unwrap_or(Heads::mha(self.heads));
        [&self.forward, &self.backward].map(|steps| {
            steps
                .iter()
                .map(|step| {
                    let mut sent = vec![0; ranks];
                    for op in &step.ops {
                        if let Op::Send { from, tensors, heads, tokens, .. } = op {
                            let kv_rows = counts.kv_range(heads).len();
                            let row_elements: usize = tensors
                                .iter()
                                .map(|t| t.width(d, dv) * if t.on_kv_heads() { kv_rows } else { heads.len() })
                                .sum();
                            sent[*from] += batch * tokens.len() * row_elements;
                        }
                    }
                    sent
                })
                .collect()
        })
    }
}

/// A readable listing, one operation per line: what the snapshots and
/// `docs/schedules.md` show.
impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |xs: &[usize]| xs.iter().map(usize::to_string).collect::<Vec<_>>().join(" ");
        let names = |ts: &[Tensor]| ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(",");
        write!(f, "{:?}: {} tokens, {} ranks, {} heads", self.kind, self.chunks.seq_len, self.ranks(), self.heads)?;
        if self.kv_heads != self.heads {
            write!(f, " ({} K/V heads; K/V rows of h[a..b] are K/V heads a/g..ceil(b/g))", self.kv_heads)?;
        }
        writeln!(f)?;
        for r in 0..self.ranks() {
            writeln!(f, "  rank {r} owns [{}]", list(self.chunks.tokens(r)))?;
        }
        for (phase, steps) in [("forward", &self.forward), ("backward", &self.backward)] {
            writeln!(f, "{phase}")?;
            for (i, step) in steps.iter().enumerate() {
                writeln!(f, "  step {i}")?;
                for op in &step.ops {
                    match op {
                        Op::Send { from, to, tensors, heads, tokens } => {
                            writeln!(f, "    send {} {from}->{to} h{heads:?} [{}]", names(tensors), list(tokens))?
                        }
                        Op::Free { rank, tensors, heads, tokens } => {
                            writeln!(f, "    free {} @{rank} h{heads:?} [{}]", names(tensors), list(tokens))?
                        }
                        Op::Attend { rank, heads, queries, keys } => {
                            writeln!(f, "    attend @{rank} h{heads:?} q[{}] k[{}]", list(queries), list(keys))?
                        }
                        Op::AttendBackward { rank, heads, queries, keys } => writeln!(
                            f,
                            "    attend_backward @{rank} h{heads:?} q[{}] k[{}]",
                            list(queries),
                            list(keys)
                        )?,
                    }
                }
                for skip in &step.skipped {
                    writeln!(f, "    skip @{} keys of rank {} (no allowed pair)", skip.rank, skip.source)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{BlockSparse, Dense};
    use crate::ring::Layout;

    /// `name` is the serde name (JSON written by one is read by tools that know the
    /// other), and `ALL` lists each kind once.
    #[test]
    fn names_are_the_serde_names_and_all_lists_each_kind_once() {
        for kind in Kind::ALL {
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{}\"", kind.name()));
            assert_eq!(kind.to_string(), kind.name());
            assert_eq!(Kind::ALL.iter().filter(|&&k| k == kind).count(), 1);
        }
        let names: HashSet<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), Kind::ALL.len());
    }

    /// `build` returns a valid schedule of the kind asked for, and rejects an invalid
    /// pattern even for the kinds whose steps do not read it.
    #[test]
    fn build_makes_the_kind_asked_for_and_validates_the_pattern() {
        let chunks = ChunkPlan::new(12, 3, &Layout::Zigzag).unwrap();
        let spec = Spec::new(Dense).causal(true);
        for kind in Kind::ALL {
            let schedule = kind.build(&chunks, &spec, 3).unwrap();
            assert_eq!(schedule.kind, kind);
            schedule.validate(&spec).unwrap();
        }
        let bad = Spec::new(BlockSparse {
            block: 0,
            local_radius: None,
            dilated_stride: None,
            global_tokens: 0,
            block_mask: None,
        });
        for kind in Kind::ALL {
            assert!(kind.build(&chunks, &bad, 3).is_err(), "{kind}: a zero block must be rejected");
        }
    }
}

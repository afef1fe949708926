//! What `ring_bench` runs: the patterns, the distributed rows by tokens per GPU (`N = P x`
//! that), the one-GPU baselines they need, and the problems of the auto check.
//!
//! Rows (B = 1, 8 heads of d = 128, bf16):
//! * dense causal, zigzag, 8K, 16K and 64K tokens per GPU: ring, pattern-aware ring,
//!   all-gather, Ulysses, the Ulysses x ring hybrid ([`hybrid_degree`]);
//! * LongNet `(4096,1)(16384,2)(65536,4)(262144,8)` causal, zigzag, 16K and 64K per GPU:
//!   pattern-aware ring, Ulysses, hybrid;
//! * grouped-query 8:1 dense causal, zigzag, 16K and 64K per GPU: ring, Ulysses, hybrid (8
//!   query heads over one K/V head: Ulysses replicates that head to every rank, the hybrid
//!   to every member of a group);
//! * packed dense causal (long-tailed documents, [`packed_documents`]), 16K per GPU, the
//!   pattern-aware ring on zigzag, contiguous and the work-balanced split
//!   (`dist::balanced_layout`).
//!
//! The auto check ([`AUTO`]) also needs forward times of the options no row above
//! runs (LongNet's dense ring and all-gather, grouped-query's pattern-aware ring and
//! all-gather): those are timed forward only ([`Config::forward_only`]).

use crate::{DIM, HEADS};
use ringdil_cuda::dist::hybrid_split::grid_degree;
use ringdil_cuda::dist::{DistPlan, balanced_layout};
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout};

pub const K: usize = 1024;
pub const DENSE: &str = "dense causal";
pub const LONGNET: &str = "longnet dilated causal";
pub const GQA: &str = "gqa 8:1 dense causal";
pub const PACKED: &str = "packed dense causal";
pub const PACKED_LONGNET: &str = "packed longnet dilated causal";

/// The spec of a row's pattern over `n` tokens.
pub fn pattern(name: &str, n: usize) -> GpuSpec {
    match name {
        DENSE | GQA => GpuSpec::new(GpuPattern::Dense).causal(true),
        PACKED => GpuSpec::new(GpuPattern::Dense).causal(true).documents(packed_documents(n)),
        PACKED_LONGNET => pattern(LONGNET, n).documents(packed_documents(n)),
        _ => GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(4096, 1), (16384, 2), (65536, 4), (262_144, 8)])))
            .causal(true),
    }
}

/// Long-tailed documents packed into one row of `n` tokens (a fixed draw): Pareto lengths
/// `256 / u^(1 / 1.2)` (`u` uniform in (0, 1]; `P(L > x) = (256 / x)^1.2`: mean 1536
/// tokens, one in ~12 over 2K, one in ~150 over 16K), the last one cut at `n`.
pub fn packed_documents(n: usize) -> Documents {
    let mut rng = SplitMix64::new(0xD0C5);
    let mut list = vec![0];
    while *list.last().expect("starts at 0") < n {
        let len = 256.0 / (1.0 - rng.uniform()).powf(1.0 / 1.2);
        list.push((list.last().expect("non-empty") + len as usize).min(n));
    }
    Documents::per_row(vec![list])
}

/// K/V heads of a pattern's rows: grouped-query rows put the 8 query heads over one K/V
/// head, whose K/V (and every ring transfer of it) is 1/8 of the multi-head size.
pub fn kv_heads(name: &str) -> usize {
    if name == GQA { HEADS / 8 } else { HEADS }
}

/// How a row splits the tokens over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Zigzag,
    Contiguous,
    /// `dist::balanced_layout` of the pattern's documents.
    Balanced,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Zigzag => "zigzag",
            Split::Contiguous => "contiguous",
            Split::Balanced => "balanced",
        }
    }

    /// The layout for `pat` over `n` tokens on `p` ranks.
    pub fn layout(self, pat: &str, n: usize, p: usize) -> Result<Layout, String> {
        Ok(match self {
            Split::Zigzag => Layout::Zigzag,
            Split::Contiguous => Layout::Contiguous,
            Split::Balanced => {
                let docs = pattern(pat, n).documents.ok_or(format!("{pat} has no documents to balance"))?;
                balanced_layout(&docs, 1, n, p).map_err(|e| e.to_string())?
            }
        })
    }
}

/// One distributed configuration.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub pattern: &'static str,
    pub split: Split,
    pub schedule: Kind,
    pub per_gpu: usize,
    /// Timed forward only, for the auto check; not a row of the scaling table.
    pub forward_only: bool,
}

impl Config {
    /// Total tokens on `p` ranks.
    pub fn seq_len(&self, p: usize) -> usize {
        self.per_gpu * p
    }

    /// Compute-only and comm-only probes (overlap) are run for the dense ring only.
    pub fn probes(&self) -> bool {
        self.schedule == Kind::Ring && !self.forward_only
    }
}

/// The distributed plan of `pat` over `n` tokens on `p` ranks (every rank builds the same),
/// its hybrid on the grid of [`hybrid_degree`].
pub fn plan(pat: &str, split: Split, n: usize, p: usize) -> Result<DistPlan, String> {
    let chunks = ChunkPlan::new(n, p, &split.layout(pat, n, p)?).map_err(|e| e.to_string())?;
    DistPlan::new(chunks, pattern(pat, n), 1, HEADS, DIM)
        .and_then(|plan| plan.with_kv_heads(kv_heads(pat)))
        .and_then(|plan| plan.with_hybrid_degree(hybrid_degree(p)))
        .map_err(|e| e.to_string())
}

/// Ranks per Ulysses group of the hybrid rows on `p` GPUs (`hybrid_split::grid_degree`).
pub fn hybrid_degree(p: usize) -> usize {
    grid_degree(p, HEADS)
}

/// The schedule's name in the tables: the hybrid's with its grid, `groups x members`.
pub fn schedule_name(schedule: Kind, p: usize) -> String {
    match schedule {
        Kind::Hybrid => format!("hybrid {}x{}", p / hybrid_degree(p), hybrid_degree(p)),
        _ => schedule.name().to_string(),
    }
}

/// The problems of the auto check: (pattern, split, tokens per GPU).
pub const AUTO: [(&str, Split, usize); 5] = [
    (DENSE, Split::Zigzag, 8 * K),
    (DENSE, Split::Zigzag, 16 * K),
    (DENSE, Split::Zigzag, 64 * K),
    (LONGNET, Split::Zigzag, 64 * K),
    (GQA, Split::Zigzag, 16 * K),
];

/// The options the auto check compares: every schedule ([`Kind::ALL`]; one the runtime
/// refuses is an error row and counts as not measured).
pub const OPTIONS: [Kind; 5] = Kind::ALL;

/// Every distributed configuration, in the order they run: by tokens per GPU, so the
/// inputs of one size are drawn once ([`crate::distributed::Inputs`]).
pub fn configs() -> Vec<Config> {
    use Kind::{AllGather, Hybrid, PatternRing, Ring, Ulysses};
    let row = |pattern, split, schedule, per_gpu| Config { pattern, split, schedule, per_gpu, forward_only: false };
    let mut out = Vec::new();
    for per in [8 * K, 16 * K, 64 * K] {
        for s in [Ring, PatternRing, AllGather, Ulysses, Hybrid] {
            out.push(row(DENSE, Split::Zigzag, s, per));
        }
        if per >= 16 * K {
            for s in [PatternRing, Ulysses, Hybrid] {
                out.push(row(LONGNET, Split::Zigzag, s, per));
            }
        }
        if per == 16 * K {
            for split in [Split::Zigzag, Split::Contiguous, Split::Balanced] {
                out.push(row(PACKED, split, PatternRing, per));
            }
        }
        if per >= 16 * K {
            for s in [Ring, Ulysses, Hybrid] {
                out.push(row(GQA, Split::Zigzag, s, per));
            }
        }
    }
    // The auto check's options no row runs, forward only, after the rows of their size.
    for (pattern, split, per_gpu) in AUTO {
        for schedule in OPTIONS {
            let have = out
                .iter()
                .any(|c| c.pattern == pattern && c.split == split && c.per_gpu == per_gpu && c.schedule == schedule);
            if !have {
                let at = out.iter().rposition(|c| c.per_gpu == per_gpu && kv_heads(c.pattern) == kv_heads(pattern));
                let c = Config { pattern, split, schedule, per_gpu, forward_only: true };
                out.insert(at.map_or(out.len(), |i| i + 1), c);
            }
        }
    }
    out
}

/// The one-GPU baselines (pattern, N) the rows on `p` ranks need, each once.
pub fn singles(configs: &[Config], p: usize) -> Vec<(&'static str, usize)> {
    let mut out: Vec<(&'static str, usize)> = Vec::new();
    for c in configs {
        let key = (c.pattern, c.seq_len(p));
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out.sort_by_key(|&(pat, n)| (kv_heads(pat), n));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_and_auto_option_runs_once_and_has_its_baseline() {
        let c = configs();
        for (i, a) in c.iter().enumerate() {
            let same = |b: &Config| {
                b.pattern == a.pattern && b.split == a.split && b.schedule == a.schedule && b.per_gpu == a.per_gpu
            };
            assert!(!c[i + 1..].iter().any(same), "{a:?} twice");
        }
        for (pattern, split, per) in AUTO {
            for s in OPTIONS {
                assert!(
                    c.iter().any(|x| x.pattern == pattern && x.split == split && x.per_gpu == per && x.schedule == s)
                );
            }
        }
        let s = singles(&c, 4);
        assert!(c.iter().all(|x| s.contains(&(x.pattern, x.seq_len(4)))));
        assert_eq!(c.iter().filter(|x| !x.forward_only).count(), 15 + 6 + 3 + 6);
        assert_eq!(c.iter().filter(|x| x.forward_only).count(), 4);
    }
}

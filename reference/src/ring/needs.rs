//! Which key rows each rank needs from each other rank, derived from the pattern.
//!
//! For a destination rank `d`, a source rank `s` and a head `h`:
//!
//! ```text
//!   need(d, s, h) = { k owned by s : exists q owned by d with c_h(q, k) > 0 }
//! ```
//!
//! where `c_h(q, k)` is the pattern's multiplicity ([`crate::Pattern::key_runs`]) after the
//! causal cut `k <= q` and the key-padding cut `k < max_b key_lengths[b]` (a row is
//! shipped for the whole batch, so the union over batch rows is what counts). With
//! packed documents ([`crate::Documents`]) `c_h` is taken per batch row inside the
//! query's document and the union is over the rows: a rank needs only keys of the
//! documents its queries lie in, and documents that never cross a rank boundary add
//! nothing across ranks. The set
//! is built only from key runs, so it is right for every pattern, present or future.
//! A LongNet branch `(w, r)` whose segments never cross a rank boundary adds nothing
//! across ranks; a longer segment adds the kept positions `a + o(h) + t r` only, `1/r` of
//! the rows per head.
//!
//! Under grouped-query attention a K/V row travels once for its whole group of query
//! heads, so what is shipped for K/V head `j` is the union over the group,
//!
//! ```text
//!   need_kv(d, s, j) = U_{h : h / g = j} need(d, s, h),
//! ```
//!
//! which for dilated patterns (offsets differ between the heads of a group) can be up
//! to `g` times a single head's need.

use super::chunking::ChunkPlan;
use crate::error::Result;
use crate::heads::Heads;
use crate::pattern::KeyRun;
use crate::spec::Spec;

/// `need(d, s, h)` for every destination, source and query head, and `need_kv(d, s, j)`
/// for every K/V head: ascending global tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// Query heads.
    pub heads: usize,
    counts: Heads,
    /// `keys[d][h][s]`.
    keys: Vec<Vec<Vec<Vec<usize>>>>,
    /// `kv_keys[d][j][s]`.
    kv_keys: Vec<Vec<Vec<Vec<usize>>>>,
}

impl Needs {
    /// Compute the needs of `spec` over `heads` (a head count, or [`Heads`] for
    /// grouped-query attention) for `plan`. Cost `O(P H N + pairs)`.
    pub fn new(spec: &Spec, plan: &ChunkPlan, heads: impl Into<Heads>) -> Result<Self> {
        let counts = heads.into();
        let heads = counts.query();
        let n = plan.seq_len;
        spec.validate_pattern(heads, n)?;
        let owner = plan.token_map().rank;
        let ranks = plan.ranks();
        let mut keys = vec![vec![vec![Vec::new(); ranks]; heads]; ranks];
        let mut stamp = vec![usize::MAX; n];
        let mut runs: Vec<KeyRun> = Vec::new();
        for (d, row) in keys.iter_mut().enumerate() {
            for (h, by_src) in row.iter_mut().enumerate() {
                let mark = d * heads + h;
                for &q in plan.tokens(d) {
                    spec.for_each_row(q, n, |b, cut| {
                        runs.clear();
                        spec.key_runs(b, q, h, heads, n, &mut runs);
                        for run in &runs {
                            run.clipped(cut).iter().for_each(|k| stamp[k] = mark);
                        }
                    });
                }
                for k in (0..n).filter(|&k| stamp[k] == mark) {
                    by_src[owner[k]].push(k);
                }
            }
        }
        let kv_keys = keys
            .iter()
            .map(|by_head| {
                by_head
                    .chunks(counts.group())
                    .map(|group| {
                        (0..ranks)
                            .map(|src| {
                                let mut union: Vec<usize> = group.iter().flat_map(|h| h[src].iter().copied()).collect();
                                union.sort_unstable();
                                union.dedup();
                                union
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Ok(Needs { heads, counts, keys, kv_keys })
    }

    /// `need(d, s, h)` of query head `h`.
    pub fn keys(&self, dst: usize, src: usize, head: usize) -> &[usize] {
        &self.keys[dst][head][src]
    }

    /// `need_kv(d, s, j)` of K/V head `j`: the union of its query heads' needs.
    pub fn kv_keys(&self, dst: usize, src: usize, kv_head: usize) -> &[usize] {
        &self.kv_keys[dst][kv_head][src]
    }

    /// Whether any query of `dst` sees any key of `src` in any head: a step of the ring
    /// that answers `false` computes nothing and is skipped.
    pub fn any(&self, dst: usize, src: usize) -> bool {
        self.keys[dst].iter().any(|by_src| !by_src[src].is_empty())
    }

    /// Maximal runs of consecutive K/V heads with the same non-empty `need_kv` from
    /// `src`, as `(query heads, keys)`: the query heads are whole groups, `g j0 .. g j1`.
    /// One message (and one compute) per run keeps plans short. For multi-head
    /// attention (`g = 1`) these are runs of heads with equal needs.
    pub fn head_groups(&self, dst: usize, src: usize) -> Vec<(std::ops::Range<usize>, &[usize])> {
        let g = self.counts.group();
        let mut groups: Vec<(std::ops::Range<usize>, &[usize])> = Vec::new();
        for (j, k) in self.kv_keys[dst].iter().map(|by_src| &by_src[src]).enumerate() {
            let h = j * g;
            match groups.last_mut() {
                Some((heads, keys)) if heads.end == h && *keys == k.as_slice() => heads.end = h + g,
                _ if k.is_empty() => {}
                _ => groups.push((h..h + g, k)),
            }
        }
        groups
    }
}

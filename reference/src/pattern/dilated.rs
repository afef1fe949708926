//! LongNet dilated attention (Ding et al., 2023, "LongNet: Scaling Transformers to
//! 1,000,000,000 Tokens"; official code: microsoft/torchscale `DilatedAttention`).
//!
//! # One branch `(w, r)`
//! The sequence `0..n` is cut into segments `[s*w, min((s+1)*w, n))`. **The last segment
//! is shorter when `w` does not divide `n`; it is used as it is, never dropped and never
//! padded** (torchscale pads it with zero rows that then take part in the softmax as
//! keys with score 0; ringdil deliberately does not). A segment longer than the sequence
//! is simply the whole sequence.
//!
//! Inside a segment starting at `a`, head `h` keeps the positions `a + o(h) + t*r`
//! (`t = 0, 1, ...`) below the segment end, where `o(h)` is the head's offset. A query `i`
//! takes part in the branch only when it is itself kept, and then it sees exactly the
//! kept keys of its segment. A kept set may be empty (a short last segment with
//! `o(h) >= its length`); such queries get nothing from that branch.
//!
//! # Offsets `o(h)` (the rule is chosen per branch, see [`Offset`])
//! * [`Offset::HeadMod`]: `o(h) = h mod r` (the paper: "different heads use different
//!   offsets", cycling through all residues);
//! * [`Offset::HeadBlock`]: `o(h) = floor(h / ceil(H / r))`, what torchscale's
//!   `dense_to_sparse` computes (heads padded to a multiple of `r`, split in `r` blocks);
//! * [`Offset::Fixed`]: one offset for every head (the PyTorch ports use `branch mod r`).
//!
//! # Combining branches
//! [`Combine::SoftmaxDenominator`] (LongNet, torchscale): each branch `b` gives a
//! normalised output `O_b` and log-sum-exp `L_b` (the log of its softmax denominator).
//! LongNet combines `O = sum_b w_b O_b` with `w_b = exp(L_b) / sum_c exp(L_c)`, which is
//! *exactly* the online-softmax merge of the partials `(O_b, L_b)`
//! ([`crate::Partial::merge`]). Hence the whole pattern is one attention over the
//! multiset union of the branches' key sets: a key kept by two branches has multiplicity
//! 2. That is why [`super::Pattern`] speaks of multiplicities, and it is what the
//! crate's tests check against a per-branch evaluation.
//!
//! [`Combine::HeadGroups`] (the popular PyTorch ports, e.g. `dilated-attention-pytorch`):
//! heads are split into one contiguous group per branch (sizes `H/G`, the first `H mod G`
//! groups one larger), each group sees only its branch, and the output is divided by the
//! number of groups `G`, as those ports do. Use it to reproduce their numbers; it is not
//! LongNet's formula.

use super::{KeyRun, Pattern};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// How a branch picks the offset of each head. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Offset {
    HeadMod,
    HeadBlock,
    Fixed(usize),
}

/// One `(segment_length, dilation_rate)` branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    pub segment: usize,
    pub dilation: usize,
    pub offset: Offset,
}

/// How the branches' outputs become one output. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    SoftmaxDenominator,
    HeadGroups,
}

/// A LongNet dilated pattern: several branches and a combine rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dilated {
    pub branches: Vec<Branch>,
    pub combine: Combine,
}

impl Dilated {
    /// LongNet with the paper's offset rule `h mod r` and the softmax-denominator combine.
    pub fn longnet(branches: &[(usize, usize)]) -> Self {
        Self::with_offsets(branches, |_, _| Offset::HeadMod, Combine::SoftmaxDenominator)
    }

    /// LongNet exactly as torchscale computes it (head-block offsets), except for the
    /// treatment of a short last segment (module docs).
    pub fn torchscale(branches: &[(usize, usize)]) -> Self {
        Self::with_offsets(branches, |_, _| Offset::HeadBlock, Combine::SoftmaxDenominator)
    }

    /// The head-group variant of the PyTorch ports: branch `i` uses offset `i mod r_i`,
    /// one head group per branch, outputs divided by the number of groups.
    pub fn head_groups(branches: &[(usize, usize)]) -> Self {
        Self::with_offsets(branches, |i, r| Offset::Fixed(i % r.max(1)), Combine::HeadGroups)
    }

    fn with_offsets(branches: &[(usize, usize)], offset: impl Fn(usize, usize) -> Offset, combine: Combine) -> Self {
        let branches = branches
            .iter()
            .enumerate()
            .map(|(i, &(segment, dilation))| Branch { segment, dilation, offset: offset(i, dilation) })
            .collect();
        Dilated { branches, combine }
    }

    /// The pattern made of branch `index` alone (same offsets, softmax combine): the
    /// per-branch attention whose merge is the whole pattern.
    pub fn single_branch(&self, index: usize) -> Dilated {
        Dilated { branches: vec![self.branches[index]], combine: Combine::SoftmaxDenominator }
    }

    /// The offset that `branch` uses for head `head` of `heads`.
    pub fn offset(&self, branch: &Branch, head: usize, heads: usize) -> usize {
        match branch.offset {
            Offset::HeadMod => head % branch.dilation,
            Offset::HeadBlock => head / heads.div_ceil(branch.dilation),
            Offset::Fixed(o) => o,
        }
    }

    /// Which branch head `head` belongs to under [`Combine::HeadGroups`]: contiguous
    /// groups of `H / G` heads, the first `H mod G` groups one head larger.
    pub fn head_group(&self, head: usize, heads: usize) -> usize {
        let groups = self.branches.len();
        let (base, extra) = (heads / groups, heads % groups);
        let big = extra * (base + 1);
        if head < big { head / (base + 1) } else { extra + (head - big) / base }
    }

    /// The heads of group `group` under [`Combine::HeadGroups`], of `heads`: the range
    /// whose every head [`Dilated::head_group`] puts in `group`.
    pub fn head_group_range(&self, group: usize, heads: usize) -> std::ops::Range<usize> {
        let groups = self.branches.len();
        let (base, extra) = (heads / groups, heads % groups);
        let start = |g: usize| g * base + g.min(extra);
        start(group)..start(group + 1)
    }

    /// The run of keys that `query` sees in one branch, if it takes part in it.
    fn branch_run(&self, branch: &Branch, query: usize, head: usize, heads: usize, seq_len: usize) -> Option<KeyRun> {
        let start = query - query % branch.segment;
        let end = (start + branch.segment).min(seq_len);
        let offset = self.offset(branch, head, heads);
        ((query - start) % branch.dilation == offset).then_some(KeyRun {
            start: start + offset,
            end,
            step: branch.dilation,
        })
    }
}

impl Pattern for Dilated {
    fn validate(&self, heads: usize, _seq_len: usize) -> Result<()> {
        if self.branches.is_empty() {
            return Err(Error::NoBranches);
        }
        for (i, b) in self.branches.iter().enumerate() {
            if b.segment == 0 {
                return Err(Error::SegmentZero { branch: i });
            }
            if b.dilation == 0 {
                return Err(Error::DilationZero { branch: i });
            }
            if b.dilation > b.segment {
                return Err(Error::DilationExceedsSegment { branch: i, dilation: b.dilation, segment: b.segment });
            }
            if let Offset::Fixed(offset) = b.offset
                && offset >= b.dilation
            {
                return Err(Error::OffsetOutOfRange { branch: i, offset, dilation: b.dilation });
            }
        }
        if self.combine == Combine::HeadGroups && heads < self.branches.len() {
            return Err(Error::TooFewHeads { heads, branches: self.branches.len() });
        }
        Ok(())
    }

    fn key_runs(&self, query: usize, head: usize, heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        match self.combine {
            Combine::SoftmaxDenominator => {
                out.extend(self.branches.iter().filter_map(|b| self.branch_run(b, query, head, heads, seq_len)))
            }
            Combine::HeadGroups => {
                let branch = &self.branches[self.head_group(head, heads)];
                out.extend(self.branch_run(branch, query, head, heads, seq_len));
            }
        }
    }

    fn output_scale(&self, _head: usize, _heads: usize) -> f64 {
        match self.combine {
            Combine::SoftmaxDenominator => 1.0,
            Combine::HeadGroups => 1.0 / self.branches.len() as f64,
        }
    }
}

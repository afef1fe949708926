//! LongNet branches whose parameters are expressions.
//!
//! A branch is the dilated branch of `pattern/dilated.rs` with its three numbers
//! computed per head and per segment. For query `q` of head `h`:
//!
//! ```text
//!   w = segment(h, H, n)                   (>= 1)
//!   s = floor(q / w),  a = s w,  e = min(a + w, n)      (the query's segment [a, e))
//!   r = dilation(h, H, n, s, w)            (1 <= r <= w)
//!   o = offset(h, H, n, s, w, r) mod r     (any integer; the kept residue)
//!   P = { a + o + t r : t >= 0 } ∩ [a, e)
//! ```
//!
//! The query takes part when `q ∈ P` and then sees the keys `k ∈ P` for which the
//! branch's `mask(b, h, q, k, n, H, s, w, r)` holds (all of `P` without a mask). The
//! offset is taken modulo `r` (floor modulo, so it is in `0..r` for any value) because
//! a dilation offset *is* a residue class: `h`, `h % r` and `h + r` name the same
//! positions, and "offsets rotating per segment" is simply `offset = "h + s"`. With
//! constant `w`, `r` and an offset `o < r` a branch is `Branch { w, r, Offset::Fixed(o) }`;
//! with offset `h % r` it is `Offset::HeadMod`, with `h / ((H + r - 1) / r)` it is
//! `Offset::HeadBlock`.
//!
//! Branches combine by [`ExprCombine::SoftmaxDenominator`] (LongNet: the multiset union
//! of the branches' keys, a key kept by two branches counted twice; see
//! `pattern/dilated.rs`) or [`ExprCombine::Union`] (a key kept by any branch, once).

use super::Expression;
use super::ast::{Ty, Var};
use super::error::ExprError;
use super::eval::{Env, mod_floor};
use super::scope::{Constants, Scope};
use crate::error::{Error, Result};
use crate::pattern::{KeyRun, Pattern, push_union};
use serde::{Deserialize, Serialize};

/// One branch: segment length, dilation rate and offset as expressions, and an
/// optional extra mask on its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprBranch {
    pub(super) segment: Expression,
    pub(super) dilation: Expression,
    pub(super) offset: Expression,
    pub(super) mask: Option<Expression>,
}

impl ExprBranch {
    /// Build a branch; an error names the field (`segment`, `dilation`, `offset` or
    /// `mask`) and the token. Each field sees the names of its [`Scope`].
    pub fn new(
        segment: &str,
        dilation: &str,
        offset: &str,
        mask: Option<&str>,
        constants: &Constants,
    ) -> std::result::Result<Self, ExprError> {
        let int = |source, scope: &Scope, field| {
            Expression::new(source, scope, constants, Ty::Int).map_err(|e| e.in_field(field))
        };
        Ok(ExprBranch {
            segment: int(segment, &Scope::SEGMENT, "segment")?,
            dilation: int(dilation, &Scope::DILATION, "dilation")?,
            offset: int(offset, &Scope::OFFSET, "offset")?,
            mask: mask
                .map(|m| {
                    Expression::new(m, &Scope::BRANCH_MASK, constants, Ty::Bool)
                        .and_then(Expression::without_batch_row)
                        .map_err(|e| e.in_field("mask"))
                })
                .transpose()?,
        })
    }

    /// The environment of head `head` with `w` set (`H`, `n` too).
    pub(super) fn head_env(&self, head: usize, heads: usize, seq_len: usize) -> (Env, i64) {
        let mut env = Env::default();
        env.set(Var::Head, head);
        env.set(Var::Heads, heads);
        env.set(Var::SeqLen, seq_len);
        let w = self.segment.eval(&env);
        (env.with(Var::Segment, w), w)
    }

    /// Append the runs of keys that `query` sees in this branch (none when it does not
    /// take part). Needs a validated branch: `w >= 1` and `1 <= r <= w`.
    fn push_runs(&self, query: usize, head: usize, heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let (mut env, w) = self.head_env(head, heads, seq_len);
        let w = w as usize;
        let s = query / w;
        let (a, e) = (s * w, (s * w + w).min(seq_len));
        env.set(Var::SegmentIndex, s);
        let r = self.dilation.eval(&env);
        env = env.with(Var::Dilation, r);
        let o = mod_floor(self.offset.eval(&env), r) as usize;
        let r = r as usize;
        if (query - a) % r != o {
            return;
        }
        let Some(mask) = &self.mask else {
            out.push(KeyRun { start: a + o, end: e, step: r });
            return;
        };
        env.set(Var::Query, query);
        // Maximal stretches of consecutive kept positions where the mask holds.
        let mut stretch: Option<(usize, usize)> = None;
        for key in (a + o..e).step_by(r) {
            env.set(Var::Key, key);
            if mask.eval(&env) != 0 {
                stretch = Some((stretch.map_or(key, |(first, _)| first), key));
            } else if let Some((first, last)) = stretch.take() {
                out.push(KeyRun { start: first, end: last + 1, step: r });
            }
        }
        if let Some((first, last)) = stretch {
            out.push(KeyRun { start: first, end: last + 1, step: r });
        }
    }
}

/// How the branches' key sets become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExprCombine {
    /// LongNet's combine: multiplicities add over branches.
    SoftmaxDenominator,
    /// A key seen by any branch, once.
    Union,
}

/// Dilated attention with expression branches. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprDilated {
    pub branches: Vec<ExprBranch>,
    pub combine: ExprCombine,
}

impl ExprDilated {
    /// Patterns whose key counts add up to this one's, each keeping a key at most once:
    /// one per branch under the softmax-denominator combine (a branch keeps a key once),
    /// else the pattern itself.
    pub fn parts(&self) -> Vec<ExprDilated> {
        match self.combine {
            ExprCombine::SoftmaxDenominator => self
                .branches
                .iter()
                .map(|b| ExprDilated { branches: vec![b.clone()], combine: ExprCombine::SoftmaxDenominator })
                .collect(),
            ExprCombine::Union => vec![self.clone()],
        }
    }
}

impl Pattern for ExprDilated {
    /// Evaluates every branch's `w` for every head and its `r` for every segment:
    /// `O(H n / w)` evaluations. A value below 1 is `BranchValue` with the value, the
    /// head and (for `r`) the segment where it occurs; `r > w` is
    /// `DilationExceedsSegment` with both values. Offsets need no check.
    fn validate(&self, heads: usize, seq_len: usize) -> Result<()> {
        if self.branches.is_empty() {
            return Err(Error::NoBranches);
        }
        for (branch, b) in self.branches.iter().enumerate() {
            for head in 0..heads {
                let (mut env, w) = b.head_env(head, heads, seq_len);
                if w < 1 {
                    return Err(Error::BranchValue { branch, parameter: "segment", value: w, head, segment: None });
                }
                for s in 0..seq_len.div_ceil(w as usize) {
                    env.set(Var::SegmentIndex, s);
                    let r = b.dilation.eval(&env);
                    if r < 1 {
                        return Err(Error::BranchValue {
                            branch,
                            parameter: "dilation",
                            value: r,
                            head,
                            segment: Some(s),
                        });
                    }
                    if r > w {
                        return Err(Error::DilationExceedsSegment {
                            branch,
                            dilation: r as usize,
                            segment: w as usize,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn key_runs(&self, query: usize, head: usize, heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        match self.combine {
            ExprCombine::SoftmaxDenominator => {
                for b in &self.branches {
                    b.push_runs(query, head, heads, seq_len, out);
                }
            }
            ExprCombine::Union => {
                let mut runs = Vec::new();
                for b in &self.branches {
                    b.push_runs(query, head, heads, seq_len, &mut runs);
                }
                let ranges = runs
                    .iter()
                    .flat_map(|run| -> Vec<(usize, usize)> {
                        if run.step == 1 {
                            vec![(run.start, run.end)]
                        } else {
                            run.iter().map(|k| (k, k + 1)).collect()
                        }
                    })
                    .collect();
                push_union(ranges, out);
            }
        }
    }
}

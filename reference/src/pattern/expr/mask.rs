//! A pattern given by a boolean mask expression.

use super::Expression;
use super::ast::{Ty, Var};
use super::error::ExprError;
use super::eval::Env;
use super::interval::{Interval, Ranges, fits_i32};
use super::scope::{Constants, Scope};
use super::tiles::{Tile, TileClass, classify, exact_budget};
use crate::error::Result;
use crate::pattern::{KeyRun, Pattern};

/// Query `q` of head `h` sees key `k` (multiplicity 1) exactly when the `mask` holds
/// for `h, q, k, n, H` and the file's constants:
///
/// ```text
///   c_qk = 1 if mask(h, q, k, n, H) else 0
/// ```
///
/// Causality and key padding are applied on top by [`crate::Spec`], as for every
/// pattern. The key runs are found by evaluating the mask for every key of every query:
/// `O(n^2 H)` evaluations per call, the cost of a specification that is written for
/// correctness first (the GPU step classifies whole tiles instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprPattern {
    mask: Expression,
}

impl ExprPattern {
    /// The pattern of `mask`; every error names the field `mask` and the token.
    pub fn new(mask: &str, constants: &Constants) -> std::result::Result<Self, ExprError> {
        Expression::new(mask, &Scope::MASK, constants, Ty::Bool)
            .and_then(Expression::without_batch_row)
            .map(|mask| ExprPattern { mask })
            .map_err(|e| e.in_field("mask"))
    }

    /// The mask expression.
    pub fn mask(&self) -> &Expression {
        &self.mask
    }

    /// Can the mask run in 32-bit arithmetic on a sequence of `seq_len` tokens with
    /// `heads` heads ([`super::c_function_i32`])? True when every node's value is an
    /// `i32` for all `q, k < seq_len`, `h < heads` ([`super::fits_i32`]); a mask with a
    /// product of positions or a large constant stays 64-bit.
    pub fn fits_i32(&self, seq_len: usize, heads: usize) -> bool {
        let last = |x: usize| i64::try_from(x.max(1) - 1).unwrap_or(i64::MAX);
        let mut at = Env::default();
        at.set(Var::SeqLen, seq_len);
        at.set(Var::Heads, heads);
        let ranges = Ranges::at(&at)
            .with(Var::Query, Interval::between(0, last(seq_len)))
            .with(Var::Key, Interval::between(0, last(seq_len)))
            .with(Var::Head, Interval::between(0, last(heads)));
        fits_i32(self.mask.root(), &ranges)
    }

    /// The exact class of the mask on `tile` for head `head` of `heads` (`n` is the
    /// tile's sequence length): [`classify`] with [`exact_budget`], so at most two
    /// evaluations per pair and usually one for the whole tile.
    pub fn classify(&self, head: usize, heads: usize, tile: &Tile) -> TileClass {
        let mut at = Env::default();
        at.set(Var::Head, head);
        at.set(Var::Heads, heads);
        at.set(Var::SeqLen, tile.seq_len());
        classify(self.mask.root(), &at, tile, exact_budget(tile.pairs()))
    }
}

impl Pattern for ExprPattern {
    /// Nothing depends on the shape: the expression was checked when it was built and
    /// its evaluation is defined for every input.
    fn validate(&self, _heads: usize, _seq_len: usize) -> Result<()> {
        Ok(())
    }

    /// One contiguous run per maximal stretch of keys where the mask holds.
    fn key_runs(&self, query: usize, head: usize, heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let mut env = Env::default();
        env.set(Var::Query, query);
        env.set(Var::Head, head);
        env.set(Var::Heads, heads);
        env.set(Var::SeqLen, seq_len);
        let mut start = None;
        for key in 0..seq_len {
            env.set(Var::Key, key);
            match (self.mask.eval(&env) != 0, start) {
                (true, None) => start = Some(key),
                (false, Some(s)) => {
                    out.push(KeyRun::range(s, key));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            out.push(KeyRun::range(s, seq_len));
        }
    }
}

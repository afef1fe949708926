//! Names: which built-in variables an expression may use where it stands, and the
//! named constants of a pattern file.
//!
//! The variables of a dilated branch are computed in a fixed order, each from the ones
//! before it, so a field may only use what is known when it is evaluated:
//!
//! ```text
//!   w = segment(h, H, n)             s = floor(q / w)       (the query's segment)
//!   r = dilation(h, H, n, s, w)      o = offset(h, H, n, s, w, r)
//!   branch mask(b, h, q, k, n, H, s, w, r)
//! ```

use super::ast::{Kind, Var};
use super::error::ExprError;
use super::lex::{KEYWORDS, is_identifier};
use std::collections::BTreeMap;

/// The named integer constants of a pattern file, shared by all its expressions.
pub type Constants = BTreeMap<String, i64>;

/// Where an expression stands: its role for messages ("a mask") and its variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    pub what: &'static str,
    pub vars: &'static [Var],
}

use Var::{Batch, Dilation, Head, Heads, Key, Query, Segment, SegmentIndex, SeqLen};

impl Scope {
    /// A mask pattern's `mask`: `b h q k n H`.
    pub const MASK: Scope = Scope { what: "a mask", vars: &[Batch, Head, Query, Key, SeqLen, Heads] };
    /// A branch's `segment` length: `h H n`.
    pub const SEGMENT: Scope = Scope { what: "a segment", vars: &[Head, Heads, SeqLen] };
    /// A branch's `dilation` rate: `h H n s w`.
    pub const DILATION: Scope = Scope { what: "a dilation", vars: &[Head, Heads, SeqLen, SegmentIndex, Segment] };
    /// A branch's `offset`: `h H n s w r`.
    pub const OFFSET: Scope =
        Scope { what: "an offset", vars: &[Head, Heads, SeqLen, SegmentIndex, Segment, Dilation] };
    /// A branch's extra `mask`: every variable.
    pub const BRANCH_MASK: Scope = Scope { what: "a branch mask", vars: &Var::ALL };
}

/// What the parser resolves identifiers against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Names<'a> {
    pub scope: &'a Scope,
    pub constants: &'a Constants,
}

impl Names<'_> {
    /// A variable of the scope, or a constant's value.
    pub fn lookup(&self, name: &str) -> Option<Kind> {
        match Var::from_name(name) {
            Some(var) => self.scope.vars.contains(&var).then_some(Kind::Var(var)),
            None => self.constants.get(name).map(|&value| Kind::Int(value)),
        }
    }

    /// The names known here, for an unknown-name message.
    pub fn known(&self) -> String {
        let vars: Vec<&str> = self.scope.vars.iter().map(|v| v.name()).collect();
        let mut known = format!("{} (in {})", vars.join(", "), self.scope.what);
        if !self.constants.is_empty() {
            let names: Vec<&str> = self.constants.keys().map(String::as_str).collect();
            known += &format!(" and the constants {}", names.join(", "));
        }
        known
    }
}

/// Reject constants that could not be written in an expression or would hide a
/// variable or keyword, naming the constant.
pub fn check_constants(constants: &Constants) -> Result<(), ExprError> {
    for name in constants.keys() {
        let reason = if !is_identifier(name) {
            "a name is a letter or '_' followed by letters, digits or '_'"
        } else if KEYWORDS.contains(&name.as_str()) {
            "this is a keyword"
        } else if Var::from_name(name).is_some() {
            "this is a variable (b, h, q, k, n, H, s, w, r)"
        } else {
            continue;
        };
        return Err(ExprError::BadConstant { name: name.clone(), reason });
    }
    Ok(())
}

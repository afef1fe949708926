//! Why an expression was rejected. Every rejection happens when the expression is
//! built, before any attention work, and names the line, column and token.

use super::ast::Span;
use std::fmt;

/// A 1-based line and column (columns count characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    /// The position of byte `offset` of `source`.
    pub fn of(source: &str, offset: usize) -> Pos {
        let before = &source[..offset.min(source.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos { line: before.matches('\n').count() + 1, col: before[line_start..].chars().count() + 1 }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// The text of the token at `at`, as error messages quote it.
pub(super) fn token_text(source: &str, at: Span) -> String {
    source.get(at.start..at.end).unwrap_or("").to_string()
}

/// What went wrong with an expression, where, and at which token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprError {
    /// The source is longer than [`super::MAX_SOURCE_BYTES`].
    TooLong { bytes: usize, limit: usize },
    /// The tree has more than [`super::MAX_NODES`] nodes.
    TooManyNodes { nodes: usize, limit: usize },
    /// Parentheses, `if`s and unary operators nest deeper than [`super::MAX_DEPTH`].
    TooDeep { at: Pos, token: String, limit: usize },
    /// A character that starts no token.
    UnexpectedChar { at: Pos, found: char },
    /// An integer literal above `i64::MAX`.
    BadLiteral { at: Pos, literal: String },
    /// The parser wanted `expected` but found `found` (a quoted token or `end of input`).
    Syntax { at: Pos, expected: &'static str, found: String },
    /// A name that is neither a variable of this expression's scope nor a constant.
    UnknownName { at: Pos, name: String, known: String },
    /// Operands of the wrong type for the operator at `token`.
    Type { at: Pos, token: String, message: String },
    /// A `/` or `%` whose divisor folds to the constant 0.
    ConstantDivisionByZero { at: Pos, token: String },
    /// An operator on constants whose exact result is outside `i64`.
    ConstantOverflow { at: Pos, token: String },
    /// A constant whose name is not an identifier, or is a keyword or a variable.
    BadConstant { name: String, reason: &'static str },
    /// `b` in a reference pattern, whose key runs do not depend on the batch row.
    BatchRow { at: Pos },
    /// An error in the field `field` of a pattern (`mask`, `offset`, ...).
    In { field: String, error: Box<ExprError> },
}

impl ExprError {
    /// The same error, said to come from the field `field`.
    pub fn in_field(self, field: impl Into<String>) -> ExprError {
        ExprError::In { field: field.into(), error: Box::new(self) }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExprError::TooLong { bytes, limit } => {
                write!(f, "expression of {bytes} bytes is longer than the limit of {limit} bytes")
            }
            ExprError::TooManyNodes { nodes, limit } => {
                write!(f, "expression of {nodes} operators and operands is larger than the limit of {limit}")
            }
            ExprError::TooDeep { at, token, limit } => {
                write!(f, "expression nested deeper than {limit} levels at {at}, token '{token}'")
            }
            ExprError::UnexpectedChar { at, found } => write!(f, "unexpected character '{found}' at {at}"),
            ExprError::BadLiteral { at, literal } => {
                write!(f, "integer literal {literal} at {at} does not fit in 64 bits (the largest is {})", i64::MAX)
            }
            ExprError::Syntax { at, expected, found } => write!(f, "expected {expected} at {at}, found {found}"),
            ExprError::UnknownName { at, name, known } => {
                write!(f, "unknown name '{name}' at {at}; known here: {known}")
            }
            ExprError::Type { at, token, message } => write!(f, "type error at {at}, token '{token}': {message}"),
            ExprError::ConstantDivisionByZero { at, token } => {
                write!(f, "division by zero at {at}: the divisor of '{token}' is the constant 0")
            }
            ExprError::ConstantOverflow { at, token } => {
                write!(f, "integer overflow at {at}: '{token}' on constants leaves the 64-bit range")
            }
            ExprError::BadConstant { name, reason } => write!(f, "constant '{name}': {reason}"),
            ExprError::BatchRow { at } => write!(
                f,
                "'b' at {at}: the batch row is not available to reference patterns yet (their key runs \
                 are shared by all batch rows); per-row key padding is Spec::key_lengths"
            ),
            ExprError::In { field, error } => write!(f, "{field}: {error}"),
        }
    }
}

impl std::error::Error for ExprError {}

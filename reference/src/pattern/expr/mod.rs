//! Pattern expressions: patterns written as integer/boolean formulas in a pattern file,
//! with no Rust (issue 21). `docs/semantics.md` ("Pattern expressions") states the
//! language; this module is its definition.
//!
//! Two patterns use them:
//! * [`ExprPattern`]: a boolean `mask` over `b h q k n H` and named constants, e.g.
//!   `abs(q - k) <= window || k < globals` (multiplicity 1 where it holds);
//! * [`ExprDilated`]: LongNet branches whose segment length, dilation rate and offset
//!   are expressions of the head, the segment index `s` and the branch parameters
//!   (`offset = "(h + s) % r"` rotates offsets per segment), each with an optional
//!   extra mask, combined by softmax denominator (multiplicities) or boolean union.
//!
//! An [`Expression`] is built once, through a pipeline in which every stage can reject
//! it with an [`ExprError`] naming the line, column and token, before any attention work:
//!
//! ```text
//!   source --length--> lex --> parse (names, nesting) --size--> check (types) --> fold --> Expression
//! ```
//!
//! Limits keep parsing and evaluation cheap and the stack shallow on any input (the
//! parser is recursive): [`MAX_SOURCE_BYTES`], [`MAX_DEPTH`] and [`MAX_NODES`].
//! Evaluation ([`eval`]) is total: wrapping `i64` arithmetic, floor division with a
//! defined result for a zero divisor; constant overflow and constant division by zero
//! are rejected by folding.
//!
//! For the GPU, [`classify`] decides whether a tile of (query, key) pairs is empty,
//! full or partial (`interval` arithmetic over the tree, refined by splitting the
//! tile), and [`TileMap`] keeps those classes for a whole sequence.
//!
//! The tree ([`Node`]) is typed by its operators, so it prints as C with the same rules
//! ([`c_function`] over [`C_PRELUDE`]: each operator of [`eval`] is one small function),
//! which is how the GPU kernels will evaluate it.

mod ast;
mod c_source;
mod c_split;
mod check;
mod compact;
mod dilated;
mod error;
mod eval;
mod fold;
mod interval;
mod lattice;
mod lattice_union;
mod lex;
mod mask;
mod parse;
mod scope;
#[cfg(test)]
mod tests;
mod tile_map;
mod tiles;
mod window;

pub use ast::{Binary, Kind, Node, Span, Ty, Unary, Var};
pub use c_source::{PRELUDE as C_PRELUDE, c_function, c_function_i32};
pub use c_split::c_split;
pub use compact::CompactBranch;
pub use dilated::{ExprBranch, ExprCombine, ExprDilated};
pub use error::{ExprError, Pos};
pub use eval::{Env, binary, div_floor, eval, mod_floor, unary};
pub use interval::{Interval, Ranges, Truth, enclose, fits_i32};
pub use mask::ExprPattern;
pub use scope::{Constants, Scope};
pub use tile_map::{Run, TileMap};
pub use tiles::{ENUMERATE_PAIRS, SMALL_BUDGET, Tile, TileClass, classify, exact_budget};
pub use window::{MAX_COEFFICIENT, MAX_CONSTANT};

/// The longest accepted source, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// The most nodes (literals, names and operators) of one expression.
pub const MAX_NODES: usize = 256;
/// The deepest nesting of parentheses, function arguments, `if` parts and unary
/// operators.
pub const MAX_DEPTH: usize = 32;

/// A parsed, type-checked and folded expression, with its source for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expression {
    source: String,
    root: Node,
}

impl Expression {
    /// Build the expression `source` of type `ty`, with the variables of `scope` and the
    /// `constants`. `scope.what` names its role in a type error ("a mask must be bool, found int").
    pub fn new(source: &str, scope: &Scope, constants: &Constants, ty: Ty) -> Result<Self, ExprError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(ExprError::TooLong { bytes: source.len(), limit: MAX_SOURCE_BYTES });
        }
        scope::check_constants(constants)?;
        let tokens = lex::lex(source)?;
        let root = parse::parse(source, &tokens, scope::Names { scope, constants })?;
        let nodes = root.size();
        if nodes > MAX_NODES {
            return Err(ExprError::TooManyNodes { nodes, limit: MAX_NODES });
        }
        check::check_root(source, &root, ty, scope.what)?;
        let root = fold::fold(source, root)?;
        Ok(Expression { source: source.to_string(), root })
    }

    /// The source text as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The folded tree.
    pub fn root(&self) -> &Node {
        &self.root
    }

    /// The value under `env` (a boolean expression gives 0 or 1).
    pub fn eval(&self, env: &Env) -> i64 {
        eval(&self.root, env)
    }

    /// Does the expression read `var`?
    pub fn reads(&self, var: Var) -> bool {
        self.position_of(var).is_some()
    }

    /// The position of the first use of `var`, for messages.
    fn position_of(&self, var: Var) -> Option<Pos> {
        fn find(node: &Node, var: Var) -> Option<Span> {
            if node.kind == Kind::Var(var) {
                return Some(node.at);
            }
            node.children().into_iter().find_map(|c| find(c, var))
        }
        find(&self.root, var).map(|at| Pos::of(&self.source, at.start))
    }

    /// Reject `b` (reference patterns have no batch row).
    fn without_batch_row(self) -> Result<Self, ExprError> {
        match self.position_of(Var::Batch) {
            Some(at) => Err(ExprError::BatchRow { at }),
            None => Ok(self),
        }
    }
}

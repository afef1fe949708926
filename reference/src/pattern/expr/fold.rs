//! Constant folding, and the rejection of what is wrong whatever the variables are.
//!
//! Bottom-up, every operator whose operands are all literals is replaced by its value
//! (the evaluator's rules, [`super::eval`]). Two things are errors instead of values:
//!
//! * a `/` or `%` whose divisor folds to 0 (whether or not the dividend is constant):
//!   the run-time rule `a / 0 = 0` exists so that evaluation is total, but a divisor
//!   that is 0 for every input is always a mistake;
//! * an operator on constants whose exact result leaves `i64` (where the run-time rule
//!   would wrap): the author wrote a number the language cannot hold.
//!
//! Both are checked in every subexpression, including the untaken branch of an `if`
//! with a constant condition. Folding never changes a value: a folded subtree has no
//! variables and its exact value is the one the evaluator computes.

use super::ast::{Binary, Kind, Node, Unary};
use super::error::{ExprError, Pos, token_text};
use super::eval::{Env, eval};

/// `node` with its constant subtrees replaced by literals.
pub(super) fn fold(source: &str, node: Node) -> Result<Node, ExprError> {
    let at = node.at;
    let fault = |constant_zero: bool| {
        let (at, token) = (Pos::of(source, at.start), token_text(source, at));
        if constant_zero {
            ExprError::ConstantDivisionByZero { at, token }
        } else {
            ExprError::ConstantOverflow { at, token }
        }
    };
    let kind = match node.kind {
        Kind::Unary(op, a) => {
            let a = fold(source, *a)?;
            if let Kind::Int(i64::MIN) = a.kind
                && op != Unary::Not
            {
                return Err(fault(false));
            }
            Kind::Unary(op, Box::new(a))
        }
        Kind::Binary(op, a, b) => {
            let (a, b) = (fold(source, *a)?, fold(source, *b)?);
            if matches!(op, Binary::Div | Binary::Mod) && b.kind == Kind::Int(0) {
                return Err(fault(true));
            }
            if let (Kind::Int(x), Kind::Int(y)) = (&a.kind, &b.kind)
                && overflows(op, *x, *y)
            {
                return Err(fault(false));
            }
            Kind::Binary(op, Box::new(a), Box::new(b))
        }
        Kind::If(c, a, b) => {
            Kind::If(Box::new(fold(source, *c)?), Box::new(fold(source, *a)?), Box::new(fold(source, *b)?))
        }
        leaf => return Ok(Node::new(leaf, at)),
    };
    let node = Node::new(kind, at);
    let constant = node.children().iter().all(|c| matches!(c.kind, Kind::Int(_) | Kind::Bool(_)));
    if !constant {
        return Ok(node);
    }
    let value = eval(&node, &Env::default());
    let kind = match node.ty() {
        super::Ty::Int => Kind::Int(value),
        super::Ty::Bool => Kind::Bool(value != 0),
    };
    Ok(Node::new(kind, at))
}

/// Whether `x op y` on integers leaves `i64` (so the evaluator would wrap).
fn overflows(op: Binary, x: i64, y: i64) -> bool {
    match op {
        Binary::Add => x.checked_add(y).is_none(),
        Binary::Sub => x.checked_sub(y).is_none(),
        Binary::Mul => x.checked_mul(y).is_none(),
        Binary::Div => x == i64::MIN && y == -1,
        _ => false,
    }
}

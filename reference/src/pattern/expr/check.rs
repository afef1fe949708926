//! The type checker: every operator gets operands of the types it takes.
//!
//! ```text
//!   - x, abs(x)                          int -> int
//!   ! x                                  bool -> bool
//!   x + y, x - y, x * y, x / y, x % y,
//!   min(x, y), max(x, y)                 int, int -> int
//!   x < y, x <= y, x > y, x >= y         int, int -> bool
//!   x == y, x != y                       t, t -> bool     (t int or bool)
//!   x && y, x || y                       bool, bool -> bool
//!   if c then x else y                   bool, t, t -> t
//! ```

use super::ast::{Binary, Kind, Node, Ty, Unary};
use super::error::{ExprError, Pos, token_text};

/// The type of `node`, or the first type error (operands before their operator).
pub(super) fn check(source: &str, node: &Node) -> Result<Ty, ExprError> {
    let fail = |message: String| ExprError::Type {
        at: Pos::of(source, node.at.start),
        token: token_text(source, node.at),
        message,
    };
    let want = |what: &str, wanted: Ty, got: Ty| {
        if got == wanted { Ok(()) } else { Err(fail(format!("{what} must be {wanted}, found {got}"))) }
    };
    match &node.kind {
        Kind::Int(_) | Kind::Var(_) => Ok(Ty::Int),
        Kind::Bool(_) => Ok(Ty::Bool),
        Kind::Unary(op, a) => {
            let a = check(source, a)?;
            let operand = if *op == Unary::Not { Ty::Bool } else { Ty::Int };
            want("the operand", operand, a)?;
            Ok(operand)
        }
        Kind::Binary(op, a, b) => {
            let (a, b) = (check(source, a)?, check(source, b)?);
            match op {
                Binary::Eq | Binary::Ne => {
                    if a != b {
                        return Err(fail(format!("both sides must have one type, found {a} and {b}")));
                    }
                }
                Binary::And | Binary::Or => {
                    want("the left operand", Ty::Bool, a)?;
                    want("the right operand", Ty::Bool, b)?;
                }
                _ => {
                    want("the left operand", Ty::Int, a)?;
                    want("the right operand", Ty::Int, b)?;
                }
            }
            Ok(op.result())
        }
        Kind::If(c, a, b) => {
            want("the condition", Ty::Bool, check(source, c)?)?;
            let (a, b) = (check(source, a)?, check(source, b)?);
            if a != b {
                return Err(fail(format!("both branches must have one type, found {a} and {b}")));
            }
            Ok(a)
        }
    }
}

/// Check `node` and that its type is `wanted` (`what` names the expression's role:
/// "a mask").
pub(super) fn check_root(source: &str, node: &Node, wanted: Ty, what: &str) -> Result<(), ExprError> {
    let got = check(source, node)?;
    if got == wanted {
        return Ok(());
    }
    Err(ExprError::Type {
        at: Pos::of(source, node.at.start),
        token: token_text(source, node.at),
        message: format!("{what} must be {wanted}, found {got}"),
    })
}

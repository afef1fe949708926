//! The integer semantics and the evaluator. Evaluation is total: every checked
//! expression has a value for every assignment of its variables, with no error and no
//! panic, because every rule below is defined for all operands:
//!
//! * integers are `i64`; `+`, `-`, `*`, unary `-` and `abs` wrap around in two's
//!   complement (`i64::MAX + 1 = i64::MIN`, `abs(i64::MIN) = i64::MIN`), what a GPU's
//!   64-bit integer unit does with unsigned arithmetic;
//! * `a / b = floor(a / b)` (rounds towards minus infinity) and
//!   `a % b = a - b * floor(a / b)` (the sign of `b`), so `-7 / 2 = -4`, `-7 % 2 = 1`,
//!   `7 % -2 = -1`;
//! * `a / 0 = 0` and `a % 0 = a`, which keeps `a == (a / b) * b + a % b` for every `b`;
//!   `i64::MIN / -1 = i64::MIN` (wraps) and `i64::MIN % -1 = 0`;
//! * booleans are the values 0 and 1 (as in C); comparisons give 0 or 1; `&&`, `||` and
//!   `if` evaluate lazily, which is unobservable since nothing can fail.
//!
//! Constant subexpressions never wrap or divide by zero: [`super::fold`] rejects them.

use super::ast::{Binary, Kind, Node, Unary, Var};

/// The values of the variables during one evaluation (unset ones are 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Env {
    values: [i64; Var::ALL.len()],
}

impl Env {
    /// The environment with `var` set to `value`.
    pub fn with(mut self, var: Var, value: i64) -> Self {
        self.values[var.slot()] = value;
        self
    }

    /// Set `var` to a position or size (always below `isize::MAX`, so it fits an `i64`).
    pub fn set(&mut self, var: Var, value: usize) {
        self.values[var.slot()] = value as i64;
    }

    pub fn get(&self, var: Var) -> i64 {
        self.values[var.slot()]
    }
}

/// `floor(a / b)`, 0 when `b = 0`, wrapping for `i64::MIN / -1`.
pub fn div_floor(a: i64, b: i64) -> i64 {
    if b == 0 {
        return 0;
    }
    let q = a.wrapping_div(b);
    // Truncation rounded towards zero; step down when the exact quotient is negative
    // and not an integer. (`q - 1` cannot wrap: a remainder needs |b| >= 2, so |q| <= 2^62.)
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q }
}

/// `a - b * floor(a / b)`, with the sign of `b`; `a` when `b = 0`.
pub fn mod_floor(a: i64, b: i64) -> i64 {
    if b == 0 {
        return a;
    }
    let r = a.wrapping_rem(b);
    if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r }
}

/// A one-operand operator on a value (booleans as 0/1).
pub fn unary(op: Unary, a: i64) -> i64 {
    match op {
        Unary::Neg => a.wrapping_neg(),
        Unary::Not => i64::from(a == 0),
        Unary::Abs => a.wrapping_abs(),
    }
}

/// A two-operand operator on values (booleans as 0/1).
pub fn binary(op: Binary, a: i64, b: i64) -> i64 {
    match op {
        Binary::Add => a.wrapping_add(b),
        Binary::Sub => a.wrapping_sub(b),
        Binary::Mul => a.wrapping_mul(b),
        Binary::Div => div_floor(a, b),
        Binary::Mod => mod_floor(a, b),
        Binary::Min => a.min(b),
        Binary::Max => a.max(b),
        Binary::Eq => i64::from(a == b),
        Binary::Ne => i64::from(a != b),
        Binary::Lt => i64::from(a < b),
        Binary::Le => i64::from(a <= b),
        Binary::Gt => i64::from(a > b),
        Binary::Ge => i64::from(a >= b),
        Binary::And => i64::from(a != 0 && b != 0),
        Binary::Or => i64::from(a != 0 || b != 0),
    }
}

/// The value of `node` under `env` (a boolean node gives 0 or 1).
pub fn eval(node: &Node, env: &Env) -> i64 {
    match &node.kind {
        Kind::Int(v) => *v,
        Kind::Bool(v) => i64::from(*v),
        Kind::Var(var) => env.get(*var),
        Kind::Unary(op, a) => unary(*op, eval(a, env)),
        Kind::Binary(Binary::And, a, b) => i64::from(eval(a, env) != 0 && eval(b, env) != 0),
        Kind::Binary(Binary::Or, a, b) => i64::from(eval(a, env) != 0 || eval(b, env) != 0),
        Kind::Binary(op, a, b) => binary(*op, eval(a, env), eval(b, env)),
        Kind::If(c, a, b) => {
            if eval(c, env) != 0 {
                eval(a, env)
            } else {
                eval(b, env)
            }
        }
    }
}

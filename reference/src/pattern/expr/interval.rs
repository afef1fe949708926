//! Interval evaluation: a sound enclosure of every value an expression takes when its
//! variables range over a box (`q ∈ [q0, q1]`, `k ∈ [k0, k1]`, the others fixed or
//! ranging too), under the evaluator's exact rules ([`super::eval`]).
//!
//! **Soundness** is the one promise: if some assignment inside the box evaluates to
//! `v`, then `lo <= v <= hi`. Each operator's rule below is proved from the operator's
//! monotonicity; bounds are computed exactly in `i128` (every `i64` sum, difference,
//! product and quotient fits) and only then brought back to `i64` by [`wrapped`], which
//! follows the evaluator's two's-complement wrap:
//!
//! * the exact results lie in `[lo, hi]` (an `i128` range); the evaluator returns each
//!   `x` minus the multiple of `2^64` that brings it into `[-2^63, 2^63)`. When `lo` and
//!   `hi` need the same multiple, so does everything between them and the image is the
//!   shifted range; otherwise the wrapped values lie on both ends of `i64` and the only
//!   interval holding them is the full range. (Dropping this widening would be the
//!   classic bug: `q + huge` near `i64::MAX` would claim a narrow, wrong range.)
//! * `+ -`: increasing/decreasing in each operand, so the extremes are the corners.
//! * `*`, and `/` by a divisor range of one sign: the real function is monotone in each
//!   operand for the other one fixed, so over a box its extremes are at the four
//!   corners; floor is monotone, so the same holds for the floored quotient. A divisor
//!   range holding 0 adds the value 0 (`a / 0 = 0`).
//! * `%` (floor modulo, the sign of the divisor): by a single divisor `m`, inside one
//!   period (`floor(a / m)` constant over the range) `a % m = a - m floor(a / m)` is `a`
//!   shifted, hence exact; across periods every residue `[0, m - 1]` (or `[m + 1, 0]`)
//!   may occur. A divisor range bounds the result by its largest magnitude, and by the
//!   dividend when signs allow (`0 <= a % m <= a` for `a >= 0 < m`). A divisor range
//!   holding 0 adds the dividend itself (`a % 0 = a`).
//! * `min max`: monotone, endpoints; `abs`: the image of the range on each side of 0;
//!   unary `-`: `[-hi, -lo]`, wrapped (`-i64::MIN` wraps to itself).
//! * comparisons, `&& || !` and `if` work on three-valued booleans ([`Truth`]): a
//!   comparison is `Always` when it holds for every pair of values of the two ranges,
//!   `Never` when for none; an `if` whose condition is `Unknown` can take either
//!   branch, so its range is the hull of both.
//!
//! **Precision.** The enclosure is the exact image of the box when every variable occurs
//! once (a sum, difference, `abs`, `min`, `max` or division by a positive constant of
//! independent ranges hits every integer between its bounds), and a comparison or a
//! `&&`/`||` of operands over *disjoint* variables is then decided exactly. It is not
//! exact when a variable repeats (`q - q` encloses `[q0 - q1, q1 - q0]`) or a modulo
//! straddles a period; [`super::tiles`] refines those by splitting the box.

use super::ast::{Binary, Kind, Node, Unary, Var};
use super::eval::Env;

/// The integers `lo ..= hi` (never empty: `lo <= hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    lo: i64,
    hi: i64,
}

/// What a boolean expression does on a box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// True for every assignment of the box.
    Always,
    /// False for every assignment.
    Never,
    /// Not decided by the enclosure (mixed, or the enclosure is too coarse to tell).
    Unknown,
}

impl Interval {
    /// Every `i64`.
    pub const FULL: Interval = Interval { lo: i64::MIN, hi: i64::MAX };
    /// The booleans' values 0 and 1, undecided.
    const BOTH: Interval = Interval { lo: 0, hi: 1 };

    /// The integers between `a` and `b`, in either order (total: no empty interval).
    pub fn between(a: i64, b: i64) -> Interval {
        Interval { lo: a.min(b), hi: a.max(b) }
    }

    /// The single value `v`.
    pub fn point(v: i64) -> Interval {
        Interval { lo: v, hi: v }
    }

    pub fn lo(self) -> i64 {
        self.lo
    }

    pub fn hi(self) -> i64 {
        self.hi
    }

    pub fn contains(self, v: i64) -> bool {
        self.lo <= v && v <= self.hi
    }

    /// A boolean node's enclosure read as a truth value (nonzero is true, as in C).
    pub fn truth(self) -> Truth {
        if !self.contains(0) {
            Truth::Always
        } else if self == Interval::point(0) {
            Truth::Never
        } else {
            Truth::Unknown
        }
    }

    fn hull(self, other: Interval) -> Interval {
        Interval { lo: self.lo.min(other.lo), hi: self.hi.max(other.hi) }
    }

    fn of_truth(t: Truth) -> Interval {
        match t {
            Truth::Always => Interval::point(1),
            Truth::Never => Interval::point(0),
            Truth::Unknown => Interval::BOTH,
        }
    }
}

/// The box: one interval per variable (see [`Var::slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges {
    ranges: [Interval; Var::ALL.len()],
}

impl Ranges {
    /// The point box of `env` (every variable fixed at its value there).
    pub fn at(env: &Env) -> Ranges {
        Ranges { ranges: Var::ALL.map(|v| Interval::point(env.get(v))) }
    }

    /// The box with `var` ranging over `range`.
    pub fn with(mut self, var: Var, range: Interval) -> Ranges {
        self.ranges[var.slot()] = range;
        self
    }

    pub fn get(&self, var: Var) -> Interval {
        self.ranges[var.slot()]
    }
}

/// The values `{ wrap(x) : lo <= x <= hi }` of exact results, as one interval (see the
/// module docs): the shifted range when `lo` and `hi` wrap by the same multiple of
/// `2^64`, otherwise the full range.
fn wrapped(lo: i128, hi: i128) -> Interval {
    const HALF: i128 = 1 << 63;
    let turn = |x: i128| (x + HALF).div_euclid(HALF << 1);
    if turn(lo) != turn(hi) {
        return Interval::FULL;
    }
    let shift = turn(lo) * (HALF << 1);
    Interval { lo: (lo - shift) as i64, hi: (hi - shift) as i64 }
}

/// The smallest interval (wrapped) holding the exact values `xs`.
fn span(xs: [i128; 4]) -> Interval {
    wrapped(*xs.iter().min().expect("four values"), *xs.iter().max().expect("four values"))
}

/// Exact `floor(x / y)` for `y != 0` (no overflow in `i128` for `i64` operands).
fn floor_div(x: i128, y: i128) -> i128 {
    if y > 0 { x.div_euclid(y) } else { (-x).div_euclid(-y) }
}

/// `a / d` with `d` a range of one sign, `0` excluded: the quotient at the corners.
fn div_signed(a: Interval, d: Interval) -> Interval {
    let (a0, a1, d0, d1) = (a.lo as i128, a.hi as i128, d.lo as i128, d.hi as i128);
    span([floor_div(a0, d0), floor_div(a0, d1), floor_div(a1, d0), floor_div(a1, d1)])
}

/// `a % d` with `d` a range of one sign, `0` excluded (the rules of the module docs).
fn mod_signed(a: Interval, d: Interval) -> Interval {
    if d.lo == d.hi {
        let m = d.lo as i128;
        let period = floor_div(a.lo as i128, m);
        if period == floor_div(a.hi as i128, m) {
            return wrapped(a.lo as i128 - m * period, a.hi as i128 - m * period);
        }
    }
    if d.lo > 0 {
        // 0 <= a % m <= m - 1, and a % m = a for 0 <= a < m (so <= a for a >= 0).
        match (a.lo >= 0, a.hi < d.lo) {
            (true, true) => a,
            (true, false) => Interval { lo: 0, hi: a.hi.min(d.hi - 1) },
            _ => Interval { lo: 0, hi: d.hi - 1 },
        }
    } else {
        // m + 1 <= a % m <= 0, and a % m = a for m < a <= 0.
        match (a.hi <= 0, a.lo > d.hi) {
            (true, true) => a,
            (true, false) => Interval { lo: a.lo.max(d.lo + 1), hi: 0 },
            _ => Interval { lo: d.lo + 1, hi: 0 },
        }
    }
}

/// `a / d` or `a % d` over any divisor range: the hull of its negative part, its
/// positive part and, when it holds 0, the zero-divisor value (`0`, or `a`).
fn divide(a: Interval, d: Interval, modulo: bool) -> Interval {
    let part = |d: Interval| if modulo { mod_signed(a, d) } else { div_signed(a, d) };
    let mut parts = [None, None, None];
    if d.lo < 0 {
        parts[0] = Some(part(Interval { lo: d.lo, hi: d.hi.min(-1) }));
    }
    if d.hi > 0 {
        parts[1] = Some(part(Interval { lo: d.lo.max(1), hi: d.hi }));
    }
    if d.contains(0) {
        parts[2] = Some(if modulo { a } else { Interval::point(0) });
    }
    parts.into_iter().flatten().reduce(Interval::hull).expect("a divisor range is not empty")
}

/// Comparison of two ranges: decided when every pair of values agrees.
fn compare(op: Binary, a: Interval, b: Interval) -> Truth {
    let decide = |always: bool, never: bool| match (always, never) {
        (true, _) => Truth::Always,
        (_, true) => Truth::Never,
        _ => Truth::Unknown,
    };
    let equal = a.lo == a.hi && a == b;
    let disjoint = a.hi < b.lo || b.hi < a.lo;
    match op {
        Binary::Eq => decide(equal, disjoint),
        Binary::Ne => decide(disjoint, equal),
        Binary::Lt => decide(a.hi < b.lo, a.lo >= b.hi),
        Binary::Le => decide(a.hi <= b.lo, a.lo > b.hi),
        Binary::Gt => decide(a.lo > b.hi, a.hi <= b.lo),
        Binary::Ge => decide(a.lo >= b.hi, a.hi < b.lo),
        _ => unreachable!("{op:?} is not a comparison"),
    }
}

fn and(a: Truth, b: Truth) -> Truth {
    match (a, b) {
        (Truth::Never, _) | (_, Truth::Never) => Truth::Never,
        (Truth::Always, Truth::Always) => Truth::Always,
        _ => Truth::Unknown,
    }
}

fn not(a: Truth) -> Truth {
    match a {
        Truth::Always => Truth::Never,
        Truth::Never => Truth::Always,
        Truth::Unknown => Truth::Unknown,
    }
}

/// An enclosure of every value of `node` on the box `ranges` (a boolean node gives a
/// sub-interval of `[0, 1]`).
pub fn enclose(node: &Node, ranges: &Ranges) -> Interval {
    match &node.kind {
        Kind::Int(v) => Interval::point(*v),
        Kind::Bool(v) => Interval::point(i64::from(*v)),
        Kind::Var(var) => ranges.get(*var),
        Kind::Unary(op, a) => {
            let a = enclose(a, ranges);
            let (lo, hi) = (a.lo as i128, a.hi as i128);
            match op {
                Unary::Not => Interval::of_truth(not(a.truth())),
                Unary::Neg => wrapped(-hi, -lo),
                Unary::Abs if lo >= 0 => a,
                Unary::Abs if hi <= 0 => wrapped(-hi, -lo),
                Unary::Abs => wrapped(0, hi.max(-lo)),
            }
        }
        Kind::Binary(op, a, b) => {
            let (a, b) = (enclose(a, ranges), enclose(b, ranges));
            let (a0, a1, b0, b1) = (a.lo as i128, a.hi as i128, b.lo as i128, b.hi as i128);
            match op {
                Binary::Add => wrapped(a0 + b0, a1 + b1),
                Binary::Sub => wrapped(a0 - b1, a1 - b0),
                Binary::Mul => span([a0 * b0, a0 * b1, a1 * b0, a1 * b1]),
                Binary::Div => divide(a, b, false),
                Binary::Mod => divide(a, b, true),
                Binary::Min => Interval { lo: a.lo.min(b.lo), hi: a.hi.min(b.hi) },
                Binary::Max => Interval { lo: a.lo.max(b.lo), hi: a.hi.max(b.hi) },
                Binary::And => Interval::of_truth(and(a.truth(), b.truth())),
                Binary::Or => Interval::of_truth(not(and(not(a.truth()), not(b.truth())))),
                cmp => Interval::of_truth(compare(*cmp, a, b)),
            }
        }
        Kind::If(c, a, b) => match enclose(c, ranges).truth() {
            Truth::Always => enclose(a, ranges),
            Truth::Never => enclose(b, ranges),
            Truth::Unknown => enclose(a, ranges).hull(enclose(b, ranges)),
        },
    }
}

/// Does every node of `node` take only `i32` values on the box `ranges`? Then evaluating
/// it in 32-bit arithmetic ([`super::c_function_i32`]) gives the evaluator's values: by
/// induction over the tree every operand and every exact result is an `i32` (the
/// enclosures are sound, and a value that wrapped in `i64` has a full-range enclosure,
/// `wrapped`), so no 32-bit operation wraps, and `i32::MIN / -1` cannot occur (its
/// result does not fit). Conservative: an `if` branch or a short-circuited operand that
/// never runs on the box is checked too.
pub fn fits_i32(node: &Node, ranges: &Ranges) -> bool {
    let e = enclose(node, ranges);
    let fits = e.lo >= i64::from(i32::MIN) && e.hi <= i64::from(i32::MAX);
    fits && match &node.kind {
        Kind::Int(_) | Kind::Bool(_) | Kind::Var(_) => true,
        Kind::Unary(_, a) => fits_i32(a, ranges),
        Kind::Binary(_, a, b) => fits_i32(a, ranges) && fits_i32(b, ranges),
        Kind::If(c, a, b) => [c, a, b].into_iter().all(|x| fits_i32(x, ranges)),
    }
}

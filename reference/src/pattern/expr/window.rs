//! Recognising a mask that is literally a sliding window, so that the GPU runs it as its
//! built-in window (one interval of keys per query, no per-element expression).
//!
//! A mask is a window when it is a conjunction (`&&`) of comparisons, each between
//! affine forms in `q` and `k` whose difference is `m (q - k) + c` (`m != 0`), or between
//! `abs` of such a form and a constant. Each conjunct then bounds `d = q - k`:
//!
//! ```text
//!   m d + c <= 0   <=>   d <= floor(-c / m)   (m > 0),   d >= ceil(-c / m)   (m < 0)
//!   x < y  <=>  x - y + 1 <= 0,   x >= y  <=>  y - x <= 0,   x == y  <=>  both <=,
//!   abs(e) <= C  <=>  e <= C  &&  -e <= C
//! ```
//!
//! and their intersection `lo <= d <= hi` is the window `k in [q - hi, q - lo]`, i.e.
//! `left = hi`, `right = -lo` (a side without a bound reaches the whole sequence). Only
//! windows that hold `d = 0` (`lo <= 0 <= hi`) are returned: the built-in window has
//! non-negative reaches.
//!
//! **Exactness.** The evaluator wraps `i64` arithmetic; the lowering is exact only where
//! no sub-expression wraps. Every sub-expression's form is kept with coefficients of
//! magnitude at most [`MAX_COEFFICIENT`] and a constant of at most [`MAX_CONSTANT`], so
//! for positions below `2^31` (the GPU's limit) every value stays below `2^49`: the form
//! is what the evaluator computes. A form that leaves those bounds is not recognised.

use super::ast::{Binary, Kind, Node, Unary, Var};
use super::eval::div_floor;
use super::mask::ExprPattern;

/// The largest coefficient magnitude of `q` or `k` in any sub-expression's form.
pub const MAX_COEFFICIENT: i64 = 1 << 16;
/// The largest constant magnitude of any sub-expression's form.
pub const MAX_CONSTANT: i64 = 1 << 40;

impl ExprPattern {
    /// The mask as a sliding window `(left, right)`: `q` sees `k` exactly when
    /// `q - left <= k <= q + right`, for every head and length and positions below
    /// `2^31`; `usize::MAX` for a side the mask does not bound. None when the mask is not
    /// literally a window (module docs).
    pub fn as_window(&self) -> Option<(usize, usize)> {
        let (mut lo, mut hi) = (i64::MIN, i64::MAX);
        for part in self.mask().root().conjuncts() {
            for (m, c) in bounds(part)? {
                // m d + c <= 0 with m != 0.
                if m > 0 {
                    hi = hi.min(div_floor(-c, m));
                } else {
                    lo = lo.max(-div_floor(-c, -m));
                }
            }
        }
        let reach = |x: i64| if x == i64::MAX { usize::MAX } else { x as usize };
        (lo <= 0 && hi >= 0).then(|| (reach(hi), reach(lo.checked_neg().unwrap_or(i64::MAX))))
    }
}

/// `a q + b k + c`, within the module's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Affine {
    q: i64,
    k: i64,
    c: i64,
}

impl Affine {
    fn checked(self) -> Option<Affine> {
        // `unsigned_abs`: `i64::MIN` (a literal or folded constant) has no `abs`.
        let small = |x: i64| x.unsigned_abs() <= MAX_COEFFICIENT as u64;
        (small(self.q) && small(self.k) && self.c.unsigned_abs() <= MAX_CONSTANT as u64).then_some(self)
    }

    fn constant(self) -> Option<i64> {
        (self.q == 0 && self.k == 0).then_some(self.c)
    }

    fn scaled(self, s: i64) -> Option<Affine> {
        Affine { q: self.q.checked_mul(s)?, k: self.k.checked_mul(s)?, c: self.c.checked_mul(s)? }.checked()
    }

    fn plus(self, o: Affine) -> Option<Affine> {
        Affine { q: self.q + o.q, k: self.k + o.k, c: self.c + o.c }.checked()
    }
}

/// The form of an integer node made of `q`, `k`, literals, `+`, `-` and products with a
/// constant; None for anything else (other variables, division, modulo, `min`, `max`,
/// `abs`, `if`).
fn affine(node: &Node) -> Option<Affine> {
    match &node.kind {
        Kind::Int(v) => Affine { q: 0, k: 0, c: *v }.checked(),
        Kind::Var(Var::Query) => Some(Affine { q: 1, k: 0, c: 0 }),
        Kind::Var(Var::Key) => Some(Affine { q: 0, k: 1, c: 0 }),
        Kind::Unary(Unary::Neg, a) => affine(a)?.scaled(-1),
        Kind::Binary(Binary::Add, a, b) => affine(a)?.plus(affine(b)?),
        Kind::Binary(Binary::Sub, a, b) => affine(a)?.plus(affine(b)?.scaled(-1)?),
        Kind::Binary(Binary::Mul, a, b) => {
            let (a, b) = (affine(a)?, affine(b)?);
            match (a.constant(), b.constant()) {
                (Some(s), _) => b.scaled(s),
                (_, Some(s)) => a.scaled(s),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A conjunct as constraints `m d + c <= 0` on `d = q - k` (`m != 0`); an empty list for
/// a conjunct that always holds; None when it is not of the module's forms (or never
/// holds: no window).
fn bounds(node: &Node) -> Option<Vec<(i64, i64)>> {
    match &node.kind {
        Kind::Bool(true) => Some(Vec::new()),
        Kind::Binary(op, a, b) => {
            if let Some(list) = abs_bound(*op, a, b) {
                return Some(list);
            }
            // x <= y as (x - y), x < y as (x - y + 1), x >= y as (y - x), x > y as (y - x + 1).
            let (x, y) = (affine(a)?, affine(b)?);
            let le = |x: Affine, y: Affine, strict: bool| {
                x.plus(y.scaled(-1)?)?.plus(Affine { q: 0, k: 0, c: strict as i64 })
            };
            let forms = match op {
                Binary::Le => vec![le(x, y, false)?],
                Binary::Lt => vec![le(x, y, true)?],
                Binary::Ge => vec![le(y, x, false)?],
                Binary::Gt => vec![le(y, x, true)?],
                Binary::Eq => vec![le(x, y, false)?, le(y, x, false)?],
                _ => return None,
            };
            constraints(forms)
        }
        _ => None,
    }
}

/// `f <= 0` as a constraint on `d`: `Some(Some((m, c)))` for `f = m d + c`, `Some(None)`
/// for a constant `f` that holds (no constraint), None for a constant that fails or a
/// form that is not in `d` alone.
fn constraint(f: Affine) -> Option<Option<(i64, i64)>> {
    match f.constant() {
        Some(c) => (c <= 0).then_some(None),
        None => (f.q == -f.k).then_some(Some((f.q, f.c))),
    }
}

/// The constraints of several forms `f <= 0` ([`constraint`]), or None if one fails.
fn constraints(forms: impl IntoIterator<Item = Affine>) -> Option<Vec<(i64, i64)>> {
    let all = forms.into_iter().map(constraint).collect::<Option<Vec<_>>>()?;
    Some(all.into_iter().flatten().collect())
}

/// `abs(e) <= C`, `abs(e) < C`, `C >= abs(e)`, `C > abs(e)` with `C` a constant: the two
/// constraints `e <= C'` and `-e <= C'` (`C' = C`, or `C - 1` when strict).
fn abs_bound(op: Binary, a: &Node, b: &Node) -> Option<Vec<(i64, i64)>> {
    let (inner, limit, strict) = match (op, &a.kind, &b.kind) {
        (Binary::Le | Binary::Lt, Kind::Unary(Unary::Abs, e), _) => (e, affine(b)?.constant()?, op == Binary::Lt),
        (Binary::Ge | Binary::Gt, _, Kind::Unary(Unary::Abs, e)) => (e, affine(a)?.constant()?, op == Binary::Gt),
        _ => return None,
    };
    let e = affine(inner)?;
    let limit = Affine { q: 0, k: 0, c: limit - strict as i64 };
    let up = e.plus(limit.scaled(-1)?)?;
    let down = e.scaled(-1)?.plus(limit.scaled(-1)?)?;
    constraints([up, down])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::expr::{Constants, Env};

    /// Does `mask` hold exactly for `q - left <= k <= q + right` over every pair of a
    /// 96-token sequence (the evaluator against the window rule, pair by pair)?
    fn is_that_window(p: &ExprPattern, (left, right): (usize, usize)) -> bool {
        (0..96i64).all(|q| {
            (0..96i64).all(|k| {
                let env =
                    Env::default().with(Var::Query, q).with(Var::Key, k).with(Var::SeqLen, 96).with(Var::Heads, 4);
                let window = q - k <= left.min(1000) as i64 && k - q <= right.min(1000) as i64;
                (p.mask().eval(&env) != 0) == window
            })
        })
    }

    #[test]
    fn windows_are_recognised_with_their_reaches() {
        let constants = Constants::from([("W".to_string(), 12)]);
        for (mask, window) in [
            ("k <= q && q - k < W", (11, 0)),
            ("abs(q - k) <= 3", (3, 3)),
            ("W > abs(k - q)", (11, 11)),
            ("q - 5 <= k && k <= q + 7", (5, 7)),
            ("2 * (q - k) <= 9 && k - q < 3 && true", (4, 2)),
            ("-(k - q) * 3 <= 20 && q >= k", (6, 0)),
            ("(q - k) * -3 >= -20 && k <= q + 2", (6, 2)),
            ("q >= k", (usize::MAX, 0)),
            ("k == q", (0, 0)),
            ("k + 1 > q - 40 && q - 1 <= k + 40", (40, usize::MAX)),
        ] {
            let p = ExprPattern::new(mask, &constants).unwrap();
            assert_eq!(p.as_window(), Some(window), "{mask}");
            assert!(is_that_window(&p, window), "{mask}: the evaluator disagrees with {window:?}");
        }
    }

    #[test]
    fn other_masks_are_not_windows() {
        for mask in [
            "q % 4 == k % 4",
            "q - k <= 3 || k > q",
            "h + q - k <= 2",
            "q - k != 0",
            "q + k <= 5",
            "k < q - 1",
            "q * k <= 3",
            "q - k <= n",
            "k <= q && q - k < 5 && k > q",
            "min(q, k) == k",
            "q * 100000 - k * 100000 <= 0",
            "q - k <= 2000000000000",
            "!(q < k)",
            // A constant of i64::MIN (folded): beyond the bounds, and without an `abs`.
            "q - k >= -9223372036854775807 - 1",
            "k <= q && q - k >= -9223372036854775807 - 1",
        ] {
            let p = ExprPattern::new(mask, &Constants::new()).unwrap();
            assert_eq!(p.as_window(), None, "{mask}");
        }
    }
}

//! A mask expression that is literally one LongNet branch, recognised, so that it runs
//! as one (the GPU's compact launches: `n w / r^2` work per head instead of the `n w` of
//! a mask tested over every tile of a segment).
//!
//! The mask must be the conjunction, in any order and nesting, of exactly
//!
//! ```text
//!   q / W == k / W            (same segment; either side first)
//!   R(q) == O                 (the query's residue; either side first)
//!   R(k) == O                 (the key's, with the same O)
//! ```
//!
//! with literal integers `1 <= R <= W`, `R(x)` either `x % W % R` or `x % R` (the same
//! when `R` divides `W`: only then is the short form accepted), and `O` an expression of
//! `h`, `H`, `n` whose value is always in `0..R`: a literal `0 <= c < R`, or `X % R`
//! (floor modulo, never outside `0..R`). Then `q % W % R == O(h)` is the branch's "the
//! query is kept with offset `O(h)`", and the same for the key inside the query's
//! segment: the mask's keys are exactly those of the `dilated_expr` branch
//! `segment = W, dilation = R, offset = O`. Anything else (another conjunct, a residue
//! that may fall outside `0..R`, `R > W`) is not recognised and stays a mask.

use super::ast::{Binary, Kind, Node, Unary, Var};
use super::dilated::{ExprBranch, ExprCombine, ExprDilated};
use super::mask::ExprPattern;
use super::scope::Constants;

impl ExprPattern {
    /// The mask as one dilated branch, if it is literally one (module docs).
    pub fn as_dilated(&self) -> Option<ExprDilated> {
        let [a, b, c] = self.mask().root().conjuncts()[..] else { return None };
        let (w, r, offset) = lattice_branch([a, b, c], false)?;
        let branch = ExprBranch::new(&w.to_string(), &r.to_string(), &offset, None, &Constants::new()).ok()?;
        Some(ExprDilated { branches: vec![branch], combine: ExprCombine::SoftmaxDenominator })
    }
}

/// The three conjuncts `q / W == k / W`, `R(q) == O` and `R(k) == O`, in any order, as
/// `(W, R, O's source)`: both residues with the same `R`, one of the query and one of the
/// key, and the same offset, whose value is always in `0..R`. With `segment_index`, each
/// side's offset may read its own position as `x / W` (printed as `s`, the segment
/// index, which both sides share inside the segment); without, it reads neither position.
pub(super) fn lattice_branch([a, b, c]: [&Node; 3], segment_index: bool) -> Option<(i64, i64, String)> {
    // The same-segment test may be any of the three; the residues are the other two.
    [(a, b, c), (b, a, c), (c, a, b)].into_iter().find_map(|(segment, x, y)| {
        let w = same_segment(segment)?;
        let ((vx, rx), ox) = residue(x, w, segment_index)?;
        let ((vy, ry), oy) = residue(y, w, segment_index)?;
        let both = matches!((vx, vy), (Var::Query, Var::Key) | (Var::Key, Var::Query));
        (both && rx == ry && ox == oy).then_some((w, rx, ox))
    })
}

fn int(node: &Node) -> Option<i64> {
    match node.kind {
        Kind::Int(v) => Some(v),
        _ => None,
    }
}

fn var(node: &Node) -> Option<Var> {
    match node.kind {
        Kind::Var(v) => Some(v),
        _ => None,
    }
}

/// `x / W` with `x` a variable: (x, W).
fn div_of(node: &Node) -> Option<(Var, i64)> {
    match &node.kind {
        Kind::Binary(Binary::Div, x, w) => Some((var(x)?, int(w)?)),
        _ => None,
    }
}

/// `q / W == k / W` (either order, `W >= 1`): W.
pub(super) fn same_segment(node: &Node) -> Option<i64> {
    let Kind::Binary(Binary::Eq, a, b) = &node.kind else { return None };
    let ((va, wa), (vb, wb)) = (div_of(a)?, div_of(b)?);
    let pair = matches!((va, vb), (Var::Query, Var::Key) | (Var::Key, Var::Query));
    (pair && wa == wb && wa >= 1).then_some(wa)
}

/// `x % W % R` or (when `R` divides `W`) `x % R`, for `x` the query or the key and
/// `1 <= R <= w`: (x, R).
fn residue_of(node: &Node, w: i64) -> Option<(Var, i64)> {
    let Kind::Binary(Binary::Mod, inner, r) = &node.kind else { return None };
    let r = int(r)?;
    if !(1..=w).contains(&r) {
        return None;
    }
    let x = match &inner.kind {
        Kind::Var(x) if w % r == 0 => *x,
        Kind::Binary(Binary::Mod, x, ww) if int(ww)? == w => var(x)?,
        _ => return None,
    };
    matches!(x, Var::Query | Var::Key).then_some((x, r))
}

/// `R(x) == O` or `O == R(x)`, `O` in `0..R`: ((x, R), O's source), `O` reading the
/// positions only as `x / W` (printed `s`) with `segment_index`, else not at all.
fn residue(node: &Node, w: i64, segment_index: bool) -> Option<((Var, i64), String)> {
    let Kind::Binary(Binary::Eq, a, b) = &node.kind else { return None };
    let ((x, r), o) = match (residue_of(a, w), residue_of(b, w)) {
        (Some(r), _) => (r, b.as_ref()),
        (None, Some(r)) => (r, a.as_ref()),
        _ => return None,
    };
    if !in_range(o, r) {
        return None;
    }
    Some(((x, r), print_offset(o, segment_index.then_some((x, w)))?))
}

/// Is `o` in `0..r` for every value of its variables? A literal in range, or `X % r`.
fn in_range(o: &Node, r: i64) -> bool {
    match &o.kind {
        Kind::Int(c) => (0..r).contains(c),
        Kind::Binary(Binary::Mod, _, d) => int(d) == Some(r),
        _ => false,
    }
}

/// `node` as an offset's source text, fully parenthesised (so equal texts are equal
/// trees), with `s` for `x / W` where `segment` is `Some((x, W))` (the segment index,
/// read from the position `x`); None where it reads `q` or `k` in any other way.
fn print_offset(node: &Node, segment: Option<(Var, i64)>) -> Option<String> {
    if segment.is_some() && div_of(node) == segment {
        return Some("s".into());
    }
    let p = |n: &Node| print_offset(n, segment);
    Some(match &node.kind {
        Kind::Int(v) => format!("({v})"),
        Kind::Bool(v) => v.to_string(),
        Kind::Var(Var::Query | Var::Key) => return None,
        Kind::Var(v) => v.name().to_string(),
        Kind::Unary(Unary::Neg, a) => format!("(-{})", p(a)?),
        Kind::Unary(Unary::Not, a) => format!("(!{})", p(a)?),
        Kind::Unary(Unary::Abs, a) => format!("abs({})", p(a)?),
        Kind::Binary(op @ (Binary::Min | Binary::Max), a, b) => format!("{}({}, {})", op.symbol(), p(a)?, p(b)?),
        Kind::Binary(op, a, b) => format!("({} {} {})", p(a)?, op.symbol(), p(b)?),
        Kind::If(c, a, b) => format!("(if {} then {} else {})", p(c)?, p(a)?, p(b)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{Dilated, Pattern, key_counts};

    fn mask(text: &str) -> ExprPattern {
        ExprPattern::new(text, &Constants::new()).unwrap()
    }

    #[test]
    fn longnet_branches_written_as_masks_are_recognised_with_the_same_keys() {
        let cases = [
            ("q / 16 == k / 16 && q % 4 == h % 4 && k % 4 == h % 4", Some((16, 4))),
            ("k % 16 % 3 == (h + 1) % 3 && k / 16 == q / 16 && (h + 1) % 3 == q % 16 % 3", Some((16, 3))),
            ("(q % 12 % 5 == 2 && q / 12 == k / 12) && k % 12 % 5 == 2", Some((12, 5))),
            (
                "q / 8 == k / 8 && q % 8 % 2 == (h / ((H + 1) / 2)) % 2 && k % 8 % 2 == (h / ((H + 1) / 2)) % 2",
                Some((8, 2)),
            ),
            // Not one branch: R does not divide W in the short form, O may leave 0..R,
            // offsets differ, an extra conjunct, R > W, the same variable twice.
            ("q / 10 == k / 10 && q % 4 == h % 4 && k % 4 == h % 4", None),
            ("q / 16 == k / 16 && q % 4 == h && k % 4 == h", None),
            ("q / 16 == k / 16 && q % 4 == h % 4 && k % 4 == (h + 1) % 4", None),
            ("q / 16 == k / 16 && q % 4 == h % 4 && k % 4 == h % 4 && k <= q", None),
            ("q / 4 == k / 4 && q % 4 % 8 == h % 8 && k % 4 % 8 == h % 8", None),
            ("q / 16 == k / 16 && q % 4 == h % 4 && q % 4 == h % 4", None),
            ("q / 16 == q / 16 && q % 4 == h % 4 && k % 4 == h % 4", None),
        ];
        for (text, want) in cases {
            let m = mask(text);
            let got = m.as_dilated();
            assert_eq!(
                got.as_ref().map(|d| d.compact_branches(3, 40).unwrap()[0].segment),
                want.map(|w| w.0),
                "{text}"
            );
            let Some(d) = got else { continue };
            assert_eq!(d.compact_branches(3, 40).unwrap()[0].dilation, want.unwrap().1, "{text}");
            for (heads, n) in [(1, 1), (3, 40), (5, 53)] {
                for h in 0..heads {
                    for q in 0..n {
                        assert_eq!(
                            key_counts(&m, q, h, heads, n),
                            key_counts(&d, q, h, heads, n),
                            "{text}: h {h} q {q}"
                        );
                    }
                }
            }
        }
        // The bench's LongNet branch: the built-in's keys too.
        let d = mask("q / 64 == k / 64 && q % 4 == h % 4 && k % 4 == h % 4").as_dilated().unwrap();
        let builtin = Dilated::longnet(&[(64, 4)]);
        for q in 0..200 {
            for h in 0..6 {
                assert_eq!(key_counts(&d, q, h, 6, 200), key_counts(&builtin, q, h, 6, 200));
            }
        }
        assert!(d.validate(6, 200).is_ok());
    }
}

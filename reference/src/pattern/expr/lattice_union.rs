//! A mask expression that is literally a union of nested LongNet branches, recognised, so
//! that it runs as the `dilated_expr` union it equals (on the GPU: disjoint compact
//! pieces, `n w / r^2` work per branch, instead of a mask over every tile of a segment).
//!
//! The mask must be, optionally under its own causal test `k <= q` (or `q >= k`), a
//! disjunction (`||`, any nesting) of at least two branches, each either
//!
//! ```text
//!   q / W == k / W                                  (a branch of dilation 1)
//!   q / W == k / W && R(q) == O(q) && R(k) == O(k)  (any order, as `as_dilated` reads it)
//! ```
//!
//! where `R(x)` is `x % W % R` or `x % R` (`R | W`), and the offset `O` may read the
//! segment index as `x / W` on each side (`O(q)` with `q / W`, `O(k)` with `k / W`: the
//! same expression once each is written as `s`) and otherwise `h`, `H`, `n`; its value
//! is always in `0..R` (a literal, or `X % R`). Inside the segment both sides' `x / W` are
//! `q`'s segment index, so the branch is the `dilated_expr` branch `segment = W,
//! dilation = R, offset = O(s)`. The branches, ordered by segment then dilation, must nest
//! ([`ExprDilated::is_nested_union`]): a union that does not nest gains nothing from the
//! form and stays a mask. The causal test is returned apart: it is the call's causality.

use super::ast::{Binary, Kind, Node, Var};
use super::dilated::{ExprBranch, ExprCombine, ExprDilated};
use super::lattice::{lattice_branch, same_segment};
use super::mask::ExprPattern;
use super::scope::Constants;

impl ExprPattern {
    /// The mask as a union of nested dilated branches and whether it holds the causal test
    /// `k <= q` as a conjunct, if it is literally one (module docs).
    pub fn as_nested_union(&self) -> Option<(ExprDilated, bool)> {
        let conjuncts = self.mask().root().conjuncts();
        let causal = conjuncts.iter().filter(|c| is_causal(c)).count();
        let rest: Vec<&Node> = conjuncts.into_iter().filter(|c| !is_causal(c)).collect();
        let (&[body], 0 | 1) = (&rest[..], causal) else { return None };
        let mut branches = disjuncts(body).into_iter().map(branch).collect::<Option<Vec<_>>>()?;
        if branches.len() < 2 {
            return None;
        }
        branches.sort_by_key(|b| (b.0, b.1));
        let branches = branches
            .iter()
            .map(|(w, r, o)| ExprBranch::new(&w.to_string(), &r.to_string(), o, None, &Constants::new()).ok())
            .collect::<Option<Vec<_>>>()?;
        let union = ExprDilated { branches, combine: ExprCombine::Union };
        union.is_nested_union().then_some((union, causal == 1))
    }
}

/// `k <= q` or `q >= k`.
fn is_causal(node: &Node) -> bool {
    let is = |n: &Node, v: Var| n.kind == Kind::Var(v);
    match &node.kind {
        Kind::Binary(Binary::Le, a, b) => is(a, Var::Key) && is(b, Var::Query),
        Kind::Binary(Binary::Ge, a, b) => is(a, Var::Query) && is(b, Var::Key),
        _ => false,
    }
}

/// The operands of a (nested) `||`.
fn disjuncts(node: &Node) -> Vec<&Node> {
    match &node.kind {
        Kind::Binary(Binary::Or, a, b) => {
            let mut out = disjuncts(a);
            out.extend(disjuncts(b));
            out
        }
        _ => vec![node],
    }
}

/// One branch as `(W, R, offset source)`.
fn branch(node: &Node) -> Option<(i64, i64, String)> {
    match node.conjuncts()[..] {
        [segment] => Some((same_segment(segment)?, 1, "0".into())),
        [a, b, c] => lattice_branch([a, b, c], true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::key_counts;

    fn mask(text: &str, constants: &[(&str, i64)]) -> ExprPattern {
        let c: Constants =
            constants.iter().map(|&(n, v)| (n.to_string(), v)).collect::<std::collections::BTreeMap<_, _>>();
        ExprPattern::new(text, &c).unwrap()
    }

    /// Recognised masks keep their keys (the causal test aside: compared without it), with
    /// the branches in segment order; the others stay masks.
    #[test]
    fn nested_unions_written_as_masks_are_recognised_with_the_same_keys() {
        let rotating = "(q / w1 == k / w1 \
            || (q / w2 == k / w2 && q % w2 % r2 == (h + q / w2) % r2 && k % w2 % r2 == (h + k / w2) % r2) \
            || (q / w3 == k / w3 && q % w3 % r3 == (h + q / w3) % r3 && k % w3 % r3 == (h + k / w3) % r3))";
        let constants = [("w1", 8), ("w2", 16), ("r2", 2), ("w3", 32), ("r3", 4)];
        type Recognised = Option<(Vec<(usize, usize)>, bool)>;
        let cases: [(String, Recognised); 8] = [
            (format!("k <= q && {rotating}"), Some((vec![(8, 1), (16, 2), (32, 4)], true))),
            (rotating.into(), Some((vec![(8, 1), (16, 2), (32, 4)], false))),
            // Branches in any order, the causal test last and written the other way round.
            (
                "(q / 12 == k / 12 && k % 3 == (2 * h) % 3 && q % 3 == (2 * h) % 3 || q / 6 == k / 6) && q >= k"
                    .into(),
                Some((vec![(6, 1), (12, 3)], true)),
            ),
            // Not nested (3 does not divide 2), one branch, an extra conjunct, the query's
            // offset reading the key's segment (the same one, but each side must read its
            // own), offsets that differ between the sides.
            ("q / 8 == k / 8 && q % 2 == h % 2 && k % 2 == h % 2 || q / 24 == k / 24 && q % 3 == h % 3 && k % 3 == h % 3".into(), None),
            ("k <= q && q / 8 == k / 8".into(), None),
            (format!("k <= q && q < 100 && {rotating}"), None),
            ("q / 4 == k / 4 || q / 8 == k / 8 && q % 2 == (h + k / 8) % 2 && k % 2 == (h + k / 8) % 2".into(), None),
            ("q / 4 == k / 4 || q / 8 == k / 8 && q % 2 == (h + q / 8) % 2 && k % 2 == (h + 1 + k / 8) % 2".into(), None),
        ];
        for (text, want) in cases {
            let m = mask(&text, &constants);
            let got = m.as_nested_union();
            let geometry = |u: &ExprDilated| -> Vec<(usize, usize)> {
                u.compact_branches(3, 50).unwrap().iter().map(|b| (b.segment, b.dilation)).collect()
            };
            assert_eq!(got.as_ref().map(|(u, c)| (geometry(u), *c)), want, "{text}");
            let Some((union, causal)) = got else { continue };
            for (heads, n) in [(1, 1), (3, 50), (4, 77)] {
                for h in 0..heads {
                    for q in 0..n {
                        let mut keys = key_counts(&union, q, h, heads, n);
                        if causal {
                            keys.iter_mut().skip(q + 1).for_each(|c| *c = 0);
                        }
                        assert_eq!(keys, key_counts(&m, q, h, heads, n), "{text}: h {h} q {q}");
                    }
                }
            }
        }
    }
}

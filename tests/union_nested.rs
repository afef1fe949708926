//! The union combine of nested dilated branches, taken apart into disjoint compact pieces
//! (issue 21: the form in which a union of branches can run as compact launches, each
//! costing its share of the pairs, where today it runs as a mask).
//!
//! Branches `(w_i, r_i)` are nested when every earlier branch `j < i` has `w_j | w_i`,
//! `r_j | r_i` and `r_j | w_j` (LongNet's doubling rules, with any offset rule: rotating per
//! segment too). Then the union of the branches' keys is, for each branch `i`, the keys
//! branch `i` gives query `q`, less the keys of one interval: `q`'s segment in the last
//! earlier branch whose lattice holds `q`. (A key of branch `i` in that segment lies on the
//! earlier branch's lattice exactly when `q` does: their residues modulo `r_j` agree, as
//! `r_j | r_i` and segments of `w_j` start at multiples of `r_j`. The earlier branches'
//! segments around `q` are nested, so the last one's holds all the others'.) The pieces are
//! disjoint: every pair of the union is produced once.
//!
//! The decomposition is transcribed here from that statement, with offsets computed by
//! closures written beside their expression source; the reference's `ExprDilated` union
//! must give exactly its key sets. A non-nested pair of branches shows the conditions
//! matter: there the decomposition misses or repeats keys.

use ndarray::Array3;
use proptest::prelude::*;
use proptest::sample::select;
use ringdil_proofs::{config, pattern_counts};
use ringdil_reference::pattern::expr::Constants;
use ringdil_reference::pattern::{ExprBranch, ExprCombine, ExprDilated};

/// Offset rules: the expression the reference parses and the same rule as a function of
/// (head, segment); the reference takes it modulo r (floor modulo: all are >= 0 here).
type Rule = (&'static str, fn(usize, usize) -> usize);
const RULES: [Rule; 5] = [
    ("h + s", |h, s| h + s),
    ("h", |h, _| h),
    ("2 * h + 3 * s + 1", |h, s| 2 * h + 3 * s + 1),
    ("h * s + s", |h, s| h * s + s),
    ("5", |_, _| 5),
];

/// Nested geometries: 2 to 4 branches, each segment a multiple of the last, each dilation
/// a multiple of the last and dividing its own segment.
fn nested() -> impl Strategy<Value = Vec<(usize, usize)>> {
    (1usize..=2, 1usize..=4, prop::collection::vec((1usize..=3, 1usize..=3), 1..=3)).prop_filter_map(
        "every dilation divides its segment",
        |(r0, a, steps)| {
            let mut out = vec![(r0 * a, r0)];
            for (grow_w, grow_r) in steps {
                let (w, r) = *out.last().unwrap();
                let (w, r) = (w * grow_w, r * grow_r);
                if w % r != 0 {
                    return None;
                }
                out.push((w, r));
            }
            Some(out)
        },
    )
}

/// The union as disjoint pieces (module docs): counts per (head, query, key), panicking
/// if a piece would produce a pair twice.
fn pieces(bs: &[(usize, usize)], rules: &[Rule], heads: usize, n: usize) -> Array3<u32> {
    // Position p lies on branch j's lattice for head h: p - a = o (mod r) in its segment [a, ..).
    let on = |j: usize, h: usize, p: usize| {
        let (w, r) = bs[j];
        let s = p / w;
        (p - s * w) % r == (rules[j].1)(h, s) % r
    };
    let mut counts = Array3::zeros((heads, n, n));
    for h in 0..heads {
        for (i, &(w, _)) in bs.iter().enumerate() {
            for q in (0..n).filter(|&q| on(i, h, q)) {
                // The hole: q's segment in the last earlier branch whose lattice holds q.
                let hole = (0..i).rev().find(|&j| on(j, h, q)).map(|j| {
                    let wj = bs[j].0;
                    (q / wj * wj, (q / wj * wj + wj).min(n))
                });
                let start = q / w * w;
                for k in (start..(start + w).min(n)).filter(|&k| on(i, h, k)) {
                    if hole.is_some_and(|(a, e)| (a..e).contains(&k)) {
                        continue;
                    }
                    assert_eq!(counts[[h, q, k]], 0, "pair ({q}, {k}) of head {h} produced twice");
                    counts[[h, q, k]] = 1;
                }
            }
        }
    }
    counts
}

fn union(bs: &[(usize, usize)], rules: &[Rule]) -> ExprDilated {
    let constants = Constants::new();
    let branches = bs
        .iter()
        .zip(rules)
        .map(|(&(w, r), rule)| ExprBranch::new(&w.to_string(), &r.to_string(), rule.0, None, &constants).unwrap())
        .collect();
    ExprDilated { branches, combine: ExprCombine::Union }
}

proptest! {
    #![proptest_config(config(64))]

    /// The reference's union of nested branches is the disjoint union of the pieces, for
    /// lengths that no segment divides and any offset rules.
    #[test]
    fn a_union_of_nested_branches_is_its_disjoint_pieces(
        bs in nested(),
        rules in prop::collection::vec(select(RULES.to_vec()), 4),
        heads in 1usize..=4,
        n in 1usize..=90,
    ) {
        let rules = &rules[..bs.len()];
        prop_assert_eq!(pattern_counts(&union(&bs, rules), heads, n), pieces(&bs, rules, heads, n));
    }
}

/// Without nesting the pieces are not the union: (4, 2) then (6, 3) (3 divides neither 2
/// nor 4). So a planner must check the conditions before it takes a union apart.
#[test]
fn branches_that_do_not_nest_are_not_their_pieces() {
    let (bs, rules) = ([(4, 2), (6, 3)], [RULES[0], RULES[0]]);
    let taken_apart = std::panic::catch_unwind(|| pieces(&bs, &rules, 3, 24));
    let whole = pattern_counts(&union(&bs, &rules), 3, 24);
    assert!(taken_apart.map_or(true, |p| p != whole), "a non-nested union equal to its pieces");
}

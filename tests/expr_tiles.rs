//! Interval evaluation and tile classification of pattern expressions (issue 21),
//! checked by brute force with the reference's evaluator:
//!
//! * (a) the enclosure of a random int or bool expression (with `2^62`, large literals
//!   and variables near `i64::MIN`/`i64::MAX`, so that sums, products, `abs`, `-` and
//!   `i64::MIN / -1` wrap) holds the value at every point of a random box;
//! * (b) on random masks and tiles, a tile classified `Empty` has no allowed pair and a
//!   `Full` one has only allowed pairs, for any budget; with [`exact_budget`] the class
//!   is the brute-force class (`Partial` only when the tile is mixed);
//! * (c) the whole-sequence [`TileMap`] equals the brute-force class of every tile;
//! * (d) causal, window, block-diagonal and global-token masks are classified exactly by
//!   one interval evaluation (budget 1), at positions up to `2^40`;
//! * (e) LongNet-like dilated masks are classified exactly within [`SMALL_BUDGET`].

mod expr_gen;

use expr_gen::{E, bool_e, constants, int_e, print};
use proptest::prelude::*;
use proptest::sample::select;
use ringdil_proofs::config;
use ringdil_reference::pattern::ExprPattern;
use ringdil_reference::pattern::expr::{
    Constants, Env, Expression, Interval, Ranges, SMALL_BUDGET, Scope, Tile, TileClass, TileMap, Ty, Var, classify,
    enclose, exact_budget,
};

/// The brute-force class of `mask` on the pairs `queries x keys`.
fn brute(mask: &Expression, at: &Env, queries: std::ops::Range<usize>, keys: std::ops::Range<usize>) -> TileClass {
    let (mut allowed, mut refused) = (false, false);
    for q in queries {
        for k in keys.clone() {
            let ok = mask.eval(&at.with(Var::Query, q as i64).with(Var::Key, k as i64)) != 0;
            allowed |= ok;
            refused |= !ok;
        }
    }
    match (allowed, refused) {
        (true, false) => TileClass::Full,
        (false, true) => TileClass::Empty,
        _ => TileClass::Partial,
    }
}

/// The environment of head `h` of `heads` over `n` positions.
fn shape_env(h: usize, heads: usize, n: usize) -> Env {
    Env::default().with(Var::Head, h as i64).with(Var::Heads, heads as i64).with(Var::SeqLen, n as i64)
}

/// A range inside `0..n` (non-empty for `n >= 1`).
fn sub_range(n: usize, a: usize, b: usize) -> std::ops::Range<usize> {
    let (a, b) = (a % n, b % n);
    a.min(b)..a.max(b) + 1
}

/// Box corners: mostly small, often next to the ends of `i64`.
fn corner() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => -20i64..20,
        1 => any::<i64>(),
        2 => select(vec![i64::MIN, i64::MIN + 2, -(1 << 62), (1 << 62) - 2, i64::MAX - 3, i64::MAX - 1]),
    ]
}

/// Build the printing of `e`, or `None` when its constant part is rejected.
fn build(e: &E, ty: Ty) -> Option<Expression> {
    Expression::new(&print(e, false), &Scope::MASK, &constants(), ty).ok()
}

proptest! {
    #![proptest_config(config(512))]

    /// (a) Every value of the box lies in the enclosure.
    #[test]
    fn enclosure_holds_every_value(
        e in prop_oneof![int_e(3, true), bool_e(3, true)],
        lows in prop::collection::vec(corner(), 5),
        widths in prop::collection::vec(0i64..4, 5),
    ) {
        let built = build(&e, Ty::Int).or_else(|| build(&e, Ty::Bool));
        let Some(built) = built else { return Ok(()) };
        let vars = [Var::Head, Var::Query, Var::Key, Var::SeqLen, Var::Heads];
        let mut ranges = Ranges::at(&Env::default());
        let mut axes = Vec::new();
        for ((&var, &lo), &width) in vars.iter().zip(&lows).zip(&widths) {
            let hi = lo.saturating_add(width);
            ranges = ranges.with(var, Interval::between(lo, hi));
            axes.push((var, lo, hi));
        }
        let hull = enclose(built.root(), &ranges);
        let mut points = vec![Env::default()];
        for (var, lo, hi) in axes {
            points = points.into_iter().flat_map(|env| (lo..=hi).map(move |v| env.with(var, v))).collect();
        }
        for env in &points {
            let v = built.eval(env);
            prop_assert!(hull.contains(v), "{} = {} at {:?} outside {:?}", built.source(), v, env, hull);
        }
    }

    /// (b) Classification is sound for any budget and exact with `exact_budget`.
    #[test]
    fn tiles_are_sound_and_exact(
        e in bool_e(4, false),
        n in 1usize..48,
        heads in 1usize..4,
        h in 0usize..4,
        cuts in [any::<usize>(); 4],
        budget in 0usize..40,
    ) {
        let Some(mask) = build(&e, Ty::Bool) else { return Ok(()) };
        let at = shape_env(h % heads, heads, n);
        let (queries, keys) = (sub_range(n, cuts[0], cuts[1]), sub_range(n, cuts[2], cuts[3]));
        let tile = Tile::new(queries.clone(), keys.clone(), n).unwrap();
        let truth = brute(&mask, &at, queries, keys);
        let class = classify(mask.root(), &at, &tile, budget);
        prop_assert!(class == TileClass::Partial || class == truth, "{}: {:?} but {:?}", mask.source(), class, truth);
        let exact = classify(mask.root(), &at, &tile, exact_budget(tile.pairs()));
        prop_assert_eq!(exact, truth, "{}", mask.source());
    }

    /// (c) The tile map holds the brute-force class of every tile.
    #[test]
    fn tile_map_is_exact(e in bool_e(4, false), n in 0usize..60, heads in 1usize..4, h in 0usize..4, t in 1usize..9) {
        let text = print(&e, false);
        let Ok(pattern) = ExprPattern::new(&text, &constants()) else { return Ok(()) };
        let h = h % heads;
        let map = TileMap::new(&pattern, h, heads, n, t).unwrap();
        let at = shape_env(h, heads, n);
        prop_assert_eq!(map.tiles(), n.div_ceil(t));
        for i in 0..map.tiles() {
            let row = map.row(i);
            prop_assert!(row.iter().all(|r| r.start < r.end), "empty run in row {}", i);
            prop_assert!(row.windows(2).all(|w| w[0].end < w[1].start || (w[0].end == w[1].start && w[0].full != w[1].full)),
                "row {} not increasing runs of alternating classes", i);
            for j in 0..map.tiles() {
                let truth = brute(pattern.mask(), &at, i * t..((i + 1) * t).min(n), j * t..((j + 1) * t).min(n));
                prop_assert_eq!(map.class(i, j), truth, "{} tile ({}, {})", text, i, j);
                prop_assert_eq!(row.iter().any(|r| (r.start..r.end).contains(&j)), truth != TileClass::Empty);
            }
        }
    }
}

/// A 64 x 64 tile (or smaller) at a random place of a sequence of up to `2^40`.
fn far_tile() -> impl Strategy<Value = (usize, usize, usize, usize)> {
    let start = prop_oneof![0usize..4096, 0usize..(1 << 40)];
    (start.clone(), start, 1usize..=64, 1usize..=64)
}

/// Classify `text` (with `constants`) on the tile with `budget` and compare with brute force.
fn check_exact(text: &str, constants: &Constants, (q0, k0, tq, tk): (usize, usize, usize, usize), budget: usize) {
    let n = 1 << 41;
    let mask = Expression::new(text, &Scope::MASK, constants, Ty::Bool).unwrap();
    let at = shape_env(0, 1, n);
    let tile = Tile::new(q0..q0 + tq, k0..k0 + tk, n).unwrap();
    let truth = brute(&mask, &at, q0..q0 + tq, k0..k0 + tk);
    assert_eq!(classify(mask.root(), &at, &tile, budget), truth, "{text} {constants:?} on {tile:?}");
}

fn named(pairs: &[(&str, usize)]) -> Constants {
    pairs.iter().map(|&(k, v)| (k.to_string(), v as i64)).collect()
}

proptest! {
    #![proptest_config(config(512))]

    /// (d) One interval evaluation decides every tile of the common masks that is not mixed.
    #[test]
    fn common_masks_need_one_evaluation(
        tile in far_tile(),
        w in 0usize..200,
        block in 1usize..200,
        g in 0usize..5000,
        near in any::<bool>(),
    ) {
        // Half the cases put the keys next to the queries, where the masks change.
        let tile = if near { (tile.0, tile.0 + tile.0 % 100, tile.2, tile.3) } else { tile };
        check_exact("k <= q", &Constants::new(), tile, 1);
        check_exact("abs(q - k) <= win", &named(&[("win", w)]), tile, 1);
        check_exact("q / B == k / B", &named(&[("B", block)]), tile, 1);
        check_exact("k < g || q < g", &named(&[("g", g)]), tile, 1);
    }

    /// (e) LongNet-like dilations are exact within the small budget.
    #[test]
    fn dilations_are_exact_within_a_small_budget(
        (q0, k0, tq, tk) in far_tile(),
        w in 1usize..600,
        r in 1usize..20,
        o in 0usize..20,
        near in any::<bool>(),
    ) {
        let (r, o) = (r.min(w), o % r.min(w));
        let k0 = if near { q0 - q0 % w + k0 % w } else { k0 };
        let constants = named(&[("seg", w), ("rate", r), ("off", o)]);
        let text = "(q % seg) % rate == off && (k % seg) % rate == off && q / seg == k / seg";
        check_exact(text, &constants, (q0, k0, tq, tk), SMALL_BUDGET);
    }
}

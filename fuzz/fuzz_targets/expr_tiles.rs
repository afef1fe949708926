//! Tile classification of pattern expressions from arbitrary bytes (issue 21). The
//! input is a mask's source, then (after the first `\n#\n`, or none) bytes that choose
//! the shape and tiles. Whatever parses as a mask is classified on tiles of up to
//! 12 x 12 pairs, and every answer is checked by brute force with the evaluator:
//! `Empty` has no allowed pair, `Full` has only allowed ones (for any budget), the exact
//! budget gives the brute-force class, and the enclosure of the tile's box holds every
//! value; the whole tile map of a short sequence equals brute force tile by tile.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringdil_reference::pattern::ExprPattern;
use ringdil_reference::pattern::expr::{
    Constants, Env, Interval, Ranges, Tile, TileClass, TileMap, Var, classify, enclose, exact_budget,
};

/// The brute-force class of `pattern` on `tile` under `at`.
fn brute(pattern: &ExprPattern, at: &Env, tile: &Tile) -> TileClass {
    let (mut allowed, mut refused) = (false, false);
    for q in tile.queries() {
        for k in tile.keys() {
            let ok = pattern.mask().eval(&at.with(Var::Query, q as i64).with(Var::Key, k as i64)) != 0;
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

fuzz_target!(|data: &[u8]| {
    let split = data.windows(3).position(|w| w == b"\n#\n");
    let (text, mut bytes) = match split {
        Some(i) => (&data[..i], &data[i + 3..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let constants: Constants = [("window".to_string(), 3), ("big".to_string(), i64::MAX)].into_iter().collect();
    let Ok(pattern) = ExprPattern::new(&text, &constants) else { return };
    let mut next = || match bytes.split_first() {
        Some((&b, rest)) => {
            bytes = rest;
            b as usize
        }
        None => 0,
    };
    // Positions far out (an offset up to 2^40) as well as near 0.
    let far = (next() % 4 == 3).then(|| next() << 32).unwrap_or(0);
    let (heads, n) = (1 + next() % 4, far + 1 + next() % 40);
    let head = next() % heads;
    let at = Env::default().with(Var::Head, head as i64).with(Var::Heads, heads as i64).with(Var::SeqLen, n as i64);
    for _ in 0..4 {
        let (q0, k0) = (far + next() % (n - far), far + next() % (n - far));
        let (q1, k1) = ((q0 + 1 + next() % 12).min(n), (k0 + 1 + next() % 12).min(n));
        let tile = Tile::new(q0..q1, k0..k1, n).expect("inside the sequence");
        let truth = brute(&pattern, &at, &tile);
        let budget = next() % 64;
        let class = classify(pattern.mask().root(), &at, &tile, budget);
        assert!(
            class == TileClass::Partial || class == truth,
            "{text:?} {tile:?} budget {budget}: {class:?}, truly {truth:?}"
        );
        let exact = classify(pattern.mask().root(), &at, &tile, exact_budget(tile.pairs()));
        assert_eq!(exact, truth, "{text:?} {tile:?}");
        let inclusive = |r: std::ops::Range<usize>| Interval::between(r.start as i64, r.end as i64 - 1);
        let ranges = Ranges::at(&at).with(Var::Query, inclusive(tile.queries())).with(Var::Key, inclusive(tile.keys()));
        let hull = enclose(pattern.mask().root(), &ranges);
        assert!(truth == TileClass::Empty || hull.contains(1), "{text:?}: true pair, {hull:?}");
        assert!(truth == TileClass::Full || hull.contains(0), "{text:?}: false pair, {hull:?}");
    }
    if far == 0 {
        let t = 1 + next() % 8;
        let map = TileMap::new(&pattern, head, heads, n, t).expect("a positive tile");
        for i in 0..map.tiles() {
            for j in 0..map.tiles() {
                let tile = Tile::new(i * t..((i + 1) * t).min(n), j * t..((j + 1) * t).min(n), n).unwrap();
                assert_eq!(map.class(i, j), brute(&pattern, &at, &tile), "{text:?} tile ({i}, {j}) of {t}");
            }
        }
    }
});

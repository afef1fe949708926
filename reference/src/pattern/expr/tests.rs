//! Unit tests of the expression language: precedence, the integer rules and the exact
//! error messages. (The property tests against an independent interpreter and the
//! attention proofs are in `tests/expressions.rs`.)

use super::*;

fn constants(pairs: &[(&str, i64)]) -> Constants {
    pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// The value of `source` (any type) with `q = 5, k = 3, h = 2, n = 10, H = 4`.
fn value(source: &str) -> i64 {
    let e = Expression::new(source, &Scope::MASK, &constants(&[("c", 7)]), Ty::Int)
        .or_else(|_| Expression::new(source, &Scope::MASK, &constants(&[("c", 7)]), Ty::Bool))
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    let env = Env::default()
        .with(Var::Query, 5)
        .with(Var::Key, 3)
        .with(Var::Head, 2)
        .with(Var::SeqLen, 10)
        .with(Var::Heads, 4);
    e.eval(&env)
}

fn error(source: &str, scope: &Scope, ty: Ty) -> String {
    match Expression::new(source, scope, &constants(&[("window", 4)]), ty) {
        Ok(e) => panic!("{source} was accepted as {:?}", e.root()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn precedence_and_associativity() {
    assert_eq!(value("1 + 2 * 3"), 7);
    assert_eq!(value("(1 + 2) * 3"), 9);
    assert_eq!(value("10 - 3 - 2"), 5);
    assert_eq!(value("100 / 10 / 5"), 2);
    assert_eq!(value("-q * k"), -15);
    assert_eq!(value("- -q"), 5);
    assert_eq!(value("(q - k < h + 1) == true"), 1, "comparison binds looser than arithmetic");
    assert_eq!(value("q > k && k > h || false"), 1);
    assert_eq!(value("true || false && false"), 1, "&& binds tighter than ||");
    assert_eq!(value("!(q < k)"), 1);
    assert_eq!(value("if q < k then 1 else 2 + 3"), 5, "the else branch extends to the right");
    assert_eq!(value("(if q < k then 1 else 2) + 3"), 5);
    assert_eq!(value("1 + if q > k then c else 0"), 8);
    assert_eq!(value("min(q, k) * 10 + max(q, k) + abs(k - q)"), 37);
    assert_eq!(value("(q < k) == (h > n)"), 1, "== compares booleans too");
    assert_eq!(value("n % H + n / H * H == n"), 1);
}

#[test]
fn floor_division_and_modulo() {
    let cases = [
        (7, 2, 3, 1),
        (-7, 2, -4, 1),
        (7, -2, -4, -1),
        (-7, -2, 3, -1),
        (6, 3, 2, 0),
        (-6, 3, -2, 0),
        (5, 0, 0, 5),
        (-5, 0, 0, -5),
        (i64::MIN, -1, i64::MIN, 0),
        (i64::MIN, 1, i64::MIN, 0),
        (i64::MIN, 2, i64::MIN / 2, 0),
        (i64::MAX, -2, -(i64::MAX / 2) - 1, -1),
    ];
    for (a, b, q, r) in cases {
        assert_eq!((div_floor(a, b), mod_floor(a, b)), (q, r), "{a} / {b}");
        assert_eq!(div_floor(a, b).wrapping_mul(b).wrapping_add(mod_floor(a, b)), a, "identity for {a}, {b}");
    }
}

#[test]
fn wrapping_arithmetic_at_run_time() {
    let e = Expression::new("q + k * 2 - abs(h)", &Scope::MASK, &Constants::new(), Ty::Int).unwrap();
    let env = Env::default().with(Var::Query, i64::MAX).with(Var::Key, 1).with(Var::Head, i64::MIN);
    // MAX + 2 wraps to MIN + 1; abs(MIN) = MIN; (MIN + 1) - MIN = 1.
    assert_eq!(e.eval(&env), 1);
}

#[test]
fn constants_fold_to_literals() {
    let e = Expression::new("window * 2 + 1 - -3 / 2", &Scope::SEGMENT, &constants(&[("window", 4)]), Ty::Int).unwrap();
    assert_eq!(e.root().kind, Kind::Int(11));
    let e = Expression::new("if 1 < 2 then h else 0", &Scope::SEGMENT, &Constants::new(), Ty::Int).unwrap();
    assert!(matches!(e.root().kind, Kind::If(..)), "only operators with literal operands fold");
}

#[test]
fn messages_name_line_column_and_token() {
    assert_eq!(error("min(q, k k", &Scope::MASK, Ty::Bool), "expected ')' at 1:10, found 'k'");
    assert_eq!(
        error("q <\n  (k + ", &Scope::MASK, Ty::Bool),
        "expected an operand (a number, a name, '(', '-', '!', 'if', min, max or abs) at 2:8, found end of input"
    );
    assert_eq!(
        error("q k", &Scope::MASK, Ty::Bool),
        "expected an operator or the end of the expression at 1:3, found 'k'"
    );
    assert_eq!(
        error("q < k < n", &Scope::MASK, Ty::Bool),
        "expected an operator or the end of the expression at 1:7, found '<'"
    );
    assert_eq!(
        error("if q then 1 else 2", &Scope::MASK, Ty::Int),
        "type error at 1:1, token 'if': the condition must be bool, found int"
    );
    assert_eq!(
        error("q + (k < 1)", &Scope::MASK, Ty::Bool),
        "type error at 1:3, token '+': the right operand must be int, found bool"
    );
    assert_eq!(error("q - k", &Scope::MASK, Ty::Bool), "type error at 1:3, token '-': a mask must be bool, found int");
    assert_eq!(
        error("h + q", &Scope::SEGMENT, Ty::Int),
        "unknown name 'q' at 1:5; known here: h, H, n (in a segment) and the constants window"
    );
    assert_eq!(
        error("q / (window - 4)", &Scope::MASK, Ty::Int),
        "division by zero at 1:3: the divisor of '/' is the constant 0"
    );
    assert_eq!(
        error("q % 0 == 1", &Scope::MASK, Ty::Bool),
        "division by zero at 1:3: the divisor of '%' is the constant 0"
    );
    assert_eq!(
        error("q + 4611686018427387904 * 2", &Scope::MASK, Ty::Int),
        "integer overflow at 1:25: '*' on constants leaves the 64-bit range"
    );
    assert_eq!(
        error("q == 99999999999999999999", &Scope::MASK, Ty::Bool),
        "integer literal 99999999999999999999 at 1:6 does not fit in 64 bits (the largest is 9223372036854775807)"
    );
    assert_eq!(error("q $ k", &Scope::MASK, Ty::Bool), "unexpected character '$' at 1:3");
}

#[test]
fn limits() {
    let long = format!("q < {}", "1 + ".repeat(MAX_SOURCE_BYTES / 4) + "1");
    assert_eq!(
        error(&long, &Scope::MASK, Ty::Bool),
        format!("expression of {} bytes is longer than the limit of 4096 bytes", long.len())
    );
    let wide = format!("q < {}", vec!["k"; 200].join(" + "));
    assert_eq!(
        error(&wide, &Scope::MASK, Ty::Bool),
        "expression of 401 operators and operands is larger than the limit of 256"
    );
    let deep = format!("{}q{} < k", "(".repeat(40), ")".repeat(40));
    assert_eq!(error(&deep, &Scope::MASK, Ty::Bool), "expression nested deeper than 32 levels at 1:34, token '('");
    let negations = format!("{}q < k", "!".repeat(40));
    assert!(error(&negations, &Scope::MASK, Ty::Bool).starts_with("expression nested deeper than 32 levels"));
    let just_deep_enough = format!("{}q{} < k", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    assert!(Expression::new(&just_deep_enough, &Scope::MASK, &Constants::new(), Ty::Bool).is_ok());
}

#[test]
fn constant_names_are_checked() {
    for (name, reason) in [("q", "variable"), ("if", "keyword"), ("2x", "a name is"), ("a-b", "a name is")] {
        let e = Expression::new("true", &Scope::MASK, &constants(&[(name, 1)]), Ty::Bool).unwrap_err();
        assert!(e.to_string().starts_with(&format!("constant '{name}': ")) && e.to_string().contains(reason), "{e}");
    }
}

#[test]
fn batch_row_is_refused_by_patterns() {
    let e = ExprPattern::new("b == 0 && q >= k", &Constants::new()).unwrap_err();
    assert!(e.to_string().starts_with("mask: 'b' at 1:1: the batch row is not available"), "{e}");
}

#[test]
fn tiles_and_tile_maps_name_bad_input() {
    let e = Tile::new(3..3, 0..4, 10).unwrap_err();
    assert_eq!(e.to_string(), "tile: query range 3..3 must be non-empty and end at or before the sequence length 10");
    let e = Tile::new(0..4, 8..11, 10).unwrap_err();
    assert_eq!(e, crate::Error::BadTile { axis: "key", start: 8, end: 11, seq_len: 10 });
    let pattern = ExprPattern::new("k <= q", &Constants::new()).unwrap();
    let e = TileMap::new(&pattern, 0, 1, 10, 0).unwrap_err();
    assert_eq!(e, crate::Error::ZeroParameter { pattern: "tile map", parameter: "tile" });
}

#[test]
fn enclosures_widen_where_the_evaluator_wraps() {
    let int = |s: &str| Expression::new(s, &Scope::MASK, &constants(&[("big", i64::MAX)]), Ty::Int).unwrap();
    let near_max = Ranges::at(&Env::default()).with(Var::Query, Interval::between(i64::MAX - 1, i64::MAX));
    // q + 1 over [MAX - 1, MAX] is {MAX, MIN}: only the full range holds both.
    assert_eq!(enclose(int("q + 1").root(), &near_max), Interval::FULL);
    // q + 2 over the same box wraps as a whole: the shifted range [MIN, MIN + 1].
    assert_eq!(enclose(int("q + 2").root(), &near_max), Interval::between(i64::MIN, i64::MIN + 1));
    let at_min = Ranges::at(&Env::default()).with(Var::Query, Interval::point(i64::MIN));
    assert_eq!(enclose(int("abs(q)").root(), &at_min), Interval::point(i64::MIN));
    assert_eq!(enclose(int("q / -1").root(), &at_min), Interval::point(i64::MIN));
    // A divisor range holding 0: `q / k` may be 0, `q % k` may be q itself.
    let k = Ranges::at(&Env::default()).with(Var::Query, Interval::point(-7)).with(Var::Key, Interval::between(-1, 2));
    assert_eq!(enclose(int("q / k").root(), &k), Interval::between(-7, 7));
    assert_eq!(enclose(int("q % k").root(), &k), Interval::between(-7, 1));
}

/// 32-bit evaluation is chosen only where every node fits: positions divided by
/// constants do; a product of positions, a sum past `i32::MAX` or a large constant
/// anywhere in the tree (even under a comparison) do not.
#[test]
fn masks_fit_32_bits_where_every_node_does() {
    let fits = |mask: &str, n: usize, heads: usize| {
        ExprPattern::new(mask, &constants(&[("big", 1 << 40)])).unwrap().fits_i32(n, heads)
    };
    assert!(fits("q / 4096 == k / 4096 && (q % 4096) % 4 == (h + q / 4096) % 4", 1 << 20, 64));
    assert!(fits("abs(q - k) <= 512 || k < 4", i32::MAX as usize, 1));
    assert!(!fits("q * k % 7 == 0", 1 << 20, 1));
    assert!(fits("q * k % 7 == 0", 1 << 15, 1));
    assert!(fits("q + h < n", i32::MAX as usize, 2));
    assert!(!fits("q + h < n", i32::MAX as usize, 3));
    assert!(!fits("(q * 100000) % 7 == 0", 1 << 20, 1));
    assert!(!fits("q < big", 16, 1));
}

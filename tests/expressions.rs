//! Pattern expressions (issue 21) against an interpreter written here from the
//! documented rules (`docs/semantics.md`, "Pattern expressions"), sharing no code with
//! `ringdil_reference::pattern::expr`:
//!
//! * random well-typed expressions are generated as a tree [`E`] (`expr_gen.rs`),
//!   printed as source text in two spellings (minimal parentheses by the documented precedence, and fully
//!   parenthesised over several lines), built by the reference and evaluated against
//!   [`interp`] (i128 arithmetic wrapped to i64, floor division by Euclid on
//!   non-negative divisors) on random, extreme variable values; an expression whose
//!   constant part divides by zero or overflows must be rejected, and only those;
//! * random masks drive attention: the reference's key sets equal the interpreter's
//!   mask, and the blocked engine equals the naive oracle of `support.rs` under it, with
//!   several heads, batch rows, causality, key padding and lengths that divide nothing;
//! * expressions equal to built-ins give the built-in's key sets (sliding window,
//!   block-sparse local, a LongNet branch as a mask; `ExprDilated` with the offset rules
//!   `h % r`, torchscale's head blocks and fixed offsets equals `Dilated`), the union
//!   combine is the 0/1 clip of the multiset, and offsets rotating per segment match a
//!   transcription of that rule; random offset expressions in compact form (what the
//!   GPU's compact `dilated_expr` launches read) hold `interp`'s offset for every head and
//!   segment;
//! * every kind of rejection has its message checked (line, column, token).
//!
//! Tolerance: f64 engine vs f64 naive oracle, `1e-12` relative; key sets exactly.

mod expr_gen;

use expr_gen::{CONSTANTS, E, VARS, bool_e, constants, int_e, print};
use ndarray::Array3;
use proptest::prelude::*;
use proptest::sample::select;
use ringdil_proofs::{assert_close, assert_lse_close, branches_with_offsets, config, naive_spec, pattern_counts, qkv};
use ringdil_reference::pattern::expr::{Constants, Env, ExprError, Expression, Scope, Ty, Var};
use ringdil_reference::pattern::{
    BlockSparse, Branch, Combine, Dense, Dilated, ExprBranch, ExprCombine, ExprDilated, ExprPattern, Offset,
    SlidingWindow,
};
use ringdil_reference::{Error, Pattern, Spec, attention};
use std::collections::HashMap;

const TOL: f64 = 1e-12;

// ---------------------------------------------------------------------------------
// The test's own interpreter (the tree, strategies and printer are in `expr_gen.rs`)
// ---------------------------------------------------------------------------------

/// `floor(x / y)` for `y != 0`, by Euclid on a positive divisor.
fn floor_div(x: i128, y: i128) -> i128 {
    if y > 0 { x.div_euclid(y) } else { (-x).div_euclid(-y) }
}

/// The exact (unwrapped) result of an operator on values; booleans are 0/1.
fn exact(op: &str, x: i128, y: i128) -> i128 {
    match op {
        "+" => x + y,
        "-" => x - y,
        "*" => x * y,
        "/" if y == 0 => 0,
        "/" => floor_div(x, y),
        "%" if y == 0 => x,
        "%" => x - y * floor_div(x, y),
        "min" => x.min(y),
        "max" => x.max(y),
        "==" => (x == y) as i128,
        "!=" => (x != y) as i128,
        "<" => (x < y) as i128,
        "<=" => (x <= y) as i128,
        ">" => (x > y) as i128,
        ">=" => (x >= y) as i128,
        "&&" => (x != 0 && y != 0) as i128,
        "||" => (x != 0 || y != 0) as i128,
        _ => unreachable!("{op}"),
    }
}

fn exact_unary(op: &str, x: i128) -> i128 {
    match op {
        "-" => -x,
        "abs" => x.abs(),
        _ => (x == 0) as i128,
    }
}

/// The documented value: every operator exact in i128, then wrapped to i64 (two's
/// complement truncation).
fn interp(e: &E, env: &HashMap<&str, i64>) -> i64 {
    match e {
        E::Int(v) => *v,
        E::Bool(v) => *v as i64,
        E::Name(n) => env[n],
        E::Un(op, a) => exact_unary(op, interp(a, env) as i128) as i64,
        E::Bin(op, a, b) => exact(op, interp(a, env) as i128, interp(b, env) as i128) as i64,
        E::If(c, a, b) => {
            if interp(c, env) != 0 {
                interp(a, env)
            } else {
                interp(b, env)
            }
        }
    }
}

/// What building `e` must say about its constant part: `Ok(Some(v))` for a constant
/// subtree of exact value `v`, `Ok(None)` when it has variables, `Err` for the first
/// fault (operands left to right before their operator): a `/` or `%` by a constant 0,
/// or a constant result outside i64.
fn constant_fault(e: &E) -> Result<Option<i128>, &'static str> {
    let fits = |v: i128| if i64::try_from(v).is_ok() { Ok(Some(v)) } else { Err("overflow") };
    match e {
        E::Int(v) => Ok(Some(*v as i128)),
        E::Bool(v) => Ok(Some(*v as i128)),
        E::Name(n) => Ok(CONSTANTS.iter().find(|c| c.0 == *n).map(|c| c.1 as i128)),
        E::Un(op, a) => match constant_fault(a)? {
            Some(x) => fits(exact_unary(op, x)),
            None => Ok(None),
        },
        E::Bin(op, a, b) => {
            let (x, y) = (constant_fault(a)?, constant_fault(b)?);
            if matches!(*op, "/" | "%") && y == Some(0) {
                return Err("division by zero");
            }
            match (x, y) {
                (Some(x), Some(y)) => fits(exact(op, x, y)),
                _ => Ok(None),
            }
        }
        E::If(c, a, b) => match (constant_fault(c)?, constant_fault(a)?, constant_fault(b)?) {
            (Some(c), Some(a), Some(b)) => Ok(Some(if c != 0 { a } else { b })),
            _ => Ok(None),
        },
    }
}

fn is_bool(e: &E) -> bool {
    match e {
        E::Bool(_) | E::Un("!", _) => true,
        E::Bin(op, ..) => !matches!(*op, "+" | "-" | "*" | "/" | "%" | "min" | "max"),
        E::If(_, a, _) => is_bool(a),
        _ => false,
    }
}

/// Build `text` (the printing of `e`) and check it against [`constant_fault`]: the
/// expression when the constant part is sound, `None` (after checking the message)
/// when it is not.
fn build_checked(e: &E, text: &str, scope: &Scope) -> Option<Expression> {
    let ty = if is_bool(e) { Ty::Bool } else { Ty::Int };
    let built = Expression::new(text, scope, &constants(), ty);
    match constant_fault(e) {
        Ok(_) => Some(built.unwrap_or_else(|err| panic!("{text:?} rejected: {err}"))),
        Err(fault) => {
            let err = built.expect_err(text);
            assert!(err.to_string().contains(fault), "{text:?}: expected {fault}, got {err}");
            None
        }
    }
}

// ---------------------------------------------------------------------------------
// Semantics and masks against the interpreter
// ---------------------------------------------------------------------------------

/// Variable values: mostly small, often extreme (so that wrapping, `i64::MIN / -1` and
/// `abs(i64::MIN)` are reached).
fn value() -> impl Strategy<Value = i64> {
    prop_oneof![3 => -20i64..20, 1 => any::<i64>(), 1 => select(vec![i64::MIN, i64::MAX, i64::MIN + 1, -1, 0])]
}

/// Mask pattern counts `[heads, n, n]` by the interpreter: `mask(h, q, k, n, H)`.
fn interp_counts(e: &E, heads: usize, n: usize) -> Array3<u32> {
    Array3::from_shape_fn((heads, n, n), |(h, i, j)| {
        let env: HashMap<&str, i64> =
            [("h", h), ("q", i), ("k", j), ("n", n), ("H", heads)].into_iter().map(|(k, v)| (k, v as i64)).collect();
        let env = CONSTANTS.iter().copied().chain(env).collect();
        u32::from(interp(e, &env) != 0)
    })
}

/// Attention under `spec` on seeded inputs equals the naive oracle under `counts`.
fn assert_engine_matches(spec: &Spec, counts: &Array3<u32>, shape: [usize; 4], seed: u64) {
    let (q, k, v) = qkv(shape, seed);
    let got = attention(q.view(), k.view(), v.view(), spec).unwrap();
    let (out, lse) = naive_spec(q.view(), k.view(), v.view(), spec, counts);
    assert_close("out vs naive", &got.out, &out, TOL);
    assert_lse_close("lse vs naive", &got.lse, &lse, TOL);
}

/// Shapes: batch 1..=2, n 1..=24, heads 1..=3, head_dim 1..=4.
fn shape() -> impl Strategy<Value = [usize; 4]> {
    (1..=2usize, 1..=24usize, 1..=3usize, 1..=4usize).prop_map(|(b, n, h, d)| [b, n, h, d])
}

proptest! {
    #![proptest_config(config(256))]

    /// (a) Random int and bool expressions, in both spellings, evaluate to the
    /// interpreter's value for random and extreme variable values; an expression is
    /// rejected exactly when its constant part divides by zero or overflows, with that
    /// message.
    #[test]
    fn expressions_evaluate_as_documented(
        e in prop_oneof![int_e(4, true), bool_e(4, true)],
        values in prop::collection::vec(prop::collection::vec(value(), 5), 6),
    ) {
        for full in [false, true] {
            let text = print(&e, full);
            let Some(built) = build_checked(&e, &text, &Scope::MASK) else { continue };
            for vals in &values {
                let mut env = Env::default();
                let mut map: HashMap<&str, i64> = CONSTANTS.iter().copied().collect();
                for (&name, &v) in VARS.iter().zip(vals) {
                    env = env.with(Var::from_name(name).unwrap(), v);
                    map.insert(name, v);
                }
                prop_assert_eq!(built.eval(&env), interp(&e, &map), "{} with {:?}", text, vals);
            }
        }
    }
}

proptest! {
    #![proptest_config(config(96))]

    /// (b) A random mask as a pattern: its key sets are the interpreter's mask for every
    /// head and query, and attention under it (random causality, key padding, batch
    /// rows) equals the naive oracle under that mask.
    #[test]
    fn masks_match_the_interpreter_in_attention(
        shape in shape(),
        e in bool_e(4, false),
        causal: bool,
        padding in prop::option::of(prop::collection::vec(0usize..=24, 2)),
        seed in 0u64..1 << 40,
    ) {
        let [batch, n, heads, _] = shape;
        let text = print(&e, false);
        let Some(_) = build_checked(&e, &text, &Scope::MASK) else { return Ok(()) };
        let pattern = ExprPattern::new(&text, &constants()).unwrap();
        let counts = interp_counts(&e, heads, n);
        prop_assert_eq!(pattern_counts(&pattern, heads, n), counts.clone(), "{}", text);
        // About a third of random masks are all true or all false on the shape; their
        // key sets are checked above, the attention proof wants masks that vary.
        prop_assume!(counts.iter().any(|&c| c == 0) && counts.iter().any(|&c| c == 1));
        let mut spec = Spec::new(pattern).causal(causal);
        if let Some(lengths) = padding {
            spec = spec.key_lengths(lengths.iter().take(batch).map(|&l| l.min(n)).collect());
        }
        assert_engine_matches(&spec, &counts, shape, seed);
    }
}

// ---------------------------------------------------------------------------------
// Expressions that are built-ins
// ---------------------------------------------------------------------------------

fn named(pairs: &[(&str, usize)]) -> Constants {
    pairs.iter().map(|&(k, v)| (k.to_string(), v as i64)).collect()
}

fn mask(text: &str, pairs: &[(&str, usize)]) -> ExprPattern {
    ExprPattern::new(text, &named(pairs)).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// An expression branch `(w, r)` with the given offset (and no mask).
fn branch(w: usize, r: usize, offset: &str) -> ExprBranch {
    ExprBranch::new(&w.to_string(), &r.to_string(), offset, None, &Constants::new()).unwrap()
}

/// The offset rule as an expression: `h % r`, torchscale's `floor(h / ceil(H / r))`, or
/// the fixed offset.
fn offset_text(rule: Offset) -> String {
    match rule {
        Offset::HeadMod => "h % r".to_string(),
        Offset::HeadBlock => "h / ((H + r - 1) / r)".to_string(),
        Offset::Fixed(o) => o.to_string(),
    }
}

/// `e` with its variable names replaced per `pairs` (`(from, to)`).
fn rename(e: &E, pairs: &[(&'static str, &'static str)]) -> E {
    let r = |x: &E| Box::new(rename(x, pairs));
    match e {
        E::Name(n) => E::Name(pairs.iter().find(|p| p.0 == *n).map_or(*n, |p| p.1)),
        E::Un(op, a) => E::Un(op, r(a)),
        E::Bin(op, a, b) => E::Bin(op, r(a), r(b)),
        E::If(c, a, b) => E::If(r(c), r(a), r(b)),
        other => other.clone(),
    }
}

/// Offsets rotating per segment, transcribed: in segment `s = floor(i / w)` of branch
/// `(w, r)`, head `h` keeps the positions `a + t r + o` with `o = (h + s) mod r`; `i` and
/// `j` pair up when both are kept in the same segment. Counts add over branches.
fn rotating_counts(branches: &[(usize, usize)], heads: usize, n: usize) -> Array3<u32> {
    Array3::from_shape_fn((heads, n, n), |(h, i, j)| {
        let kept = |&(w, r): &(usize, usize)| {
            let (s, a) = (i / w, i / w * w);
            let o = (h + s) % r;
            j / w == s && (i - a) % r == o && (j - a) % r == o
        };
        branches.iter().filter(|b| kept(b)).count() as u32
    })
}

fn two_branches() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((1..=12usize).prop_flat_map(|w| (Just(w), 1..=w)), 1..=3)
}

proptest! {
    #![proptest_config(config(128))]

    /// (c) Built-ins written as masks have the built-in's key sets: a sliding window
    /// (band), block-sparse local blocks, one LongNet branch `(w, r)` with offset
    /// `h mod r`, and dense.
    #[test]
    fn builtins_as_masks(
        [_, n, heads, _] in shape(),
        (left, right) in (0..6usize, 0..6usize),
        (m, radius) in (1..=5usize, 0..3usize),
        (w, r) in (1..=12usize).prop_flat_map(|w| (Just(w), 1..=w)),
    ) {
        let window = mask("k + left >= q && k <= q + right", &[("left", left), ("right", right)]);
        prop_assert_eq!(pattern_counts(&window, heads, n), pattern_counts(&SlidingWindow { left, right }, heads, n));
        let local = mask("abs(q / m - k / m) <= radius", &[("m", m), ("radius", radius)]);
        prop_assert_eq!(pattern_counts(&local, heads, n), pattern_counts(&BlockSparse::local(m, radius), heads, n));
        let longnet = mask(
            "q / seg == k / seg && q % seg % dil == h % dil && k % seg % dil == h % dil",
            &[("seg", w), ("dil", r)],
        );
        prop_assert_eq!(pattern_counts(&longnet, heads, n), pattern_counts(&Dilated::longnet(&[(w, r)]), heads, n));
        prop_assert_eq!(pattern_counts(&mask("true", &[]), heads, n), pattern_counts(&Dense, heads, n));
    }

    /// (d) `ExprDilated` with constant `w`, `r` and the offset rules written as
    /// expressions (`h % r`, `h / ((H + r - 1) / r)`, a fixed `o < r`) is `Dilated`
    /// with those rules: same key multisets, and attention equal to the naive oracle
    /// under them. The union combine is the same key sets counted once.
    #[test]
    fn constant_branches_equal_dilated(
        shape in shape(),
        bs in branches_with_offsets(12, 3),
        causal: bool,
        seed in 0u64..1 << 40,
    ) {
        let [_, n, heads, _] = shape;
        let reference = Dilated {
            branches: bs.iter().map(|&(segment, dilation, offset)| Branch { segment, dilation, offset }).collect(),
            combine: Combine::SoftmaxDenominator,
        };
        let branches: Vec<ExprBranch> = bs.iter().map(|&(w, r, rule)| branch(w, r, &offset_text(rule))).collect();
        let sum = ExprDilated { branches: branches.clone(), combine: ExprCombine::SoftmaxDenominator };
        let counts = pattern_counts(&reference, heads, n);
        prop_assert_eq!(pattern_counts(&sum, heads, n), counts.clone());
        let union = ExprDilated { branches, combine: ExprCombine::Union };
        prop_assert_eq!(pattern_counts(&union, heads, n), counts.mapv(|c| c.min(1)));
        assert_engine_matches(&Spec::new(sum).causal(causal), &counts, shape, seed);
        assert_engine_matches(&Spec::new(union).causal(causal), &counts.mapv(|c| c.min(1)), shape, seed);
    }

    /// (e) Offsets rotating per segment need no code: `offset = "h + s"` (and its
    /// spelling `(h + s) % r`) keeps, in segment `s`, the residue `(h + s) mod r`, as
    /// the transcription says; attention equals the naive oracle under it.
    #[test]
    fn offsets_rotating_per_segment(
        shape in shape(),
        bs in two_branches(),
        causal: bool,
        seed in 0u64..1 << 40,
    ) {
        let [_, n, heads, _] = shape;
        let want = rotating_counts(&bs, heads, n);
        for offset in ["h + s", "(h + s) % r"] {
            let branches = bs.iter().map(|&(w, r)| branch(w, r, offset)).collect();
            let pattern = ExprDilated { branches, combine: ExprCombine::SoftmaxDenominator };
            prop_assert_eq!(pattern_counts(&pattern, heads, n), want.clone(), "{}", offset);
            assert_engine_matches(&Spec::new(pattern).causal(causal), &want, shape, seed);
        }
    }

    /// (g) Compact forms, what the GPU's compact `dilated_expr` launches read: branches
    /// with constant `w`, `r` and a random offset expression of `h`, `s`, `w`, `n`, `H`
    /// (a generated mask-language tree with `q`, `k` renamed `s`, `w`) are compact, their
    /// offset tables hold `interp`'s value floor-mod `r` for every head and segment, and
    /// the pattern's keys are those of the transcribed rule (in segment `s` head `h`
    /// keeps residue `o(h, s)`; counts add over branches).
    #[test]
    fn compact_forms_hold_the_offsets_of_every_head_and_segment(
        [_, n, heads, _] in shape(),
        bs in two_branches(),
        offsets in prop::collection::vec(int_e(3, false), 3),
    ) {
        let exprs: Vec<E> = offsets.iter().map(|e| rename(e, &[("q", "s"), ("k", "w")])).collect();
        let parsed: Result<Vec<ExprBranch>, _> = bs
            .iter()
            .zip(&exprs)
            .map(|(&(w, r), e)| ExprBranch::new(&w.to_string(), &r.to_string(), &print(e, false), None, &Constants::new()))
            .collect();
        // A constant part that divides by zero or overflows is rejected (checked in (a)).
        prop_assume!(parsed.is_ok());
        let pattern = ExprDilated { branches: parsed.unwrap(), combine: ExprCombine::SoftmaxDenominator };
        let offset = |e: &E, (h, s, w, r): (usize, usize, usize, usize)| -> usize {
            let env: HashMap<&str, i64> = [("h", h), ("s", s), ("w", w), ("n", n), ("H", heads)]
                .into_iter()
                .map(|(k, v)| (k, v as i64))
                .collect();
            interp(e, &env).rem_euclid(r as i64) as usize
        };
        let forms = pattern.compact_branches(heads, n).expect("constant segments and dilations are compact");
        for (form, (&(w, r), e)) in forms.iter().zip(bs.iter().zip(&exprs)) {
            prop_assert_eq!((form.segment, form.dilation, form.segments), (w, r, n.div_ceil(w)));
            for h in 0..heads {
                for s in 0..n.div_ceil(w) {
                    prop_assert_eq!(form.offset(h, s), offset(e, (h, s, w, r)), "head {}, segment {}", h, s);
                }
            }
        }
        let want = Array3::from_shape_fn((heads, n, n), |(h, i, j)| {
            let kept = |(&(w, r), e): (&(usize, usize), &E)| {
                let (s, a) = (i / w, i / w * w);
                let o = offset(e, (h, s, w, r));
                j / w == s && (i - a) % r == o && (j - a) % r == o
            };
            bs.iter().zip(&exprs).filter(|&b| kept(b)).count() as u32
        });
        prop_assert_eq!(pattern_counts(&pattern, heads, n), want);
    }

    /// (h) A LongNet branch written as a mask (same segment, the query's and the key's
    /// residue equal to an offset `X % r` of `h`, `H`, `n`: a random tree) is recognised
    /// as that branch, in any order of its conjuncts and either residue spelling, and
    /// keeps exactly the mask's keys (the form the GPU runs compacted).
    #[test]
    fn longnet_masks_are_recognised_as_their_branch(
        [_, n, heads, _] in shape(),
        (w, r) in (1..=12usize).prop_flat_map(|w| (Just(w), 1..=w)),
        offset in int_e(2, false),
        order in 0..6usize,
        long_form: bool,
    ) {
        let o = format!("({}) % {r}", print(&rename(&offset, &[("q", "h"), ("k", "n")]), false));
        let residue = |x: &str| if long_form || w % r != 0 { format!("{x} % {w} % {r}") } else { format!("{x} % {r}") };
        let mut parts = [format!("q / {w} == k / {w}"), format!("{} == {o}", residue("q")), format!("{o} == {}", residue("k"))];
        parts.rotate_left(order % 3);
        if order >= 3 {
            parts.swap(0, 1);
        }
        let text = parts.join(" && ");
        let Ok(m) = ExprPattern::new(&text, &Constants::new()) else {
            // A constant part that divides by zero or overflows is rejected (checked in (a)).
            return Ok(());
        };
        let d = m.as_dilated();
        prop_assert!(d.is_some(), "{} not recognised", text);
        let d = d.unwrap();
        prop_assert!(d.validate(heads, n).is_ok());
        prop_assert_eq!(pattern_counts(&d, heads, n), pattern_counts(&m, heads, n), "{}", text);
    }

    /// (f) A branch mask filters the branch's keys: LongNet branches with the mask
    /// `k <= q` are the causal clip of `Dilated::longnet`, and with a per-segment
    /// dilation `r = 1 + s % 2` and `w` depending on `H` the parameters are read per
    /// head and segment (checked against a transcription).
    #[test]
    fn branch_masks_and_per_segment_parameters([_, n, heads, _] in shape(), bs in two_branches()) {
        let causal: Vec<ExprBranch> = bs
            .iter()
            .map(|&(w, r)| ExprBranch::new(&w.to_string(), &r.to_string(), "h", Some("k <= q"), &Constants::new()).unwrap())
            .collect();
        let pattern = ExprDilated { branches: causal, combine: ExprCombine::SoftmaxDenominator };
        let want = pattern_counts(&Dilated::longnet(&bs), heads, n);
        let want = Array3::from_shape_fn(want.dim(), |(h, i, j)| if j <= i { want[[h, i, j]] } else { 0 });
        prop_assert_eq!(pattern_counts(&pattern, heads, n), want);

        let varying = ExprBranch::new("2 + H", "1 + s % 2", "h", None, &Constants::new()).unwrap();
        let pattern = ExprDilated { branches: vec![varying], combine: ExprCombine::SoftmaxDenominator };
        prop_assert!(pattern.validate(heads, n).is_ok());
        let w = 2 + heads;
        let want = Array3::from_shape_fn((heads, n, n), |(h, i, j)| {
            let (s, a) = (i / w, i / w * w);
            let r = 1 + s % 2;
            u32::from(j / w == s && (i - a) % r == h % r && (j - a) % r == h % r)
        });
        prop_assert_eq!(pattern_counts(&pattern, heads, n), want);
    }
}

// ---------------------------------------------------------------------------------
// Rejections and their messages
// ---------------------------------------------------------------------------------

fn mask_error(text: &str) -> String {
    ExprPattern::new(text, &named(&[("window", 4)])).unwrap_err().to_string()
}

#[test]
fn syntax_errors_name_line_column_and_token() {
    assert_eq!(mask_error("abs(q - k) <= window &&\n  min(q, k k"), "mask: expected ')' at 2:12, found 'k'");
    assert_eq!(
        mask_error("q >= k &&"),
        "mask: expected an operand (a number, a name, '(', '-', '!', 'if', min, max or abs) at 1:10, found end of input"
    );
    assert_eq!(mask_error("if q < k then true false"), "mask: expected 'else' at 1:20, found 'false'");
    assert_eq!(mask_error("q < k < n"), "mask: expected an operator or the end of the expression at 1:7, found '<'");
    assert_eq!(mask_error("q # k"), "mask: unexpected character '#' at 1:3");
}

#[test]
fn type_errors_name_the_operator() {
    assert_eq!(
        mask_error("q + (k < 2)"),
        "mask: type error at 1:3, token '+': the right operand must be int, found bool"
    );
    assert_eq!(mask_error("abs(q - k)"), "mask: type error at 1:1, token 'abs': a mask must be bool, found int");
    assert_eq!(
        mask_error("q == true"),
        "mask: type error at 1:3, token '==': both sides must have one type, found int and bool"
    );
    assert_eq!(
        mask_error("if q < k then 1 else false"),
        "mask: type error at 1:1, token 'if': both branches must have one type, found int and bool"
    );
}

#[test]
fn unknown_names_list_the_known_ones() {
    assert_eq!(
        mask_error("abs(q - k) <= windw"),
        "mask: unknown name 'windw' at 1:15; known here: b, h, q, k, n, H (in a mask) and the constants window"
    );
    let e = ExprBranch::new("64", "4", "(h + q) % r", None, &Constants::new()).unwrap_err();
    assert_eq!(e.to_string(), "offset: unknown name 'q' at 1:6; known here: h, H, n, s, w, r (in an offset)");
    let e = ExprBranch::new("64", "4", "(h + s", None, &Constants::new()).unwrap_err();
    assert_eq!(e.to_string(), "offset: expected ')' at 1:7, found end of input");
}

#[test]
fn constant_faults_are_rejected_before_any_work() {
    assert_eq!(
        mask_error("q / (window - 4) == 0"),
        "mask: division by zero at 1:3: the divisor of '/' is the constant 0"
    );
    assert_eq!(
        mask_error("k < q + (9223372036854775807 + window)"),
        "mask: integer overflow at 1:30: '+' on constants leaves the 64-bit range"
    );
    let e = ExprPattern::new("true", &named(&[("k", 1)])).unwrap_err();
    assert_eq!(e.to_string(), "mask: constant 'k': this is a variable (b, h, q, k, n, H, s, w, r)");
    let e = ExprPattern::new("b == 0", &Constants::new()).unwrap_err();
    assert!(matches!(e, ExprError::In { .. }) && e.to_string().starts_with("mask: 'b' at 1:1: the batch row"), "{e}");
}

#[test]
fn over_long_expressions_are_rejected() {
    let long = format!("q < k{}", " ".repeat(5000));
    assert_eq!(mask_error(&long), "mask: expression of 5005 bytes is longer than the limit of 4096 bytes");
    let wide = format!("q < {}", vec!["k"; 150].join(" + "));
    assert_eq!(mask_error(&wide), "mask: expression of 301 operators and operands is larger than the limit of 256");
    let deep = format!("q < {}k{}", "abs(".repeat(40), ")".repeat(40));
    assert_eq!(mask_error(&deep), "mask: expression nested deeper than 32 levels at 1:137, token 'abs'");
}

#[test]
fn branch_values_are_validated_per_head_and_segment() {
    let (q, k, v) = qkv([1, 8, 2, 4], 1);
    let run = |segment: &str, dilation: &str| {
        let b = ExprBranch::new(segment, dilation, "h", None, &Constants::new()).unwrap();
        let spec = Spec::new(ExprDilated { branches: vec![b], combine: ExprCombine::Union });
        attention(q.view(), k.view(), v.view(), &spec).map(|_| ())
    };
    let w0 = run("n - 8 * h", "1").unwrap_err();
    assert_eq!(w0, Error::BranchValue { branch: 0, parameter: "segment", value: 0, head: 1, segment: None });
    assert_eq!(w0.to_string(), "branch 0: segment evaluates to 0 for head 1; it must be at least 1");
    let r1 = run("4", "1 - 2 * s").unwrap_err();
    assert_eq!(r1, Error::BranchValue { branch: 0, parameter: "dilation", value: -1, head: 0, segment: Some(1) });
    assert_eq!(r1.to_string(), "branch 0: dilation evaluates to -1 for head 0 in segment 1; it must be at least 1");
    let negative = run("3 - 5 * h", "1").unwrap_err();
    assert_eq!(negative.to_string(), "branch 0: segment evaluates to -2 for head 1; it must be at least 1");
    assert_eq!(run("4", "2 + 3 * s"), Err(Error::DilationExceedsSegment { branch: 0, dilation: 5, segment: 4 }));
    assert_eq!(run("4", "1 + s"), Ok(()));
    let empty = ExprDilated { branches: vec![], combine: ExprCombine::SoftmaxDenominator };
    assert_eq!(empty.validate(2, 8), Err(Error::NoBranches));
}

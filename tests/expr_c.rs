//! Pattern expressions printed as C (`c_function` over `C_PRELUDE`, the source the GPU
//! kernels will compile) compute what the reference's evaluator computes, on every
//! input: random well-typed int and bool expressions (`expr_gen.rs`: with `2^62`, large
//! literals, `/`, `%`, `abs`, `-`, `if`) are compiled together by the host's C compiler
//! into one program, run at random points and at the ends of `i64` (`i64::MIN`, `-1`,
//! `0`, `i64::MAX`, where sums, products, `abs`, `-` and `i64::MIN / -1` wrap and the
//! divisions meet their special divisors), and every value must equal `Expression::eval`.
//!
//! The split form (`c_split`: the mask as a query side, a key side and the part reading
//! both, as the kernels' element loops evaluate it) is checked alongside, in both widths:
//! `cross(q_side(v), k_side(v))` must equal the evaluator too.
//!
//! The 32-bit functions (`c_function_i32`, which the kernels use where `fits_i32` holds)
//! are checked the same way on boxes of inputs as the kernels see them (`q`, `k` in
//! `[0, n)`, `h` in `[0, H)`, for lengths up to `i32::MAX`): wherever `fits_i32` accepts an
//! expression on a box, its 32-bit value equals the evaluator's at the box's corners and
//! at random points inside it.
//!
//! The compiler is `$CC`, else `cc`; warnings about overflow or conversions are errors
//! (`-Wall -Wextra -Werror`), and UBSan (where the compiler has it) turns any undefined
//! operation the transcription might still contain into a failure. A missing compiler
//! fails the test (it never passes without running the C): any machine that builds this
//! test has one, since `cc` is Rust's linker on Linux.

mod expr_gen;

use expr_gen::{bool_e, constants, int_e, print};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, TestRng, TestRunner};
use ringdil_reference::pattern::expr::{
    C_PRELUDE, Env, Expression, Interval, Ranges, Scope, Ty, Var, c_function, c_function_i32, c_split, fits_i32,
};
use ringdil_reference::random::SplitMix64;
use std::io::Write;
use std::process::Command;

/// How many expressions, and how many random points each is evaluated at (besides the
/// edge pairs of [`points`]).
const EXPRESSIONS: usize = 300;
const POINTS: usize = 64;

/// Values at the ends of `i64` and near zero, where the rules have their special cases.
const EDGES: [i64; 9] = [i64::MIN, i64::MIN + 1, -3, -1, 0, 1, 2, 1 << 62, i64::MAX];

/// Random well-typed expressions (those the pipeline accepts: folding rejects constant
/// overflow and constant division by zero), from a fixed seed.
fn expressions() -> Vec<Expression> {
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::deterministic_rng(Default::default()));
    let mut out = Vec::new();
    while out.len() < EXPRESSIONS {
        let (ty, strategy) = if out.len() % 2 == 0 { (Ty::Int, int_e(3, true)) } else { (Ty::Bool, bool_e(3, true)) };
        let e = strategy.new_tree(&mut runner).expect("a value").current();
        if let Ok(x) = Expression::new(&print(&e, false), &Scope::MASK, &constants(), ty) {
            out.push(x);
        }
    }
    out
}

/// The points: every pair of edge values on alternating variables (so that each two
/// neighbours in [`Var::ALL`], such as `q` and `k`, meet as every pair, `i64::MIN` and `-1`
/// included), then random points, each variable an edge value or a small or wide random
/// integer.
fn points() -> Vec<Env> {
    let mut out = Vec::new();
    for &x in &EDGES {
        for &y in &EDGES {
            let env = Var::ALL
                .iter()
                .enumerate()
                .fold(Env::default(), |env, (j, &var)| env.with(var, if j % 2 == 0 { x } else { y }));
            out.push(env);
        }
    }
    let mut rng = SplitMix64::new(21);
    out.extend((0..POINTS).map(|i| {
        Var::ALL.iter().enumerate().fold(Env::default(), |env, (j, &var)| {
            let pick = rng.next_u64();
            let value = match (i + j) % 3 {
                0 => EDGES[(pick % EDGES.len() as u64) as usize],
                1 => (pick % 64) as i64 - 32,
                _ => pick as i64,
            };
            env.with(var, value)
        })
    }));
    out
}

/// A C program printing every expression's value at every point, one per line (point by
/// point, expressions in order).
fn program(exprs: &[Expression], points: &[Env]) -> String {
    let mut src = String::from("#include <stdio.h>\n");
    src.push_str(C_PRELUDE);
    for (i, e) in exprs.iter().enumerate() {
        src.push_str(&c_function(&format!("expr_{i}"), e));
        src.push_str(&c_split(&format!("split_{i}"), e, false));
    }
    src.push_str(&format!("static const rd_i64 P[{}][{}] = {{\n", points.len(), Var::ALL.len()));
    for p in points {
        let row: Vec<String> = Var::ALL.iter().map(|&v| c_literal(p.get(v))).collect();
        src.push_str(&format!("    {{{}}},\n", row.join(", ")));
    }
    src.push_str("};\nint main(void) {\n");
    src.push_str(&format!("    for (int i = 0; i < {}; ++i) {{\n        const rd_i64* p = P[i];\n", points.len()));
    let args: Vec<String> = (0..Var::ALL.len()).map(|j| format!("p[{j}]")).collect();
    let (q_args, k_args) = (side_args(Var::Key), side_args(Var::Query));
    for i in 0..exprs.len() {
        let args = args.join(", ");
        src.push_str(&format!("        printf(\"%lld\\n\", expr_{i}({args}));\n"));
        src.push_str(&format!(
            "        printf(\"%lld\\n\", split_{i}_cross(split_{i}_q({q_args}), split_{i}_k({k_args})));\n"
        ));
    }
    src.push_str("    }\n    return 0;\n}\n");
    src
}

/// The arguments `p[0], p[1], ...` of a split's side function, with `hidden`'s zeroed:
/// the kernels call the query side without the key's position and the other way round.
fn side_args(hidden: Var) -> String {
    let arg = |(j, v): (usize, &Var)| if *v == hidden { "0".to_string() } else { format!("p[{j}]") };
    Var::ALL.iter().enumerate().map(arg).collect::<Vec<_>>().join(", ")
}

fn c_literal(v: i64) -> String {
    if v == i64::MIN { "RD_I64_MIN".into() } else { format!("{v}LL") }
}

/// Compile `src` with `$CC` (or `cc`), with UBSan where the compiler has its runtime.
fn compile(src: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let c = dir.join("exprs.c");
    std::fs::File::create(&c).unwrap().write_all(src.as_bytes()).unwrap();
    let exe = dir.join("exprs");
    let base = [
        "-std=c99",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-unused-function",
        "-Wno-unused-parameter",
        "-Wno-tautological-compare",
    ];
    let ubsan = ["-fsanitize=undefined", "-fno-sanitize-recover=all"];
    let build = |extra: &[&str]| {
        let out = Command::new(&cc).args(base).args(extra).arg(&c).arg("-o").arg(&exe).output();
        out.unwrap_or_else(|e| panic!("no C compiler `{cc}` ({e}); set CC"))
    };
    let with_ubsan = build(&ubsan);
    // A compile error is a failure of the transcription, not a missing sanitizer: only
    // retry without UBSan when the sanitizer's runtime is what failed.
    let out = if !with_ubsan.status.success() && String::from_utf8_lossy(&with_ubsan.stderr).contains("sanitize") {
        build(&[])
    } else {
        with_ubsan
    };
    assert!(out.status.success(), "{cc} refused the generated C:\n{}", String::from_utf8_lossy(&out.stderr));
    exe
}

#[test]
fn c_source_computes_what_the_evaluator_computes() {
    let (exprs, points) = (expressions(), points());
    let dir = std::env::temp_dir().join(format!("ringdil-expr-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = compile(&program(&exprs, &points), &dir);
    let run = Command::new(&exe).output().expect("run the compiled expressions");
    assert!(run.status.success(), "the compiled program failed:\n{}", String::from_utf8_lossy(&run.stderr));
    let values: Vec<i64> =
        String::from_utf8(run.stdout).unwrap().lines().map(|l| l.parse().expect("an integer per line")).collect();
    assert_eq!(values.len(), 2 * exprs.len() * points.len());
    let mut checked = 0;
    for (pi, p) in points.iter().enumerate() {
        for (ei, e) in exprs.iter().enumerate() {
            let at = 2 * (pi * exprs.len() + ei);
            let (got, split) = (values[at], values[at + 1]);
            assert_eq!(got, e.eval(p), "expression {:?} at {p:?}: C gives {got}", e.source());
            assert_eq!(split, e.eval(p), "expression {:?} at {p:?}: the split C gives {split}", e.source());
            checked += 1;
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    println!("{checked} values equal ({} expressions x {} points)", exprs.len(), points.len());
}

/// The boxes of the 32-bit check: `(n, H)`, with `q, k` in `[0, n)`, `h` in `[0, H)`.
const BOXES: [(i64, i64); 6] = [(1, 1), (7, 3), (1000, 8), (65536, 16), (1 << 20, 64), (i32::MAX as i64, 128)];

/// The box of `(n, H)` (`b` is 0 in the kernels; no mask names `s`, `w`, `r`).
fn kernel_box((n, heads): (i64, i64)) -> Ranges {
    Ranges::at(&Env::default().with(Var::SeqLen, n).with(Var::Heads, heads))
        .with(Var::Query, Interval::between(0, n - 1))
        .with(Var::Key, Interval::between(0, n - 1))
        .with(Var::Head, Interval::between(0, heads - 1))
}

/// Points of the box `(n, H)`: its corners, then random points.
fn box_points((n, heads): (i64, i64), rng: &mut SplitMix64) -> Vec<Env> {
    let at = |h: i64, q: i64, k: i64| {
        Env::default()
            .with(Var::SeqLen, n)
            .with(Var::Heads, heads)
            .with(Var::Head, h)
            .with(Var::Query, q)
            .with(Var::Key, k)
    };
    let mut out = Vec::new();
    for h in [0, heads - 1] {
        for q in [0, n - 1] {
            for k in [0, n - 1] {
                out.push(at(h, q, k));
            }
        }
    }
    let mut draw = |m: i64| (rng.next_u64() % m as u64) as i64;
    out.extend((0..16).map(|_| {
        let (h, q, k) = (draw(heads), draw(n), draw(n));
        at(h, q, k)
    }));
    out
}

/// Expressions whose operands go negative inside the kernels' boxes (differences of
/// positions), where floor division and modulo differ from C's truncating ones, added to
/// the random ones of the 32-bit check.
const NEGATIVE_OPERANDS: [&str; 8] = [
    "(q - k) / 3",
    "(q - k) % 5",
    "(k - q) / (h + 1) + (k - q) % (h + 2)",
    "-q % 7 + (h - q) / -3",
    "(q - k) % -4 - abs(q - k) / 2",
    "min(q - k, h - q) / 7",
    "if q < k then (q - k) / 2 else (k - q) % 3",
    "(q - k) / (q - k) + (q - k) % (h - 1)",
];

#[test]
fn i32_source_computes_what_the_evaluator_computes_where_it_fits() {
    let mut exprs = expressions();
    exprs.extend(
        NEGATIVE_OPERANDS.iter().map(|src| {
            Expression::new(src, &Scope::MASK, &constants(), Ty::Int).unwrap_or_else(|e| panic!("{src}: {e}"))
        }),
    );
    let mut rng = SplitMix64::new(32);
    // (expression, point) of every box where the expression fits.
    let mut cases: Vec<(usize, Env)> = Vec::new();
    let mut fitting = vec![false; exprs.len()];
    let mut boxes_fit = 0;
    for (i, e) in exprs.iter().enumerate() {
        for b in BOXES {
            if fits_i32(e.root(), &kernel_box(b)) {
                fitting[i] = true;
                boxes_fit += 1;
                cases.extend(box_points(b, &mut rng).into_iter().map(|p| (i, p)));
            }
        }
    }
    // Enough of the generated expressions fit somewhere for the check to mean something,
    // and enough are refused (large literals, products of positions) for the test of fits_i32 to.
    let refused = exprs.len() * BOXES.len() - boxes_fit;
    assert!(boxes_fit >= 300 && refused >= 300, "{boxes_fit} boxes fit, {refused} refused");
    let mut src = String::from("#include <stdio.h>\n");
    src.push_str(C_PRELUDE);
    for (i, e) in exprs.iter().enumerate().filter(|(i, _)| fitting[*i]) {
        src.push_str(&c_function_i32(&format!("expr32_{i}"), e));
        src.push_str(&c_split(&format!("split32_{i}"), e, true));
    }
    // call(f, p): the whole function f (f >= 0) or, as ~f, its split form.
    src.push_str("static rd_i32 call(int f, const rd_i32* p) {\n    switch (f) {\n");
    let args = (0..Var::ALL.len()).map(|j| format!("p[{j}]")).collect::<Vec<_>>().join(", ");
    let (q_args, k_args) = (side_args(Var::Key), side_args(Var::Query));
    for i in (0..exprs.len()).filter(|&i| fitting[i]) {
        src.push_str(&format!("    case {i}: return expr32_{i}({args});\n"));
        src.push_str(&format!(
            "    case ~{i}: return split32_{i}_cross(split32_{i}_q({q_args}), split32_{i}_k({k_args}));\n"
        ));
    }
    src.push_str("    default: return 0;\n    }\n}\n");
    src.push_str(&format!("static const rd_i32 P[{}][{}] = {{\n", cases.len(), Var::ALL.len() + 1));
    for (i, p) in &cases {
        let row: Vec<String> =
            std::iter::once(i.to_string()).chain(Var::ALL.iter().map(|&v| p.get(v).to_string())).collect();
        src.push_str(&format!("    {{{}}},\n", row.join(", ")));
    }
    src.push_str(&format!(
        "}};\nint main(void) {{\n    for (int i = 0; i < {}; ++i) printf(\"%d %d\\n\", call(P[i][0], P[i] + 1), call(~P[i][0], P[i] + 1));\n    return 0;\n}}\n",
        cases.len()
    ));
    let dir = std::env::temp_dir().join(format!("ringdil-expr-c32-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = compile(&src, &dir);
    let run = Command::new(&exe).output().expect("run the compiled expressions");
    assert!(run.status.success(), "the compiled program failed:\n{}", String::from_utf8_lossy(&run.stderr));
    let values: Vec<(i64, i64)> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').expect("two values per line");
            (a.parse().expect("an integer"), b.parse().expect("an integer"))
        })
        .collect();
    assert_eq!(values.len(), cases.len());
    for ((i, p), &(got, split)) in cases.iter().zip(&values) {
        let (want, src) = (exprs[*i].eval(p), exprs[*i].source());
        assert_eq!(got, want, "expression {src:?} at {p:?}: 32-bit C gives {got}");
        assert_eq!(split, want, "expression {src:?} at {p:?}: the 32-bit split C gives {split}");
    }
    std::fs::remove_dir_all(&dir).ok();
    println!("{} values equal ({boxes_fit} expression boxes fit, {refused} refused)", cases.len());
}

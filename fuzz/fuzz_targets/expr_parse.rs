//! Pattern expressions from arbitrary bytes (issue 21): the lexer, parser, type checker
//! and constant folder never panic or overflow the stack, every rejection's message
//! names a position inside the input, and whatever is accepted evaluates without a
//! panic (debug assertions on: no unchecked overflow) on extreme variable values and
//! drives `ExprPattern` / `ExprDilated` on small shapes with every key in range, and
//! compact forms keep exactly the pattern's keys; a mask recognised as a sliding window
//! holds exactly on the window's pairs, one recognised as a nested union of LongNet
//! branches has exactly that union's keys (under its causal test).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringdil_reference::Pattern;
use ringdil_reference::pattern::expr::{Constants, Env, ExprError, Expression, Pos, Scope, Ty, Var};
use ringdil_reference::pattern::{ExprBranch, ExprCombine, ExprDilated, ExprPattern, KeyRun};

/// Variable values at the edges of `i64` and around zero.
const VALUES: [i64; 7] = [i64::MIN, i64::MIN + 1, -7, -1, 0, 3, i64::MAX];

/// A pattern in compact form (what the GPU's compact launches read) keeps, in segment `s`
/// of each branch, the residue `o(h, s) < r` of its table, and nothing else: its keys
/// are the pattern's for every head and query (counts add over branches).
fn check_compact(pattern: &ExprDilated, heads: usize, n: usize) {
    let Some(forms) = pattern.compact_branches(heads, n) else {
        assert!(!pattern.is_compact(), "a compact pattern without compact forms");
        return;
    };
    let mut runs = Vec::new();
    for f in &forms {
        assert_eq!(f.offsets.len(), heads * n.div_ceil(f.segment));
        assert!(f.offsets.iter().all(|&o| o < f.dilation));
    }
    for (q, h) in (0..n).flat_map(|q| (0..heads).map(move |h| (q, h))) {
        let mut want = vec![0u32; n];
        for f in &forms {
            let (w, r) = (f.segment, f.dilation);
            let (s, o) = (q / w, f.offset(h, q / w));
            if (q - s * w) % r == o {
                (s * w + o..(s * w + w).min(n)).step_by(r).for_each(|k| want[k] += 1);
            }
        }
        runs.clear();
        pattern.key_runs(q, h, heads, n, &mut runs);
        let mut got = vec![0u32; n];
        runs.iter().flat_map(|run| run.iter()).for_each(|k| got[k] += 1);
        if pattern.combine == ExprCombine::Union {
            want.iter_mut().for_each(|c| *c = (*c).min(1));
        }
        assert_eq!(got, want, "compact forms of {pattern:?}: head {h}, query {q}");
    }
}

/// Check that a rejection's position (if it has one) lies inside `text` (column 1 past
/// the last character is the end of input).
fn check_error(text: &str, e: &ExprError) {
    let at = match e {
        ExprError::TooDeep { at, .. }
        | ExprError::UnexpectedChar { at, .. }
        | ExprError::BadLiteral { at, .. }
        | ExprError::Syntax { at, .. }
        | ExprError::UnknownName { at, .. }
        | ExprError::Type { at, .. }
        | ExprError::ConstantDivisionByZero { at, .. }
        | ExprError::ConstantOverflow { at, .. }
        | ExprError::BatchRow { at } => *at,
        ExprError::In { error, .. } => return check_error(text, error),
        _ => return,
    };
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(at.line >= 1 && at.line <= lines.len(), "{e}: line out of range");
    assert!(at.col >= 1 && at.col <= lines[at.line - 1].chars().count() + 1, "{e}: column out of range");
    assert!(!e.to_string().is_empty());
}

/// A mask recognised as a sliding window (what the GPU then runs as its built-in window)
/// holds exactly on the window's pairs, for positions up to the GPU's `2^31 - 1`, any
/// head and length: the evaluator against `q - left <= k <= q + right`, pair by pair.
fn check_window(pattern: &ExprPattern) {
    let Some((left, right)) = pattern.as_window() else { return };
    const EDGE: i64 = i32::MAX as i64;
    let reach = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
    let positions = [0, 1, 2, 3, 7, 100, 511, 512, 513, 1 << 20, EDGE - 513, EDGE - 2, EDGE - 1, EDGE];
    for (&q, &k) in positions.iter().flat_map(|q| positions.iter().map(move |k| (q, k))) {
        for (n, heads) in [(EDGE, 1), (1000, 7)] {
            let env = Env::default().with(Var::Query, q).with(Var::Key, k).with(Var::SeqLen, n).with(Var::Heads, heads);
            let window = q - k <= reach(left) && k - q <= reach(right);
            assert_eq!(pattern.mask().eval(&env) != 0, window, "window ({left}, {right}) at q {q}, k {k}");
        }
    }
}

/// A mask recognised as a nested union (what the GPU then runs as the union's pieces,
/// its `k <= q` the call's causality) keeps exactly the union's keys, cut at the query
/// when causal, on small shapes.
fn check_union(pattern: &ExprPattern) {
    let Some((union, causal)) = pattern.as_nested_union() else { return };
    assert!(union.is_nested_union(), "a recognised union that does not nest: {union:?}");
    for (n, heads) in [(1, 1), (17, 2), (40, 3)] {
        if union.validate(heads, n).is_err() {
            continue;
        }
        for (q, h) in (0..n).flat_map(|q| (0..heads).map(move |h| (q, h))) {
            let mut want = ringdil_reference::pattern::key_counts(&union, q, h, heads, n);
            if causal {
                want.iter_mut().skip(q + 1).for_each(|c| *c = 0);
            }
            let got = ringdil_reference::pattern::key_counts(pattern, q, h, heads, n);
            assert_eq!(got, want, "union {union:?} (causal {causal}): head {h}, query {q}");
        }
    }
}

/// Every run lies inside `0..n` and steps forward.
fn check_runs(runs: &[KeyRun], n: usize) {
    for run in runs {
        assert!(run.step >= 1 && run.iter().all(|k| k < n), "run {run:?} outside 0..{n}");
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let constants: Constants = [("window".to_string(), 3), ("big".to_string(), i64::MAX)].into_iter().collect();
    for (scope, ty) in [
        (Scope::MASK, Ty::Bool),
        (Scope::MASK, Ty::Int),
        (Scope::SEGMENT, Ty::Int),
        (Scope::OFFSET, Ty::Int),
        (Scope::BRANCH_MASK, Ty::Bool),
    ] {
        match Expression::new(&text, &scope, &constants, ty) {
            Err(e) => check_error(&text, &e),
            Ok(expr) => {
                assert_eq!(Expression::new(&text, &scope, &constants, ty).as_ref(), Ok(&expr), "not deterministic");
                for (i, &v) in VALUES.iter().enumerate() {
                    let env = Var::ALL.iter().enumerate().fold(Env::default(), |env, (j, &var)| {
                        env.with(var, VALUES[(i + j) % VALUES.len()].wrapping_add(v % 5))
                    });
                    let value = expr.eval(&env);
                    assert!(ty == Ty::Int || value == 0 || value == 1, "bool evaluated to {value}");
                }
            }
        }
    }
    let _ = Pos::of(&text, text.len());

    let mut runs = Vec::new();
    if let Ok(pattern) = ExprPattern::new(&text, &constants) {
        check_window(&pattern);
        check_union(&pattern);
        for (n, heads) in [(0, 1), (1, 1), (7, 2), (12, 3)] {
            for (q, h) in (0..n).flat_map(|q| (0..heads).map(move |h| (q, h))) {
                runs.clear();
                pattern.key_runs(q, h, heads, n, &mut runs);
                check_runs(&runs, n);
            }
        }
    }
    // The input as each field of a branch (the others fixed), under both combines.
    let fields =
        [(&*text, "2", "h", None), ("5", &*text, "h", None), ("5", "2", &*text, None), ("5", "2", "h", Some(&*text))];
    for (segment, dilation, offset, mask) in fields {
        let Ok(branch) = ExprBranch::new(segment, dilation, offset, mask, &constants) else { continue };
        for combine in [ExprCombine::SoftmaxDenominator, ExprCombine::Union] {
            let pattern = ExprDilated { branches: vec![branch.clone(), branch.clone()], combine };
            for (n, heads) in [(1, 1), (9, 2), (13, 3)] {
                if pattern.validate(heads, n).is_err() {
                    continue;
                }
                for (q, h) in (0..n).flat_map(|q| (0..heads).map(move |h| (q, h))) {
                    runs.clear();
                    pattern.key_runs(q, h, heads, n, &mut runs);
                    check_runs(&runs, n);
                }
                check_compact(&pattern, heads, n);
            }
        }
    }
});

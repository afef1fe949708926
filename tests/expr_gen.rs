//! Random pattern expressions for the property tests (shared by `expressions.rs` and
//! `expr_tiles.rs`, each of which includes it as a module): a tree [`E`] of well-typed
//! expressions, its strategies and its printer.

use proptest::prelude::*;
use proptest::sample::select;
use ringdil_reference::pattern::expr::Constants;

/// An expression as the tests generate it. Operators are their spelling.
#[derive(Debug, Clone)]
pub(crate) enum E {
    Int(i64),
    Bool(bool),
    Name(&'static str),
    /// `-`, `!` or `abs`.
    Un(&'static str, Box<E>),
    /// An infix operator, or `min` / `max`.
    Bin(&'static str, Box<E>, Box<E>),
    If(Box<E>, Box<E>, Box<E>),
}

/// The mask variables (no `b`: reference patterns have no batch row) and two constants.
pub(crate) const VARS: [&str; 5] = ["h", "q", "k", "n", "H"];
pub(crate) const CONSTANTS: [(&str, i64); 2] = [("window", 3), ("huge", 1 << 62)];

pub(crate) fn constants() -> Constants {
    CONSTANTS.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

fn bin(op: &'static str, a: E, b: E) -> E {
    E::Bin(op, Box::new(a), Box::new(b))
}

/// Int-typed expressions of depth `depth`; `huge` allows the constant 2^62 and large
/// literals (so that constant folding can overflow).
pub(crate) fn int_e(depth: u32, huge: bool) -> BoxedStrategy<E> {
    let names: Vec<&'static str> = if huge { vec!["h", "q", "k", "n", "H", "window", "huge"] } else { VARS.to_vec() };
    let leaf = prop_oneof![
        4 => (0i64..12).prop_map(E::Int),
        4 => select(names).prop_map(E::Name),
        if huge { 1 } else { 0 } => select(vec![i64::MAX, 1 << 62, 3 << 61]).prop_map(E::Int),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    let (sub, cond) = (int_e(depth - 1, huge), bool_e(depth - 1, huge));
    prop_oneof![
        2 => leaf,
        4 => (select(vec!["+", "-", "*", "/", "%", "min", "max"]), sub.clone(), sub.clone())
            .prop_map(|(op, a, b)| bin(op, a, b)),
        1 => (select(vec!["-", "abs"]), sub.clone()).prop_map(|(op, a)| E::Un(op, Box::new(a))),
        1 => (cond, sub.clone(), sub).prop_map(|(c, a, b)| E::If(Box::new(c), Box::new(a), Box::new(b))),
    ]
    .boxed()
}

/// Bool-typed expressions of depth `depth`.
pub(crate) fn bool_e(depth: u32, huge: bool) -> BoxedStrategy<E> {
    if depth == 0 {
        return any::<bool>().prop_map(E::Bool).boxed();
    }
    let (int, sub) = (int_e(depth - 1, huge), bool_e(depth - 1, huge));
    prop_oneof![
        1 => any::<bool>().prop_map(E::Bool),
        4 => (select(vec!["==", "!=", "<", "<=", ">", ">="]), int.clone(), int).prop_map(|(op, a, b)| bin(op, a, b)),
        2 => (select(vec!["&&", "||", "==", "!="]), sub.clone(), sub.clone()).prop_map(|(op, a, b)| bin(op, a, b)),
        1 => sub.clone().prop_map(|a| E::Un("!", Box::new(a))),
        1 => (sub.clone(), sub.clone(), sub).prop_map(|(c, a, b)| E::If(Box::new(c), Box::new(a), Box::new(b))),
    ]
    .boxed()
}

/// The binding level of a node as the docs state it (loosest first): `if` 0, `||` 1,
/// `&&` 2, comparisons 3 (no chains), `+ -` 4, `* / %` 5, unary `- !` 6, atoms 7.
fn level(e: &E) -> u8 {
    match e {
        E::If(..) => 0,
        E::Bin("||", ..) => 1,
        E::Bin("&&", ..) => 2,
        E::Bin("==" | "!=" | "<" | "<=" | ">" | ">=", ..) => 3,
        E::Bin("+" | "-", ..) => 4,
        E::Bin("*" | "/" | "%", ..) => 5,
        E::Un("-" | "!", _) => 6,
        _ => 7,
    }
}

/// Source text of `e`: with the fewest parentheses the precedence rules allow, or
/// (`full`) every operand parenthesised and operators followed by line breaks.
pub(crate) fn print(e: &E, full: bool) -> String {
    let wrap = |child: &E, min_level: u8| {
        let text = print(child, full);
        let leaf = matches!(child, E::Int(_) | E::Bool(_) | E::Name(_));
        if (full && !leaf) || level(child) < min_level { format!("({text})") } else { text }
    };
    let gap = if full { "\n  " } else { " " };
    match e {
        E::Int(v) => v.to_string(),
        E::Bool(v) => v.to_string(),
        E::Name(n) => n.to_string(),
        E::Un("abs", a) => format!("abs({})", print(a, full)),
        E::Un(op, a) => format!("{op} {}", wrap(a, 6)),
        E::Bin(op @ ("min" | "max"), a, b) => format!("{op}({}, {})", print(a, full), print(b, full)),
        E::Bin(op, a, b) => {
            let l = level(e);
            // Left-associative: the left operand may sit at the same level, the right
            // one must bind tighter; comparisons do not chain at all.
            let left_min = if l == 3 { 4 } else { l };
            format!("{} {op}{gap}{}", wrap(a, left_min), wrap(b, l + 1))
        }
        E::If(c, a, b) => format!("if {} then{gap}{} else{gap}{}", print(c, full), print(a, full), print(b, full)),
    }
}

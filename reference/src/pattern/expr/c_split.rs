//! A mask split by what its parts read, for the kernels' element loops.
//!
//! A kernel tests the mask for every (query row, key column) of a partial tile, but most
//! of a mask usually reads only one side: in `q / 4096 == k / 4096 && q % 4 == (h + q /
//! 4096) % 4 && ...` the divisions and the whole residue test of the query depend on `q`
//! (and the per-block values `h, n, H`) alone. Evaluated per element, that work is
//! repeated for every key of the row. [`c_split`] prints the mask as three C functions:
//!
//! * `NAME_q(vars)`: the **query side**, a struct of the values of the maximal subtrees
//!   that read no `k` (subtrees reading no position at all, such as `H / 2`, go here too),
//!   computed once per query row;
//! * `NAME_k(vars)`: the **key side**, the maximal subtrees that read `k` but not `q`,
//!   once per key column;
//! * `NAME_cross(x, y)`: the rest of the tree (the nodes reading both), with each side's
//!   subtrees replaced by their values, once per element.
//!
//! `cross(q_side(v), k_side(v)) = mask(v)` for every input `v`: evaluation is total and
//! has no effects (`super::eval`), so computing a subtree ahead of the operator that
//! needs it (even one that a lazy `&&` or `if` would skip) cannot change a value. Equal
//! subtrees share one field. `tests/expr_c.rs` compiles the three functions with the
//! host's C compiler and checks `cross(q(v), k(v))` against the evaluator, in both widths.

use super::Expression;
use super::ast::{Kind, Node, Var};
use super::c_source::{Width, emit, emit_with, params};
use std::fmt::Write;

/// Which positions a subtree reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Neither `q` nor `k` (literals, `h`, `n`, `H`, ...).
    Neither,
    Query,
    Key,
    Both,
}

fn join(a: Side, b: Side) -> Side {
    match (a, b) {
        (Side::Neither, x) | (x, Side::Neither) => x,
        (x, y) if x == y => x,
        _ => Side::Both,
    }
}

fn side(node: &Node) -> Side {
    match &node.kind {
        Kind::Int(_) | Kind::Bool(_) => Side::Neither,
        Kind::Var(Var::Query) => Side::Query,
        Kind::Var(Var::Key) => Side::Key,
        Kind::Var(_) => Side::Neither,
        Kind::Unary(_, a) => side(a),
        Kind::Binary(_, a, b) => join(side(a), side(b)),
        Kind::If(c, a, b) => join(join(side(c), side(a)), side(b)),
    }
}

/// The fields of one side: each a distinct subtree's C source.
#[derive(Default)]
struct Fields(Vec<String>);

impl Fields {
    /// The index of the field holding `source`, added at its first use.
    fn of(&mut self, source: String) -> usize {
        match self.0.iter().position(|f| *f == source) {
            Some(i) => i,
            None => {
                self.0.push(source);
                self.0.len() - 1
            }
        }
    }
}

/// Print the cross part of `node`: a subtree that reads one side (or neither, unless it
/// is a literal) becomes a field of that side, read as `x.fI` (query side) or `y.fI`.
fn emit_cross(node: &Node, w: Width, q: &mut Fields, k: &mut Fields, out: &mut String) {
    let whole = |n: &Node| {
        let mut s = String::new();
        emit(n, w, &mut s);
        s
    };
    match (side(node), &node.kind) {
        (Side::Neither, Kind::Int(_) | Kind::Bool(_)) => emit(node, w, out),
        (Side::Neither | Side::Query, _) => write!(out, "x.f{}", q.of(whole(node))).expect("writing to a String"),
        (Side::Key, _) => write!(out, "y.f{}", k.of(whole(node))).expect("writing to a String"),
        // The node's own operator around its children's cross parts.
        (Side::Both, _) => emit_with(node, w, out, &mut |child, out| emit_cross(child, w, q, k, out)),
    }
}

/// The struct type and the function computing one side's fields.
fn side_function(name: &str, w: Width, fields: &Fields) -> String {
    let ty = w.ty;
    let mut out = String::from("typedef struct {");
    if fields.0.is_empty() {
        write!(out, " {ty} unused;").expect("writing to a String");
    }
    for i in 0..fields.0.len() {
        write!(out, " {ty} f{i};").expect("writing to a String");
    }
    writeln!(out, " }} {name}_t;").expect("writing to a String");
    writeln!(out, "RINGDIL_EXPR_FN {name}_t {name}({}) {{\n    {name}_t x;", params(w)).expect("writing to a String");
    if fields.0.is_empty() {
        out.push_str("    x.unused = 0;\n");
    }
    for (i, f) in fields.0.iter().enumerate() {
        writeln!(out, "    x.f{i} = {f};").expect("writing to a String");
    }
    out.push_str("    return x;\n}\n");
    out
}

/// `expr` as `NAME_q`, `NAME_k` and `NAME_cross` (module docs), 32-bit with `narrow`
/// (exact only where [`super::fits_i32`] holds, as [`super::c_function_i32`]). The side
/// functions take every variable of [`Var::ALL`], as [`super::c_function`] does, and
/// read only their own side's position.
pub fn c_split(name: &str, expr: &Expression, narrow: bool) -> String {
    let w = Width::of(narrow);
    let (mut q, mut k) = (Fields::default(), Fields::default());
    let mut cross = String::new();
    emit_cross(expr.root(), w, &mut q, &mut k, &mut cross);
    format!(
        "{}{}RINGDIL_EXPR_FN {ty} {name}_cross({name}_q_t x, {name}_k_t y) {{\n    return {cross};\n}}\n",
        side_function(&format!("{name}_q"), w, &q),
        side_function(&format!("{name}_k"), w, &k),
        ty = w.ty
    )
}

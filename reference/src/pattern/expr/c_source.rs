//! An expression as C source, for the GPU kernels (NVRTC compiles it into the mask) and
//! for any C compiler: the integer semantics of [`super::eval`], transcribed one operator
//! per small function ([`PRELUDE`]), and the folded tree printed as nested calls of them
//! ([`c_function`]).
//!
//! Why functions and not C's operators: C's `/` and `%` truncate towards zero and are
//! undefined for a zero divisor and for `INT64_MIN / -1`, and signed overflow is undefined
//! behaviour; the language of pattern files defines all of them (floor division, `a / 0 =
//! 0`, `a % 0 = a`, two's-complement wrapping). So every arithmetic operator goes through
//! a function that computes in `unsigned long long`, where wrapping is defined, and
//! converts back (modulo 2^64: what NVRTC, GCC and Clang do, and what C23 requires), and
//! the divisions test their two special divisors before dividing. Comparisons and
//! `&&`, `||`, `!`, `if` are C's own (0/1 values, lazy evaluation, which nothing can
//! observe since nothing fails).
//!
//! **Two widths.** [`c_function`] computes in 64 bits, the evaluator's width, for every
//! input. [`c_function_i32`] computes the same operators in 32 bits (`rd32_*`: the same
//! rules in `unsigned int`), which a GPU runs several times faster (a 64-bit division by
//! a constant is a multi-word multiply, a 32-bit one a single high multiply); it is exact
//! only where [`super::fits_i32`] holds for the box of inputs it will see (every node's
//! value an `i32`), which the kernels' caller checks for the call's sequence length and
//! heads before choosing it.
//!
//! The source compiles as CUDA (functions `__device__ __forceinline__`) and as C99 (where
//! `RINGDIL_EXPR_FN` is `static inline`); `tests/expr_c.rs` compiles generated functions
//! of both widths with the host's C compiler and compares them with [`super::eval`] on
//! random and extreme values (the 32-bit ones on boxes where they fit), and
//! `kernels_compile` compiles them with NVRTC.

use super::Expression;
use super::ast::{Binary, Kind, Node, Unary, Var};
use std::fmt::Write;

/// The operator functions every generated function calls. Include it once per
/// translation unit, before the functions of [`c_function`].
pub const PRELUDE: &str = r#"
#ifdef __CUDACC__
#define RINGDIL_EXPR_FN __device__ __forceinline__
#else
#define RINGDIL_EXPR_FN static inline
#endif
typedef long long rd_i64;
typedef unsigned long long rd_u64;
typedef int rd_i32;
typedef unsigned int rd_u32;
#define RD_I64_MIN (-9223372036854775807LL - 1)
/* The operators of one width: prefix P, signed type T, unsigned type U. Arithmetic in U,
   where wrapping is defined. div: floor(a / b), 0 for b = 0, and T's minimum / -1 wraps to
   itself. mod: a - b floor(a / b), the sign of b; a for b = 0; 0 for b = -1. For a
   divisor 2^s: shr(a, s) = floor(a / 2^s) (where a < 0, ~a = -a - 1 >= 0 and
   floor(a / m) = -floor((-a - 1) / m) - 1: an arithmetic shift that shifts no negative
   value), low(a, 2^s - 1) = a mod 2^s (two's complement's low s bits). */
#define RD_OPS(P, T, U)                                                                  \
    RINGDIL_EXPR_FN T P##add(T a, T b) { return (T)((U)a + (U)b); }                       \
    RINGDIL_EXPR_FN T P##sub(T a, T b) { return (T)((U)a - (U)b); }                       \
    RINGDIL_EXPR_FN T P##mul(T a, T b) { return (T)((U)a * (U)b); }                       \
    RINGDIL_EXPR_FN T P##neg(T a) { return (T)((U)0 - (U)a); }                            \
    RINGDIL_EXPR_FN T P##abs(T a) { return a < 0 ? P##neg(a) : a; }                       \
    RINGDIL_EXPR_FN T P##min(T a, T b) { return a < b ? a : b; }                          \
    RINGDIL_EXPR_FN T P##max(T a, T b) { return a > b ? a : b; }                          \
    RINGDIL_EXPR_FN T P##div(T a, T b) {                                                  \
        if (b == 0) return 0;                                                             \
        if (b == -1) return P##neg(a);                                                    \
        T q = a / b;                                                                      \
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;                          \
    }                                                                                     \
    RINGDIL_EXPR_FN T P##mod(T a, T b) {                                                  \
        if (b == 0) return a;                                                             \
        if (b == -1) return 0;                                                            \
        T r = a % b;                                                                      \
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;                              \
    }                                                                                     \
    RINGDIL_EXPR_FN T P##shr(T a, int s) { return a < 0 ? (T)~((U)~a >> s) : (T)((U)a >> s); } \
    RINGDIL_EXPR_FN T P##low(T a, T m) { return (T)((U)a & (U)m); }
/* 64 bits, the evaluator's width; 32 bits for c_function_i32 (exact where fits_i32 holds). */
RD_OPS(rd_, rd_i64, rd_u64)
RD_OPS(rd32_, rd_i32, rd_u32)
"#;

/// The parameters of every generated function, in [`Var::ALL`] order, as C names.
pub(super) fn param(var: Var) -> String {
    // C is case-sensitive, but a prefix keeps `h` and `H` apart from any macro too.
    format!("v_{}", var.name())
}

/// The integer type and operator functions of one width.
#[derive(Clone, Copy)]
pub(super) struct Width {
    pub(super) ty: &'static str,
    ops: &'static str,
}

const WIDE: Width = Width { ty: "rd_i64", ops: "rd_" };
const NARROW: Width = Width { ty: "rd_i32", ops: "rd32_" };

impl Width {
    /// 32-bit (`narrow`, exact where `fits_i32` holds) or 64-bit.
    pub(super) fn of(narrow: bool) -> Width {
        if narrow { NARROW } else { WIDE }
    }
}

/// `expr` as the C function `name`, of every variable of [`Var::ALL`] (in that order,
/// all `long long`), returning its value (0 or 1 for a boolean expression). `name` must
/// be a C identifier.
pub fn c_function(name: &str, expr: &Expression) -> String {
    function(name, expr, WIDE)
}

/// [`c_function`] in 32-bit arithmetic (variables and value `int`): equal to the
/// evaluator on every input of a box where [`super::fits_i32`] holds, and undefined as a
/// transcription elsewhere (module docs).
pub fn c_function_i32(name: &str, expr: &Expression) -> String {
    function(name, expr, NARROW)
}

/// The parameter list of every generated function of width `w`: each variable of
/// [`Var::ALL`], in order.
pub(super) fn params(w: Width) -> String {
    Var::ALL.iter().map(|&v| format!("{} {}", w.ty, param(v))).collect::<Vec<_>>().join(", ")
}

fn function(name: &str, expr: &Expression, w: Width) -> String {
    let mut body = String::new();
    emit(expr.root(), w, &mut body);
    format!("RINGDIL_EXPR_FN {} {name}({}) {{\n    return {body};\n}}\n", w.ty, params(w))
}

/// Print `node` as a C expression (fully parenthesised: no precedence to get wrong).
pub(super) fn emit(node: &Node, w: Width, out: &mut String) {
    emit_with(node, w, out, &mut |child, out| emit(child, w, out));
}

/// Print `node`'s own operator (or the leaf itself) with `child` printing each operand:
/// [`emit`] prints the operands the same way, the split's cross part
/// (`super::c_split`) prints them as its fields where they read one side.
pub(super) fn emit_with(node: &Node, w: Width, out: &mut String, child: &mut dyn FnMut(&Node, &mut String)) {
    let ty = w.ty;
    match &node.kind {
        Kind::Int(v) if *v == i64::MIN => out.push_str("RD_I64_MIN"),
        // A literal of a narrow function fits (fits_i32 checks every node); the cast keeps
        // the C type the function's.
        Kind::Int(v) => write!(out, "(({ty}){v}LL)").expect("writing to a String"),
        Kind::Bool(v) => write!(out, "(({ty}){})", u8::from(*v)).expect("writing to a String"),
        Kind::Var(var) => out.push_str(&param(*var)),
        Kind::Unary(op, a) => {
            match op {
                Unary::Neg => write!(out, "{}neg(", w.ops),
                Unary::Abs => write!(out, "{}abs(", w.ops),
                Unary::Not => write!(out, "({ty})!("),
            }
            .expect("writing to a String");
            child(a, out);
            out.push(')');
        }
        // A division or modulo by a positive power of two: a shift or a mask (what they
        // equal, by the prelude's comment), which a GPU runs in one instruction where the
        // general floor division by a constant takes a high multiply and sign fix-ups.
        Kind::Binary(op @ (Binary::Div | Binary::Mod), a, b) if power_of_two(b).is_some() => {
            let v = power_of_two(b).expect("matched");
            match op {
                Binary::Div => write!(out, "{}shr(", w.ops),
                _ => write!(out, "{}low(", w.ops),
            }
            .expect("writing to a String");
            child(a, out);
            match op {
                Binary::Div => write!(out, ", {})", v.trailing_zeros()),
                _ => write!(out, ", (({ty}){}LL))", v - 1),
            }
            .expect("writing to a String");
        }
        Kind::Binary(op, a, b) => {
            // The text before a, between a and b, and after b.
            let call = |f: &str| (format!("{}{f}(", w.ops), ", ".to_string(), ")");
            let infix = |sym: &str| (format!("({ty})(("), format!(") {sym} ("), "))");
            let (open, mid, close) = match op {
                Binary::Add => call("add"),
                Binary::Sub => call("sub"),
                Binary::Mul => call("mul"),
                Binary::Div => call("div"),
                Binary::Mod => call("mod"),
                Binary::Min => call("min"),
                Binary::Max => call("max"),
                Binary::Eq => infix("=="),
                Binary::Ne => infix("!="),
                Binary::Lt => infix("<"),
                Binary::Le => infix("<="),
                Binary::Gt => infix(">"),
                Binary::Ge => infix(">="),
                Binary::And => infix("&&"),
                Binary::Or => infix("||"),
            };
            out.push_str(&open);
            child(a, out);
            out.push_str(&mid);
            child(b, out);
            out.push_str(close);
        }
        Kind::If(c, a, b) => {
            out.push_str("((");
            child(c, out);
            out.push_str(") ? (");
            child(a, out);
            out.push_str(") : (");
            child(b, out);
            out.push_str("))");
        }
    }
}

/// The value of a literal that is a positive power of two.
fn power_of_two(node: &Node) -> Option<i64> {
    match node.kind {
        Kind::Int(v) if v > 0 && (v as u64).is_power_of_two() => Some(v),
        _ => None,
    }
}

//! Pattern expressions in the kernels: a mask written in a pattern file
//! ([`ExprPattern`], `docs/semantics.md` section 14) compiled into its own kernel module.
//!
//! The expression's C source ([`c_function`] over [`C_PRELUDE`], proven equal to the
//! reference's evaluator by `tests/expr_c.rs`) goes into the translation unit right
//! after `params.cuh`, with a wrapper `expr_allowed(p, h, i, j)` that `allowed()` in
//! `mask.cuh` calls for `PATTERN_EXPR` launches. Its variables come from the launch:
//! `h` is the global query head (`head_base + h`, so a head slice of Ulysses sees the
//! pattern's heads), `q` and `k` are global positions, `n` the sequence length the
//! pattern is defined on, `H` the pattern's heads; `b` is 0 (mask expressions have no
//! batch row).
//!
//! **Split.** The mask is also printed split by what its parts read ([`c_split`]): the
//! element loops of `mask.cuh` (`mask_expr_scores`, `mask_expr_scores_t`) take its query
//! side once per query row (`expr_row`), its key side once per key (`expr_col`), and
//! per element only the part reading both (`expr_pair`): for a LongNet-like rule the
//! divisions and residue tests leave the element loop, which keeps a few compares.
//! `expr_allowed` (the whole mask) serves every other caller of `allowed()`.
//!
//! **Width.** Where the call's sequence length and heads keep every node of the mask an
//! `i32` ([`ExprPattern::fits_i32`]), the mask is the 32-bit transcription
//! ([`c_function_i32`], equal to the evaluator there): the kernels evaluate it per element
//! of every partial tile, and 64-bit division and modulo, even by constants, cost several
//! times the 32-bit ones. Other calls get the 64-bit one. The two are different sources,
//! so different modules.
//!
//! A module is compiled per expression: [`Variant::expr`](crate::Variant) carries an
//! [`ExprId`], the index of the expression's source in a process-wide registry, so that
//! `Variant` stays a small `Copy` key of the module cache and equal sources share one id
//! (and one module).

use ringdil_reference::pattern::ExprPattern;
use ringdil_reference::pattern::expr::{C_PRELUDE, Var, c_function, c_function_i32, c_split};
use std::sync::{Mutex, OnceLock};

/// The id of a registered expression source (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExprId(pub u32);

/// Registered sources, in registration order (an [`ExprId`] is an index).
static SOURCES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();

/// The CUDA source of `pattern`'s mask for the translation unit: the operator prelude,
/// the expression as `ringdil_expr_mask` (32-bit with `narrow`, module docs), and
/// `expr_allowed`.
fn kernel_source(pattern: &ExprPattern, narrow: bool) -> String {
    let ty = if narrow { "rd_i32" } else { "rd_i64" };
    let args: Vec<String> = Var::ALL
        .iter()
        .map(|v| match v {
            Var::Head => format!("({ty})(p.head_base + h)"),
            Var::Query => format!("({ty})i"),
            Var::Key => format!("({ty})j"),
            Var::SeqLen => format!("({ty})p.seq_len"),
            Var::Heads => format!("({ty})p.pattern_heads"),
            // No batch row in mask expressions; the branch variables are not in a mask's scope.
            Var::Batch | Var::SegmentIndex | Var::Segment | Var::Dilation => "0".into(),
        })
        .collect();
    let function = match narrow {
        true => c_function_i32("ringdil_expr_mask", pattern.mask()),
        false => c_function("ringdil_expr_mask", pattern.mask()),
    };
    let split = c_split("ringdil_expr_split", pattern.mask(), narrow);
    // The split's sides get the other side's position as 0 (they do not read it).
    let side_args = |hidden: Var| {
        let zero = |(v, a): (&Var, &String)| if *v == hidden { "0".to_string() } else { a.clone() };
        Var::ALL.iter().zip(&args).map(zero).collect::<Vec<_>>().join(", ")
    };
    format!(
        "#define RINGDIL_EXPR 1\n{C_PRELUDE}{function}{split}\
         __device__ __forceinline__ bool expr_allowed(const Params& p, int h, int i, int j) {{\n    return ringdil_expr_mask({}) != 0;\n}}\n\
         typedef ringdil_expr_split_q_t ExprRow;\ntypedef ringdil_expr_split_k_t ExprCol;\n\
         __device__ __forceinline__ ExprRow expr_row(const Params& p, int h, int i) {{\n    return ringdil_expr_split_q({});\n}}\n\
         __device__ __forceinline__ ExprCol expr_col(const Params& p, int h, int j) {{\n    return ringdil_expr_split_k({});\n}}\n\
         __device__ __forceinline__ bool expr_pair(const ExprRow& x, const ExprCol& y) {{\n    return ringdil_expr_split_cross(x, y) != 0;\n}}\n",
        args.join(", "),
        side_args(Var::Key),
        side_args(Var::Query),
    )
}

/// The id of `pattern`'s source for a call on `seq_len` tokens and `heads` pattern heads
/// (which decide its width), registering it at its first use.
pub fn register(pattern: &ExprPattern, seq_len: usize, heads: usize) -> ExprId {
    let source = kernel_source(pattern, pattern.fits_i32(seq_len, heads));
    let mut sources = SOURCES.get_or_init(Default::default).lock().expect("expression registry lock");
    let index = match sources.iter().position(|s| *s == source) {
        Some(i) => i,
        None => {
            sources.push(source);
            sources.len() - 1
        }
    };
    ExprId(u32::try_from(index).expect("fewer than 2^32 expressions in one process"))
}

/// The source registered as `id` ([`register`] made every id that exists).
pub(crate) fn source(id: ExprId) -> String {
    let sources = SOURCES.get_or_init(Default::default).lock().expect("expression registry lock");
    sources[id.0 as usize].clone()
}

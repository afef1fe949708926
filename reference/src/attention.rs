//! The public entry points: full attention, attention of a chunk of queries over a
//! chunk of keys, and their backward passes.
//!
//! Tensors are `[batch, seq, heads, head_dim]`; the log-sum-exp is `[batch, heads, seq]`.
//! `k` and `v` (and `dk`, `dv`) may have fewer heads than `q`: `H_kv` heads dividing
//! the `H` of `q` is grouped-query attention, query head `h` reading K/V head
//! `h / (H / H_kv)`, and the gradient of a K/V head is the sum over its query heads
//! ([`Heads`], `docs/semantics.md` section 15). The head counts come from the shapes.
//! A query row with no allowed key (a causal row under key padding, a dilated head that
//! keeps no position of a short last segment, ...) has output 0 and LSE `-inf`; its
//! gradient contributions are 0.
//!
//! Numerical domain (`docs/semantics.md`, section 13): every exponential is taken after
//! subtracting the row's maximum score (forward) or its final LSE (backward), so finite
//! scores of any size give finite results, accurate up to rounding (which grows with
//! the scores' magnitude). An allowed score `scale * q . k` that is not finite in the
//! element type (f32 entries near `1e20`, f64 near `1e160`) is [`Error::ScoreOverflow`],
//! never a NaN output. The backward refuses an `lse` that is NaN or `+inf`
//! ([`Error::BadLse`]) and a `-inf` one for a row with keys ([`Error::LseMismatch`]).
//!
//! [`Error::ScoreOverflow`]: crate::Error::ScoreOverflow
//! [`Error::BadLse`]: crate::Error::BadLse
//! [`Error::LseMismatch`]: crate::Error::LseMismatch

use crate::blocked::{Chunk, row_dots};
use crate::check;
use crate::error::Result;
use crate::float::cast;
use crate::heads::Heads;
use crate::partial::Partial;
use crate::spec::Spec;
use ndarray::{Array3, Array4, ArrayView4, Axis, NdFloat};

/// Final attention output: `out = s_h * O` where `O` is the normalised attention and
/// `s_h` the pattern's output scale (1 except for the head-group combine), and the LSE.
#[derive(Debug, Clone, PartialEq)]
pub struct Attention<T> {
    pub out: Array4<T>,
    pub lse: Array3<T>,
}

/// Gradients with respect to `q`, `k` and `v`, shaped like them (`dk`, `dv` with the
/// K/V heads of `k`, `v`, each the sum over the query heads of its group).
#[derive(Debug, Clone, PartialEq)]
pub struct Gradients<T> {
    pub dq: Array4<T>,
    pub dk: Array4<T>,
    pub dv: Array4<T>,
}

/// What the backward pass of any chunk needs from the forward result and the upstream
/// gradient `d_out` (all for the same query rows):
/// * `d_out_scaled = s_h * d_out` (the gradient with respect to the normalised output),
/// * `lse`, the final log-sum-exp,
/// * `delta_i = sum_d d_out_id * out_id` (the `D` of flash-attention 2), which equals
///   `sum_d d_out_scaled_id * O_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputGrad<T> {
    pub d_out_scaled: Array4<T>,
    pub lse: Array3<T>,
    pub delta: Array3<T>,
}

impl<T: NdFloat> Partial<T> {
    /// The final output: apply the pattern's per-head output scale. Only a *finished*
    /// result is what users see; merging must happen before.
    pub fn finish(self, spec: &Spec) -> Attention<T> {
        let Partial { mut out, lse } = self;
        scale_heads(&mut out, spec);
        Attention { out, lse }
    }
}

/// Multiply head `h` of `x` by the pattern's output scale `s_h` (in place on a value
/// this module owns).
fn scale_heads<T: NdFloat>(x: &mut Array4<T>, spec: &Spec) {
    let heads = x.dim().2;
    for (h, mut head) in x.axis_iter_mut(Axis(2)).enumerate() {
        let s = spec.pattern.output_scale(h, heads);
        if s != 1.0 {
            head.mapv_inplace(|x| x * cast(s));
        }
    }
}

impl<T: NdFloat> OutputGrad<T> {
    pub fn new(spec: &Spec, forward: &Attention<T>, d_out: ArrayView4<T>) -> Result<Self> {
        check::same_shape("d_out", forward.out.shape(), d_out.shape())?;
        check::finite("d_out", &d_out)?;
        let delta = row_dots(d_out, forward.out.view());
        let mut d_out_scaled = d_out.to_owned();
        scale_heads(&mut d_out_scaled, spec);
        Ok(OutputGrad { d_out_scaled, lse: forward.lse.clone(), delta })
    }

    /// The rows `rows` of every field (a query chunk of a ring rank, say).
    pub fn select_rows(&self, rows: &[usize]) -> Self {
        OutputGrad {
            d_out_scaled: self.d_out_scaled.select(Axis(1), rows),
            lse: self.lse.select(Axis(2), rows),
            delta: self.delta.select(Axis(2), rows),
        }
    }
}

/// Check one chunk problem: shapes (`k`, `v` with `H_kv` heads dividing the `H` of `q`),
/// positions, finiteness and the spec.
fn validate_chunk<T: NdFloat>(
    q: &ArrayView4<T>,
    q_pos: &[usize],
    k: &ArrayView4<T>,
    v: &ArrayView4<T>,
    k_pos: &[usize],
    seq_len: usize,
    spec: &Spec,
) -> Result<()> {
    let [b, nq, h, d] = check::dims4("q", q)?;
    let [_, nk, h_kv, _] = check::dims4("k", k)?;
    let dv = check::dims4("v", v)?[3];
    check::same_shape("k", &[b, nk, h_kv, d], k.shape())?;
    check::same_shape("v", &[b, nk, h_kv, dv], v.shape())?;
    Heads::new(h, h_kv)?;
    check::same_shape("q positions", &[nq], &[q_pos.len()])?;
    check::same_shape("k positions", &[nk], &[k_pos.len()])?;
    check::positions("q positions", q_pos, seq_len)?;
    check::positions("k positions", k_pos, seq_len)?;
    for (name, x) in [("q", q), ("k", k), ("v", v)] {
        check::finite(name, x)?;
    }
    spec.validate(b, h, seq_len)
}

/// Attention of the queries `q` (global positions `q_pos`) over the keys `k`, `v`
/// (global positions `k_pos`) of a sequence of `seq_len` tokens: a [`Partial`] to be
/// merged with the partials over the other keys.
pub fn attend_chunk<T: NdFloat>(
    q: ArrayView4<T>,
    q_pos: &[usize],
    k: ArrayView4<T>,
    v: ArrayView4<T>,
    k_pos: &[usize],
    seq_len: usize,
    spec: &Spec,
) -> Result<Partial<T>> {
    validate_chunk(&q, q_pos, &k, &v, k_pos, seq_len, spec)?;
    let (out, lse) = Chunk::new(q, q_pos, k, v, k_pos, seq_len, spec).forward()?;
    Ok(Partial { out, lse })
}

/// The backward contributions of one chunk; see [`OutputGrad`] for `grad`, whose rows
/// are the rows of `q`. `grad.d_out_scaled` and `grad.delta` must be finite
/// ([`Error::NonFinite`]); `grad.lse` finite or `-inf` ([`Error::BadLse`]), and `-inf`
/// only for rows with no key in the forward, hence none in this chunk
/// ([`Error::LseMismatch`]).
///
/// [`Error::NonFinite`]: crate::Error::NonFinite
/// [`Error::BadLse`]: crate::Error::BadLse
/// [`Error::LseMismatch`]: crate::Error::LseMismatch
#[allow(clippy::too_many_arguments)]
pub fn backward_chunk<T: NdFloat>(
    q: ArrayView4<T>,
    q_pos: &[usize],
    k: ArrayView4<T>,
    v: ArrayView4<T>,
    k_pos: &[usize],
    seq_len: usize,
    spec: &Spec,
    grad: &OutputGrad<T>,
) -> Result<Gradients<T>> {
    validate_chunk(&q, q_pos, &k, &v, k_pos, seq_len, spec)?;
    let (b, nq, h, dv) = (q.dim().0, q.dim().1, q.dim().2, v.dim().3);
    check::same_shape("d_out", &[b, nq, h, dv], grad.d_out_scaled.shape())?;
    check::same_shape("lse", &[b, h, nq], grad.lse.shape())?;
    check::same_shape("delta", &[b, h, nq], grad.delta.shape())?;
    check::finite("d_out", &grad.d_out_scaled.view())?;
    check::finite("delta", &grad.delta.view())?;
    check::lse("backward: OutputGrad", &grad.lse.view())?;
    let chunk = Chunk::new(q, q_pos, k, v, k_pos, seq_len, spec);
    let (dq, dk, dv) = chunk.backward(grad.d_out_scaled.view(), grad.lse.view(), grad.delta.view())?;
    Ok(Gradients { dq, dk, dv })
}

/// Full (self-)attention of `q` over `k`, `v` under `spec`.
pub fn attention<T: NdFloat>(
    q: ArrayView4<T>,
    k: ArrayView4<T>,
    v: ArrayView4<T>,
    spec: &Spec,
) -> Result<Attention<T>> {
    let n = q.dim().1;
    check::same_shape("k (self-attention: same seq as q)", &[n], &[k.dim().1])?;
    let all: Vec<usize> = (0..n).collect();
    Ok(attend_chunk(q, &all, k, v, &all, n, spec)?.finish(spec))
}

/// dQ, dK, dV of [`attention()`] for the upstream gradient `d_out`, from the saved output
/// and LSE (nothing else is stored between the passes).
pub fn attention_backward<T: NdFloat>(
    q: ArrayView4<T>,
    k: ArrayView4<T>,
    v: ArrayView4<T>,
    spec: &Spec,
    forward: &Attention<T>,
    d_out: ArrayView4<T>,
) -> Result<Gradients<T>> {
    let n = q.dim().1;
    check::same_shape("k (self-attention: same seq as q)", &[n], &[k.dim().1])?;
    let grad = OutputGrad::new(spec, forward, d_out)?;
    let all: Vec<usize> = (0..n).collect();
    backward_chunk(q, &all, k, v, &all, n, spec, &grad)
}

/// Attention on bf16 or f16 inputs: widened to f32 (exactly), computed in f32.
pub fn attention_low_precision<H: Copy + Into<f32>>(
    q: ArrayView4<H>,
    k: ArrayView4<H>,
    v: ArrayView4<H>,
    spec: &Spec,
) -> Result<Attention<f32>> {
    let widen = |x: ArrayView4<H>| x.mapv(Into::into);
    attention(widen(q).view(), widen(k).view(), widen(v).view(), spec)
}

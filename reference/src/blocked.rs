//! The blocked, rayon-parallel evaluation of attention over *indexed* rows.
//!
//! Both sides carry global positions: query row `r` of the chunk is token `q_pos[r]`,
//! key row `c` is token `k_pos[c]`. Full attention is the case `q_pos = k_pos = 0..n`;
//! a ring step or a key partition is any other case. Masks and dilation offsets are
//! always computed from global positions, never from local row numbers.
//!
//! Heads are query heads. Under grouped-query attention (`k`, `v` with `H_kv` heads,
//! `g = H / H_kv`) query head `h` reads the rows of K/V head `h / g` (patterns still
//! ask about query head `h` of `H`), and the backward's `dK`, `dV` of a K/V head are
//! the sum of its `g` query heads' contributions, added in ascending head order after
//! all tasks are done, so the result does not depend on how rayon schedules them.
//!
//! With packed documents ([`crate::Documents`]) a query's key runs are its pattern's runs
//! inside its own document ([`Spec::key_runs`]); rows of one document that share runs
//! are blocked together as without documents, and no block mixes documents unless its
//! rows fall in the small-group stream (where the union rule keeps blocks tight).
//!
//! Work is split into tasks `(batch, head, query rows)`. Inside a task, queries that
//! share their pattern's key runs (or, failing that, neighbouring queries) are gathered
//! into blocks of at most [`BLOCK_ROWS`] rows; a block's key columns are the union of its rows' keys, and a
//! count matrix `C` (multiplicities, 0 = masked) says which column each row may use.
//! The scores are then one matrix product `S = scale * Q_b K_u^T`, and sparse patterns
//! only ever touch the keys they allow: a LongNet branch `(w, r)` costs about `w/r`
//! keys per query, not `n`.
//!
//! Scores are checked where they are formed ([`Chunk::gather`]): an allowed score that
//! is not finite is [`Error::ScoreOverflow`], and a backward row with keys but a final
//! LSE of `-inf` is [`Error::LseMismatch`]. Tasks run in parallel, so each records the
//! earliest such fault it finds and the earliest of all tasks is returned: the error
//! does not depend on how rows fall into tasks and blocks.

use crate::error::{Error, Result};
use crate::float::cast;
use crate::pattern::KeyRun;
use crate::spec::Spec;
use ndarray::{Array1, Array2, Array3, Array4, ArrayView1, ArrayView3, ArrayView4, ArrayViewMut1, Axis, NdFloat, s};
use rayon::prelude::*;
use std::any::type_name;
use std::collections::HashMap;
use std::ops::Range;

/// Query rows per block: large enough for the matrix products to be efficient, small
/// enough that `BLOCK_ROWS x n` score matrices stay in cache-friendly sizes.
pub const BLOCK_ROWS: usize = 64;

const ABSENT: u32 = u32::MAX;

/// One block: query rows, the union of their key columns (ascending local indices) and
/// the multiplicity of each (row, column) pair.
pub(crate) struct Block<T> {
    pub rows: Vec<usize>,
    pub cols: Vec<usize>,
    pub counts: Array2<T>,
}

/// The inputs of one chunk computation, already validated.
pub(crate) struct Chunk<'a, T> {
    pub q: ArrayView4<'a, T>,
    pub q_pos: &'a [usize],
    pub k: ArrayView4<'a, T>,
    pub v: ArrayView4<'a, T>,
    pub k_pos: &'a [usize],
    pub seq_len: usize,
    pub spec: &'a Spec,
    /// Global key position -> local key row, or `ABSENT`.
    local_of: Vec<u32>,
    scale: T,
    /// Query heads per K/V head: query head `h` reads K/V head `h / group`.
    group: usize,
}

impl<'a, T: NdFloat> Chunk<'a, T> {
    pub fn new(
        q: ArrayView4<'a, T>,
        q_pos: &'a [usize],
        k: ArrayView4<'a, T>,
        v: ArrayView4<'a, T>,
        k_pos: &'a [usize],
        seq_len: usize,
        spec: &'a Spec,
    ) -> Self {
        let mut local_of = vec![ABSENT; seq_len];
        for (local, &global) in k_pos.iter().enumerate() {
            local_of[global] = local as u32;
        }
        let scale = cast(spec.scale_for(q.dim().3));
        let group = q.dim().2 / k.dim().2;
        Chunk { q, q_pos, k, v, k_pos, seq_len, spec, local_of, scale, group }
    }

    fn heads(&self) -> usize {
        self.q.dim().2
    }

    /// Tasks `(batch, head, query rows)`: enough of them to keep every thread busy.
    pub fn tasks(&self) -> Vec<(usize, usize, Range<usize>)> {
        let (batch, nq, heads, _) = self.q.dim();
        let wanted = (rayon::current_num_threads() * 4).div_ceil(batch * heads).max(1);
        let rows = nq.div_ceil(wanted).max(BLOCK_ROWS);
        let mut tasks = Vec::new();
        for b in 0..batch {
            for h in 0..heads {
                for start in (0..nq).step_by(rows) {
                    tasks.push((b, h, start..(start + rows).min(nq)));
                }
            }
        }
        tasks
    }

    /// Call `f` on every block of the task's rows. Rows with no key are skipped; their
    /// output is the empty partial.
    ///
    /// Rows are first grouped by the key runs their pattern gives them: rows sharing a
    /// key set (one LongNet membership class of a segment, one block-sparse query block,
    /// every row of a dense pattern) are blocked together, so a block's key union is no
    /// wider than its rows need. Rows whose group is small (a sliding window gives every
    /// row its own runs) are blocked in sequence order instead, where neighbours share
    /// most of their keys.
    pub fn for_each_block(&self, b: usize, h: usize, rows: Range<usize>, mut f: impl FnMut(&Block<T>)) {
        let heads = self.heads();
        let mut groups: Vec<(Vec<KeyRun>, Vec<usize>)> = Vec::new();
        let mut group_of: HashMap<Vec<KeyRun>, usize> = HashMap::new();
        let mut runs: Vec<KeyRun> = Vec::new();
        for r in rows {
            runs.clear();
            self.spec.key_runs(b, self.q_pos[r], h, heads, self.seq_len, &mut runs);
            match group_of.get(&runs) {
                Some(&g) => groups[g].1.push(r),
                None => {
                    group_of.insert(runs.clone(), groups.len());
                    groups.push((runs.clone(), vec![r]));
                }
            }
        }
        let (large, small): (Vec<_>, Vec<_>) = groups.iter().partition(|(_, rows)| rows.len() >= MIN_GROUP_ROWS);
        let mut streams: Vec<Vec<(usize, &[KeyRun])>> =
            large.iter().map(|(runs, rows)| rows.iter().map(|&r| (r, runs.as_slice())).collect()).collect();
        let mut rest: Vec<(usize, &[KeyRun])> =
            small.iter().flat_map(|(runs, rows)| rows.iter().map(move |&r| (r, runs.as_slice()))).collect();
        rest.sort_unstable_by_key(|&(r, _)| r);
        streams.push(rest);
        let mut blocker = Blocker::new(self.k.dim().1);
        for stream in streams {
            for (r, runs) in stream {
                self.row_keys(b, r, runs, &mut blocker.row_keys);
                blocker.add(r, &mut f);
            }
            blocker.flush(&mut f);
        }
    }

    /// The local key rows that query row `r` of batch row `b` sees, with multiplicity:
    /// its pattern runs (inside its document, [`Spec::key_runs`]) cut by causality and
    /// key padding, mapped to this chunk's rows.
    fn row_keys(&self, b: usize, r: usize, runs: &[KeyRun], out: &mut Vec<u32>) {
        let limit = self.spec.key_cut(b, self.q_pos[r], self.seq_len);
        out.clear();
        for run in runs {
            out.extend(run.clipped(limit).iter().map(|g| self.local_of[g]).filter(|&l| l != ABSENT));
        }
    }

    /// `(Q_b, K_u, V_u, S)` of a block, with `S = scale * Q_b K_u^T`, or the earliest
    /// allowed pair (count > 0) whose score is not finite. Finite `q` and `k` can still
    /// have a scaled dot product beyond the type's range (entries near `1e20` in f32);
    /// such a score has no finite exponential relative to any maximum, so it is refused
    /// here rather than turned into NaN weights. Masked pairs are not part of the
    /// function and are not checked.
    fn gather(&self, b: usize, h: usize, block: &Block<T>) -> std::result::Result<Gathered<T>, Fault> {
        let q = self.q.slice(s![b, .., h, ..]).select(Axis(0), &block.rows);
        let kv = h / self.group;
        let k = self.k.slice(s![b, .., kv, ..]).select(Axis(0), &block.cols);
        let v = self.v.slice(s![b, .., kv, ..]).select(Axis(0), &block.cols);
        let scores = q.dot(&k.t()) * self.scale;
        if scores.iter().all(|x| x.is_finite()) {
            return Ok((q, k, v, scores));
        }
        let overflow = scores
            .indexed_iter()
            .filter(|&((i, j), x)| block.counts[[i, j]] > T::zero() && !x.is_finite())
            .map(|((i, j), &x)| (self.q_pos[block.rows[i]], self.k_pos[block.cols[j]], x))
            .min_by_key(|&(query, key, _)| (query, key));
        match overflow {
            None => Ok((q, k, v, scores)),
            Some((query, key, score)) => Err(Fault {
                at: (b, h, query, Some(key)),
                error: Error::ScoreOverflow {
                    batch: b,
                    head: h,
                    query,
                    key,
                    score: cast(score),
                    dtype: type_name::<T>(),
                },
            }),
        }
    }

    /// Forward: the partial `(out, lse)` of every query row over this chunk's keys.
    pub fn forward(&self) -> Result<(Array4<T>, Array3<T>)> {
        let (batch, nq, heads, _) = self.q.dim();
        let dv = self.v.dim().3;
        let results: Vec<_> = self
            .tasks()
            .into_par_iter()
            .map(|(b, h, rows)| {
                let mut out = Array2::<T>::zeros((rows.len(), dv));
                let mut lse = Array1::from_elem(rows.len(), T::neg_infinity());
                let mut fault = None;
                let first = rows.start;
                self.for_each_block(b, h, rows.clone(), |block| {
                    let (_, _, v, mut p) = match self.gather(b, h, block) {
                        Ok(gathered) => gathered,
                        Err(f) => {
                            fault = earliest(fault.take(), Some(f));
                            return;
                        }
                    };
                    for ((mut p_row, c_row), &r) in p.rows_mut().into_iter().zip(block.counts.rows()).zip(&block.rows) {
                        lse[r - first] = softmax_row(&mut p_row, c_row);
                    }
                    let o = p.dot(&v);
                    for (o_row, &r) in o.rows().into_iter().zip(&block.rows) {
                        out.row_mut(r - first).assign(&o_row);
                    }
                });
                fault.map_or(Ok((b, h, rows, out, lse)), Err)
            })
            .collect();
        let pieces = settle(results)?;
        let mut out = Array4::zeros((batch, nq, heads, dv));
        let mut lse = Array3::from_elem((batch, heads, nq), T::neg_infinity());
        for (b, h, rows, o, l) in pieces {
            out.slice_mut(s![b, rows.clone(), h, ..]).assign(&o);
            lse.slice_mut(s![b, h, rows]).assign(&l);
        }
        Ok((out, lse))
    }

    /// Backward from the final `lse` and `delta_i = sum_d dO_id O_id` of every query row
    /// (flash-attention style: probabilities are recomputed, never stored):
    ///
    /// ```text
    ///   P = C * exp(S - lse),  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),
    ///   dQ = scale dS K,       dK = scale dS^T Q
    /// ```
    ///
    /// Returns this chunk's contributions `(dq, dk, dv)`; over a partition of the keys
    /// the `dq`s add up and the `dk`, `dv` are the rows of the full gradient. `dk`, `dv`
    /// have the K/V heads: `dK_j = sum_{h : h / g = j} dK^{(h)}`, each query head's
    /// `dK^{(h)}` formed in full first and the sum taken in ascending `h`.
    ///
    /// Every row that reaches a block has a key in this chunk, so the forward gave it a
    /// finite LSE; a `-inf` there means `lse` comes from another problem
    /// ([`Error::LseMismatch`]), and `exp(s - (-inf))` would be `+inf`.
    pub fn backward(
        &self,
        d_out: ArrayView4<T>,
        lse: ArrayView3<T>,
        delta: ArrayView3<T>,
    ) -> Result<(Array4<T>, Array4<T>, Array4<T>)> {
        let (batch, nq, heads, d) = self.q.dim();
        let (nk, dv) = (self.k.dim().1, self.v.dim().3);
        let results: Vec<_> = self
            .tasks()
            .into_par_iter()
            .map(|(b, h, rows)| {
                let first = rows.start;
                let mut dq = Array2::<T>::zeros((rows.len(), d));
                let mut dk = Array2::<T>::zeros((nk, d));
                let mut dvv = Array2::<T>::zeros((nk, dv));
                let mut fault = None;
                self.for_each_block(b, h, rows.clone(), |block| {
                    let mismatch = block.rows.iter().filter(|&&r| lse[[b, h, r]] == T::neg_infinity()).map(|&r| {
                        let query = self.q_pos[r];
                        Fault { at: (b, h, query, None), error: Error::LseMismatch { batch: b, head: h, query } }
                    });
                    let mismatch = mismatch.min_by_key(|f| f.at);
                    let (q, k, v, mut p) = match (mismatch, self.gather(b, h, block)) {
                        (None, Ok(gathered)) => gathered,
                        (m, g) => {
                            fault = earliest(fault.take(), earliest(m, g.err()));
                            return;
                        }
                    };
                    let d_o = d_out.slice(s![b, .., h, ..]).select(Axis(0), &block.rows);
                    let d_p = d_o.dot(&v.t());
                    let mut d_s = Array2::<T>::zeros(p.raw_dim());
                    for (i, &r) in block.rows.iter().enumerate() {
                        weights_from_lse(&mut p.row_mut(i), block.counts.row(i), lse[[b, h, r]]);
                        let row_delta = delta[[b, h, r]];
                        for ((ds, &pp), &dpp) in d_s.row_mut(i).iter_mut().zip(p.row(i)).zip(d_p.row(i)) {
                            *ds = pp * (dpp - row_delta);
                        }
                    }
                    let dq_b = d_s.dot(&k) * self.scale;
                    let dk_b = d_s.t().dot(&q) * self.scale;
                    let dv_b = p.t().dot(&d_o);
                    for (row, &r) in dq_b.rows().into_iter().zip(&block.rows) {
                        dq.row_mut(r - first).scaled_add(T::one(), &row);
                    }
                    for ((k_row, v_row), &c) in dk_b.rows().into_iter().zip(dv_b.rows()).zip(&block.cols) {
                        dk.row_mut(c).scaled_add(T::one(), &k_row);
                        dvv.row_mut(c).scaled_add(T::one(), &v_row);
                    }
                });
                fault.map_or(Ok((b, h, rows, dq, dk, dvv)), Err)
            })
            .collect();
        let pieces = settle(results)?;
        let mut dq = Array4::zeros((batch, nq, heads, d));
        let mut dk = Array4::zeros((batch, nk, heads, d));
        let mut dvv = Array4::zeros((batch, nk, heads, dv));
        for (b, h, rows, q_part, k_part, v_part) in pieces {
            dq.slice_mut(s![b, rows, h, ..]).assign(&q_part);
            dk.slice_mut(s![b, .., h, ..]).scaled_add(T::one(), &k_part);
            dvv.slice_mut(s![b, .., h, ..]).scaled_add(T::one(), &v_part);
        }
        Ok((dq, sum_groups(dk, self.group), sum_groups(dvv, self.group)))
    }
}

/// `[batch, rows, H, width]` per query head to `[batch, rows, H / group, width]`: head
/// `j` of the result is `sum_{i < group} x[.., j group + i, ..]`, added in ascending
/// order (a fixed order, so equal inputs give equal bits). `group = 1` returns `x`.
fn sum_groups<T: NdFloat>(x: Array4<T>, group: usize) -> Array4<T> {
    if group == 1 {
        return x;
    }
    let (batch, rows, heads, width) = x.dim();
    let mut sum = Array4::zeros((batch, rows, heads / group, width));
    for (h, head) in x.axis_iter(Axis(2)).enumerate() {
        sum.index_axis_mut(Axis(2), h / group).scaled_add(T::one(), &head);
    }
    sum
}

/// `(Q_b, K_u, V_u, S)` of a block.
type Gathered<T> = (Array2<T>, Array2<T>, Array2<T>, Array2<T>);

/// A fault found by a task, at global positions, with the error that reports it. Of
/// all faults of one call the one with the smallest `at = (batch, head, query, key)` is
/// returned; `key = None` (an LSE mismatch, a fault of the whole row) sorts before the
/// row's keys.
struct Fault {
    at: (usize, usize, usize, Option<usize>),
    error: Error,
}

/// The earlier of two optional faults.
fn earliest(a: Option<Fault>, b: Option<Fault>) -> Option<Fault> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The tasks' pieces, or the error of the earliest fault of any task.
fn settle<P>(results: Vec<std::result::Result<P, Fault>>) -> Result<Vec<P>> {
    let mut pieces = Vec::with_capacity(results.len());
    let mut fault = None;
    for result in results {
        match result {
            Ok(piece) => pieces.push(piece),
            Err(f) => fault = earliest(fault, Some(f)),
        }
    }
    fault.map_or(Ok(pieces), |f| Err(f.error))
}

/// Rows no smaller than this share a block stream of their own (see `for_each_block`).
const MIN_GROUP_ROWS: usize = BLOCK_ROWS / 4;

/// Builds blocks from a stream of rows: the open block's rows, their keys (flat, with
/// offsets), the union of those keys, and scratch maps over the chunk's key rows.
struct Blocker {
    /// Keys of the row being added (filled by the caller).
    row_keys: Vec<u32>,
    rows: Vec<usize>,
    flat: Vec<u32>,
    offsets: Vec<usize>,
    union: Vec<u32>,
    in_union: Vec<bool>,
    column: Vec<usize>,
}

impl Blocker {
    fn new(keys: usize) -> Self {
        Blocker {
            row_keys: Vec::new(),
            rows: Vec::new(),
            flat: Vec::new(),
            offsets: vec![0],
            union: Vec::new(),
            in_union: vec![false; keys],
            column: vec![0; keys],
        }
    }

    /// Add row `r` with keys `self.row_keys`. The open block is closed first when it is
    /// full, or when the new row brings mostly keys the block does not have yet (a new
    /// segment, say), so that unions stay tight.
    fn add<T: NdFloat>(&mut self, r: usize, f: &mut impl FnMut(&Block<T>)) {
        if self.row_keys.is_empty() {
            return;
        }
        let new = self.row_keys.iter().filter(|&&l| !self.in_union[l as usize]).count();
        if !self.rows.is_empty() && (self.rows.len() == BLOCK_ROWS || 2 * new > self.row_keys.len()) {
            self.flush(f);
        }
        for &l in &self.row_keys {
            if !std::mem::replace(&mut self.in_union[l as usize], true) {
                self.union.push(l);
            }
        }
        self.rows.push(r);
        self.flat.extend_from_slice(&self.row_keys);
        self.offsets.push(self.flat.len());
    }

    /// Hand the open block (if any) to `f` and start a new one.
    fn flush<T: NdFloat>(&mut self, f: &mut impl FnMut(&Block<T>)) {
        if self.rows.is_empty() {
            return;
        }
        self.union.sort_unstable();
        for (c, &key) in self.union.iter().enumerate() {
            self.column[key as usize] = c;
            self.in_union[key as usize] = false;
        }
        let mut counts = Array2::<T>::zeros((self.rows.len(), self.union.len()));
        for (r, w) in self.offsets.windows(2).enumerate() {
            for &key in &self.flat[w[0]..w[1]] {
                counts[[r, self.column[key as usize]]] += T::one();
            }
        }
        let block = Block {
            rows: std::mem::take(&mut self.rows),
            cols: self.union.iter().map(|&k| k as usize).collect(),
            counts,
        };
        f(&block);
        self.flat.clear();
        self.offsets.truncate(1);
        self.union.clear();
    }
}

/// Turn a row of finite scores with at least one allowed key into probabilities in
/// place, `p_j = c_j exp(s_j - m) / z` with `m` the largest allowed score and
/// `z = sum_j c_j exp(s_j - m)`, and return the row's log-sum-exp `m + ln z`. Masked
/// entries (`c_j = 0`) become exactly 0 whatever their score.
///
/// Every exponent is `<= 0`, so no `exp` overflows, and the maximum's own term is
/// `c_j >= 1`, so `1 <= z <= sum_j c_j`: no `0/0` and no `ln 0`, whatever the size of the
/// scores. Dividing by `z` (rather than forming `exp(s_j - lse)`) keeps the weights
/// summing to 1 within a few ulps at any magnitude: `lse` is rounded by up to
/// `u |lse|`, which `exp(s_j - lse)` would turn into a relative error of every weight,
/// of order 1 once `|lse| >= 1/u` (three equal scores of `1e30` in f32 would each get
/// weight 1, not 1/3).
fn softmax_row<T: NdFloat>(scores: &mut ArrayViewMut1<T>, counts: ArrayView1<T>) -> T {
    let zero = T::zero();
    let max = scores.iter().zip(counts).filter(|(_, c)| **c > zero).fold(T::neg_infinity(), |m, (&s, _)| m.max(s));
    let mut sum = zero;
    for (s, &c) in scores.iter_mut().zip(counts) {
        *s = if c > zero { c * (*s - max).exp() } else { zero };
        sum += *s;
    }
    scores.mapv_inplace(|e| e / sum);
    max + sum.ln()
}

/// The backward's weights from the final log-sum-exp, `p_j = c_j exp(s_j - lse)`, in
/// place (flash-attention 2: a chunk sees only some of the row's keys, so it cannot
/// normalise by its own sum). `lse` is finite here (checked by the caller) and, being
/// the log of a sum that includes every allowed `c_j exp(s_j)`, at least each allowed
/// score: every exponent is `<= 0` up to rounding, so no `exp` overflows.
fn weights_from_lse<T: NdFloat>(scores: &mut ArrayViewMut1<T>, counts: ArrayView1<T>, lse: T) {
    let zero = T::zero();
    for (s, &c) in scores.iter_mut().zip(counts) {
        *s = if c > zero { c * (*s - lse).exp() } else { zero };
    }
}

/// `delta_{b,h,i} = sum_d d_out[b,i,h,d] * out[b,i,h,d]`, laid out like the LSE.
pub(crate) fn row_dots<T: NdFloat>(d_out: ArrayView4<T>, out: ArrayView4<T>) -> Array3<T> {
    let (batch, seq, heads, _) = out.dim();
    Array3::from_shape_fn((batch, heads, seq), |(b, h, i)| {
        d_out.slice(s![b, i, h, ..]).dot(&out.slice(s![b, i, h, ..]))
    })
}

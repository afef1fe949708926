//! The blocked, rayon-parallel evaluation of attention over *indexed* rows.
//!
//! Both sides carry global positions: query row `r` of the chunk is token `q_pos[r]`,
//! key row `c` is token `k_pos[c]`. Full attention is the case `q_pos = k_pos = 0..n`;
//! a ring step or a key partition is any other case. Masks and dilation offsets are
//! always computed from global positions, never from local row numbers.
//!
//! Work is split into tasks `(batch, head, query rows)`. Inside a task, queries that
//! share their pattern's key runs (or, failing that, neighbouring queries) are gathered
//! into blocks of at most [`BLOCK_ROWS`] rows; a block's key columns are the union of its rows' keys, and a
//! count matrix `C` (multiplicities, 0 = masked) says which column each row may use.
//! The scores are then one matrix product `S = scale * Q_b K_u^T`, and sparse patterns
//! only ever touch the keys they allow: a LongNet branch `(w, r)` costs about `w/r`
//! keys per query, not `n`.

use crate::float::cast;
use crate::pattern::KeyRun;
use crate::spec::Spec;
use ndarray::{Array1, Array2, Array3, Array4, ArrayView1, ArrayView3, ArrayView4, ArrayViewMut1, Axis, NdFloat, s};
use rayon::prelude::*;
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
    pub seq_len: usize,
    pub spec: &'a Spec,
    /// Global key position -> local key row, or `ABSENT`.
    local_of: Vec<u32>,
    scale: T,
}

impl<'a, T: NdFloat> Chunk<'a, T> {
    pub fn new(
        q: ArrayView4<'a, T>,
        q_pos: &'a [usize],
        k: ArrayView4<'a, T>,
        v: ArrayView4<'a, T>,
        k_pos: &[usize],
        seq_len: usize,
        spec: &'a Spec,
    ) -> Self {
        let mut local_of = vec![ABSENT; seq_len];
        for (local, &global) in k_pos.iter().enumerate() {
            local_of[global] = local as u32;
        }
        let scale = cast(spec.scale_for(q.dim().3));
        Chunk { q, q_pos, k, v, seq_len, spec, local_of, scale }
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
        let (heads, pattern) = (self.heads(), &*self.spec.pattern);
        let mut groups: Vec<(Vec<KeyRun>, Vec<usize>)> = Vec::new();
        let mut group_of: HashMap<Vec<KeyRun>, usize> = HashMap::new();
        let mut runs: Vec<KeyRun> = Vec::new();
        for r in rows {
            runs.clear();
            pattern.key_runs(self.q_pos[r], h, heads, self.seq_len, &mut runs);
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
    /// its pattern runs cut by causality and key padding, mapped to this chunk's rows.
    fn row_keys(&self, b: usize, r: usize, runs: &[KeyRun], out: &mut Vec<u32>) {
        let query = self.q_pos[r];
        let key_limit = self.spec.key_limit(b, self.seq_len);
        let limit = if self.spec.causal { key_limit.min(query + 1) } else { key_limit };
        out.clear();
        for run in runs {
            out.extend(run.clipped(limit).iter().map(|g| self.local_of[g]).filter(|&l| l != ABSENT));
        }
    }

    /// `(Q_b, K_u, V_u, S)` of a block, with `S = scale * Q_b K_u^T`.
    fn gather(&self, b: usize, h: usize, block: &Block<T>) -> (Array2<T>, Array2<T>, Array2<T>, Array2<T>) {
        let q = self.q.slice(s![b, .., h, ..]).select(Axis(0), &block.rows);
        let k = self.k.slice(s![b, .., h, ..]).select(Axis(0), &block.cols);
        let v = self.v.slice(s![b, .., h, ..]).select(Axis(0), &block.cols);
        let scores = q.dot(&k.t()) * self.scale;
        (q, k, v, scores)
    }

    /// Forward: the partial `(out, lse)` of every query row over this chunk's keys.
    pub fn forward(&self) -> (Array4<T>, Array3<T>) {
        let (batch, nq, heads, _) = self.q.dim();
        let dv = self.v.dim().3;
        let pieces: Vec<_> = self
            .tasks()
            .into_par_iter()
            .map(|(b, h, rows)| {
                let mut out = Array2::<T>::zeros((rows.len(), dv));
                let mut lse = Array1::from_elem(rows.len(), T::neg_infinity());
                let first = rows.start;
                self.for_each_block(b, h, rows.clone(), |block| {
                    let (_, _, v, mut p) = self.gather(b, h, block);
                    for ((mut p_row, c_row), &r) in p.rows_mut().into_iter().zip(block.counts.rows()).zip(&block.rows) {
                        lse[r - first] = softmax_row(&mut p_row, c_row, None);
                    }
                    let o = p.dot(&v);
                    for (o_row, &r) in o.rows().into_iter().zip(&block.rows) {
                        out.row_mut(r - first).assign(&o_row);
                    }
                });
                (b, h, rows, out, lse)
            })
            .collect();
        let mut out = Array4::zeros((batch, nq, heads, dv));
        let mut lse = Array3::from_elem((batch, heads, nq), T::neg_infinity());
        for (b, h, rows, o, l) in pieces {
            out.slice_mut(s![b, rows.clone(), h, ..]).assign(&o);
            lse.slice_mut(s![b, h, rows]).assign(&l);
        }
        (out, lse)
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
    /// the `dq`s add up and the `dk`, `dv` are the rows of the full gradient.
    pub fn backward(
        &self,
        d_out: ArrayView4<T>,
        lse: ArrayView3<T>,
        delta: ArrayView3<T>,
    ) -> (Array4<T>, Array4<T>, Array4<T>) {
        let (batch, nq, heads, d) = self.q.dim();
        let (nk, dv) = (self.k.dim().1, self.v.dim().3);
        let pieces: Vec<_> = self
            .tasks()
            .into_par_iter()
            .map(|(b, h, rows)| {
                let first = rows.start;
                let mut dq = Array2::<T>::zeros((rows.len(), d));
                let mut dk = Array2::<T>::zeros((nk, d));
                let mut dvv = Array2::<T>::zeros((nk, dv));
                self.for_each_block(b, h, rows.clone(), |block| {
                    let (q, k, v, mut p) = self.gather(b, h, block);
                    let d_o = d_out.slice(s![b, .., h, ..]).select(Axis(0), &block.rows);
                    let d_p = d_o.dot(&v.t());
                    let mut d_s = Array2::<T>::zeros(p.raw_dim());
                    for (i, &r) in block.rows.iter().enumerate() {
                        let row_lse = lse[[b, h, r]];
                        softmax_row(&mut p.row_mut(i), block.counts.row(i), Some(row_lse));
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
                (b, h, rows, dq, dk, dvv)
            })
            .collect();
        let mut dq = Array4::zeros((batch, nq, heads, d));
        let mut dk = Array4::zeros((batch, nk, heads, d));
        let mut dvv = Array4::zeros((batch, nk, heads, dv));
        for (b, h, rows, q_part, k_part, v_part) in pieces {
            dq.slice_mut(s![b, rows, h, ..]).assign(&q_part);
            dk.slice_mut(s![b, .., h, ..]).scaled_add(T::one(), &k_part);
            dvv.slice_mut(s![b, .., h, ..]).scaled_add(T::one(), &v_part);
        }
        (dq, dk, dvv)
    }
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

/// Turn a row of scores into probabilities in place: `p_j = c_j exp(s_j - L)`.
///
/// With `lse = None`, `L` is this row's own log-sum-exp `m + ln sum_j c_j exp(s_j - m)`
/// (`m` the largest allowed score), so the row sums to 1; with `Some(L)` the given
/// (final) log-sum-exp is used, as the backward pass needs. Returns `L`.
/// Masked entries (`c_j = 0`) become exactly 0 whatever their score.
fn softmax_row<T: NdFloat>(scores: &mut ArrayViewMut1<T>, counts: ArrayView1<T>, lse: Option<T>) -> T {
    let zero = T::zero();
    let max = scores.iter().zip(counts).filter(|(_, c)| **c > zero).fold(T::neg_infinity(), |m, (&s, _)| m.max(s));
    let lse = lse.unwrap_or_else(|| {
        let sum = scores
            .iter()
            .zip(counts)
            .fold(zero, |acc, (&s, &c)| if c > zero { acc + c * (s - max).exp() } else { acc });
        max + sum.ln()
    });
    if lse == T::neg_infinity() {
        scores.fill(zero);
        return lse;
    }
    for (s, &c) in scores.iter_mut().zip(counts) {
        *s = if c > zero { c * (*s - lse).exp() } else { zero };
    }
    lse
}

/// `delta_{b,h,i} = sum_d d_out[b,i,h,d] * out[b,i,h,d]`, laid out like the LSE.
pub(crate) fn row_dots<T: NdFloat>(d_out: ArrayView4<T>, out: ArrayView4<T>) -> Array3<T> {
    let (batch, seq, heads, _) = out.dim();
    Array3::from_shape_fn((batch, heads, seq), |(b, h, i)| {
        d_out.slice(s![b, i, h, ..]).dot(&out.slice(s![b, i, h, ..]))
    })
}

//! Replay a [`Schedule`] on `P` simulated ranks, with every row accounted for.
//!
//! Each rank has its own store of rows (one tensor, one global token, one head, the whole
//! batch). A rank can only compute with rows it holds, so a schedule that forgets to send
//! a needed row fails with [`Error::MissingRow`] instead of silently reading global
//! memory. Computation is the single-device engine ([`attend_chunk`], [`backward_chunk`])
//! on global positions, merged with [`Partial::merge`]; nothing else is re-implemented.
//!
//! Under grouped-query attention the rows of `K`, `V`, `dK`, `dV` are those of the
//! `H_kv` K/V heads, the others those of the `H` query heads: an operation's head range
//! names query heads, and for K/V-side tensors it moves the K/V heads they read
//! ([`Heads::kv_range`]). So K/V traffic and memory shrink by `H_kv / H`.
//!
//! # What is measured
//! * **Communication**: the elements each rank sends at each step (a row of `Q`/`K`/`dQ`/`dK` is
//!   `B d` elements, of `V`/`dOut`/`dV` `B d_v`, of `Out` `B (d_v + 1)` with its LSE), and
//!   the elements of each tensor sent in each phase.
//! * **Memory**: each rank's peak number of resident elements (inputs, received rows,
//!   accumulators), updated at every write. Scratch space inside one compute call is not
//!   counted: it is `O(rows of that call)` and the same for every schedule.

use super::chunking::ChunkPlan;
use super::head_slice::head_slice;
use super::schedule::{Op, Schedule, Step, Tensor};
use crate::attention::{Attention, Gradients, OutputGrad, attend_chunk, backward_chunk};
use crate::check;
use crate::error::{Error, Result};
use crate::heads::Heads;
use crate::partial::Partial;
use crate::spec::Spec;
use ndarray::{Array1, Array4, ArrayView4, Axis, NdFloat, s};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

/// What a simulation measured. Elements, not bytes: multiply by
/// [`Report::element_bytes`] (4 for f32, 8 for f64) for bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub element_bytes: usize,
    /// `forward_sent[step][rank]`: elements `rank` sent during forward step `step`.
    pub forward_sent: Vec<Vec<usize>>,
    /// The same for the backward steps.
    pub backward_sent: Vec<Vec<usize>>,
    /// Elements of each tensor sent by all ranks in the forward phase (absent: none).
    pub forward_by_tensor: BTreeMap<Tensor, usize>,
    /// The same for the backward phase.
    pub backward_by_tensor: BTreeMap<Tensor, usize>,
    /// Peak resident elements of each rank.
    pub peak: Vec<usize>,
    /// Compute operations run.
    pub computes: usize,
    /// Computes the schedule skipped because the pattern left them empty.
    pub skipped: usize,
}

impl Report {
    /// All elements sent by all ranks in the forward phase.
    pub fn forward_total(&self) -> usize {
        self.forward_sent.iter().flatten().sum()
    }

    /// All elements sent by all ranks in the backward phase.
    pub fn backward_total(&self) -> usize {
        self.backward_sent.iter().flatten().sum()
    }

    /// Elements of `tensors` sent in both phases: `[K, V, DK, DV]` is the K/V traffic,
    /// which grouped-query attention cuts to `H_kv / H` of the multi-head value.
    pub fn sent_of(&self, tensors: &[Tensor]) -> usize {
        let phases = [&self.forward_by_tensor, &self.backward_by_tensor];
        tensors.iter().flat_map(|t| phases.map(|p| p.get(t).copied().unwrap_or(0))).sum()
    }
}

type RowKey = (Tensor, usize, usize);

/// Elements sent `[step][rank]`, and per tensor, in one phase.
type Sent = (Vec<Vec<usize>>, BTreeMap<Tensor, usize>);

/// One rank's rows and its memory meter.
#[derive(Debug)]
struct Store<T> {
    rows: HashMap<RowKey, Array1<T>>,
    live: usize,
    peak: usize,
}

/// A schedule being replayed on concrete tensors. See the module docs.
#[derive(Debug)]
pub struct Simulation<'s, T> {
    schedule: &'s Schedule,
    spec: Spec,
    /// `(batch, seq, heads, head_dim, value_dim)`, `heads` the query heads.
    dims: (usize, usize, usize, usize, usize),
    /// Query and K/V heads.
    heads: Heads,
    stores: Vec<Store<T>>,
    owner: Vec<usize>,
    report: Report,
    forward_done: bool,
}

impl<'s, T: NdFloat> Simulation<'s, T> {
    /// Validate `schedule` against the tensors and `spec`, and give every rank the `Q`,
    /// `K`, `V` rows of the tokens it owns (all heads; `k`, `v` may have fewer heads
    /// than `q`, dividing them, as in [`crate::attention()`]).
    pub fn new(
        schedule: &'s Schedule,
        spec: &Spec,
        q: ArrayView4<T>,
        k: ArrayView4<T>,
        v: ArrayView4<T>,
    ) -> Result<Self> {
        let [b, n, h, d] = check::dims4("q", &q)?;
        let h_kv = check::dims4("k", &k)?[2];
        check::same_shape("k", &[b, n, h_kv, d], k.shape())?;
        let dv = check::dims4("v", &v)?[3];
        check::same_shape("v", &[b, n, h_kv, dv], v.shape())?;
        let heads = Heads::new(h, h_kv)?;
        check::same_shape(
            "schedule (seq, heads, kv_heads)",
            &[schedule.chunks.seq_len, schedule.heads, schedule.kv_heads],
            &[n, h, h_kv],
        )?;
        spec.validate(b, h, n)?;
        schedule.validate(spec)?;
        let ranks = schedule.ranks();
        let stores = (0..ranks).map(|_| Store { rows: HashMap::new(), live: 0, peak: 0 }).collect();
        let report = Report {
            element_bytes: size_of::<T>(),
            peak: vec![0; ranks],
            skipped: schedule.skipped(),
            ..Report::default()
        };
        let mut sim = Simulation {
            schedule,
            spec: spec.clone(),
            dims: (b, n, h, d, dv),
            heads,
            stores,
            owner: schedule.chunks.token_map().rank,
            report,
            forward_done: false,
        };
        for (tensor, x) in [(Tensor::Q, q), (Tensor::K, k), (Tensor::V, v)] {
            sim.scatter(tensor, x);
        }
        Ok(sim)
    }

    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Run the forward steps; return the output in the original token order. Each
    /// owner then holds the *finished* output rows of its tokens (the backward needs them).
    pub fn forward(&mut self) -> Result<Attention<T>> {
        let (sent, by_tensor) = self.run(&self.schedule.forward)?;
        (self.report.forward_sent, self.report.forward_by_tensor) = (sent, by_tensor);
        self.check_home(&[Tensor::Out])?;
        let gathered = self.collect(Tensor::Out)?;
        let finished = to_partial(gathered.view()).finish(&self.spec);
        self.scatter(Tensor::Out, from_partial(&finished.out, &finished.lse).view());
        self.forward_done = true;
        Ok(finished)
    }

    /// Run the backward steps for the upstream gradient `d_out`; return dQ, dK, dV in the
    /// original token order.
    pub fn backward(&mut self, d_out: ArrayView4<T>) -> Result<Gradients<T>> {
        if !self.forward_done {
            return Err(Error::BackwardBeforeForward);
        }
        let (b, n, h, _, dv) = self.dims;
        check::same_shape("d_out", &[b, n, h, dv], d_out.shape())?;
        check::finite("d_out", &d_out)?;
        self.scatter(Tensor::DOut, d_out);
        let (sent, by_tensor) = self.run(&self.schedule.backward)?;
        (self.report.backward_sent, self.report.backward_by_tensor) = (sent, by_tensor);
        self.check_home(&[Tensor::DQ, Tensor::DK, Tensor::DV])?;
        Ok(Gradients { dq: self.collect(Tensor::DQ)?, dk: self.collect(Tensor::DK)?, dv: self.collect(Tensor::DV)? })
    }

    /// Run `steps`; return the elements each rank sent at each step, and of each tensor.
    fn run(&mut self, steps: &[Step]) -> Result<Sent> {
        let mut sent = Vec::with_capacity(steps.len());
        let mut by_tensor = BTreeMap::new();
        for step in steps {
            let mut by_rank = vec![0; self.stores.len()];
            for op in &step.ops {
                self.apply(op, &mut by_rank, &mut by_tensor)?;
            }
            sent.push(by_rank);
        }
        Ok((sent, by_tensor))
    }

    /// The stored heads of `tensor` that an operation on the query heads `heads` touches:
    /// the K/V heads they read for `K`, `V`, `dK`, `dV`, the query heads otherwise.
    fn rows_of(&self, tensor: Tensor, heads: &Range<usize>) -> Range<usize> {
        if tensor.on_kv_heads() { self.heads.kv_range(heads) } else { heads.clone() }
    }

    fn apply(&mut self, op: &Op, sent: &mut [usize], by_tensor: &mut BTreeMap<Tensor, usize>) -> Result<()> {
        match op {
            Op::Send { from, to, tensors, heads, tokens } => {
                for &tensor in tensors {
                    let heads = &self.rows_of(tensor, heads);
                    let rows = self.gather(*from, tensor, tokens, heads)?;
                    sent[*from] += rows.len();
                    *by_tensor.entry(tensor).or_default() += rows.len();
                    if tensor.is_accumulator() {
                        self.remove(*from, tensor, tokens, heads);
                        self.combine(*to, tensor, tokens, heads, rows)?;
                    } else {
                        self.put(*to, tensor, tokens, heads, rows.view());
                    }
                }
            }
            Op::Free { rank, tensors, heads, tokens } => {
                for &tensor in tensors {
                    let heads = &self.rows_of(tensor, heads);
                    if !tensor.is_accumulator() {
                        self.gather(*rank, tensor, tokens, heads)?; // freeing what is not there is a schedule bug
                    }
                    self.remove(*rank, tensor, tokens, heads);
                }
            }
            Op::Attend { rank, heads, queries, keys } => {
                let Some((spec, q, k, v)) = self.compute_inputs(*rank, heads, queries, keys)? else {
                    return Ok(());
                };
                let part = attend_chunk(q.view(), queries, k.view(), v.view(), keys, self.dims.1, &spec)?;
                self.combine(*rank, Tensor::Out, queries, heads, from_partial(&part.out, &part.lse))?;
            }
            Op::AttendBackward { rank, heads, queries, keys } => {
                let Some((spec, q, k, v)) = self.compute_inputs(*rank, heads, queries, keys)? else {
                    return Ok(());
                };
                let d_out = self.gather(*rank, Tensor::DOut, queries, heads)?;
                let Partial { out, lse } = to_partial(self.gather(*rank, Tensor::Out, queries, heads)?.view());
                let grad = OutputGrad::new(&spec, &Attention { out, lse }, d_out.view())?;
                let g = backward_chunk(q.view(), queries, k.view(), v.view(), keys, self.dims.1, &spec, &grad)?;
                let kv_heads = self.heads.kv_range(heads);
                self.combine(*rank, Tensor::DQ, queries, heads, g.dq)?;
                self.combine(*rank, Tensor::DK, keys, &kv_heads, g.dk)?;
                self.combine(*rank, Tensor::DV, keys, &kv_heads, g.dv)?;
            }
        }
        Ok(())
    }

    /// What a compute of `queries` over `keys` on `rank` for the query heads `heads`
    /// needs: the spec restricted to those heads, their `Q` rows and the `K`, `V` rows
    /// of the K/V heads they read (an error if the rank does not hold them). `None` for
    /// an empty compute, which is not counted. ([`Schedule::validate`] made sure that
    /// `heads` covers whole groups or lies inside one, so the slice is grouped-query
    /// attention of its own.)
    #[allow(clippy::type_complexity)]
    fn compute_inputs(
        &mut self,
        rank: usize,
        heads: &Range<usize>,
        queries: &[usize],
        keys: &[usize],
    ) -> Result<Option<(Spec, Array4<T>, Array4<T>, Array4<T>)>> {
        if queries.is_empty() || keys.is_empty() || heads.is_empty() {
            return Ok(None);
        }
        self.report.computes += 1;
        let spec = head_slice(&self.spec, heads, self.dims.2);
        let q = self.gather(rank, Tensor::Q, queries, heads)?;
        let kv_heads = self.heads.kv_range(heads);
        let k = self.gather(rank, Tensor::K, keys, &kv_heads)?;
        let v = self.gather(rank, Tensor::V, keys, &kv_heads)?;
        Ok(Some((spec, q, k, v)))
    }

    /// Row width of `tensor` (per batch row).
    fn width(&self, tensor: Tensor) -> usize {
        tensor.width(self.dims.3, self.dims.4)
    }

    /// The rows `tokens x heads` of `tensor` on `rank` as `[batch, tokens, heads, width]`.
    /// A missing input row is an error; a missing accumulator row is its identity
    /// (zeros; for `Out`, zeros with LSE `-inf`).
    fn gather(&self, rank: usize, tensor: Tensor, tokens: &[usize], heads: &Range<usize>) -> Result<Array4<T>> {
        let (b, w) = (self.dims.0, self.width(tensor));
        let mut x = Array4::zeros((b, tokens.len(), heads.len(), w));
        for (i, &token) in tokens.iter().enumerate() {
            for (j, head) in heads.clone().enumerate() {
                let mut dst = x.slice_mut(s![.., i, j, ..]);
                match self.stores[rank].rows.get(&(tensor, token, head)) {
                    Some(row) => {
                        dst.assign(&row.view().into_shape_with_order((b, w)).expect("row holds batch x width"))
                    }
                    None if tensor.is_accumulator() => {
                        if tensor == Tensor::Out {
                            dst.column_mut(w - 1).fill(T::neg_infinity());
                        }
                    }
                    None => return Err(Error::MissingRow { rank, tensor: tensor.name(), token, head }),
                }
            }
        }
        Ok(x)
    }

    /// Write (overwrite) rows on `rank`.
    fn put(&mut self, rank: usize, tensor: Tensor, tokens: &[usize], heads: &Range<usize>, x: ArrayView4<T>) {
        let store = &mut self.stores[rank];
        for (i, &token) in tokens.iter().enumerate() {
            for (j, head) in heads.clone().enumerate() {
                let row: Array1<T> = x.slice(s![.., i, j, ..]).iter().copied().collect();
                store.live += row.len();
                if let Some(old) = store.rows.insert((tensor, token, head), row) {
                    store.live -= old.len();
                }
            }
        }
        store.peak = store.peak.max(store.live);
        self.report.peak[rank] = store.peak;
    }

    fn remove(&mut self, rank: usize, tensor: Tensor, tokens: &[usize], heads: &Range<usize>) {
        let store = &mut self.stores[rank];
        for &token in tokens {
            for head in heads.clone() {
                if let Some(old) = store.rows.remove(&(tensor, token, head)) {
                    store.live -= old.len();
                }
            }
        }
    }

    /// Combine accumulator rows into `rank`'s: merge for `Out`, add for gradients.
    fn combine(
        &mut self,
        rank: usize,
        tensor: Tensor,
        tokens: &[usize],
        heads: &Range<usize>,
        x: Array4<T>,
    ) -> Result<()> {
        let mine = self.gather(rank, tensor, tokens, heads)?;
        let combined = if tensor == Tensor::Out {
            let merged = to_partial(mine.view()).merge(&to_partial(x.view()))?;
            from_partial(&merged.out, &merged.lse)
        } else {
            mine + x
        };
        self.put(rank, tensor, tokens, heads, combined.view());
        Ok(())
    }

    /// Give each owner its tokens' rows of a global tensor (all heads).
    fn scatter(&mut self, tensor: Tensor, x: ArrayView4<T>) {
        let heads = self.rows_of(tensor, &(0..self.dims.2));
        for rank in 0..self.stores.len() {
            let tokens = self.schedule.chunks.tokens(rank);
            self.put(rank, tensor, tokens, &heads, x.select(Axis(1), tokens).view());
        }
    }

    /// The global tensor assembled from the owners' rows, in the original token order.
    fn collect(&self, tensor: Tensor) -> Result<Array4<T>> {
        let (b, n, h, _, _) = self.dims;
        let heads = self.rows_of(tensor, &(0..h));
        let chunks: &ChunkPlan = &self.schedule.chunks;
        let mut x = Array4::zeros((b, n, heads.len(), self.width(tensor)));
        for rank in 0..chunks.ranks() {
            let tokens = chunks.tokens(rank);
            let part = self.gather(rank, tensor, tokens, &heads)?;
            for (i, &t) in tokens.iter().enumerate() {
                x.slice_mut(s![.., t, .., ..]).assign(&part.slice(s![.., i, .., ..]));
            }
        }
        Ok(x)
    }

    /// Accumulators must end on the rank that owns their token.
    fn check_home(&self, tensors: &[Tensor]) -> Result<()> {
        for (rank, store) in self.stores.iter().enumerate() {
            if let Some(&(tensor, token, head)) =
                store.rows.keys().find(|(t, token, _)| tensors.contains(t) && self.owner[*token] != rank)
            {
                return Err(Error::StrandedRow { rank, tensor: tensor.name(), token, head });
            }
        }
        Ok(())
    }
}

/// `[batch, tokens, heads, d_v + 1]` rows (LSE last) as a [`Partial`].
fn to_partial<T: NdFloat>(x: ArrayView4<T>) -> Partial<T> {
    let dv = x.dim().3 - 1;
    let out = x.slice(s![.., .., .., ..dv]).to_owned();
    let lse = x.slice(s![.., .., .., dv]).permuted_axes([0, 2, 1]).to_owned();
    Partial { out, lse }
}

/// The inverse of [`to_partial`].
fn from_partial<T: NdFloat>(out: &Array4<T>, lse: &ndarray::Array3<T>) -> Array4<T> {
    let (b, n, h, dv) = out.dim();
    let mut x = Array4::zeros((b, n, h, dv + 1));
    x.slice_mut(s![.., .., .., ..dv]).assign(out);
    x.slice_mut(s![.., .., .., dv]).assign(&lse.view().permuted_axes([0, 2, 1]));
    x
}

/// Forward and (for a given upstream gradient) backward of `schedule` in one call:
/// the output, the gradients and what was measured.
pub fn simulate<T: NdFloat>(
    schedule: &Schedule,
    spec: &Spec,
    q: ArrayView4<T>,
    k: ArrayView4<T>,
    v: ArrayView4<T>,
    d_out: Option<ArrayView4<T>>,
) -> Result<(Attention<T>, Option<Gradients<T>>, Report)> {
    let mut sim = Simulation::new(schedule, spec, q, k, v)?;
    let out = sim.forward()?;
    let grads = d_out.map(|g| sim.backward(g)).transpose()?;
    Ok((out, grads, sim.report.clone()))
}

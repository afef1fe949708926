//! One rank of head-parallel attention (DeepSpeed-Ulysses, [`Kind::Ulysses`]) on the GPU.
//!
//! Forward: one all-to-all (a single NCCL group of sends and receives) turns the token
//! split into the head split: every rank sends each computing rank `r` the rows of its
//! token pieces for `r`'s query heads (Q) and the K/V heads those read (K, V); `r`
//! scatters them into run tensors `[B, N, m, d]`, runs the single-GPU forward over the
//! whole sequence once per run of its heads (`dist::head_split`), and a second
//! all-to-all sends each token owner the output and LSE rows of its tokens. Backward:
//! Q, K, V, dOut, output and LSE go to the heads the same way, the single-GPU backward
//! runs per run, and dQ, dK, dV come home; a K/V head read by two ranks' runs gets both
//! contributions, added at home.
//!
//! Exact for every pattern, layout and head split: heads are independent, each run is a
//! single-GPU call over the whole sequence, and the dilated offsets see global head
//! indices (the run's first head in its [`Chunk`]). Rows move through the gather /
//! scatter kernels with the index lists of `head_split`; a rank's own rows are gathered
//! and scattered locally, never sent.

use super::DistRank;
use super::Probe;
use super::data::{RankData, RankGrads};
use crate::dist::comm::{Communicator, Wire};
use crate::dist::error::DistResult;
use crate::dist::exec::{Packable, grad_targets, grads_of, output_targets, partials};
use crate::dist::head_split::{self, HeadSplit, Run};
use crate::dist::layout::DistPlan;
use crate::gpu::Gpu;
use crate::shape::{Chunk, Dtype, Shape};
use crate::tensors::{DeviceGrads, DevicePartial, DeviceTensor, Prepared};
use cudarc::driver::{CudaSlice, ValidAsZeroBits};
use std::collections::HashMap;

/// Which rows a tensor has: query heads at `head_dim` (Q, dQ) or at `value_dim` (output,
/// dOut), K/V heads at `head_dim` (K, dK) or at `value_dim` (V, dV), or LSE entries.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    Q,
    Out,
    K,
    V,
    Lse,
}

/// The three index lists of one (run, piece) pair, on the device.
pub(crate) struct Lists {
    pub(crate) q: CudaSlice<u32>,
    pub(crate) kv: CudaSlice<u32>,
    pub(crate) lse: CudaSlice<u32>,
}

impl Lists {
    pub(crate) fn of(&self, side: Side) -> &CudaSlice<u32> {
        match side {
            Side::Q | Side::Out => &self.q,
            Side::K | Side::V => &self.kv,
            Side::Lse => &self.lse,
        }
    }
}

/// A rank's Ulysses state, built on its first Ulysses call: a prepared single-GPU call
/// per run of its heads and the index lists of every message it sends or receives.
pub(crate) struct Ulysses {
    pub(crate) split: HeadSplit,
    /// This rank's runs and their calls over the whole sequence.
    pub(crate) mine: Vec<(Run, Prepared)>,
    /// Key `(r, ri, pi)`: rows of this rank's piece `pi` for run `ri` of rank `r`
    /// (token side).
    pub(crate) tok: HashMap<(usize, usize, usize), Lists>,
    /// Key `(ri, o, pj)`: rows of piece `pj` of rank `o` in this rank's run `ri` tensors
    /// (head side).
    pub(crate) seq: HashMap<(usize, usize, usize), Lists>,
}

impl Ulysses {
    pub(crate) fn new(gpu: &Gpu, plan: &DistPlan, me: usize, dtype: Dtype) -> DistResult<Self> {
        let split = HeadSplit::of(plan);
        let (b, n, h, hk, d) = (plan.batch, plan.seq_len(), plan.heads, plan.kv_heads, plan.head_dim);
        let dv = plan.value_dim;
        let up = |v: Vec<u32>| gpu.stream().clone_htod(&v);
        let mine = split
            .runs(me)
            .into_iter()
            .map(|run| {
                let shape = Shape::square(b, n, run.q.len(), d).with_kv_heads(run.kv.len()).with_value_dim(dv);
                let chunk = Chunk::new(0, 0, n).heads_of(run.q.start, h);
                let prep = gpu.prepare(&shape, dtype, &plan.spec, &chunk)?;
                Ok((run, prep))
            })
            .collect::<DistResult<Vec<_>>>()?;
        let mut tok = HashMap::new();
        for r in 0..plan.ranks() {
            for (ri, run) in split.runs(r).iter().enumerate() {
                for (pi, piece) in plan.pieces(me).iter().enumerate() {
                    let lists = Lists {
                        q: up(head_split::token_rows(b, piece, h, &run.q))?,
                        kv: up(head_split::token_rows(b, piece, hk, &run.kv))?,
                        lse: up(head_split::token_lse(b, piece, h, &run.q))?,
                    };
                    tok.insert((r, ri, pi), lists);
                }
            }
        }
        let mut seq = HashMap::new();
        for (ri, (run, _)) in mine.iter().enumerate() {
            for o in 0..plan.ranks() {
                for (pj, piece) in plan.pieces(o).iter().enumerate() {
                    let lists = Lists {
                        q: up(head_split::sequence_rows(b, piece, n, run.q.len()))?,
                        kv: up(head_split::sequence_rows(b, piece, n, run.kv.len()))?,
                        lse: up(head_split::sequence_lse(b, piece, n, run.q.len()))?,
                    };
                    seq.insert((ri, o, pj), lists);
                }
            }
        }
        Ok(Ulysses { split, mine, tok, seq })
    }
}

/// A received message: (input or output index, rank, run, piece) and its buffer's key.
pub(crate) type Key4 = (usize, usize, usize, usize);

/// The device buffers of tensors.
fn buffers(t: &[DeviceTensor]) -> Vec<&CudaSlice<u16>> {
    t.iter().map(|t| &t.data).collect()
}

/// A head-parallel exchange's inputs for the forward: Q, K, V pieces with their sides.
pub(crate) fn forward_inputs(data: &RankData) -> [(Side, Vec<&CudaSlice<u16>>); 3] {
    [(Side::Q, buffers(&data.q)), (Side::K, buffers(&data.k)), (Side::V, buffers(&data.v))]
}

/// The backward's 16-bit inputs: Q, K, V and dOut pieces with their sides.
pub(crate) fn backward_inputs<'a>(
    data: &'a RankData,
    dout: &'a [DeviceTensor],
) -> [(Side, Vec<&'a CudaSlice<u16>>); 4] {
    let [q, k, v] = forward_inputs(data);
    [q, k, v, (Side::Out, buffers(dout))]
}

/// Output and LSE pieces (a forward's results, or the backward's saved inputs) with their sides.
pub(crate) fn out_and_lse(out: &[DevicePartial]) -> [(Side, Vec<&CudaSlice<f32>>); 2] {
    [(Side::Out, out.iter().map(|x| &x.out).collect()), (Side::Lse, out.iter().map(|x| &x.lse).collect())]
}

/// Elements of one row of `side` in `plan`: `head_dim` or `value_dim` vectors, or
/// single LSE entries.
pub(crate) fn width(side: Side, plan: &DistPlan) -> usize {
    match side {
        Side::Lse => 1,
        Side::Q | Side::K => plan.head_dim,
        Side::Out | Side::V => plan.value_dim,
    }
}

/// Heads of `run` on `side`.
pub(crate) fn heads(run: &Run, side: Side) -> usize {
    match side {
        Side::K | Side::V => run.kv.len(),
        Side::Q | Side::Out | Side::Lse => run.q.len(),
    }
}

/// A run's Q, K, V tensors from its run buffers.
fn tensors(
    s: &Shape,
    q: CudaSlice<u16>,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
) -> (DeviceTensor, DeviceTensor, DeviceTensor) {
    (
        DeviceTensor { data: q, dims: s.q_dims() },
        DeviceTensor { data: k, dims: s.k_dims() },
        DeviceTensor { data: v, dims: s.v_dims() },
    )
}

/// The single-GPU forward of each of `u`'s runs on its run tensors `[q, k, v]` (zeros,
/// without launching, when `compute` is false: the comm-only probe).
pub(crate) fn runs_forward(
    gpu: &Gpu,
    u: &mut Ulysses,
    [q, k, v]: [Vec<CudaSlice<u16>>; 3],
    compute: bool,
) -> DistResult<Vec<DevicePartial>> {
    let mut parts = Vec::with_capacity(u.mine.len());
    for (((_, prep), q), (k, v)) in u.mine.iter_mut().zip(q).zip(k.into_iter().zip(v)) {
        let s = prep.shape;
        let mut part = DevicePartial {
            out: gpu.stream().alloc_zeros::<f32>(s.out_len())?,
            lse: gpu.stream().alloc_zeros::<f32>(s.lse_len())?,
            dims: s.out_dims(),
        };
        if compute {
            let (q, k, v) = tensors(&s, q, k, v);
            gpu.forward_into(prep, &q, &k, &v, &mut part)?;
        }
        parts.push(part);
    }
    Ok(parts)
}

/// The single-GPU backward of each of `u`'s runs from its run tensors `[q, k, v, dout]`
/// and its forward's `[out, lse]`.
pub(crate) fn runs_backward(
    gpu: &Gpu,
    u: &mut Ulysses,
    [q, k, v, g]: [Vec<CudaSlice<u16>>; 4],
    [o, lse]: [Vec<CudaSlice<f32>>; 2],
) -> DistResult<Vec<DeviceGrads>> {
    let mut grads = Vec::with_capacity(u.mine.len());
    let inputs = q.into_iter().zip(k).zip(v).zip(g).zip(o.into_iter().zip(lse));
    for ((_, prep), ((((q, k), v), g), (o, lse))) in u.mine.iter_mut().zip(inputs) {
        let s = prep.shape;
        let (q, k, v) = tensors(&s, q, k, v);
        let g = DeviceTensor { data: g, dims: s.out_dims() };
        let fin = DevicePartial { out: o, lse, dims: s.out_dims() };
        let mut gr = gpu.alloc_grads(prep)?;
        gpu.backward_into(prep, &q, &k, &v, &fin, &g, &mut gr)?;
        grads.push(gr);
    }
    Ok(grads)
}

/// An uninitialised receive buffer of `len` elements on `comm`'s stream.
pub(crate) fn recv_buffer<T: Wire>(comm: &Communicator, len: usize) -> DistResult<CudaSlice<T>> {
    // SAFETY: written by the receive before anything reads it.
    Ok(unsafe { comm.stream().alloc::<T>(len.max(1)) }?)
}

/// One NCCL group on `comm`: `sends` to their peers, each receive from the peer its key
/// names (matched by order per peer pair).
pub(crate) fn swap<T: Wire>(
    comm: &Communicator,
    sends: &[(usize, CudaSlice<T>)],
    recvs: &mut [(Key4, CudaSlice<T>)],
    peer: impl Fn(&Key4) -> usize,
) -> DistResult<()> {
    let s: Vec<_> = sends.iter().map(|(r, buf)| (*r, buf)).collect();
    let mut rv: Vec<_> = recvs.iter_mut().map(|(key, buf)| (peer(key), buf)).collect();
    if s.is_empty() && rv.is_empty() {
        return Ok(());
    }
    comm.exchange(&s, &mut rv)
}

impl DistRank<'_> {
    fn ulysses_state(&mut self) -> DistResult<Ulysses> {
        match self.ulysses.take() {
            Some(u) => Ok(u),
            None => Ulysses::new(self.gpu, self.plan, self.rank(), self.dtype),
        }
    }

    /// Token split -> head split: for each input `(side, this rank's piece tensors)`, the
    /// run tensors `[B, N, m, w]` of this rank's runs (one all-to-all group for all
    /// inputs). `move_rows` false: only this rank's own rows are placed (the others are
    /// zero), nothing is sent (the compute-only probe).
    fn to_heads<T: Packable + Wire + ValidAsZeroBits>(
        &self,
        u: &Ulysses,
        inputs: &[(Side, Vec<&CudaSlice<T>>)],
        move_rows: bool,
    ) -> DistResult<Vec<Vec<CudaSlice<T>>>> {
        let (gpu, plan, h, me, p) = (self.gpu, self.plan, &self.helpers, self.rank(), self.plan.ranks());
        let (b, n) = (plan.batch, plan.seq_len());
        let w = |side: Side| width(side, plan);
        let mut local: HashMap<(usize, usize, usize), CudaSlice<T>> = HashMap::new();
        let mut sends: Vec<(usize, CudaSlice<T>)> = Vec::new();
        for r in 0..p {
            for ri in 0..u.split.runs(r).len() {
                for pi in 0..plan.pieces(me).len() {
                    for (x, (side, pieces)) in inputs.iter().enumerate() {
                        let packed = h.gather(gpu, pieces[pi], u.tok[&(r, ri, pi)].of(*side), w(*side))?;
                        if r == me {
                            local.insert((x, ri, pi), packed);
                        } else if move_rows {
                            sends.push((r, packed));
                        }
                    }
                }
            }
        }
        let mut recvs: Vec<(Key4, CudaSlice<T>)> = Vec::new();
        if move_rows {
            for (ri, (run, _)) in u.mine.iter().enumerate() {
                for o in (0..p).filter(|&o| o != me) {
                    for (pj, piece) in plan.pieces(o).iter().enumerate() {
                        for (x, (side, _)) in inputs.iter().enumerate() {
                            let len = b * piece.rows * heads(run, *side) * w(*side);
                            recvs.push(((x, ri, o, pj), recv_buffer(self.comm, len)?));
                        }
                    }
                }
            }
            swap(self.comm, &sends, &mut recvs, |&(_, _, o, _)| o)?;
        }
        let mut out = Vec::with_capacity(inputs.len());
        for (x, (side, _)) in inputs.iter().enumerate() {
            let mut runs = Vec::with_capacity(u.mine.len());
            for (ri, (run, _)) in u.mine.iter().enumerate() {
                let len = b * n * heads(run, *side) * w(*side);
                let mut full = gpu.stream().alloc_zeros::<T>(len.max(1))?;
                let place = |buf: &CudaSlice<T>, o: usize, pj: usize, full: &mut CudaSlice<T>| {
                    h.scatter_to(gpu, buf, full, u.seq[&(ri, o, pj)].of(*side), w(*side))
                };
                for pj in 0..plan.pieces(me).len() {
                    place(&local[&(x, ri, pj)], me, pj, &mut full)?;
                }
                for ((y, rj, o, pj), buf) in &recvs {
                    if (*y, *rj) == (x, ri) {
                        place(buf, *o, *pj, &mut full)?;
                    }
                }
                runs.push(full);
            }
            out.push(runs);
        }
        Ok(out)
    }

    /// Head split -> token split: for each output `(side, this rank's run tensors)`, write
    /// (or with `add`, add) its rows into `dst[x][pi]`, this rank's piece tensors, whose
    /// rows all runs of all ranks together cover. `move_rows` false: only this rank's own
    /// rows are placed (the comm-free probe).
    fn to_tokens(
        &self,
        u: &Ulysses,
        outputs: &[(Side, Vec<&CudaSlice<f32>>)],
        dst: &mut [Vec<CudaSlice<f32>>],
        add: bool,
        move_rows: bool,
    ) -> DistResult<()> {
        let (gpu, plan, h, me, p) = (self.gpu, self.plan, &self.helpers, self.rank(), self.plan.ranks());
        let b = plan.batch;
        let w = |side: Side| width(side, plan);
        let mut local: Vec<((usize, usize, usize), CudaSlice<f32>)> = Vec::new();
        let mut sends: Vec<(usize, CudaSlice<f32>)> = Vec::new();
        for ri in 0..u.mine.len() {
            for o in 0..p {
                for pj in 0..plan.pieces(o).len() {
                    for (x, (side, runs)) in outputs.iter().enumerate() {
                        let packed = h.gather(gpu, runs[ri], u.seq[&(ri, o, pj)].of(*side), w(*side))?;
                        if o == me {
                            local.push(((x, ri, pj), packed));
                        } else if move_rows {
                            sends.push((o, packed));
                        }
                    }
                }
            }
        }
        let mut recvs: Vec<(Key4, CudaSlice<f32>)> = Vec::new();
        if move_rows {
            for r in (0..p).filter(|&r| r != me) {
                for (ri, run) in u.split.runs(r).iter().enumerate() {
                    for (pi, piece) in plan.pieces(me).iter().enumerate() {
                        for (x, (side, _)) in outputs.iter().enumerate() {
                            let len = b * piece.rows * heads(run, *side) * w(*side);
                            recvs.push(((x, r, ri, pi), recv_buffer(self.comm, len)?));
                        }
                    }
                }
            }
            swap(self.comm, &sends, &mut recvs, |&(_, r, _, _)| r)?;
        }
        let placed = local.iter().map(|((x, ri, pi), buf)| ((*x, me, *ri, *pi), buf));
        for ((x, r, ri, pi), buf) in placed.chain(recvs.iter().map(|(k, buf)| (*k, buf))) {
            let side = outputs[x].0;
            let idx = u.tok[&(r, ri, pi)].of(side);
            let target = &mut dst[x][pi];
            h.place(gpu, target, buf, idx, w(side), add)?;
        }
        Ok(())
    }

    /// The Ulysses forward: the finished output of each query piece of this rank.
    pub(super) fn ulysses_forward(&mut self, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        let mut u = self.ulysses_state()?;
        let result = self.ulysses_forward_with(&mut u, data, probe);
        self.ulysses = Some(u);
        result
    }

    fn ulysses_forward_with(&self, u: &mut Ulysses, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        let (gpu, plan, me) = (self.gpu, self.plan, self.rank());
        let (move_rows, compute) = (probe != Probe::ComputeOnly, probe != Probe::CommOnly);
        let inputs = forward_inputs(data);
        let [q, k, v]: [Vec<CudaSlice<u16>>; 3] =
            self.to_heads(u, &inputs, move_rows)?.try_into().expect("three inputs");
        let parts = runs_forward(gpu, u, [q, k, v], compute)?;
        let mut dst = output_targets(gpu, plan, me)?;
        let outputs = out_and_lse(&parts);
        self.to_tokens(u, &outputs, &mut dst, false, move_rows)?;
        Ok(partials(plan, me, dst))
    }

    /// The Ulysses backward of `out` (this rank's finished forward pieces) for `dout`.
    pub(super) fn ulysses_backward(
        &mut self,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        let mut u = self.ulysses_state()?;
        let result = self.ulysses_backward_with(&mut u, data, out, dout);
        self.ulysses = Some(u);
        result
    }

    fn ulysses_backward_with(
        &self,
        u: &mut Ulysses,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        let (gpu, plan, me) = (self.gpu, self.plan, self.rank());
        let inputs = backward_inputs(data, dout);
        let [q, k, v, g]: [Vec<CudaSlice<u16>>; 4] = self.to_heads(u, &inputs, true)?.try_into().expect("four inputs");
        let fwd = out_and_lse(out);
        let [o, lse]: [Vec<CudaSlice<f32>>; 2] = self.to_heads(u, &fwd, true)?.try_into().expect("two inputs");
        let grads = runs_backward(gpu, u, [q, k, v, g], [o, lse])?;
        let mut dst = grad_targets(gpu, plan, me)?;
        let outputs = [
            (Side::Q, grads.iter().map(|x| &x.dq).collect()),
            (Side::K, grads.iter().map(|x| &x.dk).collect()),
            (Side::V, grads.iter().map(|x| &x.dv).collect()),
        ];
        self.to_tokens(u, &outputs, &mut dst, true, true)?;
        Ok(grads_of(dst))
    }
}

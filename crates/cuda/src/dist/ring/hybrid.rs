//! One rank of the Ulysses x ring hybrid ([`Kind::Hybrid`], USP) on the GPU.
//!
//! Rank `g U + u` (member `u` of group `g`, `dist::hybrid_split`) works on two
//! communicators split from the world: its group (`U` ranks, color `g`) and its ring (the
//! `G` members `u` of every group, color `u`). Forward:
//! 1. one all-to-all inside the group moves every member's Q, K, V rows of the group's
//!    tokens to the member computing their heads, into *group pieces* (the pieces of the
//!    group's tokens, at the run's heads);
//! 2. for each run of this member's heads, the dense ring ([`Kind::Ring`]) runs over the
//!    ring communicator on the run's group plan (`HybridSplit::ring_plan`), through an
//!    inner [`DistRank`]: the same launches, overlap and merge order as any ring;
//! 3. a second all-to-all sends each token owner the output and LSE rows of its tokens.
//!
//! Backward: Q, K, V, dOut, output and LSE go to the group pieces the same way, the inner
//! ring's backward runs per run, and dQ, dK, dV come home, where the contributions of a
//! K/V head shared by two members' runs add. `U = 1` is the dense ring, `U = P` Ulysses
//! over group pieces. Exact for every pattern and layout: each run is the ring over the
//! group plan, whose launches see global token positions and global head indices.
//!
//! Messages are one per (overlap of a rank's piece with a group piece, run, tensor), in
//! the same nesting on both sides of every pair (`(run of the receiver, overlap of the
//! sender, tensor)`), so NCCL matches them by order.

use super::data::{RankData, RankGrads};
use super::ulysses::{
    Key4, Lists, Side, backward_inputs, forward_inputs, heads, out_and_lse, recv_buffer, swap, width,
};
use super::{DistRank, Probe, RankState};
use crate::dist::comm::{Communicator, Wire};
use crate::dist::error::DistResult;
use crate::dist::exec::{Helpers, Packable, grad_targets, grads_of, output_targets, partials};
use crate::dist::hybrid_split::{self, HybridSplit, Overlap};
use crate::dist::layout::DistPlan;
use crate::gpu::Gpu;
use crate::shape::Dtype;
use crate::tensors::{DevicePartial, DeviceTensor};
use cudarc::driver::{CudaSlice, ValidAsZeroBits};
use ringdil_reference::ring::Kind;
use std::collections::HashMap;
use std::rc::Rc;

/// One run of a member's heads: its ring plan over the groups and the inner ring's
/// prepared state (taken while a call runs).
pub(crate) struct RunRing {
    pub(crate) plan: DistPlan,
    pub(crate) state: Option<RankState>,
}

/// Index lists of one rank of the grid, on the device.
pub(crate) struct HybridLists {
    /// Overlaps of each member of the rank's group with the group's pieces.
    pub(crate) overlaps: Vec<Vec<Overlap>>,
    /// Key `(u2, ri, k)`: rows of this rank's overlap `k` at member `u2`'s run `ri` heads
    /// (token side).
    pub(crate) tok: HashMap<(usize, usize, usize), Lists>,
    /// Key `(ri, u2, k)`: rows of member `u2`'s overlap `k` in this rank's run `ri` group
    /// pieces (group side).
    pub(crate) seq: HashMap<(usize, usize, usize), Lists>,
}

impl HybridLists {
    pub(crate) fn new(gpu: &Gpu, plan: &DistPlan, split: &HybridSplit, rank: usize) -> DistResult<Self> {
        let (b, h, hk) = (plan.batch, plan.heads, plan.kv_heads);
        let (g, me) = split.place(rank);
        let up = |v: Vec<u32>| gpu.stream().clone_htod(&v);
        let overlaps: Vec<Vec<Overlap>> = (0..split.degree).map(|u| split.overlaps(plan, split.rank(g, u))).collect();
        let mine = &overlaps[me];
        let mut tok = HashMap::new();
        for u2 in 0..split.degree {
            for (ri, run) in split.runs(u2).iter().enumerate() {
                for (k, ov) in mine.iter().enumerate() {
                    let rows = plan.pieces(rank)[ov.piece].rows;
                    let lists = Lists {
                        q: up(hybrid_split::token_rows(b, rows, h, &run.q, ov))?,
                        kv: up(hybrid_split::token_rows(b, rows, hk, &run.kv, ov))?,
                        lse: up(hybrid_split::token_lse(b, rows, h, &run.q, ov))?,
                    };
                    tok.insert((u2, ri, k), lists);
                }
            }
        }
        let mut seq = HashMap::new();
        let gp = split.group_pieces(g);
        for (ri, run) in split.runs(me).iter().enumerate() {
            for (u2, theirs) in overlaps.iter().enumerate() {
                for (k, ov) in theirs.iter().enumerate() {
                    let rows = gp[ov.group_piece].rows;
                    let lists = Lists {
                        q: up(hybrid_split::group_rows(b, rows, run.q.len(), ov))?,
                        kv: up(hybrid_split::group_rows(b, rows, run.kv.len(), ov))?,
                        lse: up(hybrid_split::group_lse(b, rows, run.q.len(), ov))?,
                    };
                    seq.insert((ri, u2, k), lists);
                }
            }
        }
        Ok(HybridLists { overlaps, tok, seq })
    }
}

/// A rank's hybrid state, built on its first hybrid call.
pub(crate) struct Hybrid {
    pub(crate) split: HybridSplit,
    group: Rc<Communicator>,
    ring: Rc<Communicator>,
    mine: Vec<RunRing>,
    lists: HybridLists,
}

impl Hybrid {
    /// Order the compute stream after the group's and the ring's transfers.
    pub(crate) fn settle(&self, gpu: &Gpu) -> DistResult<()> {
        gpu.stream().join(self.group.stream())?;
        gpu.stream().join(self.ring.stream())?;
        Ok(())
    }

    /// The grid of `plan` with groups of `degree` ranks; splits `comm` twice (every rank
    /// of `comm` must call this together).
    fn new(gpu: &Gpu, comm: &Communicator, plan: &DistPlan, dtype: Dtype, degree: usize) -> DistResult<Self> {
        let split = HybridSplit::new(plan, degree)?;
        let (g, u) = split.place(comm.rank());
        // Kept with `comm` per degree: every later call of the same grid reuses them.
        let group = comm.split_kept(gpu, &format!("hybrid groups of {degree}"), g, u)?;
        let ring = comm.split_kept(gpu, &format!("hybrid rings across groups of {degree}"), u, g)?;
        let mine = run_rings(gpu, plan, &split, u, g, dtype)?;
        let lists = HybridLists::new(gpu, plan, &split, comm.rank())?;
        Ok(Hybrid { split, group, ring, mine, lists })
    }
}

/// Member `u`'s runs with their ring plans and, prepared for ring position `g`, their
/// inner ranks' states.
pub(crate) fn run_rings(
    gpu: &Gpu,
    plan: &DistPlan,
    split: &HybridSplit,
    u: usize,
    g: usize,
    dtype: Dtype,
) -> DistResult<Vec<RunRing>> {
    split
        .runs(u)
        .iter()
        .map(|run| {
            let ring_plan = split.ring_plan(plan, run)?;
            let state = RankState::new(gpu, &ring_plan, g, dtype)?;
            Ok(RunRing { plan: ring_plan, state: Some(state) })
        })
        .collect()
}

/// `[run][group piece]` tensors of one input.
type Groups<T> = Vec<Vec<CudaSlice<T>>>;

/// Device tensors of group pieces `xs` with dims `dims(gj)`.
fn tensors(xs: Vec<CudaSlice<u16>>, dims: impl Fn(usize) -> [usize; 4]) -> Vec<DeviceTensor> {
    xs.into_iter().enumerate().map(|(gj, data)| DeviceTensor { data, dims: dims(gj) }).collect()
}

/// Ring position `g`'s inputs of ring plan `p` from its group tensors `[q, k, v]`.
pub(crate) fn group_data(p: &DistPlan, g: usize, [q, k, v]: [Vec<CudaSlice<u16>>; 3]) -> RankData {
    RankData {
        q: group_queries(p, g, q),
        k: tensors(k, |gj| p.kv_piece_dims(g, gj)),
        v: tensors(v, |gj| p.v_piece_dims(g, gj)),
    }
}

/// Query group tensors of ring position `g` of ring plan `p`.
pub(crate) fn group_queries(p: &DistPlan, g: usize, xs: Vec<CudaSlice<u16>>) -> Vec<DeviceTensor> {
    tensors(xs, |gj| p.piece_dims(g, gj))
}

/// Upstream gradient (dOut) group tensors of ring position `g` of ring plan `p`.
pub(crate) fn group_douts(p: &DistPlan, g: usize, xs: Vec<CudaSlice<u16>>) -> Vec<DeviceTensor> {
    tensors(xs, |gj| p.out_piece_dims(g, gj))
}

/// The finished forward pieces of ring position `g` of ring plan `p` from its group
/// output and LSE tensors.
pub(crate) fn group_partials(
    p: &DistPlan,
    g: usize,
    o: Vec<CudaSlice<f32>>,
    lse: Vec<CudaSlice<f32>>,
) -> Vec<DevicePartial> {
    o.into_iter()
        .zip(lse)
        .enumerate()
        .map(|(gj, (out, lse))| DevicePartial { out, lse, dims: p.out_piece_dims(g, gj) })
        .collect()
}

/// `call` on the inner rank of run ring `rr` at ring position `g` over `ring`, with the
/// run's prepared state (made on first use, kept for the next call).
fn with_inner<R>(
    gpu: &Gpu,
    ring: &Communicator,
    rr: &mut RunRing,
    g: usize,
    dtype: Dtype,
    call: impl FnOnce(&mut DistRank<'_>) -> DistResult<R>,
) -> DistResult<R> {
    let state = match rr.state.take() {
        Some(s) => s,
        None => RankState::new(gpu, &rr.plan, g, dtype)?,
    };
    let mut inner = DistRank::with_state(gpu, ring, &rr.plan, state)?;
    let result = call(&mut inner);
    rr.state = Some(inner.into_state());
    result
}

/// Token pieces -> group pieces: for each input `(side, this rank's piece tensors)`, the
/// group-piece tensors of every run of this rank (one all-to-all group on `comm` for all
/// inputs). `move_rows` false: only this rank's own rows are placed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn to_groups<T: Packable + Wire + ValidAsZeroBits>(
    gpu: &Gpu,
    helpers: &Helpers,
    comm: Option<&Communicator>,
    plan: &DistPlan,
    split: &HybridSplit,
    lists: &HybridLists,
    rank: usize,
    inputs: &[(Side, Vec<&CudaSlice<T>>)],
) -> DistResult<Vec<Groups<T>>> {
    let b = plan.batch;
    let (g, me) = split.place(rank);
    let my_runs = split.runs(me);
    let mut local: HashMap<(usize, usize, usize), CudaSlice<T>> = HashMap::new();
    let mut sends: Vec<(usize, CudaSlice<T>)> = Vec::new();
    for u2 in 0..split.degree {
        for ri in 0..split.runs(u2).len() {
            for (k, ov) in lists.overlaps[me].iter().enumerate() {
                for (x, (side, pieces)) in inputs.iter().enumerate() {
                    if u2 != me && comm.is_none() {
                        continue;
                    }
                    let packed =
                        helpers.gather(gpu, pieces[ov.piece], lists.tok[&(u2, ri, k)].of(*side), width(*side, plan))?;
                    if u2 == me {
                        local.insert((x, ri, k), packed);
                    } else {
                        sends.push((u2, packed));
                    }
                }
            }
        }
    }
    let mut recvs: Vec<(Key4, CudaSlice<T>)> = Vec::new();
    if let Some(comm) = comm {
        for (ri, run) in my_runs.iter().enumerate() {
            for u2 in (0..split.degree).filter(|&u2| u2 != me) {
                for (k, ov) in lists.overlaps[u2].iter().enumerate() {
                    for (x, (side, _)) in inputs.iter().enumerate() {
                        let len = b * ov.rows.len() * heads(run, *side) * width(*side, plan);
                        recvs.push(((x, ri, u2, k), recv_buffer(comm, len)?));
                    }
                }
            }
        }
        swap(comm, &sends, &mut recvs, |&(_, _, u2, _)| u2)?;
    }
    let gp = split.group_pieces(g);
    let mut out: Vec<Groups<T>> = Vec::with_capacity(inputs.len());
    for (side, _) in inputs {
        let per_run = my_runs
            .iter()
            .map(|run| {
                gp.iter()
                    .map(|p| {
                        Ok(gpu
                            .stream()
                            .alloc_zeros::<T>((b * p.rows * heads(run, *side) * width(*side, plan)).max(1))?)
                    })
                    .collect::<DistResult<Vec<_>>>()
            })
            .collect::<DistResult<Vec<_>>>()?;
        out.push(per_run);
    }
    let placed = local.iter().map(|(&(x, ri, k), buf)| ((x, ri, me, k), buf));
    for ((x, ri, u2, k), buf) in placed.chain(recvs.iter().map(|(key, buf)| (*key, buf))) {
        let side = inputs[x].0;
        let target = &mut out[x][ri][lists.overlaps[u2][k].group_piece];
        helpers.scatter_to(gpu, buf, target, lists.seq[&(ri, u2, k)].of(side), width(side, plan))?;
    }
    Ok(out)
}

/// Group pieces -> token pieces: for each output `(side, this rank's [run][group piece]
/// tensors)`, write (or with `add`, add) its rows into `dst[x][pi]`, the piece tensors
/// of the rank owning them. `comm` `None`: only this rank's own rows are placed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn to_tokens(
    gpu: &Gpu,
    helpers: &Helpers,
    comm: Option<&Communicator>,
    plan: &DistPlan,
    split: &HybridSplit,
    lists: &HybridLists,
    rank: usize,
    outputs: &[(Side, Vec<Vec<&CudaSlice<f32>>>)],
    dst: &mut [Vec<CudaSlice<f32>>],
    add: bool,
) -> DistResult<()> {
    let b = plan.batch;
    let (_, me) = split.place(rank);
    let mut local: Vec<(Key4, CudaSlice<f32>)> = Vec::new();
    let mut sends: Vec<(usize, CudaSlice<f32>)> = Vec::new();
    for ri in 0..split.runs(me).len() {
        for u2 in 0..split.degree {
            for (k, ov) in lists.overlaps[u2].iter().enumerate() {
                for (x, (side, runs)) in outputs.iter().enumerate() {
                    if u2 != me && comm.is_none() {
                        continue;
                    }
                    let src = runs[ri][ov.group_piece];
                    let packed = helpers.gather(gpu, src, lists.seq[&(ri, u2, k)].of(*side), width(*side, plan))?;
                    if u2 == me {
                        local.push(((x, me, ri, k), packed));
                    } else {
                        sends.push((u2, packed));
                    }
                }
            }
        }
    }
    let mut recvs: Vec<(Key4, CudaSlice<f32>)> = Vec::new();
    if let Some(comm) = comm {
        for u2 in (0..split.degree).filter(|&u2| u2 != me) {
            for (ri, run) in split.runs(u2).iter().enumerate() {
                for (k, ov) in lists.overlaps[me].iter().enumerate() {
                    for (x, (side, _)) in outputs.iter().enumerate() {
                        let len = b * ov.rows.len() * heads(run, *side) * width(*side, plan);
                        recvs.push(((x, u2, ri, k), recv_buffer(comm, len)?));
                    }
                }
            }
        }
        swap(comm, &sends, &mut recvs, |&(_, u2, _, _)| u2)?;
    }
    for ((x, u2, ri, k), buf) in local.iter().chain(recvs.iter()).map(|(key, buf)| (*key, buf)) {
        let side = outputs[x].0;
        let idx = lists.tok[&(u2, ri, k)].of(side);
        let target = &mut dst[x][lists.overlaps[me][k].piece];
        helpers.place(gpu, target, buf, idx, width(side, plan), add)?;
    }
    Ok(())
}

impl DistRank<'_> {
    fn hybrid_state(&mut self) -> DistResult<Hybrid> {
        let degree = self.plan.hybrid_degree();
        match self.hybrid.take() {
            Some(h) if h.split.degree == degree => Ok(h),
            _ => Hybrid::new(self.gpu, self.comm, self.plan, self.dtype, degree),
        }
    }

    /// The hybrid forward: the finished output of each query piece of this rank.
    pub(super) fn hybrid_forward(&mut self, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        let mut hy = self.hybrid_state()?;
        let result = self.hybrid_forward_with(&mut hy, data, probe);
        self.hybrid = Some(hy);
        result
    }

    fn hybrid_forward_with(&self, hy: &mut Hybrid, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        let (gpu, plan, me) = (self.gpu, self.plan, self.rank());
        let comm = (probe != Probe::ComputeOnly).then_some(&*hy.group);
        let (g, _) = hy.split.place(me);
        let inputs = forward_inputs(data);
        let moved = to_groups(gpu, &self.helpers, comm, plan, &hy.split, &hy.lists, me, &inputs)?;
        let [q, k, v]: [Groups<u16>; 3] = moved.try_into().expect("three inputs");
        let mut parts: Vec<Vec<DevicePartial>> = Vec::with_capacity(hy.mine.len());
        for (rr, ((q, k), v)) in hy.mine.iter_mut().zip(q.into_iter().zip(k).zip(v)) {
            let inner_data = group_data(&rr.plan, g, [q, k, v]);
            parts.push(with_inner(gpu, &hy.ring, rr, g, self.dtype, |inner| {
                inner.forward_probe(Kind::Ring, &inner_data, probe)
            })?);
        }
        let mut dst = output_targets(gpu, plan, me)?;
        let outputs = [
            (Side::Out, parts.iter().map(|run| run.iter().map(|x| &x.out).collect()).collect()),
            (Side::Lse, parts.iter().map(|run| run.iter().map(|x| &x.lse).collect()).collect()),
        ];
        let back = (probe != Probe::ComputeOnly).then_some(&*hy.group);
        to_tokens(gpu, &self.helpers, back, plan, &hy.split, &hy.lists, me, &outputs, &mut dst, false)?;
        Ok(partials(plan, me, dst))
    }

    /// The hybrid backward of `out` (this rank's finished forward pieces) for `dout`.
    pub(super) fn hybrid_backward(
        &mut self,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        let mut hy = self.hybrid_state()?;
        let result = self.hybrid_backward_with(&mut hy, data, out, dout);
        self.hybrid = Some(hy);
        result
    }

    fn hybrid_backward_with(
        &self,
        hy: &mut Hybrid,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        let (gpu, plan, me, h) = (self.gpu, self.plan, self.rank(), &self.helpers);
        let (g, _) = hy.split.place(me);
        let comm = Some(&*hy.group);
        let inputs = backward_inputs(data, dout);
        let moved = to_groups(gpu, h, comm, plan, &hy.split, &hy.lists, me, &inputs)?;
        let [q, k, v, gr]: [Groups<u16>; 4] = moved.try_into().expect("four inputs");
        let fwd = out_and_lse(out);
        let moved = to_groups(gpu, h, comm, plan, &hy.split, &hy.lists, me, &fwd)?;
        let [o, lse]: [Groups<f32>; 2] = moved.try_into().expect("two inputs");
        let mut grads: Vec<RankGrads> = Vec::with_capacity(hy.mine.len());
        let inputs = q.into_iter().zip(k).zip(v).zip(gr).zip(o.into_iter().zip(lse));
        for (rr, ((((q, k), v), gr), (o, lse))) in hy.mine.iter_mut().zip(inputs) {
            let inner_data = group_data(&rr.plan, g, [q, k, v]);
            let inner_dout = group_douts(&rr.plan, g, gr);
            let inner_out = group_partials(&rr.plan, g, o, lse);
            grads.push(with_inner(gpu, &hy.ring, rr, g, self.dtype, |inner| {
                inner.backward(Kind::Ring, &inner_data, &inner_out, &inner_dout)
            })?);
        }
        let mut dst = grad_targets(gpu, plan, me)?;
        let outputs = [
            (Side::Q, grads.iter().map(|x| x.dq.iter().collect()).collect()),
            (Side::K, grads.iter().map(|x| x.dk.iter().collect()).collect()),
            (Side::V, grads.iter().map(|x| x.dv.iter().collect()).collect()),
        ];
        to_tokens(gpu, h, comm, plan, &hy.split, &hy.lists, me, &outputs, &mut dst, true)?;
        Ok(grads_of(dst))
    }
}

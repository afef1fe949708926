//! Ulysses on `P` virtual ranks of one GPU: every rank's pieces stay where they were
//! uploaded, and "rank `o` sends its rows to rank `r`" is a gather from `o`'s piece with
//! `o`'s index list followed by a scatter into `r`'s run tensor with `r`'s (the lists,
//! the runs and the single-GPU calls of `dist/ring/ulysses.rs`, without NCCL). So the
//! head split, the head-slice launches (`head_base`) and the addition of a shared K/V
//! head's gradients are checked on a one-GPU machine; the NCCL run adds only the order of
//! its messages.

use super::error::DistResult;
use super::exec::{Helpers, Packable, grad_targets, grads_of, output_targets, partials};
use super::layout::DistPlan;
use super::ring::ulysses::{
    Side, Ulysses, backward_inputs, forward_inputs, heads, out_and_lse, runs_backward, runs_forward, width,
};
use super::ring::{RankData, RankGrads};
use super::virtual_ranks::VirtualRanks;
use crate::gpu::Gpu;
use crate::tensors::{DevicePartial, DeviceTensor};
use cudarc::driver::{CudaSlice, ValidAsZeroBits};

/// Per rank: one `(side, that rank's piece or run tensors)` per input or output.
type PerRank<'a, T> = Vec<Vec<(Side, Vec<&'a CudaSlice<T>>)>>;

/// Token split -> head split for every rank: `[rank][input][run]` run tensors.
fn to_heads<T: Packable + ValidAsZeroBits>(
    gpu: &Gpu,
    h: &Helpers,
    plan: &DistPlan,
    states: &[Ulysses],
    inputs: &PerRank<'_, T>,
) -> DistResult<Vec<Vec<Vec<CudaSlice<T>>>>> {
    let (b, n, p) = (plan.batch, plan.seq_len(), plan.ranks());
    let mut out = Vec::with_capacity(p);
    for (r, state) in states.iter().enumerate() {
        let mut per_input = Vec::with_capacity(inputs[r].len());
        for (x, (side, _)) in inputs[r].iter().enumerate() {
            let mut runs = Vec::with_capacity(state.mine.len());
            for (ri, (run, _)) in state.mine.iter().enumerate() {
                let mut full =
                    gpu.stream().alloc_zeros::<T>((b * n * heads(run, *side) * width(*side, plan)).max(1))?;
                for (o, sender) in states.iter().enumerate() {
                    for pj in 0..plan.pieces(o).len() {
                        let packed =
                            h.gather(gpu, inputs[o][x].1[pj], sender.tok[&(r, ri, pj)].of(*side), width(*side, plan))?;
                        h.scatter_to(gpu, &packed, &mut full, state.seq[&(ri, o, pj)].of(*side), width(*side, plan))?;
                    }
                }
                runs.push(full);
            }
            per_input.push(runs);
        }
        out.push(per_input);
    }
    Ok(out)
}

/// Head split -> token split: every rank's run outputs `outputs[r]` written (or added)
/// into the owners' piece tensors `dst[o][x][pi]`.
fn to_tokens(
    gpu: &Gpu,
    h: &Helpers,
    plan: &DistPlan,
    states: &[Ulysses],
    outputs: &PerRank<'_, f32>,
    dst: &mut [Vec<Vec<CudaSlice<f32>>>],
    add: bool,
) -> DistResult<()> {
    for (r, state) in states.iter().enumerate() {
        for (x, (side, runs)) in outputs[r].iter().enumerate() {
            for (ri, run) in runs.iter().enumerate() {
                for (o, owner) in states.iter().enumerate() {
                    for (pi, target) in dst[o][x].iter_mut().enumerate() {
                        let w = width(*side, plan);
                        let packed = h.gather(gpu, run, state.seq[&(ri, o, pi)].of(*side), w)?;
                        let idx = owner.tok[&(r, ri, pi)].of(*side);
                        h.place(gpu, target, &packed, idx, w, add)?;
                    }
                }
            }
        }
    }
    Ok(())
}

impl VirtualRanks<'_> {
    fn ulysses_states(&mut self) -> DistResult<Vec<Ulysses>> {
        match std::mem::take(&mut self.ulysses) {
            states if !states.is_empty() => Ok(states),
            _ => (0..self.plan.ranks()).map(|r| Ulysses::new(self.gpu, self.plan, r, self.dtype)).collect(),
        }
    }

    /// Every rank's finished output pieces under Ulysses.
    pub fn ulysses_forward(&mut self, data: &[RankData]) -> DistResult<Vec<Vec<DevicePartial>>> {
        self.check("virtual ranks' inputs", data.len())?;
        let mut states = self.ulysses_states()?;
        let result = self.ulysses_forward_with(&mut states, data);
        self.ulysses = states;
        result
    }

    fn ulysses_forward_with(&self, states: &mut [Ulysses], data: &[RankData]) -> DistResult<Vec<Vec<DevicePartial>>> {
        let (gpu, plan) = (self.gpu, self.plan);
        let inputs: PerRank<'_, u16> = data.iter().map(|x| forward_inputs(x).to_vec()).collect();
        let moved = to_heads(gpu, &self.helpers, plan, states, &inputs)?;
        let mut parts = Vec::with_capacity(states.len());
        for (state, qkv) in states.iter_mut().zip(moved) {
            let qkv: [Vec<CudaSlice<u16>>; 3] = qkv.try_into().expect("three inputs");
            parts.push(runs_forward(gpu, state, qkv, true)?);
        }
        let outputs: PerRank<'_, f32> = parts.iter().map(|p| out_and_lse(p).to_vec()).collect();
        let mut dst = (0..plan.ranks()).map(|o| output_targets(gpu, plan, o)).collect::<DistResult<Vec<_>>>()?;
        to_tokens(gpu, &self.helpers, plan, states, &outputs, &mut dst, false)?;
        Ok(dst.into_iter().enumerate().map(|(o, t)| partials(plan, o, t)).collect())
    }

    /// Every rank's gradients under Ulysses, for outputs `out[r]` and `dout[r]`.
    pub fn ulysses_backward(
        &mut self,
        data: &[RankData],
        out: &[Vec<DevicePartial>],
        dout: &[Vec<DeviceTensor>],
    ) -> DistResult<Vec<RankGrads>> {
        self.check_backward(data.len(), out.len(), dout.len())?;
        let mut states = self.ulysses_states()?;
        let result = self.ulysses_backward_with(&mut states, data, out, dout);
        self.ulysses = states;
        result
    }

    fn ulysses_backward_with(
        &self,
        states: &mut [Ulysses],
        data: &[RankData],
        out: &[Vec<DevicePartial>],
        dout: &[Vec<DeviceTensor>],
    ) -> DistResult<Vec<RankGrads>> {
        let (gpu, plan) = (self.gpu, self.plan);
        let inputs: PerRank<'_, u16> = data.iter().zip(dout).map(|(x, g)| backward_inputs(x, g).to_vec()).collect();
        let fwd: PerRank<'_, f32> = out.iter().map(|p| out_and_lse(p).to_vec()).collect();
        let moved = to_heads(gpu, &self.helpers, plan, states, &inputs)?;
        let moved_fwd = to_heads(gpu, &self.helpers, plan, states, &fwd)?;
        let mut grads = Vec::with_capacity(states.len());
        for ((state, qkvg), ol) in states.iter_mut().zip(moved).zip(moved_fwd) {
            let qkvg: [Vec<CudaSlice<u16>>; 4] = qkvg.try_into().expect("four inputs");
            let ol: [Vec<CudaSlice<f32>>; 2] = ol.try_into().expect("two inputs");
            grads.push(runs_backward(gpu, state, qkvg, ol)?);
        }
        let outputs: PerRank<'_, f32> = grads
            .iter()
            .map(|g| {
                vec![
                    (Side::Q, g.iter().map(|x| &x.dq).collect()),
                    (Side::K, g.iter().map(|x| &x.dk).collect()),
                    (Side::V, g.iter().map(|x| &x.dv).collect()),
                ]
            })
            .collect();
        let mut dst = (0..plan.ranks()).map(|o| grad_targets(gpu, plan, o)).collect::<DistResult<Vec<_>>>()?;
        to_tokens(gpu, &self.helpers, plan, states, &outputs, &mut dst, true)?;
        Ok(dst.into_iter().map(grads_of).collect())
    }
}

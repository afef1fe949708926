//! The Ulysses x ring hybrid on `P` virtual ranks of one GPU: "member `u2` sends its rows
//! to member `u`" is a gather from `u2`'s piece with `u2`'s index list and a scatter into
//! `u`'s group piece with `u`'s (the lists of `dist/ring/hybrid.rs`), and each run's ring
//! over the groups runs on [`VirtualRanks`] of its ring plan. So the grid, the group
//! pieces, the head-slice ring plans and the addition of a shared K/V head's gradients
//! are checked on a one-GPU machine; the NCCL run adds only its messages' order.

use super::error::DistResult;
use super::exec::{Helpers, Packable, grad_targets, grads_of, output_targets, partials};
use super::hybrid_split::HybridSplit;
use super::layout::DistPlan;
use super::ring::hybrid::{HybridLists, group_data, group_douts, group_partials};
use super::ring::ulysses::{Side, backward_inputs, forward_inputs, out_and_lse, width};
use super::ring::{RankData, RankGrads};
use super::virtual_ranks::VirtualRanks;
use crate::gpu::Gpu;
use crate::tensors::{DevicePartial, DeviceTensor};
use cudarc::driver::{CudaSlice, ValidAsZeroBits};

/// Per rank: one `(side, that rank's piece tensors)` per input.
type PerRank<'a, T> = Vec<Vec<(Side, Vec<&'a CudaSlice<T>>)>>;

/// Per rank: one `(side, that rank's [run][group piece] tensors)` per output.
type PerRankGroups<'a> = Vec<Vec<(Side, Vec<Vec<&'a CudaSlice<f32>>>)>>;

/// `[rank][input][run][group piece]` tensors.
type Moved<T> = Vec<Vec<Vec<Vec<CudaSlice<T>>>>>;

/// The grid of a virtual run: the split and every rank's lists.
struct Grid {
    split: HybridSplit,
    lists: Vec<HybridLists>,
}

/// Token pieces -> group pieces for every rank.
fn to_groups<T: Packable + ValidAsZeroBits>(
    gpu: &Gpu,
    h: &Helpers,
    plan: &DistPlan,
    grid: &Grid,
    inputs: &PerRank<'_, T>,
) -> DistResult<Moved<T>> {
    let (b, split) = (plan.batch, &grid.split);
    let mut out = Vec::with_capacity(plan.ranks());
    for r in 0..plan.ranks() {
        let (g, u) = split.place(r);
        let mut per_input = Vec::with_capacity(inputs[r].len());
        for (x, (side, _)) in inputs[r].iter().enumerate() {
            let mut per_run = Vec::new();
            for (ri, run) in split.runs(u).iter().enumerate() {
                let m = super::ring::ulysses::heads(run, *side);
                let mut pieces = split
                    .group_pieces(g)
                    .iter()
                    .map(|p| Ok(gpu.stream().alloc_zeros::<T>((b * p.rows * m * width(*side, plan)).max(1))?))
                    .collect::<DistResult<Vec<_>>>()?;
                for u2 in 0..split.degree {
                    let sender = split.rank(g, u2);
                    for (k, ov) in grid.lists[r].overlaps[u2].iter().enumerate() {
                        let src = inputs[sender][x].1[ov.piece];
                        let packed =
                            h.gather(gpu, src, grid.lists[sender].tok[&(u, ri, k)].of(*side), width(*side, plan))?;
                        let idx = grid.lists[r].seq[&(ri, u2, k)].of(*side);
                        h.scatter_to(gpu, &packed, &mut pieces[ov.group_piece], idx, width(*side, plan))?;
                    }
                }
                per_run.push(pieces);
            }
            per_input.push(per_run);
        }
        out.push(per_input);
    }
    Ok(out)
}

/// Group pieces -> token pieces: every rank's run outputs written (or added) into the
/// owners' piece tensors `dst[o][x][pi]`.
fn to_tokens(
    gpu: &Gpu,
    h: &Helpers,
    plan: &DistPlan,
    grid: &Grid,
    outputs: &PerRankGroups<'_>,
    dst: &mut [Vec<Vec<CudaSlice<f32>>>],
    add: bool,
) -> DistResult<()> {
    let split = &grid.split;
    for (r, per_output) in outputs.iter().enumerate() {
        let (g, u) = split.place(r);
        for (x, (side, runs)) in per_output.iter().enumerate() {
            let w = width(*side, plan);
            for (ri, run) in runs.iter().enumerate() {
                for u2 in 0..split.degree {
                    let owner = split.rank(g, u2);
                    for (k, ov) in grid.lists[r].overlaps[u2].iter().enumerate() {
                        let packed =
                            h.gather(gpu, run[ov.group_piece], grid.lists[r].seq[&(ri, u2, k)].of(*side), w)?;
                        let idx = grid.lists[owner].tok[&(u, ri, k)].of(*side);
                        let target = &mut dst[owner][x][ov.piece];
                        h.place(gpu, target, &packed, idx, w, add)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Input `x`'s run `ri` group tensors of `rank`, taken out of `moved`.
fn take<T>(moved: &mut Moved<T>, rank: usize, x: usize, ri: usize) -> Vec<CudaSlice<T>> {
    std::mem::take(&mut moved[rank][x][ri])
}

impl VirtualRanks<'_> {
    fn hybrid_grid(&self) -> DistResult<Grid> {
        let split = HybridSplit::new(self.plan, self.plan.hybrid_degree())?;
        let lists = (0..self.plan.ranks())
            .map(|r| HybridLists::new(self.gpu, self.plan, &split, r))
            .collect::<DistResult<Vec<_>>>()?;
        Ok(Grid { split, lists })
    }

    /// Every rank's finished output pieces under the Ulysses x ring hybrid (groups of
    /// [`DistPlan::hybrid_degree`] ranks).
    pub fn hybrid_forward(&mut self, data: &[RankData]) -> DistResult<Vec<Vec<DevicePartial>>> {
        self.check("virtual ranks' inputs", data.len())?;
        let (gpu, plan, h) = (self.gpu, self.plan, &self.helpers);
        let grid = self.hybrid_grid()?;
        let split = &grid.split;
        let inputs: PerRank<'_, u16> = data.iter().map(|x| forward_inputs(x).to_vec()).collect();
        let mut moved = to_groups(gpu, h, plan, &grid, &inputs)?;
        let mut parts: Vec<Vec<Vec<DevicePartial>>> = (0..plan.ranks()).map(|_| Vec::new()).collect();
        for u in 0..split.degree {
            for (ri, run) in split.runs(u).iter().enumerate() {
                let rp = split.ring_plan(plan, run)?;
                let inner: Vec<RankData> = (0..split.group_count())
                    .map(|g| {
                        let r = split.rank(g, u);
                        group_data(&rp, g, [0, 1, 2].map(|x| take(&mut moved, r, x, ri)))
                    })
                    .collect();
                let outs = VirtualRanks::new(gpu, &rp, self.dtype)?.forward(&inner)?;
                for (g, out) in outs.into_iter().enumerate() {
                    parts[split.rank(g, u)].push(out);
                }
            }
        }
        let outputs: PerRankGroups<'_> = parts
            .iter()
            .map(|runs| {
                vec![
                    (Side::Out, runs.iter().map(|run| run.iter().map(|x| &x.out).collect()).collect()),
                    (Side::Lse, runs.iter().map(|run| run.iter().map(|x| &x.lse).collect()).collect()),
                ]
            })
            .collect();
        let mut dst = (0..plan.ranks()).map(|o| output_targets(gpu, plan, o)).collect::<DistResult<Vec<_>>>()?;
        to_tokens(gpu, h, plan, &grid, &outputs, &mut dst, false)?;
        Ok(dst.into_iter().enumerate().map(|(o, t)| partials(plan, o, t)).collect())
    }

    /// Every rank's gradients under the hybrid, for outputs `out[r]` and `dout[r]`.
    pub fn hybrid_backward(
        &mut self,
        data: &[RankData],
        out: &[Vec<DevicePartial>],
        dout: &[Vec<DeviceTensor>],
    ) -> DistResult<Vec<RankGrads>> {
        self.check_backward(data.len(), out.len(), dout.len())?;
        let (gpu, plan, h) = (self.gpu, self.plan, &self.helpers);
        let grid = self.hybrid_grid()?;
        let split = &grid.split;
        let inputs: PerRank<'_, u16> = data.iter().zip(dout).map(|(x, g)| backward_inputs(x, g).to_vec()).collect();
        let fwd: PerRank<'_, f32> = out.iter().map(|p| out_and_lse(p).to_vec()).collect();
        let mut moved = to_groups(gpu, h, plan, &grid, &inputs)?;
        let mut moved_fwd = to_groups(gpu, h, plan, &grid, &fwd)?;
        let mut grads: Vec<Vec<RankGrads>> = (0..plan.ranks()).map(|_| Vec::new()).collect();
        for u in 0..split.degree {
            for (ri, run) in split.runs(u).iter().enumerate() {
                let rp = split.ring_plan(plan, run)?;
                let (mut inner, mut inner_out, mut inner_dout) = (Vec::new(), Vec::new(), Vec::new());
                for g in 0..split.group_count() {
                    let r = split.rank(g, u);
                    inner.push(group_data(&rp, g, [0, 1, 2].map(|x| take(&mut moved, r, x, ri))));
                    inner_dout.push(group_douts(&rp, g, take(&mut moved, r, 3, ri)));
                    let (o, lse) = (take(&mut moved_fwd, r, 0, ri), take(&mut moved_fwd, r, 1, ri));
                    inner_out.push(group_partials(&rp, g, o, lse));
                }
                let gr = VirtualRanks::new(gpu, &rp, self.dtype)?.backward(&inner, &inner_out, &inner_dout)?;
                for (g, x) in gr.into_iter().enumerate() {
                    grads[split.rank(g, u)].push(x);
                }
            }
        }
        let outputs: PerRankGroups<'_> = grads
            .iter()
            .map(|runs| {
                vec![
                    (Side::Q, runs.iter().map(|x| x.dq.iter().collect()).collect()),
                    (Side::K, runs.iter().map(|x| x.dk.iter().collect()).collect()),
                    (Side::V, runs.iter().map(|x| x.dv.iter().collect()).collect()),
                ]
            })
            .collect();
        let mut dst = (0..plan.ranks()).map(|o| grad_targets(gpu, plan, o)).collect::<DistResult<Vec<_>>>()?;
        to_tokens(gpu, h, plan, &grid, &outputs, &mut dst, true)?;
        Ok(dst.into_iter().map(grads_of).collect())
    }
}

//! `P` virtual ranks on one GPU: the ring's steps run sequentially, every block stays
//! where it was uploaded, and "receiving the block of `src`" is reading it. Same
//! `RankCompute` launches, same merge order (`src = r, r-1, ...`) and, for gradients,
//! the same addition order as the ring (the block of `src` collects contributions from
//! ranks `src, src+1, ...` in step order), so a virtual run is the ring's arithmetic
//! without NCCL: ring code is tested and debugged on a single-GPU machine, and
//! `ring_check` compares the real ring against it bit for bit. Ulysses on virtual ranks:
//! `virtual_ulysses.rs`.

use super::error::{DistError, DistResult};
use super::exec::{Helpers, PieceRows, RankCompute, all_of, all_of_mut, finish, finish_grads, zeros};
use super::layout::DistPlan;
use super::ring::{RankData, RankGrads};
use crate::gpu::Gpu;
use crate::shape::Dtype;
use crate::tensors::{DevicePartial, DeviceTensor};

pub struct VirtualRanks<'a> {
    pub(super) gpu: &'a Gpu,
    pub(super) plan: &'a DistPlan,
    ranks: Vec<RankCompute>,
    pub(super) helpers: Helpers,
    pub(super) dtype: Dtype,
    /// Every rank's Ulysses state, built on the first Ulysses call (`virtual_ulysses`).
    pub(super) ulysses: Vec<super::ring::ulysses::Ulysses>,
}

impl<'a> VirtualRanks<'a> {
    pub fn new(gpu: &'a Gpu, plan: &'a DistPlan, dtype: Dtype) -> DistResult<Self> {
        let ranks = (0..plan.ranks()).map(|r| RankCompute::new(gpu, plan, dtype, r)).collect::<DistResult<_>>()?;
        Ok(VirtualRanks { gpu, plan, ranks, helpers: Helpers::load(gpu)?, dtype, ulysses: Vec::new() })
    }

    pub(super) fn check(&self, what: &'static str, got: usize) -> DistResult<()> {
        if got != self.plan.ranks() {
            return Err(DistError::ShapeMismatch { what, expected: vec![self.plan.ranks()], got: vec![got] });
        }
        Ok(())
    }

    /// One input, output and upstream gradient set per rank.
    pub(super) fn check_backward(&self, data: usize, out: usize, dout: usize) -> DistResult<()> {
        self.check("virtual ranks' inputs", data)?;
        self.check("virtual ranks' outputs", out)?;
        self.check("virtual ranks' d_out", dout)
    }

    /// Every rank's finished output pieces.
    pub fn forward(&mut self, data: &[RankData]) -> DistResult<Vec<Vec<DevicePartial>>> {
        self.check("virtual ranks' inputs", data.len())?;
        let p = self.plan.ranks();
        let mut acc: Vec<Vec<Option<DevicePartial>>> =
            data.iter().map(|d| (0..d.q.len()).map(|_| None).collect()).collect();
        for s in 0..p {
            for r in 0..p {
                let src = (r + p - s) % p;
                self.ranks[r].attend(
                    self.gpu,
                    self.plan,
                    src,
                    &data[r].q,
                    &all_of(&data[src].k, &data[src].v),
                    &mut acc[r],
                )?;
            }
        }
        acc.into_iter().enumerate().map(|(r, a)| finish(self.gpu, &self.helpers, self.plan, r, a)).collect()
    }

    /// Every rank's gradients, for outputs `out[r]` and upstream gradients `dout[r]`.
    pub fn backward(
        &mut self,
        data: &[RankData],
        out: &[Vec<DevicePartial>],
        dout: &[Vec<DeviceTensor>],
    ) -> DistResult<Vec<RankGrads>> {
        self.check_backward(data.len(), out.len(), dout.len())?;
        let p = self.plan.ranks();
        let mut dq: Vec<_> = (0..p).map(|r| zeros(self.gpu, &self.plan.piece_lens(r))).collect::<DistResult<_>>()?;
        let mut dk: Vec<_> = (0..p).map(|r| zeros(self.gpu, &self.plan.kv_piece_lens(r))).collect::<DistResult<_>>()?;
        let mut dv: Vec<_> = (0..p).map(|r| zeros(self.gpu, &self.plan.v_piece_lens(r))).collect::<DistResult<_>>()?;
        let mut rows: Vec<_> = (0..p).map(|r| PieceRows::new(self.plan.piece_lens(r).len())).collect();
        for s in 0..p {
            for r in 0..p {
                let src = (r + p - s) % p;
                let kv = all_of(&data[src].k, &data[src].v);
                let mut dkv = all_of_mut(&mut dk[src], &mut dv[src]);
                let (q, fin, dout, rows) = (&data[r].q, &out[r], &dout[r], &mut rows[r]);
                self.ranks[r].backward(self.gpu, self.plan, src, q, &kv, fin, dout, rows, &mut dq[r], &mut dkv)?;
            }
        }
        let mut grads: Vec<RankGrads> =
            dq.into_iter().zip(dk).zip(dv).map(|((dq, dk), dv)| RankGrads { dq, dk, dv }).collect();
        grads.iter_mut().try_for_each(|g| finish_grads(self.gpu, &self.helpers, self.plan, g))?;
        Ok(grads)
    }
}

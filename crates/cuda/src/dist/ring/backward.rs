//! The backward pass of each schedule: the same steps as the forward, with the dK, dV
//! contributions of each block travelling back to its owner (with the block around the
//! dense ring, directly to the owner for the pattern-aware plan, in one reduce-scatter
//! for the all-gather; module docs of [`super`]).

use super::DistRank;
use super::data::{RankData, RankGrads};
use super::transfers::{Block, GradPieces};
use crate::dist::error::{DistError, DistResult};
use crate::dist::exec::{PieceRows, all_of, all_of_mut, finish_grads, zeros};
use crate::tensors::{DevicePartial, DeviceTensor};
use cudarc::driver::CudaSlice;
use ringdil_reference::ring::Kind;

impl DistRank<'_> {
    /// The backward pass for `out` (this rank's finished forward, from
    /// [`DistRank::forward`] with the same schedule) and upstream gradient pieces `dout`.
    /// On return the compute stream is ordered after every transfer of the call
    /// (`DistRank::settle`).
    pub fn backward(
        &mut self,
        schedule: Kind,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        let grads = self.backward_steps(schedule, data, out, dout)?;
        self.settle()?;
        Ok(grads)
    }

    fn backward_steps(
        &mut self,
        schedule: Kind,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        let (gpu, plan, me, p) = (self.gpu, self.plan, self.rank(), self.plan.ranks());
        if out.len() != data.q.len() || dout.len() != data.q.len() {
            return Err(DistError::ShapeMismatch {
                what: "backward pieces (out, d_out)",
                expected: vec![data.q.len()],
                got: vec![out.len(), dout.len()],
            });
        }
        if schedule == Kind::Ulysses {
            return self.ulysses_backward(data, out, dout);
        }
        if schedule == Kind::Hybrid {
            return self.hybrid_backward(data, out, dout);
        }
        let (qlens, kvlens, vlens) = (plan.piece_lens(me), plan.kv_piece_lens(me), plan.v_piece_lens(me));
        let mut dq = zeros(gpu, &qlens)?;
        let mut rows = PieceRows::new(qlens.len());
        // The token-split schedules sum unscaled steps; the pattern's output scale goes on
        // the complete gradients ([`finish_grads`]). Ulysses' calls, and the hybrid's
        // inner rings, apply it themselves.
        let mut grads = match schedule {
            Kind::Ring => {
                let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
                let mut cur: Option<Block> = None;
                let mut dk = zeros(gpu, &kvlens)?;
                let mut dv = zeros(gpu, &vlens)?;
                for s in 0..p {
                    let src = (me + p - s) % p;
                    let (ck, cv) = match &cur {
                        None => (&data.k, &data.v),
                        Some((k, v)) => (k, v),
                    };
                    let nsrc = (me + p - s - 1) % p;
                    let incoming = if s + 1 < p { Some(self.ring_hop(nsrc, ck, cv, next, prev)?) } else { None };
                    self.compute.backward(
                        gpu,
                        plan,
                        src,
                        &data.q,
                        &all_of(ck, cv),
                        out,
                        dout,
                        &mut rows,
                        &mut dq,
                        &mut all_of_mut(&mut dk, &mut dv),
                    )?;
                    if p > 1 {
                        // Pass the accumulators on; after the last step they go home (to r + 1).
                        let target = if s + 1 < p { nsrc } else { me };
                        let (klens, vlens) = (plan.kv_piece_lens(target), plan.v_piece_lens(target));
                        let (mut rdk, mut rdv) = (self.recv_f32(&klens)?, self.recv_f32(&vlens)?);
                        let sends: Vec<_> = dk.iter().chain(&dv).map(|b| (next, b)).collect();
                        let mut recvs: Vec<_> = rdk.iter_mut().chain(rdv.iter_mut()).map(|b| (prev, b)).collect();
                        self.comm.exchange(&sends, &mut recvs)?;
                        dk = rdk;
                        dv = rdv;
                    }
                    cur = incoming;
                }
                RankGrads { dq, dk, dv }
            }
            Kind::PatternRing | Kind::AllGather => {
                let mut dk = zeros(gpu, &kvlens)?;
                let mut dv = zeros(gpu, &vlens)?;
                // Own block first (no transfer).
                self.compute.backward(
                    gpu,
                    plan,
                    me,
                    &data.q,
                    &all_of(&data.k, &data.v),
                    out,
                    dout,
                    &mut rows,
                    &mut dq,
                    &mut all_of_mut(&mut dk, &mut dv),
                )?;
                let gathered = if schedule == Kind::AllGather { Some(self.gather_all(data)?) } else { None };
                let mut incoming = if gathered.is_none() { self.pattern_fetch(1, data)? } else { Vec::new() };
                // Contributions received for my pieces, added after the next step's kernels
                // are enqueued, so the return hop overlaps them.
                let mut pending: Option<(usize, Vec<usize>, GradPieces)> = None;
                let mut returns: Vec<(usize, GradPieces)> = Vec::new();
                for s in 1..p {
                    let src = (me + p - s) % p;
                    let held: Vec<Option<(DeviceTensor, DeviceTensor)>> = match &gathered {
                        Some(_) => Vec::new(),
                        None => {
                            let h = std::mem::take(&mut incoming);
                            if s + 1 < p {
                                incoming = self.pattern_fetch(s + 1, data)?;
                            }
                            self.unpack(src, h)?
                        }
                    };
                    let kv: Vec<_> = match &gathered {
                        Some(g) => g[src]
                            .as_ref()
                            .expect("other ranks' blocks")
                            .iter()
                            .map(|x| x.as_ref().map(|(k, v)| (k, v)))
                            .collect(),
                        None => held.iter().map(|x| x.as_ref().map(|(k, v)| (k, v))).collect(),
                    };
                    let which: Vec<usize> =
                        kv.iter().enumerate().filter(|(_, x)| x.is_some()).map(|(i, _)| i).collect();
                    let (klens, vlens) = (plan.kv_piece_lens(src), plan.v_piece_lens(src));
                    let mut sdk = zeros(gpu, &which.iter().map(|&kj| klens[kj]).collect::<Vec<_>>())?;
                    let mut sdv = zeros(gpu, &which.iter().map(|&kj| vlens[kj]).collect::<Vec<_>>())?;
                    {
                        let mut dkv: Vec<Option<(&mut CudaSlice<f32>, &mut CudaSlice<f32>)>> =
                            (0..klens.len()).map(|_| None).collect();
                        for ((kj, a), b) in which.iter().zip(sdk.iter_mut()).zip(sdv.iter_mut()) {
                            dkv[*kj] = Some((a, b));
                        }
                        self.compute.backward(gpu, plan, src, &data.q, &kv, out, dout, &mut rows, &mut dq, &mut dkv)?;
                    }
                    if let Some((from, mine, (a, b))) = pending.take() {
                        self.add_pieces(&mut dk, &mut dv, Some(from), &mine, a, b)?;
                    }
                    if gathered.is_none() {
                        // Return the contributions to src (packed like the K/V that came);
                        // receive mine from me + s.
                        let dst = (me + s) % p;
                        let mine = plan.needed_pieces(dst, me);
                        let klens: Vec<usize> = mine.iter().map(|&kj| plan.sent_len(dst, me, kj)).collect();
                        let vlens: Vec<usize> = mine.iter().map(|&kj| plan.sent_v_len(dst, me, kj)).collect();
                        let (mut rdk, mut rdv) = (self.recv_f32(&klens)?, self.recv_f32(&vlens)?);
                        let rk = self.packed_returns(src, &which, &sdk, plan.head_dim)?;
                        let rv = self.packed_returns(src, &which, &sdv, plan.value_dim)?;
                        let sends: Vec<_> = rk
                            .iter()
                            .zip(&sdk)
                            .chain(rv.iter().zip(&sdv))
                            .map(|(packed, whole)| (src, packed.as_ref().unwrap_or(whole)))
                            .collect();
                        let mut recvs: Vec<_> = rdk.iter_mut().chain(rdv.iter_mut()).map(|b| (dst, b)).collect();
                        if !sends.is_empty() || !recvs.is_empty() {
                            self.comm.exchange(&sends, &mut recvs)?;
                        }
                        drop(sends);
                        pending = Some((dst, mine, (rdk, rdv)));
                    } else {
                        returns.push((src, (sdk, sdv)));
                    }
                }
                if let Some((from, mine, (a, b))) = pending.take() {
                    self.add_pieces(&mut dk, &mut dv, Some(from), &mine, a, b)?;
                }
                if gathered.is_some() && p > 1 {
                    // Reduce-scatter by hand: each block's contributions go to its owner.
                    let mut recv_from: Vec<(usize, GradPieces)> = Vec::new();
                    for o in (0..p).filter(|&o| o != me) {
                        recv_from.push((o, (self.recv_f32(&kvlens)?, self.recv_f32(&vlens)?)));
                    }
                    {
                        let sends: Vec<_> = returns
                            .iter()
                            .flat_map(|(src, (a, b))| a.iter().chain(b).map(move |x| (*src, x)))
                            .collect();
                        let mut recvs: Vec<_> = recv_from
                            .iter_mut()
                            .flat_map(|(o, (a, b))| {
                                a.iter_mut().chain(b.iter_mut()).map(|x| (*o, x)).collect::<Vec<_>>()
                            })
                            .collect();
                        self.comm.exchange(&sends, &mut recvs)?;
                    }
                    let all: Vec<usize> = (0..kvlens.len()).collect();
                    for (_, (a, b)) in recv_from {
                        self.add_pieces(&mut dk, &mut dv, None, &all, a, b)?;
                    }
                }
                RankGrads { dq, dk, dv }
            }
            Kind::Ulysses | Kind::Hybrid => unreachable!("returned above"),
        };
        finish_grads(gpu, &self.helpers, plan, &mut grads)?;
        Ok(grads)
    }
}

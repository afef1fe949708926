//! The forward pass of each schedule: at step `s` rank `r` computes over the block of
//! `src = (r - s) mod P` while the next step's block travels (module docs of
//! [`super`]); [`Probe`] runs only the kernels or only the transfers, to measure how
//! much of the transfer the kernels hide.

use super::data::RankData;
use super::transfers::Block;
use super::{DistRank, Probe};
use crate::dist::error::DistResult;
use crate::dist::exec::{all_of, finish};
use crate::tensors::{DevicePartial, DeviceTensor};
use ringdil_reference::ring::Kind;

impl DistRank<'_> {
    /// The forward pass: the finished output of each query piece of this rank.
    pub fn forward(&mut self, schedule: Kind, data: &RankData) -> DistResult<Vec<DevicePartial>> {
        self.forward_probe(schedule, data, Probe::Full)
    }

    /// [`DistRank::forward`], or only its kernels or only its transfers (benchmarks).
    /// On return the compute stream is ordered after every transfer of the call
    /// (`DistRank::settle`), so the caller may drop `data` at once.
    pub fn forward_probe(&mut self, schedule: Kind, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        let out = self.forward_steps(schedule, data, probe)?;
        self.settle()?;
        Ok(out)
    }

    fn forward_steps(&mut self, schedule: Kind, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        if schedule == Kind::Ulysses {
            return self.ulysses_forward(data, probe);
        }
        if schedule == Kind::Hybrid {
            return self.hybrid_forward(data, probe);
        }
        let (gpu, plan, me, p) = (self.gpu, self.plan, self.rank(), self.plan.ranks());
        let mut acc: Vec<Option<DevicePartial>> = (0..data.q.len()).map(|_| None).collect();
        if probe == Probe::ComputeOnly {
            for s in 0..p {
                let src = (me + p - s) % p;
                if src == me {
                    self.compute.attend(gpu, plan, src, &data.q, &all_of(&data.k, &data.v), &mut acc)?;
                    continue;
                }
                // Zeroed stand-ins with the source's piece shapes: same launches, no transfer.
                let block = (0..plan.pieces(src).len())
                    .map(|kj| {
                        let zeroed = |dims: [usize; 4]| -> DistResult<DeviceTensor> {
                            Ok(DeviceTensor { data: gpu.stream().alloc_zeros::<u16>(dims.iter().product())?, dims })
                        };
                        Ok((zeroed(plan.kv_piece_dims(src, kj))?, zeroed(plan.v_piece_dims(src, kj))?))
                    })
                    .collect::<DistResult<Vec<_>>>()?;
                let kv: Vec<_> = block.iter().map(|(k, v)| Some((k, v))).collect();
                self.compute.attend(gpu, plan, src, &data.q, &kv, &mut acc)?;
            }
            return finish(gpu, &self.helpers, plan, me, acc);
        }
        let compute = probe == Probe::Full;
        match schedule {
            Kind::Ring => {
                let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
                let mut cur: Option<Block> = None;
                for s in 0..p {
                    let src = (me + p - s) % p;
                    let (ck, cv) = match &cur {
                        None => (&data.k, &data.v),
                        Some((k, v)) => (k, v),
                    };
                    let incoming =
                        if s + 1 < p { Some(self.ring_hop((me + p - s - 1) % p, ck, cv, next, prev)?) } else { None };
                    if compute {
                        self.compute.attend(gpu, plan, src, &data.q, &all_of(ck, cv), &mut acc)?;
                    }
                    cur = incoming;
                }
            }
            Kind::PatternRing => {
                let mut incoming = self.pattern_fetch(1, data)?;
                if compute {
                    self.compute.attend(gpu, plan, me, &data.q, &all_of(&data.k, &data.v), &mut acc)?;
                }
                for s in 1..p {
                    let src = (me + p - s) % p;
                    let held = std::mem::take(&mut incoming);
                    if s + 1 < p {
                        incoming = self.pattern_fetch(s + 1, data)?;
                    }
                    let held = self.unpack(src, held)?;
                    let kv: Vec<_> = held.iter().map(|x| x.as_ref().map(|(k, v)| (k, v))).collect();
                    if compute {
                        self.compute.attend(gpu, plan, src, &data.q, &kv, &mut acc)?;
                    }
                }
            }
            Kind::AllGather => {
                let blocks = self.gather_all(data)?;
                for s in 0..p {
                    let src = (me + p - s) % p;
                    let kv: Vec<_> = match &blocks[src] {
                        None => all_of(&data.k, &data.v),
                        Some(b) => b.iter().map(|x| x.as_ref().map(|(k, v)| (k, v))).collect(),
                    };
                    if compute {
                        self.compute.attend(gpu, plan, src, &data.q, &kv, &mut acc)?;
                    }
                }
            }
            Kind::Ulysses | Kind::Hybrid => unreachable!("returned above"),
        }
        finish(gpu, &self.helpers, plan, me, acc)
    }
}

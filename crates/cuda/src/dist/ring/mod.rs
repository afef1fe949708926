//! One rank of ring attention over NCCL: the dense ring, the pattern-aware plan and the
//! all-gather baseline, forward and backward.
//!
//! # Dense ring ([`Kind::Ring`])
//! Rank `r` keeps its query pieces and, at step `s = 0..P-1`, computes over the block
//! of `src = (r - s) mod P`. Before that compute is enqueued, the block it holds is sent
//! to `r + 1` and the block of `(r - s - 1) mod P` is received from `r - 1`, in one NCCL
//! group on the communication stream, into a fresh buffer: **double buffering** (the
//! block being computed on and the block arriving are different buffers), ordered by
//! events, so the transfer of step `s + 1` runs while step `s` computes. Per step and
//! rank `2 B H d n_src` elements move; in total `2 B H d (N - n_{r+1})` (reference
//! `ring` module). Memory: own block + two travelling blocks, `~3 N/P` rows of K and V.
//!
//! Backward (ring-flash-attention): the block travels with f32 `dK`, `dV` accumulators.
//! At step `s` the kernels write this pair's gradients into fresh buffers; they are added
//! to the accumulators after the accumulators of step `s - 1` arrive, so the accumulator
//! hop overlaps the next step's kernels. One more hop after the last step brings each
//! accumulator home. Volume `4 B H d (N - n_{r+1}) + 2 B H d n_{r+1}` per rank (K/V in
//! bf16, dK/dV in f32: bytes are `2*2 + 2*4` per element pair).
//!
//! # Pattern-aware plan ([`Kind::PatternRing`])
//! Same steps, but at step `s` rank `r` receives **directly** from `src = r - s` only
//! the pieces it needs ([`DistPlan::needed_pieces`]) and sends its own needed pieces to
//! `r + s`; a step nobody needs moves nothing (a dilated branch whose segments fit in
//! one rank, causal blocks above the diagonal). Of a LongNet piece only the head rows
//! kept by the branches that cross the two ranks travel ([`DistPlan::kept_rows`]: about
//! `sum 1/r` of the piece): gathered into a send buffer, scattered into a zeroed piece on
//! arrival, just before the step that reads it. Backward: the dK/dV contributions go back
//! to their owner directly at the same step, packed the same way and scatter-added.
//! Volume received by `r`: `sum_{s != r} 2 B H d sum_{kj needed} kept_kj` (`kept_kj` =
//! rows of piece `kj`, or its kept head rows / H).
//!
//! # All-gather ([`Kind::AllGather`])
//! One group gathers every other rank's pieces (`2 B H d (N - n_r)` received), then the
//! same computes run in the same order; backward gathers again and returns each block's
//! dK/dV contributions to its owner in one group. Memory `O(N)` per rank: the baseline.
//!
//! # Widths
//! The volumes above are written for `H_kv = H` and `d_v = d`. K (and dK) rows are `d`
//! wide and V (and dV) rows `d_v` ([`DistPlan::with_value_dim`], MLA's 192 / 128), on
//! `H_kv` heads: each `2 B H d` reads `B H_kv (d + d_v)`. A packed piece gathers the same
//! kept head rows from K at `d` and from V at `d_v`.
//!
//! # Head-parallel attention ([`Kind::Ulysses`])
//! All-to-all over heads instead of a ring over tokens: `ulysses.rs`.
//!
//! # Ulysses x ring ([`Kind::Hybrid`])
//! All-to-all inside groups of ranks, the dense ring across the groups: `hybrid.rs`.
//!
//! # Files
//! * `forward.rs`, `backward.rs`: the steps of each schedule, which block a step
//!   computes on and when its transfer is enqueued;
//! * `ulysses.rs`: the head-parallel schedule;
//! * `hybrid.rs`: the Ulysses x ring hybrid (inner rings of this module over split
//!   communicators);
//! * `tune.rs`: the measured choice of a schedule (each candidate's forward, timed);
//! * `transfers.rs`: the NCCL groups that move blocks and gradients, and the packing of
//!   kept head rows;
//! * `data.rs`: a rank's input and gradient pieces.

mod backward;
mod data;
mod forward;
pub(crate) mod hybrid;
mod transfers;
mod tune;
pub(crate) mod ulysses;

pub use data::{RankData, RankGrads, upload_dout};
pub use tune::{Tuned, fastest};

use super::comm::Communicator;
use super::error::{DistError, DistResult};
use super::exec::{Helpers, RankCompute};
use super::layout::DistPlan;
use crate::gpu::Gpu;
use crate::shape::Dtype;
use cudarc::driver::CudaSlice;
use ringdil_reference::ring::Kind;
use std::collections::HashMap;

/// The schedules the GPU runtime runs: every schedule of the reference, in its order.
pub const SCHEDULES: [Kind; 5] = Kind::ALL;

/// What [`DistRank::forward_probe`] runs: everything, or one half, to measure overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The real forward.
    Full,
    /// The same kernels over zeroed stand-in blocks of each source's shapes, no transfer.
    ComputeOnly,
    /// The same transfers, no kernel.
    CommOnly,
}

/// One rank of a distributed attention call.
pub struct DistRank<'a> {
    gpu: &'a Gpu,
    comm: &'a Communicator,
    plan: &'a DistPlan,
    compute: RankCompute,
    helpers: Helpers,
    /// [`DistPlan::kept_rows`] on the device, for the pieces this rank sends or receives:
    /// key `(dst, src, kj)`.
    kept: HashMap<(usize, usize, usize), CudaSlice<u32>>,
    dtype: Dtype,
    /// The head-parallel calls and index lists, built on the first Ulysses call.
    ulysses: Option<ulysses::Ulysses>,
    /// The hybrid's communicators, inner rings and index lists, built on its first call.
    hybrid: Option<hybrid::Hybrid>,
}

/// What a rank prepares for a plan before its first call: the tile plans of every
/// needed pair, the helper kernels, the kept-row lists on the device, and (after the
/// first Ulysses call) the head split's index lists. Taken out of a [`DistRank`] with
/// [`DistRank::into_state`] and given back with [`DistRank::with_state`], it lets a
/// caller that runs the same plan many times (a training loop, `ringdil.ring_attention`)
/// prepare once: building it costs host work and uploads that wait for the stream.
pub struct RankState {
    rank: usize,
    ranks: usize,
    compute: RankCompute,
    helpers: Helpers,
    kept: HashMap<(usize, usize, usize), CudaSlice<u32>>,
    dtype: Dtype,
    ulysses: Option<ulysses::Ulysses>,
    hybrid: Option<hybrid::Hybrid>,
}

impl RankState {
    /// Prepare rank `rank`'s launches of `plan` (tile plans for every needed pair) and
    /// helpers on `gpu`, for inputs of `dtype`.
    pub fn new(gpu: &Gpu, plan: &DistPlan, rank: usize, dtype: Dtype) -> DistResult<Self> {
        if rank >= plan.ranks() {
            return Err(DistError::BadRank { rank, world: plan.ranks() });
        }
        let compute = RankCompute::new(gpu, plan, dtype, rank)?;
        let mut kept = HashMap::new();
        for (dst, src) in (0..plan.ranks()).flat_map(|o| [(rank, o), (o, rank)]) {
            for kj in 0..plan.pieces(src).len() {
                if let Some(idx) = plan.kept_rows(dst, src, kj) {
                    kept.insert((dst, src, kj), gpu.stream().clone_htod(idx)?);
                }
            }
        }
        let helpers = Helpers::load(gpu)?;
        Ok(RankState { rank, ranks: plan.ranks(), compute, helpers, kept, dtype, ulysses: None, hybrid: None })
    }
}

impl<'a> DistRank<'a> {
    /// Prepare this rank's launches (tile plans for every needed pair) and helpers.
    pub fn new(gpu: &'a Gpu, comm: &'a Communicator, plan: &'a DistPlan, dtype: Dtype) -> DistResult<Self> {
        if plan.ranks() != comm.world() {
            return Err(DistError::WorldMismatch { plan: plan.ranks(), world: comm.world() });
        }
        Self::with_state(gpu, comm, plan, RankState::new(gpu, plan, comm.rank(), dtype)?)
    }

    /// This rank over a state prepared earlier for the same `plan` and rank (on the same
    /// device; its buffers are freed on the stream that made them). Errors when the
    /// state's rank or rank count differ from the communicator's.
    pub fn with_state(gpu: &'a Gpu, comm: &'a Communicator, plan: &'a DistPlan, state: RankState) -> DistResult<Self> {
        if plan.ranks() != comm.world() || state.ranks != comm.world() {
            return Err(DistError::WorldMismatch { plan: state.ranks, world: comm.world() });
        }
        if state.rank != comm.rank() {
            return Err(DistError::BadRank { rank: state.rank, world: comm.world() });
        }
        let RankState { compute, helpers, kept, dtype, ulysses, hybrid, .. } = state;
        Ok(DistRank { gpu, comm, plan, compute, helpers, kept, dtype, ulysses, hybrid })
    }

    /// The prepared state, to run the same plan again ([`DistRank::with_state`]).
    pub fn into_state(self) -> RankState {
        let DistRank { compute, helpers, kept, dtype, ulysses, hybrid, plan, comm, .. } = self;
        RankState { rank: comm.rank(), ranks: plan.ranks(), compute, helpers, kept, dtype, ulysses, hybrid }
    }

    /// The plan this rank runs.
    pub fn plan(&self) -> &'a DistPlan {
        self.plan
    }

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Order the compute stream after everything enqueued on the communication streams
    /// (this rank's, and the hybrid's group communicator). A buffer sent by NCCL and also
    /// read by a kernel keeps only its last reader's event (cudarc records one read event
    /// per buffer), so without this a caller that drops an input right after a call could
    /// free it, on the compute stream, while a send still reads it.
    fn settle(&self) -> DistResult<()> {
        self.gpu.stream().join(self.comm.stream())?;
        if let Some(h) = &self.hybrid {
            h.settle(self.gpu)?;
        }
        Ok(())
    }
}

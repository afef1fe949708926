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

use super::comm::Communicator;
use super::error::{DistError, DistResult};
use super::exec::{Helpers, RankCompute, all_of, all_of_mut, finish, zeros};
use super::layout::DistPlan;
use crate::gpu::{DevicePartial, DeviceTensor, Gpu};
use crate::launch::Dtype;
use cudarc::driver::CudaSlice;
use ringdil_reference::ring::Kind;
use std::collections::HashMap;

/// The schedules the GPU runtime runs, in the reference's order ([`Kind::ALL`] without
/// Ulysses, which splits heads rather than tokens and has no GPU implementation).
pub const SCHEDULES: [Kind; 3] = [Kind::Ring, Kind::PatternRing, Kind::AllGather];

/// `Ok` for a schedule of [`SCHEDULES`], a typed error for the others.
fn supported(schedule: Kind) -> DistResult<()> {
    match SCHEDULES.contains(&schedule) {
        true => Ok(()),
        false => Err(DistError::UnsupportedSchedule(schedule)),
    }
}

/// A rank's inputs, one device tensor per piece (see [`DistPlan::scatter`]).
pub struct RankData {
    pub q: Vec<DeviceTensor>,
    pub k: Vec<DeviceTensor>,
    pub v: Vec<DeviceTensor>,
}

impl RankData {
    /// Upload the pieces of `rank` from host tensors in global token order.
    pub fn upload(gpu: &Gpu, plan: &DistPlan, rank: usize, q: &[u16], k: &[u16], v: &[u16]) -> DistResult<Self> {
        Ok(RankData {
            q: upload_pieces(gpu, plan, rank, q)?,
            k: upload_pieces(gpu, plan, rank, k)?,
            v: upload_pieces(gpu, plan, rank, v)?,
        })
    }
}

/// Upload one `[batch, seq, heads, head_dim]` host tensor's pieces of `rank`.
pub fn upload_pieces(gpu: &Gpu, plan: &DistPlan, rank: usize, x: &[u16]) -> DistResult<Vec<DeviceTensor>> {
    let want = plan.batch * plan.seq_len() * plan.heads * plan.head_dim;
    if x.len() != want {
        return Err(DistError::ShapeMismatch { what: "host tensor", expected: vec![want], got: vec![x.len()] });
    }
    plan.scatter(x, plan.head_dim, rank)
        .iter()
        .enumerate()
        .map(|(i, p)| Ok(gpu.upload(p, plan.piece_dims(rank, i))?))
        .collect()
}

/// dQ of this rank's query pieces and dK, dV of its key pieces (f32).
pub struct RankGrads {
    pub dq: Vec<CudaSlice<f32>>,
    pub dk: Vec<CudaSlice<f32>>,
    pub dv: Vec<CudaSlice<f32>>,
}

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
}

type Block = (Vec<DeviceTensor>, Vec<DeviceTensor>);
/// A received block: `Some((k, v))` for the pieces that came.
type Received = Vec<Option<(DeviceTensor, DeviceTensor)>>;

/// A piece of K and V as it arrives from the pattern-aware plan: whole, or only its kept
/// head rows, packed. Packed pieces are scattered into a zeroed piece right before the
/// step that computes on them ([`DistRank::unpack`]), not on arrival: a scatter enqueued
/// early would hold the compute stream until the transfer lands.
struct Arrival {
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    dims: [usize; 4],
    packed: bool,
}
/// f32 dK and dV buffers of some pieces.
type GradPieces = (Vec<CudaSlice<f32>>, Vec<CudaSlice<f32>>);

impl<'a> DistRank<'a> {
    /// Prepare this rank's launches (tile plans for every needed pair) and helpers.
    pub fn new(gpu: &'a Gpu, comm: &'a Communicator, plan: &'a DistPlan, dtype: Dtype) -> DistResult<Self> {
        if plan.ranks() != comm.world() {
            return Err(DistError::WorldMismatch { plan: plan.ranks(), world: comm.world() });
        }
        let me = comm.rank();
        let compute = RankCompute::new(gpu, plan, dtype, me)?;
        let mut kept = HashMap::new();
        for (dst, src) in (0..plan.ranks()).flat_map(|o| [(me, o), (o, me)]) {
            for kj in 0..plan.pieces(src).len() {
                if let Some(idx) = plan.kept_rows(dst, src, kj) {
                    kept.insert((dst, src, kj), gpu.stream().clone_htod(idx)?);
                }
            }
        }
        Ok(DistRank { gpu, comm, plan, compute, helpers: Helpers::load(gpu)?, kept })
    }

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Fresh receive buffers of `len` elements for K and V.
    fn recv_pair(&self, len: usize) -> DistResult<(CudaSlice<u16>, CudaSlice<u16>)> {
        let st = self.comm.stream();
        // SAFETY: fully written by the receive before any kernel reads it.
        Ok(unsafe { (st.alloc::<u16>(len.max(1))?, st.alloc::<u16>(len.max(1))?) })
    }

    /// Send K/V buffers `(to, k, v)`; receive into `(from, k, v)`, in one NCCL group.
    fn swap_kv(
        &self,
        send: &[(usize, &CudaSlice<u16>, &CudaSlice<u16>)],
        recv: &mut [(usize, &mut CudaSlice<u16>, &mut CudaSlice<u16>)],
    ) -> DistResult<()> {
        let sends: Vec<_> = send.iter().flat_map(|&(to, k, v)| [(to, k), (to, v)]).collect();
        let mut recvs: Vec<_> =
            recv.iter_mut().flat_map(|(from, k, v)| [(*from, &mut **k), (*from, &mut **v)]).collect();
        self.comm.exchange(&sends, &mut recvs)
    }

    /// One hop of the ring: send the block `(ck, cv)` this rank holds to `next` and
    /// receive all pieces of `src`'s block from `prev`, in one NCCL group.
    fn ring_hop(
        &self,
        src: usize,
        ck: &[DeviceTensor],
        cv: &[DeviceTensor],
        next: usize,
        prev: usize,
    ) -> DistResult<Block> {
        let dims: Vec<[usize; 4]> = (0..self.plan.pieces(src).len()).map(|kj| self.plan.piece_dims(src, kj)).collect();
        let mut bufs = dims.iter().map(|d| self.recv_pair(d.iter().product())).collect::<DistResult<Vec<_>>>()?;
        let send: Vec<_> = ck.iter().zip(cv).map(|(k, v)| (next, &k.data, &v.data)).collect();
        let mut recv: Vec<_> = bufs.iter_mut().map(|(k, v)| (prev, k, v)).collect();
        self.swap_kv(&send, &mut recv)?;
        Ok(bufs
            .into_iter()
            .zip(dims)
            .map(|((k, v), dims)| (DeviceTensor { data: k, dims }, DeviceTensor { data: v, dims }))
            .unzip())
    }

    /// The forward pass: the finished output of each query piece of this rank.
    pub fn forward(&mut self, schedule: Kind, data: &RankData) -> DistResult<Vec<DevicePartial>> {
        self.forward_probe(schedule, data, Probe::Full)
    }

    /// [`DistRank::forward`], or only its kernels or only its transfers (benchmarks).
    pub fn forward_probe(&mut self, schedule: Kind, data: &RankData, probe: Probe) -> DistResult<Vec<DevicePartial>> {
        supported(schedule)?;
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
                        let dims = plan.piece_dims(src, kj);
                        let n = dims.iter().product::<usize>();
                        Ok((
                            DeviceTensor { data: gpu.stream().alloc_zeros::<u16>(n)?, dims },
                            DeviceTensor { data: gpu.stream().alloc_zeros::<u16>(n)?, dims },
                        ))
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
            Kind::Ulysses => unreachable!("`supported` rejects it"),
        }
        finish(gpu, &self.helpers, plan, me, acc)
    }

    /// Step `s` of the pattern-aware plan: send my pieces that `me + s` needs, receive
    /// the pieces of `me - s` that I need; a piece whose kept head rows are fewer than all
    /// travels packed (gathered here on the compute stream, before this step's kernels).
    /// Returns what arrives (`None` for pieces not needed; empty when `s >= P`).
    fn pattern_fetch(&self, s: usize, data: &RankData) -> DistResult<Vec<Option<Arrival>>> {
        let (plan, me, p, d) = (self.plan, self.rank(), self.plan.ranks(), self.plan.head_dim);
        if s >= p {
            return Ok(Vec::new());
        }
        let (dst, src) = ((me + s) % p, (me + p - s) % p);
        let outgoing = plan.needed_pieces(dst, me);
        let (g, h) = (self.gpu, &self.helpers);
        let packed = outgoing
            .iter()
            .map(|&kj| {
                let pack = |idx| Ok((h.gather(g, &data.k[kj].data, idx, d)?, h.gather(g, &data.v[kj].data, idx, d)?));
                self.kept.get(&(dst, me, kj)).map(pack).transpose()
            })
            .collect::<DistResult<Vec<_>>>()?;
        let send: Vec<_> = outgoing
            .iter()
            .zip(&packed)
            .map(|(&kj, p)| match p {
                Some((k, v)) => (dst, k, v),
                None => (dst, &data.k[kj].data, &data.v[kj].data),
            })
            .collect();
        let mut arrivals: Vec<Option<Arrival>> = (0..plan.pieces(src).len()).map(|_| None).collect();
        for kj in plan.needed_pieces(me, src) {
            let (k, v) = self.recv_pair(plan.sent_len(me, src, kj))?;
            let packed = plan.kept_rows(me, src, kj).is_some();
            arrivals[kj] = Some(Arrival { k, v, dims: plan.piece_dims(src, kj), packed });
        }
        let mut recv: Vec<_> = arrivals.iter_mut().flatten().map(|a| (src, &mut a.k, &mut a.v)).collect();
        if !send.is_empty() || !recv.is_empty() {
            self.swap_kv(&send, &mut recv)?;
        }
        drop(recv);
        Ok(arrivals)
    }

    /// The pieces of `src` ready for the kernels: packed ones scattered into zeroed pieces
    /// (on the compute stream, after their receive).
    fn unpack(&self, src: usize, arrivals: Vec<Option<Arrival>>) -> DistResult<Received> {
        let (me, d) = (self.rank(), self.plan.head_dim);
        arrivals
            .into_iter()
            .enumerate()
            .map(|(kj, a)| {
                let Some(a) = a else { return Ok(None) };
                let (k, v) = match (a.packed, self.kept.get(&(me, src, kj))) {
                    (true, Some(idx)) => {
                        let len = a.dims.iter().product();
                        let h = &self.helpers;
                        (h.scatter_u16(self.gpu, &a.k, idx, d, len)?, h.scatter_u16(self.gpu, &a.v, idx, d, len)?)
                    }
                    _ => (a.k, a.v),
                };
                Ok(Some((DeviceTensor { data: k, dims: a.dims }, DeviceTensor { data: v, dims: a.dims })))
            })
            .collect()
    }

    /// All-gather: every other rank's whole block (`None` at my own index).
    fn gather_all(&self, data: &RankData) -> DistResult<Vec<Option<Received>>> {
        let (me, p, plan) = (self.rank(), self.plan.ranks(), self.plan);
        let mut bufs: Vec<Vec<(CudaSlice<u16>, CudaSlice<u16>)>> = Vec::with_capacity(p);
        for o in 0..p {
            let n = if o == me { 0 } else { plan.pieces(o).len() };
            bufs.push((0..n).map(|kj| self.recv_pair(plan.piece_lens(o)[kj])).collect::<DistResult<_>>()?);
        }
        let send: Vec<_> = (0..p)
            .filter(|&o| o != me)
            .flat_map(|o| data.k.iter().zip(&data.v).map(move |(k, v)| (o, &k.data, &v.data)))
            .collect();
        let mut recv: Vec<_> =
            bufs.iter_mut().enumerate().flat_map(|(o, b)| b.iter_mut().map(move |(k, v)| (o, k, v))).collect();
        self.swap_kv(&send, &mut recv)?;
        drop(recv);
        Ok(bufs
            .into_iter()
            .enumerate()
            .map(|(o, b)| {
                (o != me).then(|| {
                    b.into_iter()
                        .enumerate()
                        .map(|(kj, (k, v))| {
                            let dims = plan.piece_dims(o, kj);
                            Some((DeviceTensor { data: k, dims }, DeviceTensor { data: v, dims }))
                        })
                        .collect()
                })
            })
            .collect())
    }

    /// The backward pass for `out` (this rank's finished forward, from
    /// [`DistRank::forward`] with the same schedule) and upstream gradient pieces `dout`.
    pub fn backward(
        &mut self,
        schedule: Kind,
        data: &RankData,
        out: &[DevicePartial],
        dout: &[DeviceTensor],
    ) -> DistResult<RankGrads> {
        supported(schedule)?;
        let (gpu, plan, me, p) = (self.gpu, self.plan, self.rank(), self.plan.ranks());
        if out.len() != data.q.len() || dout.len() != data.q.len() {
            return Err(DistError::ShapeMismatch {
                what: "backward pieces (out, d_out)",
                expected: vec![data.q.len()],
                got: vec![out.len(), dout.len()],
            });
        }
        let qlens = plan.piece_lens(me);
        let mut dq = zeros(gpu, &qlens)?;
        match schedule {
            Kind::Ring => {
                let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
                let mut cur: Option<Block> = None;
                let mut dk = zeros(gpu, &qlens)?;
                let mut dv = zeros(gpu, &qlens)?;
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
                        &mut dq,
                        &mut all_of_mut(&mut dk, &mut dv),
                    )?;
                    if p > 1 {
                        // Pass the accumulators on; after the last step they go home (to r + 1).
                        let target = if s + 1 < p { nsrc } else { me };
                        let lens = plan.piece_lens(target);
                        let st = self.comm.stream();
                        // SAFETY: fully written by the receive.
                        let mut rdk: Vec<CudaSlice<f32>> =
                            lens.iter().map(|&n| unsafe { st.alloc::<f32>(n) }).collect::<Result<_, _>>()?;
                        let mut rdv: Vec<CudaSlice<f32>> =
                            lens.iter().map(|&n| unsafe { st.alloc::<f32>(n) }).collect::<Result<_, _>>()?;
                        let sends: Vec<_> = dk.iter().chain(&dv).map(|b| (next, b)).collect();
                        let mut recvs: Vec<_> = rdk.iter_mut().chain(rdv.iter_mut()).map(|b| (prev, b)).collect();
                        self.comm.exchange(&sends, &mut recvs)?;
                        dk = rdk;
                        dv = rdv;
                    }
                    cur = incoming;
                }
                Ok(RankGrads { dq, dk, dv })
            }
            Kind::PatternRing | Kind::AllGather => {
                let mut dk = zeros(gpu, &qlens)?;
                let mut dv = zeros(gpu, &qlens)?;
                // Own block first (no transfer).
                self.compute.backward(
                    gpu,
                    plan,
                    me,
                    &data.q,
                    &all_of(&data.k, &data.v),
                    out,
                    dout,
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
                    let lens = plan.piece_lens(src);
                    let mut sdk = zeros(gpu, &which.iter().map(|&kj| lens[kj]).collect::<Vec<_>>())?;
                    let mut sdv = zeros(gpu, &which.iter().map(|&kj| lens[kj]).collect::<Vec<_>>())?;
                    {
                        let mut dkv: Vec<Option<(&mut CudaSlice<f32>, &mut CudaSlice<f32>)>> =
                            (0..lens.len()).map(|_| None).collect();
                        for ((kj, a), b) in which.iter().zip(sdk.iter_mut()).zip(sdv.iter_mut()) {
                            dkv[*kj] = Some((a, b));
                        }
                        self.compute.backward(gpu, plan, src, &data.q, &kv, out, dout, &mut dq, &mut dkv)?;
                    }
                    if let Some((from, mine, (a, b))) = pending.take() {
                        self.add_pieces(&mut dk, &mut dv, Some(from), &mine, a, b)?;
                    }
                    if gathered.is_none() {
                        // Return the contributions to src (packed like the K/V that came);
                        // receive mine from me + s.
                        let dst = (me + s) % p;
                        let mine = plan.needed_pieces(dst, me);
                        let lens: Vec<usize> = mine.iter().map(|&kj| plan.sent_len(dst, me, kj)).collect();
                        let (mut rdk, mut rdv) = (self.recv_f32(&lens)?, self.recv_f32(&lens)?);
                        let (rk, rv) =
                            (self.packed_returns(src, &which, &sdk)?, self.packed_returns(src, &which, &sdv)?);
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
                        recv_from.push((o, (self.recv_f32(&qlens)?, self.recv_f32(&qlens)?)));
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
                    let all: Vec<usize> = (0..qlens.len()).collect();
                    for (_, (a, b)) in recv_from {
                        self.add_pieces(&mut dk, &mut dv, None, &all, a, b)?;
                    }
                }
                Ok(RankGrads { dq, dk, dv })
            }
            Kind::Ulysses => unreachable!("`supported` rejects it"),
        }
    }

    fn recv_f32(&self, lens: &[usize]) -> DistResult<Vec<CudaSlice<f32>>> {
        // SAFETY: fully written by the receive.
        lens.iter().map(|&n| Ok(unsafe { self.comm.stream().alloc::<f32>(n) }?)).collect()
    }

    /// The packed form of the contributions `grads[i]` to piece `which[i]` of `src` that
    /// this rank returns (`None`: the piece came whole and goes back whole).
    fn packed_returns(
        &self,
        src: usize,
        which: &[usize],
        grads: &[CudaSlice<f32>],
    ) -> DistResult<Vec<Option<CudaSlice<f32>>>> {
        let (me, d) = (self.rank(), self.plan.head_dim);
        which
            .iter()
            .zip(grads)
            .map(|(&kj, g)| {
                self.kept.get(&(me, src, kj)).map(|idx| self.helpers.gather(self.gpu, g, idx, d)).transpose()
            })
            .collect()
    }

    /// `dk[kj] += a[i]`, `dv[kj] += b[i]` for `kj = which[i]` (waits for the receive);
    /// contributions from `from` that travelled packed are scattered into their rows.
    fn add_pieces(
        &self,
        dk: &mut [CudaSlice<f32>],
        dv: &mut [CudaSlice<f32>],
        from: Option<usize>,
        which: &[usize],
        a: Vec<CudaSlice<f32>>,
        b: Vec<CudaSlice<f32>>,
    ) -> DistResult<()> {
        let (me, d) = (self.rank(), self.plan.head_dim);
        for ((&kj, x), y) in which.iter().zip(&a).zip(&b) {
            match from.and_then(|f| self.kept.get(&(f, me, kj))) {
                Some(idx) => {
                    self.helpers.scatter_add(self.gpu, &mut dk[kj], x, idx, d)?;
                    self.helpers.scatter_add(self.gpu, &mut dv[kj], y, idx, d)?;
                }
                None => {
                    self.helpers.add(self.gpu, &mut dk[kj], x)?;
                    self.helpers.add(self.gpu, &mut dv[kj], y)?;
                }
            }
        }
        Ok(())
    }
}

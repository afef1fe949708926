//! How a rank's blocks move: the NCCL groups of each schedule (a ring hop, the
//! pattern-aware fetch of step `s`, the all-gather, gradients going back) on the
//! communication stream, and the packing of kept head rows (gathered before a send,
//! scattered after a receive, on the compute stream).

use super::DistRank;
use super::data::RankData;
use crate::dist::error::DistResult;
use crate::tensors::DeviceTensor;
use cudarc::driver::CudaSlice;

/// A block travelling the ring: its K pieces and its V pieces.
pub(super) type Block = (Vec<DeviceTensor>, Vec<DeviceTensor>);
/// A received block: `Some((k, v))` for the pieces that came.
pub(super) type Received = Vec<Option<(DeviceTensor, DeviceTensor)>>;

/// A piece of K and V as it arrives from the pattern-aware plan: whole, or only its kept
/// head rows, packed. Packed pieces are scattered into a zeroed piece right before the
/// step that computes on them ([`DistRank::unpack`]), not on arrival: a scatter enqueued
/// early would hold the compute stream until the transfer lands.
pub(super) struct Arrival {
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    k_dims: [usize; 4],
    v_dims: [usize; 4],
    packed: bool,
}
/// f32 dK and dV buffers of some pieces.
pub(super) type GradPieces = (Vec<CudaSlice<f32>>, Vec<CudaSlice<f32>>);

impl DistRank<'_> {
    /// Fresh receive buffers of `k_len` elements for K and `v_len` for V.
    pub(super) fn recv_pair(&self, k_len: usize, v_len: usize) -> DistResult<(CudaSlice<u16>, CudaSlice<u16>)> {
        let st = self.comm.stream();
        // SAFETY: fully written by the receive before any kernel reads it.
        Ok(unsafe { (st.alloc::<u16>(k_len.max(1))?, st.alloc::<u16>(v_len.max(1))?) })
    }

    /// Send K/V buffers `(to, k, v)`; receive into `(from, k, v)`, in one NCCL group.
    pub(super) fn swap_kv(
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
    pub(super) fn ring_hop(
        &self,
        src: usize,
        ck: &[DeviceTensor],
        cv: &[DeviceTensor],
        next: usize,
        prev: usize,
    ) -> DistResult<Block> {
        let dims: Vec<([usize; 4], [usize; 4])> = (0..self.plan.pieces(src).len())
            .map(|kj| (self.plan.kv_piece_dims(src, kj), self.plan.v_piece_dims(src, kj)))
            .collect();
        let mut bufs = dims
            .iter()
            .map(|(k, v)| self.recv_pair(k.iter().product(), v.iter().product()))
            .collect::<DistResult<Vec<_>>>()?;
        let send: Vec<_> = ck.iter().zip(cv).map(|(k, v)| (next, &k.data, &v.data)).collect();
        let mut recv: Vec<_> = bufs.iter_mut().map(|(k, v)| (prev, k, v)).collect();
        self.swap_kv(&send, &mut recv)?;
        Ok(bufs
            .into_iter()
            .zip(dims)
            .map(|((k, v), (kd, vd))| (DeviceTensor { data: k, dims: kd }, DeviceTensor { data: v, dims: vd }))
            .unzip())
    }

    /// Step `s` of the pattern-aware plan: send my pieces that `me + s` needs, receive
    /// the pieces of `me - s` that I need; a piece whose kept head rows are fewer than all
    /// travels packed (gathered here on the compute stream, before this step's kernels).
    /// Returns what arrives (`None` for pieces not needed; empty when `s >= P`).
    pub(super) fn pattern_fetch(&self, s: usize, data: &RankData) -> DistResult<Vec<Option<Arrival>>> {
        let (plan, me, p) = (self.plan, self.rank(), self.plan.ranks());
        let (d, dv) = (plan.head_dim, plan.value_dim);
        if s >= p {
            return Ok(Vec::new());
        }
        let (dst, src) = ((me + s) % p, (me + p - s) % p);
        let outgoing = plan.needed_pieces(dst, me);
        let (g, h) = (self.gpu, &self.helpers);
        let packed = outgoing
            .iter()
            .map(|&kj| {
                let pack = |idx| Ok((h.gather(g, &data.k[kj].data, idx, d)?, h.gather(g, &data.v[kj].data, idx, dv)?));
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
            let (k, v) = self.recv_pair(plan.sent_len(me, src, kj), plan.sent_v_len(me, src, kj))?;
            let packed = plan.kept_rows(me, src, kj).is_some();
            let (k_dims, v_dims) = (plan.kv_piece_dims(src, kj), plan.v_piece_dims(src, kj));
            arrivals[kj] = Some(Arrival { k, v, k_dims, v_dims, packed });
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
    pub(super) fn unpack(&self, src: usize, arrivals: Vec<Option<Arrival>>) -> DistResult<Received> {
        let (me, d, dv) = (self.rank(), self.plan.head_dim, self.plan.value_dim);
        arrivals
            .into_iter()
            .enumerate()
            .map(|(kj, a)| {
                let Some(a) = a else { return Ok(None) };
                let (k, v) = match (a.packed, self.kept.get(&(me, src, kj))) {
                    (true, Some(idx)) => {
                        let (kl, vl) = (a.k_dims.iter().product(), a.v_dims.iter().product());
                        let h = &self.helpers;
                        (h.scatter_u16(self.gpu, &a.k, idx, d, kl)?, h.scatter_u16(self.gpu, &a.v, idx, dv, vl)?)
                    }
                    _ => (a.k, a.v),
                };
                Ok(Some((DeviceTensor { data: k, dims: a.k_dims }, DeviceTensor { data: v, dims: a.v_dims })))
            })
            .collect()
    }

    /// All-gather: every other rank's whole block (`None` at my own index).
    pub(super) fn gather_all(&self, data: &RankData) -> DistResult<Vec<Option<Received>>> {
        let (me, p, plan) = (self.rank(), self.plan.ranks(), self.plan);
        let mut bufs: Vec<Vec<(CudaSlice<u16>, CudaSlice<u16>)>> = Vec::with_capacity(p);
        for o in 0..p {
            let n = if o == me { 0 } else { plan.pieces(o).len() };
            let (kl, vl) = (plan.kv_piece_lens(o), plan.v_piece_lens(o));
            bufs.push((0..n).map(|kj| self.recv_pair(kl[kj], vl[kj])).collect::<DistResult<_>>()?);
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
                            let (kd, vd) = (plan.kv_piece_dims(o, kj), plan.v_piece_dims(o, kj));
                            Some((DeviceTensor { data: k, dims: kd }, DeviceTensor { data: v, dims: vd }))
                        })
                        .collect()
                })
            })
            .collect())
    }

    pub(super) fn recv_f32(&self, lens: &[usize]) -> DistResult<Vec<CudaSlice<f32>>> {
        // SAFETY: fully written by the receive.
        lens.iter().map(|&n| Ok(unsafe { self.comm.stream().alloc::<f32>(n) }?)).collect()
    }

    /// The packed form of the contributions `grads[i]` (`width` per head row: dK's
    /// `head_dim`, dV's `value_dim`) to piece `which[i]` of `src` that this rank returns
    /// (`None`: the piece came whole and goes back whole).
    pub(super) fn packed_returns(
        &self,
        src: usize,
        which: &[usize],
        grads: &[CudaSlice<f32>],
        width: usize,
    ) -> DistResult<Vec<Option<CudaSlice<f32>>>> {
        let me = self.rank();
        which
            .iter()
            .zip(grads)
            .map(|(&kj, g)| {
                self.kept.get(&(me, src, kj)).map(|idx| self.helpers.gather(self.gpu, g, idx, width)).transpose()
            })
            .collect()
    }

    /// `dk[kj] += a[i]`, `dv[kj] += b[i]` for `kj = which[i]` (waits for the receive);
    /// contributions from `from` that travelled packed are scattered into their rows.
    pub(super) fn add_pieces(
        &self,
        dk: &mut [CudaSlice<f32>],
        dv: &mut [CudaSlice<f32>],
        from: Option<usize>,
        which: &[usize],
        a: Vec<CudaSlice<f32>>,
        b: Vec<CudaSlice<f32>>,
    ) -> DistResult<()> {
        let (me, d, dvw) = (self.rank(), self.plan.head_dim, self.plan.value_dim);
        for ((&kj, x), y) in which.iter().zip(&a).zip(&b) {
            match from.and_then(|f| self.kept.get(&(f, me, kj))) {
                Some(idx) => {
                    self.helpers.scatter_add(self.gpu, &mut dk[kj], x, idx, d)?;
                    self.helpers.scatter_add(self.gpu, &mut dv[kj], y, idx, dvw)?;
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

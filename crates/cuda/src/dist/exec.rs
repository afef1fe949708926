//! One rank's compute for one step: its query pieces over the key/value pieces of one
//! source block, forward (merged partials) and backward (accumulated gradients). Shared
//! by the NCCL ring, the pattern-aware plan, the all-gather baseline and virtual ranks,
//! so every schedule runs the same launches in the same merge order:
//! rank `r` visits sources `r, r-1, ..., r-P+1 (mod P)`.
//!
//! The helper kernels live here (compiled by NVRTC like the attention kernels): `f32`
//! addition (`dst += src`, for dQ/dK/dV accumulation across steps), a fill (the LSE
//! `-inf` of query rows that saw no key at all), and the gather / scatter of the head rows
//! a piece's receiver needs ([`DistPlan::kept_rows`]): K/V out (gather) and in (scatter
//! into a zeroed piece), dK/dV back (gather) and home (scatter-add).

use super::error::DistResult;
use super::layout::DistPlan;
use super::ring::RankGrads;
use crate::backward::RowInputs;
use crate::gpu::Gpu;
use crate::shape::Dtype;
use crate::tensors::{DevicePartial, DeviceTensor, GradsMut, Prepared};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::OnceLock;

const SOURCE: &str = r#"
extern "C" __global__ void ringdil_add_f32(float* __restrict__ dst, const float* __restrict__ src, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        dst[i] += src[i];
    }
}
extern "C" __global__ void ringdil_scale_f32(float* __restrict__ dst, float s, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        dst[i] *= s;
    }
}
extern "C" __global__ void ringdil_fill_f32(float* __restrict__ dst, float value, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        dst[i] = value;
    }
}
// Entry e of a packed buffer is d-vector idx[e] of a piece tensor. `n` = entries * d.
#define RINGDIL_ROWS(NAME, T, BODY)                                                                 \
    extern "C" __global__ void NAME(T* __restrict__ packed, T* __restrict__ piece,                 \
                                    const unsigned int* __restrict__ idx, unsigned int d,           \
                                    unsigned long long n) {                                         \
        for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; \
             i += (unsigned long long)gridDim.x * blockDim.x) {                                     \
            const unsigned long long at = (unsigned long long)idx[i / d] * d + i % d;               \
            BODY;                                                                                   \
        }                                                                                           \
    }
RINGDIL_ROWS(ringdil_gather_u16, unsigned short, packed[i] = piece[at])
RINGDIL_ROWS(ringdil_scatter_u16, unsigned short, piece[at] = packed[i])
RINGDIL_ROWS(ringdil_gather_f32, float, packed[i] = piece[at])
RINGDIL_ROWS(ringdil_scatter_f32, float, piece[at] = packed[i])
RINGDIL_ROWS(ringdil_scatter_add_f32, float, piece[at] += packed[i])
"#;

static PTX: OnceLock<Ptx> = OnceLock::new();

/// The helper kernels, loaded into one GPU's context.
pub(crate) struct Helpers {
    add: CudaFunction,
    scale: CudaFunction,
    fill: CudaFunction,
    gather_u16: CudaFunction,
    scatter_u16: CudaFunction,
    gather_f32: CudaFunction,
    scatter_f32: CudaFunction,
    scatter_add_f32: CudaFunction,
}

fn grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 65_535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl Helpers {
    pub(crate) fn load(gpu: &Gpu) -> DistResult<Self> {
        let ptx = match PTX.get() {
            Some(p) => p.clone(),
            None => {
                let p = cudarc::nvrtc::compile_ptx(SOURCE).map_err(|e| crate::CudaError::Compile {
                    module: "ringdil_dist_helpers".into(),
                    log: format!("{e:?}"),
                })?;
                PTX.get_or_init(|| p).clone()
            }
        };
        let module = gpu.context().load_module(ptx)?;
        Ok(Helpers {
            add: module.load_function("ringdil_add_f32")?,
            scale: module.load_function("ringdil_scale_f32")?,
            fill: module.load_function("ringdil_fill_f32")?,
            gather_u16: module.load_function("ringdil_gather_u16")?,
            scatter_u16: module.load_function("ringdil_scatter_u16")?,
            gather_f32: module.load_function("ringdil_gather_f32")?,
            scatter_f32: module.load_function("ringdil_scatter_f32")?,
            scatter_add_f32: module.load_function("ringdil_scatter_add_f32")?,
        })
    }

    /// `dst += src` on the compute stream.
    pub(crate) fn add(&self, gpu: &Gpu, dst: &mut CudaSlice<f32>, src: &CudaSlice<f32>) -> DistResult<()> {
        let n = dst.len().min(src.len()) as u64;
        let mut l = gpu.stream().launch_builder(&self.add);
        l.arg(dst).arg(src).arg(&n);
        // SAFETY: n is within both buffers.
        unsafe { l.launch(grid(n as usize)) }?;
        Ok(())
    }

    /// `dst *= s` on the compute stream (nothing for `s = 1`).
    pub(crate) fn scale(&self, gpu: &Gpu, dst: &mut CudaSlice<f32>, s: f32) -> DistResult<()> {
        if s == 1.0 {
            return Ok(());
        }
        let n = dst.len() as u64;
        let mut l = gpu.stream().launch_builder(&self.scale);
        l.arg(dst).arg(&s).arg(&n);
        // SAFETY: n is the buffer's own length.
        unsafe { l.launch(grid(n as usize)) }?;
        Ok(())
    }

    /// The head rows `idx` of a piece (`d` elements each), packed, on the compute stream.
    pub(crate) fn gather<T: Packable>(
        &self,
        gpu: &Gpu,
        piece: &CudaSlice<T>,
        idx: &CudaSlice<u32>,
        d: usize,
    ) -> DistResult<CudaSlice<T>> {
        // SAFETY: every element is written by the gather.
        let mut packed = unsafe { gpu.stream().alloc::<T>((idx.len() * d).max(1)) }?;
        let (n, d32) = ((idx.len() * d) as u64, d as u32);
        let mut l = gpu.stream().launch_builder(T::gather(self));
        l.arg(&mut packed).arg(piece).arg(idx).arg(&d32).arg(&n);
        // SAFETY: idx holds d-vector indices inside the piece (DistPlan::kept_rows).
        unsafe { l.launch(grid(n as usize)) }?;
        Ok(packed)
    }

    /// A zeroed piece of `len` elements holding the packed head rows `idx`.
    pub(crate) fn scatter_u16(
        &self,
        gpu: &Gpu,
        packed: &CudaSlice<u16>,
        idx: &CudaSlice<u32>,
        d: usize,
        len: usize,
    ) -> DistResult<CudaSlice<u16>> {
        let mut piece = gpu.stream().alloc_zeros::<u16>(len.max(1))?;
        self.scatter(gpu, &self.scatter_u16, packed, &mut piece, idx, d)?;
        Ok(piece)
    }

    /// `dst[row idx[e]] = packed[e]`: rows into a tensor that other scatters complete
    /// (head-parallel attention assembles run and piece tensors this way).
    pub(crate) fn scatter_to<T: Packable>(
        &self,
        gpu: &Gpu,
        packed: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
        idx: &CudaSlice<u32>,
        d: usize,
    ) -> DistResult<()> {
        self.scatter(gpu, T::scatter(self), packed, dst, idx, d)
    }

    /// `piece[row idx[e]] += packed[e]` (dK/dV contributions coming home).
    pub(crate) fn scatter_add(
        &self,
        gpu: &Gpu,
        piece: &mut CudaSlice<f32>,
        packed: &CudaSlice<f32>,
        idx: &CudaSlice<u32>,
        d: usize,
    ) -> DistResult<()> {
        self.scatter(gpu, &self.scatter_add_f32, packed, piece, idx, d)
    }

    /// Rows coming home from an exchange: written ([`Helpers::scatter_to`]) or, with
    /// `add`, added ([`Helpers::scatter_add`]: contributions of a shared K/V head).
    pub(crate) fn place(
        &self,
        gpu: &Gpu,
        target: &mut CudaSlice<f32>,
        packed: &CudaSlice<f32>,
        idx: &CudaSlice<u32>,
        d: usize,
        add: bool,
    ) -> DistResult<()> {
        if add { self.scatter_add(gpu, target, packed, idx, d) } else { self.scatter_to(gpu, packed, target, idx, d) }
    }

    fn scatter<T: cudarc::driver::DeviceRepr>(
        &self,
        gpu: &Gpu,
        f: &CudaFunction,
        packed: &CudaSlice<T>,
        piece: &mut CudaSlice<T>,
        idx: &CudaSlice<u32>,
        d: usize,
    ) -> DistResult<()> {
        let (n, d32) = ((idx.len() * d) as u64, d as u32);
        let mut l = gpu.stream().launch_builder(f);
        l.arg(packed).arg(piece).arg(idx).arg(&d32).arg(&n);
        // SAFETY: idx holds d-vector indices inside the piece (DistPlan::kept_rows) and
        // packed holds idx.len() * d elements.
        unsafe { l.launch(grid(n as usize)) }?;
        Ok(())
    }

    pub(crate) fn fill(&self, gpu: &Gpu, dst: &mut CudaSlice<f32>, value: f32) -> DistResult<()> {
        let n = dst.len() as u64;
        let mut l = gpu.stream().launch_builder(&self.fill);
        l.arg(dst).arg(&value).arg(&n);
        // SAFETY: n is the buffer's own length.
        unsafe { l.launch(grid(n as usize)) }?;
        Ok(())
    }
}

/// The element types whose head rows are gathered and scattered (bf16/f16 bits for
/// Q/K/V, f32 for outputs, LSE and gradients).
pub(crate) trait Packable: cudarc::driver::DeviceRepr {
    fn gather(h: &Helpers) -> &CudaFunction;
    fn scatter(h: &Helpers) -> &CudaFunction;
}

impl Packable for u16 {
    fn gather(h: &Helpers) -> &CudaFunction {
        &h.gather_u16
    }
    fn scatter(h: &Helpers) -> &CudaFunction {
        &h.scatter_u16
    }
}

impl Packable for f32 {
    fn gather(h: &Helpers) -> &CudaFunction {
        &h.gather_f32
    }
    fn scatter(h: &Helpers) -> &CudaFunction {
        &h.scatter_f32
    }
}

/// Zeroed f32 buffers, one per length, on the compute stream.
pub(crate) fn zeros(gpu: &Gpu, lens: &[usize]) -> DistResult<Vec<CudaSlice<f32>>> {
    lens.iter().map(|&n| Ok(gpu.stream().alloc_zeros::<f32>(n.max(1))?)).collect()
}

/// Zeroed `[out, lse]` pieces of `rank`: what a head-parallel exchange writes a forward's
/// rows into (every row is written once; [`partials`] reads them back).
pub(crate) fn output_targets(gpu: &Gpu, plan: &DistPlan, rank: usize) -> DistResult<Vec<Vec<CudaSlice<f32>>>> {
    let lse: Vec<usize> = plan.pieces(rank).iter().map(|x| plan.batch * plan.heads * x.rows).collect();
    Ok(vec![zeros(gpu, &plan.out_piece_lens(rank))?, zeros(gpu, &lse)?])
}

/// Zeroed `[dq, dk, dv]` pieces of `rank`, which an exchange adds gradients into.
pub(crate) fn grad_targets(gpu: &Gpu, plan: &DistPlan, rank: usize) -> DistResult<Vec<Vec<CudaSlice<f32>>>> {
    let (q, k, v) = (plan.piece_lens(rank), plan.kv_piece_lens(rank), plan.v_piece_lens(rank));
    Ok(vec![zeros(gpu, &q)?, zeros(gpu, &k)?, zeros(gpu, &v)?])
}

/// The finished outputs of `rank` from its filled [`output_targets`].
pub(crate) fn partials(plan: &DistPlan, rank: usize, targets: Vec<Vec<CudaSlice<f32>>>) -> Vec<DevicePartial> {
    let [outs, lses]: [Vec<CudaSlice<f32>>; 2] = targets.try_into().expect("out and lse targets");
    outs.into_iter()
        .zip(lses)
        .enumerate()
        .map(|(pi, (out, lse))| DevicePartial { out, lse, dims: plan.out_piece_dims(rank, pi) })
        .collect()
}

/// The gradients from filled [`grad_targets`].
pub(crate) fn grads_of(targets: Vec<Vec<CudaSlice<f32>>>) -> RankGrads {
    let [dq, dk, dv]: [Vec<CudaSlice<f32>>; 3] = targets.try_into().expect("dq, dk and dv targets");
    RankGrads { dq, dk, dv }
}

/// One rank's launches: a [`Prepared`] call per needed piece pair, built once.
pub(crate) struct RankCompute {
    rank: usize,
    preps: HashMap<(usize, usize, usize), Prepared>,
}

impl RankCompute {
    pub(crate) fn new(gpu: &Gpu, plan: &DistPlan, dtype: Dtype, rank: usize) -> DistResult<Self> {
        let mut preps = HashMap::new();
        for src in 0..plan.ranks() {
            for &(qi, kj) in plan.needed(rank, src) {
                let (shape, chunk) = plan.pair(rank, qi, src, kj);
                let mut prep = gpu.prepare(&shape, dtype, &plan.spec, &chunk)?;
                // Steps merge and sum unscaled results; `finish` and `finish_grads` scale.
                prep.defer_output_scale();
                preps.insert((src, qi, kj), prep);
            }
        }
        Ok(RankCompute { rank, preps })
    }

    /// Attend the query pieces `q` of this rank over the key/value pieces of `src`
    /// (`kv[kj]`; `None` for pieces this rank does not need) and merge each result into
    /// `acc[qi]`, in the kernels' epilogue ([`Gpu::forward_accumulate`]); `None` = nothing
    /// seen yet: the first result is written as is.
    pub(crate) fn attend(
        &mut self,
        gpu: &Gpu,
        plan: &DistPlan,
        src: usize,
        q: &[DeviceTensor],
        kv: &[Option<(&DeviceTensor, &DeviceTensor)>],
        acc: &mut [Option<DevicePartial>],
    ) -> DistResult<()> {
        for &(qi, kj) in plan.needed(self.rank, src) {
            let Some((k, v)) = kv[kj] else { continue };
            let prep = self.preps.get_mut(&(src, qi, kj)).expect("a prepared call per needed pair");
            match &mut acc[qi] {
                Some(running) => gpu.forward_accumulate(prep, &q[qi], k, v, running)?,
                None => {
                    let mut part = alloc_partial(gpu, plan.out_piece_dims(self.rank, qi))?;
                    gpu.forward_into(prep, &q[qi], k, v, &mut part)?;
                    acc[qi] = Some(part);
                }
            }
        }
        Ok(())
    }

    /// The backward of [`RankCompute::attend`]: add the contributions of the pairs with
    /// `src` to `dq[qi]` and to the source block's `dk[kj]`, `dv[kj]`. `fin[qi]` is the
    /// finished forward result of query piece `qi`. `rows` holds one backward's per-row
    /// inputs of each query piece ([`PieceRows`]): the first pair of a piece takes them,
    /// the piece's other pairs, in this step and the later ones, copy them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        &mut self,
        gpu: &Gpu,
        plan: &DistPlan,
        src: usize,
        q: &[DeviceTensor],
        kv: &[Option<(&DeviceTensor, &DeviceTensor)>],
        fin: &[DevicePartial],
        dout: &[DeviceTensor],
        rows: &mut PieceRows,
        dq: &mut [CudaSlice<f32>],
        dkv: &mut [Option<(&mut CudaSlice<f32>, &mut CudaSlice<f32>)>],
    ) -> DistResult<()> {
        for &(qi, kj) in plan.needed(self.rank, src) {
            let (Some((k, v)), Some((dk, dv))) = (kv[kj], dkv[kj].as_mut()) else { continue };
            let prep = self.preps.get_mut(&(src, qi, kj)).expect("a prepared call per needed pair");
            let grads = GradsMut { dq: &mut dq[qi], dk, dv };
            let taken = rows.0[qi].is_some();
            gpu.backward_add_into(prep, &q[qi], k, v, &fin[qi], rows.0[qi].as_ref(), &dout[qi], grads)?;
            if !taken {
                rows.0[qi] = Some(gpu.row_inputs(prep)?);
            }
        }
        Ok(())
    }
}

/// The per-row inputs of one backward pass of a rank, per query piece
/// ([`crate::backward::RowInputs`]: delta and lse2 from the piece's finished output and
/// upstream gradient). A piece meets every rank's keys over the steps, one call per
/// (step, key piece); the pass over its O and dO (`b n h d` values each, for `b h n`
/// results) runs for the first of them only. Made anew for each backward pass, so rows
/// never outlive the output and gradient they were taken from.
pub(crate) struct PieceRows(Vec<Option<RowInputs>>);

impl PieceRows {
    /// Nothing taken yet for `pieces` query pieces.
    pub(crate) fn new(pieces: usize) -> Self {
        PieceRows((0..pieces).map(|_| None).collect())
    }
}

/// An uninitialised partial: every row is written by the forward or merge kernel.
pub(crate) fn alloc_partial(gpu: &Gpu, dims: [usize; 4]) -> DistResult<DevicePartial> {
    let [b, n, h, d] = dims;
    let st = gpu.stream();
    // SAFETY: the kernels write every element before anything reads it.
    let (out, lse) = unsafe { (st.alloc::<f32>((b * n * h * d).max(1))?, st.alloc::<f32>((b * h * n).max(1))?) };
    Ok(DevicePartial { out, lse, dims })
}

/// The finished output of each query piece: the merged steps times the pattern's output
/// scale ([`DistPlan::output_scale`]; the LSE stays the unscaled attention's, as in the
/// reference); query pieces that saw no key at all hold the merge identity (output 0, LSE
/// `-inf`), as in the reference.
pub(crate) fn finish(
    gpu: &Gpu,
    helpers: &Helpers,
    plan: &DistPlan,
    rank: usize,
    acc: Vec<Option<DevicePartial>>,
) -> DistResult<Vec<DevicePartial>> {
    acc.into_iter()
        .enumerate()
        .map(|(qi, a)| match a {
            Some(mut p) => {
                helpers.scale(gpu, &mut p.out, plan.output_scale())?;
                Ok(p)
            }
            None => {
                let dims = plan.out_piece_dims(rank, qi);
                let [b, n, h, d] = dims;
                let st = gpu.stream();
                let mut lse = st.alloc_zeros::<f32>(b * h * n)?;
                helpers.fill(gpu, &mut lse, f32::NEG_INFINITY)?;
                Ok(DevicePartial { out: st.alloc_zeros::<f32>(b * n * h * d)?, lse, dims })
            }
        })
        .collect()
}

/// A rank's complete gradients, summed over every step (and, for dK/dV, brought home):
/// times the output scale, since each step's are `grad / sigma` (`crate::output_scale`,
/// "Deferred scale").
pub(crate) fn finish_grads(gpu: &Gpu, helpers: &Helpers, plan: &DistPlan, grads: &mut RankGrads) -> DistResult<()> {
    let s = plan.output_scale();
    grads.dq.iter_mut().chain(&mut grads.dk).chain(&mut grads.dv).try_for_each(|g| helpers.scale(gpu, g, s))
}

/// `kv[kj]` views of a whole block.
pub(crate) fn all_of<'a>(
    k: &'a [DeviceTensor],
    v: &'a [DeviceTensor],
) -> Vec<Option<(&'a DeviceTensor, &'a DeviceTensor)>> {
    k.iter().zip(v).map(Some).collect()
}

/// `dkv[kj]` views of whole gradient buffers.
pub(crate) fn all_of_mut<'a>(
    dk: &'a mut [CudaSlice<f32>],
    dv: &'a mut [CudaSlice<f32>],
) -> Vec<Option<(&'a mut CudaSlice<f32>, &'a mut CudaSlice<f32>)>> {
    dk.iter_mut().zip(dv.iter_mut()).map(Some).collect()
}

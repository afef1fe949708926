//! The device side: context, NVRTC compilation (cached per process), device tensors and
//! the forward / backward / merge calls.

use crate::error::{CudaError, Result};
use crate::launch::{self, Chunk, Dtype, Family, LaunchSpec, Params, Shape};
use crate::plan::IndexMap;
use crate::spec::GpuSpec;
use crate::tma::{Elem, TensorMap, TensorPair};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// What a compiled module is specialised for: (NVRTC target, element type, head dim).
type PtxKey = (String, Dtype, usize);

/// PTX compiled by NVRTC, per [`PtxKey`], for the process.
static PTX_CACHE: OnceLock<Mutex<HashMap<PtxKey, Ptx>>> = OnceLock::new();

/// The kernels of one (element type, head dim), loaded into a context.
struct Kernels {
    fwd: CudaFunction,
    /// wgmma only: the forward with 128-row tiles ([`LaunchSpec::fwd_q_tile`]).
    fwd_128: Option<CudaFunction>,
    bwd: CudaFunction,
    merge: CudaFunction,
    fill: CudaFunction,
    delta: CudaFunction,
}

/// One GPU with one stream; every call is ordered on that stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// NVRTC's target, e.g. `sm_90a` (see [`Family::target`]).
    arch: String,
    family: Family,
    /// Multiprocessors: the wgmma forward's grid ([`Family::forward_grid`]).
    sms: u32,
    kernels: Mutex<HashMap<(Dtype, usize), Arc<Kernels>>>,
}

/// A `[batch, rows, heads, head_dim]` tensor of 16-bit floats (bf16 or f16 bits).
pub struct DeviceTensor {
    pub data: CudaSlice<u16>,
    pub dims: [usize; 4],
}

/// A partial attention result on the device: `out` `[batch, rows, heads, head_dim]` and
/// `lse` `[batch, heads, rows]`, both f32 (see `ringdil_reference::Partial`).
pub struct DevicePartial {
    pub out: CudaSlice<f32>,
    pub lse: CudaSlice<f32>,
    pub dims: [usize; 4],
}

/// dQ, dK, dV (f32), shaped like q, k, v.
pub struct DeviceGrads {
    pub dq: CudaSlice<f32>,
    pub dk: CudaSlice<f32>,
    pub dv: CudaSlice<f32>,
}

/// The three gradient buffers of one backward call, borrowed: a [`DeviceGrads`]'s
/// ([`DeviceGrads::as_mut`]) or a caller's running sums (a ring rank adds every step's
/// gradients into its own, [`Gpu::backward_add_into`]).
pub struct GradsMut<'a> {
    pub dq: &'a mut CudaSlice<f32>,
    pub dk: &'a mut CudaSlice<f32>,
    pub dv: &'a mut CudaSlice<f32>,
}

impl DeviceGrads {
    pub fn as_mut(&mut self) -> GradsMut<'_> {
        GradsMut { dq: &mut self.dq, dk: &mut self.dk, dv: &mut self.dv }
    }
}

/// A validated call with its tile plans on the device, ready to launch repeatedly.
pub struct Prepared {
    shape: Shape,
    dtype: Dtype,
    launches: Vec<(LaunchSpec, DevicePlan)>,
    key_len: Option<CudaSlice<i32>>,
    block_mask: Option<CudaSlice<u8>>,
    kernels: Arc<Kernels>,
    /// delta = rowsum(d_out * out) of the backward pass.
    delta: CudaSlice<f32>,
    /// The forward's lse as the backward reads it: lse * log2(e), +inf for -inf.
    lse2: CudaSlice<f32>,
}

struct DevicePlan {
    fwd_ptr: CudaSlice<i32>,
    fwd_idx: CudaSlice<i32>,
    cols_ptr: CudaSlice<i32>,
    cols_idx: CudaSlice<i32>,
}

fn nonempty(v: &[i32]) -> &[i32] {
    // cudarc cannot copy an empty slice; a plan with no tile still needs a valid pointer.
    if v.is_empty() { &[0] } else { v }
}

impl Gpu {
    /// The first GPU, or `None` when this machine has no CUDA driver or no device (the
    /// caller reports "skipped: no CUDA device"). Errors only when CUDA is half there.
    pub fn probe() -> Result<Option<Gpu>> {
        Self::on_device(0)
    }

    /// GPU `ordinal` of this process: [`Gpu::probe`] for any device, so that threads of one
    /// process can each open their own (`dist::threads` opens device `rank`). `None` when
    /// there is no CUDA driver or no device at all; an error naming `ordinal` and the
    /// device count when `ordinal` is not below that count.
    pub fn on_device(ordinal: usize) -> Result<Option<Gpu>> {
        // SAFETY: only tries to dlopen the driver library.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Ok(None);
        }
        let count = usize::try_from(CudaContext::device_count().unwrap_or(0)).unwrap_or(0);
        if count == 0 {
            return Ok(None);
        }
        if ordinal >= count {
            return Err(CudaError::NoSuchDevice { ordinal, count });
        }
        // SAFETY: as above, for NVRTC.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::NvrtcMissing);
        }
        let ctx = CudaContext::new(ordinal)?;
        let (major, minor) = ctx.compute_capability()?;
        let stream = ctx.default_stream();
        let family = Family::for_device(major, minor, std::env::var(launch::FAMILY_ENV).ok().as_deref());
        let arch = family.target(major, minor);
        let sms = ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let sms = u32::try_from(sms).unwrap_or(1);
        Ok(Some(Gpu { ctx, stream, arch, family, sms, kernels: Mutex::new(HashMap::new()) }))
    }

    /// Device name, NVRTC target and kernel family, e.g.
    /// "NVIDIA H100 80GB HBM3 (sm_90a, wgmma kernels)".
    pub fn describe(&self) -> Result<String> {
        let family = match self.family {
            Family::Mma => "mma",
            Family::Wgmma => "wgmma",
        };
        Ok(format!("{} ({}, {family} kernels)", self.ctx.name()?, self.arch))
    }

    /// Registers per thread and local (spilled) bytes of each attention kernel, for the
    /// benchmark notes.
    pub fn kernel_resources(&self, dtype: Dtype, head_dim: usize) -> Result<String> {
        let k = self.kernels(dtype, head_dim)?;
        let mut parts = Vec::new();
        for (name, f) in [("fwd", &k.fwd), ("bwd", &k.bwd)] {
            parts.push(format!("{name} {} regs / {} B spill", f.num_regs()?, f.local_size_bytes()?));
        }
        Ok(parts.join(", "))
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn kernels(&self, dtype: Dtype, head_dim: usize) -> Result<Arc<Kernels>> {
        if let Some(k) = self.kernels.lock().expect("kernel cache lock").get(&(dtype, head_dim)) {
            return Ok(k.clone());
        }
        let ptx = compile(&self.arch, self.family, dtype, head_dim)?;
        let module = self.ctx.load_module(ptx)?;
        let load = |name: &str, smem: u32| -> Result<CudaFunction> {
            let f = module.load_function(name)?;
            if smem > 48 * 1024 {
                f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
                // All of the SM's unified L1 / shared memory as shared memory (the default
                // carveout is only a preference): the wgmma kernels take up to 226 KB per
                // block. These kernels read their tiles through TMA / cp.async, not the L1
                // cache.
                f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)?;
            }
            Ok(f)
        };
        let k = Arc::new(Kernels {
            fwd: load("attn_fwd", self.family.forward_smem(head_dim))?,
            fwd_128: match self.family {
                Family::Wgmma => Some(load("attn_fwd_128", self.family.forward_smem(head_dim))?),
                Family::Mma => None,
            },
            bwd: load("attn_bwd", self.family.backward_smem(head_dim))?,
            merge: load("merge_partials", 0)?,
            fill: load("fill_empty", 0)?,
            delta: load("bwd_delta", 0)?,
        });
        self.kernels.lock().expect("kernel cache lock").insert((dtype, head_dim), k.clone());
        Ok(k)
    }

    /// Copy 16-bit host data (bf16/f16 bits) to the device.
    pub fn upload(&self, host: &[u16], dims: [usize; 4]) -> Result<DeviceTensor> {
        let n: usize = dims.iter().product();
        if host.len() != n {
            return Err(CudaError::ShapeMismatch {
                what: "host tensor",
                expected: dims.to_vec(),
                got: vec![host.len()],
            });
        }
        Ok(DeviceTensor { data: self.stream.clone_htod(host)?, dims })
    }

    /// An f32 device buffer filled with `value` (NaN to poison outputs in checks).
    pub fn filled(&self, len: usize, value: f32) -> Result<CudaSlice<f32>> {
        Ok(self.stream.clone_htod(&vec![value; len.max(1)])?)
    }

    pub fn download(&self, x: &CudaSlice<f32>) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(x)?)
    }

    /// Validate a call, build its tile plans and copy them to the device.
    pub fn prepare(&self, shape: &Shape, dtype: Dtype, spec: &GpuSpec, chunk: &Chunk) -> Result<Prepared> {
        let specs = launch::launches_for(shape, spec, chunk, self.family)?;
        let kernels = self.kernels(dtype, shape.head_dim)?;
        let launches = specs
            .into_iter()
            .map(|l| {
                let plan = DevicePlan {
                    fwd_ptr: self.stream.clone_htod(&l.fwd.ptr)?,
                    fwd_idx: self.stream.clone_htod(nonempty(&l.fwd.idx))?,
                    cols_ptr: self.stream.clone_htod(&l.cols.ptr)?,
                    cols_idx: self.stream.clone_htod(nonempty(&l.cols.idx))?,
                };
                Ok((l, plan))
            })
            .collect::<Result<Vec<_>>>()?;
        let key_len = match &spec.key_lengths {
            Some(l) => Some(self.stream.clone_htod(&l.iter().map(|&x| x as i32).collect::<Vec<_>>())?),
            None => None,
        };
        let block_mask = match launch::block_mask_bytes(spec) {
            Some(m) => Some(self.stream.clone_htod(&m)?),
            None => None,
        };
        let prep = Prepared {
            shape: *shape,
            dtype,
            launches,
            key_len,
            block_mask,
            kernels,
            delta: self.filled(shape.lse_len(), 0.0)?,
            lse2: self.filled(shape.lse_len(), 0.0)?,
        };
        Ok(prep)
    }

    /// Allocate an output partial for `prep` (uninitialised contents are never read:
    /// every row is written by [`Gpu::forward_into`]).
    pub fn alloc_partial(&self, prep: &Prepared) -> Result<DevicePartial> {
        let s = prep.shape;
        Ok(DevicePartial {
            out: self.filled(s.q_len(), 0.0)?,
            lse: self.filled(s.lse_len(), 0.0)?,
            dims: [s.batch, s.q_rows, s.heads, s.head_dim],
        })
    }

    fn check_inputs(&self, prep: &Prepared, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor) -> Result<()> {
        let s = prep.shape;
        let qd = [s.batch, s.q_rows, s.heads, s.head_dim];
        let kd = [s.batch, s.k_rows, s.heads, s.head_dim];
        for (what, t, d) in [("q", q, qd), ("k", k, kd), ("v", v, kd)] {
            if t.dims != d {
                return Err(CudaError::ShapeMismatch { what, expected: d.to_vec(), got: t.dims.to_vec() });
            }
        }
        Ok(())
    }

    /// Attention of `q` over `k`, `v` (a [`Partial`](ringdil_reference::Partial) on the
    /// device), written to `out`. One dense/masked launch writes every row. A compacted or
    /// multi-launch (dilated) call first fills `out` with the merge identity, then each
    /// branch's launch merges its result into it in the kernel's epilogue (the
    /// online-softmax merge, fused: no scratch partials, no separate merge pass).
    pub fn forward_into(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        out: &mut DevicePartial,
    ) -> Result<()> {
        self.check_inputs(prep, q, k, v)?;
        self.check_partial("out", prep, out)?;
        match prep.launches.as_slice() {
            [only] if !matches!(only.0.map, IndexMap::Compact { .. }) => {
                self.forward_launch(prep, only, q, k, v, out, false)
            }
            launches => {
                self.fill_empty(prep, out)?;
                launches.iter().try_for_each(|l| self.forward_launch(prep, l, q, k, v, out, true))
            }
        }
    }

    /// Merge the attention of `q` over `k`, `v` into the partial `acc` in place:
    /// `acc <- merge(acc, attention(q, k, v))`, the reference's `Partial::merge`, fused into
    /// the kernels' epilogue. `acc` must hold a partial over the same queries (an earlier
    /// result, or the identity): this is how a ring step adds a key block to a query
    /// piece's running result without a separate merge pass. (`acc` is the accumulator
    /// being built, never an input someone else still holds: the merge of two kept
    /// partials is [`Gpu::merge_into`].)
    pub fn forward_accumulate(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        acc: &mut DevicePartial,
    ) -> Result<()> {
        self.check_inputs(prep, q, k, v)?;
        self.check_partial("accumulator", prep, acc)?;
        prep.launches.iter().try_for_each(|l| self.forward_launch(prep, l, q, k, v, acc, true))
    }

    fn check_partial(&self, what: &'static str, prep: &Prepared, p: &DevicePartial) -> Result<()> {
        let s = prep.shape;
        let d = [s.batch, s.q_rows, s.heads, s.head_dim];
        if p.dims != d || p.out.len() != s.q_len() || p.lse.len() != s.lse_len() {
            return Err(CudaError::ShapeMismatch { what, expected: d.to_vec(), got: p.dims.to_vec() });
        }
        Ok(())
    }

    /// One launch writing `out` (`accumulate`: merging into it; rows the launch does
    /// not visit keep what they hold).
    #[allow(clippy::too_many_arguments)] // one launch's buffers, as the kernel takes them
    fn forward_launch(
        &self,
        prep: &Prepared,
        (l, plan): &(LaunchSpec, DevicePlan),
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        out: &mut DevicePartial,
        accumulate: bool,
    ) -> Result<()> {
        let st = &self.stream;
        let (qp, _a) = q.data.device_ptr(st);
        let (kp, _b) = k.data.device_ptr(st);
        let (vp, _c) = v.data.device_ptr(st);
        // Written by the kernel: `_mut`, so that cudarc records a write that another stream
        // (a ring's NCCL stream) waits for before it reads the buffer.
        let (op, _d) = out.out.device_ptr_mut(st);
        let (lp, _e) = out.lse.device_ptr_mut(st);
        let (pp, _f) = plan.fwd_ptr.device_ptr(st);
        let (pi, _g) = plan.fwd_idx.device_ptr(st);
        let params = Params {
            q: qp,
            k: kp,
            v: vp,
            out: op,
            lse: lp,
            plan_ptr: pp,
            plan_idx: pi,
            key_len: prep.key_len.as_ref().map_or(0, |x| x.device_ptr(st).0),
            block_mask: prep.block_mask.as_ref().map_or(0, |x| x.device_ptr(st).0),
            accumulate: accumulate as i32,
            ..l.params
        };
        let cfg = LaunchConfig {
            grid_dim: self.family.forward_grid(l.grid_fwd(), self.sms),
            block_dim: (self.family.forward_threads(l.fwd_q_tile), 1, 1),
            shared_mem_bytes: self.family.forward_smem(prep.shape.head_dim),
        };
        let kernel = match &prep.kernels.fwd_128 {
            Some(narrow) if l.fwd_q_tile != self.family.forward_q_tile() => narrow,
            _ => &prep.kernels.fwd,
        };
        let mut launch = st.launch_builder(kernel);
        launch.arg(&params);
        let maps = self.tile_maps(l, kp, vp, k.dims)?;
        // wgmma: the query tiles come by TMA too, through a map of Q.
        let q_map = match maps {
            Some(_) => Some(TensorMap::new(qp, Elem::U16, q.dims, Self::row_stride(l))?),
            None => None,
        };
        if let (Some(maps), Some(q_map)) = (&maps, &q_map) {
            launch.arg(maps).arg(q_map);
        }
        // SAFETY: params and maps describe live buffers of the validated shapes.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// The TMA maps of the two tensors a wgmma launch streams (`a`, `b` at those addresses,
    /// shaped `dims`): a compact branch's kept rows are its dilation apart. None for mma.
    fn tile_maps(
        &self,
        l: &LaunchSpec,
        a: cudarc::driver::sys::CUdeviceptr,
        b: cudarc::driver::sys::CUdeviceptr,
        dims: [usize; 4],
    ) -> Result<Option<TensorPair>> {
        Ok(match self.family {
            Family::Mma => None,
            Family::Wgmma => Some(TensorPair::new(a, b, dims, Self::row_stride(l))?),
        })
    }

    /// Rows between consecutive launch indices of a tile, as the TMA view reads them.
    fn row_stride(l: &LaunchSpec) -> usize {
        match l.map {
            IndexMap::Compact { dilation, .. } => dilation,
            IndexMap::Identity { .. } => 1,
        }
    }

    fn fill_empty(&self, prep: &Prepared, p: &mut DevicePartial) -> Result<()> {
        let (n_out, n_lse) = (p.out.len(), p.lse.len());
        let mut b = self.stream.launch_builder(&prep.kernels.fill);
        b.arg(&mut p.out).arg(&mut p.lse).arg(&n_out).arg(&n_lse);
        // SAFETY: lengths are the buffers' own.
        unsafe { b.launch(elementwise(n_out)) }?;
        Ok(())
    }

    /// The online-softmax merge of two partials into `out` (a third buffer: the inputs keep
    /// their values, as the reference's `Partial::merge` requires).
    pub fn merge_into(&self, a: &DevicePartial, b: &DevicePartial, out: &mut DevicePartial) -> Result<()> {
        if a.dims != b.dims || a.dims != out.dims {
            return Err(CudaError::ShapeMismatch {
                what: "merge partials",
                expected: a.dims.to_vec(),
                got: b.dims.to_vec(),
            });
        }
        let [batch, rows, heads, d] = a.dims;
        if !matches!(d, 64 | 128) {
            return Err(CudaError::UnsupportedHeadDim { head_dim: d });
        }
        // The merge kernel only depends on the head dim; any element type's module has it.
        let kernels = self.kernels(Dtype::Bf16, d)?;
        let (batch, rows, heads) = (batch as i32, rows as i32, heads as i32);
        let n = a.out.len();
        let mut l = self.stream.launch_builder(&kernels.merge);
        l.arg(&a.out).arg(&a.lse).arg(&b.out).arg(&b.lse).arg(&mut out.out).arg(&mut out.lse);
        l.arg(&batch).arg(&rows).arg(&heads);
        // SAFETY: all three partials have the checked dims.
        unsafe { l.launch(elementwise(n)) }?;
        Ok(())
    }

    /// Allocate gradient buffers for `prep`.
    pub fn alloc_grads(&self, prep: &Prepared) -> Result<DeviceGrads> {
        let s = prep.shape;
        Ok(DeviceGrads {
            dq: self.filled(s.q_len(), 0.0)?,
            dk: self.filled(s.k_len(), 0.0)?,
            dv: self.filled(s.k_len(), 0.0)?,
        })
    }

    /// dQ, dK, dV of the finished forward result `fwd` for the upstream gradient `dout`,
    /// from the saved LSE, written into `grads`. One kernel per key tile: dK and dV rows are
    /// written by one block (a single launch overwrites them; several, as dilated branches,
    /// clear the buffers and accumulate, since a row may be in several branches); dQ rows
    /// receive f32 reductions from every key tile, so dq is always cleared first.
    #[allow(clippy::too_many_arguments)] // the device buffers of one backward pass, as the kernels take them
    pub fn backward_into(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        fwd: &DevicePartial,
        dout: &DeviceTensor,
        grads: &mut DeviceGrads,
    ) -> Result<()> {
        self.backward(prep, q, k, v, fwd, dout, grads.as_mut(), false)
    }

    /// [`Gpu::backward_into`], but the gradients are added to what `grads` holds: every
    /// launch accumulates and nothing is cleared. A ring rank sums its steps' gradients
    /// this way without a temporary per step (and the copies that would add it in).
    #[allow(clippy::too_many_arguments)] // the device buffers of one backward pass, as the kernels take them
    pub fn backward_add_into(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        fwd: &DevicePartial,
        dout: &DeviceTensor,
        grads: GradsMut<'_>,
    ) -> Result<()> {
        self.backward(prep, q, k, v, fwd, dout, grads, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        fwd: &DevicePartial,
        dout: &DeviceTensor,
        grads: GradsMut<'_>,
        add: bool,
    ) -> Result<()> {
        self.check_inputs(prep, q, k, v)?;
        self.check_partial("forward result", prep, fwd)?;
        let s = prep.shape;
        if dout.dims != fwd.dims {
            return Err(CudaError::ShapeMismatch {
                what: "d_out",
                expected: fwd.dims.to_vec(),
                got: dout.dims.to_vec(),
            });
        }
        for (what, buf, len) in
            [("dq", &*grads.dq, s.q_len()), ("dk", &*grads.dk, s.k_len()), ("dv", &*grads.dv, s.k_len())]
        {
            if buf.len() != len {
                return Err(CudaError::ShapeMismatch { what, expected: vec![len], got: vec![buf.len()] });
            }
        }
        let st = &self.stream;
        {
            let (batch, rows, heads) = (s.batch as i32, s.q_rows as i32, s.heads as i32);
            let mut l = st.launch_builder(&prep.kernels.delta);
            l.arg(&dout.data).arg(&fwd.out).arg(&fwd.lse).arg(&mut prep.delta).arg(&mut prep.lse2);
            l.arg(&batch).arg(&rows).arg(&heads);
            // SAFETY: shapes checked above.
            unsafe { l.launch(elementwise(s.lse_len())) }?;
        }
        let accumulate = add
            || prep.launches.len() > 1
            || prep.launches.iter().any(|(l, _)| matches!(l.map, IndexMap::Compact { .. }));
        if !add {
            st.memset_zeros(grads.dq)?;
            if accumulate {
                st.memset_zeros(grads.dk)?;
                st.memset_zeros(grads.dv)?;
            }
        }
        let smem = self.family.backward_smem(s.head_dim);
        for (l, plan) in &prep.launches {
            let (qp, _a) = q.data.device_ptr(st);
            let (kp, _b) = k.data.device_ptr(st);
            let (vp, _c) = v.data.device_ptr(st);
            let (dop, _f) = dout.data.device_ptr(st);
            let (dlp, _g) = prep.delta.device_ptr(st);
            let (l2p, _e) = prep.lse2.device_ptr(st);
            // Written (`_mut`: a ring sends dk, dv on its NCCL stream right after).
            let (dqp, _h) = grads.dq.device_ptr_mut(st);
            let (dkp, _i) = grads.dk.device_ptr_mut(st);
            let (dvp, _j) = grads.dv.device_ptr_mut(st);
            let base = Params {
                q: qp,
                k: kp,
                v: vp,
                // No out / lse: the backward reads them through bwd_delta's delta and lse2.
                dout: dop,
                delta: dlp,
                lse2: l2p,
                dq: dqp,
                dk: dkp,
                dv: dvp,
                key_len: prep.key_len.as_ref().map_or(0, |x| x.device_ptr(st).0),
                block_mask: prep.block_mask.as_ref().map_or(0, |x| x.device_ptr(st).0),
                accumulate: accumulate as i32,
                ..l.params
            };
            let cols =
                Params { plan_ptr: plan.cols_ptr.device_ptr(st).0, plan_idx: plan.cols_idx.device_ptr(st).0, ..base };
            let cfg = LaunchConfig {
                grid_dim: l.grid_cols(self.family.backward_key_tiles()),
                block_dim: (self.family.backward_threads(), 1, 1),
                shared_mem_bytes: smem,
            };
            let maps = self.tile_maps(l, qp, dop, dout.dims)?;
            let dq_map = match maps {
                Some(_) => Some(TensorMap::new(dqp, Elem::F32, dout.dims, Self::row_stride(l))?),
                None => None,
            };
            let mut launch = st.launch_builder(&prep.kernels.bwd);
            launch.arg(&cols);
            if let (Some(maps), Some(dq_map)) = (&maps, &dq_map) {
                launch.arg(maps).arg(dq_map);
            }
            // SAFETY: params and maps describe live buffers of the validated shapes.
            unsafe { launch.launch(cfg) }?;
        }
        Ok(())
    }

    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}

impl Prepared {
    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The host-side launch specs (plans, parameters) of this call.
    pub fn launches(&self) -> impl Iterator<Item = &LaunchSpec> {
        self.launches.iter().map(|(l, _)| l)
    }
}

/// Grid-stride launch for `n` elements.
fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.div_ceil(256)).clamp(1, 65_535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Benchmark knob: a kernel source file compiled instead of the built-in one (A/B runs of
/// two kernel versions with one binary; the `Params` block must be the same).
pub const SOURCE_ENV: &str = "RINGDIL_CUDA_SOURCE";
/// Benchmark knob: extra NVRTC options, whitespace-separated (e.g. `-DFAST_MASK=0`).
pub const DEFINES_ENV: &str = "RINGDIL_CUDA_DEFINES";

/// NVRTC-compile the kernels for `arch` (of `family`; the target implies it),
/// once per process per (arch, dtype, head dim).
/// [`SOURCE_ENV`] and [`DEFINES_ENV`], read once per compile, replace the source and add
/// options (for A/B benchmarks; unset in normal use).
fn compile(arch: &str, family: Family, dtype: Dtype, head_dim: usize) -> Result<Ptx> {
    let cache = PTX_CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (arch.to_string(), dtype, head_dim);
    if let Some(ptx) = cache.lock().expect("ptx cache lock").get(&key) {
        return Ok(ptx.clone());
    }
    let module = format!("attention_{arch}_{dtype:?}_d{head_dim}");
    let source = match std::env::var(SOURCE_ENV) {
        Ok(path) => std::fs::read_to_string(&path)
            .map_err(|e| CudaError::Compile { module: module.clone(), log: format!("{SOURCE_ENV}={path}: {e}") })?,
        Err(_) => crate::KERNEL_SOURCE.to_string(),
    };
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        format!("-DHEAD_DIM={head_dim}"),
        format!("-DIS_F16={}", (dtype == Dtype::F16) as u8),
        family.define().into(),
        "--std=c++17".into(),
    ];
    options.extend(std::env::var(DEFINES_ENV).unwrap_or_default().split_whitespace().map(String::from));
    let opts = CompileOptions { options, name: Some(format!("{module}.cu")), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(&source, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            CudaError::Compile { module: module.clone(), log: log.to_string_lossy().into_owned() }
        }
        other => CudaError::Compile { module: module.clone(), log: format!("{other:?}") },
    })?;
    cache.lock().expect("ptx cache lock").insert(key, ptx.clone());
    Ok(ptx)
}

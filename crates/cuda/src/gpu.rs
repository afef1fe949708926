//! The device: context and stream, the kernel modules loaded into it (compiled by
//! [`crate::compile`]), host <-> device copies, and the preparation of a call (validated
//! launches, plans on the device). The calls themselves are in [`crate::forward`] and
//! [`crate::backward`].

use crate::compile::compile;
use crate::error::{CudaError, Result};
use crate::family::{FAMILY_ENV, Family};
use crate::launch::{self, Kernel, LaunchDims};
use crate::shape::{Chunk, Dtype, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use crate::tensors::{DevicePartial, DevicePlan, DeviceTensor, Prepared};
use crate::variant::Variant;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The kernels of one (element type, head dim) module, loaded into a context.
pub(crate) struct Kernels {
    /// The family that compiled the module ([`Gpu::family_for`]).
    pub(crate) family: Family,
    /// The attention kernels of that family ([`Kernel::of`]), and the backward of the
    /// family that runs it where that is another ([`Family::backward_family`]).
    attention: HashMap<Kernel, CudaFunction>,
    pub(crate) merge: CudaFunction,
    pub(crate) fill: CudaFunction,
    pub(crate) delta: CudaFunction,
    /// `bwd_delta` from a 16-bit forward output ([`Gpu::backward_half_into`]).
    pub(crate) delta_half: CudaFunction,
    /// f32 -> the module's 16-bit type ([`Gpu::to_half_into`]).
    pub(crate) to_half: CudaFunction,
}

impl Kernels {
    /// An attention kernel; its family compiled it (a call's launches are built for the
    /// family of its module, whose kernels are all loaded).
    pub(crate) fn get(&self, kernel: Kernel) -> &CudaFunction {
        &self.attention[&kernel]
    }
}

/// One GPU with one stream; every call is ordered on that stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    /// NVRTC's target of the device's family, e.g. `sm_90a` (see [`Family::target`]).
    arch: String,
    /// Compute capability (major, minor): the target of another family's modules.
    cc: (i32, i32),
    /// The device's family; a head dim it has no kernels for runs another's
    /// ([`Gpu::family_for`]).
    family: Family,
    /// The most shared memory a block may take here (the opt-in maximum): which head dims'
    /// kernels fit ([`Family::fits`]).
    smem_per_block: u32,
    /// Multiprocessors: the wgmma forward's grid ([`Family::forward_grid`]).
    pub(crate) sms: u32,
    /// Loaded modules, shared by every view of this device ([`Gpu::on_stream`]).
    kernels: Arc<Mutex<HashMap<Variant, Arc<Kernels>>>>,
}

/// A device copy of a plan array: cudarc cannot copy an empty slice, and a plan with no
/// tile still needs a valid pointer.
fn nonempty<T: Copy + Default>(v: &[T]) -> std::borrow::Cow<'_, [T]> {
    if v.is_empty() { vec![T::default()].into() } else { v.into() }
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
        crate::pool::keep_freed_memory(&ctx)?;
        let (major, minor) = ctx.compute_capability()?;
        let stream = ctx.default_stream();
        let family = Family::for_device(major, minor, std::env::var(FAMILY_ENV).ok().as_deref());
        let arch = family.target(major, minor);
        let sms = ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let sms = u32::try_from(sms).unwrap_or(1);
        let cc = (major, minor);
        let smem = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?;
        let smem_per_block = u32::try_from(smem).unwrap_or(0);
        let kernels = Arc::new(Mutex::new(HashMap::new()));
        Ok(Some(Gpu { ctx, stream, arch, cc, family, smem_per_block, sms, kernels }))
    }

    /// Device name, NVRTC target and kernel family, the head dims (and pairs of q's and v's
    /// head dims) another family runs and those whose backward another family runs, e.g.
    /// "NVIDIA H200 (sm_90a, wgmma kernels; backward d = 192, 256, 192 with d_v = 128: mma,
    /// sm_90)".
    pub fn describe(&self) -> Result<String> {
        let (name, family) = (self.ctx.name()?, self.family.name());
        let (mut whole, mut backward) = (Vec::<(String, Family)>::new(), Vec::<(String, Family)>::new());
        let equal = Family::Mma.head_dims().iter().map(|&d| (d, d));
        for (d, dv) in equal.chain(Family::value_dim_pairs().iter().copied()) {
            let dims = if d == dv { d.to_string() } else { format!("{d} with d_v = {dv}") };
            match self.family_for(d, dv) {
                Ok(f) if f != self.family => whole.push((dims, f)),
                Ok(f) if f.backward_family(d) != f => backward.push((dims, f.backward_family(d))),
                _ => {}
            }
        }
        let mut s = format!("{name} ({}, {family} kernels", self.arch);
        for (what, others) in [("", &whole), ("backward ", &backward)] {
            if let Some(&(_, f)) = others.first() {
                let dims: Vec<String> = others.iter().map(|(d, _)| d.clone()).collect();
                let target = f.target(self.cc.0, self.cc.1);
                s += &format!("; {what}d = {}: {}, {target}", dims.join(", "), f.name());
            }
        }
        Ok(s + ")")
    }

    /// Registers per thread and local (spilled) bytes of each attention kernel, for the
    /// benchmark notes.
    pub fn kernel_resources(&self, dtype: Dtype, head_dim: usize) -> Result<String> {
        let k = self.kernels(Variant::new(dtype, head_dim))?;
        let mut parts = Vec::new();
        for (name, kernel) in [("fwd", Kernel::Forward), ("fwd_128", Kernel::ForwardNarrow), ("bwd", Kernel::Backward)]
        {
            if let Some(f) = k.attention.get(&kernel) {
                parts.push(format!("{name} {} regs / {} B spill", f.num_regs()?, f.local_size_bytes()?));
            }
        }
        Ok(parts.join(", "))
    }

    /// This device's context and loaded modules, launching on `stream` (a stream of the
    /// same context).
    pub(crate) fn with_stream(&self, stream: Arc<CudaStream>) -> Gpu {
        Gpu { stream, ctx: self.ctx.clone(), arch: self.arch.clone(), kernels: self.kernels.clone(), ..*self }
    }

    /// The family whose kernels run `head_dim`'s forward here: the device's where it has
    /// them, else mma's (on sm_90: d = 96, compiled for `sm_90`; see [`Family::for_head_dim`];
    /// the backward's: [`Family::backward_family`], on sm_90 mma's at d = 192, 256).
    /// Otherwise an error naming the value and every head dim this device runs (mma's,
    /// those whose blocks fit its shared memory: d = 256 needs sm_90's 227 KB), or, where
    /// `head_dim` runs but not with v's `value_dim`, the pairs of different dims it runs
    /// (MLA's 192 / 128 runs the mma family's kernels, on sm_90 too).
    pub fn family_for(&self, head_dim: usize, value_dim: usize) -> Result<Family> {
        let runs = |d: usize, v: usize| self.family.for_head_dim(d, v, self.smem_per_block).is_some();
        self.family.for_head_dim(head_dim, value_dim, self.smem_per_block).ok_or_else(|| {
            if runs(head_dim, head_dim) {
                let supported = Family::value_dim_pairs().iter().copied().filter(|&(d, v)| runs(d, v)).collect();
                return CudaError::UnsupportedValueDim { head_dim, value_dim, supported };
            }
            let supported = Family::Mma.head_dims().iter().copied().filter(|&d| runs(d, d)).collect();
            CudaError::UnsupportedHeadDim { head_dim, supported }
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The loaded module of `variant`, compiled at its first use by the family of its head
    /// dim ([`Gpu::family_for`]: one per head dim on a device, so the variant keys it).
    pub(crate) fn kernels(&self, variant: Variant) -> Result<Arc<Kernels>> {
        if let Some(k) = self.kernels.lock().expect("kernel cache lock").get(&variant) {
            return Ok(k.clone());
        }
        let (head_dim, value_dim) = (variant.head_dim, variant.value_dim);
        let family = self.family_for(head_dim, value_dim)?;
        let load_module = |f: Family| -> Result<_> {
            Ok(self.ctx.load_module(compile(&f.target(self.cc.0, self.cc.1), f, variant)?)?)
        };
        let module = load_module(family)?;
        let load_from = |module: &Arc<cudarc::driver::CudaModule>, name: &str, smem: u32| -> Result<CudaFunction> {
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
        let load = |name: &str, smem: u32| load_from(&module, name, smem);
        let mut attention = HashMap::new();
        for kernel in Kernel::of(family, head_dim) {
            attention.insert(kernel, load(kernel.name(), kernel.smem(family, head_dim, value_dim))?);
        }
        // A head dim whose backward another family runs (wgmma above d = 128): its
        // module too, for that kernel alone.
        let backward = family.backward_family(head_dim);
        if backward != family {
            let kernel = Kernel::Backward;
            let f = load_from(&load_module(backward)?, kernel.name(), kernel.smem(backward, head_dim, value_dim))?;
            attention.insert(kernel, f);
        }
        let k = Arc::new(Kernels {
            family,
            attention,
            merge: load("merge_partials", 0)?,
            fill: load("fill_empty_lse", 0)?,
            delta: load("bwd_delta", 0)?,
            delta_half: load("bwd_delta_half", 0)?,
            to_half: load("to_half", 0)?,
        });
        self.kernels.lock().expect("kernel cache lock").insert(variant, k.clone());
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

    /// Validate a call, build its tile plans (for the family of its head dim,
    /// [`Gpu::family_for`]) and copy them to the device.
    pub fn prepare(&self, shape: &Shape, dtype: Dtype, spec: &GpuSpec, chunk: &Chunk) -> Result<Prepared> {
        // The pattern the kernels run: a built-in in place of an expression equal to it,
        // mask tables for documents the kernels cannot cut (`spec_documents`).
        let lowered = spec.lowered(shape, chunk)?;
        let spec = lowered.as_ref().unwrap_or(spec);
        let specs = launch::launches_for(shape, spec, chunk, self.family_for(shape.head_dim, shape.value_dim)?)?;
        // A mask expression runs compiled into the kernels, unless it is one LongNet
        // branch (then it runs as compact launches: `dilated_expr::compact_form`).
        let expr = match &spec.pattern {
            GpuPattern::Expr(e) if e.as_dilated().is_none() => {
                Some(crate::expr_source::register(e, chunk.seq_len, chunk.pattern_heads(shape.heads)))
            }
            _ => None,
        };
        let variant = Variant::new(dtype, shape.head_dim)
            .with_value_dim(shape.value_dim)
            .with_documents(spec.documents.is_some() || specs.iter().any(|l| l.spans_in_buffer))
            .with_expr(expr)
            .with_table(matches!(spec.pattern, GpuPattern::Table(_)))
            .with_holes(specs.iter().any(|l| l.params.hole_side != 0));
        let kernels = self.kernels(variant)?;
        let launches = specs
            .into_iter()
            .map(|l| {
                let plan = DevicePlan {
                    fwd_ptr: self.stream.clone_htod(&l.fwd.ptr)?,
                    fwd_idx: self.stream.clone_htod(nonempty(&l.fwd.idx).as_ref())?,
                    fwd_full: self.stream.clone_htod(nonempty(&l.fwd.full).as_ref())?,
                    cols_ptr: self.stream.clone_htod(&l.cols.ptr)?,
                    cols_idx: self.stream.clone_htod(nonempty(&l.cols.idx).as_ref())?,
                    cols_full: self.stream.clone_htod(nonempty(&l.cols.full).as_ref())?,
                };
                Ok((l, plan))
            })
            .collect::<Result<Vec<_>>>()?;
        let key_len = match &spec.key_lengths {
            Some(l) => Some(self.stream.clone_htod(&l.iter().map(|&x| x as i32).collect::<Vec<_>>())?),
            None => None,
        };
        let block_mask = match launch::block_mask_bytes(spec, shape, chunk)? {
            Some(m) => Some(self.stream.clone_htod(&m)?),
            None => None,
        };
        let doc_spans = match &spec.documents {
            Some(d) => {
                let (first, last) = crate::plan::documents::position_spans(d, shape.batch, chunk.seq_len);
                Some((self.stream.clone_htod(&first)?, self.stream.clone_htod(&last)?))
            }
            None => None,
        };
        let prep = Prepared {
            shape: *shape,
            dtype,
            out_scale: spec.output_scale(chunk.pattern_heads(shape.heads))? as f32,
            scale_deferred: false,
            launches,
            key_len,
            block_mask,
            doc_spans,
            kernels,
            // Zeroed on the device (a memset on the stream, no host copy): a call's
            // preparation costs its tile plans, not a copy per query row.
            delta: self.stream.alloc_zeros(shape.lse_len().max(1))?,
            lse2: self.stream.alloc_zeros(shape.lse_len().max(1))?,
            work: std::sync::Mutex::new(self.stream.alloc_zeros(crate::params::WORK_COUNTERS)?),
        };
        Ok(prep)
    }

    /// Allocate an output partial for `prep` (uninitialised contents are never read:
    /// every row is written by [`Gpu::forward_into`]).
    pub fn alloc_partial(&self, prep: &Prepared) -> Result<DevicePartial> {
        let s = prep.shape;
        let z = |n: usize| self.stream.alloc_zeros::<f32>(n.max(1));
        Ok(DevicePartial { out: z(s.out_len())?, lse: z(s.lse_len())?, dims: s.out_dims() })
    }

    pub(crate) fn check_inputs(
        &self,
        prep: &Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
    ) -> Result<()> {
        let s = prep.shape;
        for (what, t, d) in [("q", q, s.q_dims()), ("k", k, s.k_dims()), ("v", v, s.v_dims())] {
            if t.dims != d {
                return Err(CudaError::ShapeMismatch { what, expected: d.to_vec(), got: t.dims.to_vec() });
            }
        }
        Ok(())
    }
    pub(crate) fn check_partial(&self, what: &'static str, prep: &Prepared, p: &DevicePartial) -> Result<()> {
        let s = prep.shape;
        let d = s.out_dims();
        if p.dims != d || p.out.len() != s.out_len() || p.lse.len() != s.lse_len() {
            return Err(CudaError::ShapeMismatch { what, expected: d.to_vec(), got: p.dims.to_vec() });
        }
        Ok(())
    }

    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}

/// cudarc's launch configuration of a launch description.
pub(crate) fn launch_config(d: &LaunchDims) -> LaunchConfig {
    LaunchConfig { grid_dim: d.grid, block_dim: (d.block, 1, 1), shared_mem_bytes: d.smem }
}

/// Threads that share one row in `bwd_delta` (the kernels' `DELTA_LANES`; a power of two
/// dividing a warp): each loads 16 bytes of the row per step, so a warp reads whole lines.
pub(crate) const DELTA_LANES: usize = 8;

/// Grid-stride launch for `n` threads (blocks of 256, whole warps).
pub(crate) fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.div_ceil(256)).clamp(1, 65_535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

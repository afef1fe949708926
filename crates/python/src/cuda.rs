//! The native half of `ringdil.attention` on CUDA tensors.
//!
//! Python (`ringdil/_torch.py`) checks the tensors (device, dtype, layout, shapes, naming
//! the argument), allocates every result with PyTorch's caching allocator, and passes
//! device pointers, the shape and PyTorch's current stream. This file builds the GPU
//! spec from the same pattern objects as `ringdil.reference`, then runs ringdil-cuda's
//! kernels on that memory, on that stream (`ringdil_cuda::external`): no copy, no
//! synchronisation, ordered with the caller's own kernels.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use ringdil_cuda::convert::{HalfScratch, half_scratch_lens};
use ringdil_cuda::{Chunk, CudaError, Dtype, Gpu, GpuSpec, Prepared, Shape};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::attention;
use crate::pattern::PyPattern;

/// One `Gpu` per device ordinal for the process: modules compile at their first use and
/// stay loaded; each call launches on its own stream through [`Gpu::on_stream`].
static GPUS: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();

pub(crate) fn gpu(device: usize) -> PyResult<Arc<Gpu>> {
    let mut gpus = GPUS.get_or_init(Default::default).lock().expect("GPU table lock");
    if let Some(g) = gpus.get(&device) {
        return Ok(g.clone());
    }
    let g = Gpu::on_device(device)
        .map_err(cuda_error)?
        .ok_or_else(|| PyRuntimeError::new_err("ringdil.attention: no CUDA device (libcuda not found or no GPU)"))?;
    let g = Arc::new(g);
    gpus.insert(device, g.clone());
    Ok(g)
}

/// What a prepared call depends on: device, stream, shape, element type and spec.
type CallKey = (usize, usize, Shape, Dtype, String);

/// Prepared calls (tile plans on the device, the backward's scratch), kept per
/// [`CallKey`], so that a training loop's repeated calls upload nothing: a host-to-device
/// copy from pageable memory first waits for the stream's earlier work, which would make
/// the host wait for every kernel before it could queue the next. At most
/// [`PREPARED_MAX`] are kept (a loop uses a handful: one per layer shape and direction).
static PREPARED: OnceLock<Mutex<HashMap<CallKey, Arc<Mutex<Prepared>>>>> = OnceLock::new();
const PREPARED_MAX: usize = 64;

/// The prepared launches of `call` (on `view`, which launches on the call's stream), built
/// at their first use.
fn prepared(view: &Gpu, call: &Call) -> Result<Arc<Mutex<Prepared>>, CudaError> {
    let key = (call.device, call.stream, call.shape, call.dtype, format!("{:?}", call.spec));
    let mut table = PREPARED.get_or_init(Default::default).lock().expect("prepared-call table lock");
    if let Some(p) = table.get(&key) {
        return Ok(p.clone());
    }
    let s = call.shape;
    let p = Arc::new(Mutex::new(view.prepare(&s, call.dtype, &call.spec, &Chunk::whole(&s))?));
    if table.len() >= PREPARED_MAX {
        table.clear();
    }
    table.insert(key, p.clone());
    Ok(p)
}

/// Input mistakes (shapes, head dims, patterns the kernels lack) as `ValueError`; the
/// driver's and NVRTC's failures as `RuntimeError`. The crate's messages name the value.
pub(crate) fn cuda_error(e: CudaError) -> PyErr {
    match e {
        CudaError::Driver(_) | CudaError::Compile { .. } | CudaError::NvrtcMissing | CudaError::NoSuchDevice { .. } => {
            PyRuntimeError::new_err(e.to_string())
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// The element type PyTorch names (`str(tensor.dtype)` without `torch.`).
pub(crate) fn dtype(name: &str) -> PyResult<Dtype> {
    match name {
        "bfloat16" => Ok(Dtype::Bf16),
        "float16" => Ok(Dtype::F16),
        other => Err(PyTypeError::new_err(format!("q: dtype must be bfloat16 or float16 on the GPU, got {other}"))),
    }
}

/// The GPU spec of `ringdil.attention`'s keyword arguments: the reference's spec of the
/// same arguments (`attention::spec`, so both paths read them alike) with the pattern the
/// kernels evaluate.
pub(crate) fn gpu_spec(
    pattern: Option<PyRef<'_, PyPattern>>,
    causal: bool,
    scale: Option<f64>,
    lengths_docs: (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
) -> PyResult<GpuSpec> {
    let gpu_pattern = PyPattern::gpu_pattern(pattern.as_deref())?;
    let spec = attention::spec(pattern, causal, scale, lengths_docs)?;
    Ok(GpuSpec {
        pattern: gpu_pattern,
        causal: spec.causal,
        key_lengths: spec.key_lengths,
        scale: spec.scale,
        documents: spec.documents,
    })
}

/// A call's arguments besides its buffers, one tuple as `ringdil/_torch.py` passes it:
/// device ordinal, PyTorch's current stream of that device, q's dims `[b, n, h, d]`, the
/// K/V heads, v's head dim (`d`, or MLA's 128 at `d = 192`), the dtype's name, and the
/// keyword arguments of `ringdil.attention` (pattern, causal, scale, key_lengths,
/// documents).
type CallArgs<'py> = (
    usize,
    usize,
    [usize; 4],
    usize,
    usize,
    String,
    Option<PyRef<'py, PyPattern>>,
    bool,
    Option<f64>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);

/// One call: where it runs, its shape, element type and spec.
struct Call {
    device: usize,
    stream: usize,
    shape: Shape,
    dtype: Dtype,
    spec: GpuSpec,
}

impl Call {
    fn new(args: CallArgs<'_>) -> PyResult<Call> {
        let (
            device,
            stream,
            [batch, seq, heads, head_dim],
            kv_heads,
            value_dim,
            dtype_name,
            pattern,
            causal,
            scale,
            lengths,
            docs,
        ) = args;
        let spec = gpu_spec(pattern, causal, scale, (lengths.as_ref(), docs.as_ref()))?;
        let shape = Shape::square(batch, seq, heads, head_dim).with_kv_heads(kv_heads).with_value_dim(value_dim);
        Ok(Call { device, stream, shape, dtype: dtype(&dtype_name)?, spec })
    }

    /// Run `launch` with the GIL released, on a view of the device that launches on the
    /// call's stream, with the call's prepared launches.
    fn run(
        self,
        py: Python<'_>,
        launch: impl FnOnce(&Gpu, Shape, &mut Prepared) -> Result<(), CudaError> + Send,
    ) -> PyResult<()> {
        let gpu = gpu(self.device)?;
        py.detach(|| {
            // SAFETY: `stream` is PyTorch's current stream of the device, alive for the call
            // (PyTorch's allocator reuses the tensors' memory in the order of that stream,
            // so it stays allocated until the kernels queued here are done).
            let view = unsafe { gpu.on_stream(self.stream as ringdil_cuda::external::CUstream) };
            let prep = prepared(&view, &self)?;
            let mut prep = prep.lock().expect("prepared call lock");
            launch(&view, self.shape, &mut prep)
        })
        .map_err(cuda_error)
    }
}

/// `out` (16-bit like q) and `lse` (f32), PyTorch-allocated <- attention of `q` over `k`,
/// `v`; the output rounded by the kernels' epilogue (`Gpu::forward_half_into`). `ptrs`
/// are PyTorch's `data_ptr()` of contiguous tensors: q `[b, n, h, d]`, k `[b, n, kv_heads,
/// d]`, v `[b, n, kv_heads, d_v]`, out `[b, n, h, d_v]`, lse `[b, h, n]`.
#[pyfunction]
pub fn cuda_forward(py: Python<'_>, call: CallArgs<'_>, ptrs: [u64; 5]) -> PyResult<()> {
    let [q, k, v, out, lse] = ptrs;
    Call::new(call)?.run(py, |view, s, prep| {
        // SAFETY: the pointers address contiguous PyTorch tensors of these shapes (above).
        let (q, k, v, mut out) = unsafe {
            (
                view.borrow_tensor("q", q, s.q_dims())?,
                view.borrow_tensor("k", k, s.k_dims())?,
                view.borrow_tensor("v", v, s.v_dims())?,
                view.borrow_tensor("out", out, s.out_dims())?,
            )
        };
        let mut lse = unsafe { view.borrow_f32("lse", lse, s.lse_len())? };
        view.forward_half_into(prep, &q, &k, &v, &mut out, &mut lse)
    })
}

/// The f32 sums the backward of `call` needs, in elements: `(dQ, dK, dV)`, 0 for dK, dV
/// when the kernels write them in 16 bits (`ringdil_cuda::convert::half_scratch_lens`).
/// `ringdil/_torch.py` allocates them with PyTorch, so that they are in its accounts and
/// its cache.
#[pyfunction]
pub fn cuda_backward_scratch(py: Python<'_>, call: CallArgs<'_>) -> PyResult<(usize, usize, usize)> {
    let mut lens = [0, 0, 0];
    Call::new(call)?.run(py, |_, _, prep| {
        lens = half_scratch_lens(prep);
        Ok(())
    })?;
    Ok((lens[0], lens[1], lens[2]))
}

/// `dq`, `dk`, `dv` (16-bit, PyTorch-allocated, shaped like q, k, v) <- the gradients of
/// `out` for the upstream gradient `dout` (16-bit, like out), from the forward's 16-bit
/// `out` and f32 `lse` (`Gpu::backward_half_with`), summing in the f32 buffers `dq32`,
/// `dk32`, `dv32` of [`cuda_backward_scratch`]'s lengths (`dk32`, `dv32` 0 when it says
/// 0). `ptrs`: q, k, v, out, lse, dout, dq, dk, dv, dq32, dk32, dv32.
#[pyfunction]
pub fn cuda_backward(py: Python<'_>, call: CallArgs<'_>, ptrs: [u64; 12]) -> PyResult<()> {
    let [q, k, v, out, lse, dout, dq, dk, dv, dq32, dk32, dv32] = ptrs;
    Call::new(call)?.run(py, |view, s, prep| {
        // SAFETY: as in cuda_forward; dq, dk, dv are 16-bit tensors shaped like q, k, v,
        // and the sums f32 tensors of the lengths half_scratch_lens gives for this call.
        let t = |what, p, dims| unsafe { view.borrow_tensor(what, p, dims) };
        let (q, k, v) = (t("q", q, s.q_dims())?, t("k", k, s.k_dims())?, t("v", v, s.v_dims())?);
        let (out, dout) = (t("out", out, s.out_dims())?, t("d_out", dout, s.out_dims())?);
        let (mut dq, mut dk, mut dv) = (t("dq", dq, s.q_dims())?, t("dk", dk, s.k_dims())?, t("dv", dv, s.v_dims())?);
        let lse = unsafe { view.borrow_f32("lse", lse, s.lse_len())? };
        let [dq_len, dk_len, dv_len] = half_scratch_lens(prep);
        let f32s = |what, p, n| unsafe { view.borrow_f32(what, p, n) };
        let mut dq32 = f32s("dq sums", dq32, dq_len)?;
        let mut kv32 = match dk_len {
            0 => None,
            n => Some((f32s("dk sums", dk32, n)?, f32s("dv sums", dv32, dv_len)?)),
        };
        let scratch = HalfScratch { dq: &mut dq32, kv: kv32.as_mut().map(|(a, b)| (&mut **a, &mut **b)) };
        view.backward_half_with(prep, &q, &k, &v, (&out, &lse), &dout, [&mut dq, &mut dk, &mut dv], scratch)
    })
}

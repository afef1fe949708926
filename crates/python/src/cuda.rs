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
use ringdil_cuda::{Chunk, CudaError, Dtype, Gpu, GpuSpec, Prepared, Shape};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::attention;
use crate::pattern::PyPattern;

/// One `Gpu` per device ordinal for the process: modules compile at their first use and
/// stay loaded; each call launches on its own stream through [`Gpu::on_stream`].
static GPUS: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();

fn gpu(device: usize) -> PyResult<Arc<Gpu>> {
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

/// The prepared call of `call` on `view` (device `device`, stream `stream`), built at its
/// first use.
fn prepared(view: &Gpu, device: usize, stream: usize, call: &Call) -> Result<Arc<Mutex<Prepared>>, CudaError> {
    let key = (device, stream, call.shape, call.dtype, format!("{:?}", call.spec));
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
fn cuda_error(e: CudaError) -> PyErr {
    match e {
        CudaError::Driver(_) | CudaError::Compile { .. } | CudaError::NvrtcMissing | CudaError::NoSuchDevice { .. } => {
            PyRuntimeError::new_err(e.to_string())
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// The element type PyTorch names (`str(tensor.dtype)` without `torch.`).
fn dtype(name: &str) -> PyResult<Dtype> {
    match name {
        "bfloat16" => Ok(Dtype::Bf16),
        "float16" => Ok(Dtype::F16),
        other => Err(PyTypeError::new_err(format!("q: dtype must be bfloat16 or float16 on the GPU, got {other}"))),
    }
}

/// What every call takes besides its buffers: the shape, element type and spec.
struct Call {
    shape: Shape,
    dtype: Dtype,
    spec: GpuSpec,
}

impl Call {
    #[allow(clippy::too_many_arguments)] // the keyword arguments of ringdil.attention
    fn new(
        [batch, seq, heads, head_dim]: [usize; 4],
        kv_heads: usize,
        dtype_name: &str,
        pattern: Option<PyRef<'_, PyPattern>>,
        causal: bool,
        scale: Option<f64>,
        key_lengths: Option<&Bound<'_, PyAny>>,
        documents: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Call> {
        let gpu_pattern = PyPattern::gpu_pattern(pattern.as_deref())?;
        let spec = attention::spec(pattern, causal, scale, (key_lengths, documents))?;
        let spec = GpuSpec {
            pattern: gpu_pattern,
            causal: spec.causal,
            key_lengths: spec.key_lengths,
            scale: spec.scale,
            documents: spec.documents,
        };
        let shape = Shape::square(batch, seq, heads, head_dim).with_kv_heads(kv_heads);
        Ok(Call { shape, dtype: dtype(dtype_name)?, spec })
    }
}

/// `out`, `lse` (f32, PyTorch-allocated) <- attention of `q` over `k`, `v` (16-bit), on
/// device `device` and stream `stream`. Pointers are PyTorch's `data_ptr()` of contiguous
/// tensors: q `[b, n, h, d]`, k and v `[b, n, kv_heads, d]`, out like q, lse `[b, h, n]`.
#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, out, lse, q_dims, kv_heads, dtype, pattern, causal, scale, key_lengths, documents))]
#[allow(clippy::too_many_arguments)] // one call's buffers and keyword arguments, as Python passes them
pub fn cuda_forward(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: u64,
    k: u64,
    v: u64,
    out: u64,
    lse: u64,
    q_dims: [usize; 4],
    kv_heads: usize,
    dtype: &str,
    pattern: Option<PyRef<'_, PyPattern>>,
    causal: bool,
    scale: Option<f64>,
    key_lengths: Option<&Bound<'_, PyAny>>,
    documents: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let call = Call::new(q_dims, kv_heads, dtype, pattern, causal, scale, key_lengths, documents)?;
    let gpu = gpu(device)?;
    py.detach(|| {
        // SAFETY: `stream` is PyTorch's current stream of `device`, alive for the call; the
        // pointers are contiguous PyTorch tensors of the shapes above, which Python keeps
        // alive until the kernels are done (PyTorch's allocator reuses memory in stream order).
        let view = unsafe { gpu.on_stream(stream as ringdil_cuda::external::CUstream) };
        let s = call.shape;
        let prep = prepared(&view, device, stream, &call)?;
        let mut prep = prep.lock().expect("prepared call lock");
        let (q, k, v) = unsafe {
            (view.borrow_tensor(q, s.q_dims()), view.borrow_tensor(k, s.k_dims()), view.borrow_tensor(v, s.k_dims()))
        };
        let mut partial = unsafe { view.borrow_partial(out, lse, s.q_dims()) };
        view.forward_into(&mut prep, &q, &k, &v, &mut partial)
    })
    .map_err(cuda_error)
}

/// `dq`, `dk`, `dv` (f32, PyTorch-allocated, shaped like q, k, v) <- the gradients of
/// `out` for the upstream gradient `dout` (16-bit, like q), from the forward's f32 `out`
/// and `lse`; the other arguments as [`cuda_forward`].
#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, out, lse, dout, dq, dk, dv, q_dims, kv_heads, dtype, pattern, causal, scale, key_lengths, documents))]
#[allow(clippy::too_many_arguments)] // one call's buffers and keyword arguments, as Python passes them
pub fn cuda_backward(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: u64,
    k: u64,
    v: u64,
    out: u64,
    lse: u64,
    dout: u64,
    dq: u64,
    dk: u64,
    dv: u64,
    q_dims: [usize; 4],
    kv_heads: usize,
    dtype: &str,
    pattern: Option<PyRef<'_, PyPattern>>,
    causal: bool,
    scale: Option<f64>,
    key_lengths: Option<&Bound<'_, PyAny>>,
    documents: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let call = Call::new(q_dims, kv_heads, dtype, pattern, causal, scale, key_lengths, documents)?;
    let gpu = gpu(device)?;
    py.detach(|| {
        // SAFETY: as in cuda_forward.
        let view = unsafe { gpu.on_stream(stream as ringdil_cuda::external::CUstream) };
        let s = call.shape;
        let prep = prepared(&view, device, stream, &call)?;
        let mut prep = prep.lock().expect("prepared call lock");
        let (q, k, v, dout) = unsafe {
            (
                view.borrow_tensor(q, s.q_dims()),
                view.borrow_tensor(k, s.k_dims()),
                view.borrow_tensor(v, s.k_dims()),
                view.borrow_tensor(dout, s.q_dims()),
            )
        };
        let fwd = unsafe { view.borrow_partial(out, lse, s.q_dims()) };
        let mut grads = unsafe { view.borrow_grads([dq, dk, dv], s.q_dims(), s.k_dims()) };
        view.backward_into(&mut prep, &q, &k, &v, &fwd, &dout, &mut grads)
    })
    .map_err(cuda_error)
}

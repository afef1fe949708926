//! The native half of `ringdil.ring_attention`: one rank of ringdil-cuda's NCCL ring
//! (`dist::DistRank`) run on PyTorch's tensors and current stream.
//!
//! `ringdil/_ring_torch.py` creates the NCCL unique id on rank 0 of a `torch.distributed`
//! group ([`nccl_unique_id`]), sends it to the group's ranks through `torch.distributed`,
//! and each rank joins a [`RingGroup`]: ringdil's own communicator over the same ranks
//! (its transfers run on its own stream, overlapping the kernels, as in `ring_check`).
//! A call passes the device pointers of the rank's pieces (a layout's local rows cut into
//! runs of consecutive global tokens, [`RingGroup::piece_lens`]) and PyTorch-allocated
//! f32 results; nothing is copied in, the finished pieces are copied out on the stream.
//!
//! Ordering: the kernels run on PyTorch's current stream and every transfer on the
//! communication stream waits for the kernel that wrote its buffer (cudarc's events).
//! Before a call returns, PyTorch's stream waits for the communication stream, so a
//! borrowed input the ring sends is never reused by PyTorch's allocator while NCCL still
//! reads it.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use ringdil_cuda::dist::{
    Communicator, DistError, DistPlan, DistRank, RankState, UniqueId, WatchOptions, timeout_from_env,
};
use ringdil_cuda::external::CUdeviceptr;
use ringdil_cuda::{Dtype, Gpu, GpuSpec};
use ringdil_reference::ring::{ChunkPlan, Kind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cuda::{cuda_error, dtype, gpu, gpu_spec};
use crate::layout;
use crate::pattern::PyPattern;

/// A fresh NCCL unique id (128 bytes) for rank 0 to send to the group.
#[pyfunction]
pub fn nccl_unique_id() -> PyResult<Vec<u8>> {
    Ok(UniqueId::new().map_err(dist_error)?.0.to_vec())
}

/// Input mistakes (shapes, layouts, patterns) as `ValueError`; NCCL, the driver and a
/// stalled rank as `RuntimeError`. The messages are ringdil-cuda's, naming the value.
fn dist_error(e: DistError) -> PyErr {
    match e {
        DistError::Cuda(e) => cuda_error(e),
        DistError::Nccl { .. }
        | DistError::Stalled { .. }
        | DistError::Worker { .. }
        | DistError::WorkerStalled { .. }
        | DistError::RankFailed { .. }
        | DistError::RankPanicked { .. } => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// A call's arguments besides its buffers, as `ringdil/_ring_torch.py` passes them: the
/// device ordinal, PyTorch's current stream there, the global dims `[b, n, h, d, d_v]`, the
/// K/V heads, the dtype's name, the pattern, causal, scale, packed documents, the layout,
/// the hybrid's ranks per group and the schedule's name. `d_v` is v's head dim (the
/// output's, d_out's and dV's): `d`, or a pair the kernels run (MLA's 192 / 128), which
/// [`DistPlan::with_value_dim`] checks (else a `ValueError` naming both dims).
type RingArgs<'py> = (
    usize,
    usize,
    [usize; 5],
    usize,
    String,
    Option<PyRef<'py, PyPattern>>,
    bool,
    Option<f64>,
    Option<Bound<'py, PyAny>>,
    Bound<'py, PyAny>,
    Option<usize>,
    String,
);

/// One call, parsed: where it runs, the ring plan's inputs and the schedule.
struct RingCall {
    stream: usize,
    dtype: Dtype,
    /// Identifies the plan: dims (v's head dim among them), K/V heads, spec, layout and
    /// the hybrid's degree.
    key: String,
    /// `[batch, seq_len, heads, head_dim, value_dim]`.
    dims: [usize; 5],
    kv_heads: usize,
    spec: GpuSpec,
    chunks: ChunkPlan,
    /// Ranks per Ulysses group of the hybrid (`None`: the reference's rule).
    hybrid_degree: Option<usize>,
    schedule: Schedule,
}

/// A schedule by name, or the measured choice.
#[derive(Clone, Copy)]
enum Schedule {
    Fixed(Kind),
    /// `DistRank::tune` on the first call of a plan, kept for the plan's later calls.
    Tune,
}

fn schedule(name: &str) -> PyResult<Schedule> {
    if name == "tune" {
        return Ok(Schedule::Tune);
    }
    Kind::ALL.iter().find(|k| k.name() == name).map(|&k| Schedule::Fixed(k)).ok_or_else(|| {
        let names: Vec<_> = Kind::ALL.iter().map(|k| format!("{:?}", k.name())).collect();
        PyValueError::new_err(format!("schedule: unknown schedule {name:?}; expected {} or \"tune\"", names.join(", ")))
    })
}

impl RingCall {
    fn new(args: RingArgs<'_>, world: usize) -> PyResult<RingCall> {
        let (_, stream, dims, kv_heads, dtype_name, pattern, causal, scale, docs, layout, hybrid_degree, schedule_name) =
            args;
        let [batch, seq_len, ..] = dims;
        let spec = gpu_spec(pattern, causal, scale, (None, docs.as_ref()))?;
        let layout = layout::parse(&layout, seq_len, world, docs.as_ref().map(|d| (d, batch)))?;
        let chunks =
            ChunkPlan::new(seq_len, world, &layout).map_err(|e| PyValueError::new_err(format!("layout: {e}")))?;
        Ok(RingCall {
            stream,
            dtype: dtype(&dtype_name)?,
            key: format!("{dims:?} {kv_heads} {dtype_name} {spec:?} {layout:?} {hybrid_degree:?}"),
            dims,
            kv_heads,
            spec,
            chunks,
            hybrid_degree,
            schedule: schedule(&schedule_name)?,
        })
    }
}

/// A plan, once tuned its measured schedule, and this rank's prepared launches of it per
/// stream (their buffers belong to the stream that made them).
struct PlanEntry {
    plan: Arc<DistPlan>,
    tuned: Option<Kind>,
    prepared: HashMap<usize, RankState>,
}

/// What a group holds: its communicator, its GPU and the plans of its calls.
struct State {
    comm: Communicator,
    gpu: Arc<Gpu>,
    plans: HashMap<String, PlanEntry>,
}

// SAFETY: NCCL allows a communicator to be used from any thread, one call at a time
// (PyTorch's autograd runs the backward on its own device thread); the mutex around
// `State` makes every use exclusive, and each use binds the device's context first.
unsafe impl Send for State {}

/// At most this many plans are kept per group (a training loop uses one per layer shape).
const PLANS_MAX: usize = 32;

impl State {
    fn plan(&mut self, call: &RingCall) -> PyResult<Arc<DistPlan>> {
        if let Some(e) = self.plans.get(&call.key) {
            return Ok(e.plan.clone());
        }
        let [batch, _, heads, head_dim, value_dim] = call.dims;
        let plan = DistPlan::new(call.chunks.clone(), call.spec.clone(), batch, heads, head_dim)
            .and_then(|p| p.with_kv_heads(call.kv_heads))
            .and_then(|p| p.with_value_dim(value_dim))
            .and_then(|p| match call.hybrid_degree {
                Some(u) => p.with_hybrid_degree(u),
                None => Ok(p),
            })
            .map_err(dist_error)?;
        if self.plans.len() >= PLANS_MAX {
            self.plans.clear();
        }
        let plan = Arc::new(plan);
        self.plans.insert(call.key.clone(), PlanEntry { plan: plan.clone(), tuned: None, prepared: HashMap::new() });
        Ok(plan)
    }
}

/// One rank's membership of a ring: ringdil's NCCL communicator over the ranks of a
/// `torch.distributed` group, on one device.
#[pyclass(frozen, module = "ringdil._ringdil")]
pub struct RingGroup {
    state: Mutex<State>,
    rank: usize,
    world: usize,
}

impl RingGroup {
    /// Run `body` with the GIL released, on a view of the device that launches on the
    /// call's stream, with this rank of the call's plan (its launches prepared at the
    /// plan's first call on this stream and kept); then make the call's stream wait for
    /// the communication stream (module docs).
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        call: &RingCall,
        body: impl FnOnce(&Gpu, &mut DistRank<'_>, Kind) -> Result<T, DistError> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self.state.lock().expect("ring group lock");
            let plan = guard.plan(call)?;
            let State { comm, gpu, plans } = &mut *guard;
            gpu.context().bind_to_thread().map_err(|e| dist_error(e.into()))?;
            // SAFETY: `stream` is PyTorch's current stream of the group's device, alive for
            // the call (the caller's tensors are ordered on it, see `cuda.rs`).
            let view = unsafe { gpu.on_stream(call.stream as ringdil_cuda::external::CUstream) };
            let entry = plans.get_mut(&call.key).expect("the plan was just made");
            let kind = match call.schedule {
                Schedule::Fixed(k) => k,
                Schedule::Tune => entry.tuned.unwrap_or(Kind::Ring),
            };
            let mut rank = match entry.prepared.remove(&call.stream) {
                Some(s) => DistRank::with_state(&view, comm, &plan, s),
                None => DistRank::new(&view, comm, &plan, call.dtype),
            }
            .map_err(dist_error)?;
            // A call that failed may have left the state half-updated: it is not kept.
            let out = body(&view, &mut rank, kind).map_err(dist_error)?;
            entry.prepared.insert(call.stream, rank.into_state());
            view.stream().join(comm.stream()).map_err(|e| dist_error(e.into()))?;
            Ok(out)
        })
    }
}

/// The u64 pointers Python passes, as driver pointers.
fn dev_ptrs(x: &[u64]) -> Vec<CUdeviceptr> {
    x.iter().map(|&p| p as CUdeviceptr).collect()
}

#[pymethods]
impl RingGroup {
    /// Join the communicator `id` (from [`nccl_unique_id`] on rank 0) as `rank` of
    /// `world` on CUDA device `device`. Collective: every rank of the group calls it.
    /// The watchdog's timeout is `RINGDIL_TIMEOUT_S` (`docs/distributed.md`).
    #[new]
    fn new(py: Python<'_>, id: Vec<u8>, rank: usize, world: usize, device: usize) -> PyResult<Self> {
        let id: [u8; 128] = id.try_into().map_err(|v: Vec<u8>| {
            PyValueError::new_err(format!("id: an NCCL unique id is 128 bytes, got {}", v.len()))
        })?;
        let gpu = gpu(device)?;
        let state = py.detach(|| {
            let watch = timeout_from_env()?.map(|timeout| WatchOptions { timeout, board: None, exit_after: None });
            let comm = Communicator::init_watched(&gpu, rank, world, UniqueId(id), watch)?;
            Ok(State { comm, gpu, plans: HashMap::new() })
        });
        Ok(RingGroup { state: Mutex::new(state.map_err(dist_error)?), rank, world })
    }

    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    #[getter]
    fn world(&self) -> usize {
        self.world
    }

    /// The rows of each of this rank's pieces, in local order (the local rows cut into
    /// runs of consecutive global tokens; a zigzag rank has two).
    fn piece_lens(&self, py: Python<'_>, call: RingArgs<'_>) -> PyResult<Vec<usize>> {
        let call = RingCall::new(call, self.world)?;
        py.detach(|| {
            let mut state = self.state.lock().expect("ring group lock");
            let plan = state.plan(&call)?;
            Ok((0..plan.pieces(self.rank).len()).map(|i| plan.piece_dims(self.rank, i)[1]).collect())
        })
    }

    /// The schedule a call runs: its own, or for `"tune"` the measured choice (timing
    /// every schedule's forward on these inputs on the plan's first call; collective).
    /// `ptrs`: q, k, v pieces.
    fn schedule(&self, py: Python<'_>, call: RingArgs<'_>, q: Vec<u64>, k: Vec<u64>, v: Vec<u64>) -> PyResult<String> {
        let call = RingCall::new(call, self.world)?;
        let kind = match call.schedule {
            Schedule::Fixed(k) => return Ok(k.name().to_string()),
            Schedule::Tune => {
                let known = self.state.lock().expect("ring group lock").plans.get(&call.key).and_then(|e| e.tuned);
                match known {
                    Some(k) => k,
                    None => {
                        let me = self.rank;
                        let tuned = self.run(py, &call, |view, rank, _| {
                            // SAFETY: contiguous PyTorch tensors of the plan's piece shapes.
                            let data = unsafe {
                                view.borrow_rank_data(rank.plan(), me, [&dev_ptrs(&q), &dev_ptrs(&k), &dev_ptrs(&v)])?
                            };
                            rank.tune(&data, &Kind::ALL, 3)
                        })?;
                        let mut state = self.state.lock().expect("ring group lock");
                        if let Some(e) = state.plans.get_mut(&call.key) {
                            e.tuned = Some(tuned.schedule);
                        }
                        tuned.schedule
                    }
                }
            }
        };
        Ok(kind.name().to_string())
    }

    /// `out[i]`, `lse[i]` (f32, PyTorch-allocated, piece `i`'s `[b, rows, h, d_v]` and
    /// `[b, h, rows]`) <- this rank's output of the whole sequence's attention. `q`, `k`,
    /// `v`: pointers of the contiguous 16-bit pieces.
    fn forward(&self, py: Python<'_>, call: RingArgs<'_>, ptrs: [Vec<u64>; 5]) -> PyResult<()> {
        let [q, k, v, out, lse] = ptrs;
        let call = RingCall::new(call, self.world)?;
        let me = self.rank;
        self.run(py, &call, |view, rank, kind| {
            let plan = rank.plan();
            // SAFETY: contiguous PyTorch tensors of the plan's piece shapes (checked in
            // Python; the counts here).
            let data = unsafe { view.borrow_rank_data(plan, me, [&dev_ptrs(&q), &dev_ptrs(&k), &dev_ptrs(&v)])? };
            let mut dst = unsafe { view.borrow_partials(plan, me, &dev_ptrs(&out), &dev_ptrs(&lse))? };
            let parts = rank.forward(kind, &data)?;
            for (d, p) in dst.iter_mut().zip(&parts) {
                view.stream().memcpy_dtod(&p.out, &mut d.out)?;
                view.stream().memcpy_dtod(&p.lse, &mut d.lse)?;
            }
            Ok(())
        })
    }

    /// `dq[i]`, `dk[i]`, `dv[i]` (f32, PyTorch-allocated, shaped like the pieces: dV at
    /// `d_v`) <- the gradients of this rank's pieces for upstream gradient pieces `dout`
    /// (16-bit, `d_v` wide), from the forward's f32 `out` and `lse` pieces; the same
    /// schedule as the forward.
    fn backward(&self, py: Python<'_>, call: RingArgs<'_>, ptrs: [Vec<u64>; 9]) -> PyResult<()> {
        let [q, k, v, out, lse, dout, dq, dk, dv] = ptrs;
        let call = RingCall::new(call, self.world)?;
        let me = self.rank;
        self.run(py, &call, |view, rank, kind| {
            let plan = rank.plan();
            // SAFETY: as in `forward`; dq, dk, dv are f32 tensors shaped like q, k, v.
            let data = unsafe { view.borrow_rank_data(plan, me, [&dev_ptrs(&q), &dev_ptrs(&k), &dev_ptrs(&v)])? };
            let fwd = unsafe { view.borrow_partials(plan, me, &dev_ptrs(&out), &dev_ptrs(&lse))? };
            let dout = unsafe { view.borrow_douts(plan, me, &dev_ptrs(&dout))? };
            let grads = rank.backward(kind, &data, &fwd, &dout)?;
            for (ptrs_of, got) in [(&dq, &grads.dq), (&dk, &grads.dk), (&dv, &grads.dv)] {
                if ptrs_of.len() != got.len() {
                    return Err(DistError::ShapeMismatch {
                        what: "gradient pieces",
                        expected: vec![got.len()],
                        got: vec![ptrs_of.len()],
                    });
                }
                for (&p, g) in ptrs_of.iter().zip(got) {
                    // SAFETY: a PyTorch f32 tensor of the piece's length.
                    let mut d = unsafe { view.borrow_f32("gradient pieces", p as CUdeviceptr, g.len())? };
                    view.stream().memcpy_dtod(g, &mut *d)?;
                }
            }
            Ok(())
        })
    }
}

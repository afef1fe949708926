//! # ringdil-cuda: GPU kernels for ringdil's attention
//!
//! Flash-attention-style kernels written in CUDA C++ (`kernels/`, one concept per file;
//! [`kernel_source`] assembles them), compiled at run time by NVRTC for the device's
//! architecture (e.g. `sm_90a`) and cached per process ([`compile`]).
//! The CUDA libraries are loaded dynamically (cudarc `dynamic-loading`), so this crate
//! builds, and its host-side tests run, on machines without CUDA.
//!
//! * **Forward** ([`Gpu::forward_into`]): tiled online softmax on tensor cores (bf16 or
//!   f16 inputs, f32 accumulation), head dims 64, 96, 128, 192 and 256 (and v's 128 with
//!   q's 192, MLA's pair: [`Shape::value_dim`], on mma.sync), returns the output
//!   and the log-sum-exp, i.e. a `ringdil_reference::Partial`. On H100/H200 (sm_90a) at
//!   d = 64, 128, 192 and 256 a flash-attention-3-style kernel: asynchronous warpgroup
//!   MMAs (`wgmma`), a producer warpgroup loading K/V by TMA ([`tma`]), mbarrier-handed
//!   stages; elsewhere, and for d = 96, `mma.sync.m16n8k16` ([`family::Family`] chooses,
//!   per head dim and pass: the backward at 192 and 256 is mma.sync's; its table holds
//!   every tile size).
//! * **Masks** are evaluated in the kernel from *global* indices: causal, key padding,
//!   sliding window, block-sparse, and LongNet dilated branches (segment, dilation,
//!   per-head offset). Tiles a mask leaves empty are not visited at all: the host builds a
//!   tile plan ([`plan`]) and the kernel walks only its entries. Sequence lengths are
//!   arbitrary and a query/key global offset ([`Chunk`]) makes one launch one ring step.
//! * **Dilated branches** use LongNet's identity: the softmax-denominator combine of the
//!   branches *is* the online-softmax merge of the branch partials. Over a whole sequence
//!   each branch runs on its kept rows only (compact index space, gather on load, scatter
//!   on store), so a branch `(w, r)` costs `n*w/r^2` per head, not `n^2`.
//! * **Merge** ([`Gpu::merge_into`]): the reference's `Partial::merge`, into a new buffer.
//! * **Backward** ([`Gpu::backward_into`]): dQ, dK, dV from the saved LSE, same masks; on
//!   H100/H200 every product is a `wgmma` and dQ is added by TMA reductions.
//!   [`Gpu::backward_add_into`] adds the gradients into running sums instead (a ring
//!   rank's steps).
//!
//! * **Distributed** ([`dist`]): ring attention over NCCL (one process per GPU), the
//!   pattern-aware plan, all-gather, virtual ranks on one GPU, a launcher.
//!
//! The f64 reference is the specification: [`check`] compares every kernel with it.
//! Design notes: `docs/gpu.md` (kernels) and `docs/gpu-patterns.md` (masks and patterns).

pub mod backward;
pub mod batch_row;
pub mod check;
pub mod compile;
pub mod convert;
pub mod dilated_expr;
pub mod dist;
pub mod error;
pub mod expr_source;
pub mod external;
pub mod family;
pub mod forward;
pub mod gpu;
pub mod kernel_source;
pub mod launch;
pub mod mask_table;
pub mod output_scale;
pub mod params;
pub mod plan;
pub mod pool;
pub mod programs;
pub mod ptx_cache;
pub mod shape;
pub mod spec;
pub mod spec_documents;
pub mod tensors;
pub mod tma;
pub mod union_pieces;
pub mod variant;

pub use error::{CudaError, Result};
pub use family::Family;
pub use gpu::Gpu;
pub use shape::{Chunk, Dtype, Shape};
pub use spec::{GpuPattern, GpuSpec};
pub use tensors::{DeviceGrads, DevicePartial, DeviceTensor, GradsMut, Prepared};
pub use variant::Variant;

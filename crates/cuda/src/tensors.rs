//! Device-side data: input tensors, forward partials, gradients, and a prepared call (its
//! validated launches with their tile plans on the device).

use crate::gpu::Kernels;
use crate::launch::LaunchSpec;
use crate::params::Params;
use crate::shape::{Dtype, Shape};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::{Arc, Mutex};

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
/// gradients into its own, `Gpu::backward_add_into`).
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
    pub(crate) shape: Shape,
    pub(crate) dtype: Dtype,
    /// The factor of every head's finished output (`GpuSpec::output_scale`): 1, or `1/G`
    /// for the head-group combine.
    pub(crate) out_scale: f32,
    /// The caller applies `out_scale` itself ([`Prepared::defer_output_scale`]: a
    /// distributed schedule, which merges and sums this call's results first).
    pub(crate) scale_deferred: bool,
    pub(crate) launches: Vec<(LaunchSpec, DevicePlan)>,
    pub(crate) key_len: Option<CudaSlice<i32>>,
    pub(crate) block_mask: Option<CudaSlice<u8>>,
    /// Packed sequences: each position's document's first and last position
    /// ([`crate::plan::documents::position_spans`]).
    pub(crate) doc_spans: Option<(CudaSlice<i32>, CudaSlice<i32>)>,
    pub(crate) kernels: Arc<Kernels>,
    /// delta = rowsum(d_out * out) of the backward pass.
    pub(crate) delta: CudaSlice<f32>,
    /// The forward's lse as the backward reads it: lse * log2(e), +inf for -inf.
    pub(crate) lse2: CudaSlice<f32>,
    /// The wgmma forward's work counters (`Params::work`, [`crate::params::WORK_COUNTERS`]),
    /// zero between launches. Behind a lock because a launch writes them through a shared
    /// borrow of the call (its launches are borrowed from it too), and taken mutably so
    /// that cudarc records that write: a launch of this call on another stream waits for
    /// it instead of claiming from counters still in use.
    pub(crate) work: Mutex<CudaSlice<u32>>,
}

/// One launch's tile plans on the device (CSR: row pointers and column indices).
pub(crate) struct DevicePlan {
    pub(crate) fwd_ptr: CudaSlice<i32>,
    pub(crate) fwd_idx: CudaSlice<i32>,
    pub(crate) fwd_full: CudaSlice<u8>,
    pub(crate) cols_ptr: CudaSlice<i32>,
    pub(crate) cols_idx: CudaSlice<i32>,
    pub(crate) cols_full: CudaSlice<u8>,
}
impl Prepared {
    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The kernel family the call was planned for and launches (its module's:
    /// [`crate::Gpu::family_for`]).
    pub fn family(&self) -> crate::family::Family {
        self.kernels.family
    }

    /// The host-side launch specs (plans, parameters) of this call.
    pub fn launches(&self) -> impl Iterator<Item = &LaunchSpec> {
        self.launches.iter().map(|(l, _)| l)
    }

    /// The launch that writes every row, if one does (a plain launch over all heads:
    /// [`LaunchSpec::writes_every_row`]): it lays the ground the others merge or add into.
    pub(crate) fn ground_launch(&self) -> Option<usize> {
        self.launches.iter().position(|(l, _)| l.writes_every_row())
    }

    /// `params` with the tables launch `l` reads over batch row `row` on: the key lengths
    /// from that row's; the call's table buffer at the launch's `table_offset` (its block
    /// mask, mask table or offset table; segment starts where it reads segments); and the
    /// document spans, its own in that buffer ([`LaunchSpec::buffer_spans`]) else the
    /// call's documents'. 0 for what the call does not have. The forward and the backward
    /// fill these alike.
    pub(crate) fn with_tables(&self, params: Params, l: &LaunchSpec, row: usize, st: &Arc<CudaStream>) -> Params {
        let mask = self.block_mask.as_ref().map_or(0, |x| x.device_ptr(st).0 + l.table_offset as u64);
        let (doc_first, doc_last) = l.buffer_spans(mask).unwrap_or_else(|| {
            self.doc_spans.as_ref().map_or((0, 0), |(f, e)| (f.device_ptr(st).0, e.device_ptr(st).0))
        });
        Params {
            key_len: self.key_len.as_ref().map_or(0, |x| x.device_ptr(st).0 + 4 * row as u64),
            block_mask: mask,
            seg_start: if l.reads_segments() { mask } else { 0 },
            doc_first,
            doc_last,
            ..params
        }
    }

    /// Launch indices with [`Prepared::ground_launch`] first, then the others in order.
    pub(crate) fn launch_order(&self) -> impl Iterator<Item = usize> + '_ {
        let ground = self.ground_launch();
        ground.into_iter().chain((0..self.launches.len()).filter(move |&i| Some(i) != ground))
    }
}

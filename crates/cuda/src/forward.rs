//! The forward calls: attention into a partial (or merged into an accumulator), the
//! merge of two partials, and the merge identity.

use crate::error::{CudaError, Result};
use crate::family::Family;
use crate::gpu::{Gpu, elementwise, launch_config};
use crate::launch::LaunchSpec;
use crate::params::Params;
use crate::shape::Dtype;
use crate::tensors::{DevicePartial, DevicePlan, DeviceTensor, Prepared};
use crate::tma::{Elem, TensorMap, TensorPair};
use crate::variant::Variant;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, PushKernelArg};

/// Where a forward launch writes: an f32 partial, or (one launch writing every row once)
/// the output in the inputs' 16-bit type and the f32 LSE.
pub(crate) enum Dest<'a> {
    Partial(&'a mut DevicePartial),
    Half(&'a mut DeviceTensor, &'a mut CudaSlice<f32>),
}

impl Gpu {
    /// Attention of `q` over `k`, `v` (a [`Partial`](ringdil_reference::Partial) on the
    /// device), written to `out`. A plain launch over all heads writes every row
    /// ([`LaunchSpec::writes_every_row`]): the call runs one first, else fills `out` with
    /// the merge identity; every other launch (a dilated pattern's branches) merges its
    /// result into `out` in the kernel's epilogue (the
    /// online-softmax merge, fused: no scratch partials, no separate merge pass). Each
    /// launch's epilogue applies the pattern's output scale ([`crate::output_scale`]).
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
        // A launch that writes every row goes first and lays the ground the others merge
        // into; without one, the merge identity does. Either way the first launch writes:
        // after the fill its rows hold the identity, and `merge(identity, x) = x`, so
        // merging would only read them back (a lone compact branch: 1/r of the output).
        if prep.ground_launch().is_none() {
            self.fill_empty(prep, out)?;
        }
        for (n, i) in prep.launch_order().enumerate() {
            self.forward_launch(prep, &prep.launches[i], q, k, v, Dest::Partial(out), n > 0)?;
        }
        Ok(())
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
        prep.refuse_scaled("merging a pattern that scales its output (the head-group combine) into a running result")?;
        prep.launches.iter().try_for_each(|l| self.forward_launch(prep, l, q, k, v, Dest::Partial(acc), true))
    }

    /// One launch writing `out` (`accumulate`: merging into it; rows the launch does
    /// not visit keep what they hold).
    #[allow(clippy::too_many_arguments)] // one launch's buffers, as the kernel takes them
    pub(crate) fn forward_launch(
        &self,
        prep: &Prepared,
        (l, plan): &(LaunchSpec, DevicePlan),
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        out: Dest<'_>,
        accumulate: bool,
    ) -> Result<()> {
        let st = &self.stream;
        // A launch over one batch row reads and writes from that row on.
        let r = l.row_elements(&prep.shape);
        let (qp, _a) = q.data.device_ptr(st);
        let (kp, _b) = k.data.device_ptr(st);
        let (vp, _c) = v.data.device_ptr(st);
        let (qp, kp, vp) = (qp + 2 * r.q as u64, kp + 2 * r.k as u64, vp + 2 * r.v as u64);
        // Written by the kernel: `_mut`, so that cudarc records a write that another stream
        // (a ring's NCCL stream) waits for before it reads the buffer.
        let half = matches!(out, Dest::Half(..));
        let ((op, _d), (lp, _e)) = match out {
            Dest::Partial(p) => (p.out.device_ptr_mut(st), p.lse.device_ptr_mut(st)),
            Dest::Half(o, lse) => (o.data.device_ptr_mut(st), lse.device_ptr_mut(st)),
        };
        let (op, lp) = (op + if half { 2 } else { 4 } * r.out as u64, lp + 4 * r.lse as u64);
        let (pp, _f) = plan.fwd_ptr.device_ptr(st);
        let (pi, _g) = plan.fwd_idx.device_ptr(st);
        let (pf, _h) = plan.fwd_full.device_ptr(st);
        // The call's counters, held (lock and write record) until the launch is queued.
        let mut work = prep.work.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (wp, _w) = work.device_ptr_mut(st);
        let params = Params {
            q: qp,
            k: kp,
            v: vp,
            out: op,
            lse: lp,
            plan_ptr: pp,
            plan_idx: pi,
            plan_full: pf,
            work: wp,
            plan_rows: l.fwd.rows_per_batch(),
            accumulate: accumulate as i32,
            half_out: half as i32,
            ..l.params
        };
        let params = prep.with_output_scale(prep.with_tables(params, l, r.row, st));
        let dims = l.forward_dims(self.sms);
        let kernel = prep.kernels.get(dims.kernel);
        let mut launch = st.launch_builder(kernel);
        launch.arg(&params);
        let (kd, vd) = (r.dims(k.dims), r.dims(v.dims));
        let maps = self.tile_maps(l.family, l, (kp, kd), (vp, vd), Family::forward_kv_box_rows(l.fwd_k_tile))?;
        // wgmma: the query tiles come by TMA too, through a map of Q.
        let q_map = match maps {
            Some(_) => Some(TensorMap::new(qp, Elem::U16, r.dims(q.dims), l.row_stride())?),
            None => None,
        };
        if let (Some(maps), Some(q_map)) = (&maps, &q_map) {
            launch.arg(maps).arg(q_map);
        }
        // SAFETY: params and maps describe live buffers of the validated shapes.
        unsafe { launch.launch(launch_config(&dims)) }?;
        Ok(())
    }

    /// The TMA maps of the two tensors a wgmma kernel of launch `l` streams (`a`, `b`:
    /// each one's address and dims, K's and V's head dims apart), in boxes of `box_rows`
    /// rows: a compact branch's kept rows are its dilation apart. None for an mma kernel
    /// (`family`: the pass's, [`LaunchSpec::backward_family`]).
    pub(crate) fn tile_maps(
        &self,
        family: Family,
        l: &LaunchSpec,
        a: (cudarc::driver::sys::CUdeviceptr, [usize; 4]),
        b: (cudarc::driver::sys::CUdeviceptr, [usize; 4]),
        box_rows: usize,
    ) -> Result<Option<TensorPair>> {
        Ok(match family {
            Family::Mma => None,
            Family::Wgmma => Some(TensorPair::new(a, b, l.row_stride(), box_rows)?),
        })
    }

    fn fill_empty(&self, prep: &Prepared, p: &mut DevicePartial) -> Result<()> {
        // The output's zeros by the driver's memset (as the backward clears dq), the LSE's
        // -inf by a kernel.
        self.stream.memset_zeros(&mut p.out)?;
        let n = p.lse.len();
        let mut b = self.stream.launch_builder(&prep.kernels.fill);
        b.arg(&mut p.lse).arg(&n);
        // SAFETY: n is the buffer's own length.
        unsafe { b.launch(elementwise(n)) }?;
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
        // The merge kernel only depends on the head dim; any element type's module has it
        // (and an unsupported head dim is refused there, by name).
        let kernels = self.kernels(Variant::new(Dtype::Bf16, d))?;
        let (batch, rows, heads) = (batch as i32, rows as i32, heads as i32);
        let n = a.out.len();
        let mut l = self.stream.launch_builder(&kernels.merge);
        l.arg(&a.out).arg(&a.lse).arg(&b.out).arg(&b.lse).arg(&mut out.out).arg(&mut out.lse);
        l.arg(&batch).arg(&rows).arg(&heads);
        // SAFETY: all three partials have the checked dims.
        unsafe { l.launch(elementwise(n)) }?;
        Ok(())
    }
}

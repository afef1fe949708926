//! The backward calls: dQ, dK, dV from the saved LSE, written or added into running sums.

use crate::error::{CudaError, Result};
use crate::gpu::{Gpu, elementwise, launch_config};
use crate::params::Params;
use crate::plan::IndexMap;
use crate::tensors::{DeviceGrads, DevicePartial, DeviceTensor, GradsMut, Prepared};
use crate::tma::{Elem, TensorMap};
use cudarc::driver::{DevicePtr, DevicePtrMut, PushKernelArg};

impl Gpu {
    /// Zeroed gradient buffers for `prep` (a memset on the stream: no host buffer, no
    /// copy; a call over a whole long sequence clears hundreds of MiB).
    pub fn alloc_grads(&self, prep: &Prepared) -> Result<DeviceGrads> {
        let s = prep.shape;
        let z = |n: usize| self.stream.alloc_zeros::<f32>(n.max(1));
        Ok(DeviceGrads { dq: z(s.q_len())?, dk: z(s.k_len())?, dv: z(s.k_len())? })
    }

    /// dQ, dK, dV of the finished forward result `fwd` for the upstream gradient `dout`,
    /// from the saved LSE, written into `grads`. One kernel per key tile: dK and dV rows are
    /// written by one block (a single launch overwrites them; several, as dilated branches,
    /// and grouped-query attention, whose group of query heads adds into one K/V head,
    /// clear the buffers and accumulate); dQ rows
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
        // dK, dV rows are added into (never written by one block) when several launches
        // reach them (dilated branches, compact launches) or when a K/V head's query heads
        // (grouped-query attention) add their contributions from different blocks.
        let accumulate = add
            || s.kv_group() > 1
            || prep.launches.len() > 1
            || prep.launches.iter().any(|(l, _)| matches!(l.map, IndexMap::Compact { .. }));
        if !add {
            st.memset_zeros(grads.dq)?;
            if accumulate {
                st.memset_zeros(grads.dk)?;
                st.memset_zeros(grads.dv)?;
            }
        }
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
                doc_first: prep.doc_spans.as_ref().map_or(0, |x| x.0.device_ptr(st).0),
                doc_last: prep.doc_spans.as_ref().map_or(0, |x| x.1.device_ptr(st).0),
                plan_rows: l.cols.rows_per_batch(),
                accumulate: accumulate as i32,
                ..l.params
            };
            let cols =
                Params { plan_ptr: plan.cols_ptr.device_ptr(st).0, plan_idx: plan.cols_idx.device_ptr(st).0, ..base };
            let dims = l.backward_dims();
            let maps = self.tile_maps(l, qp, dop, dout.dims)?;
            let dq_map = match maps {
                Some(_) => Some(TensorMap::new(dqp, Elem::F32, dout.dims, l.row_stride())?),
                None => None,
            };
            let mut launch = st.launch_builder(prep.kernels.get(dims.kernel));
            launch.arg(&cols);
            if let (Some(maps), Some(dq_map)) = (&maps, &dq_map) {
                launch.arg(maps).arg(dq_map);
            }
            // SAFETY: params and maps describe live buffers of the validated shapes.
            unsafe { launch.launch(launch_config(&dims)) }?;
        }
        Ok(())
    }
}

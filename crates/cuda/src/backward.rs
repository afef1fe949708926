//! The backward calls: dQ, dK, dV from the saved LSE, written or added into running sums.

use crate::error::{CudaError, Result};
use crate::gpu::{DELTA_LANES, Gpu, elementwise, launch_config};
use crate::params::Params;
use crate::plan::IndexMap;
use crate::shape::Shape;
use crate::tensors::{DeviceGrads, DevicePartial, DeviceTensor, GradsMut, Prepared};
use crate::tma::{Elem, TensorMap};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, PushKernelArg};

/// What the backward reads of the forward: its f32 partial, or its 16-bit output (delta
/// is then taken from the rounded output, as flash-attention does) and the f32 LSE; or
/// its f32 partial whose per-row inputs an earlier backward already took ([`RowInputs`]).
pub(crate) enum Saved<'a> {
    Partial(&'a DevicePartial),
    Half(&'a DeviceTensor, &'a CudaSlice<f32>),
    Rows(&'a DevicePartial, &'a RowInputs),
}

/// The per-query-row inputs `bwd_delta` takes from a forward result and its upstream
/// gradient, as the backward kernels read them: `delta = rowsum(dO * O)` (which the
/// kernels divide by a pattern's output scale, [`crate::output_scale`]) and `lse2 = lse
/// log2(e)`. They depend on the query rows' output and gradient alone, so calls over the
/// same query rows and different keys (a ring's steps and pieces) can share them: the
/// pass over O and dO (`b n h d` values each) runs once instead of once per call.
pub struct RowInputs {
    delta: CudaSlice<f32>,
    lse2: CudaSlice<f32>,
}

/// Where dK and dV go: f32 buffers (written, or added into), or 16-bit tensors written
/// once by the epilogue.
pub(crate) enum KvDest<'a> {
    F32(&'a mut CudaSlice<f32>, &'a mut CudaSlice<f32>),
    Half(&'a mut DeviceTensor, &'a mut DeviceTensor),
}

/// Whether dK, dV rows are added into rather than written by one block: with `add`, when
/// several launches reach them (dilated branches, compact launches), or when a K/V head's
/// query heads (grouped-query attention) add their contributions from different blocks.
pub(crate) fn kv_accumulates(prep: &Prepared, add: bool) -> bool {
    add || prep.shape.kv_group() > 1
        || prep.launches.len() > 1
        || prep.launches.iter().any(|(l, _)| matches!(l.map, IndexMap::Compact { .. }))
}

/// Of a call that adds nothing into running sums (`!add`) and whose blocks own their dK,
/// dV rows (no grouped-query heads, whose query heads add into one K/V head from several
/// blocks): the launch that writes its dK, dV rows instead of adding them, the first of
/// [`Prepared::launch_order`]. Every backward block stores all its key rows (zeros where
/// no query sees them), so when that launch is [`Prepared::ground_launch`] no row is left
/// for a zeroing to cover and the other launches add onto it; otherwise it writes onto
/// zeroed buffers, which only saves reading its rows back.
fn kv_writer(prep: &Prepared, add: bool) -> Option<usize> {
    if add || prep.shape.kv_group() > 1 {
        return None;
    }
    prep.launch_order().next()
}

/// A 16-bit output (`[batch, q_rows, heads, value_dim]`) and its f32 LSE.
pub(crate) fn check_half(s: &Shape, out: &DeviceTensor, lse: &CudaSlice<f32>) -> Result<()> {
    if out.dims != s.out_dims() || out.data.len() != s.out_len() || lse.len() != s.lse_len() {
        return Err(CudaError::ShapeMismatch {
            what: "16-bit forward result",
            expected: s.out_dims().to_vec(),
            got: out.dims.to_vec(),
        });
    }
    Ok(())
}

impl Gpu {
    /// Zeroed gradient buffers for `prep` (a memset on the stream: no host buffer, no
    /// copy; a call over a whole long sequence clears hundreds of MiB).
    pub fn alloc_grads(&self, prep: &Prepared) -> Result<DeviceGrads> {
        let s = prep.shape;
        let z = |n: usize| self.stream.alloc_zeros::<f32>(n.max(1));
        Ok(DeviceGrads { dq: z(s.q_len())?, dk: z(s.k_len())?, dv: z(s.v_len())? })
    }

    /// dQ, dK, dV of the finished forward result `fwd` for the upstream gradient `dout`,
    /// from the saved LSE, written into `grads`. One kernel per key tile: dK and dV rows are
    /// written by one block. With several launches (dilated branches) the first writes
    /// and the others add (`kv_writer`; the buffers are cleared first unless that launch
    /// writes every row); under grouped-query attention, whose group of query heads adds
    /// into one K/V head, the buffers are cleared and every launch adds. dQ rows receive
    /// f32 reductions from every key tile, so dq is always cleared first.
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
        let g = grads.as_mut();
        self.backward(prep, q, k, v, Saved::Partial(fwd), dout, g.dq, KvDest::F32(g.dk, g.dv), false)
    }

    /// [`Gpu::backward_into`], but the gradients are added to what `grads` holds: every
    /// launch accumulates and nothing is cleared. A ring rank sums its steps' gradients
    /// this way without a temporary per step (and the copies that would add it in). With
    /// `rows`, the per-row inputs that an earlier backward of the same query rows, forward
    /// result `fwd` and upstream gradient `dout` took ([`Gpu::row_inputs`]), those are
    /// copied, not recomputed (rows of another shape are refused; that they come from the
    /// same `fwd` and `dout` is the caller's to keep).
    #[allow(clippy::too_many_arguments)] // the device buffers of one backward pass, as the kernels take them
    pub fn backward_add_into(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        fwd: &DevicePartial,
        rows: Option<&RowInputs>,
        dout: &DeviceTensor,
        grads: GradsMut<'_>,
    ) -> Result<()> {
        let saved = rows.map_or(Saved::Partial(fwd), |r| Saved::Rows(fwd, r));
        self.backward(prep, q, k, v, saved, dout, grads.dq, KvDest::F32(grads.dk, grads.dv), true)
    }

    /// The per-row inputs that the last backward of `prep` took (a copy: `prep`'s buffers
    /// are rewritten by its next backward), for [`Gpu::backward_add_into`] of other calls
    /// over the same query rows, forward result and upstream gradient.
    pub fn row_inputs(&self, prep: &Prepared) -> Result<RowInputs> {
        Ok(RowInputs { delta: self.stream.clone_dtod(&prep.delta)?, lse2: self.stream.clone_dtod(&prep.lse2)? })
    }

    /// The backward's launches after the checks: `saved` gives delta and the LSE, dQ is
    /// always f32 (reductions), dK and dV are f32 or (written once) 16-bit.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        saved: Saved<'_>,
        dout: &DeviceTensor,
        dq: &mut CudaSlice<f32>,
        kv: KvDest<'_>,
        add: bool,
    ) -> Result<()> {
        self.check_inputs(prep, q, k, v)?;
        let s = prep.shape;
        match saved {
            Saved::Partial(fwd) => self.check_partial("forward result", prep, fwd)?,
            Saved::Half(out, lse) => check_half(&s, out, lse)?,
            Saved::Rows(fwd, rows) => {
                self.check_partial("forward result", prep, fwd)?;
                for (what, got) in [("delta rows", rows.delta.len()), ("lse2 rows", rows.lse2.len())] {
                    if got != prep.delta.len() {
                        return Err(CudaError::ShapeMismatch {
                            what,
                            expected: vec![prep.delta.len()],
                            got: vec![got],
                        });
                    }
                }
            }
        }
        if dout.dims != s.out_dims() {
            return Err(CudaError::ShapeMismatch {
                what: "d_out",
                expected: s.out_dims().to_vec(),
                got: dout.dims.to_vec(),
            });
        }
        let (dk_len, dv_len) = match &kv {
            KvDest::F32(dk, dv) => (dk.len(), dv.len()),
            KvDest::Half(dk, dv) => (dk.data.len(), dv.data.len()),
        };
        for (what, got, len) in [("dq", dq.len(), s.q_len()), ("dk", dk_len, s.k_len()), ("dv", dv_len, s.v_len())] {
            if got != len {
                return Err(CudaError::ShapeMismatch { what, expected: vec![len], got: vec![got] });
            }
        }
        if add {
            prep.refuse_scaled(
                "adding the gradients of a pattern that scales its output (the head-group combine) into running sums",
            )?;
        }
        let accumulate = kv_accumulates(prep, add);
        let half = matches!(kv, KvDest::Half(..));
        if half && accumulate {
            return Err(CudaError::Unsupported {
                what: "16-bit dK, dV where rows are added into (several launches or grouped-query heads)",
            });
        }
        let st = &self.stream;
        // delta and lse2: bwd_delta over the output and dO, or copies of an earlier one's.
        let launch = match saved {
            Saved::Partial(fwd) => {
                let mut l = st.launch_builder(&prep.kernels.delta);
                l.arg(&dout.data).arg(&fwd.out).arg(&fwd.lse);
                Some(l)
            }
            Saved::Half(out, lse) => {
                let mut l = st.launch_builder(&prep.kernels.delta_half);
                l.arg(&dout.data).arg(&out.data).arg(lse);
                Some(l)
            }
            Saved::Rows(_, rows) => {
                st.memcpy_dtod(&rows.delta, &mut prep.delta)?;
                st.memcpy_dtod(&rows.lse2, &mut prep.lse2)?;
                None
            }
        };
        if let Some(mut l) = launch {
            let (batch, rows, heads) = (s.batch as i32, s.q_rows as i32, s.heads as i32);
            l.arg(&mut prep.delta).arg(&mut prep.lse2);
            l.arg(&batch).arg(&rows).arg(&heads);
            // SAFETY: shapes checked above.
            unsafe { l.launch(elementwise(s.lse_len() * DELTA_LANES)) }?;
        }
        if !add {
            st.memset_zeros(&mut *dq)?;
        }
        match kv {
            KvDest::F32(dk, dv) => {
                let writer = kv_writer(prep, add);
                let writes_every_row = writer.is_some() && writer == prep.ground_launch();
                if !add && accumulate && !writes_every_row {
                    st.memset_zeros(&mut *dk)?;
                    st.memset_zeros(&mut *dv)?;
                }
                // Written (`_mut`: a ring sends dk, dv on its NCCL stream right after).
                let ((dkp, _i), (dvp, _j)) = (dk.device_ptr_mut(st), dv.device_ptr_mut(st));
                self.backward_launches(prep, [q, k, v, dout], dq, [dkp, dvp], accumulate, writer, false)
            }
            KvDest::Half(dk, dv) => {
                let ((dkp, _i), (dvp, _j)) = (dk.data.device_ptr_mut(st), dv.data.device_ptr_mut(st));
                self.backward_launches(prep, [q, k, v, dout], dq, [dkp, dvp], accumulate, None, true)
            }
        }
    }

    /// The backward's attention launches, one per launch of `prep`, reducing dQ into `dq`
    /// and writing or adding (`accumulate`) dK, dV at `dkp`, `dvp` (f32, or 16-bit with
    /// `half`); launch `writer` ([`kv_writer`]) goes first and writes its dK, dV rows.
    #[allow(clippy::too_many_arguments)]
    fn backward_launches(
        &self,
        prep: &Prepared,
        [q, k, v, dout]: [&DeviceTensor; 4],
        dq: &mut CudaSlice<f32>,
        [dkp, dvp]: [cudarc::driver::sys::CUdeviceptr; 2],
        accumulate: bool,
        writer: Option<usize>,
        half: bool,
    ) -> Result<()> {
        let st = &self.stream;
        let order = writer.into_iter().chain((0..prep.launches.len()).filter(|&i| Some(i) != writer));
        for i in order {
            let (l, plan) = &prep.launches[i];
            let accumulate = accumulate && Some(i) != writer;
            // A launch over one batch row reads and writes from that row on.
            let r = l.row_elements(&prep.shape);
            let at = |p: u64, bytes: u64, elements: usize| p + bytes * elements as u64;
            let (qp, _a) = q.data.device_ptr(st);
            let (kp, _b) = k.data.device_ptr(st);
            let (vp, _c) = v.data.device_ptr(st);
            let (dop, _f) = dout.data.device_ptr(st);
            let (dlp, _g) = prep.delta.device_ptr(st);
            let (l2p, _e) = prep.lse2.device_ptr(st);
            // Written (`_mut`: a ring sends dk, dv on its NCCL stream right after).
            let (dqp, _h) = dq.device_ptr_mut(st);
            let (qp, kp, vp, dop) = (at(qp, 2, r.q), at(kp, 2, r.k), at(vp, 2, r.v), at(dop, 2, r.out));
            let (dlp, l2p, dqp) = (at(dlp, 4, r.lse), at(l2p, 4, r.lse), at(dqp, 4, r.q));
            let kv_bytes = if half { 2 } else { 4 };
            let (dkp, dvp) = (at(dkp, kv_bytes, r.k), at(dvp, kv_bytes, r.v));
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
                plan_rows: l.cols.rows_per_batch(),
                accumulate: accumulate as i32,
                half_out: half as i32,
                ..l.params
            };
            let base = prep.with_output_scale(prep.with_tables(base, l, r.row, st));
            let cols = Params {
                plan_ptr: plan.cols_ptr.device_ptr(st).0,
                plan_idx: plan.cols_idx.device_ptr(st).0,
                plan_full: plan.cols_full.device_ptr(st).0,
                ..base
            };
            let dims = l.backward_dims();
            let (qd, dod) = (r.dims(q.dims), r.dims(dout.dims));
            let maps = self.tile_maps(l.backward_family(), l, (qp, qd), (dop, dod), crate::family::TILE)?;
            let dq_map = match maps {
                Some(_) => Some(TensorMap::new(dqp, Elem::F32, qd, l.row_stride())?),
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

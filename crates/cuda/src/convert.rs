//! Results in the inputs' 16-bit type, on request. f32 stays the default (the checks
//! compare f32 results with the f64 reference, and a ring step merges into its running
//! f32 output).
//!
//! Two ways to get them, bit-identical (each f32 value rounded once to nearest, ties to
//! even, exactly as `half::bf16::from_f32` / `half::f16::from_f32` do):
//! * **from the epilogue** ([`Gpu::forward_half_into`], [`Gpu::backward_half_into`]): where
//!   one launch writes every element once (the output of a single-launch pattern; dK, dV
//!   without grouped-query reductions or dilated branches), the kernel rounds as it stores
//!   (`Params::half_out`): 2 bytes written per element instead of 4, and no pass after;
//! * **by a pass** ([`Gpu::to_half_into`], [`Gpu::output_half`], [`Gpu::grads_half`]) over
//!   an f32 result: what the epilogue cannot do (dQ, which receives f32 reductions from
//!   every key tile; outputs merged over branches; gradients added over a group). One read
//!   of 4 bytes and one write of 2 per element: at n = 4096, 16 heads, d = 128 a tensor
//!   is 201 MB of traffic, about 70 us on an H100, 14% of a causal forward.
//!
//! The backward from a 16-bit output takes `delta = rowsum(dO * O)` from the rounded
//! output, as flash-attention does (a training step keeps only that output).

use crate::backward::{KvDest, Saved, check_half, kv_accumulates};
use crate::error::{CudaError, Result};
use crate::forward::Dest;
use crate::gpu::{Gpu, elementwise};
use crate::shape::Dtype;
use crate::tensors::{DeviceGrads, DevicePartial, DeviceTensor, Prepared};
use crate::variant::Variant;
use cudarc::driver::{CudaSlice, PushKernelArg};

impl Gpu {
    /// `y <- dtype(x)`, element by element; `x` and `y` must have the same length.
    pub fn to_half_into(&self, dtype: Dtype, head_dim: usize, x: &CudaSlice<f32>, y: &mut DeviceTensor) -> Result<()> {
        let n: usize = y.dims.iter().product();
        if x.len() != n || y.data.len() != n {
            return Err(CudaError::ShapeMismatch { what: "16-bit result", expected: vec![x.len()], got: vec![n] });
        }
        if n % 2 != 0 {
            return Err(CudaError::ShapeMismatch {
                what: "16-bit result (even length)",
                expected: vec![n + 1],
                got: vec![n],
            });
        }
        // The conversion only depends on the element type; the head dim's module has it.
        let kernels = self.kernels(Variant::new(dtype, head_dim))?;
        let pairs = n / 2;
        let mut l = self.stream.launch_builder(&kernels.to_half);
        l.arg(x).arg(&mut y.data).arg(&pairs);
        // SAFETY: x holds n f32, y n 16-bit words (read as n / 2 32-bit words).
        unsafe { l.launch(elementwise(pairs)) }?;
        Ok(())
    }

    /// `f32 -> dtype` into a new `dims` tensor.
    fn to_half(&self, dtype: Dtype, x: &CudaSlice<f32>, dims: [usize; 4]) -> Result<DeviceTensor> {
        // SAFETY: every element is written by the conversion below.
        let data = unsafe { self.stream.alloc::<u16>(dims.iter().product())? };
        let mut y = DeviceTensor { data, dims };
        self.to_half_into(dtype, dims[3], x, &mut y)?;
        Ok(y)
    }

    /// The forward output of `prep` in its input type (the LSE stays f32, in `out.lse`).
    pub fn output_half(&self, prep: &Prepared, out: &DevicePartial) -> Result<DeviceTensor> {
        self.check_partial("forward result", prep, out)?;
        self.to_half(prep.dtype, &out.out, out.dims)
    }

    /// dQ, dK, dV of `prep` in its input type.
    pub fn grads_half(&self, prep: &Prepared, g: &DeviceGrads) -> Result<[DeviceTensor; 3]> {
        let s = prep.shape;
        Ok([
            self.to_half(prep.dtype, &g.dq, s.q_dims())?,
            self.to_half(prep.dtype, &g.dk, s.k_dims())?,
            self.to_half(prep.dtype, &g.dv, s.v_dims())?,
        ])
    }

    /// The forward output in the inputs' 16-bit type (`out`, `[batch, q_rows, heads,
    /// value_dim]`) and the f32
    /// LSE (`[batch, heads, rows]`): rounded by the epilogue when one launch writes every
    /// row (and no output scale follows), else computed in f32 and rounded by one pass
    /// (module docs).
    pub fn forward_half_into(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        out: &mut DeviceTensor,
        lse: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.check_inputs(prep, q, k, v)?;
        check_half(&prep.shape, out, lse)?;
        match prep.launches.as_slice() {
            [only] if only.0.writes_every_row() && !prep.scales_output() => {
                self.forward_launch(prep, only, q, k, v, Dest::Half(out, lse), false)
            }
            _ => {
                let mut part = self.alloc_partial(prep)?;
                self.forward_into(prep, q, k, v, &mut part)?;
                self.to_half_into(prep.dtype, prep.shape.value_dim, &part.out, out)?;
                Ok(self.stream.memcpy_dtod(&part.lse, lse)?)
            }
        }
    }

    /// dQ, dK, dV in the inputs' 16-bit type, from the 16-bit forward output `out` and its
    /// LSE ([`Gpu::forward_half_into`]) for the upstream gradient `dout`. dK, dV come from
    /// the epilogue when each row is written once, else from f32 sums and a pass; dQ
    /// always from f32 reductions and a pass (module docs). The f32 sums are allocated
    /// here, on the stream; [`Gpu::backward_half_with`] takes them from the caller.
    #[allow(clippy::too_many_arguments)] // the device buffers of one backward pass
    pub fn backward_half_into(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        saved: (&DeviceTensor, &CudaSlice<f32>),
        dout: &DeviceTensor,
        grads: [&mut DeviceTensor; 3],
    ) -> Result<()> {
        let [dq_len, dk_len, dv_len] = half_scratch_lens(prep);
        // SAFETY: the backward clears every f32 sum before its reductions.
        let mut dq32 = unsafe { self.stream.alloc::<f32>(dq_len)? };
        let mut kv32 = match dk_len {
            0 => None,
            n => Some(unsafe { (self.stream.alloc::<f32>(n)?, self.stream.alloc::<f32>(dv_len)?) }),
        };
        let kv = kv32.as_mut().map(|(a, b)| (a, b));
        self.backward_half_with(prep, q, k, v, saved, dout, grads, HalfScratch { dq: &mut dq32, kv })
    }

    /// [`Gpu::backward_half_into`] with the f32 sums in the caller's memory, of
    /// [`half_scratch_lens`] (a caller with its own allocator, as PyTorch has, keeps the
    /// memory in its accounts and its cache).
    #[allow(clippy::too_many_arguments)] // the device buffers of one backward pass
    pub fn backward_half_with(
        &self,
        prep: &mut Prepared,
        q: &DeviceTensor,
        k: &DeviceTensor,
        v: &DeviceTensor,
        (out, lse): (&DeviceTensor, &CudaSlice<f32>),
        dout: &DeviceTensor,
        [dq, dk, dv]: [&mut DeviceTensor; 3],
        scratch: HalfScratch<'_>,
    ) -> Result<()> {
        let s = prep.shape;
        let want = half_scratch_lens(prep);
        let lens = [
            scratch.dq.len(),
            scratch.kv.as_ref().map_or(0, |(a, _)| a.len()),
            scratch.kv.as_ref().map_or(0, |(_, b)| b.len()),
        ];
        if lens != want {
            return Err(CudaError::ShapeMismatch {
                what: "f32 backward sums (dq, dk, dv)",
                expected: want.to_vec(),
                got: lens.to_vec(),
            });
        }
        match scratch.kv {
            Some((dk32, dv32)) => {
                let kv = KvDest::F32(dk32, dv32);
                self.backward(prep, q, k, v, Saved::Half(out, lse), dout, scratch.dq, kv, false)?;
                self.to_half_into(prep.dtype, s.head_dim, dk32, dk)?;
                self.to_half_into(prep.dtype, s.value_dim, dv32, dv)?;
            }
            None => {
                self.backward(prep, q, k, v, Saved::Half(out, lse), dout, scratch.dq, KvDest::Half(dk, dv), false)?
            }
        }
        self.to_half_into(prep.dtype, s.head_dim, scratch.dq, dq)
    }
}

/// The f32 sums of a 16-bit backward ([`Gpu::backward_half_with`]): dQ's, and dK's and
/// dV's where rows are added into (several launches, grouped-query heads, compact rows).
pub struct HalfScratch<'a> {
    pub dq: &'a mut CudaSlice<f32>,
    pub kv: Option<(&'a mut CudaSlice<f32>, &'a mut CudaSlice<f32>)>,
}

/// Elements of the f32 sums a 16-bit backward of `prep` needs: `[dQ, dK, dV]` (0 for dK,
/// dV when the epilogue writes them in 16 bits).
pub fn half_scratch_lens(prep: &Prepared) -> [usize; 3] {
    let s = prep.shape;
    match kv_accumulates(prep, false) {
        true => [s.q_len().max(1), s.k_len().max(1), s.v_len().max(1)],
        false => [s.q_len().max(1), 0, 0],
    }
}

//! Calls on memory and a stream that another library owns: PyTorch's tensors, allocated by
//! its caching allocator, and its current stream (the `ringdil` Python package).
//!
//! Nothing is copied: a borrowed buffer is a [`CudaSlice`] over the caller's device
//! pointer for the length of one call ([`Borrowed`]), given back (never freed) when it is
//! dropped, and [`Gpu::on_stream`] launches on the caller's stream, so the kernels are
//! ordered after the work that produced the inputs and before whatever reads the results,
//! exactly like the caller's own kernels. The tile plans and per-call scratch
//! ([`Prepared`](crate::Prepared)) are this crate's own allocations, made on that stream.

use crate::dist::{DistError, DistPlan, DistResult, RankData};
use crate::error::{CudaError, Result};
use crate::gpu::Gpu;
use crate::tensors::{DevicePartial, DeviceTensor};
use cudarc::driver::CudaSlice;
pub use cudarc::driver::sys::{CUdeviceptr, CUstream};
use std::ops::{Deref, DerefMut};

/// Device data that this crate must hand back, not free: its buffers' pointers are
/// released with [`CudaSlice::leak`].
pub trait GiveBack {
    fn give_back(self);
}

impl<T> GiveBack for CudaSlice<T> {
    fn give_back(self) {
        self.leak();
    }
}

impl<T: GiveBack> GiveBack for Vec<T> {
    fn give_back(self) {
        self.into_iter().for_each(GiveBack::give_back);
    }
}

impl GiveBack for DeviceTensor {
    fn give_back(self) {
        self.data.give_back();
    }
}

impl GiveBack for DevicePartial {
    fn give_back(self) {
        self.out.give_back();
        self.lse.give_back();
    }
}

impl GiveBack for RankData {
    fn give_back(self) {
        self.q.give_back();
        self.k.give_back();
        self.v.give_back();
    }
}

/// A device value over memory another library owns, usable where this crate takes its
/// own ([`DeviceTensor`], [`DevicePartial`], [`DeviceGrads`](crate::DeviceGrads)); dropping it gives the
/// memory back untouched (on every path, errors included).
pub struct Borrowed<T: GiveBack>(Option<T>);

impl<T: GiveBack> Deref for Borrowed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("a Borrowed holds its value until dropped")
    }
}

impl<T: GiveBack> DerefMut for Borrowed<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("a Borrowed holds its value until dropped")
    }
}

impl<T: GiveBack> Drop for Borrowed<T> {
    fn drop(&mut self) {
        if let Some(x) = self.0.take() {
            x.give_back();
        }
    }
}

impl Gpu {
    /// This device's context and loaded modules, launching on `stream` instead of this
    /// view's own (PyTorch: `torch.cuda.current_stream().cuda_stream`; 0 is the legacy
    /// default stream). Cheap: no module is compiled or loaded again.
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream of this device's primary context, and stay
    /// alive while the returned view, or anything allocated through it, is in use.
    pub unsafe fn on_stream(&self, stream: CUstream) -> Gpu {
        // SAFETY: the caller's promise above.
        self.with_stream(unsafe { self.context().wrap_borrowed_stream(stream) })
    }

    /// # Safety
    /// `ptr` must address `len` values of `T` on this device, allocated for as long as the
    /// returned slice lives (it is leaked, never freed: see [`Borrowed`]).
    unsafe fn borrow_slice<T>(&self, ptr: CUdeviceptr, len: usize) -> CudaSlice<T> {
        // SAFETY: the caller's promise.
        unsafe { self.stream.upgrade_device_ptr(ptr, len) }
    }

    /// A `[batch, rows, heads, head_dim]` 16-bit tensor at `ptr` (contiguous), named
    /// `what` in errors. Errors when `ptr` is not 16-byte aligned.
    ///
    /// # Safety
    /// `ptr` must address `dims`' product of 16-bit values on this device, allocated while
    /// the result lives.
    pub unsafe fn borrow_tensor(
        &self,
        what: &'static str,
        ptr: CUdeviceptr,
        dims: [usize; 4],
    ) -> Result<Borrowed<DeviceTensor>> {
        check_aligned(what, &[ptr])?;
        // SAFETY: the caller's promise.
        let data = unsafe { self.borrow_slice(ptr, dims.iter().product()) };
        Ok(Borrowed(Some(DeviceTensor { data, dims })))
    }

    /// f32 values at `ptr`, `len` of them, named `what` in errors. Errors when `ptr` is
    /// not 16-byte aligned.
    ///
    /// # Safety
    /// `ptr` must address `len` f32 values on this device, allocated while the result lives.
    pub unsafe fn borrow_f32(
        &self,
        what: &'static str,
        ptr: CUdeviceptr,
        len: usize,
    ) -> Result<Borrowed<CudaSlice<f32>>> {
        check_aligned(what, &[ptr])?;
        // SAFETY: the caller's promise.
        Ok(Borrowed(Some(unsafe { self.borrow_slice(ptr, len) })))
    }

    /// Rank `rank`'s upstream gradient pieces of `plan` (d_out): one contiguous 16-bit
    /// `[batch, rows, heads, value_dim]` tensor per piece at `ptrs[i]`. Errors when the
    /// number of pointers is not the rank's number of pieces.
    ///
    /// # Safety
    /// Each pointer must address its piece's [`DistPlan::out_piece_dims`] of 16-bit values
    /// on this device, allocated while the result lives.
    pub unsafe fn borrow_douts(
        &self,
        plan: &DistPlan,
        rank: usize,
        ptrs: &[CUdeviceptr],
    ) -> DistResult<Borrowed<Vec<DeviceTensor>>> {
        let dims: Vec<_> = (0..plan.pieces(rank).len()).map(|i| plan.out_piece_dims(rank, i)).collect();
        // SAFETY: the caller's promise.
        Ok(Borrowed(Some(unsafe { self.borrow_each("d_out pieces", ptrs, &dims)? })))
    }

    /// Rank `rank`'s input pieces of `plan`: `q[i]` shaped [`DistPlan::piece_dims`],
    /// `k[i]` [`DistPlan::kv_piece_dims`] and `v[i]` [`DistPlan::v_piece_dims`] (16-bit,
    /// contiguous).
    ///
    /// # Safety
    /// As [`Gpu::borrow_douts`], for each of the three lists.
    pub unsafe fn borrow_rank_data(
        &self,
        plan: &DistPlan,
        rank: usize,
        [q, k, v]: [&[CUdeviceptr]; 3],
    ) -> DistResult<Borrowed<RankData>> {
        let pieces = plan.pieces(rank).len();
        let q_dims: Vec<_> = (0..pieces).map(|i| plan.piece_dims(rank, i)).collect();
        let kv_dims: Vec<_> = (0..pieces).map(|i| plan.kv_piece_dims(rank, i)).collect();
        let v_dims: Vec<_> = (0..pieces).map(|i| plan.v_piece_dims(rank, i)).collect();
        // SAFETY: the caller's promise. A list of the wrong length or a misaligned piece
        // fails before anything is borrowed, so nothing borrowed can be dropped (and freed)
        // on that path.
        for (what, ptrs) in [("q pieces", q), ("k pieces", k), ("v pieces", v)] {
            check_count(what, ptrs, pieces)?;
            check_aligned(what, ptrs)?;
        }
        unsafe {
            Ok(Borrowed(Some(RankData {
                q: self.borrow_each("q pieces", q, &q_dims)?,
                k: self.borrow_each("k pieces", k, &kv_dims)?,
                v: self.borrow_each("v pieces", v, &v_dims)?,
            })))
        }
    }

    /// Rank `rank`'s finished forward pieces: f32 `out[i]` shaped
    /// [`DistPlan::out_piece_dims`] and f32 `lse[i]` `[batch, heads, rows]`.
    ///
    /// # Safety
    /// Each pointer must address that many f32 values on this device, allocated while the
    /// result lives.
    pub unsafe fn borrow_partials(
        &self,
        plan: &DistPlan,
        rank: usize,
        out: &[CUdeviceptr],
        lse: &[CUdeviceptr],
    ) -> DistResult<Borrowed<Vec<DevicePartial>>> {
        let pieces = plan.pieces(rank).len();
        check_count("out pieces", out, pieces)?;
        check_count("lse pieces", lse, pieces)?;
        check_aligned("out pieces", out)?;
        check_aligned("lse pieces", lse)?;
        let parts = (0..pieces)
            .map(|i| {
                let dims = plan.out_piece_dims(rank, i);
                let [batch, rows, heads, _] = dims;
                // SAFETY: the caller's promise.
                unsafe {
                    DevicePartial {
                        out: self.borrow_slice(out[i], dims.iter().product()),
                        lse: self.borrow_slice(lse[i], batch * heads * rows),
                        dims,
                    }
                }
            })
            .collect();
        Ok(Borrowed(Some(parts)))
    }

    /// One borrowed tensor per pointer, shaped `dims[i]`.
    unsafe fn borrow_each(
        &self,
        what: &'static str,
        ptrs: &[CUdeviceptr],
        dims: &[[usize; 4]],
    ) -> DistResult<Vec<DeviceTensor>> {
        check_count(what, ptrs, dims.len())?;
        check_aligned(what, ptrs)?;
        // SAFETY: the caller's promise.
        Ok(ptrs
            .iter()
            .zip(dims)
            .map(|(&p, &d)| DeviceTensor { data: unsafe { self.borrow_slice(p, d.iter().product()) }, dims: d })
            .collect())
    }
}

/// Every address in `ptrs` on a 16-byte boundary, checked before anything is borrowed (a
/// borrowed slice dropped on an error path would be freed).
fn check_aligned(what: &'static str, ptrs: &[CUdeviceptr]) -> Result<()> {
    match ptrs.iter().find(|&&p| p % 16 != 0) {
        Some(&address) => Err(CudaError::Misaligned { what, address }),
        None => Ok(()),
    }
}

/// A list of `got` buffers where the plan has `pieces`.
fn check_count(what: &'static str, ptrs: &[CUdeviceptr], pieces: usize) -> DistResult<()> {
    if ptrs.len() == pieces {
        Ok(())
    } else {
        Err(DistError::ShapeMismatch { what, expected: vec![pieces], got: vec![ptrs.len()] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_off_a_16_byte_boundary_is_an_error_naming_it() {
        assert!(check_aligned("q pieces", &[0x7f00_0000_0000, 0x7f00_0000_0010]).is_ok());
        let e = check_aligned("q pieces", &[0x7f00_0000_0000, 0x7f00_0000_0002]).unwrap_err();
        assert!(matches!(e, CudaError::Misaligned { what: "q pieces", address: 0x7f00_0000_0002 }));
        assert!(e.to_string().starts_with("q pieces: device address 0x7f0000000002 is not a multiple of 16 bytes"));
    }
}

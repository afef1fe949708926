//! Calls on memory and a stream that another library owns: PyTorch's tensors, allocated by
//! its caching allocator, and its current stream (the `ringdil` Python package).
//!
//! Nothing is copied: a borrowed buffer is a [`CudaSlice`] over the caller's device
//! pointer for the length of one call ([`Borrowed`]), given back (never freed) when it is
//! dropped, and [`Gpu::on_stream`] launches on the caller's stream, so the kernels are
//! ordered after the work that produced the inputs and before whatever reads the results,
//! exactly like the caller's own kernels. The tile plans and per-call scratch
//! ([`Prepared`](crate::Prepared)) are this crate's own allocations, made on that stream.

use crate::gpu::Gpu;
use crate::tensors::{DeviceGrads, DevicePartial, DeviceTensor};
use cudarc::driver::CudaSlice;
pub use cudarc::driver::sys::{CUdeviceptr, CUstream};
use std::ops::{Deref, DerefMut};

/// Device data that this crate must hand back, not free: its buffers' pointers are
/// released with [`CudaSlice::leak`].
pub trait GiveBack {
    fn give_back(self);
}

impl GiveBack for DeviceTensor {
    fn give_back(self) {
        self.data.leak();
    }
}

impl GiveBack for DevicePartial {
    fn give_back(self) {
        self.out.leak();
        self.lse.leak();
    }
}

impl GiveBack for DeviceGrads {
    fn give_back(self) {
        self.dq.leak();
        self.dk.leak();
        self.dv.leak();
    }
}

/// A device value over memory another library owns, usable where this crate takes its
/// own ([`DeviceTensor`], [`DevicePartial`], [`DeviceGrads`]); dropping it gives the
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

    /// A `[batch, rows, heads, head_dim]` 16-bit tensor at `ptr` (contiguous).
    ///
    /// # Safety
    /// `ptr` must address `dims`' product of 16-bit values on this device, allocated while
    /// the result lives.
    pub unsafe fn borrow_tensor(&self, ptr: CUdeviceptr, dims: [usize; 4]) -> Borrowed<DeviceTensor> {
        // SAFETY: the caller's promise.
        let data = unsafe { self.borrow_slice(ptr, dims.iter().product()) };
        Borrowed(Some(DeviceTensor { data, dims }))
    }

    /// A forward partial: f32 `out` shaped `dims` and f32 `lse` `[batch, heads, rows]`.
    ///
    /// # Safety
    /// `out` and `lse` must address that many f32 values on this device, allocated while
    /// the result lives.
    pub unsafe fn borrow_partial(
        &self,
        out: CUdeviceptr,
        lse: CUdeviceptr,
        dims: [usize; 4],
    ) -> Borrowed<DevicePartial> {
        let [batch, rows, heads, _] = dims;
        // SAFETY: the caller's promise.
        let (out, lse) =
            unsafe { (self.borrow_slice(out, dims.iter().product()), self.borrow_slice(lse, batch * heads * rows)) };
        Borrowed(Some(DevicePartial { out, lse, dims }))
    }

    /// f32 gradients: `dq` shaped `q_dims`, `dk` and `dv` shaped `k_dims`.
    ///
    /// # Safety
    /// Each pointer must address that many f32 values on this device, allocated while the
    /// result lives.
    pub unsafe fn borrow_grads(
        &self,
        [dq, dk, dv]: [CUdeviceptr; 3],
        q_dims: [usize; 4],
        k_dims: [usize; 4],
    ) -> Borrowed<DeviceGrads> {
        let (q_len, k_len) = (q_dims.iter().product(), k_dims.iter().product());
        // SAFETY: the caller's promise.
        let grads = unsafe {
            DeviceGrads {
                dq: self.borrow_slice(dq, q_len),
                dk: self.borrow_slice(dk, k_len),
                dv: self.borrow_slice(dv, k_len),
            }
        };
        Borrowed(Some(grads))
    }
}

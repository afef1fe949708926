//! The device's stream-ordered memory pool, which every buffer of this crate comes from
//! (cudarc allocates with `cuMemAllocAsync` on the device's current pool when the
//! driver supports it), kept warm, and its usage.
//!
//! # Why keep freed memory
//! A pool's release threshold defaults to 0: at every synchronisation the driver
//! returns all freed memory to the OS, so the next allocation maps fresh physical pages.
//! A ring step allocates its receive blocks, partials and gradient buffers and frees
//! them when the step's results are merged; with threshold 0 each pass re-maps hundreds
//! of MiB, which costs milliseconds per pass and stalls the transfers that write into
//! those buffers. With the threshold at its maximum, freed memory stays mapped in the
//! pool and the next pass reuses it: the caching behaviour PyTorch's allocator gives.
//! [`Gpu::trim_pool`] hands it back on request.
//!
//! # Memory figures
//! `total - free` of the device counts what the pool holds, used or not. The pool's own
//! counters separate them: `used` is what live buffers take, `reserved` what the pool
//! has mapped; each has a high-water mark, resettable, so a benchmark reads the peak of
//! one pass ([`Gpu::pool_usage`], [`Gpu::reset_pool_peaks`]).

use crate::error::Result;
use crate::gpu::Gpu;
use cudarc::driver::sys::{CUmemPool_attribute as Attr, CUmemoryPool};
use cudarc::driver::{CudaContext, result};

/// Bytes used by live buffers and mapped by the pool, now and at their peaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    pub used: u64,
    pub used_peak: u64,
    pub reserved: u64,
    pub reserved_peak: u64,
}

/// The device's current pool, `None` without stream-ordered allocation (cudarc then
/// allocates with `cuMemAlloc`, which has no pool).
fn current_pool(ctx: &CudaContext) -> Result<Option<CUmemoryPool>> {
    if !ctx.has_async_alloc() {
        return Ok(None);
    }
    ctx.bind_to_thread()?;
    // SAFETY: the device comes from a live context.
    Ok(Some(unsafe { result::device::get_mem_pool(ctx.cu_device()) }?))
}

fn get(pool: CUmemoryPool, attr: Attr) -> Result<u64> {
    let mut value = 0u64;
    // SAFETY: every attribute read here is a cuuint64_t.
    unsafe { result::mem_pool::get_attribute(pool, attr, (&raw mut value).cast()) }?;
    Ok(value)
}

fn set(pool: CUmemoryPool, attr: Attr, mut value: u64) -> Result<()> {
    // SAFETY: every attribute written here is a cuuint64_t.
    unsafe { result::mem_pool::set_attribute(pool, attr, (&raw mut value).cast()) }?;
    Ok(())
}

/// Keep freed memory in the device's pool across synchronisations (module docs).
pub(crate) fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    match current_pool(ctx)? {
        Some(pool) => set(pool, Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX),
        None => Ok(()),
    }
}

impl Gpu {
    /// The pool's usage (`None`: this device allocates without a pool).
    pub fn pool_usage(&self) -> Result<Option<PoolUsage>> {
        let Some(pool) = current_pool(self.context())? else { return Ok(None) };
        Ok(Some(PoolUsage {
            used: get(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_peak: get(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
            reserved: get(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_peak: get(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        }))
    }

    /// Restart both high-water marks from the current values.
    pub fn reset_pool_peaks(&self) -> Result<()> {
        if let Some(pool) = current_pool(self.context())? {
            set(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
            set(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
        }
        Ok(())
    }

    /// Return the pool's unused memory to the device (after synchronising the stream, so
    /// that buffers freed on it count as unused).
    pub fn trim_pool(&self) -> Result<()> {
        self.synchronize()?;
        if let Some(pool) = current_pool(self.context())? {
            // SAFETY: a live pool; trimming to 0 keeps every allocation that is in use.
            unsafe { result::mem_pool::trim_to(pool, 0) }?;
        }
        Ok(())
    }
}

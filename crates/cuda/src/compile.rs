//! NVRTC compilation of the kernel modules, cached per process.
//!
//! A module is specialised for an NVRTC target (which implies the family) and a
//! [`Variant`] (element type, head dim, packed documents or not). Compilation happens at the first call that needs a module, so a contract
//! mismatch between host and kernels ([`crate::kernel_source`]) stops that first call with
//! NVRTC's message, naming the value.

use crate::error::{CudaError, Result};
use crate::family::Family;
use crate::kernel_source;
use crate::variant::Variant;
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// What a compiled module is specialised for: (NVRTC target, variant).
type PtxKey = (String, Variant);

/// PTX compiled by NVRTC, per [`PtxKey`], for the process.
static PTX_CACHE: OnceLock<Mutex<HashMap<PtxKey, Ptx>>> = OnceLock::new();

/// Benchmark knob: a directory of kernel files (the layout of `crates/cuda/kernels`)
/// compiled instead of the built-in ones: A/B runs of two kernel versions with one binary.
/// The contract header still comes from this binary's family table.
pub const SOURCE_ENV: &str = "RINGDIL_CUDA_SOURCE";
/// Benchmark knob: extra NVRTC options, whitespace-separated (e.g. `-DFAST_MASK=0`).
pub const DEFINES_ENV: &str = "RINGDIL_CUDA_DEFINES";

/// NVRTC-compile the module of (`family`, `variant`) for `arch`, once per
/// process. [`SOURCE_ENV`] and [`DEFINES_ENV`], read once per compile, replace the kernel
/// files and add options (for A/B benchmarks; unset in normal use).
pub fn compile(arch: &str, family: Family, variant: Variant) -> Result<Ptx> {
    let cache = PTX_CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (arch.to_string(), variant);
    if let Some(ptx) = cache.lock().expect("ptx cache lock").get(&key) {
        return Ok(ptx.clone());
    }
    let extra = std::env::var(DEFINES_ENV).unwrap_or_default();
    let dir = std::env::var_os(SOURCE_ENV).map(PathBuf::from);
    let ptx = compile_uncached(arch, family, variant, dir.as_deref(), &extra)?;
    cache.lock().expect("ptx cache lock").insert(key, ptx.clone());
    Ok(ptx)
}

/// One NVRTC compilation, no cache, no environment: what [`compile`] does, and what the
/// `kernels_compile` test runs for every module on machines with NVRTC and no GPU.
pub fn compile_uncached(
    arch: &str,
    family: Family,
    variant: Variant,
    dir: Option<&std::path::Path>,
    extra_options: &str,
) -> Result<Ptx> {
    let module = format!("attention_{arch}_{}", variant.tag());
    let source = kernel_source::translation_unit(family, variant, dir).map_err(|e| CudaError::Compile {
        module: module.clone(),
        log: format!("{SOURCE_ENV}={}: {e}", dir.map(|d| d.display().to_string()).unwrap_or_default()),
    })?;
    let mut options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()];
    options.extend(extra_options.split_whitespace().map(String::from));
    let opts = CompileOptions { options, name: Some(format!("{module}.cu")), ..Default::default() };
    cudarc::nvrtc::compile_ptx_with_opts(&source, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            CudaError::Compile { module, log: log.to_string_lossy().into_owned() }
        }
        other => CudaError::Compile { module, log: format!("{other:?}") },
    })
}

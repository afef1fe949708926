//! NVRTC compilation of the kernel modules, cached per process and on disk
//! ([`crate::ptx_cache`]).
//!
//! A module is specialised for an NVRTC target (which implies the family) and a
//! [`Variant`] (element type, head dim, packed documents or not). Compilation happens at the first call that needs a module, so a contract
//! mismatch between host and kernels ([`crate::kernel_source`]) stops that first call with
//! NVRTC's message, naming the value (a module that does not compile is never stored).

use crate::error::{CudaError, Result};
use crate::family::Family;
use crate::kernel_source;
use crate::ptx_cache;
use crate::variant::Variant;
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
/// process, or read it from the disk cache ([`ptx_cache::dir`]). [`SOURCE_ENV`] and
/// [`DEFINES_ENV`], read once per compile, replace the kernel files and add options (for
/// A/B benchmarks; unset in normal use); both are part of the disk cache's key.
pub fn compile(arch: &str, family: Family, variant: Variant) -> Result<Ptx> {
    let cache = PTX_CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (arch.to_string(), variant);
    if let Some(ptx) = cache.lock().expect("ptx cache lock").get(&key) {
        return Ok(ptx.clone());
    }
    let extra = std::env::var(DEFINES_ENV).unwrap_or_default();
    let dir = std::env::var_os(SOURCE_ENV).map(PathBuf::from);
    let unit = translation(arch, family, variant, dir.as_deref(), &extra)?;
    let ptx = match ptx_cache::dir() {
        Some(cache_dir) => compile_on_disk(&cache_dir, &unit)?.0,
        None => nvrtc(&unit)?,
    };
    cache.lock().expect("ptx cache lock").insert(key, ptx.clone());
    Ok(ptx)
}

/// Where a module's PTX came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Read from the disk cache (perhaps after waiting for the process compiling it).
    Disk,
    /// Compiled by NVRTC (and stored).
    Nvrtc,
}

/// The PTX of `unit` from the disk cache in `cache_dir` (stored already, or by another
/// process that was compiling it: [`ptx_cache::claim`]), else compiled by NVRTC and stored
/// there.
pub fn compile_on_disk(cache_dir: &Path, unit: &Translation) -> Result<(Ptx, Origin)> {
    let key = ptx_cache::key(&unit.source, &unit.options, nvrtc_version()?);
    match ptx_cache::claim(cache_dir, &unit.module, &key) {
        ptx_cache::Claim::Ready(text) => Ok((Ptx::from_src(text), Origin::Disk)),
        // The claim is held until the entry is stored (or NVRTC failed: then released).
        ptx_cache::Claim::Compile(_claim) => {
            let ptx = nvrtc(unit)?;
            ptx_cache::store(cache_dir, &unit.module, &key, &ptx.to_src());
            Ok((ptx, Origin::Nvrtc))
        }
    }
}

/// NVRTC's version (major, minor), part of the disk cache's key.
fn nvrtc_version() -> Result<(i32, i32)> {
    // SAFETY: only tries to dlopen the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CudaError::NvrtcMissing);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; two out-pointers to live ints.
    match unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) } {
        cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS => Ok((major, minor)),
        _ => Err(CudaError::NvrtcMissing),
    }
}

/// One module's compilation: its name, its whole source (the kernel files with the
/// generated headers) and NVRTC's options.
#[derive(Debug, Clone)]
pub struct Translation {
    pub module: String,
    pub source: String,
    pub options: Vec<String>,
}

/// The compilation of (`family`, `variant`) for `arch`: the kernel files of `dir` (the
/// built-in ones if `None`) and `extra_options` (whitespace-separated).
pub fn translation(
    arch: &str,
    family: Family,
    variant: Variant,
    dir: Option<&Path>,
    extra_options: &str,
) -> Result<Translation> {
    let module = format!("attention_{arch}_{}", variant.tag());
    let source = kernel_source::translation_unit(family, variant, dir).map_err(|e| CudaError::Compile {
        module: module.clone(),
        log: format!("{SOURCE_ENV}={}: {e}", dir.map(|d| d.display().to_string()).unwrap_or_default()),
    })?;
    let mut options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()];
    options.extend(extra_options.split_whitespace().map(String::from));
    Ok(Translation { module, source, options })
}

/// NVRTC on `unit`.
fn nvrtc(unit: &Translation) -> Result<Ptx> {
    let opts = CompileOptions {
        options: unit.options.clone(),
        name: Some(format!("{}.cu", unit.module)),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(&unit.source, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            CudaError::Compile { module: unit.module.clone(), log: log.to_string_lossy().into_owned() }
        }
        other => CudaError::Compile { module: unit.module.clone(), log: format!("{other:?}") },
    })
}

/// One NVRTC compilation, no cache, no environment: what [`compile`] does, and what the
/// `kernels_compile` test runs for every module on machines with NVRTC and no GPU.
pub fn compile_uncached(
    arch: &str,
    family: Family,
    variant: Variant,
    dir: Option<&Path>,
    extra_options: &str,
) -> Result<Ptx> {
    nvrtc(&translation(arch, family, variant, dir, extra_options)?)
}

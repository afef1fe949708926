//! What NVRTC makes of the kernel modules, without a GPU (NVRTC alone: put its library on
//! `LD_LIBRARY_PATH`):
//!
//! ```text
//! kernel_report ptxas FAMILY ARCH DTYPE HEAD_DIM[/VALUE_DIM] [docs]   registers and spills per kernel
//! kernel_report ptx DIR [FILTER]                                      PTX of every module of both families
//! ```
//!
//! `ptxas` compiles one module for a real architecture (`mma sm_90 bf16 256`; the wgmma
//! family needs `sm_90a`; `192/128` for v's head dim apart from q's) with
//! `--ptxas-options=-v` and prints the attention kernels' registers and spill bytes, from
//! the kernel files of `RINGDIL_CUDA_SOURCE` where it is set (so a copy with other register
//! counts or tiles is measured without a GPU; `ptx` reads them too). `ptx` writes the PTX
//! of every module of both families (every head dim and value-dim pair each family runs;
//! those whose names contain FILTER, e.g. `sm_80_Bf16_d64`) into DIR, one file per module:
//! two runs, before and after a change, compared with `cmp`, prove that the change leaves
//! those modules' code as it was.

use ringdil_cuda::compile::compile_uncached;
use ringdil_cuda::{Dtype, Family, Variant};
use std::ffi::CString;
use std::process::ExitCode;

const USAGE: &str = "usage: kernel_report ptxas (mma|wgmma) ARCH (bf16|f16) HEAD_DIM[/VALUE_DIM] [docs] | kernel_report ptx DIR [FILTER]";

fn ptx(dir: &str, filter: Option<&str>) -> Result<(), String> {
    let dir = std::path::Path::new(dir);
    let sources = std::env::var_os(ringdil_cuda::compile::SOURCE_ENV).map(std::path::PathBuf::from);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (family, arch) in [(Family::Mma, "sm_80"), (Family::Wgmma, "sm_90a")] {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            let equal = family.head_dims().iter().map(|&d| (d, d));
            let pairs = Family::value_dim_pairs().iter().copied().filter(|&(d, v)| family.has_value_dim(d, v));
            for (head_dim, value_dim) in equal.chain(pairs) {
                for documents in [false, true] {
                    let v = Variant::new(dtype, head_dim).with_value_dim(value_dim).with_documents(documents);
                    let name = format!("{arch}_{}", v.tag());
                    if filter.is_some_and(|f| !name.contains(f)) {
                        continue;
                    }
                    let ptx = compile_uncached(arch, family, v, sources.as_deref(), "").map_err(|e| e.to_string())?;
                    let path = dir.join(format!("{name}.ptx"));
                    std::fs::write(&path, ptx.to_src()).map_err(|e| format!("{}: {e}", path.display()))?;
                    println!("{}", path.display());
                }
            }
        }
    }
    Ok(())
}

fn ptxas(family: Family, arch: &str, variant: Variant) -> Result<(), String> {
    let dir = std::env::var_os(ringdil_cuda::compile::SOURCE_ENV).map(std::path::PathBuf::from);
    let src =
        ringdil_cuda::kernel_source::translation_unit(family, variant, dir.as_deref()).map_err(|e| e.to_string())?;
    let src = CString::new(src).map_err(|e| e.to_string())?;
    let prog = cudarc::nvrtc::result::create_program(&src, None).map_err(|e| format!("{e:?}"))?;
    let options = [format!("--gpu-architecture={arch}"), "--std=c++17".into(), "--ptxas-options=-v".into()];
    // SAFETY: `prog` is the program just created; the log is read before it is destroyed.
    let (compiled, log) = unsafe {
        let compiled = cudarc::nvrtc::result::compile_program(prog, &options);
        let log = cudarc::nvrtc::result::get_program_log(prog).map_err(|e| format!("{e:?}"))?;
        cudarc::nvrtc::result::destroy_program(prog).map_err(|e| format!("{e:?}"))?;
        (compiled, log)
    };
    let log: Vec<u8> = log.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    let log = String::from_utf8_lossy(&log);
    if compiled.is_err() {
        return Err(log.into_owned());
    }
    // ptxas prints, per entry: "Compiling entry function 'NAME'", the spill line, "Used N registers";
    // and warnings, and info lines on a "Potential Performance Loss" (every wgmma of a kernel
    // serialised, C7514 / C7515, where an accumulator may be touched while an MMA runs, or
    // for want of registers), which are printed whole.
    let mut kernel = None;
    for line in log.lines() {
        if line.contains("warning") || line.contains("Performance Loss") {
            println!("{arch} {} {}", variant.tag(), line.trim());
        } else if let Some(name) = line.split('\'').nth(1).filter(|_| line.contains("Compiling entry function")) {
            kernel = name.starts_with("attn_").then(|| name.to_string());
        } else if let Some(k) = &kernel
            && (line.contains("spill") || line.contains("Used"))
        {
            let text = line.split_once(" : ").map_or(line, |(_, r)| r);
            println!(
                "{arch} {} {k}: {}",
                variant.tag(),
                text.trim_start_matches("ptxas").trim_start_matches([' ', '.'])
            );
        }
    }
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["ptx", dir] => ptx(dir, None),
        ["ptx", dir, filter] => ptx(dir, Some(filter)),
        ["ptxas", family, arch, dtype, head_dim, rest @ ..] if rest.is_empty() || rest == ["docs"] => {
            let family = match *family {
                "mma" => Family::Mma,
                "wgmma" => Family::Wgmma,
                other => return Err(format!("family {other}: mma or wgmma")),
            };
            let dtype = match *dtype {
                "bf16" => Dtype::Bf16,
                "f16" => Dtype::F16,
                other => return Err(format!("element type {other}: bf16 or f16")),
            };
            let (d, dv) = head_dim.split_once('/').unwrap_or((head_dim, head_dim));
            let dim = |x: &str| x.parse::<usize>().map_err(|e| format!("head dim {x}: {e}"));
            let (head_dim, value_dim) = (dim(d)?, dim(dv)?);
            if !family.head_dims().contains(&head_dim) || !family.has_value_dim(head_dim, value_dim) {
                return Err(format!(
                    "the {} family has no kernels for d = {head_dim}, d_v = {value_dim}",
                    family.name()
                ));
            }
            let variant = Variant::new(dtype, head_dim).with_value_dim(value_dim);
            ptxas(family, arch, variant.with_documents(!rest.is_empty()))
        }
        _ => Err(USAGE.into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

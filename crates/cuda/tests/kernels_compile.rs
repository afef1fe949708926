//! Every kernel module compiles, and a host/kernel contract mismatch stops the compile.
//!
//! NVRTC alone is needed (no GPU): CI installs it from PyPI (`.ci/run`) and sets
//! `RINGDIL_REQUIRE_NVRTC=1`, so that there a missing library fails instead of skipping.
//! Elsewhere, without NVRTC, this prints "skipped: no NVRTC library" and counts nothing.
//!
//! The planted mismatches copy `kernels/` to a temporary directory, change one thing the
//! host also knows (a `Params` field's place, a shared-memory layout, a block's threads),
//! and expect NVRTC to refuse with the contract's message naming it.
//!
//! The modules compile on every core (about 8 minutes of NVRTC on one), each line with its time;
//! one of them through the disk cache (`ringdil_cuda::ptx_cache`), which must then read it back.

use ringdil_cuda::compile::{Origin, compile_on_disk, compile_uncached, translation};
use ringdil_cuda::{CudaError, Dtype, Family, Variant};
use std::path::{Path, PathBuf};

const TARGETS: [(Family, &str); 2] = [(Family::Mma, "sm_80"), (Family::Wgmma, "sm_90a")];

fn kernels_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

/// A copy of `kernels/` with `old` replaced by `new` in `file` (which must contain it).
fn planted(tag: &str, file: &str, old: &str, new: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringdil-kernels-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(kernels_dir()).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        if path.file_name().unwrap() == file {
            assert!(text.contains(old), "{file} no longer contains {old:?}: update the planted mismatch");
            text = text.replace(old, new);
        }
        std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
    }
    dir
}

/// Passes when NVRTC refuses the module of `kernels/` copy `dir` with a log containing `expect`.
fn refused(family: Family, arch: &str, dir: &Path, expect: &str, head_dim: usize) -> Result<(), String> {
    match compile_uncached(arch, family, Variant::new(Dtype::Bf16, head_dim), Some(dir), "") {
        Err(CudaError::Compile { log, .. }) if log.contains(expect) => Ok(()),
        Err(e) => Err(format!("{family:?}: refused, but without {expect:?}: {e}")),
        Ok(_) => Err(format!("{family:?}: compiled although {expect:?} should have stopped it")),
    }
}

/// A module with a mask expression compiled in (`expr_source`): every operator, `if`,
/// the head and the sequence variables, for `family` on `arch`; 64-bit (with
/// `i64::MIN`, which no 32-bit box holds) or, with `narrow`, a mask that fits 32 bits on
/// 4096 tokens and 8 heads (`ExprPattern::fits_i32`).
fn expression_module(family: Family, arch: &str, narrow: bool) -> Result<(), String> {
    use ringdil_reference::pattern::ExprPattern;
    use ringdil_reference::pattern::expr::Constants;
    let text = match narrow {
        true => {
            "if h >= H / 2 then abs(q - k) <= w0 || k < 4 else (q / 64 == k / 64 && !(q % 7 == 3)) \
                 || min(q, k) * -9 - 1 == max(n - q, abs(k)) % -3"
        }
        false => {
            "if h >= H / 2 then abs(q - k) <= w0 || k < 4 else (q / 64 == k / 64 && !(q % 7 == 3)) \
                  || min(q, k) * -9223372036854775807 - 1 == max(n - q, abs(k)) % -3"
        }
    };
    let constants: Constants = [("w0".to_string(), 16)].into_iter().collect();
    let pattern = ExprPattern::new(text, &constants).map_err(|e| format!("{text}: {e}"))?;
    if pattern.fits_i32(4096, 8) != narrow {
        return Err(format!("{text}: fits_i32(4096, 8) is not {narrow}"));
    }
    let variant = Variant::new(Dtype::Bf16, 64).with_expr(Some(ringdil_cuda::expr_source::register(&pattern, 4096, 8)));
    compile_uncached(arch, family, variant, None, "").map(|_| ()).map_err(|e| e.to_string())
}

/// One check: its name and the compile that decides it.
type Job = (String, Box<dyn FnOnce() -> Result<(), String> + Send>);

/// `compile_uncached` for one module, reduced to pass / the error's text, named `name`.
fn compile_job(name: String, arch: &'static str, family: Family, variant: Variant) -> Job {
    (name, Box::new(move || compile_uncached(arch, family, variant, None, "").map(|_| ()).map_err(|e| e.to_string())))
}

/// [`compile_job`] named by the module.
fn compiles(arch: &'static str, family: Family, variant: Variant) -> Job {
    compile_job(format!("{arch} {} compiles", variant.tag()), arch, family, variant)
}

/// Compiles the module of `variant` through the disk cache ([`compile_on_disk`]) into an
/// empty directory, then again: the first comes from NVRTC and leaves one entry, the
/// second is read from it, the same PTX text.
fn compiles_through_disk_cache(arch: &'static str, family: Family, variant: Variant) -> Job {
    let name = format!("{arch} {} compiles, then is read from the disk cache", variant.tag());
    let job = move || {
        let dir = std::env::temp_dir().join(format!("ringdil-ptx-cache-{}", std::process::id()));
        drop(std::fs::remove_dir_all(&dir));
        let unit = translation(arch, family, variant, None, "").map_err(|e| e.to_string())?;
        let (first, from) = compile_on_disk(&dir, &unit).map_err(|e| e.to_string())?;
        let (second, again) = compile_on_disk(&dir, &unit).map_err(|e| e.to_string())?;
        let entries = std::fs::read_dir(&dir).map_err(|e| e.to_string())?.count();
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
        match (from, again, entries) {
            (Origin::Nvrtc, Origin::Disk, 1) if first.to_src() == second.to_src() => Ok(()),
            (Origin::Nvrtc, Origin::Disk, 1) => Err("the entry read back differs from NVRTC's PTX".into()),
            other => Err(format!("expected (Nvrtc, Disk, 1 entry), got {other:?}")),
        }
    };
    (name, Box::new(job))
}

/// Runs the jobs on as many threads as the machine has cores (NVRTC compiles separate
/// programs concurrently; one module takes seconds to tens of seconds, and CI's 2 cores
/// would otherwise idle one), and prints each result in the jobs' order with its time.
fn run(jobs: Vec<Job>) -> Vec<String> {
    let names: Vec<String> = jobs.iter().map(|(name, _)| name.clone()).collect();
    // Reversed, so that popping the back takes the jobs in their order.
    let queue = std::sync::Mutex::new(jobs.into_iter().map(|(_, job)| job).enumerate().rev().collect::<Vec<_>>());
    let results = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(names.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let Some((i, job)) = queue.lock().unwrap().pop() else { break };
                    let start = std::time::Instant::now();
                    let r = job();
                    results.lock().unwrap().push((i, r, start.elapsed().as_secs_f64()));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, ..)| *i);
    let mut failures = Vec::new();
    for (i, r, seconds) in results {
        match r {
            Ok(()) => println!("ok   {} ({seconds:.1} s)", names[i]),
            Err(e) => {
                println!("FAIL {} ({seconds:.1} s): {e}", names[i]);
                failures.push(names[i].clone());
            }
        }
    }
    println!("{} passed, {} failed", names.len() - failures.len(), failures.len());
    failures
}

fn main() {
    // SAFETY: only tries to dlopen the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        if std::env::var("RINGDIL_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
            eprintln!("RINGDIL_REQUIRE_NVRTC=1 but no NVRTC library was found (LD_LIBRARY_PATH?)");
            std::process::exit(1);
        }
        println!("kernels_compile: skipped: no NVRTC library");
        return;
    }
    let mut jobs: Vec<Job> = Vec::new();
    // Every element type and head dim without documents; the document variant (whose
    // code does not depend on the element type) in bf16.
    for (family, arch) in TARGETS {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for head_dim in [64, 128] {
                for documents in [false, true] {
                    let variant = Variant::new(dtype, head_dim).with_documents(documents);
                    // One module also goes through the disk cache (no second NVRTC run).
                    if family == Family::Mma && variant == Variant::new(Dtype::Bf16, 64) {
                        jobs.push(compiles_through_disk_cache(arch, family, variant));
                    } else if !(documents && dtype == Dtype::F16) {
                        jobs.push(compiles(arch, family, variant));
                    }
                }
            }
        }
    }
    // The mma family's other head dims (its own swizzle at 96, 8-warp blocks and the backward
    // that splits D at 192 and 256), in bf16 alone: their code does not depend on the element
    // type beyond the conversions the modules above compile, and CI's 2 cores pay for each.
    for head_dim in [96, 192, 256] {
        jobs.push(compiles("sm_80", Family::Mma, Variant::new(Dtype::Bf16, head_dim)));
    }
    // MLA's d_qk = 192 with d_v = 128: V, O and dO tiles 128 wide beside 192-wide
    // Q and K, dK and dV column slices apart in the backward.
    for (head_dim, value_dim) in Family::value_dim_pairs().iter().copied() {
        jobs.push(compiles("sm_80", Family::Mma, Variant::new(Dtype::Bf16, head_dim).with_value_dim(value_dim)));
    }
    // The wgmma family's forward at 192 and 256 (two stages whose K and V are handed over
    // apart, one Q buffer at 256; no backward of its own), bf16 alone for the same reason,
    // at MLA's 192 / 128 (V's tiles and O 128 wide), and at 96 (forward and backward in
    // tiles of 128 over rows of 96: Family::tile_dim).
    let wide = [96, 192, 256].map(|d| Variant::new(Dtype::Bf16, d));
    let pairs = Family::value_dim_pairs().iter().map(|&(d, dv)| Variant::new(Dtype::Bf16, d).with_value_dim(dv));
    for variant in wide.into_iter().chain(pairs) {
        jobs.push(compiles("sm_90a", Family::Wgmma, variant));
    }
    // A field moved on the kernel side only: the offset asserts name it.
    let swapped = planted(
        "params",
        "params.cuh",
        "    const u16* k;\n    const u16* v;\n",
        "    const u16* v;\n    const u16* k;\n",
    );
    let kv_swap = planted("params-type", "params.cuh", "    int causal;\n", "    long long causal;\n");
    // Offsets are checked where NVRTC has a constant offsetof (13.5 on; CI's): elsewhere
    // only the size, which a reordering of equal-sized fields keeps.
    let offsets = cudarc::nvrtc::compile_ptx(
        "#if !defined(__has_builtin) || !__has_builtin(__builtin_offsetof)\n#error no offsetof\n#endif\n",
    )
    .is_ok();
    let mut refusal = |name: String, family: Family, arch: &'static str, dir: &Path, expect: &'static str, d: usize| {
        let dir = dir.to_path_buf();
        jobs.push((name, Box::new(move || refused(family, arch, &dir, expect, d))));
    };
    for (family, arch) in TARGETS {
        if offsets {
            refusal(format!("{arch}: a reordered Params field"), family, arch, &swapped, "Params::", 128);
        } else {
            println!("skip {arch}: a reordered Params field (this NVRTC has no __builtin_offsetof)");
        }
        refusal(format!("{arch}: a retyped Params field"), family, arch, &kv_swap, "Params", 128);
    }
    // Shared-memory layouts and block shapes that stop matching the family table.
    let fwd = planted("fwd-smem", "sm90_forward_layout.cuh", "SLOT_INTS = 8;", "SLOT_INTS = 9;");
    refusal("sm_90a: forward layout".into(), Family::Wgmma, "sm_90a", &fwd, "forward shared memory differs", 128);
    let bwd = planted(
        "bwd-smem",
        "sm90_backward_layout.cuh",
        "BYTES = VISITS_AT + 8 * BWD_STAGES;",
        "BYTES = VISITS_AT + 16 * BWD_STAGES;",
    );
    refusal("sm_90a: backward layout".into(), Family::Wgmma, "sm_90a", &bwd, "backward shared memory differs", 128);
    let threads = planted("threads", "sm90_forward_layout.cuh", "CONSUMERS = 128 * WGS,", "CONSUMERS = 96 * WGS,");
    refusal("sm_90a: forward threads".into(), Family::Wgmma, "sm_90a", &threads, "block threads differ", 128);
    let mma = planted("mma-smem", "sm80_forward.cu", "(FBM * D + FWD_STAGES * KV_STAGE)", "(FBM * D + 3 * KV_STAGE)");
    refusal("sm_80: forward layout".into(), Family::Mma, "sm_80", &mma, "forward shared memory differs", 128);
    let wide = planted("mma-wide", "sm80_backward_wide.cu", "(WB_DS_BUFFERS + BWD_P_TILES)", "(WB_DS_BUFFERS + 0)");
    refusal(
        "sm_80: wide backward layout (d = 256)".into(),
        Family::Mma,
        "sm_80",
        &wide,
        "backward shared memory differs",
        256,
    );
    // A mask expression compiled into a module of each family (issue 21; the host compiler
    // runs the same C against the evaluator in `tests/expr_c.rs`).
    for (family, arch) in TARGETS {
        for (bits, narrow) in [(64, false), (32, true)] {
            let name = format!("{arch}: a module with a {bits}-bit mask expression");
            jobs.push((name, Box::new(move || expression_module(family, arch, narrow))));
        }
    }
    // The mask-table lookup (PATTERN_TABLE) compiled into a module of each family.
    for (family, arch) in TARGETS {
        let name = format!("{arch}: a module with the mask-table lookup");
        jobs.push(compile_job(name, arch, family, Variant::new(Dtype::Bf16, 128).with_table(true)));
    }
    // The hole cut of a nested union's pieces, in a module of each family.
    for (family, arch) in TARGETS {
        let name = format!("{arch}: a module with the hole cut of union pieces");
        jobs.push(compile_job(name, arch, family, Variant::new(Dtype::F16, 64).with_holes(true)));
    }
    if !run(jobs).is_empty() {
        std::process::exit(1);
    }
}

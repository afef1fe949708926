//! Every kernel module compiles, and a host/kernel contract mismatch stops the compile.
//!
//! NVRTC alone is needed (no GPU): CI installs it from PyPI (`.ci/run`) and sets
//! `RINGDIL_REQUIRE_NVRTC=1`, so that there a missing library fails instead of skipping.
//! Elsewhere, without NVRTC, this prints "skipped: no NVRTC library" and counts nothing.
//!
//! The planted mismatches copy `kernels/` to a temporary directory, change one thing the
//! host also knows (a `Params` field's place, a shared-memory layout, a block's threads),
//! and expect NVRTC to refuse with the contract's message naming it.

use ringdil_cuda::compile::compile_uncached;
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

fn refused(family: Family, arch: &str, dir: &Path, expect: &str) -> Result<(), String> {
    refused_at(family, arch, dir, expect, 128)
}

fn refused_at(family: Family, arch: &str, dir: &Path, expect: &str, head_dim: usize) -> Result<(), String> {
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
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut check = |name: String, r: Result<(), String>| match r {
        Ok(()) => {
            println!("ok   {name}");
            passed += 1;
        }
        Err(e) => {
            println!("FAIL {name}: {e}");
            failures.push(name);
        }
    };
    // Every element type and head dim without documents; the document variant (whose
    // code does not depend on the element type) in bf16.
    for (family, arch) in TARGETS {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for head_dim in [64, 128] {
                for documents in [false, true] {
                    if documents && dtype == Dtype::F16 {
                        continue;
                    }
                    let variant = Variant::new(dtype, head_dim).with_documents(documents);
                    let r = compile_uncached(arch, family, variant, None, "").map(|_| ()).map_err(|e| e.to_string());
                    check(format!("{arch} {} compiles", variant.tag()), r);
                }
            }
        }
    }
    // The mma family's other head dims (its own swizzle at 96, 8-warp blocks and the backward
    // that splits D at 192 and 256), in bf16 alone: their code does not depend on the element
    // type beyond the conversions the modules above compile, and CI's 2 cores pay for each.
    for head_dim in [96, 192, 256] {
        let variant = Variant::new(Dtype::Bf16, head_dim);
        let r = compile_uncached("sm_80", Family::Mma, variant, None, "").map(|_| ()).map_err(|e| e.to_string());
        check(format!("sm_80 {} compiles", variant.tag()), r);
    }
    // MLA's d_qk = 192 with d_v = 128: V, O and dO tiles 128 wide beside 192-wide
    // Q and K, dK and dV column slices apart in the backward.
    for (head_dim, value_dim) in Family::value_dim_pairs().iter().copied() {
        let variant = Variant::new(Dtype::Bf16, head_dim).with_value_dim(value_dim);
        let r = compile_uncached("sm_80", Family::Mma, variant, None, "").map(|_| ()).map_err(|e| e.to_string());
        check(format!("sm_80 {} compiles", variant.tag()), r);
    }
    // The wgmma family's forward at 192 and 256 (two stages whose K and V are handed over
    // apart, one Q buffer at 256; no backward of its own), bf16 alone for the same reason,
    // and at MLA's 192 / 128 (V's tiles and O 128 wide).
    let wide = [192, 256].map(|d| Variant::new(Dtype::Bf16, d));
    let pairs = Family::value_dim_pairs().iter().map(|&(d, dv)| Variant::new(Dtype::Bf16, d).with_value_dim(dv));
    for variant in wide.into_iter().chain(pairs) {
        let r = compile_uncached("sm_90a", Family::Wgmma, variant, None, "").map(|_| ()).map_err(|e| e.to_string());
        check(format!("sm_90a {} compiles", variant.tag()), r);
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
    for (family, arch) in TARGETS {
        if offsets {
            check(format!("{arch}: a reordered Params field"), refused(family, arch, &swapped, "Params::"));
        } else {
            println!("skip {arch}: a reordered Params field (this NVRTC has no __builtin_offsetof)");
        }
        check(format!("{arch}: a retyped Params field"), refused(family, arch, &kv_swap, "Params"));
    }
    // Shared-memory layouts and block shapes that stop matching the family table.
    let fwd = planted("fwd-smem", "sm90_forward_layout.cuh", "SLOT_INTS = 8;", "SLOT_INTS = 9;");
    check("sm_90a: forward layout".into(), refused(Family::Wgmma, "sm_90a", &fwd, "forward shared memory differs"));
    let bwd = planted("bwd-smem", "sm90_backward_layout.cuh", "+ 3 * BWD_STAGES * 8;", "+ 4 * BWD_STAGES * 8;");
    check("sm_90a: backward layout".into(), refused(Family::Wgmma, "sm_90a", &bwd, "backward shared memory differs"));
    let threads = planted("threads", "sm90_forward_layout.cuh", "CONSUMERS = 128 * WGS,", "CONSUMERS = 96 * WGS,");
    check("sm_90a: forward threads".into(), refused(Family::Wgmma, "sm_90a", &threads, "block threads differ"));
    let mma = planted("mma-smem", "sm80_forward.cu", "(FBM * D + FWD_STAGES * KV_STAGE)", "(FBM * D + 3 * KV_STAGE)");
    check("sm_80: forward layout".into(), refused(Family::Mma, "sm_80", &mma, "forward shared memory differs"));
    let wide = planted("mma-wide", "sm80_backward_wide.cu", "(WB_DS_BUFFERS + BWD_P_TILES)", "(WB_DS_BUFFERS + 0)");
    let r = refused_at(Family::Mma, "sm_80", &wide, "backward shared memory differs", 256);
    check("sm_80: wide backward layout (d = 256)".into(), r);
    // A mask expression compiled into a module of each family (issue 21; the host compiler
    // runs the same C against the evaluator in `tests/expr_c.rs`).
    for (family, arch) in TARGETS {
        check(format!("{arch}: a module with a 64-bit mask expression"), expression_module(family, arch, false));
        check(format!("{arch}: a module with a 32-bit mask expression"), expression_module(family, arch, true));
    }
    // The mask-table lookup (PATTERN_TABLE) compiled into a module of each family.
    for (family, arch) in TARGETS {
        let variant = Variant::new(Dtype::Bf16, 128).with_table(true);
        let r = compile_uncached(arch, family, variant, None, "").map(|_| ()).map_err(|e| e.to_string());
        check(format!("{arch}: a module with the mask-table lookup"), r);
    }
    // The hole cut of a nested union's pieces, in a module of each family.
    for (family, arch) in TARGETS {
        let variant = Variant::new(Dtype::F16, 64).with_holes(true);
        let r = compile_uncached(arch, family, variant, None, "").map(|_| ()).map_err(|e| e.to_string());
        check(format!("{arch}: a module with the hole cut of union pieces"), r);
    }
    println!("{passed} passed, {} failed", failures.len());
    if !failures.is_empty() {
        std::process::exit(1);
    }
}

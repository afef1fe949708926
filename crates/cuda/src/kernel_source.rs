//! The CUDA translation unit NVRTC compiles: a generated contract header, then the kernel
//! sources of `kernels/` in dependency order, each behind a `#line` directive so that a
//! compiler message names the real file and line.
//!
//! The contract header is where the host/kernel agreement lives. It defines, from the
//! family table ([`crate::family`]), every tile size, stage count, thread count and shared-
//! memory size the kernels are built around; the pattern and offset codes from
//! [`crate::params`]; and, right after `params.cuh`, one `static_assert` per field of
//! [`Params`] on its offset (and one on the size). The kernel sources hold no literal of
//! their own for any of these. A disagreement therefore stops NVRTC with a message naming
//! the value, at start-up (the first call compiles) and in the `kernels_compile` test,
//! never at run time.

use crate::family::{FWD_Q_TILE, Family, MMA_THREADS, PRODUCER_THREADS, TILE};
use crate::gpu::DELTA_LANES;
use crate::mask_table::TABLE_TILE;
use crate::params::{OffsetRule, Params, PatternCode};
use crate::shape::Dtype;
use crate::union_pieces::PieceSide;
use crate::variant::Variant;
use std::fmt::Write;
use std::path::Path;

/// One kernel source file: its name under `kernels/` and its text.
type Source = (&'static str, &'static str);

macro_rules! sources {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../kernels/", $name)))),*]
    };
}

/// Both families' shared pieces, in dependency order: types and conversions, the
/// parameter block, instruction helpers, index mapping, copies, masks, the order of work,
/// online softmax, epilogues, the backward's query stage.
const COMMON: &[Source] = sources!(
    "common.cuh",
    "params.cuh",
    "mma_sync.cuh",
    "index_map.cuh",
    "documents.cuh",
    "copy.cuh",
    "mask.cuh",
    "tile_scheduler.cuh",
    "softmax.cuh",
    "epilogue.cuh",
    "query_stage.cuh",
);

/// The mma.sync family (sm_80 on): forward, elementwise kernels, backward (up to d = 128,
/// and above: each file compiles its kernel for its head dims alone).
const SM80: &[Source] = sources!("sm80_forward.cu", "elementwise.cu", "sm80_backward.cu", "sm80_backward_wide.cu");

/// The wgmma family (sm_90a): instruction wrappers, synchronisation, TMA, forward,
/// elementwise kernels, backward.
const SM90: &[Source] = sources!(
    "sm90_wgmma.cuh",
    "sm90_sync.cuh",
    "sm90_tma.cuh",
    "sm90_forward_layout.cuh",
    "sm90_forward_producer.cuh",
    "sm90_forward.cu",
    "elementwise.cu",
    "sm90_backward_layout.cuh",
    "sm90_backward.cu",
);

/// The files of `family`'s translation unit, in order.
pub fn files(family: Family) -> impl Iterator<Item = Source> {
    let own = match family {
        Family::Mma => SM80,
        Family::Wgmma => SM90,
    };
    COMMON.iter().chain(own).copied()
}

/// One `#define` of the contract header: name, value, what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Define {
    pub name: &'static str,
    pub value: i64,
    pub doc: &'static str,
}

/// The compile-time constants of one (family, variant) module.
pub fn defines(family: Family, variant: Variant) -> Vec<Define> {
    let (f, dtype, head_dim, value_dim) = (family, variant.dtype, variant.head_dim, variant.value_dim);
    debug_assert!(f.head_dims().contains(&head_dim), "{f:?} has no kernels for d = {head_dim}");
    debug_assert!(f.has_value_dim(head_dim, value_dim), "{f:?} has no kernels for d = {head_dim}, d_v = {value_dim}");
    let d = |name, value: usize, doc| Define { name, value: value as i64, doc };
    let mut out = vec![
        d("HEAD_DIM", f.tile_dim(head_dim), "head dimension of q and k's register and shared-memory tiles"),
        d("HEAD_DIM_V", f.tile_dim(value_dim), "head dimension of the tiles of v, d_out, the output and dv"),
        d("HEAD_DIM_MEM", head_dim, "head dimension of the q, k, dq, dk tensors (row width in memory)"),
        d("HEAD_DIM_V_MEM", value_dim, "head dimension of the v, d_out, out, dv tensors (row width in memory)"),
        d("IS_F16", (dtype == Dtype::F16) as usize, "16-bit inputs: f16 (1) or bf16 (0)"),
        d("WGMMA", (f == Family::Wgmma) as usize, "kernel family: wgmma + TMA (1) or mma.sync (0)"),
        d("DOCS", variant.documents as usize, "launches may carry packed documents (document cut compiled in)"),
        d("TABLE", variant.table as usize, "launches may read a materialised mask table (PATTERN_TABLE)"),
        d("HOLES", variant.holes as usize, "launches may be a nested union's pieces (Params::hole_side)"),
        d("TABLE_TILE", TABLE_TILE, "positions per mask-table tile side (one 64-bit word per row)"),
        d("BM", TILE, "query rows of a plan tile"),
        d("BN", TILE, "key rows of a plan tile"),
        d("NTHREADS", MMA_THREADS as usize, "threads of an mma-family block"),
        d("FBM", f.forward_q_tile(), "query rows per forward block"),
        d("FBM_NARROW", f.forward_q_tile_narrow(), "query rows per attn_fwd_128 block (wgmma)"),
        d("FBN", f.forward_key_tile(head_dim, value_dim), "key rows per forward K/V tile"),
        d(
            "KV_BOX",
            Family::forward_kv_box_rows(f.forward_key_tile(head_dim, value_dim)),
            "rows of a forward K/V TMA box",
        ),
        d("FWD_STAGES", f.forward_stages(head_dim), "K/V stages of the forward"),
        d("FWD_SPLIT_KV", f.forward_split_kv(head_dim) as usize, "wgmma forward: K and V stages handed over apart"),
        d("FWD_Q_ROWS", f.forward_q_rows(head_dim), "rows of a forward Q buffer (its largest tile)"),
        d("FWD_Q_BUFS", f.forward_q_buffers(head_dim, value_dim), "Q buffers of the wgmma forward"),
        d(
            "OWN_BACKWARD",
            (f.backward_family(head_dim) == f) as usize,
            "the module has its family's backward (else the mma family's runs it)",
        ),
        d("FWD_THREADS", f.forward_threads(f.forward_q_tile(), head_dim) as usize, "threads of an attn_fwd block"),
        d(
            "FWD_THREADS_NARROW",
            f.forward_threads(f.forward_q_tile_narrow(), head_dim) as usize,
            "threads of attn_fwd_128",
        ),
        d("WG_PRODUCERS", PRODUCER_THREADS as usize, "threads of a producer warpgroup"),
        d("WB_WGS", f.backward_key_tiles(), "key tiles (consumer warpgroups) per backward block"),
        d("QB", f.backward_q_tile(head_dim), "query rows per backward visit"),
        d("BWD_STAGES", f.backward_stages(), "query stages of the backward"),
        d("BWD_THREADS", f.backward_threads(head_dim) as usize, "threads of a backward block"),
        d("WB_DS_BUFFERS", f.backward_ds_buffers(), "dS^T tiles of the backward"),
        d("WB_DQ_BUFFERS", f.backward_dq_buffers(head_dim), "f32 dQ staging tiles of the wgmma backward"),
        d("DELTA_LANES", DELTA_LANES, "threads per row of bwd_delta"),
        d("FWD_SMEM_BYTES", f.forward_smem(head_dim, value_dim) as usize, "dynamic shared memory of the forward"),
        d("BWD_SMEM_BYTES", f.backward_smem(head_dim, value_dim) as usize, "dynamic shared memory of the backward"),
    ];
    if f == Family::Mma {
        out.push(d("WM", f.forward_warp_tiles(head_dim), "m16 row tiles per warp of the mma forward"));
        out.push(d("BWD_DIM_SLICES", f.backward_dim_slices(head_dim), "slices of D the mma backward's warps split"));
        out.push(d("BWD_P_TILES", f.backward_p_tiles(head_dim), "16-bit P^T tiles of the mma backward"));
    }
    out.extend(PatternCode::ALL.iter().map(|&(name, c)| Define { name, value: c as i64, doc: "Params::pattern" }));
    out.extend(OffsetRule::ALL.iter().map(|&(name, r)| Define { name, value: r as i64, doc: "Params::dil_rule" }));
    out.extend(PieceSide::ALL.iter().map(|&(name, s)| Define { name, value: s as i64, doc: "Params::hole_side" }));
    debug_assert_eq!(f.forward_q_tile() % TILE, 0);
    debug_assert!(f != Family::Mma || f.forward_q_tile() == FWD_Q_TILE);
    out
}

/// The contract header of one module (see the module docs).
pub fn contract(family: Family, variant: Variant) -> String {
    let mut s = String::from("// Generated by crates/cuda/src/kernel_source.rs from the family table: do not edit.\n");
    for d in defines(family, variant) {
        writeln!(s, "#define {} {} // {}", d.name, d.value, d.doc).unwrap();
    }
    s
}

/// `static_assert`s tying `struct Params` in `params.cuh` to [`Params::LAYOUT`]: the size
/// always, and every field's offset where NVRTC has `__builtin_offsetof` (13.5 on, as CI
/// installs; NVRTC 13.0 has no constant offsetof at all, so there the size alone is
/// checked).
pub fn params_layout_check() -> String {
    let mut s = String::from("// Generated from Params::LAYOUT (crates/cuda/src/params.rs): the host's layout.\n");
    let size = std::mem::size_of::<Params>();
    writeln!(s, "static_assert(sizeof(Params) == {size}, \"Params: the host's struct has {size} bytes\");").unwrap();
    s.push_str("#if defined(__has_builtin)\n#if __has_builtin(__builtin_offsetof)\n");
    for (name, offset) in Params::LAYOUT {
        writeln!(
            s,
            "static_assert(__builtin_offsetof(Params, {name}) == {offset}, \"Params::{name}: the host has it at byte {offset}\");"
        )
        .unwrap();
    }
    s.push_str("#endif\n#endif\n");
    s
}

/// The whole translation unit of one module. With `dir`, the kernel files are read from
/// there instead of the built-in copies (A/B runs of two kernel versions with one binary).
pub fn translation_unit(family: Family, variant: Variant, dir: Option<&Path>) -> std::io::Result<String> {
    let mut s = contract(family, variant);
    for (name, text) in files(family) {
        let text = match dir {
            Some(dir) => std::fs::read_to_string(dir.join(name))?,
            None => text.to_string(),
        };
        writeln!(s, "#line 1 \"crates/cuda/kernels/{name}\"").unwrap();
        s.push_str(&text);
        if !text.ends_with('\n') {
            s.push('\n');
        }
        if name == "params.cuh" {
            s.push_str(&params_layout_check());
            if let Some(id) = variant.expr {
                s.push_str("#line 1 \"pattern expression\"\n");
                s.push_str(&crate::expr_source::source(id));
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_file_is_in_a_translation_unit() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        on_disk.sort();
        let mut used: Vec<String> =
            files(Family::Mma).chain(files(Family::Wgmma)).map(|(n, _)| n.to_string()).collect();
        used.sort();
        used.dedup();
        assert_eq!(used, on_disk, "a file under kernels/ that no module compiles, or one missing");
    }

    #[test]
    fn no_kernel_file_defines_a_contract_constant() {
        // The constants come from the family table alone: a kernel file that defined one
        // (or hard-coded it under another name) would be a second place to change it.
        for family in [Family::Mma, Family::Wgmma] {
            for d in defines(family, Variant::new(Dtype::Bf16, 128).with_documents(true)) {
                for (name, text) in files(family) {
                    assert!(!text.contains(&format!("#define {} ", d.name)), "{name} defines {}", d.name);
                }
            }
        }
    }

    #[test]
    fn contract_carries_the_family_table() {
        let c = contract(Family::Wgmma, Variant::new(Dtype::F16, 64).with_documents(true));
        for line in [
            "#define HEAD_DIM 64 ",
            "#define IS_F16 1 ",
            "#define WGMMA 1 ",
            "#define FBM 192 ",
            "#define FBN 128 ",
            "#define QB 128 ",
            "#define FWD_THREADS 512 ",
            "#define FWD_THREADS_NARROW 384 ",
            "#define PATTERN_DILATED 3 ",
            "#define OFFSET_FIXED 2 ",
            "#define DOCS 1 ",
        ] {
            assert!(c.contains(line), "{line} missing from\n{c}");
        }
        let smem = format!("#define BWD_SMEM_BYTES {} ", Family::Wgmma.backward_smem(64, 64));
        assert!(c.contains(&smem));
        let c = contract(Family::Mma, Variant::new(Dtype::Bf16, 128));
        assert!(c.contains("#define FBM 128 ") && c.contains("#define FBN 64 ") && c.contains("#define WGMMA 0 "));
        assert!(c.contains("#define DOCS 0 "));
        // d = 96: the wgmma tiles are 128 wide over rows of 96 (the d = 128 module's
        // geometry); the mma family's tiles are the rows' own width.
        let (w96, w128) = (
            contract(Family::Wgmma, Variant::new(Dtype::Bf16, 96)),
            contract(Family::Wgmma, Variant::new(Dtype::Bf16, 128)),
        );
        for line in [
            "#define HEAD_DIM 128 ",
            "#define HEAD_DIM_V 128 ",
            "#define HEAD_DIM_MEM 96 ",
            "#define HEAD_DIM_V_MEM 96 ",
        ] {
            assert!(w96.contains(line), "{line} missing from the wgmma d = 96 contract");
        }
        let geometry = |c: &str| {
            c.lines()
                .filter(|l| l.contains("_SMEM_BYTES") || l.contains("#define FBN "))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(geometry(&w96), geometry(&w128));
        let m96 = contract(Family::Mma, Variant::new(Dtype::Bf16, 96));
        assert!(m96.contains("#define HEAD_DIM 96 ") && m96.contains("#define HEAD_DIM_MEM 96 "));
    }

    #[test]
    fn translation_unit_marks_each_file_and_checks_params_after_its_declaration() {
        let tu = translation_unit(Family::Wgmma, Variant::new(Dtype::Bf16, 128), None).unwrap();
        let at = |s: &str| tu.find(s).unwrap_or_else(|| panic!("{s} missing"));
        assert!(at("#line 1 \"crates/cuda/kernels/params.cuh\"") < at("struct Params {"));
        assert!(at("struct Params {") < at("static_assert(sizeof(Params)"));
        assert!(at("static_assert(__builtin_offsetof(Params, scale_log2) == 332,") > at("struct Params {"));
        assert!(at("#define FBN 64 ") < at("#line 1 \"crates/cuda/kernels/common.cuh\""));
        assert!(!tu.contains("sm80_forward.cu"));
    }
}

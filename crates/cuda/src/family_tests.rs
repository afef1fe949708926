//! Tests of `family.rs`: architecture choice, block geometry, tiles and shared memory.

use super::*;

#[test]
fn kernel_family_follows_the_architecture() {
    assert_eq!(Family::for_device(9, 0, None), Family::Wgmma);
    assert_eq!(Family::for_device(9, 0, Some("mma")), Family::Mma);
    assert_eq!(Family::for_device(9, 0, Some("wgmma")), Family::Wgmma);
    for (major, minor) in [(8, 0), (8, 9), (10, 0), (12, 0)] {
        assert_eq!(Family::for_device(major, minor, None), Family::Mma, "sm_{major}{minor}");
    }
    assert_eq!(Family::Wgmma.target(9, 0), "sm_90a");
    // Head dims the wgmma family has no kernels for run the mma family's on sm_90 (227 KB
    // of shared memory per block); above d = 128 its forward runs with mma's backward.
    let (sm90, sm80, sm86) = (SM90_SMEM_PER_BLOCK, 163 * 1024, 99 * 1024);
    for d in [64, 96, 128] {
        assert_eq!(Family::Wgmma.for_head_dim(d, d, sm90), Some(Family::Wgmma));
        assert_eq!(Family::Wgmma.backward_family(d), Family::Wgmma);
    }
    for d in [192, 256] {
        assert_eq!(Family::Wgmma.for_head_dim(d, d, sm90), Some(Family::Wgmma));
        assert_eq!(Family::Wgmma.backward_family(d), Family::Mma);
        // Its forward alone (193 KB) does not fit sm_80's blocks; there mma runs both.
        assert_eq!(Family::Wgmma.for_head_dim(d, d, sm80), Family::Mma.for_head_dim(d, d, sm80));
    }
    for d in [64, 96, 128, 192, 256] {
        assert_eq!(Family::Mma.for_head_dim(d, d, sm90), Some(Family::Mma));
        assert_eq!(Family::Mma.backward_family(d), Family::Mma);
    }
    // d = 96 on wgmma: tiles of 128 (two 64-column TMA boxes), so the d = 128 blocks' shared
    // memory; the mma family's tiles keep the rows' width.
    assert_eq!((Family::Wgmma.tile_dim(96), Family::Mma.tile_dim(96)), (128, 96));
    for d in [64, 128, 192, 256] {
        assert_eq!((Family::Wgmma.tile_dim(d), Family::Mma.tile_dim(d)), (d, d));
    }
    assert_eq!(Family::Wgmma.forward_smem(96, 96), Family::Wgmma.forward_smem(128, 128));
    assert_eq!(Family::Wgmma.backward_smem(96, 96), Family::Wgmma.backward_smem(128, 128));
    assert!(Family::Mma.forward_smem(96, 96) < Family::Mma.forward_smem(128, 128));
    // d_qk = 192 with d_v = 128 (MLA): on sm_90 the wgmma forward (with the mma
    // backward), the mma family's kernels where forced and on sm_80 (128 KB forward,
    // 138 KB backward); no other pair of different dims.
    assert_eq!(Family::Wgmma.for_head_dim(192, 128, sm90), Some(Family::Wgmma));
    assert_eq!(Family::Wgmma.backward_family(192), Family::Mma);
    assert_eq!(Family::Mma.for_head_dim(192, 128, sm90), Some(Family::Mma));
    for f in [Family::Wgmma, Family::Mma] {
        for (d, dv) in [(128, 192), (256, 128), (192, 64), (128, 64), (192, 96)] {
            assert_eq!(f.for_head_dim(d, dv, sm90), None, "{f:?} d = {d}, d_v = {dv}");
        }
    }
    assert_eq!(Family::Mma.for_head_dim(192, 128, sm80), Some(Family::Mma));
    assert_eq!(Family::Mma.for_head_dim(192, 128, sm86), None);
    for d in [0, 32, 80, 100, 512] {
        assert_eq!((Family::Wgmma.for_head_dim(d, d, sm90), Family::Mma.for_head_dim(d, d, sm90)), (None, None));
    }
    // Smaller shared memories refuse the head dims whose blocks do not fit.
    let fit = |smem| -> Vec<usize> {
        [64, 96, 128, 192, 256].into_iter().filter(|&d| Family::Mma.fits(d, d, smem)).collect()
    };
    assert_eq!((fit(sm80), fit(sm86)), (vec![64, 96, 128, 192], vec![64, 96]));
    assert_eq!(Family::Mma.target(9, 0), "sm_90");
}

#[test]
fn block_geometry() {
    assert_eq!((Family::Wgmma.forward_threads(192, 128), Family::Wgmma.forward_q_tile()), (512, 192));
    assert_eq!(Family::Wgmma.forward_threads(Family::Wgmma.forward_q_tile_narrow(), 64), 384);
    assert_eq!((Family::Wgmma.forward_key_tile(64, 64), Family::Wgmma.forward_key_tile(128, 128)), (2 * TILE, TILE));
    // MLA's 192 / 128: 128-key tiles; the equal dims above 128: 80 keys, one TMA box each.
    assert_eq!(Family::Wgmma.forward_key_tile(192, 128), 2 * TILE);
    assert_eq!((Family::Wgmma.forward_key_tile(192, 192), Family::Wgmma.forward_key_tile(256, 256)), (80, 80));
    assert_eq!([64, 80, 128].map(Family::forward_kv_box_rows), [64, 80, 64]);
    assert_eq!((Family::Mma.forward_threads(FWD_Q_TILE, 128), Family::Mma.forward_q_tile()), (128, FWD_Q_TILE));
    assert_eq!((Family::Wgmma.backward_key_tiles(), Family::Mma.backward_key_tiles()), (2, 1));
    assert_eq!((Family::Wgmma.backward_threads(64), Family::Wgmma.backward_threads(128)), (384, 384));
    assert_eq!((Family::Wgmma.backward_q_tile(64), Family::Wgmma.backward_q_tile(128)), (2 * TILE, TILE));
    // mma: 4 warps of 2 m16 tiles (forward) and of 16 keys (backward) up to d = 128; 8
    // warps of one tile, and two warps per 16 keys (one per half of D), above. Every head
    // dim keeps 128-row forward tiles.
    for (d, wm, threads) in [(64, 2, 128), (96, 2, 128), (128, 2, 128), (192, 1, 256), (256, 1, 256)] {
        assert_eq!(Family::Mma.forward_warp_tiles(d), wm, "d = {d}");
        let warps = Family::Mma.forward_threads(FWD_Q_TILE, d) as usize / 32;
        assert_eq!((warps * wm * 16, warps * 32), (FWD_Q_TILE, threads as usize), "d = {d}");
        assert_eq!(Family::Mma.backward_threads(d), threads, "d = {d}");
        assert_eq!(Family::Mma.backward_dim_slices(d) * MMA_THREADS as usize, threads as usize, "d = {d}");
        assert_eq!(Family::Mma.forward_key_tile(d, d), TILE);
        assert_eq!(Family::Mma.backward_q_tile(d), TILE);
    }
    // One block per multiprocessor, at most one per item; mma keeps one per item.
    assert_eq!(Family::Wgmma.forward_grid((22, 16, 4), 132), (132, 1, 1));
    assert_eq!(Family::Wgmma.forward_grid((3, 2, 1), 132), (6, 1, 1));
    assert_eq!(Family::Wgmma.forward_grid((u32::MAX, 65535, 65535), 132), (132, 1, 1));
    assert_eq!(Family::Mma.forward_grid((22, 16, 4), 132), (22, 16, 4));
}

/// The wgmma family's forward blocks: 192 rows for dense and causal launches, 128 for
/// masked ones, for compact branches whose segments keep a multiple of 128 rows but
/// not of 192, and for every launch above d = 128; the mma family keeps its one size.
#[test]
fn forward_rows_per_launch() {
    use crate::plan::Axis;
    let whole = IndexMap::whole(4096);
    let compact = |w, r| IndexMap::Compact {
        segment: w,
        dilation: r,
        q: Axis::contiguous(0, 4096),
        k: Axis::contiguous(0, 4096),
        starts: None,
    };
    let w = Family::Wgmma;
    for d in [64, 128] {
        assert_eq!((w.forward_q_tile_for(&whole, false, d), w.forward_q_tile_for(&whole, true, d)), (192, 128));
        assert_eq!(
            (w.forward_q_tile_for(&compact(2048, 1), false, d), w.forward_q_tile_for(&compact(1536, 1), false, d)),
            (128, 192)
        );
    }
    for d in [192, 256] {
        for map in [whole.clone(), compact(2048, 1), compact(1536, 1)] {
            assert_eq!((w.forward_q_tile_for(&map, false, d), w.forward_q_rows(d)), (128, 128), "d = {d}");
        }
    }
    for d in [64, 128, 256] {
        assert_eq!(
            (
                Family::Mma.forward_q_tile_for(&whole, true, d),
                Family::Mma.forward_q_tile_for(&compact(2048, 1), false, d)
            ),
            (FWD_Q_TILE, FWD_Q_TILE)
        );
    }
}

#[test]
fn shared_memory_fits_and_adds_up() {
    assert_eq!(Family::Mma.forward_smem(128, 128), 96 * 1024);
    assert_eq!(Family::Mma.forward_smem(64, 64), 48 * 1024);
    assert_eq!(Family::Wgmma.forward_smem(128, 128), 224 * 1024 + 208 + 1024);
    // d = 64: two Q tiles (48 KB) and four stages of 128-key K / V tiles (128 KB).
    assert_eq!(Family::Wgmma.forward_smem(64, 64), 176 * 1024 + 208 + 1024);
    // d = 192: two Q tiles of 128 rows (96 KB), two stages of 80-key K / V (120 KB); d = 256:
    // one Q tile (64 KB), two stages (160 KB). Four mbarriers per stage (K and V handed
    // over apart), six per item slot: 112 bytes.
    assert_eq!(Family::Wgmma.forward_smem(192, 192), 216 * 1024 + 112 + 64 + 16 + 1024);
    assert_eq!(Family::Wgmma.forward_smem(256, 256), 224 * 1024 + 112 + 64 + 16 + 1024);
    assert_eq!((Family::Wgmma.forward_q_buffers(192, 192), Family::Wgmma.forward_q_buffers(256, 256)), (2, 1));
    // MLA's 192 / 128: two Q tiles (96 KB) do not fit beside two stages of 128 keys (160 KB).
    assert_eq!(Family::Wgmma.forward_q_buffers(192, 128), 1);
    assert!([64, 128].iter().all(|&d| Family::Wgmma.forward_q_buffers(d, d) == 2));
    assert!(Family::Wgmma.forward_split_kv(256) && !Family::Wgmma.forward_split_kv(128));
    assert_eq!(Family::Mma.backward_smem(128, 128), 96 * 1024 + 2048 + 8192);
    assert_eq!(Family::Mma.backward_smem(64, 64), 48 * 1024 + 2048 + 8192);
    // d = 128: K, V of 128 keys (64 KB), two stages of 64 queries (66 KB), two dS^T tiles
    // (32 KB), two dQ staging tiles (64 KB). d = 64: K, V (32 KB), two stages of 128
    // queries (68 KB), two dS^T tiles (64 KB), one staging tile (32 KB). Then 48 bytes of
    // mbarriers and visits.
    assert_eq!(Family::Wgmma.backward_smem(128, 128), (64 + 66 + 32 + 64) * 1024 + 48);
    assert_eq!(Family::Wgmma.backward_smem(64, 64), (32 + 68 + 64 + 32) * 1024 + 48);
    // The new head dims: a 128-row Q tile and two stages of 64-key K / V tiles: 384 rows
    // of 2 D bytes.
    for d in [96, 192, 256] {
        assert_eq!(Family::Mma.forward_smem(d, d), 384 * 2 * d as u32, "d = {d}");
    }
    // d = 96: K, V (24 KB), two stages of 64 queries (2 x 25 KB), one dS^T tile (8 KB).
    assert_eq!(Family::Mma.backward_smem(96, 96), (24 + 50 + 8) * 1024);
    // d = 192, 256: K, V (48, 64 KB), two stages (2 x 49, 2 x 65 KB), dS^T and P^T (16 KB).
    assert_eq!(Family::Mma.backward_smem(192, 192), (48 + 98 + 16) * 1024);
    assert_eq!(Family::Mma.backward_smem(256, 256), (64 + 130 + 16) * 1024);
    // MLA's d_qk = 192, d_v = 128: V rows of 256 bytes. Forward: Q 48 KB, two stages of
    // K (24 KB) and V (16 KB). Backward: K 24 + V 16 KB, two stages of Q (24 KB), dO
    // (16 KB) and 1 KB of row data, dS^T and P^T (16 KB).
    assert_eq!(Family::Mma.forward_smem(192, 128), (48 + 2 * 40) * 1024);
    assert_eq!(Family::Mma.backward_smem(192, 128), (40 + 2 * 41 + 16) * 1024);
    // The wgmma forward at 192 / 128: one 128-row Q buffer (48 KB), two stages of 128
    // keys of K (48 KB) and V (32 KB), the split stages' 4 mbarriers each, 6 of the item
    // slots, two 8-int slots, the stages' keys and hints, 1 KB of alignment slack.
    assert_eq!(Family::Wgmma.forward_smem(192, 128), (48 + 2 * 80 + 1) * 1024 + (4 * 2 + 6) * 8 + 64 + 16);
    // sm_90's largest dynamic shared memory per block is 227 KB (sm_80's 163 KB: the mma
    // family at d = 192 (162 KB backward) and 256 (192, 210 KB) needs a device of sm_90's).
    for f in [Family::Mma, Family::Wgmma] {
        for &d in f.head_dims() {
            assert!(f.forward_smem(d, d) <= SM90_SMEM_PER_BLOCK, "{f:?} d = {d}");
            assert!(f.backward_family(d).backward_smem(d, d) <= SM90_SMEM_PER_BLOCK, "{f:?} d = {d}");
        }
    }
}

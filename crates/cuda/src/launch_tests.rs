//! Host tests of launch construction (`launch.rs`): parameters, plans and launch
//! dimensions of every pattern, and the typed errors.

use super::*;
use crate::family::FWD_Q_TILE;
use ringdil_reference::pattern::{BlockSparse, Dilated};

fn dense() -> GpuSpec {
    GpuSpec::new(GpuPattern::Dense)
}

#[test]
fn dense_launch_configuration() {
    let shape = Shape::square(2, 1000, 3, 128);
    let l = launches(&shape, &dense().causal(true), &Chunk::whole(&shape)).unwrap();
    assert_eq!(l.len(), 1);
    let l = &l[0];
    assert_eq!(l.grid_fwd(), (8, 3, 2)); // ceil(1000 / 128) forward query tiles
    assert_eq!(l.grid_cols(1), (16, 3, 2)); // ceil(1000 / 64) key tiles
    assert_eq!(l.grid_cols(2), (8, 3, 2)); // pairs of them (the last one alone)
    assert_eq!((l.params.nq, l.params.nk, l.params.causal, l.params.pattern), (1000, 1000, 1, 0));
    assert!((l.params.scale - 1.0 / 128f32.sqrt()).abs() < 1e-7);
    assert!((l.params.scale_log2 - l.params.scale * std::f32::consts::LOG2_E).abs() < 1e-6);
    assert_eq!(l.cols.visits(), 16 * 17 / 2);
    // Forward query tile r (rows 128r..128r+127) sees key tiles 0..=2r+1: sum = 72.
    assert_eq!(l.fwd.visits(), (0..8).map(|r| 2 * r + 2).sum::<usize>());
    // The launch description: one block per item (mma), 128 threads, the family's smem.
    let dims = l.forward_dims(132);
    assert_eq!(dims, LaunchDims { kernel: Kernel::Forward, grid: (8, 3, 2), block: 128, smem: 96 * 1024 });
    let bwd = l.backward_dims();
    assert_eq!((bwd.kernel, bwd.grid, bwd.block), (Kernel::Backward, (16, 3, 2), 128));
    assert_eq!(bwd.smem, Family::Mma.backward_smem(128, 128));
    // Three consumer warpgroups: 192-row forward tiles.
    let l = launches_for(&shape, &dense().causal(true), &Chunk::whole(&shape), Family::Wgmma).unwrap();
    assert_eq!(l[0].grid_fwd(), (6, 3, 2)); // ceil(1000 / 192)
    assert_eq!((l[0].fwd_q_tile, l[0].fwd_k_tile), (192, 64));
    assert_eq!(l[0].fwd.visits(), (0..6).map(|r| (3 * r + 3).min(16)).sum::<usize>());
    // At d = 64 over 128-key tiles: query tile r sees key tiles 0..=(192 r + 191) / 128.
    let shape64 = Shape::square(2, 1000, 3, 64);
    let l = launches_for(&shape64, &dense().causal(true), &Chunk::whole(&shape64), Family::Wgmma).unwrap();
    assert_eq!((l[0].fwd_q_tile, l[0].fwd_k_tile, l[0].fwd.col_tiles), (192, 128, 8));
    assert_eq!(l[0].fwd.visits(), (0..6).map(|r| ((192 * r + 191) / 128 + 1).min(8)).sum::<usize>());
    assert_eq!(l[0].cols.visits(), 16 * 17 / 2); // the backward keeps 64 x 64 tiles
    // wgmma: one block per multiprocessor, 512 threads (three consumer warpgroups and a
    // producer), the backward over pairs of key tiles.
    let dims = l[0].forward_dims(132);
    assert_eq!((dims.kernel, dims.grid, dims.block), (Kernel::Forward, (36, 1, 1), 512));
    assert_eq!(dims.smem, Family::Wgmma.forward_smem(64, 64));
    let bwd = l[0].backward_dims();
    assert_eq!((bwd.grid, bwd.block, bwd.smem), ((8, 3, 2), 384, Family::Wgmma.backward_smem(64, 64)));
}

#[test]
fn wide_head_dims_launch_eight_warps_over_the_same_tiles() {
    // Above d = 128 the mma blocks have 8 warps (one m16 tile each in the forward, half
    // of D each in the backward) over the plans of d <= 128.
    let spec = dense().causal(true);
    for (d, threads) in [(96, 128), (192, 256), (256, 256)] {
        let shape = Shape::square(2, 1000, 3, d);
        let l = &launches(&shape, &spec, &Chunk::whole(&shape)).unwrap()[0];
        assert_eq!((l.fwd_q_tile, l.fwd_k_tile, l.grid_fwd(), l.grid_cols(1)), (128, 64, (8, 3, 2), (16, 3, 2)));
        let (fwd, bwd) = (l.forward_dims(132), l.backward_dims());
        assert_eq!((fwd.kernel, fwd.grid, fwd.block, fwd.smem), (Kernel::Forward, (8, 3, 2), threads, 768 * d as u32));
        assert_eq!((bwd.grid, bwd.block, bwd.smem), ((16, 3, 2), threads, Family::Mma.backward_smem(d, d)));
        assert!((l.params.scale - 1.0 / (d as f32).sqrt()).abs() < 1e-7);
    }
}

#[test]
fn wgmma_wide_head_dims_run_its_narrow_forward_and_the_mma_backward() {
    // Above d = 128 the wgmma family runs every forward launch on attn_fwd_128 (two consumer
    // warpgroups and a producer: 384 threads) over 80-key tiles, and its backward is the mma
    // family's: 8 warps, no producer, mma's shared memory, plan tiles of 64 keys.
    let patterns = [dense().causal(true), GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(512, 1), (1024, 4)])))];
    for d in [192, 256] {
        let shape = Shape::square(2, 1000, 3, d);
        for spec in &patterns {
            for l in launches_for(&shape, spec, &Chunk::whole(&shape), Family::Wgmma).unwrap() {
                assert_eq!(
                    (l.family, l.backward_family(), l.fwd_q_tile, l.fwd_k_tile),
                    (Family::Wgmma, Family::Mma, 128, 80)
                );
                let keys = l.map.extents().1;
                assert_eq!((l.fwd.col_tiles, l.cols.row_tiles), (keys.div_ceil(80), keys.div_ceil(64)));
                let (fwd, bwd) = (l.forward_dims(132), l.backward_dims());
                assert_eq!(
                    (fwd.kernel, fwd.block, fwd.smem),
                    (Kernel::ForwardNarrow, 384, Family::Wgmma.forward_smem(d, d))
                );
                assert_eq!((bwd.kernel, bwd.block, bwd.smem), (Kernel::Backward, 256, Family::Mma.backward_smem(d, d)));
            }
        }
        // The module compiles exactly those: the narrow forward, and no backward of its own.
        assert_eq!(Kernel::of(Family::Wgmma, d), [Kernel::ForwardNarrow]);
        assert_eq!(Kernel::of(Family::Mma, d), [Kernel::Forward, Kernel::Backward]);
    }
    assert_eq!(Kernel::of(Family::Wgmma, 128), [Kernel::Forward, Kernel::ForwardNarrow, Kernel::Backward]);
}

#[test]
fn dilated_launches_are_compact_on_whole_sequences_and_ring_chunks() {
    let d = Dilated::longnet(&[(512, 1), (1024, 4), (100_000, 16)]);
    let spec = GpuSpec::new(GpuPattern::Dilated(d));
    let shape = Shape::square(1, 4096, 8, 64);
    let l = launches(&shape, &spec, &Chunk::whole(&shape)).unwrap();
    assert_eq!(l.len(), 3);
    // Dilation 1 keeps every position: a plain launch that writes every row.
    let compact: Vec<i32> = l.iter().map(|l| l.params.compact).collect();
    assert_eq!(compact, [0, 1, 1]);
    assert!(l.iter().all(|l| l.params.pattern == 3));
    let writes: Vec<bool> = l.iter().map(|l| l.writes_every_row()).collect();
    assert_eq!(writes, [true, false, false]);
    assert_eq!((l[0].params.nq, l[0].params.dil_rate), (4096, 1));
    // Its tiles are the diagonal blocks of 512 x 512, all full (64-row backward tiles).
    assert_eq!(l[0].cols.visits(), 8 * 8 * 8);
    assert!(l[0].cols.full.iter().all(|&f| f == 1));
    assert_eq!(l[1].params.nq, 4096 / 4);
    assert_eq!(l[1].params.dil_per_seg, 256);
    // The segment longer than the sequence is clamped to it: 4096 / 16 rows.
    assert_eq!((l[2].params.dil_segment, l[2].params.nq), (4096, 256));
    // Work (tiles) of each branch is its share n*w/r^2 of the dense n^2.
    assert_eq!(l[1].cols.visits(), 4096 * 1024 / 16 / (64 * 64));

    // A ring step: queries 2048..3072 over keys 1024..2048 stay compact (segment
    // bases per side), so the (1024, 4) branch costs its share of the step.
    let ring = Shape { q_rows: 1024, k_rows: 1024, ..shape };
    let l = launches(&ring, &spec, &Chunk::new(2048, 1024, 4096)).unwrap();
    assert!(l.iter().all(|l| l.params.q_offset == 2048 && l.params.k_offset == 1024));
    assert_eq!((l[1].params.compact, l[1].params.nq, l[1].params.q_cbase, l[1].params.k_cbase), (1, 256, 2 * 256, 256));
    assert_eq!(l[1].cols.visits(), 0, "segments 2 and 1 of 1024 tokens do not meet");
    assert_eq!((l[0].params.compact, l[0].cols.visits()), (0, 0), "nor do segments of 512");
    // A striped axis (stride 2) evaluates the branch mask in place.
    let striped = Chunk { q_stride: 2, k_stride: 2, ..Chunk::new(1, 0, 4096) };
    let l = launches(&Shape { q_rows: 2048, k_rows: 2048, ..shape }, &spec, &striped).unwrap();
    assert!(l.iter().all(|l| l.params.compact == 0 && l.params.q_stride == 2 && l.params.k_stride == 2));
    let e = launches(&Shape { q_rows: 2049, k_rows: 2048, ..shape }, &spec, &striped).unwrap_err();
    assert_eq!(e.to_string(), "query chunk: 2049 rows at positions 1 + i * 2 pass the global sequence length 4096");
}

#[test]
fn dilated_expr_branches_are_compact_launches_reading_offset_tables() {
    use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};
    let c = Constants::new();
    let pattern = ExprDilated {
        branches: vec![
            ExprBranch::new("64", "4", "h + s", None, &c).unwrap(),
            ExprBranch::new("n / 10", "2", "h * s", None, &c).unwrap(),
        ],
        combine: ExprCombine::SoftmaxDenominator,
    };
    let spec = GpuSpec::new(GpuPattern::dilated_expr(pattern.clone(), "test".into())).causal(true);
    assert!(matches!(spec.pattern, GpuPattern::DilatedExpr(_)));
    // Heads 2..5 of 6 (a head slice): the tables cover all 6 pattern heads.
    let shape = Shape::square(1, 1000, 3, 64);
    let chunk = Chunk::whole(&shape).heads_of(2, 6);
    let l = launches(&shape, &spec, &chunk).unwrap();
    assert_eq!(l.len(), 2);
    // 1000 / 64 -> 16 segments of 16 kept rows; 1000 / 100 -> 10 segments of 50.
    let per_branch = [(64, 4, 16, 16), (100, 2, 10, 50)];
    for (l, (w, r, segments, per_seg)) in l.iter().zip(per_branch) {
        let p = l.params;
        assert_eq!((p.pattern, p.compact, p.dil_rule), (PatternCode::Dilated as i32, 1, OffsetRule::Table as i32));
        assert_eq!((p.dil_segment, p.dil_rate, p.dil_segments, p.dil_per_seg), (w, r, segments, per_seg));
        assert_eq!((p.head_base, p.pattern_heads), (2, 6));
    }
    let bytes = block_mask_bytes(&spec, &shape, &chunk).unwrap().unwrap();
    let int = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    // Branch 0's table: 6 heads x 16 segments (384 bytes); branch 1's starts after it.
    assert_eq!((l[0].table_offset, l[1].table_offset), (0, 384));
    assert_eq!(bytes.len(), 384 + 6 * 10 * 4);
    for h in 0..6 {
        for s in 0..16 {
            assert_eq!(int(4 * (h * 16 + s)), ((h + s) % 4) as i32);
        }
        for s in 0..10 {
            assert_eq!(int(384 + 4 * (h * 10 + s)), ((h * s) % 2) as i32);
        }
    }
    // A dilation-1 branch keeps every position whatever its offsets: a plain launch,
    // its tiles inside one segment marked full (the built-in branch's launch).
    let one =
        ExprDilated { branches: vec![ExprBranch::new("128", "1", "h + s", None, &c).unwrap()], ..pattern.clone() };
    let spec = GpuSpec::new(GpuPattern::dilated_expr(one, "one".into())).causal(true);
    let ours = &launches(&shape, &spec, &chunk).unwrap()[0];
    let builtin = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(128, 1)]))).causal(true);
    let theirs = &launches(&shape, &builtin, &chunk).unwrap()[0];
    assert_eq!((ours.params.compact, ours.params.dil_rate), (0, 1));
    assert_eq!((&ours.fwd, &ours.cols), (&theirs.fwd, &theirs.cols));
    assert!(ours.cols.full.contains(&1));
    // A union of several branches has no compact form: mask tables.
    let union = ExprDilated { combine: ExprCombine::Union, ..pattern };
    assert!(matches!(GpuPattern::dilated_expr(union, "u".into()), GpuPattern::Table(_)));
}

/// The head-group combine runs one compact launch per branch over its group's heads
/// (`head_first`, `head_count`); the keys the kernels' compact rule gives each (head,
/// query) over all launches (`row_of` and `offset_code`, transcribed here: the kept rows of
/// segment `s` are `s w + o + t r` inside the segment, `o` the branch's rule for the head;
/// a head outside a launch's range gets nothing from it) are exactly the reference's, on a
/// whole sequence and on a head slice that cuts a group; the output scale is `1/G`.
#[test]
fn head_group_branches_run_over_their_groups_heads_with_the_references_keys() {
    use ringdil_reference::pattern::{Offset, Pattern};
    let mut d = Dilated::head_groups(&[(16, 1), (32, 2), (64, 4), (2000, 8)]);
    d.branches[1].offset = Offset::HeadMod;
    let spec = GpuSpec::new(GpuPattern::Dilated(d.clone())).causal(true);
    let (heads, n) = (7, 300);
    // The whole call, and heads 3..6 of the 7 (groups 1 and 2 cut, groups 0 and 3 absent).
    for (first, count) in [(0, heads), (3, 3)] {
        let shape = Shape::square(2, n, count, 64);
        let chunk = if count == heads { Chunk::whole(&shape) } else { Chunk::whole(&shape).heads_of(first, heads) };
        let l = launches(&shape, &spec, &chunk).unwrap();
        let mut ours = vec![vec![Vec::new(); n]; count];
        for l in &l {
            let p = l.params;
            let (w, r) = (p.dil_segment as usize, p.dil_rate as usize);
            // Dilation 1 runs as a plain launch (the same rule: every position kept).
            assert_eq!((p.compact, p.head_base, p.pattern_heads), ((r > 1) as i32, first as i32, heads as i32));
            let launch_heads = p.head_first as usize..(p.head_first + p.head_count) as usize;
            // The launch's branch: the one whose group holds its first (global) head.
            let branch = &d.branches[d.head_group(first + launch_heads.start, heads)];
            assert_eq!((w, r), (branch.segment.min(n), branch.dilation));
            assert_eq!(l.grid_fwd().1, p.head_count as u32);
            for h in launch_heads {
                let o = match p.dil_rule {
                    x if x == OffsetRule::HeadMod as i32 => (first + h) % r,
                    x if x == OffsetRule::Fixed as i32 => p.dil_fixed as usize,
                    x => panic!("offset rule {x}"),
                };
                for (q, keys) in ours[h].iter_mut().enumerate() {
                    let s = q / w;
                    if q >= s * w + o && (q - s * w - o) % r == 0 {
                        keys.extend((s * w + o..(s * w + w).min(n)).step_by(r));
                    }
                }
            }
        }
        let mut runs = Vec::new();
        for (h, keys) in ours.iter_mut().enumerate() {
            for (q, keys) in keys.iter_mut().enumerate() {
                runs.clear();
                d.key_runs(q, first + h, heads, n, &mut runs);
                let mut want: Vec<usize> = runs.iter().flat_map(|r| (r.start..r.end).step_by(r.step)).collect();
                want.sort_unstable();
                keys.sort_unstable();
                assert_eq!(*keys, want, "head {}, query {q}", first + h);
            }
        }
        // Every head is served by exactly one launch: 4 branches, or the 2 groups cut.
        assert_eq!(l.len(), if count == heads { 4 } else { 2 });
        assert!(block_mask_bytes(&spec, &shape, &chunk).unwrap().is_none());
    }
    assert_eq!(spec.output_scale(heads).unwrap(), 0.25);
}

#[test]
fn a_mask_that_is_one_longnet_branch_runs_as_its_compact_launch() {
    use ringdil_reference::pattern::ExprPattern;
    use ringdil_reference::pattern::expr::Constants;
    let expr = |t: &str| GpuSpec::new(GpuPattern::Expr(ExprPattern::new(t, &Constants::new()).unwrap()));
    let shape = Shape::square(1, 1000, 3, 64);
    let whole = Chunk::whole(&shape);
    let branch = expr("q / 64 == k / 64 && q % 4 == h % 4 && k % 4 == h % 4");
    let l = launches(&shape, &branch, &whole).unwrap();
    assert_eq!(l.len(), 1);
    let p = l[0].params;
    assert_eq!((p.pattern, p.compact, p.dil_rule), (PatternCode::Dilated as i32, 1, OffsetRule::Table as i32));
    assert_eq!((p.dil_segment, p.dil_rate, p.dil_segments), (64, 4, 16));
    let bytes = block_mask_bytes(&branch, &shape, &whole).unwrap().unwrap();
    let int = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    for h in 0..3 {
        assert!((0..16).all(|s| int(4 * (h * 16 + s)) == (h % 4) as i32), "head {h}");
    }
    // Same work as the built-in branch: the same forward tiles.
    let builtin = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(64, 4)])));
    assert_eq!(l[0].fwd, launches(&shape, &builtin, &whole).unwrap()[0].fwd);
    // Another mask stays a mask expression launch, with no buffer.
    let other = expr("q / 64 == k / 64 && q % 4 == h % 4");
    let l = launches(&shape, &other, &whole).unwrap();
    assert_eq!((l.len(), l[0].params.pattern, l[0].params.compact), (1, PatternCode::Expr as i32, 0));
    assert_eq!(block_mask_bytes(&other, &shape, &whole).unwrap(), None);
}

/// A mask expression that is a sliding window launches exactly as the built-in window:
/// same parameters, same plans and full marks, no expression module.
#[test]
fn a_mask_that_is_a_window_runs_as_the_builtin_window() {
    use ringdil_reference::pattern::ExprPattern;
    use ringdil_reference::pattern::expr::Constants;
    let expr = |t: &str| GpuPattern::Expr(ExprPattern::new(t, &Constants::new()).unwrap());
    let shape = Shape::square(2, 1000, 3, 128);
    let whole = Chunk::whole(&shape);
    for causal in [false, true] {
        for (mask, left, right) in [("k <= q && q - k < 512", 511, 0), ("abs(q - k) <= 100", 100, 100)] {
            let ours = launches_for(&shape, &GpuSpec::new(expr(mask)).causal(causal), &whole, Family::Wgmma).unwrap();
            let builtin = GpuSpec::new(GpuPattern::Window { left, right }).causal(causal);
            let theirs = launches_for(&shape, &builtin, &whole, Family::Wgmma).unwrap();
            assert_eq!(ours.len(), 1);
            assert_eq!(format!("{:?}", ours[0].params), format!("{:?}", theirs[0].params), "{mask}");
            assert_eq!((&ours[0].fwd, &ours[0].cols), (&theirs[0].fwd, &theirs[0].cols), "{mask}");
        }
    }
    // A side the mask leaves open reaches the whole sequence.
    let l = launches(&shape, &GpuSpec::new(expr("k <= q")), &whole).unwrap();
    assert_eq!(
        (l[0].params.pattern, l[0].params.win_left, l[0].params.win_right),
        (PatternCode::Window as i32, 1000, 0)
    );
}

#[test]
fn wgmma_forward_tiles_do_not_straddle_dilated_segments() {
    // Kept rows per segment: 512 / 1 = 512 and 1024 / 4 = 256 (not multiples of 192),
    // 768 / 4 = 192 (one is), and a dense launch.
    let d = Dilated::longnet(&[(512, 1), (1024, 4), (768, 4)]);
    let shape = Shape::square(1, 3072, 8, 128);
    let l = launches_for(&shape, &GpuSpec::new(GpuPattern::Dilated(d)), &Chunk::whole(&shape), Family::Wgmma);
    let l = l.unwrap();
    let tiles: Vec<usize> = l.iter().map(|l| l.fwd_q_tile).collect();
    assert_eq!(tiles, [128, 128, 192]);
    let kernels: Vec<(Kernel, u32)> =
        l.iter().map(|l| (l.forward_dims(132).kernel, l.forward_dims(132).block)).collect();
    assert_eq!(kernels, [(Kernel::ForwardNarrow, 384), (Kernel::ForwardNarrow, 384), (Kernel::Forward, 512)]);
    for l in &l {
        let (m, q) = (l.params.dil_per_seg as usize, l.fwd_q_tile);
        assert_eq!(m % q, 0, "a {q}-row tile would straddle segments of {m} kept rows");
        assert_eq!(l.grid_fwd().0 as usize, (l.params.nq as usize).div_ceil(q));
    }
    let dense = launches_for(&shape, &dense(), &Chunk::whole(&shape), Family::Wgmma).unwrap();
    assert_eq!(dense[0].fwd_q_tile, 192);
    let mma =
        launches(&shape, &GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(768, 4)]))), &Chunk::whole(&shape));
    assert_eq!(mma.unwrap()[0].fwd_q_tile, FWD_Q_TILE);
}

#[test]
fn block_sparse_and_window_parameters() {
    let bs = BlockSparse { dilated_stride: Some(4), global_tokens: 9, ..BlockSparse::local(32, 2) };
    let shape = Shape::square(1, 100, 1, 64);
    let l = &launches(&shape, &GpuSpec::new(GpuPattern::BlockSparse(bs)), &Chunk::whole(&shape)).unwrap()[0];
    let p = l.params;
    assert_eq!((p.pattern, p.bs_block, p.bs_radius, p.bs_stride, p.bs_global, p.bs_mask_blocks), (2, 32, 2, 4, 9, 0));
    let w = GpuSpec::new(GpuPattern::Window { left: usize::MAX, right: 3 });
    let p = launches(&shape, &w, &Chunk::whole(&shape)).unwrap()[0].params;
    assert_eq!((p.pattern, p.win_left, p.win_right), (1, 100, 3));
}

#[test]
fn bad_arguments_are_typed_errors_naming_the_value() {
    let shape = Shape::square(1, 100, 2, 64);
    let whole = Chunk::whole(&shape);
    let err = |s: &Shape, spec: &GpuSpec, c: &Chunk| launches(s, spec, c).unwrap_err().to_string();
    assert_eq!(
        err(&Shape { head_dim: 80, ..shape }, &dense(), &whole),
        "head_dim 80 has no GPU kernel; supported: 64, 96, 128, 192, 256"
    );
    // The wgmma family has kernels for every head dim the mma family has (d = 96 in tiles of
    // 128: Family::tile_dim); the launch keeps the tensors' dims.
    let d96 = Shape::square(1, 100, 2, 96);
    let l = launches_for(&d96, &dense(), &whole, Family::Wgmma).unwrap();
    assert_eq!(
        (l[0].head_dim, l[0].value_dim, l[0].forward_dims(132).smem),
        (96, 96, Family::Wgmma.forward_smem(128, 128))
    );
    assert!(matches!(
        launches_for(&Shape { head_dim: 80, ..shape }, &dense(), &whole, Family::Wgmma),
        Err(CudaError::UnsupportedHeadDim { head_dim: 80, supported }) if supported == [64, 96, 128, 192, 256]
    ));
    // v's head dim: MLA's 192 / 128 in both families (wgmma: its forward, the mma
    // backward); any other pair named with both dims and what runs.
    let mla = Shape::square(1, 100, 2, 192).with_value_dim(128);
    let l = launches_for(&mla, &dense(), &whole, Family::Mma).unwrap();
    assert_eq!((l[0].head_dim, l[0].value_dim), (192, 128));
    assert_eq!((l[0].forward_dims(132).smem, l[0].backward_dims().smem), (128 * 1024, 138 * 1024));
    assert_eq!(
        err(&Shape::square(1, 100, 2, 128).with_value_dim(64), &dense(), &whole),
        "head_dim 128 with value head_dim 64 has no GPU kernel; v's head dim may differ from q's only as d = 192 with d_v = 128"
    );
    let w = launches_for(&mla, &dense(), &whole, Family::Wgmma).unwrap();
    assert_eq!((w[0].family, w[0].backward_family()), (Family::Wgmma, Family::Mma));
    assert_eq!((w[0].forward_dims(132).smem, w[0].backward_dims().smem), (209 * 1024 + 192, 138 * 1024));
    // 128-key forward tiles there (the mma family keeps 64: its forward's key tiles are plan tiles).
    assert_eq!((w[0].fwd_k_tile, l[0].fwd_k_tile), (128, 64));
    assert!(matches!(
        launches_for(&Shape::square(1, 100, 2, 192).with_value_dim(64), &dense(), &whole, Family::Wgmma),
        Err(CudaError::UnsupportedValueDim { head_dim: 192, value_dim: 64, supported }) if supported == [(192, 128)]
    ));
    assert!(err(&Shape { heads: 0, ..shape }, &dense(), &whole).contains("`heads` is 0"));
    assert!(err(&shape.with_kv_heads(0), &dense(), &whole).contains("`kv_heads` is 0"));
    let gqa = Shape::square(1, 100, 6, 64);
    assert_eq!(
        err(&gqa.with_kv_heads(4), &dense(), &whole),
        "kv_heads = 4 does not divide heads = 6: grouped-query attention needs whole groups of query heads per K/V head"
    );
    for (kv_heads, group) in [(6, 1), (3, 2), (2, 3), (1, 6)] {
        let p = launches(&gqa.with_kv_heads(kv_heads), &dense(), &whole).unwrap()[0].params;
        assert_eq!((p.heads, p.kv_heads, p.kv_group), (6, kv_heads as i32, group));
    }
    let chunk = Chunk::new(50, 0, 120);
    assert_eq!(
        err(&shape, &dense(), &chunk),
        "query chunk: offset 50 + 100 rows exceeds the global sequence length 120"
    );
    assert!(err(&Shape { batch: 70_000, ..shape }, &dense(), &Chunk::whole(&shape)).contains("batch = 70000"));
    // 65535 x 65535 (batch, head) pairs of one tile: more than the 32-bit block index.
    let wide = Shape::square(65_535, 1, 65_535, 64);
    assert_eq!(
        err(&wide, &dense(), &Chunk::whole(&wide)),
        "query tiles x heads x batch = 4294836225 exceeds the GPU limit 2147483647"
    );
    let d = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(16, 32)])));
    assert!(err(&shape, &d, &whole).contains("dilation_rate 32 exceeds segment_length 16"));
    let hg = GpuSpec::new(GpuPattern::Dilated(Dilated::head_groups(&[(16, 1), (32, 2), (64, 4), (8, 8)])));
    let three = Shape::square(1, 100, 3, 64);
    assert!(err(&three, &hg, &Chunk::whole(&three)).contains("3 heads cannot be split into 4"));
    assert!(err(&shape, &dense().key_lengths(vec![101]), &whole).contains("length 101 > seq 100"));
    let bad_scale = GpuSpec { scale: Some(-1.0), ..dense() };
    assert!(err(&shape, &bad_scale, &whole).contains("scale -1"));
    assert!(matches!(
        launches(&shape, &GpuSpec::new(GpuPattern::BlockSparse(BlockSparse::local(0, 1))), &whole),
        Err(CudaError::Spec(ringdil_reference::Error::ZeroParameter { parameter: "block", .. }))
    ));
}

#[test]
fn block_mask_is_flattened_row_major() {
    let m = vec![vec![true, false], vec![false, true]];
    let bs = BlockSparse { block_mask: Some(m), local_radius: None, ..BlockSparse::local(8, 0) };
    let (shape, whole) = (Shape::square(1, 16, 1, 64), Chunk::whole(&Shape::square(1, 16, 1, 64)));
    assert_eq!(
        block_mask_bytes(&GpuSpec::new(GpuPattern::BlockSparse(bs)), &shape, &whole).unwrap(),
        Some(vec![1, 0, 0, 1])
    );
    assert_eq!(block_mask_bytes(&dense(), &shape, &whole).unwrap(), None);
}

/// A launch over a slice of heads carries the slice's first head and the pattern's
/// head count (the kernels' dilated offsets use them); a slice outside the pattern's
/// heads is a typed error naming it.
#[test]
fn head_slices_carry_their_global_heads() {
    let spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(256, 4)])));
    let shape = Shape::square(1, 1024, 3, 64);
    let whole = launches(&shape, &spec, &Chunk::new(0, 0, 1024)).unwrap();
    assert_eq!((whole[0].params.head_base, whole[0].params.pattern_heads), (0, 3));
    let slice = launches(&shape, &spec, &Chunk::new(0, 0, 1024).heads_of(5, 8)).unwrap();
    assert_eq!((slice[0].params.head_base, slice[0].params.pattern_heads), (5, 8));
    let e = launches(&shape, &spec, &Chunk::new(0, 0, 1024).heads_of(6, 8)).unwrap_err();
    assert!(matches!(e, CudaError::HeadSliceOutOfRange { first: 6, heads: 3, all_heads: 8 }), "{e}");
    assert_eq!(e.to_string(), "head slice 6..9 is not inside the pattern's 8 heads");
}

/// `dilated_expr` branches with offsets per head and segment on the pieces of a ring (the
/// zigzag layout's chunks of contiguous rows, the striped layout's rows of stride P, for
/// P = 2, 3, 4, on both families): one launch per branch, each checked by
/// [`check_branch_launch`].
#[test]
fn dilated_expr_launches_on_ring_pieces_visit_every_allowed_pair() {
    use crate::check::dilated_expr::pattern;
    use ringdil_reference::pattern::expr::ExprCombine::SoftmaxDenominator;
    let (n, heads) = (1000, 4);
    let patterns = [
        (
            pattern(
                &[("96", "3", "3 * h - s * s"), ("n / 3 + 1", "2", "if s % 2 == 0 then h else h + 1")],
                SoftmaxDenominator,
            ),
            false,
        ),
        (
            pattern(&[("64", "1", "h + s"), ("128", "2", "h + s"), ("min(512, n)", "4", "h + s")], SoftmaxDenominator),
            true,
        ),
    ];
    for (pat, causal) in patterns {
        let spec = GpuSpec::new(pat.clone()).causal(causal);
        let branches = crate::dilated_expr::compact_branches(&pat, heads, n).unwrap();
        for p in [2usize, 3, 4] {
            for (q, k) in ring_piece_pairs(n, p) {
                let shape = Shape {
                    batch: 1,
                    heads,
                    kv_heads: heads,
                    head_dim: 64,
                    value_dim: 64,
                    q_rows: q.rows,
                    k_rows: k.rows,
                };
                let chunk = Chunk { q_stride: q.stride, k_stride: k.stride, ..Chunk::new(q.offset, k.offset, n) };
                for family in [Family::Wgmma, Family::Mma] {
                    let at = format!("P = {p}, queries {q:?}, keys {k:?}, {family:?}");
                    let launches = launches_for(&shape, &spec, &chunk, family).unwrap();
                    assert_eq!(launches.len(), branches.len(), "{at}");
                    for (l, b) in launches.iter().zip(&branches) {
                        check_branch_launch(l, b, (q, k), (heads, n, causal), &at);
                    }
                }
            }
        }
    }
}

/// The (query, key) axes of a ring of `p` ranks over `n` positions: every pair of the
/// zigzag layout's `2p` chunks (`n / 2p` rows, the last taking the rest) and every pair of
/// the striped layout's ranks (rank `r`: positions `r + i p`).
fn ring_piece_pairs(n: usize, p: usize) -> Vec<(crate::plan::Axis, crate::plan::Axis)> {
    use crate::plan::Axis;
    let c = n / (2 * p);
    let zigzag: Vec<Axis> = (0..2 * p)
        .map(|i| Axis { offset: i * c, stride: 1, rows: if i == 2 * p - 1 { n - i * c } else { c } })
        .collect();
    let striped: Vec<Axis> = (0..p).map(|r| Axis { offset: r, stride: p, rows: (n - r).div_ceil(p) }).collect();
    [zigzag, striped].iter().flat_map(|axes| axes.iter().flat_map(|&q| axes.iter().map(move |&k| (q, k)))).collect()
}

/// Launch `l` of compact branch `b` over axes `(q, k)` of a pattern of `heads` heads over
/// `n` positions: on a compact launch the kernels' row map (`row_of` in
/// `kernels/index_map.cuh`, transcribed here: index c is kept position t of segment s,
/// G = c + cbase = s m + t, position s w + o(h, s) + t r) yields only positions the branch
/// keeps for the head, inside the sequence, whose index the host's inverse
/// (`IndexMap::index_of`, which the plans use) gives back; and every pair the branch allows
/// (same segment, both kept: the rule written out here, not the planner's) lies at launch
/// indices inside the launch in a tile that the forward and the backward plans visit.
fn check_branch_launch(
    l: &LaunchSpec,
    b: &ringdil_reference::pattern::expr::CompactBranch,
    (q, k): (crate::plan::Axis, crate::plan::Axis),
    (heads, n, causal): (usize, usize, bool),
    at: &str,
) {
    use crate::plan::Side;
    let (nq, nk) = l.map.extents();
    let pp = l.params;
    assert_eq!((pp.nq as usize, pp.nk as usize), (nq, nk), "{at}");
    // The segment and offset of `pos` if the branch keeps it for head h.
    let kept = |pos: usize, h: usize| {
        let s = pos / b.segment;
        let o = b.offset(h, s);
        let t = (pos - s * b.segment).checked_sub(o)?;
        (t % b.dilation == 0).then_some((s, o))
    };
    for h in 0..heads {
        let sides = [(Side::Query, q, nq, pp.q_cbase as usize), (Side::Key, k, nk, pp.k_cbase as usize)];
        for (side, axis, count, cbase) in sides.into_iter().filter(|_| pp.compact == 1) {
            let m = pp.dil_per_seg as usize;
            for g in cbase..cbase + count {
                let (s, t) = (g / m, g % m);
                let o = if s < pp.dil_segments as usize { b.offset(h, s) } else { 0 };
                let pos = s * pp.dil_segment as usize + o + t * pp.dil_rate as usize;
                if pos < (s + 1) * pp.dil_segment as usize && pos >= axis.offset && pos - axis.offset < axis.rows {
                    assert!(pos < n && kept(pos, h).is_some(), "{at}, head {h}: row of position {pos}");
                    // The host's inverse finds the kernels' index again.
                    assert_eq!(l.map.index_of(side, pos, o), Some(g - cbase), "{at}, head {h}");
                }
            }
        }
        for qpos in (0..q.rows).map(|i| q.offset + i * q.stride) {
            let Some((sq, oq)) = kept(qpos, h) else { continue };
            for kpos in (0..k.rows).map(|j| k.offset + j * k.stride) {
                match kept(kpos, h) {
                    Some((sk, ok)) if sk == sq && !(causal && kpos > qpos) => {
                        let pair = format!("{at}, head {h}, query {qpos}, key {kpos}");
                        let qc = l.map.index_of(Side::Query, qpos, oq).expect(&pair);
                        let kc = l.map.index_of(Side::Key, kpos, ok).expect(&pair);
                        assert!(qc < nq && kc < nk, "{pair}: indices ({qc}, {kc}) outside ({nq}, {nk})");
                        assert!(l.fwd.contains(qc / l.fwd_q_tile, kc / l.fwd_k_tile), "{pair}: forward plan");
                        assert!(
                            l.cols.contains(kc / crate::family::TILE, qc / crate::family::TILE),
                            "{pair}: backward plan"
                        );
                    }
                    _ => {}
                }
            }
        }
    }
}

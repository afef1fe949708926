//! Unit tests of `layout.rs`: pieces, pairs and kept rows of small plans.

use super::*;
use crate::spec::GpuPattern;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::ring::Layout;

fn plan(n: usize, p: usize, layout: Layout, spec: GpuSpec) -> DistResult<DistPlan> {
    DistPlan::new(ChunkPlan::new(n, p, &layout).unwrap(), spec, 1, 2, 64)
}

#[test]
fn pieces_per_layout() {
    let causal = GpuSpec::new(GpuPattern::Dense).causal(true);
    let c = plan(10, 3, Layout::Contiguous, causal.clone()).unwrap();
    let run = |local, rows, start, stride| Piece { local, rows, start, stride };
    assert_eq!(c.pieces(0), &[run(0, 4, 0, 1)]);
    assert_eq!(c.pieces(2), &[run(0, 3, 7, 1)]);
    let z = plan(10, 2, Layout::Zigzag, causal.clone()).unwrap();
    // c = [0,3,5,8,10]: rank 0 owns 0..3 and 8..10.
    assert_eq!(z.pieces(0), &[run(0, 3, 0, 1), run(3, 2, 8, 1)]);
    let s = plan(9, 2, Layout::Striped, causal.clone()).unwrap();
    assert_eq!(s.pieces(1), &[run(0, 4, 1, 2)]);
    let b = plan(10, 3, Layout::Boundaries(vec![0, 1, 1, 10]), causal).unwrap();
    assert!(b.pieces(1).is_empty());
    assert_eq!(b.pieces(0), &[run(0, 1, 0, 1)]);
    assert_eq!(b.pieces(2), &[run(0, 9, 1, 1)]);
}

#[test]
fn causal_ring_needs_only_earlier_blocks() {
    let p = plan(256, 2, Layout::Contiguous, GpuSpec::new(GpuPattern::Dense).causal(true)).unwrap();
    assert_eq!(p.needed(0, 1), &[] as &[(usize, usize)]);
    assert_eq!(p.needed(1, 0), &[(0, 0)]);
    assert_eq!(p.pattern_volume(0, 1), 0);
    assert_eq!(p.pattern_volume(1, 0), 2 * 128 * 2 * 64);
    assert_eq!(p.ring_volume(0), 2 * 2 * 64 * 128);
}

#[test]
fn striped_pieces_launch_at_true_positions_with_every_mask() {
    // Rank r holds r, r + P, ...: one piece of stride P, so window, dilated and padded
    // masks see true positions (no layout is rejected).
    let (n, ranks) = (23, 3);
    let specs = [
        GpuSpec::new(GpuPattern::Dense).causal(true),
        GpuSpec::new(GpuPattern::Window { left: 3, right: 0 }).causal(true),
        GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(8, 2)]))).key_lengths(vec![20]),
    ];
    for spec in specs {
        let p = plan(n, ranks, Layout::Striped, spec).unwrap();
        for r in 0..ranks {
            for src in 0..ranks {
                let (shape, chunk) = p.pair(r, 0, src, 0);
                assert_eq!((chunk.q_offset, chunk.q_stride, chunk.k_offset, chunk.k_stride), (r, 3, src, 3));
                assert_eq!((shape.q_rows, chunk.seq_len), ((n - r).div_ceil(ranks), n));
            }
        }
    }
}

/// Grouped-query attention: K/V pieces and every K/V volume at `kv_heads` heads;
/// query pieces and needed pairs as in multi-head attention.
#[test]
fn grouped_query_plans_move_kv_heads() {
    let causal = GpuSpec::new(GpuPattern::Dense).causal(true);
    let mha = DistPlan::new(ChunkPlan::new(256, 2, &Layout::Zigzag).unwrap(), causal, 1, 8, 64).unwrap();
    let gqa = mha.clone().with_kv_heads(2).unwrap();
    assert_eq!((gqa.kv_group(), gqa.piece_dims(0, 0), gqa.kv_piece_dims(0, 0)), (4, [1, 64, 8, 64], [1, 64, 2, 64]));
    for r in 0..2 {
        assert_eq!(gqa.piece_lens(r), mha.piece_lens(r));
        assert_eq!(gqa.kv_piece_lens(r).iter().map(|x| x * 4).collect::<Vec<_>>(), mha.piece_lens(r));
        assert_eq!(4 * gqa.ring_volume(r), mha.ring_volume(r));
        for src in 0..2 {
            assert_eq!(gqa.needed(r, src), mha.needed(r, src));
            assert_eq!(4 * gqa.pattern_volume(r, src), mha.pattern_volume(r, src));
        }
    }
    assert_eq!(gqa.pair(1, 0, 0, 1).0.kv_heads, 2);
    for (kv_heads, msg) in [(0, "`kv_heads` is 0"), (3, "kv_heads = 3 does not divide heads = 8")] {
        let e = mha.clone().with_kv_heads(kv_heads).unwrap_err().to_string();
        assert!(e.contains(msg), "{e}");
    }
    // Scatter and gather of K/V-side tensors use the K/V head count.
    let x: Vec<u32> = (0..256 * 2 * 3).collect();
    let mut y = vec![0; x.len()];
    for r in 0..2 {
        let pieces = gqa.scatter_kv(&x, 3, r);
        assert_eq!(pieces.iter().map(Vec::len).sum::<usize>(), 128 * 2 * 3);
        gqa.gather_kv_into(&mut y, 3, r, &pieces);
    }
    assert_eq!(x, y);
}

/// v's head dim apart from q's (MLA's 192 / 128): Q, K, dQ, dK pieces at 192, V, dV, the
/// output and d_out at 128; every K/V volume counts K at 192 and V at 128, whole pieces
/// and kept head rows alike; the launches see both dims. A pair no kernel runs is refused.
#[test]
fn value_dim_plans_size_v_and_the_output_apart() {
    let spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(100, 1), (1000, 4)])));
    let chunks = ChunkPlan::new(1000, 2, &Layout::Contiguous).unwrap();
    let same = DistPlan::new(chunks, spec, 1, 4, 192).unwrap().with_kv_heads(2).unwrap();
    let mla = same.clone().with_value_dim(128).unwrap();
    assert_eq!((mla.piece_dims(0, 0), mla.out_piece_dims(0, 0)), ([1, 500, 4, 192], [1, 500, 4, 128]));
    assert_eq!((mla.kv_piece_dims(1, 0), mla.v_piece_dims(1, 0)), ([1, 500, 2, 192], [1, 500, 2, 128]));
    assert_eq!((mla.piece_lens(0), mla.out_piece_lens(0)), (vec![500 * 4 * 192], vec![500 * 4 * 128]));
    assert_eq!((mla.kv_piece_lens(0), mla.v_piece_lens(0)), (vec![500 * 2 * 192], vec![500 * 2 * 128]));
    let (shape, _) = mla.pair(0, 0, 1, 0);
    assert_eq!((shape.head_dim, shape.value_dim), (192, 128));
    // Kept head rows: (1000, 4) crosses the ranks; K/V head g serves query heads 2g and
    // 2g + 1, whose offsets keep 2 rows in 4.
    let kept = mla.kept_rows(0, 1, 0).expect("fewer than all rows").len();
    assert_eq!(kept, 2 * 500 * 2 / 4);
    assert_eq!((mla.sent_len(0, 1, 0), mla.sent_v_len(0, 1, 0)), (kept * 192, kept * 128));
    assert_eq!(mla.pattern_volume(0, 1), kept * (192 + 128));
    assert_eq!(same.pattern_volume(0, 1), kept * 2 * 192);
    for r in 0..2 {
        assert_eq!(mla.ring_volume(r), 2 * (192 + 128) * 500);
        assert_eq!(mla.needed(r, 1 - r), same.needed(r, 1 - r));
    }
    let e = same.clone().with_value_dim(64).unwrap_err().to_string();
    assert!(e.contains("64") && e.contains("192"), "{e}");
    let e =
        DistPlan::new(ChunkPlan::new(100, 2, &Layout::Contiguous).unwrap(), GpuSpec::new(GpuPattern::Dense), 1, 2, 64)
            .unwrap()
            .with_value_dim(128)
            .unwrap_err()
            .to_string();
    assert!(e.contains("64") && e.contains("128"), "{e}");
}

#[test]
fn runs_take_the_longest_constant_step() {
    let piece = |local, rows, start, stride| Piece { local, rows, start, stride };
    assert_eq!(pieces_of(&[4, 6, 8, 9, 10, 3]), vec![piece(0, 3, 4, 2), piece(3, 2, 9, 1), piece(5, 1, 3, 1)]);
    assert_eq!(pieces_of(&[]), vec![]);
}

#[test]
fn dilated_segments_inside_ranks_need_nothing_across_ranks() {
    let d = Dilated::longnet(&[(256, 2)]);
    let p = plan(1024, 4, Layout::Contiguous, GpuSpec::new(GpuPattern::Dilated(d))).unwrap();
    for r in 0..4 {
        for src in (0..4).filter(|&s| s != r) {
            assert!(p.needed(r, src).is_empty(), "r {r} src {src}");
        }
        assert_eq!(p.needed(r, r), &[(0, 0)]);
    }
}

#[test]
fn too_many_pieces_is_a_typed_error_naming_the_rank() {
    // Descending tokens: no run is longer than one token. (Interleaved tokens would be
    // runs of stride 32, two per rank: fine.)
    let order: Vec<usize> = (0..64).rev().collect();
    let chunks = ChunkPlan::new(64, 2, &Layout::Permuted { order, boundaries: None }).unwrap();
    let e = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense), 1, 1, 64).unwrap_err();
    assert!(matches!(e, DistError::TooManyPieces { rank: 0, pieces: 32, max: MAX_PIECES }), "{e}");
}

/// The head-group combine scales its output (1/G): a distributed plan carries the factor
/// its schedules apply once to finished outputs and summed gradients, and plans the same
/// piece pairs as its branches over their groups' heads.
#[test]
fn a_pattern_that_scales_its_output_carries_its_scale() {
    let groups = GpuSpec::new(GpuPattern::Dilated(Dilated::head_groups(&[(8, 1), (64, 2)])));
    let p = plan(64, 2, Layout::Zigzag, groups).unwrap();
    assert_eq!(p.output_scale(), 0.5);
    assert_eq!(plan(64, 2, Layout::Zigzag, GpuSpec::new(GpuPattern::Dense)).unwrap().output_scale(), 1.0);
    // Zigzag rank 0 holds tokens 0..16 and 48..64: the (64, 2) group reaches across ranks,
    // the (8, 1) group alone would not.
    let first_alone = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(8, 1)])));
    let alone = plan(64, 2, Layout::Zigzag, first_alone).unwrap();
    assert!(alone.needed(0, 1).is_empty(), "{:?}", alone.needed(0, 1));
    assert!(!p.needed(0, 1).is_empty());
}

#[test]
fn scatter_then_gather_is_the_identity() {
    let p = plan(11, 3, Layout::Zigzag, GpuSpec::new(GpuPattern::Dense)).unwrap();
    let (b, n, h, d) = (1, 11, 2, 3);
    let x: Vec<u32> = (0..(b * n * h * d) as u32).collect();
    let mut y = vec![0; x.len()];
    for r in 0..3 {
        let pieces = p.scatter(&x, d, r);
        p.gather_into(&mut y, d, r, &pieces);
    }
    assert_eq!(x, y);
}

#[test]
fn pattern_plan_sends_only_the_kept_rows_of_branches_that_cross_ranks() {
    // 1000 tokens on 2 contiguous ranks, batch 1, 2 heads, d = 64.
    let plan = |branches: &[(usize, usize)]| {
        let spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(branches)));
        DistPlan::new(ChunkPlan::new(1000, 2, &Layout::Contiguous).unwrap(), spec, 1, 2, 64).unwrap()
    };
    // (100, 1) stays inside each rank of 500 tokens; (1000, 4) crosses: rank 0 needs,
    // per head h, the rows of rank 1 with pos % 4 == h % 4.
    let p = plan(&[(100, 1), (1000, 4)]);
    let built = |p: &DistPlan| p.kept.iter().flatten().flatten().filter(|k| k.rows.get().is_some()).count();
    assert_eq!(built(&p), 0, "kept lists are built when a rank asks for them");
    let kept = p.kept_rows(0, 1, 0).expect("fewer than all rows");
    assert_eq!(built(&p), 1);
    assert_eq!(kept.len(), 2 * 500 / 4);
    for &e in kept {
        let (i, h) = (e as usize / 2, e as usize % 2);
        assert_eq!((500 + i) % 4, h, "entry {e}");
    }
    assert_eq!(p.pattern_volume(0, 1), 2 * 250 * 64);
    assert_eq!(p.kept_rows(0, 0, 0), None, "a rank's own pieces never travel");
    // A crossing branch of dilation 1 needs every row: the whole piece.
    let p = plan(&[(1000, 1), (1000, 4)]);
    assert_eq!(p.kept_rows(0, 1, 0), None);
    assert_eq!(p.pattern_volume(0, 1), 2 * 500 * 2 * 64);
}

#[test]
fn kept_rows_hold_every_key_another_rank_attends() {
    use ringdil_reference::pattern::key_counts;
    let (n, ranks, heads, batch) = (300, 3, 6, 2);
    let d = Dilated::longnet(&[(32, 2), (128, 4), (300, 8)]);
    let mut lists = 0;
    let layouts = [Layout::Contiguous, Layout::Zigzag, Layout::Striped];
    for (layout, kv_heads) in layouts.into_iter().flat_map(|l| [6, 2, 1].map(|kv| (l.clone(), kv))) {
        let group = heads / kv_heads;
        for causal in [false, true] {
            let spec = GpuSpec::new(GpuPattern::Dilated(d.clone())).causal(causal);
            let reference = spec.to_reference();
            let p = DistPlan::new(ChunkPlan::new(n, ranks, &layout).unwrap(), spec, batch, heads, 64)
                .and_then(|p| p.with_kv_heads(kv_heads))
                .unwrap();
            for r in 0..ranks {
                for src in (0..ranks).filter(|&s| s != r) {
                    for (kj, piece) in p.pieces(src).iter().enumerate() {
                        let Some(kept) = p.kept_rows(r, src, kj) else { continue };
                        lists += 1;
                        for q in p.chunks.tokens(r) {
                            for h in 0..heads {
                                let counts = key_counts(reference.pattern.as_ref(), *q, h, heads, n);
                                for i in 0..piece.rows {
                                    let k = piece.start + i * piece.stride;
                                    if counts[k] == 0 || (causal && k > *q) {
                                        continue;
                                    }
                                    for bi in 0..batch {
                                        let e = ((bi * piece.rows + i) * kv_heads + h / group) as u32;
                                        assert!(
                                            kept.binary_search(&e).is_ok(),
                                            "{layout:?} causal={causal}: q {q} h {h} needs key {k} of rank {src}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(lists > 20, "only {lists} kept lists: the test checks too little");
}

use super::*;
use crate::check::tables::{Strided, rotating_softmax};
use crate::mask_table::MaskTable;
use crate::shape::{Chunk, Shape};
use ringdil_reference::Documents;
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated, ExprPattern};
use ringdil_reference::pattern::{BlockSparse, Dilated};

/// A call over the whole sequence of `batch` rows of `n` tokens and `heads` heads.
fn whole(batch: usize, n: usize, heads: usize) -> (Shape, Chunk) {
    let shape = Shape::square(batch, n, heads, 64);
    (shape, Chunk::whole(&shape))
}

/// Specs with every pattern kind the kernels cannot cut per document.
fn patterns() -> Vec<(&'static str, GpuPattern)> {
    let c = Constants::new();
    let compact = ExprDilated {
        branches: vec![
            ExprBranch::new("8", "2", "h + s", None, &c).unwrap(),
            ExprBranch::new("n / 3 + 1", "1", "0", None, &c).unwrap(),
        ],
        combine: ExprCombine::SoftmaxDenominator,
    };
    vec![
        ("longnet", GpuPattern::Dilated(Dilated::longnet(&[(4, 1), (8, 2), (16, 4)]))),
        ("head groups", GpuPattern::Dilated(Dilated::head_groups(&[(4, 1), (16, 2)]))),
        ("block sparse", GpuPattern::BlockSparse(BlockSparse::local(4, 1))),
        ("expression", GpuPattern::Expr(ExprPattern::new("(q / 8) % 2 == (k / 8) % 2", &c).unwrap())),
        ("compact dilated_expr", GpuPattern::dilated_expr(compact, "test file".into())),
        ("softmax table", GpuPattern::Table(rotating_softmax())),
        ("rust table", GpuPattern::table(Arc::new(Strided(5)))),
    ]
}

/// The lowered spec's tables, added over its parts, keep for every row, head and query
/// exactly the key multiplicities the original spec's reference keeps (documents,
/// pattern, causality and padding: `Spec::key_counts`, the reference's own rule), and
/// carry no documents. Rows share one list, given per row or flat over the batch.
#[test]
fn tables_inside_documents_keep_what_the_reference_keeps() {
    let (n, heads) = (45, 3);
    let boundaries = vec![0, 7, 7, 20, 21, 45];
    // The same list for both rows of 45 tokens, flat over the batch.
    let flat = Documents::flat(vec![0, 7, 7, 20, 21, 45, 52, 52, 65, 66, 90]);
    for (name, pattern) in patterns() {
        for (documents, batch, causal) in
            [(Documents::per_row(vec![boundaries.clone(); 2]), 2, false), (flat.clone(), 2, true)]
        {
            let spec = GpuSpec::new(pattern.clone()).causal(causal).key_lengths(vec![40; batch]).documents(documents);
            spec.validate(batch, heads, n).unwrap();
            // Every pattern but LongNet lowers to tables; LongNet's (what a striped ring
            // piece runs: it lowers to launches over the documents on contiguous rows)
            // are made directly.
            let (shape, chunk) = whole(batch, n, heads);
            let first = spec.lowered(&shape, &chunk).unwrap().expect("lowered");
            let lowered = match first.clone() {
                l if matches!(l.pattern, GpuPattern::DilatedInDocuments(..)) => {
                    GpuSpec { pattern: spec.in_documents(boundaries.clone()), documents: None, ..spec.clone() }
                }
                l => l,
            };
            assert_eq!(lowered.documents, None, "{name}");
            let GpuPattern::Table(t) = &lowered.pattern else { panic!("{name}: {:?}", lowered.pattern) };
            let tables: Vec<MaskTable> =
                t.parts.iter().map(|p| MaskTable::build(p.as_ref(), heads, n).unwrap()).collect();
            let (want, got) = (spec.to_reference(), lowered.to_reference());
            for b in 0..batch {
                for h in 0..heads {
                    for q in 0..n {
                        let expected = want.key_counts(b, q, h, heads, n);
                        // The kernels apply causality and padding beside the tables.
                        let cut = want.key_cut(b, q, n);
                        let counted: Vec<u32> = (0..n)
                            .map(|k| tables.iter().filter(|t| k < cut && t.allowed(h, q, k)).count() as u32)
                            .collect();
                        assert_eq!(counted, expected, "{name}: row {b} head {h} query {q}");
                        assert_eq!(got.key_counts(b, q, h, heads, n), expected, "{name}: reference of the lowered");
                    }
                }
            }
            assert_eq!(lowered.output_scale(heads).unwrap(), spec.output_scale(heads).unwrap(), "{name}");
            // Lowered once: the tables are the pattern the kernels run.
            assert_eq!(lowered.lowered(&shape, &chunk).unwrap(), None, "{name}");
            // Equal specs lower alike (tables: equal ones, kept and shared by the cache).
            assert_eq!(spec.lowered(&shape, &chunk).unwrap(), Some(first), "{name}");
        }
    }
}

/// Dense and window documents stay with the kernels' cut; a window written as an
/// expression becomes the window and keeps its documents.
#[test]
fn dense_and_window_keep_their_documents() {
    let docs = Documents::per_row(vec![vec![0, 5, 30], vec![0, 30]]);
    let dense = GpuSpec::new(GpuPattern::Dense).documents(docs.clone());
    let (shape, chunk) = whole(2, 30, 1);
    assert_eq!(dense.lowered(&shape, &chunk).unwrap(), None);
    assert_eq!(dense.table_documents(2, 30).unwrap(), None);
    let window = ExprPattern::new("k <= q && q - k < 4", &Constants::new()).unwrap();
    let lowered =
        GpuSpec::new(GpuPattern::Expr(window)).documents(docs.clone()).lowered(&shape, &chunk).unwrap().unwrap();
    assert_eq!(lowered, GpuSpec::new(GpuPattern::Window { left: 3, right: 0 }).documents(docs));
}

/// Rows with different lists are, where mask tables run, a typed error naming the first
/// row that differs and both lists (LongNet's launches over the documents take them on
/// contiguous rows, with key padding or not, not on a striped ring piece); invalid
/// documents are the reference's error, from `validate` and from the lowering itself.
#[test]
fn rows_packed_differently_are_refused_by_name_where_tables_run() {
    let longnet = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(8, 1)])));
    let blocks = GpuSpec::new(GpuPattern::BlockSparse(BlockSparse::local(4, 1)));
    let rows = Documents::per_row(vec![vec![0, 5, 30], vec![0, 5, 30], vec![0, 9, 30]]);
    let spec = blocks.clone().documents(rows.clone());
    let (shape, chunk) = whole(3, 30, 2);
    let piece = Shape { q_rows: 10, k_rows: 10, ..shape };
    let striped = Chunk { q_stride: 3, k_stride: 3, ..Chunk::new(1, 2, 30) };
    let ring = longnet.clone().documents(rows.clone()).lowered(&piece, &striped).unwrap_err();
    let padded = longnet.clone().documents(rows.clone()).key_lengths(vec![30; 3]);
    padded.validate(3, 2, 30).unwrap();
    for (piece, chunk) in [(shape, chunk), (piece, Chunk::new(10, 20, 30))] {
        let lowered = padded.lowered(&piece, &chunk).unwrap().unwrap();
        assert!(matches!(lowered.pattern, GpuPattern::DilatedInDocuments(_, ref r) if r.len() == 3));
    }
    for e in [spec.validate(3, 2, 30).unwrap_err(), spec.lowered(&shape, &chunk).unwrap_err(), ring] {
        assert!(
            matches!(&e, CudaError::DocumentTables { row: 2, first, other } if first == &[0, 5, 30] && other == &[0, 9, 30]),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("batch row 2 has boundaries [0, 9, 30] but row 0 has [0, 5, 30]"), "{text}");
    }
    let compact = longnet.clone().documents(rows);
    compact.validate(3, 2, 30).unwrap();
    let lowered = compact.lowered(&shape, &chunk).unwrap().unwrap();
    let lists = vec![vec![0, 5, 30], vec![0, 5, 30], vec![0, 9, 30]];
    assert_eq!(lowered.pattern, GpuPattern::DilatedInDocuments(Dilated::longnet(&[(8, 1)]), lists));
    let long: Vec<usize> = (0..=30).collect();
    let e = blocks.documents(Documents::per_row(vec![vec![0, 30], long])).validate(2, 1, 30).unwrap_err();
    assert!(e.to_string().contains("[0, 1, 2, 3, 4] ... [26, 27, 28, 29, 30] (31 entries)"), "{e}");
    let short = longnet.documents(Documents::per_row(vec![vec![0, 5, 29]]));
    let (shape, chunk) = whole(1, 30, 1);
    for e in [short.validate(1, 1, 30).unwrap_err(), short.lowered(&shape, &chunk).unwrap_err()] {
        assert!(matches!(e, CudaError::Spec(_)), "{e:?}");
        assert!(e.to_string().contains("29"), "{e}");
    }
}

/// A built-in LongNet pattern with documents runs as launches over the documents on
/// contiguous rows (a whole sequence, a ring piece; key padding kept for the kernels),
/// and on strided rows (a striped layout's) as mask tables.
#[test]
fn longnet_documents_run_compact_on_contiguous_rows() {
    let d = Dilated::longnet(&[(8, 1), (16, 4)]);
    let spec = GpuSpec::new(GpuPattern::Dilated(d.clone())).documents(Documents::per_row(vec![vec![0, 30, 64]; 2]));
    let (shape, chunk) = whole(2, 64, 2);
    let compact = GpuSpec::new(GpuPattern::DilatedInDocuments(d, vec![vec![0, 30, 64]]));
    assert_eq!(spec.lowered(&shape, &chunk).unwrap().unwrap(), compact);
    let padded = spec.clone().key_lengths(vec![60, 64]).lowered(&shape, &chunk).unwrap().unwrap();
    assert_eq!(padded, compact.clone().key_lengths(vec![60, 64]));
    let piece = Shape { q_rows: 32, k_rows: 32, ..shape };
    assert_eq!(spec.lowered(&piece, &Chunk::new(32, 0, 64)).unwrap().unwrap(), compact);
    let striped = Chunk { q_stride: 2, k_stride: 2, ..Chunk::new(1, 0, 64) };
    assert!(matches!(spec.lowered(&piece, &striped).unwrap().unwrap().pattern, GpuPattern::Table(_)));
    assert_eq!(segment_starts(&[0, 30, 30, 37, 64], 8), [0, 8, 16, 24, 30, 37, 45, 53, 61, 64]);
}

/// The launches of LongNet inside documents keep exactly the reference's pairs, on a whole
/// sequence and over the pieces of a ring (every pair of a query piece and a key piece,
/// added), with and without key padding. Every launch's pairs come from the kernels'
/// rules transcribed in `check::document_pairs` (compact: segment tables; dilation 1:
/// dense inside the segments), on tiles the forward plan visits, then causal by position
/// and before the padding limit, counted over launches and pieces,
/// against `Spec::key_counts` of the original spec (documents: empty, shorter than a
/// dilation, than a segment, several segments with a tail), per batch row: rows packed
/// alike (launches over both rows) and differently (launches per row, each over its row
/// alone).
#[test]
fn document_launches_keep_the_references_pairs() {
    use crate::check::document_pairs::pairs;
    use crate::launch::{block_mask_bytes, launches};
    let (n, heads) = (150, 5);
    let boundaries = [0, 2, 2, 13, 45, 46, 130, 150];
    // The same list for both rows, flat over the batch; then two different rows.
    let alike = Documents::flat(boundaries.iter().chain(&[152, 152, 163, 195, 196, 280, 300]).copied().collect());
    let apart = Documents::per_row(vec![boundaries.to_vec(), vec![0, 70, 71, 71, 150]]);
    let mut groups = Dilated::head_groups(&[(8, 1), (32, 2), (64, 4)]);
    groups.branches[2].offset = ringdil_reference::pattern::Offset::HeadBlock;
    let longnet = Dilated::longnet(&[(8, 1), (16, 2), (64, 4), (256, 8)]);
    let specs = [
        (longnet.clone(), true, alike.clone(), None),
        (groups, false, alike.clone(), None),
        (longnet.clone(), true, apart.clone(), None),
        (longnet.clone(), true, alike, Some(vec![141, 97])),
        (longnet, false, apart, Some(vec![60, 133])),
    ];
    // Pieces of the ring: the whole sequence; two pieces cut inside documents.
    let chunkings: [&[(usize, usize)]; 2] = [&[(0, n)], &[(0, 61), (61, n - 61)]];
    for (d, causal, docs, padding) in specs {
        let mut spec = GpuSpec::new(GpuPattern::Dilated(d)).causal(causal).documents(docs);
        if let Some(l) = &padding {
            spec = spec.key_lengths(l.clone());
        }
        for pieces in chunkings {
            let mut counts = vec![vec![vec![vec![0u32; n]; n]; heads]; 2];
            for (&(qo, qr), &(ko, kr)) in pieces.iter().flat_map(|q| pieces.iter().map(move |k| (q, k))) {
                let shape = Shape { q_rows: qr, k_rows: kr, ..Shape::square(2, n, heads, 64) };
                let chunk = Chunk::new(qo, ko, n);
                let lowered = spec.lowered(&shape, &chunk).unwrap().unwrap();
                assert!(matches!(lowered.pattern, GpuPattern::DilatedInDocuments(..)), "pieces {pieces:?}");
                let buffer = block_mask_bytes(&lowered, &shape, &chunk).unwrap().unwrap();
                for l in &launches(&shape, &spec, &chunk).unwrap() {
                    let p = l.params;
                    // A launch over one row sees a batch of 1, reads its buffers from its
                    // row on, and counts for its row only.
                    assert_eq!(p.batch, if l.batch_row.is_some() { 1 } else { 2 });
                    let b = l.batch_row.unwrap_or(0);
                    let r = l.row_elements(&shape);
                    let (qe, ke) = (b * qr * heads * 64, b * kr * heads * 64);
                    assert_eq!([r.q, r.k, r.v, r.out, r.lse, r.row], [qe, ke, ke, qe, b * heads * qr, b]);
                    assert_eq!(r.dims([2, qr, heads, 64])[0], p.batch as usize);
                    assert_eq!(
                        (p.q_offset, p.k_offset, p.q_rows, p.k_rows),
                        (qo as i32, ko as i32, qr as i32, kr as i32)
                    );
                    for lb in 0..p.batch as usize {
                        let row = l.batch_row.unwrap_or(lb);
                        let limit = padding.as_ref().map_or(n, |l| l[row]);
                        let launch_heads = p.head_first as usize..(p.head_first + p.head_count) as usize;
                        for (h, counts) in counts[row].iter_mut().enumerate().filter(|(h, _)| launch_heads.contains(h))
                        {
                            for (qp, kp) in pairs(l, &buffer, lb, h, heads, n) {
                                if (!causal || kp <= qp) && kp < limit {
                                    counts[qp][kp] += 1;
                                }
                            }
                        }
                    }
                }
            }
            let reference = spec.to_reference();
            for (b, counts) in counts.iter().enumerate() {
                for (h, rows) in counts.iter().enumerate() {
                    for (q, got) in rows.iter().enumerate() {
                        let want = reference.key_counts(b, q, h, heads, n);
                        assert_eq!(*got, want, "pieces {pieces:?} padding {padding:?} row {b} head {h} query {q}");
                    }
                }
            }
        }
    }
}

/// `segment_starts` against the rule written out per position: position `p` of the
/// document `[s, e)` lies in the segment `[s + k w, min(s + (k + 1) w, e))` with
/// `k = (p - s) div w`; the table's segments are those, in order, and end at the row's end.
#[test]
fn segment_starts_cut_each_document_from_its_start() {
    let mut rng = ringdil_reference::random::SplitMix64::new(5);
    for _ in 0..500 {
        let (n, w) = (rng.range(0, 120), rng.range(1, 40));
        let mut list = vec![0];
        while *list.last().unwrap() < n {
            let next = (list.last().unwrap() + rng.range(0, 50)).min(n);
            list.push(next);
        }
        let starts = segment_starts(&list, w);
        assert!(starts.windows(2).all(|x| x[0] < x[1]) && starts.last() == Some(&n), "{list:?} w {w}: {starts:?}");
        for d in list.windows(2) {
            for p in d[0]..d[1] {
                let first = d[0] + (p - d[0]) / w * w;
                let s = starts.partition_point(|&x| x <= p) - 1;
                assert_eq!((starts[s], starts[s + 1]), (first, (first + w).min(d[1])), "{list:?} w {w}: position {p}");
            }
        }
    }
}

/// A compact launch inside documents gives every segment `m` launch indices: the longest
/// segment's kept rows, rounded up to a multiple of the forward's 128-row tile, at most
/// `ceil(w / r)` (w cut to the row). The kernels' row map (`row_of`, transcribed: index
/// `g` is kept row `g mod m` of table segment `g div m`, a hole past the segment's end)
/// reaches every position LongNet keeps inside the documents (the rule written out here:
/// segments of w from each document's start, offset `h mod r`) exactly once, and no other.
#[test]
fn compact_document_launches_size_segments_by_the_longest() {
    use crate::launch::launches;
    use crate::plan::Side;
    let (n, heads) = (2048, 3);
    let (shape, chunk) = whole(1, n, heads);
    let boundaries = vec![0, 100, 700, 1500, 1500, 2048];
    let branches = [(8, 1), (64, 4), (4096, 2), (4096, 8)];
    let spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&branches)))
        .causal(true)
        .documents(Documents::per_row(vec![boundaries.clone()]));
    let compact: Vec<_> =
        launches(&shape, &spec, &chunk).unwrap().into_iter().filter(|l| l.params.compact == 1).collect();
    let got: Vec<_> = compact.iter().map(|l| (l.params.dil_segment, l.params.dil_rate, l.params.dil_per_seg)).collect();
    // (64, 4): 16 indices, its w's own. (4096, 2): the longest document, 800 tokens, keeps
    // 400 rows, rounded to 512 (w cut to the row would give 1024). (4096, 8): 100 -> 128.
    assert_eq!(got, [(64, 4, 16), (1024, 2, 512), (1024, 8, 128)]);
    for (l, &(w, r)) in compact.iter().zip(&branches[1..]) {
        let (m, (nq, _)) = (l.params.dil_per_seg as usize, l.map.extents());
        let starts = segment_starts(&boundaries, w.min(n));
        assert_eq!(nq, (starts.len() - 1) * m, "({w}, {r})");
        for h in 0..heads {
            let mut kept: Vec<usize> = boundaries
                .windows(2)
                .flat_map(|d| (d[0]..d[1]).filter(move |&p| (p - d[0]) % w % r == h % r))
                .collect();
            // The kernels' rows: (index, position) of every index that is not a hole.
            let rows: Vec<(usize, usize)> = (0..nq)
                .filter_map(|g| {
                    let p = starts[g / m] + h % r + (g % m) * r;
                    (p < starts[g / m + 1]).then_some((g, p))
                })
                .collect();
            let mut positions: Vec<usize> = rows.iter().map(|&(_, p)| p).collect();
            kept.sort();
            positions.sort();
            assert_eq!(positions, kept, "({w}, {r}) head {h}");
            for &(g, p) in &rows {
                assert_eq!(l.map.index_of(Side::Query, p, h % r), Some(g), "({w}, {r}) head {h} position {p}");
            }
        }
    }
}

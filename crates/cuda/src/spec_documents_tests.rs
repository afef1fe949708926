use super::*;
use crate::check::tables::{Strided, rotating_softmax};
use crate::mask_table::MaskTable;
use ringdil_reference::Documents;
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated, ExprPattern};
use ringdil_reference::pattern::{BlockSparse, Dilated};

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
            let lowered = spec.lowered(batch, n).unwrap().expect("lowered to tables");
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
            assert_eq!(lowered.lowered(batch, n).unwrap(), None, "{name}");
            // Equal specs lower to equal tables (kept and shared by the table cache).
            assert_eq!(spec.lowered(batch, n).unwrap(), Some(lowered.clone()), "{name}");
        }
    }
}

/// Dense and window documents stay with the kernels' cut; a window written as an
/// expression becomes the window and keeps its documents.
#[test]
fn dense_and_window_keep_their_documents() {
    let docs = Documents::per_row(vec![vec![0, 5, 30], vec![0, 30]]);
    let dense = GpuSpec::new(GpuPattern::Dense).documents(docs.clone());
    assert_eq!(dense.lowered(2, 30).unwrap(), None);
    assert_eq!(dense.table_documents(2, 30).unwrap(), None);
    let window = ExprPattern::new("k <= q && q - k < 4", &Constants::new()).unwrap();
    let lowered = GpuSpec::new(GpuPattern::Expr(window)).documents(docs.clone()).lowered(2, 30).unwrap().unwrap();
    assert_eq!(lowered, GpuSpec::new(GpuPattern::Window { left: 3, right: 0 }).documents(docs));
}

/// Rows with different lists are a typed error naming the first row that differs and
/// both lists; invalid documents are the reference's error, from `validate` and from
/// the lowering itself.
#[test]
fn rows_packed_differently_are_refused_by_name() {
    let longnet = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(8, 1)])));
    let rows = Documents::per_row(vec![vec![0, 5, 30], vec![0, 5, 30], vec![0, 9, 30]]);
    let spec = longnet.clone().documents(rows);
    for e in [spec.validate(3, 2, 30).unwrap_err(), spec.lowered(3, 30).unwrap_err()] {
        assert!(
            matches!(&e, CudaError::DocumentTables { row: 2, first, other } if first == &[0, 5, 30] && other == &[0, 9, 30]),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("batch row 2 has boundaries [0, 9, 30] but row 0 has [0, 5, 30]"), "{text}");
    }
    let long: Vec<usize> = (0..=30).collect();
    let e = longnet.clone().documents(Documents::per_row(vec![vec![0, 30], long])).validate(2, 1, 30).unwrap_err();
    assert!(e.to_string().contains("[0, 1, 2, 3, 4] ... [26, 27, 28, 29, 30] (31 entries)"), "{e}");
    let short = longnet.documents(Documents::per_row(vec![vec![0, 5, 29]]));
    for e in [short.validate(1, 1, 30).unwrap_err(), short.lowered(1, 30).unwrap_err()] {
        assert!(matches!(e, CudaError::Spec(_)), "{e:?}");
        assert!(e.to_string().contains("29"), "{e}");
    }
}

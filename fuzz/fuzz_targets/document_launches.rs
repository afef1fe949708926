//! LongNet inside packed documents on the GPU (host side, no GPU needed): for arbitrary
//! boundary lists (rows packed alike or apart), LongNet branches, causality, key padding
//! and a contiguous query piece and key piece of the row (a whole sequence or a ring
//! step), the launches `GpuSpec::lowered` picks compute every (query, key, head) pair of
//! the pieces exactly as often as the reference counts it, and no other. Each launch's
//! pairs come from the kernels' rules transcribed in `check::document_pairs` (compact:
//! segment tables; dilation 1: dense inside the segments), then causality by position
//! and the key limit. The reference is `Spec::key_counts` of the spec with its documents.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ringdil_cuda::check::document_pairs::pairs;
use ringdil_cuda::launch::{block_mask_bytes, launches};
use ringdil_cuda::shape::{Chunk, Shape};
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::Dilated;

#[derive(Arbitrary, Debug)]
struct Input {
    n: u8,
    apart: bool,
    cuts: [Vec<u8>; 2],
    branches: Vec<(u8, u8)>,
    heads: u8,
    causal: bool,
    padding: Option<(u8, u8)>,
    q: (u8, u8),
    k: (u8, u8),
}

/// A valid row list from cut bytes: 0, the cuts mod `n + 1` sorted, `n`.
fn row(cuts: &[u8], n: usize) -> Vec<usize> {
    let mut inner: Vec<usize> = cuts.iter().take(10).map(|&c| c as usize % (n + 1)).collect();
    inner.sort_unstable();
    [vec![0], inner, vec![n]].concat()
}

fuzz_target!(|input: Input| {
    let n = (input.n % 80) as usize + 1;
    let heads = (input.heads % 4) as usize + 1;
    let batch = 2;
    let lists: Vec<Vec<usize>> = match input.apart {
        true => input.cuts.iter().map(|c| row(c, n)).collect(),
        false => vec![row(&input.cuts[0], n); batch],
    };
    let branches: Vec<(usize, usize)> = input
        .branches
        .iter()
        .take(3)
        .map(|&(w, r)| {
            let w = w as usize % 40 + 1;
            (w, r as usize % w.min(6) + 1)
        })
        .collect();
    if branches.is_empty() {
        return;
    }
    let mut spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&branches)))
        .causal(input.causal)
        .documents(Documents::per_row(lists));
    let limits = input.padding.map(|(a, b)| vec![a as usize % (n + 1), b as usize % (n + 1)]);
    if let Some(l) = &limits {
        spec = spec.key_lengths(l.clone());
    }
    // Contiguous pieces inside the row.
    let piece = |(o, r): (u8, u8)| {
        let o = o as usize % n;
        (o, r as usize % (n - o) + 1)
    };
    let ((qo, qr), (ko, kr)) = (piece(input.q), piece(input.k));
    let shape = Shape { q_rows: qr, k_rows: kr, ..Shape::square(batch, n, heads, 64) };
    let chunk = Chunk::new(qo, ko, n);
    let lowered = spec.lowered(&shape, &chunk).expect("valid documents").expect("lowered");
    assert!(matches!(lowered.pattern, GpuPattern::DilatedInDocuments(..)), "{:?}", lowered.pattern);
    let buffer = block_mask_bytes(&lowered, &shape, &chunk).unwrap().expect("segment tables");
    let mut counts = vec![vec![vec![vec![0u32; n]; n]; heads]; batch];
    for l in &launches(&shape, &spec, &chunk).unwrap() {
        let p = l.params;
        assert_eq!(p.batch as usize, if l.batch_row.is_some() { 1 } else { batch });
        for lb in 0..p.batch as usize {
            let b = l.batch_row.unwrap_or(lb);
            let limit = limits.as_ref().map_or(n, |l| l[b]);
            for h in p.head_first as usize..(p.head_first + p.head_count) as usize {
                for (qp, kp) in pairs(l, &buffer, lb, h, heads, n) {
                    if (!input.causal || kp <= qp) && kp < limit {
                        counts[b][h][qp][kp] += 1;
                    }
                }
            }
        }
    }
    let reference = spec.to_reference();
    for (b, counts) in counts.iter().enumerate() {
        for (h, rows) in counts.iter().enumerate() {
            for q in qo..qo + qr {
                let want = reference.key_counts(b, q, h, heads, n);
                for k in 0..n {
                    let expect = if (ko..ko + kr).contains(&k) { want[k] } else { 0 };
                    assert_eq!(rows[q][k], expect, "row {b} head {h} query {q} key {k}: {branches:?} {spec:?}");
                }
            }
        }
    }
});

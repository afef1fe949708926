//! The GPU tile plans on ring chunks: for any query and key axes (offset, stride, rows)
//! of a sequence, any pattern the kernels mask (dense, window, one LongNet branch, a Rust
//! `Pattern` impl read from a mask table) and causality, every allowed (query, key, head) pair lies in a tile that the forward and
//! backward plans of both kernel families visit (at d = 64, where the wgmma forward plans
//! over 192 x 128 tiles), at launch indices inside the launch (`IndexMap::index_of`, the
//! inverse of the kernels' row map; compact bases per side for dilated branches); and no
//! pair that is not allowed lies in a tile the plans mark full (the kernels skip the
//! element mask there). A chunk outside the sequence is an error, never a panic.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ringdil_cuda::launch::launches_for;
use ringdil_cuda::shape::{Chunk, Shape};
use ringdil_cuda::family::Family;
use ringdil_cuda::plan::{IndexMap, Side, Visit};
use ringdil_cuda::family::TILE;
use ringdil_cuda::check::tables::Strided;
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::{BlockSparse, Dilated, key_counts};

#[derive(Arbitrary, Debug)]
struct Input {
    n: u16,
    q: (u16, u8, u16),
    k: (u16, u8, u16),
    heads: u8,
    pattern: u8,
    a: u16,
    b: u8,
    causal: bool,
}

fuzz_target!(|input: Input| {
    let n = (input.n % 400) as usize + 1;
    let heads = (input.heads % 4) as usize + 1;
    let axis = |(offset, stride, rows): (u16, u8, u16)| {
        ((offset as usize) % (n + 2), (stride % 5) as usize, (rows as usize) % (n + 2))
    };
    let ((qo, qs, qr), (ko, ks, kr)) = (axis(input.q), axis(input.k));
    let dilated = match input.pattern % 5 {
        2 => {
            let w = (input.a as usize) % (2 * n) + 1;
            Some(Dilated::longnet(&[(w, (input.b as usize) % w.min(16) + 1)]))
        }
        _ => None,
    };
    let pattern = match (input.pattern % 5, &dilated) {
        (1, _) => GpuPattern::Window { left: input.a as usize % 300, right: input.b as usize % 100 },
        (4, _) => GpuPattern::BlockSparse(BlockSparse {
            dilated_stride: (input.b >= 128).then_some(input.b as usize % 4 + 1),
            global_tokens: input.a as usize / 64 % 8,
            ..BlockSparse::local(input.a as usize % 64 + 1, input.b as usize % 3)
        }),
        (3, _) => GpuPattern::table(std::sync::Arc::new(Strided((input.a as usize) % 100 + 1))),
        (_, Some(d)) => GpuPattern::Dilated(d.clone()),
        _ => GpuPattern::Dense,
    };
    let spec = GpuSpec::new(pattern).causal(input.causal);
    let shape = Shape { batch: 1, heads, kv_heads: heads, head_dim: 64, value_dim: 64, q_rows: qr, k_rows: kr };
    let chunk = Chunk { q_stride: qs, k_stride: ks, ..Chunk::new(qo, ko, n) };
    let fits = |o: usize, s: usize, r: usize| s >= 1 && r >= 1 && o + (r - 1) * s < n;
    let families = [Family::Mma, Family::Wgmma].map(|f| launches_for(&shape, &spec, &chunk, f));
    let [Ok(mma), Ok(wgmma)] = families else {
        assert!(families.iter().all(|l| l.is_err()), "the families disagree on {chunk:?} {shape:?}");
        assert!(!(fits(qo, qs, qr) && fits(ko, ks, kr)), "valid chunk rejected: {chunk:?} {shape:?}");
        return;
    };
    assert!(fits(qo, qs, qr) && fits(ko, ks, kr), "invalid chunk accepted: {chunk:?} {shape:?}");
    let reference = spec.to_reference();
    let (nq, nk) = mma[0].map.extents();
    for h in 0..heads {
        let o = dilated.as_ref().map_or(0, |d| d.offset(&d.branches[0], h, heads));
        for i in 0..qr {
            let qpos = qo + i * qs;
            let counts = key_counts(reference.pattern.as_ref(), qpos, h, heads, n);
            for j in 0..kr {
                let kpos = ko + j * ks;
                if counts[kpos] == 0 || (input.causal && kpos > qpos) {
                    for l in [&mma[0], &wgmma[0]] {
                        if let IndexMap::Identity { .. } = l.map {
                            let (qc, kc) = (i, j);
                            let (qt, kt) = (l.fwd_q_tile, l.fwd_k_tile);
                            assert!(l.fwd.visit(qc / qt, kc / kt) != Visit::Full, "q {qpos} k {kpos} h {h}: marked full");
                            assert!(l.cols.visit(kc / TILE, qc / TILE) != Visit::Full, "q {qpos} k {kpos} h {h}: marked full");
                        }
                    }
                    continue;
                }
                for l in [&mma[0], &wgmma[0]] {
                    let qc = l.map.index_of(Side::Query, qpos, o).expect("an allowed query has a launch index");
                    let kc = l.map.index_of(Side::Key, kpos, o).expect("an allowed key has a launch index");
                    assert!(qc < nq && kc < nk, "index ({qc}, {kc}) outside the launch ({nq}, {nk})");
                    let (qt, kt) = (l.fwd_q_tile, l.fwd_k_tile);
                    assert!(l.fwd.contains(qc / qt, kc / kt), "forward plan misses q {qpos} k {kpos} h {h} ({qt} x {kt})");
                    assert!(l.cols.contains(kc / TILE, qc / TILE), "backward plan misses q {qpos} k {kpos} h {h}");
                }
            }
        }
    }
});

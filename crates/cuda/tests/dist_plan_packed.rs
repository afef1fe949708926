//! The GPU ring plan with packed documents (issue 22, item 2; `docs/semantics.md` 16),
//! host code only, against transcriptions of the rule that share no code with
//! [`DistPlan`]: query `q` of batch row `b` attends key `k` iff one document
//! `[c_j, c_{j+1})` of the row's boundary list holds both, the window allows `k - q`,
//! and `k <= q` when causal. Documents are drawn long-tailed (empty, one-token, short and
//! tile-spanning ones), as per-row lists and as the flat list of the same documents; the
//! layouts are contiguous, zigzag, striped, random boundaries (empty ranks included) and
//! the work-balanced split; `P` in `1..=4`.
//!
//! * [`every_attended_key_is_needed_sent_and_kept`]: the plan covers every attended pair
//!   (needed piece pair, sent piece, kept row of every K/V head) and every rank pair the
//!   reference's `Needs` reports;
//! * [`nothing_travels_that_shares_no_document`]: a needed piece pair shares a document
//!   in some row, and the rows sent are exactly those whose document holds a token of the
//!   receiver (the volume follows);
//! * [`rank_local_documents_move_nothing`]: documents that never cross the rank split
//!   give no cross-rank pair at all, for every layout (striped: one-token documents);
//! * [`flat_and_per_row_lists_plan_alike`]: the two forms of one packing give one plan;
//! * [`balanced_split_gives_every_rank_its_causal_share`]: `balanced_layout`'s ranks
//!   each hold `W / P +- w_max` of the transcribed causal work.
//!
//! Cases are seeded SplitMix64 draws (`PROPTEST_CASES` overrides the count); a failure
//! prints the seed and the case.

use ringdil_cuda::dist::{DistPlan, balanced_layout};
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Layout, Needs};

const HEAD_DIM: usize = 64;

/// One packed plan to check: per-row boundary lists (the truth the transcriptions read).
#[derive(Debug, Clone)]
struct Case {
    n: usize,
    ranks: usize,
    rows: Vec<Vec<usize>>,
    flat: bool,
    heads: usize,
    kv_heads: usize,
    layout: Layout,
    causal: bool,
    window: Option<(usize, usize)>,
}

impl Case {
    fn documents(&self) -> Documents {
        match self.flat {
            false => Documents::per_row(self.rows.clone()),
            true => Documents::flat(flat_list(&self.rows, self.n)),
        }
    }

    fn spec(&self) -> GpuSpec {
        let pattern = match self.window {
            Some((left, right)) => GpuPattern::Window { left, right },
            None => GpuPattern::Dense,
        };
        GpuSpec::new(pattern).causal(self.causal).documents(self.documents())
    }

    fn plan(&self) -> DistPlan {
        let chunks = ChunkPlan::new(self.n, self.ranks, &self.layout).expect("chunk plan");
        DistPlan::new(chunks, self.spec(), self.rows.len(), self.heads, HEAD_DIM)
            .and_then(|p| p.with_kv_heads(self.kv_heads))
            .expect("DistPlan::new")
    }

    /// The transcribed rule: one document of row `b` holds `q` and `k`, the window and
    /// causality allow the pair.
    fn attends(&self, b: usize, q: usize, k: usize) -> bool {
        let window = self.window.is_none_or(|(left, right)| k + left >= q && k <= q + right);
        doc_of(&self.rows[b], q) == doc_of(&self.rows[b], k) && window && !(self.causal && k > q)
    }
}

/// The index `j` of the document `[c_j, c_{j+1})` of `list` holding `t` (a linear scan).
fn doc_of(list: &[usize], t: usize) -> usize {
    (0..list.len() - 1).find(|&j| list[j] <= t && t < list[j + 1]).expect("a position lies in one document")
}

/// `cu_seqlens` of the concatenated rows: every row's boundaries but its last, shifted
/// by `b n`, then `batch n`.
fn flat_list(rows: &[Vec<usize>], n: usize) -> Vec<usize> {
    let mut flat: Vec<usize> =
        rows.iter().enumerate().flat_map(|(b, r)| r[..r.len() - 1].iter().map(move |&c| c + b * n)).collect();
    flat.push(rows.len() * n);
    flat
}

/// Long-tailed lengths: 0, 1, 2..16, 17..100, 101..400 tokens (10, 15, 30, 30, 15 %).
fn long_tailed(n: usize, rng: &mut SplitMix64) -> Vec<usize> {
    let mut list = vec![0];
    while *list.last().unwrap() < n {
        let len = match rng.range(0, 99) {
            0..10 => 0,
            10..25 => 1,
            25..55 => rng.range(2, 16),
            55..85 => rng.range(17, 100),
            _ => rng.range(101, 400),
        };
        list.push((list.last().unwrap() + len).min(n));
    }
    list
}

/// A random layout of `n` tokens over `ranks`; `balanced` needs the documents.
fn layout(rng: &mut SplitMix64, n: usize, ranks: usize, rows: &[Vec<usize>]) -> Layout {
    match rng.range(0, 4) {
        0 => Layout::Contiguous,
        1 => Layout::Zigzag,
        2 => Layout::Striped,
        3 => {
            let mut cuts: Vec<usize> = (1..ranks).map(|_| rng.range(0, n)).collect();
            cuts.sort_unstable();
            Layout::Boundaries([vec![0], cuts, vec![n]].concat())
        }
        _ => balanced_layout(&Documents::per_row(rows.to_vec()), rows.len(), n, ranks).expect("balanced"),
    }
}

fn any_case(rng: &mut SplitMix64) -> Case {
    let n = rng.range(1, 300);
    let ranks = rng.range(1, 4);
    let rows: Vec<Vec<usize>> = (0..rng.range(1, 2)).map(|_| long_tailed(n, rng)).collect();
    let heads = [1, 2, 4][rng.range(0, 2)];
    let kv_heads = [1, heads][rng.range(0, 1)];
    let layout = layout(rng, n, ranks, &rows);
    let window = (rng.range(0, 2) == 0).then(|| (rng.range(0, 80), rng.range(0, 80)));
    Case { n, ranks, rows, flat: rng.range(0, 1) == 0, heads, kv_heads, layout, causal: rng.range(0, 1) == 0, window }
}

fn cases() -> u64 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(300)
}

/// Run `check` on every drawn case; panic with the seed and the case on the first error.
fn for_cases(draw: impl Fn(&mut SplitMix64) -> Case, check: impl Fn(&Case, &DistPlan) -> Result<(), String>) {
    for seed in 0..cases() {
        let case = draw(&mut SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD0C5));
        if let Err(e) = check(&case, &case.plan()) {
            panic!("case seed {seed}: {e}\n{case:#?}");
        }
    }
}

/// `(rank, piece, row)` of every token, from the plan's pieces.
fn locate(plan: &DistPlan) -> Vec<(usize, usize, usize)> {
    let mut at = vec![(usize::MAX, 0, 0); plan.seq_len()];
    for r in 0..plan.ranks() {
        for (pi, p) in plan.pieces(r).iter().enumerate() {
            (0..p.rows).for_each(|i| at[p.start + i * p.stride] = (r, pi, i));
        }
    }
    at
}

/// The K/V head rows of piece `kj` of `src` whose document holds a token of `dst`, per
/// batch row: `(b * rows + i) * kv_heads + g`, ascending.
fn document_rows(case: &Case, plan: &DistPlan, dst: usize, src: usize, kj: usize) -> Vec<u32> {
    let p = plan.pieces(src)[kj];
    let mut out = Vec::new();
    for (b, list) in case.rows.iter().enumerate() {
        for i in 0..p.rows {
            let doc = doc_of(list, p.start + i * p.stride);
            if plan.chunks.tokens(dst).iter().any(|&t| doc_of(list, t) == doc) {
                out.extend((0..case.kv_heads).map(|g| ((b * p.rows + i) * case.kv_heads + g) as u32));
            }
        }
    }
    out
}

#[test]
fn every_attended_key_is_needed_sent_and_kept() {
    for_cases(any_case, |case, plan| {
        let at = locate(plan);
        for (q, &(r, qi, _)) in at.iter().enumerate() {
            for (k, &(src, kj, i)) in at.iter().enumerate() {
                for b in (0..case.rows.len()).filter(|&b| case.attends(b, q, k)) {
                    let pair =
                        format!("query {q} (rank {r} piece {qi}) attends key {k} (rank {src} piece {kj}) in row {b}");
                    if !plan.needed(r, src).contains(&(qi, kj)) {
                        return Err(format!("{pair}; not in needed({r}, {src}) = {:?}", plan.needed(r, src)));
                    }
                    if src == r {
                        continue;
                    }
                    if !plan.needed_pieces(r, src).contains(&kj) {
                        return Err(format!("{pair}; the piece is not sent"));
                    }
                    let rows = plan.pieces(src)[kj].rows;
                    let entries = (0..case.kv_heads).map(|g| ((b * rows + i) * case.kv_heads + g) as u32);
                    if let Some(kept) = plan.kept_rows(r, src, kj)
                        && let Some(e) = entries.into_iter().find(|e| kept.binary_search(e).is_err())
                    {
                        return Err(format!("{pair}; K/V entry {e} not in kept_rows ({} entries)", kept.len()));
                    }
                }
            }
        }
        let spec = case.spec().to_reference();
        let needs = Needs::new(&spec, &plan.chunks, case.heads).map_err(|e| format!("Needs::new: {e}"))?;
        for (dst, src) in (0..case.ranks).flat_map(|d| (0..case.ranks).map(move |s| (d, s))) {
            if needs.any(dst, src) && plan.needed(dst, src).is_empty() {
                return Err(format!("the reference's rank {dst} needs rank {src}; the plan has no pair"));
            }
        }
        Ok(())
    });
}

#[test]
fn nothing_travels_that_shares_no_document() {
    let mut packed = 0;
    for_cases(any_case, |case, plan| {
        for (dst, src) in (0..case.ranks).flat_map(|d| (0..case.ranks).map(move |s| (d, s))) {
            let mut volume = 0;
            for &(qi, kj) in plan.needed(dst, src) {
                let (qp, kp) = (plan.pieces(dst)[qi], plan.pieces(src)[kj]);
                let share = case.rows.iter().any(|list| {
                    let docs =
                        |p: ringdil_cuda::dist::Piece| (0..p.rows).map(move |i| doc_of(list, p.start + i * p.stride));
                    docs(qp).any(|d| docs(kp).any(|e| d == e))
                });
                if !share {
                    return Err(format!("needed({dst}, {src}) has ({qi}, {kj}), whose pieces share no document"));
                }
            }
            if dst == src {
                continue;
            }
            for kj in plan.needed_pieces(dst, src) {
                let want = document_rows(case, plan, dst, src, kj);
                let all = case.rows.len() * plan.pieces(src)[kj].rows * case.kv_heads;
                let got = plan.kept_rows(dst, src, kj);
                match got {
                    None if want.len() == all => {}
                    Some(kept) if kept == want.as_slice() => {}
                    _ => return Err(format!("kept_rows({dst}, {src}, {kj}) = {got:?}, the documents give {want:?}")),
                }
                volume += 2 * want.len() * HEAD_DIM;
            }
            if plan.pattern_volume(dst, src) != volume {
                return Err(format!("pattern_volume({dst}, {src}) = {}, want {volume}", plan.pattern_volume(dst, src)));
            }
        }
        Ok(())
    });
    // The packed lists are exercised (not only whole pieces): counted on a fixed draw.
    for seed in 0..40 {
        let case = any_case(&mut SplitMix64::new(seed));
        let plan = case.plan();
        packed += (0..case.ranks)
            .flat_map(|d| (0..case.ranks).filter(move |&s| s != d).map(move |s| (d, s)))
            .flat_map(|(d, s)| plan.needed_pieces(d, s).into_iter().map(move |kj| (d, s, kj)))
            .filter(|&(d, s, kj)| plan.kept_rows(d, s, kj).is_some())
            .count();
    }
    assert!(packed > 10, "only {packed} packed pieces in 40 cases: the test checks too little");
}

/// Any case with its documents recut for its layout: cut at every change of owner along
/// the positions and at some of the drawn boundaries (equal cuts are empty documents), so
/// each document lies in one rank's tokens (one-token documents on striped ranks).
fn rank_local_case(rng: &mut SplitMix64) -> Case {
    let mut case = any_case(rng);
    let owner = ChunkPlan::new(case.n, case.ranks, &case.layout).unwrap().token_map().rank;
    for list in &mut case.rows {
        let mut cuts: Vec<usize> = (1..case.n).filter(|&t| owner[t] != owner[t - 1]).collect();
        cuts.extend(list.iter().copied().filter(|_| rng.range(0, 1) == 0));
        cuts.extend([0, case.n]);
        cuts.sort_unstable();
        *list = cuts;
    }
    case
}

#[test]
fn rank_local_documents_move_nothing() {
    for_cases(rank_local_case, |case, plan| {
        let needs = Needs::new(&case.spec().to_reference(), &plan.chunks, case.heads).map_err(|e| e.to_string())?;
        for (dst, src) in (0..case.ranks).flat_map(|d| (0..case.ranks).filter(move |&s| s != d).map(move |s| (d, s))) {
            if needs.any(dst, src) {
                return Err(format!("the draw is not rank-local: the reference's rank {dst} needs rank {src}"));
            }
            if !plan.needed(dst, src).is_empty() || plan.pattern_volume(dst, src) != 0 {
                return Err(format!(
                    "rank {dst} needs {:?} of rank {src} ({} elements) though no document crosses ranks",
                    plan.needed(dst, src),
                    plan.pattern_volume(dst, src)
                ));
            }
        }
        Ok(())
    });
}

#[test]
fn flat_and_per_row_lists_plan_alike() {
    for_cases(any_case, |case, plan| {
        let other = Case { flat: !case.flat, ..case.clone() }.plan();
        for (dst, src) in (0..case.ranks).flat_map(|d| (0..case.ranks).map(move |s| (d, s))) {
            if plan.needed(dst, src) != other.needed(dst, src) {
                return Err(format!(
                    "needed({dst}, {src}): {:?} vs {:?}",
                    plan.needed(dst, src),
                    other.needed(dst, src)
                ));
            }
            for kj in 0..plan.pieces(src).len() {
                if plan.kept_rows(dst, src, kj) != other.kept_rows(dst, src, kj) {
                    return Err(format!("kept_rows({dst}, {src}, {kj}) differ between the two lists"));
                }
            }
        }
        Ok(())
    });
}

#[test]
fn balanced_split_gives_every_rank_its_causal_share() {
    for_cases(any_case, |case, _| {
        let Layout::Boundaries(b) =
            balanced_layout(&case.documents(), case.rows.len(), case.n, case.ranks).map_err(|e| e.to_string())?
        else {
            return Err("not a boundaries layout".into());
        };
        // Position i of document [c_j, c_{j+1}) sees i - c_j + 1 keys, summed over rows.
        let work: Vec<f64> =
            (0..case.n).map(|i| case.rows.iter().map(|l| (i - l[doc_of(l, i)] + 1) as f64).sum()).collect();
        let (total, w_max) = (work.iter().sum::<f64>(), work.iter().cloned().fold(0.0, f64::max));
        let share = total / case.ranks as f64;
        for r in 0..case.ranks {
            let got: f64 = work[b[r]..b[r + 1]].iter().sum();
            if !(got <= share + w_max && got > share - w_max - 1e-9) {
                return Err(format!("rank {r} holds work {got}, share {share} +- {w_max} ({b:?})"));
            }
        }
        Ok(())
    });
}

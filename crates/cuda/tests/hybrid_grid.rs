//! The Ulysses x ring grid of the GPU runtime (`dist::hybrid_split`), host code, against
//! rules written out here:
//!
//! * (a) [`overlaps_cover_each_group_row_once_with_its_token`]: group `g` owns its members'
//!   tokens one rank after the other; the overlaps of the members' pieces with the
//!   group's pieces cover every group row exactly once, each with the same global token;
//! * (b) [`index_lists_move_each_row_to_its_token_and_head`]: gathering a token piece with
//!   `token_rows` / `token_lse` and scattering with `group_rows` / `group_lse` puts batch
//!   row `b`, token `t`, global head `h` exactly where the group piece holds `(b, t, h)`,
//!   for the query heads and the K/V heads of every run of every member;
//! * (c) [`forward_volume_is_the_reference_schedules`]: elements each rank sends in the
//!   forward equal what the reference's `ring::hybrid` schedule sends (its `Send`
//!   operations), multi-head and grouped-query;
//! * (d) [`head_slice_plans_keep_their_global_heads_rows`]: a run's ring plan (query heads
//!   `a..b` of `H`) keeps, for a dilated pattern with per-head offsets, the K/V rows that
//!   the multi-head plan of all heads keeps for some query head of the K/V head's group
//!   among `a..b`; its launches see global head `a`;
//! * (e) [`bad_degrees_and_head_ranges_are_typed_errors`].
//!
//! Cases are drawn from seeded SplitMix64 streams (`PROPTEST_CASES` overrides the count).

use ringdil_cuda::dist::hybrid_split::{self, HybridSplit, Overlap};
use ringdil_cuda::dist::{DistError, DistPlan};
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Heads;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Layout, even_boundaries, hybrid};
use ringdil_reference::spec::Spec;

fn cases(default: u64) -> u64 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// A grid case: sizes, layout, heads and the Ulysses degree.
#[derive(Debug, Clone)]
struct Case {
    n: usize,
    ranks: usize,
    layout: Layout,
    heads: usize,
    kv: usize,
    degree: usize,
    batch: usize,
}

fn draw(rng: &mut SplitMix64) -> Case {
    let ranks = rng.range(1, 8);
    let n = rng.range(ranks, 160);
    let layout = match rng.range(0, 3) {
        0 => Layout::Contiguous,
        1 => Layout::Zigzag,
        2 => Layout::Striped,
        _ => {
            let mut cuts: Vec<usize> = (1..ranks).map(|_| rng.range(0, n)).collect();
            cuts.sort_unstable();
            Layout::Boundaries([vec![0], cuts, vec![n]].concat())
        }
    };
    let heads = rng.range(1, 8);
    let divisors = |x: usize| (1..=x).filter(move |d| x % d == 0);
    let kvs: Vec<usize> = divisors(heads).collect();
    let kv = kvs[rng.range(0, kvs.len() - 1)];
    let degrees: Vec<usize> = divisors(ranks).filter(|&u| u <= heads).collect();
    let degree = degrees[rng.range(0, degrees.len() - 1)];
    Case { n, ranks, layout, heads, kv, degree, batch: rng.range(1, 2) }
}

impl Case {
    fn plan(&self, spec: GpuSpec) -> DistPlan {
        self.plan_at(spec, (64, 64))
    }

    /// The plan with q/k head dim `d` and v's `dv`.
    fn plan_at(&self, spec: GpuSpec, (d, dv): (usize, usize)) -> DistPlan {
        let chunks = ChunkPlan::new(self.n, self.ranks, &self.layout).expect("layout");
        let plan = DistPlan::new(chunks, spec, self.batch, self.heads, d).unwrap();
        plan.with_kv_heads(self.kv).unwrap().with_value_dim(dv).unwrap()
    }
}

/// Run `check` on drawn cases; panic with the seed and case of the first failure.
fn for_cases(default: u64, mut check: impl FnMut(&Case) -> Result<(), String>) {
    for seed in 0..cases(default) {
        let case = draw(&mut SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x4B1D));
        if let Err(e) = check(&case) {
            panic!("case seed {seed}: {e}\n{case:#?}");
        }
    }
}

/// Global tokens of group `g`: its members' tokens, rank after rank (the rule).
fn group_tokens(chunks: &ChunkPlan, degree: usize, g: usize) -> Vec<usize> {
    (g * degree..(g + 1) * degree).flat_map(|r| chunks.tokens(r).to_vec()).collect()
}

#[test]
fn overlaps_cover_each_group_row_once_with_its_token() {
    for_cases(300, |c| {
        let plan = c.plan(GpuSpec::new(GpuPattern::Dense));
        let split = HybridSplit::new(&plan, c.degree).map_err(|e| e.to_string())?;
        for g in 0..c.ranks / c.degree {
            let tokens = group_tokens(&plan.chunks, c.degree, g);
            let gp = split.group_pieces(g);
            let group_token = |gj: usize, row: usize| gp[gj].start + row * gp[gj].stride;
            // The group's pieces read in order are its tokens.
            let listed: Vec<usize> = (0..gp.len())
                .flat_map(|gj| (0..gp[gj].rows).map(move |i| (gj, i)))
                .map(|(gj, i)| group_token(gj, i))
                .collect();
            if listed != tokens {
                return Err(format!("group {g}: pieces hold {listed:?}, the members own {tokens:?}"));
            }
            let mut seen: Vec<Vec<usize>> = gp.iter().map(|p| vec![0; p.rows]).collect();
            for u in 0..c.degree {
                let r = split.rank(g, u);
                for Overlap { piece, rows, group_piece, at } in split.overlaps(&plan, r) {
                    let p = plan.pieces(r)[piece];
                    for (k, i) in rows.enumerate() {
                        let (t, gt) = (p.start + i * p.stride, group_token(group_piece, at + k));
                        if t != gt {
                            return Err(format!("rank {r} piece {piece} row {i}: token {t}, group row holds {gt}"));
                        }
                        seen[group_piece][at + k] += 1;
                    }
                }
            }
            if seen.iter().flatten().any(|&x| x != 1) {
                return Err(format!("group {g}: rows covered {seen:?} times (want once each)"));
            }
        }
        Ok(())
    });
}

/// A label for batch row `b`, token `t`, head `h`.
fn label(b: usize, t: usize, h: usize) -> u64 {
    ((b as u64) << 40) | ((t as u64) << 16) | h as u64
}

#[test]
fn index_lists_move_each_row_to_its_token_and_head() {
    for_cases(200, |c| {
        let plan = c.plan(GpuSpec::new(GpuPattern::Dense));
        let split = HybridSplit::new(&plan, c.degree).map_err(|e| e.to_string())?;
        for r in 0..c.ranks {
            let (g, _) = split.place(r);
            let gp = split.group_pieces(g);
            for u in 0..c.degree {
                for run in split.runs(u) {
                    for (all, heads, lse) in [(c.heads, &run.q, false), (c.kv, &run.kv, false), (c.heads, &run.q, true)]
                    {
                        for ov in split.overlaps(&plan, r) {
                            let p = plan.pieces(r)[ov.piece];
                            let rows = p.rows;
                            // Token piece [B, rows, all] (or LSE [B, all, rows]) of labels.
                            let src: Vec<u64> = if lse {
                                (0..c.batch)
                                    .flat_map(|b| {
                                        (0..all).flat_map(move |h| {
                                            (0..rows).map(move |i| label(b, p.start + i * p.stride, h))
                                        })
                                    })
                                    .collect()
                            } else {
                                (0..c.batch)
                                    .flat_map(|b| {
                                        (0..rows).flat_map(move |i| {
                                            (0..all).map(move |h| label(b, p.start + i * p.stride, h))
                                        })
                                    })
                                    .collect()
                            };
                            let (from, to) = if lse {
                                (
                                    hybrid_split::token_lse(c.batch, rows, all, heads, &ov),
                                    hybrid_split::group_lse(c.batch, gp[ov.group_piece].rows, heads.len(), &ov),
                                )
                            } else {
                                (
                                    hybrid_split::token_rows(c.batch, rows, all, heads, &ov),
                                    hybrid_split::group_rows(c.batch, gp[ov.group_piece].rows, heads.len(), &ov),
                                )
                            };
                            let gpc = gp[ov.group_piece];
                            let mut dst = vec![u64::MAX; c.batch * gpc.rows * heads.len()];
                            for (&f, &t) in from.iter().zip(&to) {
                                dst[t as usize] = src[f as usize];
                            }
                            for b in 0..c.batch {
                                for k in 0..ov.rows.len() {
                                    let row = ov.at + k;
                                    let t = gpc.start + row * gpc.stride;
                                    for j in 0..heads.len() {
                                        let at = if lse {
                                            (b * heads.len() + j) * gpc.rows + row
                                        } else {
                                            (b * gpc.rows + row) * heads.len() + j
                                        };
                                        if dst[at] != label(b, t, heads.start + j) {
                                            return Err(format!(
                                                "rank {r} run {run:?} (lse {lse}): group cell {at} holds {:#x}, want b {b} t {t} h {}",
                                                dst[at],
                                                heads.start + j
                                            ));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn forward_volume_is_the_reference_schedules() {
    for_cases(300, |c| {
        // Equal head dims, and MLA's v narrower than q and k (Q, K rows at d, V and the
        // output at d_v).
        for (d, dv) in [(64, 64), (192, 128)] {
            let plan = c.plan_at(GpuSpec::new(GpuPattern::Dense), (d, dv));
            let split = HybridSplit::new(&plan, c.degree).map_err(|e| e.to_string())?;
            let heads = Heads::new(c.heads, c.kv).unwrap();
            let schedule = hybrid(&plan.chunks, &Spec::dense(), heads, c.degree).map_err(|e| e.to_string())?;
            let [fwd, _] = schedule.sent_elements(c.batch, d, dv);
            for r in 0..c.ranks {
                let want: usize = fwd.iter().map(|step| step[r]).sum();
                let got = split.forward_volume(&plan, r);
                if got != want {
                    return Err(format!(
                        "d = {d}, d_v = {dv}, rank {r}: the runtime counts {got} elements, the reference schedule sends {want}"
                    ));
                }
            }
        }
        Ok(())
    });
}

#[test]
fn head_slice_plans_keep_their_global_heads_rows() {
    for_cases(150, |c| {
        // Per-head offsets (h mod r): a slice that forgot its first head keeps other rows.
        let spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(16, 2), (48, 4)])));
        let plan = c.plan(spec);
        let split = HybridSplit::new(&plan, c.degree).map_err(|e| e.to_string())?;
        let groups = split.group_count();
        // Multi-head, so that its kept rows are per query head.
        let whole = DistPlan::new(split.groups.clone(), plan.spec.clone(), c.batch, c.heads, 64).unwrap();
        for u in 0..c.degree {
            for run in split.runs(u) {
                let slice = split.ring_plan(&plan, run).map_err(|e| e.to_string())?;
                if (slice.first_head, slice.all_heads, slice.heads, slice.kv_heads)
                    != (run.q.start, c.heads, run.q.len(), run.kv.len())
                {
                    return Err(format!(
                        "run {run:?}: slice heads {} of {} ({} K/V)",
                        slice.first_head, slice.all_heads, slice.kv_heads
                    ));
                }
                if let Some(kv) = (0..groups).flat_map(|s| (0..slice.pieces(s).len()).map(move |kj| (s, kj))).next() {
                    let (chunk, _) = (slice.pair(kv.0, 0, kv.0, kv.1).1, ());
                    if chunk.first_head != run.q.start {
                        return Err(format!("run {run:?}: launches see first head {}", chunk.first_head));
                    }
                }
                for (dst, src) in (0..groups).flat_map(|d| (0..groups).map(move |s| (d, s))).filter(|(d, s)| d != s) {
                    if slice.needed_pieces(dst, src) != whole.needed_pieces(dst, src) {
                        continue; // liveness per head slice may differ: compare rows only where it agrees
                    }
                    for kj in slice.needed_pieces(dst, src) {
                        let rows = slice.pieces(src)[kj].rows;
                        let all_rows = |hk: usize| (0..c.batch * rows).flat_map(move |i| (0..hk).map(move |g| (i, g)));
                        let expand = |kept: Option<&[u32]>, hk: usize| -> Vec<(usize, usize)> {
                            match kept {
                                None => all_rows(hk).collect(),
                                Some(k) => k.iter().map(|&x| (x as usize / hk, x as usize % hk)).collect(),
                            }
                        };
                        // A slice K/V head's row travels when some query head of its group
                        // (global heads) keeps it.
                        let group = run.q.len() / run.kv.len();
                        let per_head = expand(whole.kept_rows(dst, src, kj), c.heads);
                        let want: Vec<(usize, usize)> = all_rows(run.kv.len())
                            .filter(|&(i, g)| {
                                let first = run.q.start + g * group;
                                (first..first + group).any(|h| per_head.contains(&(i, h)))
                            })
                            .collect();
                        let got = expand(slice.kept_rows(dst, src, kj), run.kv.len());
                        if got != want {
                            return Err(format!(
                                "run {run:?}, {src} -> {dst} piece {kj}: kept {got:?}, whole plan keeps {want:?}"
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn bad_degrees_and_head_ranges_are_typed_errors() {
    let chunks = ChunkPlan::new(64, 4, &Layout::Zigzag).unwrap();
    let plan = DistPlan::new(chunks.clone(), GpuSpec::new(GpuPattern::Dense), 1, 2, 64).unwrap();
    for degree in [0, 3, 4] {
        let e = plan.clone().with_hybrid_degree(degree).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            e.contains(&format!("degree {degree}")) && e.contains("4 ranks") && e.contains("2 query heads"),
            "{degree}: {e}"
        );
        assert!(matches!(HybridSplit::new(&plan, degree), Err(DistError::HybridDegree { .. })), "{degree}");
    }
    assert_eq!(plan.clone().with_hybrid_degree(2).unwrap().hybrid_degree(), 2);
    // The reference's rule by default: the largest divisor of 4 not above 2 heads.
    assert_eq!(plan.hybrid_degree(), 2);
    for heads in [0..0, 1..3, 2..2] {
        let e = DistPlan::for_heads(chunks.clone(), GpuSpec::new(GpuPattern::Dense), 1, heads.clone(), 2, 64);
        assert!(matches!(&e, Err(DistError::BadHeads { .. })), "{heads:?}: {:?}", e.err());
    }
    // Runs of members whose heads cut a K/V group: within one group, or whole groups.
    let plan =
        DistPlan::new(ChunkPlan::new(64, 3, &Layout::Contiguous).unwrap(), GpuSpec::new(GpuPattern::Dense), 1, 8, 64)
            .unwrap()
            .with_kv_heads(2)
            .unwrap();
    let split = HybridSplit::new(&plan, 3).unwrap();
    assert_eq!(even_boundaries(8, 3), vec![0, 3, 6, 8]);
    let runs: Vec<_> = (0..3).flat_map(|u| split.runs(u)).map(|r| (r.q.clone(), r.kv.clone())).collect();
    assert_eq!(runs, vec![(0..3, 0..1), (3..4, 0..1), (4..6, 1..2), (6..8, 1..2)]);
}

/// The checks' and benchmarks' grid: a degree that divides the ranks and fits the heads,
/// with two or more groups whenever a divisor strictly between 1 and the ranks fits the
/// heads (the largest such), else the reference's rule.
#[test]
fn grid_degrees_form_a_grid_where_one_exists() {
    use ringdil_cuda::dist::hybrid_split::grid_degree;
    for ranks in 1..=12 {
        for heads in 1..=12 {
            let u = grid_degree(ranks, heads);
            assert!(ranks % u == 0 && u <= heads.max(1), "{ranks} ranks, {heads} heads: {u}");
            let proper: Vec<usize> = (2..ranks).filter(|d| ranks % d == 0 && *d <= heads).collect();
            match proper.last() {
                Some(&best) => assert_eq!(u, best, "{ranks} ranks, {heads} heads"),
                None => {
                    assert_eq!(u, ringdil_reference::ring::hybrid_degree(ranks, heads), "{ranks} ranks, {heads} heads")
                }
            }
        }
    }
    assert_eq!((grid_degree(4, 8), grid_degree(8, 8), grid_degree(2, 8), grid_degree(6, 2)), (2, 4, 2, 2));
}

//! The kernel check's cases: for each element type and head dim, every kernel (forward,
//! ring step, merge, backward) under every mask family, with sizes and pattern
//! parameters drawn from the run's seed, then the large-score and all-masked cases of
//! [`super::extreme`], the grouped-query cases of [`super::gqa`], the packed-sequence
//! cases of [`super::packed`], the cases of head dims 96, 192, 256 of
//! [`super::head_dims`], the mask expressions of [`super::expressions`], the mask tables
//! of [`super::tables`], the compact `dilated_expr` patterns of [`super::dilated_expr`],
//! the head-group combine of [`super::head_groups`], the interval masks of
//! [`super::intervals`], the value dims of [`super::value_dims`], the packed tables of
//! [`super::packed_tables`] and the two-stream calls of [`super::streams`] (324 cases in
//! all; the test below counts them).
//! Lengths favour primes and lengths that are not multiples of the 64-row tile.

use super::Logits;
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::{BlockSparse, Dilated};
use ringdil_reference::random::SplitMix64;

/// What a case exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One forward call over the whole sequence.
    Forward,
    /// One forward call of a query chunk over a key chunk (a ring step).
    RingStep,
    /// Two ring steps over disjoint key chunks, merged on the GPU.
    Merge,
    /// Forward, then dQ, dK, dV.
    Backward,
    /// Forward calls of one module on two streams at once ([`super::streams`]).
    TwoStreams,
}

/// One kernel-check case: the kernel, its name, element type, sizes, mask and scores.
#[derive(Debug, Clone)]
pub struct Case {
    pub kind: Kind,
    pub name: String,
    pub dtype: Dtype,
    pub batch: usize,
    pub heads: usize,
    /// K/V heads: `heads` for multi-head attention, a divisor of it for grouped-query
    /// attention (query head `h` reads K/V head `h / (heads / kv_heads)`).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// v's head dim (and d_out's, the output's): `head_dim`, or MLA's 128 at 192
    /// ([`super::value_dims`]).
    pub value_dim: usize,
    pub seq: usize,
    pub spec: GpuSpec,
    /// How q and k are drawn (the magnitude of the scores).
    pub logits: Logits,
    /// Built to have query rows with no key (a ring step then takes its key rows after
    /// its first query, [`super::kernels`]); a run without one fails.
    pub empty_rows: bool,
}

/// Sequence lengths: primes and non-multiples of 64 first, a few exact multiples.
const LENGTHS: [usize; 12] = [1, 61, 97, 127, 131, 192, 257, 263, 509, 521, 640, 1021];

/// The case list of one run, sizes and patterns drawn from `seed`. `quick` keeps the
/// sizes small (the `cargo test` version).
pub fn cases(seed: u64, quick: bool) -> Vec<Case> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let mut add = |kind: Kind, name: &str, spec: GpuSpec, rng: &mut SplitMix64| {
                out.push(Case::drawn(kind, name, (dtype, head_dim), spec, quick, rng));
            };
            let causal = rng.uniform() < 0.5;
            let dense = GpuSpec::new(GpuPattern::Dense);
            add(Kind::Forward, "dense", dense.clone(), &mut rng);
            add(Kind::Forward, "dense causal", dense.clone().causal(true), &mut rng);
            add(Kind::Forward, "causal + key padding", dense.clone().causal(true).key_lengths(vec![]), &mut rng);
            let window = GpuPattern::Window { left: rng.range(0, 150), right: rng.range(0, 80) };
            add(Kind::Forward, "sliding window", GpuSpec::new(window.clone()).causal(causal), &mut rng);
            let bs = BlockSparse {
                block: [16, 32, 64, 100][rng.range(0, 3)],
                local_radius: Some(rng.range(0, 1)),
                dilated_stride: Some(rng.range(2, 5)),
                global_tokens: rng.range(0, 20),
                block_mask: None,
            };
            add(
                Kind::Forward,
                "block sparse",
                GpuSpec::new(GpuPattern::BlockSparse(bs.clone())).causal(causal),
                &mut rng,
            );
            let user = BlockSparse { block_mask: Some(vec![]), local_radius: None, dilated_stride: None, ..bs };
            add(Kind::Forward, "block sparse, user mask", GpuSpec::new(GpuPattern::BlockSparse(user)), &mut rng);
            let branches = [(rng.range(16, 128), 1), (rng.range(100, 400), 2), (rng.range(400, 2000), 4)];
            let longnet = GpuPattern::Dilated(Dilated::longnet(&branches));
            add(Kind::Forward, "dilated longnet", GpuSpec::new(longnet.clone()).causal(causal), &mut rng);
            let torchscale =
                GpuPattern::Dilated(Dilated::torchscale(&[(rng.range(64, 256), 2), (rng.range(256, 1024), 8)]));
            add(Kind::Forward, "dilated torchscale offsets", GpuSpec::new(torchscale), &mut rng);
            add(Kind::RingStep, "ring step dense", dense.clone().causal(causal), &mut rng);
            add(Kind::RingStep, "ring step dilated", GpuSpec::new(longnet.clone()).causal(true), &mut rng);
            add(
                Kind::RingStep,
                "ring step window + padding",
                GpuSpec::new(window.clone()).key_lengths(vec![]),
                &mut rng,
            );
            add(Kind::Merge, "ring merge causal", dense.clone().causal(true), &mut rng);
            add(Kind::Merge, "ring merge window + padding", GpuSpec::new(window).key_lengths(vec![]), &mut rng);
            add(Kind::Backward, "backward dense", dense.clone().causal(causal), &mut rng);
            add(Kind::Backward, "backward causal + padding", dense.causal(true).key_lengths(vec![]), &mut rng);
            add(Kind::Backward, "backward dilated", GpuSpec::new(longnet).causal(causal), &mut rng);
        }
    }
    // After the draws above, so that a seed gives the unit-scale cases it always gave.
    out.extend(super::extreme::cases(&mut rng, quick));
    out.extend(super::gqa::cases(&mut rng, quick));
    out.extend(super::packed::cases(&mut rng, quick));
    out.extend(super::head_dims::cases(&mut rng, quick));
    out.extend(super::expressions::cases(&mut rng, quick));
    out.extend(super::tables::cases(&mut rng, quick));
    out.extend(super::dilated_expr::cases(&mut rng, quick));
    out.extend(super::head_groups::cases(&mut rng, quick));
    out.extend(super::intervals::cases(&mut rng, quick));
    out.extend(super::value_dims::cases(&mut rng, quick));
    out.extend(super::packed_tables::cases(&mut rng, quick));
    out.extend(super::streams::cases(&mut rng, quick));
    out
}

/// A sequence length, batch size and head count from `rng`.
pub(super) fn sizes(quick: bool, rng: &mut SplitMix64) -> (usize, usize, usize) {
    let seq = if quick {
        LENGTHS[rng.range(0, 6)]
    } else if rng.uniform() < 0.75 {
        LENGTHS[rng.range(0, LENGTHS.len() - 1)]
    } else {
        rng.range(2, 1100)
    };
    (seq, rng.range(1, 2), rng.range(1, 4))
}

impl Case {
    /// A unit-score case of `kind` with sizes from `rng` ([`sizes`]) and what of `spec`
    /// depends on them ([`fit_spec`]).
    pub(super) fn drawn(
        kind: Kind,
        name: &str,
        (dtype, head_dim): (Dtype, usize),
        spec: GpuSpec,
        quick: bool,
        rng: &mut SplitMix64,
    ) -> Case {
        let (seq, batch, heads) = sizes(quick, rng);
        Case::new(kind, name, (dtype, head_dim), [batch, seq, heads], fit_spec(spec, batch, seq, rng))
    }

    /// A unit-score case of `kind` with sizes `[batch, seq, heads]`.
    pub(super) fn new(
        kind: Kind,
        name: &str,
        (dtype, head_dim): (Dtype, usize),
        [batch, seq, heads]: [usize; 3],
        spec: GpuSpec,
    ) -> Case {
        let name = name.into();
        Case {
            kind,
            name,
            dtype,
            batch,
            heads,
            kv_heads: heads,
            head_dim,
            value_dim: head_dim,
            seq,
            spec,
            logits: Logits::Unit,
            empty_rows: false,
        }
    }
}

/// Draw what depends on the drawn sizes: key lengths (an empty list means "draw them"),
/// documents (likewise) and a user block mask (an empty mask means "draw one for this
/// length").
pub(super) fn fit_spec(mut spec: GpuSpec, batch: usize, seq: usize, rng: &mut SplitMix64) -> GpuSpec {
    if spec.key_lengths.is_some() {
        spec.key_lengths = Some((0..batch).map(|_| rng.range(0, seq)).collect());
    }
    let draw_documents = match &spec.documents {
        Some(Documents::PerRow(lists)) => lists.is_empty(),
        Some(Documents::Flat(list)) => list.is_empty(),
        None => false,
    };
    if draw_documents && let Some(like) = &spec.documents {
        spec.documents = Some(super::packed::draw_documents(like, batch, seq, rng));
    }
    if let GpuPattern::BlockSparse(bs) = &mut spec.pattern
        && bs.block_mask.as_ref().is_some_and(Vec::is_empty)
    {
        let nb = seq.div_ceil(bs.block);
        bs.block_mask = Some((0..nb).map(|_| (0..nb).map(|_| rng.uniform() < 0.3).collect()).collect());
    }
    spec
}

/// One line naming the case completely (enough to reproduce it with its seed).
pub fn describe(c: &Case) -> String {
    format!(
        "{:?} {} {:?} d={}{} b={} h={}{} n={} causal={} pattern={} key_lengths={:?}{}",
        c.kind,
        c.name,
        c.dtype,
        c.head_dim,
        if c.value_dim == c.head_dim { String::new() } else { format!(" d_v={}", c.value_dim) },
        c.batch,
        c.heads,
        if c.kv_heads == c.heads { String::new() } else { format!(" kv_heads={}", c.kv_heads) },
        c.seq,
        c.spec.causal,
        // A table's and a dilated_expr pattern are named by the case (their Debug forms
        // are a whole mask, or expression trees).
        match &c.spec.pattern {
            GpuPattern::Table(_) => "Table".to_string(),
            GpuPattern::DilatedExpr(_) => "DilatedExpr".to_string(),
            p => format!("{p:?}"),
        },
        c.spec.key_lengths,
        c.spec.documents.as_ref().map_or(String::new(), |d| format!(" documents={d:?}"))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_cover_every_kernel_type_and_awkward_lengths() {
        let c = cases(7, false);
        for kind in [Kind::Forward, Kind::RingStep, Kind::Merge, Kind::Backward] {
            for dtype in [Dtype::Bf16, Dtype::F16] {
                for d in [64, 128] {
                    assert!(c.iter().any(|x| x.kind == kind && x.dtype == dtype && x.head_dim == d));
                }
            }
        }
        assert!(c.iter().any(|x| x.seq % 64 != 0));
        assert_eq!(c.len(), 324);
        assert_eq!(c.iter().filter(|x| x.value_dim != x.head_dim).count(), 20);
        assert_eq!(c.iter().filter(|x| matches!(x.spec.pattern, GpuPattern::Expr(_))).count(), 25);
        // The table module's 16, the head-group combine's 4 and the packed tables' 2 as
        // tables (the packed cases' other patterns become tables when lowered).
        assert_eq!(c.iter().filter(|x| matches!(x.spec.pattern, GpuPattern::Table(_))).count(), 22);
        // `dilated_expr` chose compact launches for every compact pattern (none fell back
        // to a table: the 22 above are the table, head-group and packed modules'), in both
        // lists.
        let compact =
            |list: &[Case]| list.iter().filter(|x| matches!(x.spec.pattern, GpuPattern::DilatedExpr(_))).count();
        assert_eq!((compact(&c), compact(&cases(7, true))), (29, 25));
        // Both lists hold the extreme cases (the quick one is the GPU test's).
        for list in [&c, &cases(7, true)] {
            assert!(list.iter().any(|x| x.logits == Logits::Large) && list.iter().any(|x| x.logits == Logits::Offset));
            assert_eq!(list.iter().filter(|x| x.empty_rows).count(), 5);
            for x in list.iter() {
                x.spec.validate(x.batch, x.heads, x.seq).unwrap_or_else(|e| panic!("{}: {e}", describe(x)));
            }
        }
        // Fresh draws: another seed gives other sizes.
        let other = cases(8, false);
        assert!(c.iter().zip(&other).any(|(a, b)| (a.seq, a.heads) != (b.seq, b.heads)));
    }
}

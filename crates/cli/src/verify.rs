//! `ringdil verify`: a sweep of random cases that re-proves the toolkit's laws on the
//! machine at hand, the way a user would check a build before trusting it.
//!
//! Each case draws a shape (lengths include 1, primes and lengths that no segment or
//! block divides), a pattern (or uses the one from `--pattern`), causality and key
//! padding, then runs every [`Check`]. Every check compares against an f64 oracle with
//! the relative error `||x - ref|| / ||ref||` and a documented bound.

use crate::distributed;
use ndarray::{Array3, Array4, Axis, s};
use ringdil_reference::compare::{rel_err, worst};
use ringdil_reference::pattern::{BlockSparse, Dense, Dilated, SlidingWindow, key_counts};
use ringdil_reference::random::{SplitMix64, normal_tensor};
use ringdil_reference::ring::{ChunkPlan, Kind, Layout, simulate};
use ringdil_reference::{
    Attention, OutputGrad, Partial, Spec, attend_chunk, attention, attention_backward, backward_chunk,
};
use serde::Serialize;
use std::error::Error;

type Res<T> = Result<T, Box<dyn Error>>;

/// The laws `verify` checks, with their bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// Blocked engine == dense softmax under the explicit count mask (f64).
    Masked,
    /// Merge of partials over a random key partition == full attention; merge is
    /// associative and commutative; forward and backward (f64).
    Merge,
    /// Analytic dQ, dK, dV == central finite differences on sampled coordinates (f64).
    Backward,
    /// f32 evaluation vs f64 on the same inputs.
    F32,
    /// A distributed schedule (ring, pattern-aware ring, all-gather or Ulysses) on 1..=8
    /// simulated ranks with a random layout == single-device, forward and backward (f64).
    Ring,
}

impl Check {
    pub const ALL: [Check; 5] = [Check::Masked, Check::Merge, Check::Backward, Check::F32, Check::Ring];

    /// The bound on the relative error, and why it is what it is.
    pub fn bound(self) -> f64 {
        match self {
            // Same math in f64, different summation order: a few hundred ulps at most.
            Check::Masked | Check::Merge | Check::Ring => 1e-11,
            // Central differences with eps = 1e-5 have O(eps^2) truncation and
            // O(1e-16 / eps) rounding error: about 1e-10 each, so 1e-6 is generous.
            Check::Backward => 1e-6,
            // f32 has 2^-24 ~ 6e-8 unit rounding; softmax and two products of length <= 96.
            Check::F32 => 1e-5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Check::Masked => "masked",
            Check::Merge => "merge",
            Check::Backward => "backward",
            Check::F32 => "f32",
            Check::Ring => "ring",
        }
    }
}

/// One random case.
pub struct Case {
    pub index: usize,
    pub seed: u64,
    pub shape: [usize; 4],
    pub spec: Spec,
    pub pattern: String,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub case: usize,
    pub seed: u64,
    pub check: Check,
    /// How a distributed check ran: schedule, ranks and layout.
    pub how: Option<String>,
    pub pattern: String,
    pub shape: [usize; 4],
    pub causal: bool,
    pub padded: bool,
    pub rel_err: f64,
    pub bound: f64,
    pub pass: bool,
}

/// Draw case `index` of a sweep seeded with `seed`. With `fixed`, every case uses that
/// spec (pattern, causality, scale), named `name`, and only shapes and padding vary.
pub fn draw_case(seed: u64, index: usize, fixed: Option<(&Spec, &str)>) -> Case {
    let case_seed = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = SplitMix64::new(case_seed);
    const LENGTHS: [usize; 10] = [1, 2, 7, 13, 31, 32, 33, 61, 64, 97];
    let n = if rng.range(0, 1) == 0 { LENGTHS[rng.range(0, LENGTHS.len() - 1)] } else { rng.range(1, 96) };
    let heads = rng.range(1, 4);
    let shape = [rng.range(1, 2), n, heads, [1, 4, 8, 16][rng.range(0, 3)]];
    let (mut spec, pattern) = match fixed {
        Some((spec, name)) => (spec.clone(), name.to_string()),
        None => random_spec(&mut rng, n, heads),
    };
    if rng.range(0, 3) == 0 {
        spec.key_lengths = Some((0..shape[0]).map(|_| rng.range(0, n)).collect());
    }
    Case { index, seed: case_seed, shape, spec, pattern }
}

fn random_spec(rng: &mut SplitMix64, n: usize, heads: usize) -> (Spec, String) {
    let causal = rng.range(0, 1) == 1;
    let (spec, name) = match rng.range(0, 3) {
        0 => (Spec::new(Dense), "dense".to_string()),
        1 => {
            let count = rng.range(1, 3.min(heads).max(1));
            let branches: Vec<(usize, usize)> = (0..count)
                .map(|_| {
                    let w = rng.range(1, n + 3);
                    (w, rng.range(1, w.min(5)))
                })
                .collect();
            let (pattern, rule) = match rng.range(0, 2) {
                0 => (Dilated::longnet(&branches), "longnet"),
                1 => (Dilated::torchscale(&branches), "torchscale"),
                _ => (Dilated::head_groups(&branches), "head_groups"),
            };
            let listed: Vec<String> = branches.iter().map(|(w, r)| format!("{w}/{r}")).collect();
            (Spec::new(pattern), format!("{rule}({})", listed.join(",")))
        }
        2 => {
            let (left, right) = (rng.range(0, n), rng.range(0, 3));
            (Spec::new(SlidingWindow { left, right }), format!("window({left},{right})"))
        }
        _ => {
            let block = rng.range(1, 8);
            let pattern = BlockSparse {
                block,
                local_radius: (rng.range(0, 1) == 1).then(|| rng.range(0, 2)),
                dilated_stride: (rng.range(0, 1) == 1).then(|| rng.range(1, 4)),
                global_tokens: rng.range(0, 3),
                block_mask: None,
            };
            let name = format!("block_sparse(b={block})");
            (Spec::new(pattern), name)
        }
    };
    (spec.causal(causal), name)
}

/// One case's inputs and its single-device f64 result, which every check compares with.
struct Problem<'a> {
    q: Array4<f64>,
    k: Array4<f64>,
    v: Array4<f64>,
    spec: &'a Spec,
    full: Attention<f64>,
}

/// Run every check of one case.
pub fn run_case(case: &Case) -> Res<Vec<Row>> {
    let [b, n, h, d] = case.shape;
    let q = normal_tensor([b, n, h, d], case.seed);
    let k = normal_tensor([b, n, h, d], case.seed + 1);
    let v = normal_tensor([b, n, h, d], case.seed + 2);
    let spec = &case.spec;
    let full = attention(q.view(), k.view(), v.view(), spec)?;
    let problem = Problem { q, k, v, spec, full };
    let mut rows = Vec::new();
    for check in Check::ALL {
        let (rel_err, how) = match check {
            Check::Masked => (check_masked(&problem), None),
            Check::Merge => (check_merge(&problem, case.seed)?, None),
            Check::Backward => (check_backward(&problem, case.seed)?, None),
            Check::F32 => (check_f32(&problem)?, None),
            Check::Ring => {
                let (err, how) = check_ring(&problem, case.seed)?;
                (err, Some(how))
            }
        };
        rows.push(Row {
            case: case.index,
            seed: case.seed,
            check,
            how,
            pattern: case.pattern.clone(),
            shape: case.shape,
            causal: spec.causal,
            padded: spec.key_lengths.is_some(),
            rel_err,
            bound: check.bound(),
            // NaN fails: the comparison is false.
            pass: rel_err <= check.bound(),
        });
    }
    Ok(rows)
}

/// Largest of the relative errors of `out` and `lse` (NaN if either is).
fn err_pair(out: &Array4<f64>, lse: &Array3<f64>, reference: &Attention<f64>) -> f64 {
    worst([rel_err(out, &reference.out), rel_err(lse, &reference.lse)])
}

/// Dense softmax over the whole score matrix with the count mask written out from the
/// pattern, causality and padding: shares no code with the blocked engine.
fn check_masked(p: &Problem) -> f64 {
    let Problem { q, k, v, spec, full } = p;
    let (batch, n, heads, d) = q.dim();
    let scale = spec.scale_for(d);
    let mut out = Array4::zeros(q.raw_dim());
    let mut lse = Array3::from_elem((batch, heads, n), f64::NEG_INFINITY);
    for b in 0..batch {
        let limit = spec.key_limit(b, n);
        for h in 0..heads {
            let scores = q.slice(s![b, .., h, ..]).dot(&k.slice(s![b, .., h, ..]).t()) * scale;
            for i in 0..n {
                let counts = key_counts(&*spec.pattern, i, h, heads, n);
                let allowed = |j: usize| j < limit && (!spec.causal || j <= i) && counts[j] > 0;
                let m = (0..n).filter(|&j| allowed(j)).map(|j| scores[[i, j]]).fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let weight = |j: usize| if allowed(j) { counts[j] as f64 * (scores[[i, j]] - m).exp() } else { 0.0 };
                let z: f64 = (0..n).map(weight).sum();
                lse[[b, h, i]] = m + z.ln();
                let out_scale = spec.pattern.output_scale(h, heads);
                for j in 0..n {
                    let p = weight(j) / z * out_scale;
                    out.slice_mut(s![b, i, h, ..]).scaled_add(p, &v.slice(s![b, j, h, ..]));
                }
            }
        }
    }
    err_pair(&out, &lse, full)
}

/// Split the keys into 1..=5 random parts (some empty, non-contiguous), evaluate each
/// part with global positions, merge in a random order and in two bracketings, and
/// compare forward and the summed backward with the full computation.
fn check_merge(p: &Problem, seed: u64) -> Res<f64> {
    let Problem { q, k, v, spec, full } = p;
    let (batch, n, heads, d) = q.dim();
    let mut rng = SplitMix64::new(seed ^ 0x006d_6572_6765);
    let parts = rng.range(1, 5);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); parts];
    for key in 0..n {
        members[rng.range(0, parts - 1)].push(key);
    }
    let all: Vec<usize> = (0..n).collect();
    let mut partials = Vec::new();
    for keys in members.iter().filter(|m| !m.is_empty()) {
        let (ks, vs) = (k.select(Axis(1), keys), v.select(Axis(1), keys));
        partials.push(attend_chunk(q.view(), &all, ks.view(), vs.view(), keys, n, spec)?);
    }
    let empty = Partial::empty(batch, n, heads, d);
    let forward = Partial::merge_all(partials.iter().rev(), empty.clone())?;
    let mut errs = vec![rel_err(&forward.out, &Partial::merge_all(&partials, empty.clone())?.out)];
    if let [a, b, c, ..] = partials.as_slice() {
        let left = a.merge(b)?.merge(c)?;
        let right = a.merge(&b.merge(c)?)?;
        errs.extend([rel_err(&left.out, &right.out), rel_err(&a.merge(b)?.out, &b.merge(a)?.out)]);
    }
    let finished = forward.finish(spec);
    errs.push(err_pair(&finished.out, &finished.lse, full));

    let g = normal_tensor([batch, n, heads, d], seed ^ 0x67);
    let exact = attention_backward(q.view(), k.view(), v.view(), spec, full, g.view())?;
    let grad = OutputGrad::new(spec, full, g.view())?;
    let mut dq = Array4::zeros(q.raw_dim());
    let (mut dk, mut dv) = (Array4::zeros(k.raw_dim()), Array4::zeros(v.raw_dim()));
    for keys in members.iter().filter(|m| !m.is_empty()) {
        let (ks, vs) = (k.select(Axis(1), keys), v.select(Axis(1), keys));
        let part = backward_chunk(q.view(), &all, ks.view(), vs.view(), keys, n, spec, &grad)?;
        dq += &part.dq;
        for (local, &key) in keys.iter().enumerate() {
            dk.slice_mut(s![.., key, .., ..]).assign(&part.dk.slice(s![.., local, .., ..]));
            dv.slice_mut(s![.., key, .., ..]).assign(&part.dv.slice(s![.., local, .., ..]));
        }
    }
    errs.extend([rel_err(&dq, &exact.dq), rel_err(&dk, &exact.dk), rel_err(&dv, &exact.dv)]);
    Ok(worst(errs))
}

/// Compare the analytic gradient of `L = sum(out * G)` with central differences at a
/// few random coordinates of each of q, k, v.
fn check_backward(p: &Problem, seed: u64) -> Res<f64> {
    let Problem { q, k, v, spec, full } = p;
    const EPS: f64 = 1e-5;
    const SAMPLES: usize = 4;
    let g = normal_tensor(q.dim().into(), seed ^ 0x6664);
    let grads = attention_backward(q.view(), k.view(), v.view(), spec, full, g.view())?;
    let loss = |q: &Array4<f64>, k: &Array4<f64>, v: &Array4<f64>| -> Res<f64> {
        Ok((attention(q.view(), k.view(), v.view(), spec)?.out * &g).sum())
    };
    let mut rng = SplitMix64::new(seed ^ 0x6264);
    let (mut analytic, mut numeric) = (Vec::new(), Vec::new());
    for which in 0..3 {
        for _ in 0..SAMPLES {
            let [b, n, h, d] = <[usize; 4]>::try_from(q.shape()).expect("4-d");
            let at = [rng.range(0, b - 1), rng.range(0, n - 1), rng.range(0, h - 1), rng.range(0, d - 1)];
            let mut inputs = [q.clone(), k.clone(), v.clone()];
            inputs[which][at] += EPS;
            let plus = loss(&inputs[0], &inputs[1], &inputs[2])?;
            inputs[which][at] -= 2.0 * EPS;
            let minus = loss(&inputs[0], &inputs[1], &inputs[2])?;
            numeric.push((plus - minus) / (2.0 * EPS));
            analytic.push([&grads.dq, &grads.dk, &grads.dv][which][at]);
        }
    }
    Ok(rel_err(&analytic, &numeric))
}

/// The same case evaluated in f32, against the f64 result.
fn check_f32(p: &Problem) -> Res<f64> {
    let Problem { q, k, v, spec, full } = p;
    let narrow = |x: &Array4<f64>| x.mapv(|e| e as f32);
    let low = attention(narrow(q).view(), narrow(k).view(), narrow(v).view(), spec)?;
    let widen = Partial { out: low.out, lse: low.lse }.cast::<f64>();
    Ok(err_pair(&widen.out, &widen.lse, full))
}

/// Replay a random distributed schedule on simulated ranks and compare the gathered
/// output and gradients with the single-device ones. Also says which schedule, how many
/// ranks and which layout it drew.
fn check_ring(p: &Problem, seed: u64) -> Res<(f64, String)> {
    let Problem { q, k, v, spec, full } = p;
    let (_, n, heads, _) = q.dim();
    let mut rng = SplitMix64::new(seed ^ 0x7269_6e67);
    let ranks = rng.range(1, 8);
    let layout = match rng.range(0, 4) {
        0 => Layout::Contiguous,
        1 => Layout::Zigzag,
        2 => Layout::Striped,
        3 => {
            let mut cuts: Vec<usize> = (0..ranks - 1).map(|_| rng.range(0, n)).collect();
            cuts.sort_unstable();
            Layout::Boundaries([vec![0], cuts, vec![n]].concat())
        }
        _ => {
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, rng.range(0, i));
            }
            Layout::Permuted { order, boundaries: None }
        }
    };
    let kind = Kind::ALL[rng.range(0, 3)];
    let chunks = ChunkPlan::new(n, ranks, &layout)?;
    let schedule = kind.build(&chunks, spec, heads)?;
    let g = normal_tensor(q.dim().into(), seed ^ 0x6772);
    let exact = attention_backward(q.view(), k.view(), v.view(), spec, full, g.view())?;
    let (out, grads, _) = simulate(&schedule, spec, q.view(), k.view(), v.view(), Some(g.view()))?;
    let grads = grads.expect("backward was requested");
    let err = worst([
        err_pair(&out.out, &out.lse, full),
        rel_err(&grads.dq, &exact.dq),
        rel_err(&grads.dk, &exact.dk),
        rel_err(&grads.dv, &exact.dv),
    ]);
    let layout_name = match layout {
        Layout::Contiguous => "contiguous",
        Layout::Zigzag => "zigzag",
        Layout::Striped => "striped",
        Layout::Boundaries(_) => "boundaries",
        Layout::Permuted { .. } => "permuted",
    };
    Ok((err, format!("{} P={ranks} {layout_name}", distributed::label(kind))))
}

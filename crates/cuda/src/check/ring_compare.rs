//! How a ring check's results are judged: every rank's pieces gathered into whole-batch
//! arrays and compared with the f64 reference (relative L2 error against the bf16 bound),
//! where a failing case's gradient errors lie (by rank and by head), and the difference
//! between two runs of the same plans (the real ring against virtual ranks).

use super::ring::{Case, HostResult, RingPart};
use super::{Metric, bound};
use crate::shape::Dtype;
use ringdil_reference::Attention;
use ringdil_reference::compare::rel_err;
use std::fmt::Write;
use std::ops::Range;

/// The reference a case is judged by: the forward and the gradients, in f64.
pub type Reference = (Attention<f64>, ringdil_reference::Gradients<f64>);

/// Every ring's ranks (`res[ring][position]`) gathered into the rows of its ring: out, LSE,
/// dq, dk, dv of the whole batch in the reference's layouts, in host arrays that start as
/// NaN (a value no rank wrote stays NaN, and fails).
fn gathered(c: &Case, parts: &[RingPart], res: &[HostResult]) -> Vec<Vec<f64>> {
    let (b, n, h, hk, d, dv) = (c.batch, c.seq, c.heads, c.kv_heads, c.head_dim, c.value_dim);
    let len = [b * n * h * dv, b * h * n, b * n * h * d, b * n * hk * d, b * n * hk * dv];
    let mut arrays: Vec<Vec<f64>> = len.iter().map(|&l| vec![f64::NAN; l]).collect();
    for (part, ring) in parts.iter().zip(res) {
        let Range { start, end } = part.rows;
        for (r, kinds) in ring.iter().enumerate() {
            for (i, part_of) in kinds.iter().enumerate() {
                let p64: Vec<Vec<f64>> = part_of.iter().map(|x| x.iter().map(|&v| v as f64).collect()).collect();
                let (per_row, rows) = (len[i] / b, &mut arrays[i]);
                let rows = &mut rows[start * per_row..end * per_row];
                match i {
                    0 => part.plan.gather_into(rows, dv, r, &p64),
                    1 => part.plan.gather_lse_into(rows, r, &p64),
                    2 => part.plan.gather_into(rows, d, r, &p64),
                    3 => part.plan.gather_kv_into(rows, d, r, &p64),
                    _ => part.plan.gather_kv_into(rows, dv, r, &p64),
                }
            }
        }
    }
    arrays
}

/// The errors of the whole batch ([`gathered`]), each against the bf16 bound.
pub fn compare(c: &Case, parts: &[RingPart], res: &[HostResult], reference: &Reference) -> Vec<Metric> {
    metrics(&gathered(c, parts, res), reference)
}

/// [`compare`], and for a case that fails, its [`gradient_breakdown`] (empty when it
/// passes): the results are gathered once for both.
pub fn compare_explained(
    c: &Case,
    parts: &[RingPart],
    res: &[HostResult],
    reference: &Reference,
) -> (Vec<Metric>, String) {
    let arrays = gathered(c, parts, res);
    let m = metrics(&arrays, reference);
    let why = if m.iter().all(Metric::passed) { String::new() } else { breakdown(c, parts, &arrays, reference) };
    (m, why)
}

fn metrics(arrays: &[Vec<f64>], reference: &Reference) -> Vec<Metric> {
    let (fwd, g) = reference;
    let bound = bound(Dtype::Bf16);
    [
        ("out", rel_err(&arrays[0], fwd.out.iter())),
        ("lse", rel_err(&arrays[1], fwd.lse.iter())),
        ("dq", rel_err(&arrays[2], g.dq.iter())),
        ("dk", rel_err(&arrays[3], g.dk.iter())),
        ("dv", rel_err(&arrays[4], g.dv.iter())),
    ]
    .into_iter()
    .map(|(what, err)| Metric { what, err, bound })
    .collect()
}

/// Where the gradients of a failed case are wrong: dq, dk and dv each cut by the ranks that
/// hold the tokens (ring 0's chunking; every ring has the same) and by head (query heads for
/// dq, K/V heads for dk, dv), as `||out - ref|| / ||ref||` of each cell. Printed after a
/// failing row, e.g. `dq by rank 1.7e-3 4.1e-2 1.6e-3`: one rank's or one head's cells far
/// above the others' name the query piece or key piece whose work went wrong.
pub fn gradient_breakdown(c: &Case, parts: &[RingPart], res: &[HostResult], reference: &Reference) -> String {
    breakdown(c, parts, &gathered(c, parts, res), reference)
}

fn breakdown(c: &Case, parts: &[RingPart], arrays: &[Vec<f64>], reference: &Reference) -> String {
    let g = &reference.1;
    let Some(part) = parts.first() else { return String::new() };
    let (b, n) = (c.batch, c.seq);
    let ranks = part.plan.ranks();
    let mut owner = vec![0; n];
    for r in 0..ranks {
        for &t in part.plan.chunks.tokens(r) {
            owner[t] = r;
        }
    }
    let mut out = String::new();
    let grads = [("dq", &arrays[2], g.dq.iter(), c.heads), ("dk", &arrays[3], g.dk.iter(), c.kv_heads)];
    let dv = ("dv", &arrays[4], g.dv.iter(), c.kv_heads);
    for (what, got, want, heads) in grads.into_iter().chain(std::iter::once(dv)) {
        let width = got.len() / (b * n * heads).max(1);
        // (squared difference, squared reference) per rank and per head.
        let (mut by_rank, mut by_head) = (vec![(0.0, 0.0); ranks], vec![(0.0, 0.0); heads]);
        for (i, (x, r)) in got.iter().zip(want).enumerate() {
            let (t, hd) = ((i / (width * heads)) % n, (i / width) % heads);
            let (e, w) = ((x - r) * (x - r), r * r);
            for cell in [&mut by_rank[owner[t]], &mut by_head[hd]] {
                cell.0 += e;
                cell.1 += w;
            }
        }
        let show = |cells: &[(f64, f64)]| {
            cells
                .iter()
                .map(|&(e, w): &(f64, f64)| format!("{:.1e}", (e / w.max(f64::MIN_POSITIVE)).sqrt()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        write!(out, " | {what} by rank {} by head {}", show(&by_rank), show(&by_head)).expect("write to a String");
    }
    out
}

/// Largest absolute difference of two results of the same plans (equal infinities count 0).
pub fn max_diff(a: &[HostResult], b: &[HostResult]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y))
        .flat_map(|(x, y)| x.iter().zip(y.iter()))
        .flat_map(|(x, y)| x.iter().zip(y.iter()))
        .flat_map(|(x, y)| x.iter().zip(y.iter()))
        .map(|(a, b)| if a == b || (a.is_infinite() && b.is_infinite()) { 0.0 } else { (a - b).abs() as f64 })
        .fold(0.0, f64::max)
}

//! The auto rule on this run's speeds: rank 0's measured speeds (shared so that every rank
//! decides alike), the decision `dist::auto::select` takes for each problem of
//! [`configs::AUTO`], and that decision against the measured forward time of every
//! option on the same problem (one GPU and every schedule, taken from the rows).
//!
//! Speeds: `F` from one GPU's dense causal forward at the largest `N` of the run; the
//! three link speeds from `links::measure`; the step overhead `o` fitted so that the
//! rule's ring time equals the measured dense ring forward at 8K tokens per GPU
//! (`o = (t - P max(W / (P^2 F), 4 B H d n / L)) / P`, at least 0): what a ring step
//! costs beyond its kernels and transfer at the shortest per-GPU length; the exchange
//! overhead `u` likewise from the Ulysses forward at 8K tokens per GPU
//! (`u = (t - V_a2a / A - W ceil(H/P) / (H F)) / 2`, at least 0).
//!
//! Next to the rule, the measured choice (`DistRank::tune`: every schedule's forward
//! timed on the problem's inputs, the fastest kept) is checked the same way: its pick
//! against the rows' measured times, a separate measurement.

use crate::configs::{self, AUTO, DENSE, K, OPTIONS};
use crate::distributed::Measured;
use crate::links::Links;
use crate::measure::{Row, max_over_ranks, random_bits};
use crate::{DIM, HEADS};
use ringdil_cuda::Gpu;
use ringdil_cuda::dist::auto::{Decision, Problem, Selected, Speeds, select};
use ringdil_cuda::dist::ring::Tuned;
use ringdil_cuda::dist::{Communicator, DistPlan, DistRank, RankData};
use ringdil_cuda::shape::Dtype;
use ringdil_reference::ring::Kind;

/// A choice within this fraction of the best measured option counts as right.
pub const THRESHOLD: f64 = 0.03;

/// The rule's speeds from this run (rank 0's figures; see the module docs).
pub fn measured_speeds(gpu: &Gpu, p: usize, links: &Links, singles: &[Row], rows: &[Measured]) -> Speeds {
    let work = |n: usize| 4.0 * (HEADS * DIM) as f64 * (n as f64).powi(2) * 0.5;
    let flops = singles
        .iter()
        .filter(|r| r.pattern == DENSE)
        .max_by_key(|r| r.seq_len)
        .map_or(f64::NAN, |s| work(s.seq_len) / (s.fwd_ms / 1e3));
    let step_overhead = rows
        .iter()
        .find(|m| m.config.pattern == DENSE && m.config.per_gpu == 8 * K && m.config.schedule == Kind::Ring)
        .map_or(f64::NAN, |m| {
            let (n, pf) = (m.row.seq_len, p as f64);
            let per = n as f64 / pf;
            let step = (work(n) / (pf * pf * flops)).max(4.0 * (HEADS * DIM) as f64 * per / links.ring);
            ((m.row.fwd_ms / 1e3 - pf * step) / pf).max(0.0)
        });
    // The same fit for Ulysses: its measured dense forward at 8K/GPU, less the rule's
    // transfer and compute terms, is two exchanges' fixed cost.
    let exchange_overhead = rows
        .iter()
        .find(|m| m.config.pattern == DENSE && m.config.per_gpu == 8 * K && m.config.schedule == Kind::Ulysses)
        .map_or(f64::NAN, |m| {
            let n = m.row.seq_len;
            let u = Problem::dense_causal(HEADS, DIM, n).ulysses(p);
            let terms = u.sent_bytes / links.all_to_all + work(n) * u.busiest_heads as f64 / (HEADS as f64 * flops);
            ((m.row.fwd_ms / 1e3 - terms) / 2.0).max(0.0)
        });
    let memory = gpu.context().mem_get_info().map(|x| x.1 as f64).unwrap_or(f64::NAN);
    Speeds {
        flops,
        link_bytes: links.ring,
        all_to_all_bytes: links.all_to_all,
        all_gather_bytes: links.all_gather,
        step_overhead,
        exchange_overhead,
        memory,
    }
}

/// One problem of the check: the rule's decision and the measured forward time of every
/// option ("single" and each schedule's name; `NaN` where it did not run).
#[derive(serde::Serialize)]
pub struct AutoRow {
    pub pattern: String,
    pub layout: String,
    pub per_gpu: usize,
    pub seq_len: usize,
    pub decision: Decision,
    pub selected: Selected,
    /// Whether every rank's `select` took this decision.
    pub ranks_agree: bool,
    pub measured_ms: Vec<(String, f64)>,
    /// The fastest measured option and its time.
    pub best: Option<(String, f64)>,
    /// The selected option's measured time over the best's.
    pub chosen_over_best: f64,
    /// `chosen_over_best <= 1 + THRESHOLD`.
    pub within_threshold: bool,
    /// The measured choice (`None`: tuning failed, the error is printed).
    pub tuned: Option<Tuned>,
    /// The tuned schedule's time in the rows over the best's.
    pub tuned_over_best: f64,
}

/// `DistRank::tune` over every schedule on `plan` with fresh inputs (collective).
fn tune(gpu: &Gpu, comm: &Communicator, plan: &DistPlan) -> Result<Tuned, String> {
    let n = plan.seq_len();
    let (q, kv) = (random_bits(n * HEADS * DIM, 1), random_bits(n * plan.kv_heads * DIM, 2));
    let data = RankData::upload(gpu, plan, comm.rank(), &q, &kv, &kv).map_err(|e| e.to_string())?;
    let mut rank = DistRank::new(gpu, comm, plan, Dtype::Bf16).map_err(|e| e.to_string())?;
    rank.tune(&data, &OPTIONS, 3).map_err(|e| e.to_string())
}

/// The name of what `selected` runs, as the rows name it.
pub fn selected_name(selected: Selected) -> &'static str {
    match selected {
        Selected::Single => "single",
        Selected::Distributed(kind) => kind.name(),
    }
}

/// Decide every problem of [`AUTO`] on every rank (collective), and on rank 0 compare each
/// decision with the measured options (other ranks get rows without times).
pub fn auto_rows(gpu: &Gpu, comm: &Communicator, speeds: &Speeds, singles: &[Row], rows: &[Measured]) -> Vec<AutoRow> {
    let p = comm.world();
    let mut out = Vec::new();
    for (pat, split, per) in AUTO {
        let n = per * p;
        let plan = configs::plan(pat, split, n, p);
        let decided =
            plan.as_ref().map_err(Clone::clone).and_then(|plan| select(plan, speeds).map_err(|e| e.to_string()));
        let (decision, selected) = match decided {
            Ok(d) => d,
            Err(e) => {
                if comm.rank() == 0 {
                    println!("auto {pat} N={n}: error {e}");
                }
                continue;
            }
        };
        // Every rank's choice as a number: the largest and the smallest must be equal.
        let code = match selected {
            Selected::Single => 0.0,
            Selected::Distributed(kind) => 1.0 + Kind::ALL.iter().position(|&k| k == kind).unwrap_or(9) as f64,
        };
        let hi = max_over_ranks(comm, code).unwrap_or(f64::NAN);
        let lo = -max_over_ranks(comm, -code).unwrap_or(f64::NAN);
        let single = singles.iter().find(|r| r.pattern == pat && r.seq_len == n).map_or(f64::NAN, |r| r.fwd_ms);
        let mut measured = vec![("single".to_string(), single)];
        for kind in OPTIONS {
            let m = rows.iter().find(|m| {
                let c = &m.config;
                c.pattern == pat && c.split == split && c.per_gpu == per && c.schedule == kind
            });
            measured.push((kind.name().to_string(), m.map_or(f64::NAN, |m| m.row.fwd_ms)));
        }
        let best = measured.iter().filter(|x| x.1.is_finite()).min_by(|x, y| x.1.total_cmp(&y.1)).cloned();
        let name = selected_name(selected);
        let chosen = measured.iter().find(|(o, _)| o == name).map_or(f64::NAN, |x| x.1);
        let ratio = best.as_ref().map_or(f64::NAN, |b| chosen / b.1);
        let tuned = match plan.as_ref().map_err(Clone::clone).and_then(|plan| tune(gpu, comm, plan)) {
            Ok(t) => Some(t),
            Err(e) => {
                if comm.rank() == 0 {
                    println!("tune {pat} N={n}: error {e}");
                }
                None
            }
        };
        let tuned_time = tuned
            .as_ref()
            .and_then(|t| measured.iter().find(|(o, _)| o == t.schedule.name()))
            .map_or(f64::NAN, |x| x.1);
        let tuned_over_best = best.as_ref().map_or(f64::NAN, |b| tuned_time / b.1);
        if comm.rank() == 0 {
            println!(
                "auto {pat} {}/GPU: {name}, tuned {:?}, measured {measured:?}",
                per / K,
                tuned.as_ref().map(|t| t.schedule)
            );
        }
        out.push(AutoRow {
            pattern: pat.into(),
            layout: split.name().into(),
            per_gpu: per,
            seq_len: n,
            decision,
            selected,
            ranks_agree: hi == lo,
            measured_ms: measured,
            best,
            chosen_over_best: ratio,
            within_threshold: ratio <= 1.0 + THRESHOLD,
            tuned,
            tuned_over_best,
        });
    }
    out
}

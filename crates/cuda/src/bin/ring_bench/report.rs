//! `ring_bench`'s report: the measured links, one GPU, the scaling table on `P` GPUs
//! (ratios, peak memory per GPU, the goals), the largest sequence, the auto rule on
//! the measured speeds and at run time; written to `--md` and printed, and the same
//! numbers as JSON (`--json`, with the command, device and date).

use crate::auto_check::{AutoRow, THRESHOLD, selected_name};
use crate::configs::{self, Config, K};
use crate::distributed::Measured;
use crate::goals::goal;
use crate::links::Links;
use crate::measure::Row;
use crate::{DIM, HEADS};
use ringdil_cuda::Gpu;
use ringdil_cuda::dist::auto::{Problem, Speeds, choose};
use ringdil_cuda::programs::Args;
use ringdil_reference::ring::Kind;
use serde_json::json;
use std::fmt::Write;

/// Everything one run measured.
pub struct Run<'a> {
    pub p: usize,
    pub links: &'a Links,
    pub singles: &'a [Row],
    pub rows: &'a [Measured],
    pub errors: &'a [(Config, String)],
    pub largest: &'a [(usize, f64, f64)],
    pub speeds: &'a Speeds,
    pub autos: &'a [AutoRow],
    pub secs: f64,
}

/// `--date`, else today's date (UTC) from the system clock.
fn date(args: &Args) -> String {
    let given = args.date();
    if given != "unknown" {
        return given;
    }
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Days since 1970-01-01 to a civil date (H. Hinnant's `civil_from_days`).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} (system clock)")
}

/// `t` in ms with two decimals, `-` when not measured.
fn ms(t: f64) -> String {
    if t.is_finite() { format!("{t:.2}") } else { "-".into() }
}

/// A ratio with two decimals, `-` when not measured.
fn ratio(x: f64) -> String {
    if x.is_finite() { format!("{x:.2}") } else { "-".into() }
}

/// Predicted seconds, or "does not fit".
fn predicted(x: Option<f64>) -> String {
    x.map_or("does not fit".into(), |t| format!("{:.3}", t * 1e3))
}

pub fn report(gpu: &Gpu, run: &Run, args: &Args) {
    let p = run.p;
    let single_at = |pat: &str, n: usize| run.singles.iter().find(|r| r.pattern == pat && r.seq_len == n);
    let ratios = |r: &Row| {
        let s = single_at(&r.pattern, r.seq_len);
        let f = s.map_or(f64::NAN, |s| s.fwd_ms / (p as f64 * r.fwd_ms));
        let b = s.map_or(f64::NAN, |s| s.fwd_bwd_ms / (p as f64 * r.fwd_bwd_ms));
        (f, b)
    };
    let (command, date, device) = (args.command(), date(args), gpu.describe().unwrap_or_default());
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "# Distributed attention scaling ({p} GPUs)\n").unwrap();
    writeln!(w, "* device: {device} x {p}, NCCL, one process per GPU").unwrap();
    writeln!(w, "* date: {date}; command: `{command}`; run time {:.0} s", run.secs).unwrap();
    writeln!(w, "* B=1, H={HEADS}, d={DIM}, bf16; rows by tokens per GPU (N = P x N/GPU); times are medians of 3 forward and 2 forward+backward passes after a warm-up (1 when the warm-up took over 2 s), the slowest rank's").unwrap();
    writeln!(w, "* ratio = t_1(N) / (P t_P(N)) at the same total N (1.0 = P x one GPU); peak GiB/GPU = the fullest GPU's peak device memory over the passes: what is in use outside the memory pool (CUDA context, NCCL buffers, modules) plus the pool's high-water mark of live buffers (freed memory the pool keeps is not counted)").unwrap();
    let g = |x: f64| x / 1e9;
    writeln!(
        w,
        "* links (GB/s sent per rank, `links::measure`, 128 MiB per rank): ring hop {:.1}, all-to-all {:.1}, all-gather {:.1}\n",
        g(run.links.ring),
        g(run.links.all_to_all),
        g(run.links.all_gather)
    )
    .unwrap();

    writeln!(
        w,
        "## One GPU\n\n| pattern | N | fwd ms | fwd+bwd ms | tokens/s fwd | peak GiB |\n|---|---|---|---|---|---|"
    )
    .unwrap();
    for r in run.singles {
        writeln!(
            w,
            "| {} | {} | {:.2} | {:.2} | {:.3e} | {:.2} |",
            r.pattern, r.seq_len, r.fwd_ms, r.fwd_bwd_ms, r.tokens_per_s_fwd, r.memory_gib
        )
        .unwrap();
    }

    writeln!(w, "\n## Scaling on {p} GPUs\n\nSent = MiB rank 0 sends in one forward (K/V for the token-split schedules; Q, K, V out and output + LSE back for Ulysses; both for the hybrid, `groups x members`: the group's all-to-all and the ring's K/V hops across groups). Hidden = compute-only + comm-only - full forward (dense ring rows only). Goal: the issue's goal for the row and whether this row meets it.\n").unwrap();
    writeln!(w, "| pattern | schedule | layout | N | N/GPU | fwd ms | ratio fwd | fwd+bwd ms | ratio fwd+bwd | peak GiB/GPU | own K/V MiB | sent MiB | hidden ms | goal |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|").unwrap();
    let mut json_rows = Vec::new();
    for m in run.rows.iter().filter(|m| !m.config.forward_only) {
        let r = &m.row;
        let (rf, rb) = ratios(r);
        let gl = goal(&r.pattern, m.config.per_gpu);
        let met = gl.met(rf, rb);
        let hidden = if m.compute_ms.is_finite() { (m.compute_ms + m.comm_ms - m.full_ms).max(0.0) } else { f64::NAN };
        writeln!(
            w,
            "| {} | {} | {} | {} | {}K | {:.2} | {} | {} | {} | {:.2} | {:.0} | {:.0} | {} | {}: {} |",
            r.pattern,
            r.schedule,
            r.layout,
            r.seq_len,
            m.config.per_gpu / K,
            r.fwd_ms,
            ratio(rf),
            ms(r.fwd_bwd_ms),
            ratio(rb),
            r.memory_gib,
            r.kv_block_mib,
            m.sent_mib,
            ms(hidden),
            gl.text,
            if met { "**met**" } else { "not met" }
        )
        .unwrap();
        json_rows.push(json!({"row": r, "per_gpu": m.config.per_gpu, "ratio_fwd": rf, "ratio_fwd_bwd": rb,
            "sent_mib": m.sent_mib, "compute_only_ms": m.compute_ms, "comm_only_ms": m.comm_ms, "hidden_ms": hidden,
            "goal": gl, "goal_met": met}));
    }
    if !run.errors.is_empty() {
        writeln!(w, "\nNot run (the error each rank returned):\n").unwrap();
        for (c, e) in run.errors {
            writeln!(w, "* {} {} {} {}K/GPU: {e}", c.pattern, c.schedule.name(), c.split.name(), c.per_gpu / K)
                .unwrap();
        }
    }

    // Goals: per pattern and tokens per GPU, the best row against its goal.
    writeln!(
        w,
        "\n## Goals (issue 25)\n\n| pattern | N/GPU | goal | best row | its ratio | |\n|---|---|---|---|---|---|"
    )
    .unwrap();
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for m in run.rows.iter().filter(|m| !m.config.forward_only) {
        if !groups.contains(&(m.config.pattern, m.config.per_gpu)) {
            groups.push((m.config.pattern, m.config.per_gpu));
        }
    }
    let mut json_goals = Vec::new();
    for (pat, per) in groups {
        let gl = goal(pat, per);
        let best = run
            .rows
            .iter()
            .filter(|m| !m.config.forward_only && m.config.pattern == pat && m.config.per_gpu == per)
            .map(|m| {
                let (rf, rb) = ratios(&m.row);
                (format!("{} {}", m.row.schedule, m.row.layout), gl.judged(rf, rb), gl.met(rf, rb))
            })
            .filter(|x| x.1.is_finite())
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let (name, r, met) = best.unwrap_or(("-".into(), f64::NAN, false));
        writeln!(
            w,
            "| {pat} | {}K | {} | {name} | {} | {} |",
            per / K,
            gl.text,
            ratio(r),
            if met { "**met**" } else { "not met" }
        )
        .unwrap();
        json_goals.push(json!({"pattern": pat, "per_gpu": per, "goal": gl, "best": name, "ratio": r, "met": met}));
    }

    writeln!(w, "\n## Largest sequence (dense causal, zigzag ring, forward)\n\n| N | N/GPU | fwd ms | GiB in use on rank 0 |\n|---|---|---|---|").unwrap();
    for (n, t, mem) in run.largest {
        writeln!(w, "| {n} | {} | {t:.1} | {mem:.1} |", n / p).unwrap();
    }

    let s = run.speeds;
    writeln!(w, "\n## Auto rule on measured speeds\n\nF = {:.0} TFLOP/s (one GPU, dense causal, largest N), ring hop L = {:.1}, all-to-all A = {:.1}, all-gather G = {:.1} GB/s sent per rank (`links::measure`), o = {:.3} ms per step (fitted to the dense ring forward at 8K/GPU), u = {:.3} ms per Ulysses exchange (fitted to its forward at 8K/GPU), M = {:.0} GB. Dense causal, predicted forward ms:\n", s.flops / 1e12, g(s.link_bytes), g(s.all_to_all_bytes), g(s.all_gather_bytes), s.step_overhead * 1e3, s.exchange_overhead * 1e3, g(s.memory)).unwrap();
    writeln!(
        w,
        "| N | N/GPU | choice | single | ring | all-gather | ulysses | {} |\n|---|---|---|---|---|---|---|---|",
        configs::schedule_name(Kind::Hybrid, p)
    )
    .unwrap();
    for per in [4 * K, 8 * K, 16 * K, 64 * K, 256 * K] {
        let n = per * p;
        let problem =
            Problem { hybrid_degree: Some(configs::hybrid_degree(p)), ..Problem::dense_causal(HEADS, DIM, n) };
        let d = choose(&problem, p, s);
        writeln!(
            w,
            "| {n} | {}K | {:?} | {} | {} | {} | {} | {} |",
            per / K,
            d.choice,
            predicted(d.single_s),
            predicted(d.ring_s),
            predicted(d.gather_s),
            predicted(d.ulysses_s),
            predicted(d.hybrid_s)
        )
        .unwrap();
    }

    writeln!(w, "\n## Auto at run time (`dist::auto::select`, forward)\n\nEach problem is decided from the speeds above (rank 0's, broadcast; \"agree\": every rank's `select` took the same decision) and compared with the measured forward of every option from the rows above. The choice is right when it is the best or within {:.0}% of it. \"tuned\": the measured choice (`DistRank::tune`, every schedule's forward timed on the problem, 3 passes each), checked against the same rows.\n", THRESHOLD * 100.0).unwrap();
    writeln!(w, "| pattern | N/GPU | N | selected | agree | predicted ms (single / ring / all-gather / ulysses / hybrid) | measured ms (single / ring / pattern ring / all-gather / ulysses / hybrid) | best | chosen / best | within {:.0}% | tuned | tuned / best |\n|---|---|---|---|---|---|---|---|---|---|---|---|", THRESHOLD * 100.0).unwrap();
    for a in run.autos {
        let d = &a.decision;
        let times: Vec<String> = a.measured_ms.iter().map(|(_, t)| ms(*t)).collect();
        writeln!(
            w,
            "| {} | {}K | {} | {} | {} | {} / {} / {} / {} / {} | {} | {} | {} | {} | {} | {} |",
            a.pattern,
            a.per_gpu / K,
            a.seq_len,
            selected_name(a.selected),
            if a.ranks_agree { "yes" } else { "**no**" },
            predicted(d.single_s),
            predicted(d.ring_s),
            predicted(d.gather_s),
            predicted(d.ulysses_s),
            predicted(d.hybrid_s),
            times.join(" / "),
            a.best.as_ref().map_or("-", |b| b.0.as_str()),
            ratio(a.chosen_over_best),
            if a.within_threshold { "yes" } else { "**no**" },
            a.tuned.as_ref().map_or("-", |t| t.schedule.name()),
            ratio(a.tuned_over_best)
        )
        .unwrap();
    }
    println!("{out}");
    if let Some(path) = args.value("--md") {
        std::fs::write(&path, &out).expect("write md");
    }
    if let Some(path) = args.value("--json") {
        let errors: Vec<_> = run
            .errors
            .iter()
            .map(|(c, e)| json!({"pattern": c.pattern, "schedule": c.schedule.name(), "layout": c.split.name(), "per_gpu": c.per_gpu, "error": e}))
            .collect();
        let extra: Vec<_> = run
            .rows
            .iter()
            .filter(|m| m.config.forward_only)
            .map(|m| json!({"row": m.row, "per_gpu": m.config.per_gpu}))
            .collect();
        let j = json!({"gpus": p, "device": device, "date": date, "command": command, "run_time_s": run.secs,
            "links": run.links, "single": run.singles, "distributed": json_rows, "forward_only": extra, "errors": errors,
            "goals": json_goals, "largest": run.largest, "speeds": run.speeds, "auto_threshold": THRESHOLD, "auto": run.autos});
        std::fs::write(&path, serde_json::to_string_pretty(&j).unwrap()).expect("write json");
    }
}

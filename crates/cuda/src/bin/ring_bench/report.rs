//! `ring_bench`'s report: the Markdown tables (one GPU, `P` GPUs with the scaling ratios
//! and the hidden transfer time, the largest sequence, the auto rule on the measured
//! speeds and at run time) written to `--md` and printed, and the same numbers as JSON
//! (`--json`).

use crate::{AutoRow, DIM, HEADS, Measured, Row};
use ringdil_cuda::Gpu;
use ringdil_cuda::dist::auto::{Problem, Selected, Speeds, choose};
use ringdil_cuda::programs::Args;
use std::fmt::Write;

#[allow(clippy::too_many_arguments)] // the run's measured values, each its own section
pub fn report(
    gpu: &Gpu,
    p: usize,
    singles: &[Row],
    rows: &[(Measured, &str)],
    largest: &[(usize, f64, f64)],
    (speeds, autos): (&Speeds, &[AutoRow]),
    secs: f64,
    args: &Args,
) {
    let single_at = |pat: &str, n: usize| singles.iter().find(|r| r.pattern == pat && r.seq_len == n);
    let mut out = String::new();
    let (command, date) = (args.command(), args.date());
    writeln!(out, "# Ring attention scaling ({p} GPUs)\n").unwrap();
    writeln!(out, "* device: {} x {p}, NCCL, one process per GPU", gpu.describe().unwrap_or_default()).unwrap();
    writeln!(out, "* date: {date}; command: `{command}`; run time {secs:.0} s").unwrap();
    writeln!(out, "* B=1, H={HEADS}, d={DIM}, bf16; times are medians (3 forward, 2 forward+backward) after a warm-up")
        .unwrap();
    writeln!(out, "* ratio = t_1(N) / (P t_P(N)) at the same total N (1.0 = P x one GPU); memory = peak device memory of the pass: what is in use outside the memory pool (CUDA context, NCCL buffers, modules) plus the pool's high-water mark of live buffers (freed memory the pool keeps for reuse is not counted); own K/V is the model figure `2 * 2 B (N/P) H d` bytes\n").unwrap();
    writeln!(
        out,
        "## One GPU\n\n| pattern | N | fwd ms | fwd+bwd ms | tokens/s fwd | GiB |\n|---|---|---|---|---|---|"
    )
    .unwrap();
    for r in singles {
        writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.3e} | {:.2} |",
            r.pattern, r.seq_len, r.fwd_ms, r.fwd_bwd_ms, r.tokens_per_s_fwd, r.memory_gib
        )
        .unwrap();
    }
    writeln!(out, "\n## {p} GPUs\n\n| rows | pattern | schedule | layout | N | N/GPU | fwd ms | ratio fwd | fwd+bwd ms | ratio fwd+bwd | tokens/s fwd | GiB/GPU | own K/V MiB | K/V sent MiB (fwd, rank 0) | compute-only ms | comm-only ms | hidden ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|").unwrap();
    let mut json_rows = Vec::new();
    for (m, what) in rows {
        let r = &m.row;
        let s = single_at(&r.pattern, r.seq_len);
        let ratio_f = s.map_or(f64::NAN, |s| s.fwd_ms / (p as f64 * r.fwd_ms));
        let ratio_b = s.map_or(f64::NAN, |s| s.fwd_bwd_ms / (p as f64 * r.fwd_bwd_ms));
        let hidden = (m.compute_ms + m.comm_ms - m.full_ms).max(0.0);
        writeln!(
            out,
            "| {what} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3e} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} |",
            r.pattern, r.schedule, r.layout, r.seq_len, r.seq_len / p, r.fwd_ms, ratio_f, r.fwd_bwd_ms, ratio_b, r.tokens_per_s_fwd, r.memory_gib, r.kv_block_mib, m.sent_mib, m.compute_ms, m.comm_ms, hidden
        )
        .unwrap();
        json_rows.push(serde_json::json!({"row": r, "what": what, "ratio_fwd": ratio_f, "ratio_fwd_bwd": ratio_b, "sent_mib": m.sent_mib, "compute_only_ms": m.compute_ms, "comm_only_ms": m.comm_ms, "hidden_ms": hidden}));
    }
    writeln!(out, "\n## Largest sequence (dense causal, zigzag ring, forward)\n\n| N | N/GPU | fwd ms | GiB in use on rank 0 |\n|---|---|---|---|").unwrap();
    for (n, ms, mem) in largest {
        writeln!(out, "| {n} | {} | {ms:.1} | {mem:.1} |", n / p).unwrap();
    }
    let (flops, link, step) = (speeds.flops, speeds.link_bytes, speeds.step_overhead);
    writeln!(out, "\n## Auto rule on measured speeds\n\nF = {:.0} TFLOP/s (one GPU, dense causal 128K), L = {:.1} GB/s (comm-only ring at 128K), o = {:.2} ms per step (8K ring forward / P, an upper bound)\n\n| N | choice | single s | ring s | all-gather s |\n|---|---|---|---|---|", flops / 1e12, link / 1e9, step * 1e3).unwrap();
    let f = |x: Option<f64>| x.map_or("does not fit".into(), |t| format!("{t:.2e}"));
    for n in [4096usize, 16384, 65536, 262_144, 1 << 20] {
        let pr = Problem {
            batch: 1,
            heads: HEADS,
            kv_heads: HEADS,
            head_dim: DIM,
            seq_len: n,
            pair_fraction: 0.5,
            moved_fraction: 1.0,
        };
        let d = choose(&pr, p, speeds);
        writeln!(out, "| {n} | {:?} | {} | {} | {} |", d.choice, f(d.single_s), f(d.ring_s), f(d.gather_s)).unwrap();
    }
    writeln!(out, "\n## Auto at run time (`dist::auto::select`, forward)\n\nEach problem is decided from the speeds above (rank 0's, broadcast), then every option is timed on it. \"best\" is the fastest measured option; the choice is right when it is the best or within 10% of it.\n\n| pattern | N | selected | predicted s (single / ring / all-gather) | measured ms (single / ring / pattern ring / all-gather) | best | chosen / best |\n|---|---|---|---|---|---|---|").unwrap();
    for a in autos {
        let name = match a.selected {
            Selected::Single => "single",
            Selected::Distributed(s) => s.name(),
        };
        let chosen = a.measured_ms.iter().find(|(n, _)| n == name).map_or(f64::NAN, |x| x.1);
        let best = a.measured_ms.iter().filter(|x| x.1.is_finite()).min_by(|x, y| x.1.total_cmp(&y.1));
        let d = &a.decision;
        let ms: Vec<String> = a.measured_ms.iter().map(|(_, t)| format!("{t:.2}")).collect();
        writeln!(
            out,
            "| {} | {} | {name} | {} / {} / {} | {} | {} | {:.2} |",
            a.pattern,
            a.seq_len,
            f(d.single_s),
            f(d.ring_s),
            f(d.gather_s),
            ms.join(" / "),
            best.map_or("-", |b| b.0.as_str()),
            best.map_or(f64::NAN, |b| chosen / b.1)
        )
        .unwrap();
    }
    println!("{out}");
    if let Some(path) = args.value("--md") {
        std::fs::write(&path, &out).expect("write md");
    }
    if let Some(path) = args.value("--json") {
        let j = serde_json::json!({"gpus": p, "device": gpu.describe().unwrap_or_default(), "command": command, "single": singles, "distributed": json_rows, "largest": largest, "speeds": speeds, "auto": autos});
        std::fs::write(&path, serde_json::to_string_pretty(&j).unwrap()).expect("write json");
    }
}

//! A check run in shards (`gpu_check --jobs N`, `ring_check --jobs N`): N processes of
//! the program with the same seed, process K running its share of the cases (`--shard
//! K/N`), and one log from theirs. The expensive part of a check on a fresh machine is
//! compiling each case's kernel modules (NVRTC, then the driver's JIT of the PTX), one CPU
//! core per process; shards compile in parallel on one GPU. Each shard writes its own log
//! ([`CheckLog`]'s numbered rows and worst-error table); the merge orders the rows by case
//! number, refuses a number seen twice, keeps the worst error per quantity over the
//! shards, and counts the verdicts.
//!
//! [`CheckLog`]: super::CheckLog

use std::fmt::Write;
use std::process::Child;
use std::time::{Duration, Instant};

/// The merged rows and worst errors of several shards' logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// The numbered case rows, by case number, one per line.
    pub rows: String,
    /// The worst-error table's rows (`| quantity | worst | bound |`), in the order the
    /// quantities were first seen.
    pub worst: String,
    pub passed: usize,
    pub failed: usize,
    /// The case numbers found, ascending.
    pub numbers: Vec<usize>,
}

/// Merge the texts of the shards' logs. A log that is not a check log (no case table), a
/// row whose result is neither `pass` nor `**FAIL**`, or a case number in two logs is an
/// error naming it; an empty one (a shard that wrote none) adds nothing.
pub fn merge_logs(logs: &[(String, String)]) -> Result<Merged, String> {
    let mut rows: Vec<(usize, &str)> = Vec::new();
    let mut worst: Vec<(String, f64, String)> = Vec::new();
    for (name, text) in logs {
        // A shard that stopped before its first case wrote nothing: its rows are missing.
        if text.is_empty() {
            continue;
        }
        let (_, tables) =
            text.split_once("## Cases").ok_or_else(|| format!("{name}: not a check log (no \"## Cases\" table)"))?;
        let (cases, worst_table) = tables.split_once("## Worst errors").unwrap_or((tables, ""));
        for line in cases.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // | N | result | case | errors |: cells[0] is the text before the first bar.
            let Some(number) = cells.get(1).and_then(|c| c.parse::<usize>().ok()) else { continue };
            if !matches!(cells.get(2), Some(&"pass") | Some(&"**FAIL**")) {
                return Err(format!("{name}: case {number}'s row has no result: {line:?}"));
            }
            rows.push((number, line));
        }
        for line in worst_table.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (Some(key), Some(Ok(err)), Some(bound)) =
                (cells.get(1), cells.get(2).map(|c| c.parse::<f64>()), cells.get(3))
            else {
                continue;
            };
            match worst.iter_mut().find(|(k, _, _)| k == key) {
                // NaN is the worst error (it never passes).
                Some(entry) if err.is_nan() || err > entry.1 => entry.1 = err,
                Some(_) => {}
                None => worst.push((key.to_string(), err, bound.to_string())),
            }
        }
    }
    rows.sort_by_key(|&(n, _)| n);
    if let Some(w) = rows.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("case {} is in two shards' logs", w[0].0));
    }
    let failed = rows.iter().filter(|(_, line)| line.contains("| **FAIL** |")).count();
    let mut merged = Merged {
        rows: String::new(),
        worst: String::new(),
        passed: rows.len() - failed,
        failed,
        numbers: rows.iter().map(|&(n, _)| n).collect(),
    };
    for (_, line) in &rows {
        writeln!(merged.rows, "{line}").expect("write to a String");
    }
    for (key, err, bound) in &worst {
        writeln!(merged.worst, "| {key} | {err:.2e} | {bound} |").expect("write to a String");
    }
    Ok(merged)
}

/// The arguments a shard runs with: `args` without the options `drop` names (each with its
/// value), then `add`.
pub fn shard_args(args: &[String], drop: &[&str], add: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if drop.contains(&a.as_str()) {
            it.next();
        } else {
            out.push(a.clone());
        }
    }
    out.extend_from_slice(add);
    out
}

/// `K/N` with `K < N` (`--shard`), or an error naming the value.
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard {text:?}: expected K/N with 0 <= K < N");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if k < n { Ok((k, n)) } else { Err(bad()) }
}

/// Where the shards' logs go: next to `log` (the run's `--log`), else in the temporary
/// directory as `{program}-{pid}.md`.
pub fn log_base(log: Option<String>, program: &str) -> String {
    log.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("{program}-{}.md", std::process::id())).display().to_string()
    })
}

/// Run this program `jobs` times at once, shard `K` with the arguments `rest` less the
/// options `replace` (each with its value) plus `--shard K/jobs --log PATH` and `add`, where
/// PATH is `{base}.shard-K-of-{jobs}.md`; wait for every shard, or stop those still running
/// after `limit` ([`wait_all`]), then return each shard's log path and text (empty for a
/// shard that wrote none) and remove the files. A shard rewrites its log as it goes, so
/// one stopped or dead keeps the rows it checked.
pub fn run_shards(
    rest: &[String],
    replace: &[&str],
    add: &[String],
    jobs: usize,
    base: &str,
    limit: Option<Duration>,
) -> Result<Vec<(String, String)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let paths: Vec<String> = (0..jobs).map(|k| format!("{base}.shard-{k}-of-{jobs}.md")).collect();
    let mut replaced = replace.to_vec();
    replaced.extend(["--jobs", "--shard", "--log", TIME_LIMIT, super::contend::CONTEND]);
    let children = paths
        .iter()
        .enumerate()
        .map(|(k, path)| {
            let mut own = vec!["--shard".to_string(), format!("{k}/{jobs}"), "--log".into(), path.clone()];
            own.extend_from_slice(add);
            std::process::Command::new(&exe)
                .args(shard_args(rest, &replaced, &own))
                .spawn()
                .map_err(|e| format!("starting shard {k}/{jobs}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for k in wait_all(children, limit).map_err(|e| format!("waiting for the shards: {e}"))? {
        eprintln!(
            "shard {k}/{jobs}: stopped at the time limit ({TIME_LIMIT} {}s)",
            limit.unwrap_or_default().as_secs()
        );
    }
    let logs = paths.iter().map(|p| (p.clone(), std::fs::read_to_string(p).unwrap_or_default())).collect();
    // A shard that wrote no log left nothing to remove.
    paths.iter().for_each(|p| drop(std::fs::remove_file(p)));
    Ok(logs)
}

/// The option of `--jobs` that stops the shards still running after so many seconds, so
/// that a run under a wall-clock limit (a device call) ends with its merged log.
pub const TIME_LIMIT: &str = "--time-limit";

/// `--time-limit S` of `args`: only with `--jobs` (`jobs`), whose shards it stops; a
/// bad value or one without `--jobs` stops the program with exit code 2, naming it.
pub fn time_limit(args: &super::Args, jobs: Option<usize>) -> Option<Duration> {
    let limit = args.integer::<u64>(TIME_LIMIT)?;
    if jobs.is_none() {
        args.fail(2, format!("{TIME_LIMIT} {limit} without --jobs: it stops the shards of --jobs N"));
    }
    Some(Duration::from_secs(limit))
}

/// Wait for every child; with `limit`, kill those still running when it has passed.
/// Returns the indices of the children it killed.
pub fn wait_all(children: Vec<Child>, limit: Option<Duration>) -> std::io::Result<Vec<usize>> {
    let deadline = limit.map(|l| Instant::now() + l);
    let mut running: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut killed = Vec::new();
    while running.iter().any(Option::is_some) {
        for slot in running.iter_mut() {
            if let Some(child) = slot
                && child.try_wait()?.is_some()
            {
                *slot = None;
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            for (k, slot) in running.iter_mut().enumerate() {
                if let Some(mut child) = slot.take() {
                    // Already gone is fine: it ended between the poll and the kill.
                    drop(child.kill());
                    child.wait()?;
                    killed.push(k);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(killed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Children that end are waited for; one still running at the limit is killed, and
    /// the wait ends soon after the limit, not with the child.
    #[cfg(unix)]
    #[test]
    fn the_time_limit_stops_only_the_children_still_running() {
        let spawn = |cmd: &str, arg: &str| std::process::Command::new(cmd).arg(arg).spawn().unwrap();
        let start = Instant::now();
        let killed = wait_all(vec![spawn("sleep", "0.1"), spawn("sleep", "30")], Some(Duration::from_millis(700)));
        assert_eq!(killed.unwrap(), [1]);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(700) && took < Duration::from_secs(10), "{took:?}");
        assert_eq!(wait_all(vec![spawn("sleep", "0.1")], None).unwrap(), Vec::<usize>::new());
    }

    fn log(rows: &[&str], worst: &[&str]) -> String {
        let mut t = String::from(
            "# GPU check log\n\n* seed: 1\n\n## Cases\n\n| # | result | case | errors |\n|---|---|---|---|\n",
        );
        for r in rows {
            t += r;
            t += "\n";
        }
        t += "\n## Worst errors\n\n| kernel / dtype / quantity | worst | bound |\n|---|---|---|\n";
        for w in worst {
            t += w;
            t += "\n";
        }
        t + "\nGPU check: 2 passed, 0 failed, 0 skipped (2 cases, 1.0 s)\n"
    }

    #[test]
    fn rows_come_out_by_case_number_with_the_worst_error_per_quantity() {
        let a = log(
            &["| 0 | pass | A | out 1.00e-3 |", "| 2 | **FAIL** | C | out 5.00e-2 |"],
            &["| Forward Bf16 out | 5.00e-2 | 1e-2 |", "| Forward Bf16 lse | 1.00e-8 | 1e-2 |"],
        );
        let b = log(
            &["| 1 | pass | B | out 2.00e-3 |", "| 3 | pass | D | dq 3.00e-3 |"],
            &[
                "| Forward Bf16 out | 2.00e-3 | 1e-2 |",
                "| Backward Bf16 dq | 3.00e-3 | 1e-2 |",
                "| Forward Bf16 lse | NaN | 1e-2 |",
            ],
        );
        let m = merge_logs(&[("a".into(), a), ("b".into(), b)]).unwrap();
        assert_eq!(m.numbers, [0, 1, 2, 3]);
        assert_eq!((m.passed, m.failed), (3, 1));
        let order: Vec<&str> = m.rows.lines().map(|l| l.split('|').nth(3).unwrap().trim()).collect();
        assert_eq!(order, ["A", "B", "C", "D"]);
        assert_eq!(
            m.worst,
            "| Forward Bf16 out | 5.00e-2 | 1e-2 |\n| Forward Bf16 lse | NaN | 1e-2 |\n| Backward Bf16 dq | 3.00e-3 | 1e-2 |\n"
        );
    }

    #[test]
    fn a_case_in_two_logs_a_row_without_a_result_and_a_foreign_file_are_errors() {
        let a = log(&["| 4 | pass | A | out 1.00e-3 |"], &[]);
        let e = merge_logs(&[("a".into(), a.clone()), ("b".into(), a)]).unwrap_err();
        assert!(e.contains("case 4"), "{e}");
        let cut = log(&["| 5 | | A | out 1.00e-3 |"], &[]);
        let e = merge_logs(&[("cut.md".into(), cut)]).unwrap_err();
        assert!(e.contains("cut.md") && e.contains("case 5"), "{e}");
        let e = merge_logs(&[("notes.md".into(), "# notes\n| 1 | pass |\n".into())]).unwrap_err();
        assert!(e.contains("notes.md") && e.contains("Cases"), "{e}");
        // An empty log (a shard that wrote none) adds no row and is no error.
        let m = merge_logs(&[("a".into(), log(&["| 4 | pass | A | out 1.00e-3 |"], &[])), ("b".into(), String::new())]);
        assert_eq!(m.unwrap().numbers, [4]);
    }

    /// ring_check's rows name a case with bars inside (`virtual | P=2 ... | dense | ...`)
    /// and may carry cells after the errors: the number and the result are the first two
    /// cells, and the row is kept whole.
    #[test]
    fn rows_with_bars_in_their_case_are_kept_whole() {
        let row = "| 7 | pass | virtual ulysses | P=2 striped | causal | B=1 N=1000 | out 1.48e-3 | K/V moved 12 |";
        let m = merge_logs(&[("r".into(), log(&[row, "| 3 | **FAIL** | virtual | P=3 | dense | out NaN |"], &[]))])
            .unwrap();
        assert_eq!(m.numbers, [3, 7]);
        assert_eq!((m.passed, m.failed), (1, 1));
        assert_eq!(m.rows.lines().nth(1), Some(row));
    }

    #[test]
    fn shards_are_k_of_n_with_k_below_n() {
        assert_eq!(parse_shard("0/1"), Ok((0, 1)));
        assert_eq!(parse_shard("2/3"), Ok((2, 3)));
        for bad in ["3/3", "0/0", "1", "a/2", "1/b", "-1/2", ""] {
            let e = parse_shard(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn a_shard_keeps_every_option_but_those_it_replaces() {
        let args: Vec<String> =
            "--seed 7 --only dense --jobs 3 --require-gpu --log x.md".split(' ').map(String::from).collect();
        let add: Vec<String> = ["--shard", "1/3"].map(String::from).to_vec();
        assert_eq!(
            shard_args(&args, &["--jobs", "--log"], &add),
            ["--seed", "7", "--only", "dense", "--require-gpu", "--shard", "1/3"]
        );
    }
}

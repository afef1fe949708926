//! The stall check of `ring_check`: `--stall RANK:SECONDS --timeout T` with `--nproc W`
//! or `--threads W`.
//!
//! Every rank runs the forward of the first ring case; rank `RANK` first sleeps
//! `SECONDS` (far beyond `T`). Its peers wait in their first collective, their watchdogs
//! fire after `T`, the first declares rank `RANK` the suspect on the progress board and
//! every rank adopts that verdict. Passing means: **every** rank of the world ends with
//! [`DistError::Stalled`] naming `RANK`, each within `T + RANK_GRACE` of its start, and
//! the whole run ends within `T + RUN_GRACE`. The sleeping rank gives up early once its
//! own watchdog fired ([`Communicator::check`], polled between slices of the sleep), as a
//! rank busy outside NCCL may; a rank that cannot (a hung kernel) is ended by its process
//! exiting ([`RANK_EXIT_GRACE`](crate::dist::launcher::RANK_EXIT_GRACE)), and then its
//! report is missing and the check fails.
//!
//! With `--nproc` the launcher's ranks write one line each to the directory the parent
//! passes as `--fault-report`; the parent reads them after [`launch_until`] (deadline
//! `T + RUN_GRACE`: a hung run is killed and fails). With `--threads` the ranks return
//! their outcomes; a run past the deadline exits 1 from the calling thread.

use crate::check::ring::{Cache, batch_slices, cached, cases, ring_parts};
use crate::dist::{
    Communicator, DistError, DistRank, Grid, RankData, RankEnv, SCHEDULES, launch_until, run_threads_with,
    timeout_from_env,
};
use crate::gpu::Gpu;
use crate::programs::Args;
use crate::shape::Dtype;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long after `T` a rank may take to end with the error (kernel compilation of the
/// first case, the watchdog's poll, the abort).
pub const RANK_GRACE: Duration = Duration::from_secs(30);
/// How long after `T` the whole run may take (process start, CUDA and NCCL init too).
pub const RUN_GRACE: Duration = Duration::from_secs(90);

/// `--stall RANK:SECONDS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    pub rank: usize,
    pub seconds: f64,
}

impl Stall {
    /// Parse `RANK:SECONDS`; the message names the flag and the value.
    pub fn parse(text: &str) -> Result<Stall, String> {
        let bad = || format!("--stall takes RANK:SECONDS (e.g. 1:600), got {text:?}");
        let (r, s) = text.split_once(':').ok_or_else(bad)?;
        let rank = r.trim().parse().map_err(|_| bad())?;
        let seconds: f64 = s.trim().parse().map_err(|_| bad())?;
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(bad());
        }
        Ok(Stall { rank, seconds })
    }
}

/// How one rank ended: the suspect its error names (if it was a stall), when, and the
/// message.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub rank: usize,
    pub stalled: bool,
    pub suspect: Option<usize>,
    pub seconds: f64,
    pub message: String,
}

impl Outcome {
    fn to_line(&self) -> String {
        let s = self.suspect.map_or("-".into(), |s| s.to_string());
        format!("{} {} {s} {:.3} {}\n", self.rank, self.stalled, self.seconds, self.message.replace('\n', " "))
    }

    fn parse(line: &str) -> Option<Outcome> {
        let mut w = line.trim_end().splitn(5, ' ');
        let rank = w.next()?.parse().ok()?;
        let stalled = w.next()?.parse().ok()?;
        let suspect = match w.next()? {
            "-" => None,
            s => Some(s.parse().ok()?),
        };
        let seconds = w.next()?.parse().ok()?;
        Some(Outcome { rank, stalled, suspect, seconds, message: w.next().unwrap_or("").to_string() })
    }
}

/// One rank: the forward of the first ring case, rank `stall.rank` sleeping first.
pub fn stall_rank(gpu: &Gpu, comm: &Communicator, stall: Stall, seed: u64) -> Outcome {
    let start = Instant::now();
    let me = comm.rank();
    let result = (|| -> Result<(), DistError> {
        let grid = Grid::new(comm.world(), 1)?;
        let c = &cases(&[comm.world()], 1)[0];
        let parts = ring_parts(c, &grid)?;
        let inp = cached(&mut Cache::new(), c, seed, false);
        let [q, k, v, _] = batch_slices(&inp.bits, c, &parts[0].rows);
        let data = RankData::upload(gpu, &parts[0].plan, me, q, k, v)?;
        let mut rank = DistRank::new(gpu, comm, &parts[0].plan, Dtype::Bf16)?;
        if me == stall.rank {
            let until = Duration::from_secs_f64(stall.seconds);
            while start.elapsed() < until && comm.check().is_ok() {
                std::thread::sleep(Duration::from_millis(100).min(until.saturating_sub(start.elapsed())));
            }
        }
        rank.forward(SCHEDULES[0], &data)?;
        gpu.synchronize()?;
        comm.stream().synchronize()?;
        comm.check()
    })();
    let seconds = start.elapsed().as_secs_f64();
    match result {
        Ok(()) => Outcome { rank: me, stalled: false, suspect: None, seconds, message: "completed".into() },
        Err(e) => {
            let suspect = match &e {
                DistError::Stalled { suspect, .. } => *suspect,
                _ => None,
            };
            let stalled = matches!(e, DistError::Stalled { .. });
            Outcome { rank: me, stalled, suspect, seconds, message: e.to_string() }
        }
    }
}

/// Whether every rank of `world` ended stalled, naming `stall.rank`, in time; and the
/// report (Markdown).
pub fn judge(outcomes: &[Outcome], world: usize, stall: Stall, timeout: Duration, wall: Duration) -> (bool, String) {
    let limit = timeout + RANK_GRACE;
    let mut ok = wall <= timeout + RUN_GRACE;
    let mut out = String::from("| rank | result | names | after | error |\n|---|---|---|---|---|\n");
    for rank in 0..world {
        let Some(o) = outcomes.iter().find(|o| o.rank == rank) else {
            ok = false;
            writeln!(out, "| {rank} | FAIL | - | - | no report (killed, or still running) |").unwrap();
            continue;
        };
        let good = o.stalled && o.suspect == Some(stall.rank) && o.seconds <= limit.as_secs_f64();
        ok &= good;
        let names = o.suspect.map_or("-".into(), |s| format!("rank {s}"));
        let verdict = if good { "pass" } else { "FAIL" };
        writeln!(out, "| {rank} | {verdict} | {names} | {:.1} s | {} |", o.seconds, o.message).unwrap();
    }
    writeln!(
        out,
        "\n**{}**: expected every one of {world} ranks to end with a stall naming rank {} within {:.0} s (timeout {:.0} s + {:.0} s); the run took {:.1} s (limit {:.0} s).",
        if ok { "stall detected" } else { "stall check FAILED" },
        stall.rank,
        limit.as_secs_f64(),
        timeout.as_secs_f64(),
        RANK_GRACE.as_secs_f64(),
        wall.as_secs_f64(),
        (timeout + RUN_GRACE).as_secs_f64()
    )
    .unwrap();
    (ok, out)
}

/// `ring_check` with `--stall`: the parent (launcher or threads) or a launched rank.
/// Exits 0 only when the stall was detected as [`judge`] says (a rank exits 1 with
/// its error).
pub fn main(args: &Args, env: Option<RankEnv>, nproc: Option<usize>, threads: Option<usize>) -> ! {
    let stall = Stall::parse(&args.value("--stall").unwrap_or_default()).unwrap_or_else(|m| args.fail(2, m));
    let seed: u64 = args.integer("--seed").unwrap_or(1);
    let timeout = args.timeout().unwrap_or_else(|| timeout_from_env().unwrap_or_else(|e| args.fail(2, e)));
    let Some(timeout) = timeout else { args.fail(2, "--stall needs the watchdog: a --timeout above 0") };
    let start = Instant::now();
    let world = env.as_ref().map(|e| e.world).or(nproc).or(threads);
    let Some(world) = world else { args.fail(2, "--stall needs --nproc or --threads") };
    if stall.rank >= world {
        args.fail(2, format!("--stall rank {} is not below the world size {world}", stall.rank));
    }
    if let Some(mut env) = env {
        env.timeout = Some(timeout);
        let report = args.value("--fault-report").map(PathBuf::from);
        let o = match env.connect() {
            Ok(Some((gpu, comm))) => stall_rank(&gpu, &comm, stall, seed),
            Ok(None) => args.skip(),
            Err(e) => args.fail(1, format!("rank {}: {e}", env.rank)),
        };
        if let Some(dir) = report {
            let _ = std::fs::write(dir.join(format!("rank-{}", o.rank)), o.to_line());
        }
        eprintln!("rank {}: {} after {:.1} s", o.rank, o.message, o.seconds);
        std::process::exit(if o.stalled { 1 } else { 0 });
    }
    let deadline = timeout + RUN_GRACE;
    let outcomes = if let Some(n) = nproc {
        let dir = std::env::temp_dir().join(format!("ringdil-fault-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| args.fail(1, format!("{}: {e}", dir.display())));
        let mut child_args = args.rest().to_vec();
        child_args.extend(["--fault-report".to_string(), dir.display().to_string()]);
        let exe = std::env::current_exe().expect("own path");
        let launched = launch_until(&exe, &child_args, &args.launch_options(n), Some(deadline));
        let outcomes = read_reports(&dir, world);
        let _ = std::fs::remove_dir_all(&dir);
        if launched.is_ok() && outcomes.is_empty() {
            args.skip(); // every rank skipped: no CUDA device
        }
        println!("launcher: {}", launched.map_or_else(|e| e.to_string(), |()| "every rank exited 0".into()));
        outcomes
    } else {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = run_threads_with(world, Some(timeout), |gpu, comm| Ok(stall_rank(gpu, comm, stall, seed)));
            let _ = tx.send(r);
        });
        match rx.recv_timeout(deadline) {
            Ok(Ok(Some(outcomes))) => outcomes,
            Ok(Ok(None)) => args.skip(),
            Ok(Err(e)) => args.fail(1, e),
            Err(_) => Vec::new(),
        }
    };
    let (ok, table) = judge(&outcomes, world, stall, timeout, start.elapsed());
    let mode = if nproc.is_some() { "one process per GPU" } else { "one thread per GPU" };
    let text = format!(
        "# Stall check ({world} ranks, {mode})\n\n* command: `{}`\n* date: {}\n* rank {} sleeps {} s before its first collective; watchdog timeout {} s\n\n{table}",
        args.command(),
        args.date(),
        stall.rank,
        stall.seconds,
        timeout.as_secs_f64()
    );
    println!("{text}");
    if let Some(path) = args.value("--log") {
        std::fs::write(&path, &text).unwrap_or_else(|e| args.fail(1, format!("{path}: {e}")));
    }
    std::process::exit(if ok { 0 } else { 1 });
}

fn read_reports(dir: &Path, world: usize) -> Vec<Outcome> {
    (0..world).filter_map(|r| Outcome::parse(&std::fs::read_to_string(dir.join(format!("rank-{r}"))).ok()?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_flag_is_rank_colon_seconds() {
        assert_eq!(Stall::parse("1:600"), Ok(Stall { rank: 1, seconds: 600.0 }));
        assert_eq!(Stall::parse("0:2.5"), Ok(Stall { rank: 0, seconds: 2.5 }));
        for bad in ["1", "a:3", "1:-2", "1:inf", ":"] {
            assert_eq!(Stall::parse(bad), Err(format!("--stall takes RANK:SECONDS (e.g. 1:600), got {bad:?}")));
        }
    }

    fn o(rank: usize, suspect: Option<usize>, seconds: f64) -> Outcome {
        Outcome { rank, stalled: suspect.is_some(), suspect, seconds, message: format!("rank {rank}: stalled") }
    }

    #[test]
    fn the_check_passes_only_when_every_rank_names_the_stalled_one_in_time() {
        let stall = Stall { rank: 1, seconds: 600.0 };
        let (t, wall) = (Duration::from_secs(20), Duration::from_secs(25));
        let (ok, report) = judge(&[o(0, Some(1), 21.0), o(1, Some(1), 21.2)], 2, stall, t, wall);
        assert!(ok, "{report}");
        assert!(report.contains("| 1 | pass | rank 1 | 21.2 s |"), "{report}");
        // The wrong suspect, a missing rank, a late error, a hung run: each fails.
        assert!(!judge(&[o(0, Some(0), 21.0), o(1, Some(1), 21.0)], 2, stall, t, wall).0);
        let (ok, report) = judge(&[o(0, Some(1), 21.0)], 2, stall, t, wall);
        assert!(!ok && report.contains("| 1 | FAIL | - | - | no report"), "{report}");
        assert!(!judge(&[o(0, Some(1), 51.0), o(1, Some(1), 21.0)], 2, stall, t, wall).0);
        assert!(!judge(&[o(0, Some(1), 21.0), o(1, Some(1), 21.0)], 2, stall, t, Duration::from_secs(111)).0);
        assert!(!judge(&[o(0, None, 1.0), o(1, None, 1.0)], 2, stall, t, wall).0, "a run that completed");
    }

    #[test]
    fn an_outcome_survives_its_report_line() {
        let x = Outcome { rank: 3, stalled: true, suspect: Some(1), seconds: 20.5, message: "rank 3: a b\nc".into() };
        let back = Outcome::parse(&x.to_line()).unwrap();
        assert_eq!((back.rank, back.stalled, back.suspect, back.message.as_str()), (3, true, Some(1), "rank 3: a b c"));
        let y = Outcome { rank: 0, stalled: false, suspect: None, seconds: 1.0, message: "completed".into() };
        assert_eq!(Outcome::parse(&y.to_line()).unwrap().suspect, None);
    }
}

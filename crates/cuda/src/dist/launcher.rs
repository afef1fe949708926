//! Start one process per GPU (torchrun-style) and join the NCCL communicator from the
//! environment those processes inherit.
//!
//! [`launch`] spawns `nproc` copies of a command on this host with
//!
//! | variable | value |
//! |---|---|
//! | `RINGDIL_RANK` | global rank `node_rank * nproc + local_rank` |
//! | `RINGDIL_LOCAL_RANK` | rank on this host |
//! | `RINGDIL_WORLD` | `nnodes * nproc` |
//! | `RINGDIL_NCCL_ID_FILE` | where rank 0 writes the NCCL unique id (256 hex digits) |
//! | `CUDA_VISIBLE_DEVICES` | the local rank's GPU (the `local_rank`-th entry of an inherited list) |
//! | `RINGDIL_PROGRESS_DIR` | the progress board of the ranks' watchdogs: `<id file>.progress` |
//!
//! and waits for all of them. For several hosts, run `launch` on each with the same
//! `nnodes`, its own `node_rank` and an id file on a shared filesystem; or export
//! NCCL's own `NCCL_COMM_ID=host:port` on every host instead of the file: every rank then
//! makes the same id from that address (`ncclGetUniqueId` encodes it and starts nothing),
//! and rank 0's `ncclCommInitRank` opens the bootstrap root there. (An id printed by a
//! process that then exits cannot serve: `ncclGetUniqueId` without `NCCL_COMM_ID` starts
//! the bootstrap root in the process that calls it, and peers joining after that process
//! ended fail with `ncclRemoteError`.) Rank 0 writes the file atomically (temporary file + rename); the others poll
//! for it until [`ID_WAIT`].
//!
//! Faults: each rank's communicator has a watchdog ([`super::watchdog`]; timeout
//! `RINGDIL_TIMEOUT_S`, default 300 s, 0 = off) posting to a board in a directory per
//! communicator under `RINGDIL_PROGRESS_DIR` (named by the first digits of the NCCL id,
//! so no run sees an older run's verdict). When a worker fails after a watchdog declared
//! a stall, the launcher gives the others [`STALL_GRACE`] to stop on their own (each
//! prints its error naming the suspect) and returns [`DistError::WorkerStalled`] with
//! the verdict; a worker that fails otherwise has its peers killed at once, as before.

use super::board::{ProgressBoard, Verdict};
use super::comm::{Communicator, UniqueId};
use super::error::{DistError, DistResult};
use super::watchdog::{self, PROGRESS_DIR_VAR, TIMEOUT_VAR, WatchOptions};
use crate::gpu::Gpu;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// NCCL's bootstrap address variable (`host:port`): an id without an id file.
pub const COMM_ID_VAR: &str = "NCCL_COMM_ID";

/// How long ranks other than 0 wait for the id file.
pub const ID_WAIT: Duration = Duration::from_secs(120);
/// How long the other workers may take to stop on their own after a stall was declared.
pub const STALL_GRACE: Duration = Duration::from_secs(30);
/// How long a rank whose watchdog fired may take to return before its process exits.
pub const RANK_EXIT_GRACE: Duration = Duration::from_secs(10);

/// The progress board's directory of a launch: next to the id file.
pub fn progress_dir(id_file: &Path) -> PathBuf {
    PathBuf::from(format!("{}.progress", id_file.display()))
}

/// The verdict of the newest communicator's board under `dir`, if one was declared.
pub fn find_verdict(dir: &Path) -> Option<Verdict> {
    let newest = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("verdict").exists())
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())?;
    ProgressBoard::files(&newest.path(), 0).ok()?.verdict()
}

/// A launch: processes per host, hosts, this host's index, where the id goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOptions {
    pub nproc: usize,
    pub nnodes: usize,
    pub node_rank: usize,
    /// `None`: a fresh file under the system temporary directory (single host only).
    pub id_file: Option<PathBuf>,
}

impl LaunchOptions {
    /// `nproc` processes on this one host.
    pub fn local(nproc: usize) -> Self {
        LaunchOptions { nproc, nnodes: 1, node_rank: 0, id_file: None }
    }

    /// Reject launches that cannot work, naming the value.
    pub fn validate(&self) -> DistResult<()> {
        if self.nproc == 0 {
            return Err(DistError::BadLaunch { what: "nproc", value: 0, reason: "at least one process per host" });
        }
        if self.nnodes == 0 {
            return Err(DistError::BadLaunch { what: "nnodes", value: 0, reason: "at least one host" });
        }
        if self.node_rank >= self.nnodes {
            return Err(DistError::BadLaunch {
                what: "node_rank",
                value: self.node_rank,
                reason: "must be below nnodes",
            });
        }
        if self.nnodes > 1 && self.id_file.is_none() && std::env::var(COMM_ID_VAR).is_err() {
            return Err(DistError::BadLaunch {
                what: "nnodes",
                value: self.nnodes,
                reason: "several hosts need an id file on a shared filesystem (or NCCL_COMM_ID=host:port exported on every host)",
            });
        }
        Ok(())
    }

    /// The environment of local rank `local` (without `CUDA_VISIBLE_DEVICES`).
    pub fn env_of(&self, local: usize, id_file: &Path) -> Vec<(String, String)> {
        vec![
            ("RINGDIL_RANK".into(), (self.node_rank * self.nproc + local).to_string()),
            ("RINGDIL_LOCAL_RANK".into(), local.to_string()),
            ("RINGDIL_WORLD".into(), (self.nnodes * self.nproc).to_string()),
            ("RINGDIL_NCCL_ID_FILE".into(), id_file.display().to_string()),
            (PROGRESS_DIR_VAR.into(), progress_dir(id_file).display().to_string()),
        ]
    }
}

/// The GPU that local rank `local` gets: the `local`-th entry of an inherited
/// `CUDA_VISIBLE_DEVICES` list, else `local` itself.
pub fn device_for(local: usize, inherited: Option<&str>) -> String {
    match inherited.map(|s| s.split(',').map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>()) {
        Some(list) if !list.is_empty() => list[local % list.len()].to_string(),
        _ => local.to_string(),
    }
}

/// Run `program args...` as `opts.nproc` ranks on this host and wait for all; the first
/// failing rank is reported (the others are killed; after a declared stall, once they
/// had [`STALL_GRACE`] to stop themselves).
pub fn launch(program: &Path, args: &[String], opts: &LaunchOptions) -> DistResult<()> {
    launch_until(program, args, opts, None)
}

/// [`launch`], killing every worker still running `deadline` after the start (a
/// [`DistError::Worker`] naming the lowest such rank).
pub fn launch_until(
    program: &Path,
    args: &[String],
    opts: &LaunchOptions,
    deadline: Option<Duration>,
) -> DistResult<()> {
    opts.validate()?;
    let started = Instant::now();
    let id_file = opts.id_file.clone().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("ringdil-nccl-id-{}-{nanos}", std::process::id()))
    });
    let board_dir = progress_dir(&id_file);
    if opts.node_rank == 0 {
        // Before any rank runs: ranks post only after every rank joined the communicator.
        let _ = std::fs::remove_file(&id_file);
        let _ = std::fs::remove_dir_all(&board_dir);
    }
    let inherited = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let mut children: Vec<(usize, Child)> = Vec::new();
    for local in 0..opts.nproc {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(opts.env_of(local, &id_file))
            .env("CUDA_VISIBLE_DEVICES", device_for(local, inherited.as_deref()));
        match cmd.spawn() {
            Ok(c) => children.push((local, c)),
            Err(e) => {
                kill_all(&mut children);
                return Err(DistError::Worker {
                    rank: opts.node_rank * opts.nproc + local,
                    reason: format!("spawn {}: {e}", program.display()),
                });
            }
        }
    }
    let mut failure = None;
    let mut stall: Option<(Verdict, Instant)> = None;
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            match children[i].1.try_wait() {
                Ok(Some(status)) => {
                    let (local, _) = children.remove(i);
                    if !status.success() && failure.is_none() {
                        failure = Some((local, format!("exited with {status}")));
                    }
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let (local, _) = children.remove(i);
                    failure.get_or_insert((local, format!("could not be waited for: {e}")));
                }
            }
        }
        if failure.is_some() && stall.is_none() {
            stall = find_verdict(&board_dir).map(|v| (v, Instant::now()));
        }
        match (&failure, &stall) {
            (Some(_), Some((_, at))) if at.elapsed() < STALL_GRACE => {}
            (Some(_), _) => {
                kill_all(&mut children);
                break;
            }
            (None, _) => {
                if let Some(d) = deadline.filter(|d| started.elapsed() > *d)
                    && let Some(&(local, _)) = children.iter().min_by_key(|(l, _)| *l)
                {
                    failure = Some((local, format!("still running {d:?} after the start: killed")));
                    kill_all(&mut children);
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if opts.node_rank == 0 && opts.id_file.is_none() {
        let _ = std::fs::remove_file(&id_file);
        let _ = std::fs::remove_dir_all(&board_dir);
    }
    let rank = |local| opts.node_rank * opts.nproc + local;
    match (failure, stall) {
        (None, _) => Ok(()),
        (Some((local, reason)), Some((verdict, _))) => {
            Err(DistError::WorkerStalled { rank: rank(local), reason, verdict })
        }
        (Some((local, reason)), None) => Err(DistError::Worker { rank: rank(local), reason }),
    }
}

fn kill_all(children: &mut Vec<(usize, Child)>) {
    for (_, c) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    children.clear();
}

/// This process's place in a launch, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    pub rank: usize,
    pub local_rank: usize,
    pub world: usize,
    pub id_file: Option<PathBuf>,
    /// NCCL's bootstrap address (`NCCL_COMM_ID`, `host:port`), when exported.
    pub comm_id: Option<String>,
    /// The watchdog's timeout (`RINGDIL_TIMEOUT_S`; `None`: off).
    pub timeout: Option<Duration>,
    /// Where the progress boards go (`RINGDIL_PROGRESS_DIR`; `None`: no suspect named).
    pub progress_dir: Option<PathBuf>,
}

impl RankEnv {
    /// `None` when `RINGDIL_RANK` is unset (not started by a launcher).
    pub fn from_env() -> DistResult<Option<Self>> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`RankEnv::from_env`] over any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> DistResult<Option<Self>> {
        let Some(rank) = get("RINGDIL_RANK") else { return Ok(None) };
        let num = |var: &'static str, text: String| -> DistResult<usize> {
            text.trim().parse().map_err(|_| DistError::Env { var, value: text, reason: "not a non-negative integer" })
        };
        let rank = num("RINGDIL_RANK", rank)?;
        let world = num(
            "RINGDIL_WORLD",
            get("RINGDIL_WORLD").ok_or(DistError::Env {
                var: "RINGDIL_WORLD",
                value: String::new(),
                reason: "unset (RINGDIL_RANK is set)",
            })?,
        )?;
        if rank >= world {
            return Err(DistError::BadRank { rank, world });
        }
        let local_rank = get("RINGDIL_LOCAL_RANK").map(|t| num("RINGDIL_LOCAL_RANK", t)).transpose()?.unwrap_or(rank);
        let comm_id = get(COMM_ID_VAR);
        let id_file = get("RINGDIL_NCCL_ID_FILE").map(PathBuf::from);
        if comm_id.is_none() && id_file.is_none() {
            return Err(DistError::Env {
                var: "RINGDIL_NCCL_ID_FILE",
                value: String::new(),
                reason: "unset, and NCCL_COMM_ID is unset too",
            });
        }
        let timeout = match get(TIMEOUT_VAR) {
            Some(text) => watchdog::parse_timeout(TIMEOUT_VAR, &text)?,
            None => Some(watchdog::DEFAULT_TIMEOUT),
        };
        let progress_dir = get(PROGRESS_DIR_VAR).map(PathBuf::from);
        Ok(Some(RankEnv { rank, local_rank, world, id_file, comm_id, timeout, progress_dir }))
    }

    /// The shared NCCL id: with `NCCL_COMM_ID` every rank makes it from that address;
    /// else rank 0 creates it and writes the file while the others wait for it.
    pub fn unique_id(&self) -> DistResult<UniqueId> {
        if self.comm_id.is_some() {
            return UniqueId::new();
        }
        let path = self.id_file.as_ref().expect("validated in from_lookup");
        let io = |e: std::io::Error| DistError::IdFile { path: path.display().to_string(), reason: e.to_string() };
        if self.rank == 0 {
            let id = UniqueId::new()?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, id.to_hex()).map_err(io)?;
            std::fs::rename(&tmp, path).map_err(io)?;
            return Ok(id);
        }
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(path)
                && text.trim().len() == 256
            {
                return UniqueId::from_hex("RINGDIL_NCCL_ID_FILE", &text);
            }
            if start.elapsed() > ID_WAIT {
                return Err(DistError::IdFile {
                    path: path.display().to_string(),
                    reason: format!("rank 0 did not write it within {ID_WAIT:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Open this rank's GPU and join the communicator (`None`: no CUDA device), watched
    /// as [`RankEnv::watch_options`] says.
    pub fn connect(&self) -> DistResult<Option<(Gpu, Communicator)>> {
        let Some(gpu) = Gpu::probe()? else { return Ok(None) };
        let id = self.unique_id()?;
        let comm = Communicator::init_watched(&gpu, self.rank, self.world, id, self.watch_options(&id))?;
        Ok(Some((gpu, comm)))
    }

    /// The watchdog of communicator `id` (`None` when the timeout is off): its board in
    /// `<progress dir>/<first 16 hex digits of the id>`, and the process exits
    /// [`RANK_EXIT_GRACE`] after the watchdog fired if the rank has not returned.
    pub fn watch_options(&self, id: &UniqueId) -> Option<WatchOptions> {
        let board = self.progress_dir.as_ref().and_then(|d| {
            let dir = d.join(&id.to_hex()[..16]);
            ProgressBoard::files(&dir, self.world)
                .map_err(|e| eprintln!("rank {}: no progress board in {}: {e}", self.rank, dir.display()))
                .ok()
        });
        Some(WatchOptions { timeout: self.timeout?, board, exit_after: Some(RANK_EXIT_GRACE) })
    }
}

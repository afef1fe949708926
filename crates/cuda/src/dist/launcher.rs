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
//!
//! and waits for all of them. For several hosts, run `launch` on each with the same
//! `nnodes`, its own `node_rank` and an id file on a shared filesystem; or export
//! `RINGDIL_NCCL_ID` (the hex id, from [`UniqueId::to_hex`]) on every host instead of the
//! file. Rank 0 writes the file atomically (temporary file + rename); the others poll
//! for it until [`ID_WAIT`].

use super::comm::{Communicator, UniqueId};
use super::error::{DistError, DistResult};
use crate::gpu::Gpu;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long ranks other than 0 wait for the id file.
pub const ID_WAIT: Duration = Duration::from_secs(120);

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
        if self.nnodes > 1 && self.id_file.is_none() && std::env::var("RINGDIL_NCCL_ID").is_err() {
            return Err(DistError::BadLaunch {
                what: "nnodes",
                value: self.nnodes,
                reason: "several hosts need an id file on a shared filesystem (or RINGDIL_NCCL_ID exported on every host)",
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
/// failing rank is reported (the others are killed).
pub fn launch(program: &Path, args: &[String], opts: &LaunchOptions) -> DistResult<()> {
    opts.validate()?;
    let id_file = opts.id_file.clone().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("ringdil-nccl-id-{}-{nanos}", std::process::id()))
    });
    if opts.node_rank == 0 {
        let _ = std::fs::remove_file(&id_file);
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
        if failure.is_some() {
            kill_all(&mut children);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if opts.node_rank == 0 && opts.id_file.is_none() {
        let _ = std::fs::remove_file(&id_file);
    }
    match failure {
        None => Ok(()),
        Some((local, reason)) => Err(DistError::Worker { rank: opts.node_rank * opts.nproc + local, reason }),
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
    pub id_hex: Option<String>,
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
        let id_hex = get("RINGDIL_NCCL_ID");
        let id_file = get("RINGDIL_NCCL_ID_FILE").map(PathBuf::from);
        if id_hex.is_none() && id_file.is_none() {
            return Err(DistError::Env {
                var: "RINGDIL_NCCL_ID_FILE",
                value: String::new(),
                reason: "unset, and RINGDIL_NCCL_ID is unset too",
            });
        }
        Ok(Some(RankEnv { rank, local_rank, world, id_file, id_hex }))
    }

    /// The shared NCCL id: from `RINGDIL_NCCL_ID`, or rank 0 creates it and writes the
    /// file while the others wait for it.
    pub fn unique_id(&self) -> DistResult<UniqueId> {
        if let Some(hex) = &self.id_hex {
            return UniqueId::from_hex("RINGDIL_NCCL_ID", hex);
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

    /// Open this rank's GPU and join the communicator (`None`: no CUDA device).
    pub fn connect(&self) -> DistResult<Option<(Gpu, Communicator)>> {
        let Some(gpu) = Gpu::probe()? else { return Ok(None) };
        let id = self.unique_id()?;
        let comm = Communicator::init(&gpu, self.rank, self.world, id)?;
        Ok(Some((gpu, comm)))
    }
}

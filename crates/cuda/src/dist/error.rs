//! Errors of the distributed runtime. Every variant names the value that failed.

use super::board::Verdict;
use crate::error::CudaError;
use std::fmt;

#[derive(Debug)]
pub enum DistError {
    /// A kernel, driver or argument error of the single-GPU layer.
    Cuda(CudaError),
    /// The chunk plan or spec was rejected by the reference crate.
    Reference(ringdil_reference::Error),
    /// An NCCL call failed (`call` names it; `code` is NCCL's result code).
    Nccl { call: &'static str, code: String },
    /// A rank's tokens fall into more arithmetic runs than the ring launches per step.
    TooManyPieces { rank: usize, pieces: usize, max: usize },
    /// Rank and world size that do not fit together.
    BadRank { rank: usize, world: usize },
    /// A launcher environment variable that is missing or malformed.
    Env { var: &'static str, value: String, reason: &'static str },
    /// The NCCL unique-id file could not be written or read in time.
    IdFile { path: String, reason: String },
    /// `nproc`/`nnodes` of a launch that cannot work.
    BadLaunch { what: &'static str, value: usize, reason: &'static str },
    /// A worker process could not be started or failed.
    Worker { rank: usize, reason: String },
    /// A worker failed after a watchdog declared a stall: the verdict names the suspect.
    WorkerStalled { rank: usize, reason: String, verdict: Verdict },
    /// Rank `rank`'s watchdog fired ([`super::watchdog`]): rank `detector` waited
    /// `waited_s` (past `timeout_s`) in its `op`-th collective; `suspect` is the rank that
    /// entered fewest collectives (`None`: no rank is behind). The communicator is aborted.
    Stalled { rank: usize, suspect: Option<usize>, detector: usize, op: u64, waited_s: f64, timeout_s: f64 },
    /// Tensors of a distributed call that disagree with the plan.
    ShapeMismatch { what: &'static str, expected: Vec<usize>, got: Vec<usize> },
    /// The plan has `plan` ranks but the communicator (or virtual set) has `world`.
    WorldMismatch { plan: usize, world: usize },
    /// `backward` called before `forward`.
    BackwardBeforeForward,
    /// A rank of [`run_threads`](super::threads::run_threads) returned this error.
    RankFailed { rank: usize, error: Box<DistError> },
    /// A rank of [`run_threads`](super::threads::run_threads) panicked with this message.
    RankPanicked { rank: usize, message: String },
    /// `world` ranks cannot form `rings` rings of equal size.
    BadGrid { world: usize, rings: usize, reason: &'static str },
    /// Splitting `batch` rows over `rings` rings would leave a ring without rows.
    EmptyRing { batch: usize, rings: usize },
    /// A color or key of `ncclCommSplit` that does not fit NCCL's non-negative `int`.
    BadSplit { what: &'static str, value: usize },
    /// A tuning call with no candidate schedule, no timed pass, or no finite time.
    BadTune { candidates: usize, reps: usize },
    /// A plan's query-head range that is empty or reaches past the problem's heads.
    BadHeads { heads: std::ops::Range<usize>, all: usize },
    /// A Ulysses degree of the hybrid that does not divide the ranks or exceeds the heads.
    HybridDegree { degree: usize, ranks: usize, heads: usize },
}

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistError::Cuda(e) => write!(f, "{e}"),
            DistError::Reference(e) => write!(f, "{e}"),
            DistError::Nccl { call, code } => write!(f, "NCCL {call} failed: {code}"),
            DistError::TooManyPieces { rank, pieces, max } => write!(
                f,
                "rank {rank} owns {pieces} separate runs of tokens; the GPU ring launches at most {max} per step (use contiguous, zigzag or striped layouts, or coarser permutations)"
            ),
            DistError::BadRank { rank, world } => write!(f, "rank {rank} is not below the world size {world}"),
            DistError::Env { var, value, reason } => write!(f, "environment variable {var}={value:?}: {reason}"),
            DistError::IdFile { path, reason } => write!(f, "NCCL id file {path}: {reason}"),
            DistError::BadLaunch { what, value, reason } => write!(f, "launch: {what} = {value}: {reason}"),
            DistError::Worker { rank, reason } => write!(f, "worker rank {rank}: {reason}"),
            DistError::WorkerStalled { rank, reason, verdict: v } => {
                let who = v.suspect.map_or("no rank is behind".to_string(), |s| format!("rank {s} stalled"));
                write!(
                    f,
                    "worker rank {rank}: {reason}; the progress board says {who} (rank {} waited {:.1} s in its collective {}, timeout {} s)",
                    v.detector, v.waited_s, v.op, v.timeout_s
                )
            }
            DistError::Stalled { rank, suspect, detector, op, waited_s, timeout_s } => {
                let who = match suspect {
                    Some(s) => format!("rank {s} is behind (it entered fewer collectives than its peers)"),
                    None => "no rank is behind on the progress board (every rank entered as many collectives)".into(),
                };
                write!(
                    f,
                    "rank {rank}: stalled: {who}; rank {detector} waited {waited_s:.1} s in its collective {op}, timeout {timeout_s} s (RINGDIL_TIMEOUT_S); communicator aborted"
                )
            }
            DistError::ShapeMismatch { what, expected, got } => {
                write!(f, "{what}: expected shape {expected:?}, got {got:?}")
            }
            DistError::WorldMismatch { plan, world } => {
                write!(f, "the chunk plan has {plan} ranks but the world has {world}")
            }
            DistError::BackwardBeforeForward => write!(f, "backward called before forward"),
            DistError::RankFailed { rank, error } => write!(f, "rank {rank}: {error}"),
            DistError::RankPanicked { rank, message } => write!(f, "rank {rank} panicked: {message}"),
            DistError::BadGrid { world, rings, reason } => {
                write!(f, "{world} ranks cannot form {rings} rings: {reason}")
            }
            DistError::EmptyRing { batch, rings } => write!(
                f,
                "batch {batch} split over {rings} rings leaves a ring without rows (each ring needs at least one)"
            ),
            DistError::BadSplit { what, value } => {
                write!(f, "communicator split: {what} = {value} does not fit a non-negative C int")
            }
            DistError::BadTune { candidates, reps } => write!(
                f,
                "tuning needs at least one candidate schedule and one timed pass with a finite time (got {candidates} candidates, {reps} passes)"
            ),
            DistError::BadHeads { heads, all } => {
                write!(f, "query heads {}..{} are not a non-empty range of the {all} heads", heads.start, heads.end)
            }
            DistError::HybridDegree { degree, ranks, heads } => write!(
                f,
                "hybrid Ulysses degree {degree} must be at least 1, divide the {ranks} ranks and not exceed the {heads} query heads"
            ),
        }
    }
}

impl std::error::Error for DistError {}

impl From<CudaError> for DistError {
    fn from(e: CudaError) -> Self {
        DistError::Cuda(e)
    }
}

impl From<cudarc::driver::DriverError> for DistError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        DistError::Cuda(CudaError::Driver(e))
    }
}

impl From<ringdil_reference::Error> for DistError {
    fn from(e: ringdil_reference::Error) -> Self {
        DistError::Reference(e)
    }
}

pub type DistResult<T> = std::result::Result<T, DistError>;

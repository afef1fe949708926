//! Distributed attention over NCCL: ring attention, the pattern-aware plan, the
//! all-gather baseline, Ulysses (head parallelism) and the Ulysses x ring hybrid, one rank
//! per GPU; and virtual ranks that run the same steps on one GPU.
//!
//! * [`layout`]: the reference's [`ChunkPlan`](ringdil_reference::ring::ChunkPlan) as
//!   GPU pieces, the kernel positions of every (query piece, key piece) pair and the
//!   pairs the pattern needs.
//! * [`ring`]: one rank's forward and backward for each of the [`SCHEDULES`], transfers on a
//!   second stream overlapping the kernels (double-buffered, ordered by events).
//! * [`virtual_ranks`]: `P` ranks simulated on one GPU with the same launches and merge
//!   order (bit-identical to the ring).
//! * [`comm`]: the NCCL communicator (unique id, grouped send/recv, barrier).
//! * [`launcher`]: one process per GPU started by [`launch`], torchrun-style, for one
//!   host or several.
//! * [`threads`]: the same ranks as threads of one process, one GPU each
//!   ([`run_threads`]).
//! * [`watchdog`]: stall detection, a thread per rank that aborts a communicator whose
//!   collective waits past a timeout (`RINGDIL_TIMEOUT_S`), naming the rank that is
//!   behind on the [`board`] (the ranks' progress, in memory or in files).
//! * [`grid`]: the 2-D layout, several rings side by side, data-parallel across them
//!   (rings on sub-communicators from [`Communicator::split`]).
//! * [`balance`]: the work-balanced contiguous split for packed documents.
//! * [`hybrid_split`]: the Ulysses x ring grid (groups, head runs, ring plans, index
//!   lists) that `ring/hybrid.rs` runs.
//! * [`auto`]: one GPU, the ring, all-gather, Ulysses or the hybrid, from the problem and
//!   measured speeds.
//!
//! `docs/distributed.md` describes the runtime, the volumes and the auto rule.

pub mod auto;
pub mod balance;
pub mod board;
pub mod comm;
pub mod error;
mod exec;
pub mod grid;
pub mod head_split;
pub mod hybrid_split;
pub mod launcher;
pub mod layout;
pub mod ring;
pub mod threads;
mod virtual_hybrid;
pub mod virtual_ranks;
mod virtual_ulysses;
pub mod watchdog;

pub use balance::balanced_layout;
pub use board::{ProgressBoard, Verdict};
pub use comm::{Communicator, UniqueId};
pub use error::{DistError, DistResult};
pub use grid::Grid;
pub use launcher::{LaunchOptions, RankEnv, launch, launch_until};
pub use layout::{DistPlan, Piece};
pub use ring::{DistRank, Probe, RankData, RankGrads, RankState, SCHEDULES};
pub use threads::{run_threads, run_threads_with};
pub use virtual_ranks::VirtualRanks;
pub use watchdog::{WatchOptions, timeout_from_env};

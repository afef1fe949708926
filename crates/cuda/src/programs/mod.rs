//! What the four GPU programs in `src/bin/` share: `gpu_check` (every kernel against
//! the reference), `gpu_bench` (kernels against torch), `ring_check` (distributed
//! attention against the reference) and `ring_bench` (distributed scaling).
//!
//! * [`Args`]: their command lines (`--flag value` options and bare switches), the
//!   command recorded in their reports, and how they stop: on a bad flag, on an error,
//!   or on a machine without a GPU (skipped, never passed);
//! * the launch flags of the distributed programs (`--nproc`, `--nnodes`, `--node-rank`,
//!   `--id-file`, `--timeout`: `launch.rs`);
//! * [`CheckLog`]: the Markdown log of a check run, one row per case with its errors,
//!   the pass / fail counts and the worst error per quantity;
//! * [`shards`]: one log from a check run as several processes (`gpu_check --jobs N`);
//! * [`contend`]: a check run beside a second CUDA context that keeps the GPU busy
//!   (`--contend MS`), so that kernels are preempted as on a shared GPU.
//!
//! The cases the checks run live with what they check: [`crate::check`] (kernels) and
//! [`crate::check::ring`] (distributed attention).

mod args;
pub mod contend;
mod launch;
mod log;
pub mod shards;

pub use args::{Args, Program};
pub use log::CheckLog;

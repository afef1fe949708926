//! Distributed attention on `P` simulated ranks, proven equal to single-device attention.
//!
//! A sequence of `N` tokens is split over ranks by a [`ChunkPlan`] (any boundaries, the
//! contiguous / zigzag / striped layouts, or any token permutation). A [`Schedule`] says,
//! step by step, which rows each rank sends to which and what it computes; it is a plain
//! value (serde JSON) built by one of
//!
//! * [`ring()`]: ring attention with ring-flash-attention's backward, skipping empty steps;
//! * [`pattern_ring`]: the same steps, shipping only the rows the pattern needs ([`Needs`]);
//! * [`all_gather`]: Megatron / Llama 3 context parallelism (all-gather `K`, `V`);
//! * [`ulysses`]: DeepSpeed-Ulysses head parallelism (all-to-all);
//! * [`hybrid`]: Ulysses inside groups of ranks, the ring between groups (USP).
//!
//! A [`Simulation`] replays a schedule on concrete tensors with one row store per rank,
//! checks that every allowed (query, key) pair is computed exactly once, and reports the
//! elements each rank sends per step and its peak memory ([`Report`]). All index
//! arithmetic uses global token positions. `docs/schedules.md` draws each schedule and
//! derives the volume formulas quoted in each module.

mod all_gather;
mod balance;
mod chunking;
mod comm_plan;
mod head_slice;
mod hybrid;
mod needs;
#[allow(clippy::module_inception)]
mod ring;
mod schedule;
mod simulation;
mod ulysses;

pub use all_gather::all_gather;
pub use balance::{balanced_boundaries, causal_work};
pub use chunking::{ChunkPlan, Layout, TokenMap, even_boundaries};
pub use comm_plan::pattern_ring;
pub use hybrid::{hybrid, hybrid_degree};
pub use needs::Needs;
pub use ring::ring;
pub use schedule::{Kind, Op, Schedule, Skip, Step, Tensor};
pub use simulation::{Report, Simulation, simulate};
pub use ulysses::ulysses;

//! # ringdil-reference: the specification of ringdil's attention
//!
//! A pure-CPU crate that *defines* what every other part of ringdil computes: full and
//! masked attention, LongNet dilated attention, the online-softmax merge of partial
//! results, and their backward passes. It is written for clarity first and speed
//! second (blocked, rayon-parallel, sparse patterns only touch the keys they allow),
//! since it is the oracle behind thousands of property-test cases and the GPU checks.
//!
//! * Layout: `[batch, seq, heads, head_dim]` for `q`, `k`, `v`, outputs and gradients;
//!   `[batch, heads, seq]` for the log-sum-exp. `k`, `v` (and `dk`, `dv`) may have
//!   `H_kv` heads dividing the `H` of `q`: grouped-query attention ([`Heads`]; MQA is
//!   `H_kv = 1`), with the head counts taken from the shapes.
//! * Types: generic over `f32` and `f64` (`f64` is ground truth); bf16/f16 through
//!   [`attention_low_precision`].
//! * Scale: `1/sqrt(head_dim)` unless [`Spec::scale`] sets it.
//!
//! The semantic rules are stated in math in `docs/semantics.md` and in the docs of
//! [`pattern`], [`partial`] and [`mod@attention`].
//!
//! ```
//! use ringdil_reference::{attention, pattern::Dilated, random::normal_tensor, Spec};
//! let q = normal_tensor([1, 100, 4, 16], 1);
//! let k = normal_tensor([1, 100, 4, 16], 2);
//! let v = normal_tensor([1, 100, 4, 16], 3);
//! let spec = Spec::new(Dilated::longnet(&[(16, 1), (64, 4)])).causal(true);
//! let out = attention(q.view(), k.view(), v.view(), &spec).unwrap();
//! assert_eq!(out.out.dim(), (1, 100, 4, 16));
//! ```

pub mod attention;
mod blocked;
mod check;
pub mod compare;
pub mod documents;
pub mod error;
pub mod float;
pub mod heads;
pub mod partial;
pub mod pattern;
pub mod random;
pub mod ring;
pub mod spec;

pub use attention::{
    Attention, Gradients, OutputGrad, attend_chunk, attention, attention_backward, attention_low_precision,
    backward_chunk,
};
pub use blocked::BLOCK_ROWS;
pub use documents::Documents;
pub use error::{Error, Result};
pub use heads::Heads;
pub use partial::Partial;
pub use pattern::{KeyRun, Pattern};
pub use spec::Spec;

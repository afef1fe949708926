//! The tile plan of a materialised pattern ([`GpuPattern::Table`](crate::GpuPattern)): a
//! plan tile is visited when a table tile under it keeps a pair for some head of the
//! launch ([`MaskTable::may_attend`]).
//!
//! Sound for any axis: a strided axis hands the table the interval from its first to its
//! last position, a superset of its rows. The element test is the table itself, so a
//! visited tile with no kept pair costs its loads and nothing else.

use super::{IndexMap, TilePlan};
use crate::mask_table::MaskTable;
use std::ops::Range;

/// The tile plan of `table` for pattern heads `heads` under `map` (identity: table
/// launches are never compacted), query and key indices in tiles of
/// `tiles`.
pub fn plan(table: &MaskTable, heads: Range<usize>, causal: bool, map: &IndexMap, tiles: (usize, usize)) -> TilePlan {
    TilePlan::build_spans(map, tiles, |q, k| !(causal && k.0 > q.1) && table.may_attend(heads.clone(), q, k))
}

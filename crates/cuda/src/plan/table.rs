//! The tile plan of a materialised pattern ([`GpuPattern::Table`](crate::GpuPattern)): a
//! plan tile is visited when a table tile under it keeps a pair for some head of the
//! launch ([`MaskTable::may_attend`]).
//!
//! Sound for any axis: a strided axis hands the table the interval from its first to its
//! last position, a superset of its rows. The element test is the table itself, so a
//! visited tile with no kept pair costs its loads and nothing else.

use super::{IndexMap, TilePlan, positions};
use crate::mask_table::MaskTable;
use std::ops::Range;

/// The tile plan of `table` for pattern heads `heads` under `map` (identity: table
/// launches are never compacted), query indices in tiles of `q_tile`, key indices in
/// tiles of `k_tile`.
pub fn plan(
    table: &MaskTable,
    heads: Range<usize>,
    causal: bool,
    map: IndexMap,
    (q_tile, k_tile): (usize, usize),
) -> TilePlan {
    let (nq, nk) = map.extents();
    let (qa, ka) = map.axes();
    TilePlan::build(nq.div_ceil(q_tile), nk.div_ceil(k_tile), |r, c| {
        let (Some(q), Some(k)) =
            (positions(r * q_tile, (r + 1) * q_tile, qa), positions(c * k_tile, (c + 1) * k_tile, ka))
        else {
            return false;
        };
        !(causal && k.0 > q.1) && table.may_attend(heads.clone(), q, k)
    })
}

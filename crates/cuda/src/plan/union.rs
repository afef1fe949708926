//! Tile plans of a nested union's pieces ([`crate::union_pieces`]): the plan of the
//! piece's branch, less the tile pairs that lie wholly inside every head's holes or on the
//! side of them the launch does not keep.
//!
//! The plan serves every head, so it asks the narrowest hole over the heads per `w_0` unit
//! ([`HoleTable::narrowest`]): where some head has no hole the split is at the query
//! itself. For a query position `x` the keys a head may see lie below `below(x)` (side
//! [`PieceSide::Below`]), the start of its narrowest hole (`x + 1` without one), or above
//! `above(x)` ([`PieceSide::Above`]), the narrowest hole's last position (`x` without one).
//! Both grow with `x` inside a unit, so a unit's extreme query decides for it. A launch on
//! an identity map (a strided ring piece) keeps its branch's plan with no tile marked full:
//! the holes cut pairs inside tiles the branch alone would call full.

use super::{IndexMap, TilePlan, build_compact};
use crate::spec::GpuPattern;
use crate::union_pieces::{HoleTable, PieceSide};
use ringdil_reference::pattern::Branch;

/// The tile plan of a piece of `branch` keeping `side` of the holes of `holes`, under
/// `map`, in tiles of `(q_tile, k_tile)` launch indices.
pub fn plan(
    pattern: &GpuPattern,
    branch: &Branch,
    causal: bool,
    map: &IndexMap,
    (q_tile, k_tile): (usize, usize),
    (holes, side): (&HoleTable, PieceSide),
) -> TilePlan {
    if let IndexMap::Identity { .. } = map {
        let mut p = super::plan(pattern, Some(branch), causal, map, (q_tile, k_tile));
        p.full.iter_mut().for_each(|f| *f = 0);
        return p;
    }
    let narrowest = holes.narrowest();
    let unit = holes.unit;
    // Does some query position in [x0, x1] see some key position in [k0, k1]?
    let sees = |(x0, x1): (usize, usize), (k0, k1): (usize, usize)| {
        (x0 / unit..=x1 / unit).any(|u| match side {
            PieceSide::Below => {
                let x = x1.min(u * unit + unit - 1);
                k0 < narrowest[u].map_or(x + 1, |w| x - x % w)
            }
            PieceSide::Above => {
                let x = x0.max(u * unit);
                k1 > narrowest[u].map_or(x, |w| x - x % w + w - 1)
            }
        })
    };
    build_compact(map, (q_tile, k_tile), sees)
}

//! A union of nested dilated branches as disjoint compact pieces
//! ([`ExprDilated::is_nested_union`]).
//!
//! Branches `(w_j, r_j)` nest when every earlier `j < i` has `w_j | w_i`, `r_j | r_i` and
//! `r_j | w_j`. For query `q` on branch `i`'s lattice, let `j*` be the last `j < i` whose
//! lattice holds `q`; its *hole* is `q`'s segment in `j*`, `[q - q mod w_{j*}, q - q mod
//! w_{j*} + w_{j*})` cut to the sequence (none when no earlier lattice holds `q`). Branch
//! `i`'s piece is its keys outside the hole, and the pieces of all branches are disjoint
//! and cover the union (`docs/semantics.md` section 14, proven in `tests/union_nested.rs`).
//! Disjoint pieces merge exactly as a dilated pattern's branches do, so each runs as a
//! compact launch and costs its share of the pairs.
//!
//! **Which earlier lattice holds `q`.** On branch `i`'s lattice `q = s_i w_i + o_i(h, s_i)
//! + t r_i`, and `r_j` divides `w_i` and `r_i`, so `q mod r_j = o_i mod r_j`, while `q` lies
//! on `j`'s lattice when `q mod r_j = o_j(h, s_j)` (`r_j | w_j`). Both depend on `q` only
//! through its segments, which the finest segment `w_0` determines: the hole's width is a
//! table per (head, `w_0`-unit), [`HoleTable`], read once per query row.
//!
//! **Symmetry.** A key `k` of the piece's segment lies in `hole(q)` exactly when `q` lies
//! in `hole(k)` (in one `w_j` segment `k` and `q` are on `j`'s lattice together), so the
//! backward cuts the queries of key `k` by `hole(k)` from the same table.
//!
//! **One interval per row.** The keys outside the hole are those below it and those above
//! it. A causal piece keeps only the first (the hole holds `q`); a non-causal one runs as
//! two launches, [`PieceSide::Below`] and [`PieceSide::Above`], so that every row of every
//! launch still sees one interval of its segment (the compact launches' interval mask).
//! Without a hole the split is at `q` itself: keys at or before `q`, keys after it.

use ringdil_reference::pattern::expr::CompactBranch;

/// Which side of each row's hole a piece's launch keeps (`Params::hole_side`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum PieceSide {
    /// Keys before the query's hole (without one: at or before the query).
    Below = 1,
    /// Keys after the query's hole (without one: after the query).
    Above = 2,
}

impl PieceSide {
    /// Every side with its kernel-side name.
    pub const ALL: [(&'static str, PieceSide); 2] =
        [("HOLE_BELOW", PieceSide::Below), ("HOLE_ABOVE", PieceSide::Above)];

    /// The launches of one later branch: below only when causal (nothing after the query
    /// is visible), else both.
    pub fn of(causal: bool) -> &'static [PieceSide] {
        if causal { &[PieceSide::Below] } else { &[PieceSide::Below, PieceSide::Above] }
    }
}

/// A later branch's hole widths: `widths[h * units + u]` is the width `w_{j*}` (cut to the
/// sequence; 0: no hole) of the queries of pattern head `h` in positions `u unit ..
/// (u + 1) unit`, `unit` the first branch's segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoleTable {
    pub unit: usize,
    pub units: usize,
    pub widths: Vec<u32>,
}

impl HoleTable {
    /// The hole width of head `head`'s rows at position `pos`.
    pub fn width(&self, head: usize, pos: usize) -> usize {
        self.widths[head * self.units + pos / self.unit] as usize
    }

    /// Per unit, the narrowest hole over every head, or None where some head has none: a
    /// tile plan shared by the heads may skip only what every head's hole covers.
    pub fn narrowest(&self) -> Vec<Option<usize>> {
        let heads = self.widths.len() / self.units.max(1);
        (0..self.units)
            .map(|u| {
                let w = (0..heads).map(|h| self.widths[h * self.units + u]).min().unwrap_or(0);
                (w > 0).then_some(w as usize)
            })
            .collect()
    }
}

/// The hole tables of a nested union's branches over `seq_len` positions (`branches` as
/// [`ExprDilated::compact_branches`] makes them): None for the first branch (no earlier
/// lattice), one table per later branch.
pub fn hole_tables(branches: &[CompactBranch], seq_len: usize) -> Vec<Option<HoleTable>> {
    let unit = branches[0].segment;
    let units = seq_len.div_ceil(unit);
    let heads = branches[0].offsets.len() / branches[0].segments.max(1);
    let width = |i: usize, h: usize, u: usize| -> u32 {
        let pos = u * unit;
        let own = &branches[i];
        let residue = own.offset(h, pos / own.segment);
        (0..i)
            .rev()
            .find(|&j| {
                let b = &branches[j];
                residue % b.dilation == b.offset(h, pos / b.segment)
            })
            .map_or(0, |j| branches[j].segment.min(seq_len) as u32)
    };
    (0..branches.len())
        .map(|i| {
            (i > 0).then(|| HoleTable {
                unit,
                units,
                widths: (0..heads).flat_map(|h| (0..units).map(move |u| (h, u))).map(|(h, u)| width(i, h, u)).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};

    /// The table against the rule read off positions: for every kept row `q` of branch 2
    /// of (4, 1), (8, 2), (16, 4) with rotating offsets, the hole is `q`'s segment in the
    /// last earlier branch whose lattice (tested on `q` itself) holds it.
    #[test]
    fn hole_widths_follow_the_last_earlier_lattice_holding_the_row() {
        let c = Constants::new();
        let branches = [("4", "1", "0"), ("8", "2", "h + s"), ("16", "4", "h * s + 1")]
            .map(|(w, r, o)| ExprBranch::new(w, r, o, None, &c).unwrap())
            .to_vec();
        let p = ExprDilated { branches, combine: ExprCombine::Union };
        assert!(p.is_nested_union());
        let (heads, n) = (3, 45);
        let forms = p.compact_branches(heads, n).unwrap();
        let tables = hole_tables(&forms, n);
        assert!(tables[0].is_none());
        let on = |j: usize, h: usize, q: usize| {
            let b = &forms[j];
            (q % b.segment) % b.dilation == b.offset(h, q / b.segment)
        };
        for (i, table) in tables.iter().enumerate().skip(1) {
            let table = table.as_ref().unwrap();
            assert_eq!((table.unit, table.units), (4, 12));
            for h in 0..heads {
                for q in (0..n).filter(|&q| on(i, h, q)) {
                    let want = (0..i).rev().find(|&j| on(j, h, q)).map_or(0, |j| forms[j].segment.min(n));
                    assert_eq!(table.width(h, q), want, "branch {i}, head {h}, query {q}");
                }
            }
        }
        // Branch (4, 1) holds every position: branch 1's holes are all 4 wide.
        assert!(tables[1].as_ref().unwrap().widths.iter().all(|&w| w == 4));
        // So every row of branch 2 has a hole: the narrowest over the heads is a width.
        let t2 = tables[2].as_ref().unwrap();
        for (u, w) in t2.narrowest().into_iter().enumerate() {
            assert_eq!(w, (0..heads).map(|h| t2.width(h, u * 4)).min(), "unit {u}");
        }
    }
}

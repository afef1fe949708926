//! `dilated_expr` patterns as the built-in dilated launches run them: compacted.
//!
//! A pattern whose branches are each a fixed segment `w` and dilation `r` with an offset
//! per head and segment `o(h, s)` (the reference's [`CompactBranch`], e.g. offsets
//! rotating per segment, `offset = "h + s"`), merged by their softmax denominators, runs
//! one compact launch per branch ([`crate::GpuPattern::DilatedExpr`]). Inside one
//! segment a branch is a built-in branch with the fixed offset `o(h, s)`, and everything
//! a compact launch does (gather the kept rows of a segment into a dense block, TMA boxes
//! `r` rows apart, whole-tile skipping) is per segment; only where the offset comes from
//! changes: the kernels read it from a table, `OffsetRule::Table`, instead of computing
//! it from the head. So a branch costs its share, `n w / r^2` per head, as a built-in
//! branch does, where a mask table over the same pattern visits every tile of a segment
//! (`n w`).
//!
//! The tables are `i32`, `offsets[h * segments + s]` for the pattern's heads, one per
//! branch, in the call's `block_mask` buffer (the same slot a mask table uses), each
//! starting at a multiple of 8 bytes. A nested union's later branches run as pieces cut by
//! one hole per row ([`crate::union_pieces`]); each one's hole table (`i32` widths) follows
//! its offset table, from the next multiple of 8 bytes. A pattern with no compact form (a
//! segment per head, a dilation per segment, an extra branch mask, a union of branches that
//! do not nest) runs through mask tables instead ([`crate::GpuPattern::dilated_expr`]
//! chooses). A mask
//! expression that is literally one LongNet branch (`ExprPattern::as_dilated`) runs as
//! that branch too ([`compact_branches`]).
//!
//! The head-group combine of the PyTorch ports (`docs/semantics.md` section 7.6) needs no
//! table: each branch is a built-in launch over its group's heads alone
//! (`Params::head_first`, `head_count`). Its compact form here gives the heads of other
//! groups the offset `w`, past every kept residue, i.e. no rows (the kernels' `row_of`
//! would find every such row past its segment's end), so that the form is right for
//! every pattern.

use crate::error::{CudaError, Result};
use crate::spec::GpuPattern;
use crate::union_pieces::{self, HoleTable};
use ringdil_reference::pattern::expr::CompactBranch;
use ringdil_reference::pattern::{Combine, Dilated};

/// Every branch of `pattern` as a segment, a dilation and an offset per (global) head and
/// segment, for `heads` pattern heads over `seq_len` positions: a built-in dilated
/// pattern's (a branch's offset is the same in every segment; under the head-group
/// combine a head outside the branch's group is absent: module docs), a compact
/// `dilated_expr` pattern's, or the one branch a mask expression literally is. None for
/// the other patterns and a `dilated_expr` pattern without a compact form.
pub fn compact_branches(pattern: &GpuPattern, heads: usize, seq_len: usize) -> Option<Vec<CompactBranch>> {
    match pattern {
        GpuPattern::Dilated(d) => Some(builtin_branches(d, heads, seq_len)),
        GpuPattern::DilatedExpr(e) => e.compact_branches(heads, seq_len),
        GpuPattern::Expr(e) => e.as_dilated()?.compact_branches(heads, seq_len),
        _ => None,
    }
}

fn builtin_branches(d: &Dilated, heads: usize, seq_len: usize) -> Vec<CompactBranch> {
    d.branches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            // A head the branch does not serve gets the offset `w` (the segment as the
            // launch clamps it to the sequence): module docs.
            let absent = b.segment.min(seq_len.max(1));
            let segments = seq_len.div_ceil(b.segment);
            let served = |h: usize| d.combine == Combine::SoftmaxDenominator || d.head_group(h, heads) == i;
            let offset = |h: usize| if served(h) { d.offset(b, h, heads) } else { absent };
            let offsets = (0..heads).flat_map(|h| std::iter::repeat_n(offset(h), segments)).collect();
            CompactBranch { segment: b.segment, dilation: b.dilation, segments, offsets }
        })
        .collect()
}

/// A `dilated_expr` pattern without a compact form asked to run as compact launches.
pub(crate) const NOT_COMPACT: CudaError = CudaError::Unsupported {
    what: "a dilated_expr pattern without a compact form as compact launches (it runs through mask tables)",
};

/// Every table branch's compact form for one shape and its offset table in the call's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetTables {
    pub branches: Vec<CompactBranch>,
    /// Where branch `i`'s table starts in `bytes`.
    pub starts: Vec<usize>,
    /// A nested union's later branch: its hole table and where it starts, in bytes after
    /// the branch's offset table's start (`Params::hole_table`); None otherwise.
    pub holes: Vec<Option<(usize, HoleTable)>>,
    pub bytes: Vec<u8>,
}

/// The offset tables of the branches `pattern` runs as compact launches reading them
/// (`OffsetRule::Table`) for `heads` pattern heads over `seq_len` positions: a
/// `dilated_expr` pattern's and the branch a mask expression literally is. None for the
/// patterns that run otherwise (built-in branches compute their offsets from the head;
/// other masks are not compact). Errors: a `dilated_expr` pattern with no
/// compact form (the caller should have used mask tables), or tables past 2 GiB
/// (`TooLarge`, naming them).
pub fn offset_tables(pattern: &GpuPattern, heads: usize, seq_len: usize) -> Result<Option<OffsetTables>> {
    let branches = match pattern {
        GpuPattern::Expr(e) if e.as_dilated().is_none() => return Ok(None),
        GpuPattern::DilatedExpr(_) | GpuPattern::Expr(_) => {
            compact_branches(pattern, heads, seq_len).ok_or(NOT_COMPACT)?
        }
        _ => return Ok(None),
    };
    let nested = matches!(pattern, GpuPattern::DilatedExpr(e) if e.is_nested_union());
    let tables = if nested { union_pieces::hole_tables(&branches, seq_len) } else { vec![None; branches.len()] };
    let (mut starts, mut holes, mut bytes) = (Vec::with_capacity(branches.len()), Vec::new(), Vec::new());
    for (b, table) in branches.iter().zip(tables) {
        starts.push(bytes.len());
        bytes.extend(b.offsets.iter().flat_map(|&o| (o as i32).to_le_bytes()));
        bytes.resize(bytes.len().next_multiple_of(8), 0);
        holes.push(table.map(|t| {
            let at = bytes.len() - starts[starts.len() - 1];
            bytes.extend(t.widths.iter().flat_map(|&w| (w as i32).to_le_bytes()));
            bytes.resize(bytes.len().next_multiple_of(8), 0);
            (at, t)
        }));
    }
    if bytes.len() > i32::MAX as usize {
        return Err(CudaError::TooLarge {
            what: "dilated offset tables (bytes)",
            value: bytes.len(),
            max: i32::MAX as usize,
        });
    }
    Ok(Some(OffsetTables { branches, starts, holes, bytes }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};

    #[test]
    fn tables_hold_each_offset_as_an_i32_at_8_byte_starts() {
        let c = Constants::new();
        let branches = vec![
            ExprBranch::new("4", "2", "h + s", None, &c).unwrap(),
            ExprBranch::new("8", "4", "3 * h - s", None, &c).unwrap(),
        ];
        let p = ExprDilated { branches, combine: ExprCombine::SoftmaxDenominator };
        let (heads, n) = (3, 10);
        let t = offset_tables(&GpuPattern::DilatedExpr(p), heads, n).unwrap().unwrap();
        // Branch 0: 3 segments per head, 9 ints (36 bytes) padded to 40; branch 1: 2 per head.
        assert_eq!(t.starts, vec![0, 40]);
        assert_eq!(t.bytes.len(), 40 + 24);
        let int = |at: usize| i32::from_le_bytes(t.bytes[at..at + 4].try_into().unwrap());
        for h in 0..heads {
            for s in 0..3 {
                assert_eq!(int(4 * (h * 3 + s)), ((h + s) % 2) as i32, "branch 0, head {h}, segment {s}");
            }
            for s in 0..2 {
                assert_eq!(int(40 + 4 * (h * 2 + s)), (3 * h as i64 - s as i64).rem_euclid(4) as i32);
            }
        }
        let masked = ExprDilated {
            branches: vec![ExprBranch::new("4", "2", "0", Some("k <= q"), &c).unwrap()],
            combine: ExprCombine::SoftmaxDenominator,
        };
        assert!(matches!(offset_tables(&GpuPattern::DilatedExpr(masked), 2, 8), Err(CudaError::Unsupported { .. })));
    }
}

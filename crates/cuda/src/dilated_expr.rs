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
//! starting at a multiple of 8 bytes. A pattern with no compact form (a segment per head,
//! a dilation per segment, an extra branch mask, a union of several branches) runs
//! through mask tables instead ([`crate::GpuPattern::dilated_expr`] chooses). A mask
//! expression that is literally one LongNet branch (`ExprPattern::as_dilated`) runs as
//! that branch too ([`compact_form`]).

use crate::error::{CudaError, Result};
use crate::spec::GpuPattern;
use ringdil_reference::pattern::expr::{CompactBranch, ExprDilated};
use std::borrow::Cow;

/// The branches `pattern` runs as compact launches with offset tables: a compact
/// `dilated_expr` pattern's, or the one branch a mask expression literally is.
pub fn compact_form(pattern: &GpuPattern) -> Option<Cow<'_, ExprDilated>> {
    match pattern {
        GpuPattern::DilatedExpr(e) => Some(Cow::Borrowed(e)),
        GpuPattern::Expr(e) => e.as_dilated().map(Cow::Owned),
        _ => None,
    }
}

/// Every branch's compact form for one shape and its offset table in the call's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetTables {
    pub branches: Vec<CompactBranch>,
    /// Where branch `i`'s table starts in `bytes`.
    pub starts: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// The offset tables of `pattern` for `heads` pattern heads over `seq_len` positions.
/// Errors: a pattern with no compact form (the caller should have used mask tables), or
/// an offset table past 2 GiB (`TooLarge`, naming it).
pub fn offset_tables(pattern: &ExprDilated, heads: usize, seq_len: usize) -> Result<OffsetTables> {
    let branches = pattern.compact_branches(heads, seq_len).ok_or(CudaError::Unsupported {
        what: "a dilated_expr pattern without a compact form as compact launches (it runs through mask tables)",
    })?;
    let (mut starts, mut bytes) = (Vec::with_capacity(branches.len()), Vec::new());
    for b in &branches {
        starts.push(bytes.len());
        bytes.extend(b.offsets.iter().flat_map(|&o| (o as i32).to_le_bytes()));
        bytes.resize(bytes.len().next_multiple_of(8), 0);
    }
    if bytes.len() > i32::MAX as usize {
        return Err(CudaError::TooLarge {
            what: "dilated_expr offset tables (bytes)",
            value: bytes.len(),
            max: i32::MAX as usize,
        });
    }
    Ok(OffsetTables { branches, starts, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine};

    #[test]
    fn tables_hold_each_offset_as_an_i32_at_8_byte_starts() {
        let c = Constants::new();
        let branches = vec![
            ExprBranch::new("4", "2", "h + s", None, &c).unwrap(),
            ExprBranch::new("8", "4", "3 * h - s", None, &c).unwrap(),
        ];
        let p = ExprDilated { branches, combine: ExprCombine::SoftmaxDenominator };
        let (heads, n) = (3, 10);
        let t = offset_tables(&p, heads, n).unwrap();
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
        assert!(matches!(offset_tables(&masked, 2, 8), Err(CudaError::Unsupported { .. })));
    }
}

//! The work-balanced contiguous split for packed documents on the GPU ring
//! (`docs/semantics.md` 16.3; the reference's [`causal_work`] and
//! [`balanced_boundaries`]).
//!
//! Under a causal mask the ring's step time is set by its busiest rank. Zigzag balances
//! one long sequence, whose work grows linearly with the position (query `i` sees `i + 1`
//! keys); packed documents restart the count at every document (`i - s + 1` keys in the
//! document `[s, e)`), so with many short documents zigzag's equal token counts are far
//! from equal work, and its two pieces per rank double the launches of every step. The
//! balanced split cuts the per-position work `w_i` (summed over the batch rows, since a
//! rank holds the same positions of every row) into `P` contiguous runs: with
//! `W = sum_i w_i` and `w_max = max_i w_i`, boundary `r` is the first position whose
//! prefix reaches `r W / P`, so every rank's causal work lies in
//! `(W / P - w_max, W / P + w_max]`. Contiguous ranks also keep the documents whole
//! except the (at most `P - 1`) documents cut by a boundary: only those cross ranks, and
//! of them only their own rows travel ([`super::DistPlan::kept_rows`]).

use super::error::DistResult;
use ringdil_reference::Documents;
use ringdil_reference::ring::{Layout, balanced_boundaries, causal_work};

/// `Layout::Boundaries` of the work-balanced split of `batch` rows of `seq_len` tokens
/// packed with `documents` over `ranks` ranks (module docs). Errors: documents invalid
/// for `batch` rows of `seq_len` tokens, or `ranks` 0 (the reference's errors, naming the
/// value).
pub fn balanced_layout(documents: &Documents, batch: usize, seq_len: usize, ranks: usize) -> DistResult<Layout> {
    documents.validate(batch, seq_len)?;
    if ranks == 0 {
        return Err(ringdil_reference::Error::ZeroRanks.into());
    }
    Ok(Layout::Boundaries(balanced_boundaries(&causal_work(documents, batch, seq_len), ranks)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One document per row is a plain causal sequence: the cuts split the triangle's
    /// area (`n sqrt(r / P)`); documents of equal length split evenly at their
    /// boundaries; bad input is the reference's typed error.
    #[test]
    fn the_split_balances_causal_work_and_names_bad_input() {
        let b = |l: Layout| match l {
            Layout::Boundaries(b) => b,
            other => panic!("{other:?}"),
        };
        assert_eq!(b(balanced_layout(&Documents::whole(2, 400), 2, 400, 2).unwrap()), vec![0, 283, 400]);
        let four = Documents::per_row(vec![vec![0, 100, 200, 300, 400]]);
        assert_eq!(b(balanced_layout(&four, 1, 400, 4).unwrap()), vec![0, 100, 200, 300, 400]);
        let e = balanced_layout(&four, 2, 400, 4).unwrap_err().to_string();
        assert!(e.contains('1') && e.contains('2'), "{e}");
        assert!(balanced_layout(&four, 1, 400, 0).is_err());
    }
}

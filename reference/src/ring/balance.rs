//! Work-balanced contiguous splits for packed sequences.
//!
//! Under a causal mask a token's work is its number of keys: in a packed row, position `i`
//! of document `[s, e)` has `i - s + 1`. Zigzag balances one long sequence, whose work
//! grows linearly with the position; packed documents restart the count at every
//! document, so equal token counts are not equal work. [`causal_work`] gives the work of
//! every position summed over the batch rows (a ring splits positions, the same for every
//! row), and [`balanced_boundaries`] cuts it into `P` contiguous runs of nearly equal
//! work: with `W` the total and `w_max` the largest single position's work, boundary `r`
//! is the first position whose prefix sum reaches `r W / P`, so rank `r` gets
//!
//! ```text
//!   W / P - w_max  <  work(r)  <=  W / P + w_max,
//! ```
//!
//! one contiguous piece per rank (one GPU launch per piece pair). Use the result as
//! `Layout::Boundaries`; every schedule is exact on any boundaries.

use crate::documents::Documents;

/// Causal keys of every position, summed over the `batch` rows: position `i` of a
/// document starting at `s` sees `i - s + 1` keys of its document.
pub fn causal_work(documents: &Documents, batch: usize, seq_len: usize) -> Vec<u64> {
    let mut work = vec![0u64; seq_len];
    for b in 0..batch {
        for (i, w) in work.iter_mut().enumerate() {
            *w += (i - documents.document(b, i, seq_len).start + 1) as u64;
        }
    }
    work
}

/// `ranks + 1` boundaries `0 = b_0 <= ... <= b_P = work.len()` cutting `work` into
/// contiguous runs of nearly equal sums (module docs): `b_r` is the first position `i`
/// with `P * sum(work[..i]) >= r * W`.
pub fn balanced_boundaries(work: &[u64], ranks: usize) -> Vec<usize> {
    let ranks = ranks.max(1) as u128;
    let total: u128 = work.iter().map(|&w| w as u128).sum();
    let mut boundaries = vec![0];
    let (mut prefix, mut i) = (0u128, 0usize);
    for r in 1..ranks {
        while i < work.len() && prefix * ranks < r * total {
            prefix += work[i] as u128;
            i += 1;
        }
        boundaries.push(i);
    }
    boundaries.push(work.len());
    boundaries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// Long-tailed document lengths (Pareto-like: many short, a few long), cut to `n`.
    fn long_tailed(n: usize, rng: &mut SplitMix64) -> Vec<usize> {
        let mut b = vec![0];
        while *b.last().unwrap() < n {
            let len = (4.0 / (1.0 - rng.uniform()).powf(1.0 / 1.2)) as usize;
            b.push((b.last().unwrap() + len.max(1)).min(n));
        }
        b
    }

    #[test]
    fn every_rank_gets_its_share_within_one_position() {
        let mut rng = SplitMix64::new(11);
        for case in 0..200 {
            let (n, batch, ranks) = (rng.range(1, 3000), rng.range(1, 3), rng.range(1, 9));
            let docs = Documents::per_row((0..batch).map(|_| long_tailed(n, &mut rng)).collect());
            docs.validate(batch, n).unwrap();
            let work = causal_work(&docs, batch, n);
            // The work transcribed from the rule: position i of row b's document [s, e).
            for (i, &w) in work.iter().enumerate() {
                let want: u64 = (0..batch).map(|b| (i - docs.document(b, i, n).start + 1) as u64).sum();
                assert_eq!(w, want);
            }
            let b = balanced_boundaries(&work, ranks);
            assert_eq!((b.len(), b[0], b[ranks]), (ranks + 1, 0, n), "case {case}");
            assert!(b.windows(2).all(|w| w[0] <= w[1]), "case {case}: {b:?}");
            let total: u64 = work.iter().sum();
            let w_max = *work.iter().max().unwrap() as f64;
            let share = total as f64 / ranks as f64;
            for r in 0..ranks {
                let got: u64 = work[b[r]..b[r + 1]].iter().sum();
                assert!(
                    (got as f64) <= share + w_max && (got as f64) > share - w_max - 1e-9,
                    "case {case} rank {r}: work {got}, share {share}, w_max {w_max}, {b:?}"
                );
            }
        }
    }

    /// One document per row is a plain causal sequence: the split puts the cuts where the
    /// triangle's area is split evenly (`n sqrt(r / P)`), not at `n r / P`.
    #[test]
    fn one_long_document_is_cut_at_equal_triangle_areas() {
        let n = 10_000;
        let b = balanced_boundaries(&causal_work(&Documents::whole(1, n), 1, n), 4);
        for (r, &cut) in b.iter().enumerate().take(4).skip(1) {
            let want = n as f64 * (r as f64 / 4.0).sqrt();
            assert!((cut as f64 - want).abs() <= 2.0, "cut {r}: {cut} vs {want}");
        }
    }
}

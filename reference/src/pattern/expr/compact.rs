//! Expression branches in the form of LongNet's built-in branches: a fixed segment `w`
//! and dilation `r` with an offset per head *and segment*, `o(h, s)`.
//!
//! A branch whose `segment` does not read `h`, whose `dilation` reads neither `h` nor `s`,
//! and which has no extra `mask` keeps, for query `q` of head `h` in segment
//! `s = floor(q / w)`, the positions `s w + o(h, s) + t r` below `min(s w + w, n)`
//! (module `dilated`). Inside one segment that is the built-in branch with the fixed
//! offset `o(h, s)`, so the GPU runs it as the built-ins run: compacted (the kept rows of
//! each segment gathered into a dense block, `n w / r^2` work per head instead of the
//! `n w` of a mask evaluated over every tile of a segment), reading `o(h, s)` from a
//! table. The test is on the expressions' text, so it holds for every shape; the table
//! is made per head count and length.
//!
//! Several branches run as partials merged by their softmax denominators. Under the union
//! combine that merge would count a key kept by two branches twice, except where the
//! branches are *nested*: for every earlier branch `j < i`, `w_j | w_i`, `r_j | r_i` and
//! `r_j | w_j` (LongNet's doubling, with any offset rule). Then the union is a disjoint
//! union of compact pieces, branch `i`'s keys less one interval per query
//! (`docs/semantics.md` section 14, `tests/union_nested.rs`), which merge exactly. The
//! test reads the geometry's values, so it asks for segments and dilations that are the
//! same for every shape (no `n`, no `H`).

use super::ast::Var;
use super::dilated::{ExprBranch, ExprCombine, ExprDilated};
use super::eval::mod_floor;

/// A branch as fixed `(segment, dilation)` and an offset per head and segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactBranch {
    pub segment: usize,
    pub dilation: usize,
    /// Segments per head, `ceil(n / segment)`.
    pub segments: usize,
    /// `offsets[h * segments + s]`: the kept residue of head `h` in segment `s`, in `0..dilation`.
    pub offsets: Vec<usize>,
}

impl CompactBranch {
    /// The offset of head `head` in segment `segment_index`.
    pub fn offset(&self, head: usize, segment_index: usize) -> usize {
        self.offsets[head * self.segments + segment_index]
    }
}

impl ExprBranch {
    /// Is the branch a fixed `(w, r)` with an offset per head and segment, for every
    /// shape? (Module docs.)
    pub fn is_compact(&self) -> bool {
        self.mask.is_none()
            && !self.segment.reads(Var::Head)
            && !self.dilation.reads(Var::Head)
            && !self.dilation.reads(Var::SegmentIndex)
    }

    /// The compact form for `heads` heads over `seq_len` positions, if
    /// [`Self::is_compact`]. Needs a pattern that validated for this shape (`w >= 1`,
    /// `1 <= r <= w`).
    pub fn compact(&self, heads: usize, seq_len: usize) -> Option<CompactBranch> {
        if !self.is_compact() {
            return None;
        }
        let (mut env, w) = self.head_env(0, heads, seq_len);
        env.set(Var::SegmentIndex, 0);
        let r = self.dilation.eval(&env);
        env = env.with(Var::Dilation, r);
        let (segment, dilation) = (w as usize, r as usize);
        let segments = seq_len.div_ceil(segment);
        let mut offsets = Vec::with_capacity(heads * segments);
        for h in 0..heads {
            env.set(Var::Head, h);
            for s in 0..segments {
                env.set(Var::SegmentIndex, s);
                offsets.push(mod_floor(self.offset.eval(&env), r) as usize);
            }
        }
        Some(CompactBranch { segment, dilation, segments, offsets })
    }
}

impl ExprDilated {
    /// Can the GPU run this pattern as compact branches merged by their softmax
    /// denominators? Every branch compact, and branches that merge as partials: the
    /// softmax-denominator combine, one branch, or a nested union (its branches then run
    /// as disjoint pieces: [`Self::is_nested_union`]). Any other union of several counts a
    /// key kept by two branches once, which a merge of partials cannot.
    pub fn is_compact(&self) -> bool {
        (self.combine == ExprCombine::SoftmaxDenominator || self.branches.len() == 1 || self.is_nested_union())
            && self.branches.iter().all(ExprBranch::is_compact)
    }

    /// Is this a union of several compact branches whose segments and dilations are the
    /// same for every shape and nest (module docs): `w_j | w_i`, `r_j | r_i` and `r_j | w_j`
    /// for every `j < i`? Then branch `i`'s piece is its keys less, for query `q`, `q`'s
    /// segment in the last earlier branch whose lattice holds `q` ([`CompactBranch`] and
    /// `ringdil-cuda`'s hole tables).
    pub fn is_nested_union(&self) -> bool {
        if self.combine != ExprCombine::Union || self.branches.len() < 2 {
            return false;
        }
        let shape_free = |b: &ExprBranch| {
            b.is_compact() && [Var::SeqLen, Var::Heads].iter().all(|&v| !b.segment.reads(v) && !b.dilation.reads(v))
        };
        if !self.branches.iter().all(shape_free) {
            return false;
        }
        // Constant: any shape gives the values (validation rejects w < 1, r < 1, r > w).
        let geometry: Vec<(i64, i64)> = self
            .branches
            .iter()
            .map(|b| {
                let (env, w) = b.head_env(0, 1, 1);
                (w, b.dilation.eval(&env))
            })
            .collect();
        geometry.iter().all(|&(w, r)| w >= 1 && r >= 1)
            && geometry.iter().enumerate().all(|(i, &(wi, ri))| {
                geometry[..i].iter().all(|&(wj, rj)| wi % wj == 0 && ri % rj == 0 && wj % rj == 0)
            })
    }

    /// The branches' compact forms for this shape, if [`Self::is_compact`].
    pub fn compact_branches(&self, heads: usize, seq_len: usize) -> Option<Vec<CompactBranch>> {
        if !self.is_compact() {
            return None;
        }
        self.branches.iter().map(|b| b.compact(heads, seq_len)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::scope::Constants;
    use super::*;
    use crate::pattern::Pattern;

    fn branch(segment: &str, dilation: &str, offset: &str, mask: Option<&str>) -> ExprBranch {
        ExprBranch::new(segment, dilation, offset, mask, &Constants::new()).unwrap()
    }

    /// Keys of (head, query) from the compact form, by the rule of the module docs.
    fn compact_keys(c: &CompactBranch, head: usize, q: usize, n: usize) -> Vec<usize> {
        let (w, r) = (c.segment, c.dilation);
        let s = q / w;
        let o = c.offset(head, s);
        if (q - s * w) % r != o {
            return Vec::new();
        }
        (s * w + o..(s * w + w).min(n)).step_by(r).collect()
    }

    fn pattern_keys(p: &ExprDilated, head: usize, heads: usize, q: usize, n: usize) -> Vec<usize> {
        let mut runs = Vec::new();
        p.key_runs(q, head, heads, n, &mut runs);
        let mut keys: Vec<usize> = runs.iter().flat_map(|run| run.iter()).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn compact_forms_keep_the_branch_keys() {
        let cases = [
            ("16", "4", "h + s"),
            ("2 * H + 3", "3", "h * 7 - s * s"),
            ("n / 3 + 1", "max(1, min(5, n / 20))", "-h - 2 * s + w % 5"),
            ("12", "12", "(h / 2 + s) * r + 1"),
            ("64", "1", "s"),
            ("40", "w / 8", "if s % 2 == 0 then h else h + 1"),
        ];
        for (segment, dilation, offset) in cases {
            let b = branch(segment, dilation, offset, None);
            assert!(b.is_compact(), "{segment} {dilation} {offset}");
            let p = ExprDilated { branches: vec![b.clone()], combine: ExprCombine::SoftmaxDenominator };
            for (heads, n) in [(1, 1), (3, 37), (4, 100), (5, 131)] {
                if p.validate(heads, n).is_err() {
                    continue;
                }
                let c = b.compact(heads, n).unwrap();
                assert_eq!(c.offsets.len(), heads * n.div_ceil(c.segment));
                assert!(c.offsets.iter().all(|&o| o < c.dilation));
                for h in 0..heads {
                    for q in 0..n {
                        assert_eq!(
                            compact_keys(&c, h, q, n),
                            pattern_keys(&p, h, heads, q, n),
                            "{segment} {dilation} {offset}: head {h} of {heads}, query {q} of {n}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn what_is_not_compact() {
        assert!(!branch("8 + h", "2", "0", None).is_compact(), "segment per head");
        assert!(!branch("8", "1 + h % 2", "0", None).is_compact(), "dilation per head");
        assert!(!branch("8", "1 + s % 2", "0", None).is_compact(), "dilation per segment");
        assert!(!branch("8", "2", "0", Some("k <= q")).is_compact(), "extra mask");
        assert!(branch("8 + n / H", "w / 4", "h * s", None).is_compact());
        let (a, b) = (branch("8", "2", "h", None), branch("16", "4", "s", None));
        let union =
            ExprDilated { branches: vec![a.clone(), branch("12", "3", "s", None)], combine: ExprCombine::Union };
        assert!(!union.is_compact() && union.compact_branches(2, 36).is_none(), "a union of branches that do not nest");
        let nested = ExprDilated { branches: vec![a.clone(), b.clone()], combine: ExprCombine::Union };
        assert!(nested.is_nested_union() && nested.is_compact(), "(8, 2) then (16, 4) nest");
        for (w, r, why) in [("20", "4", "w_j does not divide w_i"), ("16", "3", "r_j does not divide r_i")] {
            let other = ExprDilated { branches: vec![a.clone(), branch(w, r, "0", None)], ..nested.clone() };
            assert!(!other.is_nested_union(), "{why}");
        }
        let odd =
            ExprDilated { branches: vec![branch("6", "4", "0", None), branch("12", "4", "0", None)], ..nested.clone() };
        assert!(!odd.is_nested_union(), "r_j does not divide w_j");
        let by_length = ExprDilated { branches: vec![a.clone(), branch("n", "4", "0", None)], ..nested.clone() };
        assert!(!by_length.is_nested_union(), "a segment of the length nests for some shapes only");
        let one = ExprDilated { branches: vec![a.clone()], combine: ExprCombine::Union };
        assert!(one.is_compact());
        let softmax = ExprDilated { branches: vec![a, b], combine: ExprCombine::SoftmaxDenominator };
        let forms = softmax.compact_branches(2, 32).unwrap();
        assert_eq!((forms[1].segment, forms[1].dilation, forms[1].segments), (16, 4, 2));
        assert_eq!(forms[1].offsets, vec![0, 1, 0, 1]);
    }
}

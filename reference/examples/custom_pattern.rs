//! A pattern written outside ringdil: Sparse Transformer's strided pattern, checked
//! against an explicit mask and used like any built-in pattern.
//!
//! ```sh
//! cargo run --release -p ringdil-reference --example custom_pattern
//! ```
//!
//! `docs/guide/adding-a-pattern.md` walks through it.

use ringdil_reference::compare::rel_err;
use ringdil_reference::pattern::{Explicit, key_counts};
use ringdil_reference::random::normal_tensor;
use ringdil_reference::{Error, KeyRun, Pattern, Result, Spec, attention};

/// Query `i` sees the `stride` most recent keys (itself included) and every
/// `stride`-th key before them: keys `j <= i` with `i - j < stride` or
/// `(i - j) mod stride == 0` (Child et al. 2019, "strided").
#[derive(Debug, Clone, Copy)]
struct Strided {
    stride: usize,
}

impl Pattern for Strided {
    fn validate(&self, _heads: usize, _seq_len: usize) -> Result<()> {
        if self.stride == 0 {
            return Err(Error::ZeroParameter { pattern: "strided", parameter: "stride" });
        }
        Ok(())
    }

    fn key_runs(&self, query: usize, _head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let band = query.saturating_sub(self.stride - 1);
        out.push(KeyRun::range(band, (query + 1).min(seq_len)));
        // The strided keys below the band. They must not overlap the band: a key in two
        // runs would count twice in the softmax (multiplicity 2).
        let first = query % self.stride;
        if first < band {
            out.push(KeyRun { start: first, end: band, step: self.stride });
        }
    }
}

fn main() -> Result<()> {
    let (n, heads, stride) = (50, 2, 7);
    let pattern = Strided { stride };
    // 1. The rule, written independently as a mask, gives the same key sets...
    let mask = Explicit::from_fn(heads, n, |_, i, j| u32::from(j <= i && ((i - j) < stride || (i - j) % stride == 0)));
    for i in 0..n {
        assert_eq!(key_counts(&pattern, i, 0, heads, n), key_counts(&mask, i, 0, heads, n), "query {i}");
    }
    // 2. ...and the same attention, through the blocked engine.
    let shape = [1, n, heads, 16];
    let (q, k, v) = (normal_tensor(shape, 1), normal_tensor(shape, 2), normal_tensor(shape, 3));
    let mine = attention(q.view(), k.view(), v.view(), &Spec::new(pattern))?;
    let reference = attention(q.view(), k.view(), v.view(), &Spec::new(mask))?;
    let err = rel_err(&mine.out, &reference.out);
    assert!(err < 1e-12, "relative error {err}");
    println!("strided({stride}) on {n} tokens: equal to its explicit mask (relative error {err:.1e})");
    Ok(())
}

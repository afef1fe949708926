//! Packed documents (issue 22, item 2): arbitrary boundary lists and batch / sequence
//! sizes through `Documents` validation (never a panic; accepted exactly when an
//! independent check says the lists are valid, and accepted lists satisfy the
//! invariants), and the document / rank piece arithmetic: for an accepted case and a
//! chunk plan, every (query, key) pair that the documented rule allows is computed
//! exactly once by the pattern ring's forward and backward computes, and the pattern
//! ring ships (and computes over) no key that no query of the receiving rank needs.
//! The rule is transcribed here from the pattern's own counts on document-relative
//! positions; nothing of `Spec::key_runs` or `Needs` is reused.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ringdil_fuzz::{LayoutInput, PatternInput};
use ringdil_reference::pattern::key_counts;
use ringdil_reference::ring::{ChunkPlan, Op, pattern_ring};
use ringdil_reference::Documents;

#[derive(Arbitrary, Debug)]
struct Input {
    n: u8,
    batch: u8,
    /// Per-row boundary bytes (kept as they are when `raw`, else repaired).
    lists: Vec<Vec<u8>>,
    flat: bool,
    raw: bool,
    ranks: u8,
    layout: LayoutInput,
    pattern: PatternInput,
    causal: bool,
    heads: u8,
    key_lengths: Option<Vec<u8>>,
}

/// A valid row list from cut bytes: 0, the cuts mod `n + 1` sorted, `n`.
fn repaired(cuts: &[u8], n: usize) -> Vec<usize> {
    let mut inner: Vec<usize> = cuts.iter().take(8).map(|&c| c as usize % (n + 1)).collect();
    inner.sort_unstable();
    let mut list = vec![0];
    list.extend(inner);
    list.push(n);
    list
}

fn list_ok(list: &[usize], end: usize) -> bool {
    list.first() == Some(&0) && list.last() == Some(&end) && list.windows(2).all(|w| w[0] <= w[1])
}

/// The document `[s, e)` of `i` in `list`, by a linear scan.
fn document(list: &[usize], i: usize) -> (usize, usize) {
    let k = (0..list.len() - 1).find(|&k| list[k] <= i && i < list[k + 1]).expect("a document holds every token");
    (list[k], list[k + 1])
}

fuzz_target!(|input: Input| {
    let (n, batch) = ((input.n % 33) as usize, (input.batch % 4) as usize);
    let rows: Vec<Vec<usize>> = if input.raw {
        input.lists.iter().take(5).map(|l| l.iter().map(|&c| c as usize).collect()).collect()
    } else {
        (0..batch).map(|b| repaired(input.lists.get(b).map_or(&[][..], |l| l.as_slice()), n)).collect()
    };
    // The flat form: each row's boundaries after its first, offset by the row start.
    let (documents, valid) = if input.flat {
        let mut all = vec![0];
        for (b, list) in rows.iter().enumerate() {
            all.extend(list.iter().skip(1).map(|&c| b * n + c));
        }
        if input.raw {
            all = input.lists.iter().flatten().take(40).map(|&c| c as usize).collect();
        }
        let valid = list_ok(&all, batch * n) && (1..batch).all(|b| all.contains(&(b * n)));
        (Documents::flat(all), valid)
    } else {
        let valid = rows.len() == batch && rows.iter().all(|l| list_ok(l, n));
        (Documents::per_row(rows), valid)
    };
    match documents.validate(batch, n) {
        Err(e) => {
            assert!(!valid, "valid documents {documents:?} rejected: {e}");
            assert!(!e.to_string().is_empty());
            return;
        }
        Ok(()) => assert!(valid, "invalid documents {documents:?} accepted for batch {batch}, n {n}"),
    }
    if n == 0 || batch == 0 {
        return;
    }
    // The accepted lists' invariants, and the lookup against a linear scan.
    let lists = documents.split(n);
    assert_eq!(lists.len(), batch);
    assert_eq!(documents.rows(n), batch);
    for (b, list) in lists.iter().enumerate() {
        assert!(list_ok(list, n), "row {b}: {list:?}");
        for i in 0..n {
            let (s, e) = document(list, i);
            assert_eq!(documents.document(b, i, n), s..e);
        }
    }
    // The ring: pairs of the rule, each computed exactly once, and nothing more.
    let heads = (input.heads % 3) as usize + 1;
    let ranks = (input.ranks % 5) as usize + 1;
    let Ok(plan) = ChunkPlan::new(n, ranks, &input.layout.valid(n, ranks)) else { return };
    let key_lengths: Option<Vec<usize>> =
        input.key_lengths.as_ref().map(|l| (0..batch).map(|b| l.get(b).map_or(n, |&x| x as usize % (n + 1))).collect());
    let mut spec = input.pattern.spec(input.causal, None).documents(documents);
    spec.key_lengths = key_lengths.clone();
    if spec.validate(batch, heads, n).is_err() {
        return; // an invalid pattern (checked for every document length by its own target)
    }
    let allowed = |b: usize, h: usize, i: usize, j: usize| {
        let (s, e) = document(&lists[b], i);
        s <= j
            && j < e
            && !(spec.causal && j > i)
            && key_lengths.as_ref().is_none_or(|l| j < l[b])
            && key_counts(&*spec.pattern, i - s, h, heads, e - s)[j - s] > 0
    };
    let mut want = vec![false; heads * n * n];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..n {
                for j in 0..n {
                    want[(h * n + i) * n + j] |= allowed(b, h, i, j);
                }
            }
        }
    }
    let schedule = pattern_ring(&plan, &spec, heads).expect("a valid spec has a pattern ring");
    for (phase, steps) in [("forward", &schedule.forward), ("backward", &schedule.backward)] {
        let mut count = vec![0u32; heads * n * n];
        for op in steps.iter().flat_map(|s| &s.ops) {
            let (Op::Attend { heads: hs, queries, keys, .. } | Op::AttendBackward { heads: hs, queries, keys, .. }) = op
            else {
                continue;
            };
            for h in hs.clone() {
                for &j in keys {
                    // Minimal: every key a compute gets is needed by one of its queries.
                    assert!(queries.iter().any(|&i| want[(h * n + i) * n + j]), "{phase}: key {j} of head {h} unneeded");
                    for &i in queries {
                        count[(h * n + i) * n + j] += 1;
                    }
                }
            }
        }
        for (x, (&w, &c)) in want.iter().zip(&count).enumerate() {
            let (h, i, j) = (x / (n * n), x / n % n, x % n);
            if w {
                assert_eq!(c, 1, "{phase}: allowed pair (query {i}, key {j}) of head {h} computed {c} times");
            }
        }
    }
});

//! LongNet dilation offsets and segment arithmetic: for every query and head, the key
//! runs of a valid dilated pattern are exactly the documented ones (segment
//! `[a, min(a + w, n))`, offset `o(h) < r`, query kept itself, keys `a + o(h) + t r`),
//! all in range; an invalid pattern is an error, never a panic.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ringdil_reference::Pattern;
use ringdil_reference::pattern::{Branch, Combine, Dilated, KeyRun, Offset};

#[derive(Arbitrary, Debug)]
struct Input {
    n: u16,
    heads: u8,
    branches: Vec<(u8, u8, u8, u8)>,
    head_groups: bool,
}

fuzz_target!(|input: Input| {
    let (n, heads) = ((input.n % 400) as usize, (input.heads % 9) as usize);
    let branches: Vec<Branch> = input
        .branches
        .iter()
        .take(5)
        .map(|&(w, r, kind, fixed)| Branch {
            segment: w as usize,
            dilation: (r % 12) as usize,
            offset: match kind % 3 {
                0 => Offset::HeadMod,
                1 => Offset::HeadBlock,
                _ => Offset::Fixed((fixed % 12) as usize),
            },
        })
        .collect();
    let combine = if input.head_groups { Combine::HeadGroups } else { Combine::SoftmaxDenominator };
    let pattern = Dilated { branches: branches.clone(), combine };
    let valid = !branches.is_empty()
        && branches.iter().all(|b| {
            b.segment > 0
                && b.dilation > 0
                && b.dilation <= b.segment
                && !matches!(b.offset, Offset::Fixed(o) if o >= b.dilation)
        })
        && (combine == Combine::SoftmaxDenominator || heads >= branches.len());
    match pattern.validate(heads, n) {
        Err(e) => {
            assert!(!valid, "valid pattern rejected: {e}");
            return;
        }
        Ok(()) => assert!(valid, "invalid pattern {pattern:?} accepted"),
    }
    // Head groups: contiguous, non-empty, sizes differing by at most one.
    if combine == Combine::HeadGroups {
        let groups: Vec<usize> = (0..heads).map(|h| pattern.head_group(h, heads)).collect();
        assert!(groups.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1));
        assert_eq!((groups[0], groups[heads - 1]), (0, branches.len() - 1));
    }
    let mut runs: Vec<KeyRun> = Vec::new();
    for q in 0..n {
        for h in 0..heads {
            runs.clear();
            pattern.key_runs(q, h, heads, n, &mut runs);
            let active: Vec<&Branch> = match combine {
                Combine::SoftmaxDenominator => branches.iter().collect(),
                Combine::HeadGroups => vec![&branches[pattern.head_group(h, heads)]],
            };
            let mut expected = Vec::new();
            for b in active {
                let (w, r) = (b.segment, b.dilation);
                let o = match b.offset {
                    Offset::HeadMod => h % r,
                    Offset::HeadBlock => h / heads.div_ceil(r),
                    Offset::Fixed(o) => o,
                };
                assert!(o < r, "offset {o} of head {h} not below dilation {r}");
                let a = q / w * w;
                if (q - a) % r == o {
                    expected.push(KeyRun { start: a + o, end: (a + w).min(n), step: r });
                }
            }
            assert_eq!(runs, expected, "query {q} head {h}");
            for run in &runs {
                assert!(run.iter().all(|k| k < n), "key out of range in {run:?}");
                assert!(run.iter().any(|k| k == q), "query {q} not kept in its own run {run:?}");
            }
        }
    }
});

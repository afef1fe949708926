//! Chunk boundaries and global-to-local maps: every layout either is rejected with an
//! error (exactly when an independent check says the input is invalid) or assigns every
//! token to exactly one (rank, local row), consistently in both directions, with the
//! layout's documented shape.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ringdil_fuzz::LayoutInput;
use ringdil_reference::ring::{ChunkPlan, Layout, even_boundaries};

#[derive(Arbitrary, Debug)]
struct Input {
    n: u8,
    ranks: u8,
    layout: LayoutInput,
    raw: bool,
}

fn boundaries_ok(b: &[usize], n: usize, ranks: usize) -> bool {
    b.len() == ranks + 1 && b[0] == 0 && b[ranks] == n && b.windows(2).all(|w| w[0] <= w[1])
}

fn is_permutation(order: &[usize], n: usize) -> bool {
    let mut sorted = order.to_vec();
    sorted.sort_unstable();
    sorted == (0..n).collect::<Vec<_>>()
}

fuzz_target!(|input: Input| {
    let (n, ranks) = (input.n as usize, (input.ranks % 10) as usize);
    let layout = if input.raw { input.layout.raw(n) } else { input.layout.valid(n, ranks) };
    let valid = ranks > 0
        && match &layout {
            Layout::Boundaries(b) => boundaries_ok(b, n, ranks),
            Layout::Permuted { order, boundaries } => {
                is_permutation(order, n) && boundaries.as_ref().is_none_or(|b| boundaries_ok(b, n, ranks))
            }
            _ => true,
        };
    let plan = match ChunkPlan::new(n, ranks, &layout) {
        Err(e) => {
            assert!(!valid, "valid layout {layout:?} rejected: {e}");
            assert!(!e.to_string().is_empty());
            return;
        }
        Ok(plan) => plan,
    };
    assert!(valid, "invalid layout {layout:?} accepted");
    assert_eq!(plan.ranks(), ranks);
    // Every token exactly once, and the global-to-local map is the inverse.
    let map = plan.token_map();
    let mut seen = vec![0u32; n];
    for r in 0..ranks {
        for (local, &t) in plan.tokens(r).iter().enumerate() {
            assert!(t < n);
            seen[t] += 1;
            assert_eq!((map.rank[t], map.local[t]), (r, local));
            assert_eq!(plan.tokens(map.rank[t])[map.local[t]], t);
        }
    }
    assert!(seen.iter().all(|&c| c == 1));
    let sizes: Vec<usize> = (0..ranks).map(|r| plan.tokens(r).len()).collect();
    assert_eq!(plan.max_tokens(), sizes.iter().copied().max().unwrap());
    match &layout {
        Layout::Contiguous => {
            assert_eq!(plan.order, (0..n).collect::<Vec<_>>());
            assert!(sizes.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
        }
        Layout::Striped => (0..n).for_each(|t| assert_eq!(map.rank[t], t % ranks)),
        Layout::Zigzag => {
            let c = even_boundaries(n, 2 * ranks);
            for r in 0..ranks {
                let j = 2 * ranks - 1 - r;
                let want: Vec<usize> = (c[r]..c[r + 1]).chain(c[j]..c[j + 1]).collect();
                assert_eq!(plan.tokens(r), want.as_slice());
            }
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 2);
        }
        Layout::Boundaries(b) => (0..ranks).for_each(|r| assert_eq!(plan.tokens(r), &plan.order[b[r]..b[r + 1]])),
        Layout::Permuted { order, .. } => assert_eq!(&plan.order, order),
    }
    let json = serde_json::to_string(&plan).unwrap();
    assert_eq!(serde_json::from_str::<ChunkPlan>(&json).unwrap(), plan);
});

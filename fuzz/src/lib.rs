//! Shared fuzz inputs: layouts and patterns built from arbitrary bytes.

use arbitrary::Arbitrary;
use ringdil_reference::pattern::{BlockSparse, Dense, Dilated, SlidingWindow};
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::Layout;
use ringdil_reference::{Pattern, Spec};
use std::sync::Arc;

/// A layout description; [`LayoutInput::raw`] keeps the bytes as they are (mostly
/// invalid boundaries and orders, to exercise the error paths), [`LayoutInput::valid`]
/// repairs them into a valid layout.
#[derive(Arbitrary, Debug, Clone)]
pub enum LayoutInput {
    Contiguous,
    Zigzag,
    Striped,
    Boundaries(Vec<u8>),
    Shuffled { seed: u64, cuts: Option<Vec<u8>> },
    Order { order: Vec<u8>, cuts: Option<Vec<u8>> },
}

/// A random permutation of `0..n` from `seed` (Fisher-Yates).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix64::new(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.range(0, i));
    }
    order
}

/// `ranks + 1` valid boundaries from arbitrary cut bytes.
pub fn valid_boundaries(cuts: &[u8], n: usize, ranks: usize) -> Vec<usize> {
    let mut inner: Vec<usize> =
        (0..ranks.saturating_sub(1)).map(|i| cuts.get(i).map_or(n, |&c| c as usize % (n + 1))).collect();
    inner.sort_unstable();
    let mut b = vec![0];
    b.extend(inner);
    b.push(n);
    b
}

impl LayoutInput {
    pub fn raw(&self, n: usize) -> Layout {
        let wide = |b: &[u8]| b.iter().map(|&x| x as usize).collect::<Vec<_>>();
        match self {
            LayoutInput::Contiguous => Layout::Contiguous,
            LayoutInput::Zigzag => Layout::Zigzag,
            LayoutInput::Striped => Layout::Striped,
            LayoutInput::Boundaries(b) => Layout::Boundaries(wide(b)),
            LayoutInput::Shuffled { seed, cuts } => {
                Layout::Permuted { order: permutation(n, *seed), boundaries: cuts.as_deref().map(wide) }
            }
            LayoutInput::Order { order, cuts } => {
                Layout::Permuted { order: wide(order), boundaries: cuts.as_deref().map(wide) }
            }
        }
    }

    pub fn valid(&self, n: usize, ranks: usize) -> Layout {
        match self {
            LayoutInput::Boundaries(b) => Layout::Boundaries(valid_boundaries(b, n, ranks)),
            LayoutInput::Shuffled { seed, cuts } => Layout::Permuted {
                order: permutation(n, *seed),
                boundaries: cuts.as_deref().map(|c| valid_boundaries(c, n, ranks)),
            },
            LayoutInput::Order { order, cuts } => Layout::Permuted {
                order: permutation(n, order.iter().fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(b as u64))),
                boundaries: cuts.as_deref().map(|c| valid_boundaries(c, n, ranks)),
            },
            other => other.raw(n),
        }
    }
}

/// A pattern from arbitrary parameters (possibly invalid: the targets check that
/// invalid ones are rejected with an error, never a panic).
#[derive(Arbitrary, Debug, Clone)]
pub enum PatternInput {
    Dense,
    Window(u8, u8),
    LongNet(Vec<(u8, u8)>),
    HeadGroups(Vec<(u8, u8)>),
    BlockSparse { block: u8, radius: Option<u8>, stride: Option<u8>, global: u8 },
}

impl PatternInput {
    pub fn pattern(&self) -> Arc<dyn Pattern> {
        let small =
            |b: &[(u8, u8)]| b.iter().take(4).map(|&(w, r)| ((w % 24) as usize, (r % 8) as usize)).collect::<Vec<_>>();
        match self {
            PatternInput::Dense => Arc::new(Dense),
            PatternInput::Window(l, r) => {
                Arc::new(SlidingWindow { left: (*l % 16) as usize, right: (*r % 16) as usize })
            }
            PatternInput::LongNet(b) => Arc::new(Dilated::longnet(&small(b))),
            PatternInput::HeadGroups(b) => Arc::new(Dilated::head_groups(&small(b))),
            PatternInput::BlockSparse { block, radius, stride, global } => Arc::new(BlockSparse {
                block: (*block % 8) as usize,
                local_radius: radius.map(|r| (r % 4) as usize),
                dilated_stride: stride.map(|s| (s % 4) as usize),
                global_tokens: (*global % 4) as usize,
                block_mask: None,
            }),
        }
    }

    pub fn spec(&self, causal: bool, key_length: Option<usize>) -> Spec {
        Spec { pattern: self.pattern(), causal, key_lengths: key_length.map(|l| vec![l]), scale: None, documents: None }
    }
}

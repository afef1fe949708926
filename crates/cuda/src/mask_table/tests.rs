//! The table against the patterns' own key sets, transcribed independently: every pair of
//! every head on lengths around the tile size, the tile classes, the sharing of equal
//! tiles, the plan's soundness and what is refused.

use super::*;
use crate::check::tables::{Strided, random_blocks, rotating_softmax, rotating_union};
use ringdil_reference::pattern::{Dilated, SlidingWindow, key_counts};
use ringdil_reference::random::SplitMix64;

fn patterns(heads: usize, n: usize) -> Vec<(&'static str, Arc<dyn Pattern>)> {
    vec![
        ("strided 7", Arc::new(Strided(7))),
        ("window 70 / 5", Arc::new(SlidingWindow { left: 70, right: 5 })),
        ("rotating offsets, union", rotating_union()),
        ("random blocks", random_blocks(heads, n, n as u64)),
    ]
}

#[test]
fn every_pair_of_every_head_is_the_patterns() {
    for n in [1, 63, 64, 65, 200, 257] {
        let heads = 3;
        for (name, p) in patterns(heads, n) {
            let t = MaskTable::build(p.as_ref(), heads, n).unwrap_or_else(|e| panic!("{name}, n = {n}: {e}"));
            assert_eq!(t.tiles, n.div_ceil(64));
            for h in 0..heads {
                for q in 0..n {
                    let counts = key_counts(p.as_ref(), q, h, heads, n);
                    for (k, &c) in counts.iter().enumerate() {
                        assert_eq!(t.allowed(h, q, k), c > 0, "{name}, n = {n}, head {h}, query {q}, key {k}");
                    }
                }
            }
            // Classes: 0 exactly when no valid pair is kept, 1 exactly when all are.
            for h in 0..heads {
                for qt in 0..t.tiles {
                    for kt in 0..t.tiles {
                        let pairs: Vec<bool> = (qt * 64..n.min(qt * 64 + 64))
                            .flat_map(|q| (kt * 64..n.min(kt * 64 + 64)).map(move |k| (q, k)))
                            .map(|(q, k)| key_counts(p.as_ref(), q, h, heads, n)[k] > 0)
                            .collect();
                        let entry = t.entries[(h * t.tiles + qt) * t.tiles + kt];
                        assert_eq!(entry == 0, pairs.iter().all(|&x| !x), "{name} n {n} h {h} tile ({qt}, {kt})");
                        assert_eq!(entry == 1, pairs.iter().all(|&x| x), "{name} n {n} h {h} tile ({qt}, {kt})");
                    }
                }
            }
        }
    }
}

#[test]
fn equal_partial_tiles_share_one_entry() {
    // A lattice repeats: head 0 of a single (64, 4) branch, offset 0, over 1024 positions
    // has 16 diagonal tiles, all the same partial mask.
    let p = Dilated::longnet(&[(64, 4)]);
    let t = MaskTable::build(&p, 1, 1024).unwrap();
    assert_eq!(t.entries.iter().filter(|&&e| e >= 2).count(), 16);
    assert_eq!(t.words.len(), 64, "one shared entry");
}

#[test]
fn plan_queries_are_sound() {
    // A pair the pattern keeps is never in a plan tile called empty.
    let (heads, n) = (2, 300);
    let mut rng = SplitMix64::new(5);
    for (name, p) in patterns(heads, n) {
        let t = MaskTable::build(p.as_ref(), heads, n).unwrap();
        for _ in 0..300 {
            let (a, b) = ((rng.next_u64() % n as u64) as usize, (rng.next_u64() % n as u64) as usize);
            let (c, d) = ((rng.next_u64() % n as u64) as usize, (rng.next_u64() % n as u64) as usize);
            let (q, k) = ((a.min(b), a.max(b)), (c.min(d), c.max(d)));
            let h0 = (rng.next_u64() % heads as u64) as usize;
            let kept = (h0..heads).any(|h| (q.0..=q.1).any(|i| (k.0..=k.1).any(|j| t.allowed(h, i, j))));
            if kept {
                assert!(t.may_attend(h0..heads, q, k), "{name}: heads {h0}.., q {q:?}, k {k:?}");
            }
        }
    }
}

#[test]
fn device_bytes_are_entries_padded_then_words() {
    let t = MaskTable::build(&Dilated::longnet(&[(64, 4)]), 1, 192).unwrap();
    let bytes = t.device_bytes();
    let entry_bytes = (t.entries.len() * 4).next_multiple_of(8);
    assert_eq!(bytes.len(), entry_bytes + t.words.len() * 8);
    for (i, e) in t.entries.iter().enumerate() {
        assert_eq!(i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()), *e);
    }
    for (i, w) in t.words.iter().enumerate() {
        let at = entry_bytes + 8 * i;
        assert_eq!(u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()), *w);
    }
}

#[test]
fn a_key_counted_twice_is_refused_naming_it() {
    // LongNet's (16, 1) and (32, 2) branches both keep key 0 for query 0 of head 0.
    let e = MaskTable::build(&Dilated::longnet(&[(16, 1), (32, 2)]), 2, 64).unwrap_err();
    assert!(matches!(e, CudaError::Multiplicity { query: 0, key: 0, head: 0 }), "{e:?}");
    assert!(e.to_string().starts_with("the pattern counts key 0 more than once for query 0 of head 0"));
}

#[test]
fn tables_are_kept_per_pattern_object() {
    let p = TablePattern::new(Arc::new(Strided(5)));
    let (a, b) = (table(&p, 0, 2, 100).unwrap(), table(&p, 0, 2, 100).unwrap());
    assert!(Arc::ptr_eq(&a, &b));
    let other = TablePattern::new(Arc::new(Strided(5)));
    assert!(!Arc::ptr_eq(&a, &table(&other, 0, 2, 100).unwrap()));
    assert_ne!(p, other);
    assert_eq!(p, p.clone());
    // Keyed by content: two objects of one pattern file share the table.
    let (a, b) = (rotating_union(), rotating_union());
    let (a, b) = (TablePattern::keyed(a, "rotating".into()), TablePattern::keyed(b, "rotating".into()));
    assert_eq!(a, b);
    assert!(Arc::ptr_eq(&table(&a, 0, 2, 96).unwrap(), &table(&b, 0, 2, 96).unwrap()));
}

/// A pattern whose branches overlap runs as parts: one launch per part, each with its own
/// table at an aligned offset of one buffer, and the parts' tables together keep every
/// pair as often as the pattern counts it.
#[test]
fn parts_are_launches_with_their_tables_side_by_side() {
    use crate::launch::{block_mask_bytes, launches};
    use crate::shape::{Chunk, Shape};
    use crate::spec::{GpuPattern, GpuSpec};
    let t = rotating_softmax();
    assert_eq!(t.parts.len(), 3);
    let (heads, n) = (3, 200);
    let shape = Shape::square(1, n, heads, 64);
    let spec = GpuSpec::new(GpuPattern::Table(t.clone()));
    let whole = Chunk::whole(&shape);
    let l = launches(&shape, &spec, &whole).unwrap();
    let tables = tables(&t, heads, n).unwrap();
    assert_eq!(l.len(), 3);
    let buffer = block_mask_bytes(&spec, &shape, &whole).unwrap().unwrap();
    let mut overlaps = 0;
    for (i, (launch, table)) in l.iter().zip(&tables).enumerate() {
        assert_eq!(launch.table_offset % TABLE_ALIGN, 0);
        assert_eq!(launch.params.bs_mask_blocks as usize, table.tiles);
        assert_eq!(&buffer[launch.table_offset..][..table.device_len()], table.device_bytes().as_slice(), "part {i}");
    }
    for h in 0..heads {
        for q in 0..n {
            let counts = key_counts(t.pattern.as_ref(), q, h, heads, n);
            for (k, &c) in counts.iter().enumerate() {
                assert_eq!(tables.iter().filter(|tb| tb.allowed(h, q, k)).count() as u32, c, "h {h} q {q} k {k}");
                overlaps += usize::from(c > 1);
            }
        }
    }
    assert!(overlaps > 0);
}

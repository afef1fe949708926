//! The mask table's word arithmetic (`ringdil_cuda::mask_table`): for any pattern given as
//! key runs (any start, end and step, shifted per query and head, clipped to the
//! sequence) over any length and head count, the table keeps exactly the pairs whose
//! count (`key_counts`, the reference's own reading of the runs) is 1; a pair counted
//! twice is refused, naming the first such (head, query, key) in that order; and a tile's
//! entry is 0 or 1 exactly when none or all of its valid pairs are kept.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ringdil_cuda::error::CudaError;
use ringdil_cuda::mask_table::{MaskTable, TABLE_TILE};
use ringdil_reference::pattern::{KeyRun, Pattern, key_counts};

#[derive(Arbitrary, Debug)]
struct Input {
    n: u16,
    heads: u8,
    runs: Vec<(u16, u16, u8)>,
    drift: u8,
}

/// The input's runs, moved by `drift * query + 7 * head` positions (mod n) per query.
#[derive(Debug)]
struct Runs {
    runs: Vec<(usize, usize, usize)>,
    drift: usize,
}

impl Pattern for Runs {
    fn validate(&self, _heads: usize, _seq_len: usize) -> ringdil_reference::Result<()> {
        Ok(())
    }
    fn key_runs(&self, query: usize, head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let shift = (self.drift * query + 7 * head) % seq_len;
        for &(a, len, step) in &self.runs {
            let start = (a + shift) % seq_len;
            out.push(KeyRun { start, end: (start + len).min(seq_len), step });
        }
    }
}

fuzz_target!(|input: Input| {
    let n = (input.n % 300) as usize + 1;
    let heads = (input.heads % 3) as usize + 1;
    let runs = input.runs.iter().take(6).map(|&(a, len, step)| (a as usize, (len % 200) as usize, (step % 9) as usize + 1));
    let pattern = Runs { runs: runs.collect(), drift: (input.drift % 5) as usize };
    let counts: Vec<Vec<Vec<u32>>> =
        (0..heads).map(|h| (0..n).map(|q| key_counts(&pattern, q, h, heads, n)).collect()).collect();
    let twice = (0..heads).flat_map(|h| (0..n).map(move |q| (h, q))).find_map(|(h, q)| {
        counts[h][q].iter().position(|&c| c > 1).map(|k| (h, q, k))
    });
    match (MaskTable::build(&pattern, heads, n), twice) {
        (Err(CudaError::Multiplicity { query, key, head }), Some(first)) => {
            assert_eq!((head, query), (first.0, first.1), "the refusal names another row");
            assert!(counts[head][query][key] > 1, "the refusal names key {key}, counted once");
        }
        (Ok(t), None) => {
            for h in 0..heads {
                for q in 0..n {
                    for k in 0..n {
                        assert_eq!(t.allowed(h, q, k), counts[h][q][k] == 1, "head {h} query {q} key {k}");
                    }
                }
                for qt in 0..t.tiles {
                    for kt in 0..t.tiles {
                        let rows = qt * TABLE_TILE..n.min((qt + 1) * TABLE_TILE);
                        let kept: Vec<bool> = rows
                            .flat_map(|q| (kt * TABLE_TILE..n.min((kt + 1) * TABLE_TILE)).map(move |k| (q, k)))
                            .map(|(q, k)| counts[h][q][k] == 1)
                            .collect();
                        let e = t.entries[(h * t.tiles + qt) * t.tiles + kt];
                        assert_eq!(e == 0, kept.iter().all(|&x| !x), "tile ({qt}, {kt}) of head {h}: entry {e}");
                        assert_eq!(e == 1, kept.iter().all(|&x| x), "tile ({qt}, {kt}) of head {h}: entry {e}");
                    }
                }
            }
        }
        (result, twice) => panic!("build gave {result:?} where the counts say a key counted twice: {twice:?}"),
    }
});

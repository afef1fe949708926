//! Any reference [`Pattern`] on the GPU, materialised: the host evaluates the pattern's
//! key runs once per (shape, pattern) and the kernels read its mask from a table, so a
//! pattern written in Rust (or a `dilated_expr` file, which has no GPU mask of its own)
//! runs where the built-ins run, on one GPU and in the ring, unchanged.
//!
//! The table covers the global sequence in tiles of [`TABLE_TILE`] positions per side,
//! per pattern head. Each tile's entry (an `i32`) is 0 when the pattern keeps no pair of
//! it, 1 when it keeps every pair, and `c >= 2` when it keeps some: then rows
//! `TABLE_TILE * (c - 2) ..` of the word array hold its mask, one 64-bit word per query
//! row, bit `j` for the tile's key `j`. Equal partial tiles share one entry (a lattice
//! repeats the same few), so the words stay small even where most tiles are partial. The
//! device buffer is the entries, padded to 8 bytes, then the words (`table_allowed` in
//! `kernels/mask.cuh` reads it). The tile plan visits a plan tile when some table tile
//! under it is non-empty for some head of the launch ([`MaskTable::may_attend`]).
//!
//! Costs: building touches every key run once, a 64-bit word at a time (a run of step
//! up to 64 sets a word's bits with one shifted lattice mask), and per query tile only the
//! key tiles its runs touch (a sparse pattern costs its pairs, not tiles^2 words per
//! head; a dense-like pattern at n = 16384 and 16 heads is about 67 million word
//! operations), the heads in parallel (rayon). Tables are built once and kept
//! ([`table`]: per pattern object, head count and length, like FlexAttention's block
//! mask). The kernels test a partial tile's pairs with two
//! cached loads each; a kernel tile lying in full table tiles runs with no element test
//! (`table_full` in `tile_full`).
//!
//! A table holds each pair once. A pattern whose keys may count twice (the
//! softmax-denominator overlap of dilated branches) runs as parts whose counts add up to
//! its own ([`TablePattern::parts`]): one table and one launch each, merged into the
//! output as a `dilated` pattern's branches are. A key counted twice within one part is
//! refused with an error naming it. A pattern's output scale (`Pattern::output_scale`) is
//! not in the table: the call applies it to the finished output, as for every pattern
//! (`GpuSpec::output_scale`).

use crate::error::{CudaError, Result};
use rayon::prelude::*;
use ringdil_reference::pattern::{KeyRun, Pattern};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// Positions per table tile side (one 64-bit word per query row of a tile). The kernels'
/// `TABLE_TILE`.
pub const TABLE_TILE: usize = 64;

/// The most bytes a table may take on the device.
pub const TABLE_MAX_BYTES: usize = 1 << 31;

/// A reference pattern the GPU evaluates through mask tables: any `Pattern`, as `parts`
/// whose key counts add up to its own (the softmax-denominator combine; one part, the
/// pattern itself, unless a key may count twice: [`TablePattern::with_parts`]). Each part
/// is one table and one launch, merged as a `dilated` pattern's branches are. Two specs
/// share tables when they hold the same objects, or the same `key` (a pattern file's
/// contents: the Python package and the CLI make new objects per call).
#[derive(Clone)]
pub struct TablePattern {
    /// What the reference evaluates.
    pub pattern: Arc<dyn Pattern>,
    /// Parts whose multiplicities add up to `pattern`'s, each keeping a key at most once.
    pub parts: Vec<Arc<dyn Pattern>>,
    /// What identifies the pattern by content, if anything does.
    pub key: Option<String>,
}

impl TablePattern {
    /// `pattern` as one part, identified by the object.
    pub fn new(pattern: Arc<dyn Pattern>) -> Self {
        TablePattern { parts: vec![pattern.clone()], pattern, key: None }
    }

    /// `pattern` as one part, identified by `key`: the caller promises that equal keys mean
    /// equal patterns and parts (a pattern file's `Debug` form does).
    pub fn keyed(pattern: Arc<dyn Pattern>, key: String) -> Self {
        TablePattern { key: Some(key), ..TablePattern::new(pattern) }
    }

    /// The same pattern evaluated as `parts`, whose key counts for every (head, query,
    /// key) add up to the pattern's (the caller's promise: `PatternFile::table_parts`).
    pub fn with_parts(self, parts: Vec<Arc<dyn Pattern>>) -> Self {
        TablePattern { parts, ..self }
    }

    /// The identity part `i`'s table is kept under (with the part held for an address).
    fn identity(&self, i: usize) -> Identity {
        match &self.key {
            Some(k) => Identity::Key(format!("{k}#{i}")),
            None => Identity::Object(Arc::as_ptr(&self.parts[i]) as *const u8 as usize),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    Key(String),
    Object(usize),
}

impl fmt::Debug for TablePattern {
    /// The key, or the pattern and its parts' addresses: a spec's `Debug` form is a cache
    /// key (the Python package's prepared calls), so it names the identity.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(k) => write!(f, "Table({k}, {} parts)", self.parts.len()),
            None => {
                let at: Vec<String> = self.parts.iter().map(|p| format!("{:p}", Arc::as_ptr(p) as *const u8)).collect();
                write!(f, "Table({:?} @ {})", self.pattern, at.join(", "))
            }
        }
    }
}

impl PartialEq for TablePattern {
    fn eq(&self, other: &Self) -> bool {
        self.parts.len() == other.parts.len()
            && (0..self.parts.len()).all(|i| self.identity(i) == other.identity(i))
            && (self.key.is_some() || Arc::ptr_eq(&self.pattern, &other.pattern))
    }
}

/// A materialised pattern over `heads` pattern heads and `seq_len` positions (module docs).
#[derive(Debug)]
pub struct MaskTable {
    /// Table tiles per side: `ceil(seq_len / TABLE_TILE)`.
    pub tiles: usize,
    pub heads: usize,
    pub seq_len: usize,
    /// Per (head, query tile, key tile): 0 empty, 1 full, `c >= 2` partial entry `c - 2`.
    pub entries: Vec<i32>,
    /// `TABLE_TILE` words per partial entry.
    pub words: Vec<u64>,
}

impl MaskTable {
    /// Evaluate `pattern` for every head and query (see the module docs for what is
    /// refused). The heads are evaluated in parallel (`head_table`), then numbered in
    /// head order, so the table is the one a walk over the heads in turn would make.
    pub fn build(pattern: &dyn Pattern, heads: usize, seq_len: usize) -> Result<MaskTable> {
        pattern.validate(heads, seq_len)?;
        let tiles = seq_len.div_ceil(TABLE_TILE);
        let entry_bytes = (heads * tiles * tiles * 4).next_multiple_of(8);
        if entry_bytes > TABLE_MAX_BYTES {
            return Err(CudaError::TooLarge { what: "mask table bytes", value: entry_bytes, max: TABLE_MAX_BYTES });
        }
        let per_head: Vec<Result<HeadTable>> =
            (0..heads).into_par_iter().map(|h| head_table(pattern, h, heads, seq_len)).collect();
        let mut entries = Vec::with_capacity(heads * tiles * tiles);
        let mut words = Vec::new();
        let mut shared: HashMap<[u64; TABLE_TILE], i32> = HashMap::new();
        for head in per_head {
            let head = head?;
            // The head's partial tiles in order of first use: a tile seen in an earlier head
            // keeps its number, a new one takes the next.
            let numbers = head
                .partial
                .iter()
                .map(|tile| {
                    let next = i32::try_from(shared.len() + 2).map_err(|_| CudaError::TooLarge {
                        what: "mask table partial tiles",
                        value: shared.len(),
                        max: i32::MAX as usize - 2,
                    })?;
                    Ok(*shared.entry(*tile).or_insert_with(|| {
                        words.extend_from_slice(tile);
                        next
                    }))
                })
                .collect::<Result<Vec<i32>>>()?;
            entries.extend(head.entries.iter().map(|&e| if e >= 2 { numbers[(e - 2) as usize] } else { e }));
            let bytes = entry_bytes + words.len() * 8;
            if bytes > TABLE_MAX_BYTES {
                return Err(CudaError::TooLarge { what: "mask table bytes", value: bytes, max: TABLE_MAX_BYTES });
            }
        }
        Ok(MaskTable { tiles, heads, seq_len, entries, words })
    }

    /// The bytes of [`MaskTable::device_bytes`].
    pub fn device_len(&self) -> usize {
        (self.entries.len() * 4).next_multiple_of(8) + self.words.len() * 8
    }

    /// The device buffer: entries (padded to 8 bytes), then words, little-endian.
    pub fn device_bytes(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self.entries.iter().flat_map(|e| e.to_le_bytes()).collect();
        out.resize(out.len().next_multiple_of(8), 0);
        out.extend(self.words.iter().flat_map(|w| w.to_le_bytes()));
        out
    }

    /// Does pattern head `h` keep query `q`'s key `k` (global positions)? The kernels'
    /// `table_allowed`, on the host.
    pub fn allowed(&self, h: usize, q: usize, k: usize) -> bool {
        match self.entries[(h * self.tiles + q / TABLE_TILE) * self.tiles + k / TABLE_TILE] {
            0 => false,
            1 => true,
            c => (self.words[(c as usize - 2) * TABLE_TILE + q % TABLE_TILE] >> (k % TABLE_TILE)) & 1 == 1,
        }
    }

    /// May some head in `heads` keep a pair with the query in positions `q.0..=q.1` and
    /// the key in `k.0..=k.1`? (From the tile entries: a plan tile is visited when a table
    /// tile under it is not empty.)
    pub fn may_attend(&self, heads: std::ops::Range<usize>, q: (usize, usize), k: (usize, usize)) -> bool {
        let last = self.tiles.saturating_sub(1);
        let (q0, q1) = (q.0 / TABLE_TILE, (q.1 / TABLE_TILE).min(last));
        let (k0, k1) = (k.0 / TABLE_TILE, (k.1 / TABLE_TILE).min(last));
        if q0 > q1 || k0 > k1 {
            return false;
        }
        heads.into_iter().any(|h| {
            (q0..=q1).any(|qt| self.entries[(h * self.tiles + qt) * self.tiles..][k0..=k1].iter().any(|&e| e != 0))
        })
    }
}

/// One head's entries (0, 1, or `2 + i` for its `i`-th distinct partial tile) and its
/// distinct partial tiles in order of first use, query tile by query tile, key tiles
/// ascending.
struct HeadTable {
    entries: Vec<i32>,
    partial: Vec<[u64; TABLE_TILE]>,
}

/// Head `h`'s part of [`MaskTable::build`]: one query tile's rows at a time,
/// `block.words[kt][r]` being row `r`'s word of key tile `kt`. Only the key tiles its runs
/// touch are classified and cleared (the others stay entry 0), so a sparse pattern costs
/// its pairs, not tiles^2 words.
fn head_table(pattern: &dyn Pattern, h: usize, heads: usize, seq_len: usize) -> Result<HeadTable> {
    let tiles = seq_len.div_ceil(TABLE_TILE);
    let mut entries = vec![0i32; tiles * tiles];
    let mut partial = Vec::new();
    let mut local: HashMap<[u64; TABLE_TILE], i32> = HashMap::new();
    let mut runs = Vec::new();
    let mut block = Block::new(tiles);
    for qt in 0..tiles {
        let rows = (qt * TABLE_TILE..((qt + 1) * TABLE_TILE).min(seq_len)).enumerate();
        for (r, q) in rows {
            runs.clear();
            pattern.key_runs(q, h, heads, seq_len, &mut runs);
            for run in &runs {
                set_run(&mut block, r, run, seq_len).map_err(|key| CudaError::Multiplicity {
                    query: q,
                    key,
                    head: h,
                })?;
            }
        }
        let valid_rows = (seq_len - qt * TABLE_TILE).min(TABLE_TILE);
        // Ascending, so that partial tiles are numbered as a walk over every tile would.
        block.touched.sort_unstable();
        for &kt in &block.touched {
            let tile = &block.words[kt];
            let valid_keys = (seq_len - kt * TABLE_TILE).min(TABLE_TILE);
            let all = if valid_keys == 64 { u64::MAX } else { (1u64 << valid_keys) - 1 };
            let rows = &tile[..valid_rows];
            entries[qt * tiles + kt] = if rows.iter().all(|&w| w == 0) {
                0
            } else if rows.iter().all(|&w| w == all) {
                1
            } else {
                let next = 2 + local.len() as i32;
                *local.entry(*tile).or_insert_with(|| {
                    partial.push(*tile);
                    next
                })
            };
        }
        block.clear();
    }
    Ok(HeadTable { entries, partial })
}

/// One query tile's words over every key tile, with the key tiles written since the
/// last [`Block::clear`].
struct Block {
    words: Vec<[u64; TABLE_TILE]>,
    touched: Vec<usize>,
    marked: Vec<bool>,
}

impl Block {
    fn new(tiles: usize) -> Self {
        Block { words: vec![[0; TABLE_TILE]; tiles], touched: Vec::new(), marked: vec![false; tiles] }
    }

    /// Row `r`'s word of key tile `kt`, the tile noted as touched.
    fn word(&mut self, kt: usize, r: usize) -> &mut u64 {
        if !self.marked[kt] {
            self.marked[kt] = true;
            self.touched.push(kt);
        }
        &mut self.words[kt][r]
    }

    /// Zero the touched tiles (the others are zero already).
    fn clear(&mut self) {
        for &kt in &self.touched {
            self.words[kt] = [0; TABLE_TILE];
            self.marked[kt] = false;
        }
        self.touched.clear();
    }
}

/// Bits 0, `step`, 2 `step`, ... of a word (`step` in 1..=64), by doubling the pattern.
fn lattice_bits(step: usize) -> u64 {
    let (mut bits, mut width) = (1u64, step);
    while width < TABLE_TILE {
        bits |= bits << width;
        width *= 2;
    }
    bits
}

/// Set row `r`'s bits of `run` in a query tile's words; `Err(key)` for a key already set
/// (multiplicity above 1).
fn set_run(block: &mut Block, r: usize, run: &KeyRun, seq_len: usize) -> std::result::Result<(), usize> {
    let (end, step) = (run.end.min(seq_len), run.step.max(1));
    if step <= TABLE_TILE {
        // A word at a time: the run's bits in a word are `lattice` shifted to its first
        // key there (bits past 63 fall off), cut at the run's end.
        let lattice = lattice_bits(step);
        let mut k = run.start;
        while k < end {
            let (kt, bit) = (k / TABLE_TILE, k % TABLE_TILE);
            let word_end = (kt + 1) * TABLE_TILE;
            let hi = end.min(word_end) - kt * TABLE_TILE;
            let shifted = lattice << bit;
            let mask = shifted & if hi == TABLE_TILE { u64::MAX } else { (1u64 << hi) - 1 };
            let word = block.word(kt, r);
            if *word & mask != 0 {
                return Err(kt * TABLE_TILE + (*word & mask).trailing_zeros() as usize);
            }
            *word |= mask;
            // The word's last lattice bit, plus one step.
            k = kt * TABLE_TILE + (TABLE_TILE - 1 - shifted.leading_zeros() as usize) + step;
        }
    } else {
        for k in (run.start..end).step_by(step) {
            let (word, bit) = (block.word(k / TABLE_TILE, r), 1u64 << (k % TABLE_TILE));
            if *word & bit != 0 {
                return Err(k);
            }
            *word |= bit;
        }
    }
    Ok(())
}

/// The table of part `part` of `pattern` for `heads` heads over `seq_len` positions,
/// built at its first use and kept while the part lives (at most [`KEPT`] tables: the
/// oldest are dropped first).
pub fn table(pattern: &TablePattern, part: usize, heads: usize, seq_len: usize) -> Result<Arc<MaskTable>> {
    type Entry = (Identity, usize, usize, Arc<dyn Pattern>, Arc<MaskTable>);
    static TABLES: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();
    let id = pattern.identity(part);
    let tables = TABLES.get_or_init(Default::default);
    // The part is held with its table, so an object's address cannot be reused by another
    // while the entry exists.
    let found = tables
        .lock()
        .expect("mask table lock")
        .iter()
        .find_map(|(i, h, n, _, t)| (*i == id && *h == heads && *n == seq_len).then(|| t.clone()));
    if let Some(t) = found {
        return Ok(t);
    }
    let built = Arc::new(MaskTable::build(pattern.parts[part].as_ref(), heads, seq_len)?);
    let mut tables = tables.lock().expect("mask table lock");
    if tables.len() >= KEPT {
        tables.remove(0);
    }
    tables.push((id, heads, seq_len, pattern.parts[part].clone(), built.clone()));
    Ok(built)
}

/// Every part's table of `pattern` ([`table`]).
pub fn tables(pattern: &TablePattern, heads: usize, seq_len: usize) -> Result<Vec<Arc<MaskTable>>> {
    (0..pattern.parts.len()).map(|i| table(pattern, i, heads, seq_len)).collect()
}

/// Where each table starts in one device buffer holding them all, in bytes: each at a
/// multiple of [`TABLE_ALIGN`].
pub fn offsets(tables: &[Arc<MaskTable>]) -> Vec<usize> {
    tables
        .iter()
        .scan(0, |at, t| {
            let start = *at;
            *at += t.device_len().next_multiple_of(TABLE_ALIGN);
            Some(start)
        })
        .collect()
}

/// The device buffer of `tables`, each at its [`offsets`] entry.
pub fn device_buffer(tables: &[Arc<MaskTable>]) -> Vec<u8> {
    let mut out = Vec::new();
    for t in tables {
        out.extend(t.device_bytes());
        out.resize(out.len().next_multiple_of(TABLE_ALIGN), 0);
    }
    out
}

/// The alignment of a table in a buffer of several (the entries are read as i32, the
/// words as u64; 256 bytes is what the driver's allocations give).
pub const TABLE_ALIGN: usize = 256;

/// Tables kept by [`table`].
pub const KEPT: usize = 16;

#[cfg(test)]
mod tests;

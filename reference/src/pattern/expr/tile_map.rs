//! The whole-sequence tile map of a mask pattern: the class of every (query tile, key
//! tile) pair for one head, kept the way a GPU plan caches it (FlexAttention's block
//! mask): per query tile, the increasing list of its non-empty key tiles, each with a
//! full/partial bit. Empty tiles take no space and are never visited; full ones skip
//! the per-element test.
//!
//! **Cost.** Classifying the `(n/T)^2` tiles one by one would cost at least one
//! evaluation each (4 million at `n = 131072`, `T = 64`). Instead each row of tiles is
//! classified top-down: the box "this query tile x key tiles `j0..j1`" is evaluated once
//! with interval arithmetic; `Always` makes all of them full and `Never` all of them
//! empty with no further work, and only an undecided box is halved, down to single
//! tiles, which [`classify`] then decides exactly. A mask whose boundary crosses `c`
//! tiles of a row costs `O(c log(n/T))` evaluations for that row (causal: `c = 1`), and
//! the rows are independent, so they are built in parallel.
//!
//! The map is exact: every single tile is classified with [`exact_budget`], and a
//! decided multi-tile box is decided for each of its tiles.

use super::ExprPattern;
use super::ast::Var;
use super::eval::Env;
use super::interval::{Interval, Ranges, Truth, enclose};
use super::tiles::{Tile, TileClass, classify, exact_budget};
use crate::error::{Error, Result};
use rayon::prelude::*;

/// The tile map of one head; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileMap {
    tile: usize,
    seq_len: usize,
    /// Query tile `i` owns the entries `starts[i]..starts[i + 1]` of `keys` and `full`.
    starts: Vec<usize>,
    /// Key tile indices, increasing within a row.
    keys: Vec<usize>,
    /// Whether the entry's tile is full (else partial).
    full: Vec<bool>,
}

impl TileMap {
    /// The map of `pattern` for head `head` of `heads`, over `seq_len` positions cut into
    /// tiles of `tile` rows (the last tile of each axis may be shorter). A `tile` of 0 is
    /// [`Error::ZeroParameter`].
    pub fn new(pattern: &ExprPattern, head: usize, heads: usize, seq_len: usize, tile: usize) -> Result<TileMap> {
        if tile == 0 {
            return Err(Error::ZeroParameter { pattern: "tile map", parameter: "tile" });
        }
        let mut at = Env::default();
        at.set(Var::Head, head);
        at.set(Var::Heads, heads);
        at.set(Var::SeqLen, seq_len);
        let tiles = seq_len.div_ceil(tile);
        let rows: Vec<Vec<(usize, bool)>> = (0..tiles)
            .into_par_iter()
            .map(|i| {
                let mut row = Vec::new();
                Row { pattern, at, tile, seq_len, query: i }.fill(0..tiles, &mut row);
                row
            })
            .collect();
        let mut starts = Vec::with_capacity(tiles + 1);
        starts.push(0);
        let (mut keys, mut full) = (Vec::new(), Vec::new());
        for row in rows {
            keys.extend(row.iter().map(|e| e.0));
            full.extend(row.iter().map(|e| e.1));
            starts.push(keys.len());
        }
        Ok(TileMap { tile, seq_len, starts, keys, full })
    }

    /// The tile size `T`.
    pub fn tile(&self) -> usize {
        self.tile
    }

    /// The number of query tiles (and of key tiles): `ceil(n / T)`.
    pub fn tiles(&self) -> usize {
        self.seq_len.div_ceil(self.tile)
    }

    /// The non-empty key tiles of query tile `i`, increasing, with their class.
    pub fn row(&self, i: usize) -> impl Iterator<Item = (usize, TileClass)> + '_ {
        let entries = self.starts[i]..self.starts[i + 1];
        entries.map(|e| (self.keys[e], if self.full[e] { TileClass::Full } else { TileClass::Partial }))
    }

    /// The class of tile `(i, j)` (a binary search in row `i`).
    pub fn class(&self, i: usize, j: usize) -> TileClass {
        let (start, end) = (self.starts[i], self.starts[i + 1]);
        match self.keys[start..end].binary_search(&j) {
            Ok(e) if self.full[start + e] => TileClass::Full,
            Ok(_) => TileClass::Partial,
            Err(_) => TileClass::Empty,
        }
    }

    /// The numbers of full and of partial tiles.
    pub fn counts(&self) -> (usize, usize) {
        let full = self.full.iter().filter(|&&f| f).count();
        (full, self.full.len() - full)
    }
}

/// One row of tiles being classified.
struct Row<'a> {
    pattern: &'a ExprPattern,
    at: Env,
    tile: usize,
    seq_len: usize,
    query: usize,
}

impl Row<'_> {
    /// Positions `start..end` of tiles `tiles`.
    fn span(&self, tiles: std::ops::Range<usize>) -> std::ops::Range<usize> {
        tiles.start * self.tile..(tiles.end * self.tile).min(self.seq_len)
    }

    /// Append the non-empty tiles among the key tiles `keys` (in order).
    fn fill(&self, keys: std::ops::Range<usize>, out: &mut Vec<(usize, bool)>) {
        let (queries, positions) = (self.span(self.query..self.query + 1), self.span(keys.clone()));
        let inclusive = |r: &std::ops::Range<usize>| Interval::between(r.start as i64, r.end as i64 - 1);
        let ranges = Ranges::at(&self.at).with(Var::Query, inclusive(&queries)).with(Var::Key, inclusive(&positions));
        let mask = self.pattern.mask().root();
        match enclose(mask, &ranges).truth() {
            Truth::Always => out.extend(keys.map(|j| (j, true))),
            Truth::Never => {}
            Truth::Unknown if keys.len() == 1 => {
                let tile = Tile::new(queries, positions, self.seq_len).expect("tiles lie inside the sequence");
                match classify(mask, &self.at, &tile, exact_budget(tile.pairs())) {
                    TileClass::Empty => {}
                    class => out.push((keys.start, class == TileClass::Full)),
                }
            }
            Truth::Unknown => {
                let mid = keys.start + keys.len() / 2;
                self.fill(keys.start..mid, out);
                self.fill(mid..keys.end, out);
            }
        }
    }
}

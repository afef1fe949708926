//! The whole-sequence tile map of a mask pattern: the class of every (query tile, key
//! tile) pair for one head, kept the way a GPU plan caches it (FlexAttention's block
//! mask, with runs): per query tile, the increasing runs of consecutive non-empty key
//! tiles of one class (full or partial). Empty tiles take no space and are never
//! visited; full ones skip the per-element test. Runs keep the common masks small: a
//! causal row is one full run and one partial tile, whatever `n`.
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
    /// Query tile `i` owns the runs `starts[i]..starts[i + 1]`.
    starts: Vec<usize>,
    /// Runs of key tiles, increasing and disjoint within a row; adjacent runs of one row
    /// differ in class.
    runs: Vec<Run>,
}

/// Key tiles `start..end` of one class (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub start: usize,
    pub end: usize,
    pub full: bool,
}

impl Run {
    pub fn class(&self) -> TileClass {
        if self.full { TileClass::Full } else { TileClass::Partial }
    }
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
        let rows: Vec<Vec<Run>> = (0..tiles)
            .into_par_iter()
            .map(|i| {
                let mut row = Vec::new();
                Row { pattern, at, tile, seq_len, query: i }.fill(0..tiles, &mut row);
                row
            })
            .collect();
        let mut starts = Vec::with_capacity(tiles + 1);
        starts.push(0);
        let mut runs = Vec::new();
        for row in rows {
            runs.extend(row);
            starts.push(runs.len());
        }
        Ok(TileMap { tile, seq_len, starts, runs })
    }

    /// The tile size `T`.
    pub fn tile(&self) -> usize {
        self.tile
    }

    /// The number of query tiles (and of key tiles): `ceil(n / T)`.
    pub fn tiles(&self) -> usize {
        self.seq_len.div_ceil(self.tile)
    }

    /// The runs of non-empty key tiles of query tile `i`, increasing.
    pub fn row(&self, i: usize) -> &[Run] {
        &self.runs[self.starts[i]..self.starts[i + 1]]
    }

    /// The class of tile `(i, j)` (a binary search in row `i`).
    pub fn class(&self, i: usize, j: usize) -> TileClass {
        let row = self.row(i);
        match row.partition_point(|run| run.end <= j) {
            r if r < row.len() && row[r].start <= j => row[r].class(),
            _ => TileClass::Empty,
        }
    }

    /// The numbers of full and of partial tiles.
    pub fn counts(&self) -> (usize, usize) {
        let count = |full: bool| self.runs.iter().filter(|r| r.full == full).map(|r| r.end - r.start).sum();
        (count(true), count(false))
    }

    /// The number of runs over all rows (the map's size).
    pub fn runs(&self) -> usize {
        self.runs.len()
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

    /// Append the non-empty tiles among the key tiles `keys` (in order), extending the
    /// last run when it ends at `keys.start` with the same class.
    fn fill(&self, keys: std::ops::Range<usize>, out: &mut Vec<Run>) {
        let mut push = |start: usize, end: usize, full: bool| match out.last_mut() {
            Some(last) if last.end == start && last.full == full => last.end = end,
            _ => out.push(Run { start, end, full }),
        };
        let (queries, positions) = (self.span(self.query..self.query + 1), self.span(keys.clone()));
        let inclusive = |r: &std::ops::Range<usize>| Interval::between(r.start as i64, r.end as i64 - 1);
        let ranges = Ranges::at(&self.at).with(Var::Query, inclusive(&queries)).with(Var::Key, inclusive(&positions));
        let mask = self.pattern.mask().root();
        match enclose(mask, &ranges).truth() {
            Truth::Always => push(keys.start, keys.end, true),
            Truth::Never => {}
            Truth::Unknown if keys.len() == 1 => {
                let tile = Tile::new(queries, positions, self.seq_len).expect("tiles lie inside the sequence");
                match classify(mask, &self.at, &tile, exact_budget(tile.pairs())) {
                    TileClass::Empty => {}
                    class => push(keys.start, keys.end, class == TileClass::Full),
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

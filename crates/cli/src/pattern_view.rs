//! `ringdil pattern show`: what a pattern lets each query see, as numbers and as a
//! picture.
//!
//! * density: allowed `(query, key)` pairs over `n^2` (a key of multiplicity 2 counts
//!   once here; the largest multiplicity is reported separately);
//! * keys per query: min, mean, max over queries (causality applied, no padding);
//! * receptive field after `L` layers: with `A` the "query i sees key j" relation of one
//!   layer (union over heads, since a layer mixes all heads), the tokens that can reach
//!   query `i` through `L` layers are `A^L` (boolean matrix power). Reported for the
//!   last query and as the minimum over 64 evenly spaced queries.

use ringdil_reference::Spec;
use ringdil_reference::pattern::key_counts;
use serde::Serialize;
use std::error::Error;
use std::path::Path;

/// The numbers `pattern show` prints.
#[derive(Debug, Clone, Serialize)]
pub struct PatternStats {
    pub seq: usize,
    pub heads: usize,
    pub head: usize,
    pub density: f64,
    pub keys_min: usize,
    pub keys_mean: f64,
    pub keys_max: usize,
    pub max_multiplicity: u32,
    pub empty_queries: usize,
    /// `(layers, last query's field, minimum field over sampled queries)`, in tokens.
    pub receptive_field: Vec<(usize, usize, usize)>,
}

/// Multiplicity of every key for every query of `head` (causality applied).
pub fn counts_matrix(spec: &Spec, seq: usize, heads: usize, head: usize) -> Vec<Vec<u32>> {
    (0..seq)
        .map(|i| {
            let mut row = key_counts(&*spec.pattern, i, head, heads, seq);
            if spec.causal {
                row.iter_mut().skip(i + 1).for_each(|c| *c = 0);
            }
            row
        })
        .collect()
}

/// A set of token positions as a bit vector.
#[derive(Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn union(&mut self, other: &Bits) {
        self.0.iter_mut().zip(&other.0).for_each(|(a, b)| *a |= b);
    }
    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(w, &word)| (0..64).filter(move |b| word >> b & 1 == 1).map(move |b| w * 64 + b))
    }
    fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Statistics of `head` (of `heads`) on a sequence of `seq` tokens, with receptive
/// fields for 1..=`layers` layers.
pub fn stats(
    spec: &Spec,
    seq: usize,
    heads: usize,
    head: usize,
    layers: usize,
) -> Result<PatternStats, Box<dyn Error>> {
    spec.validate(1, heads, seq)?;
    if head >= heads {
        return Err(format!("--head {head} is out of range for --heads {heads}").into());
    }
    let counts = counts_matrix(spec, seq, heads, head);
    let per_query: Vec<usize> = counts.iter().map(|r| r.iter().filter(|&&c| c > 0).count()).collect();
    let allowed: usize = per_query.iter().sum();
    // One layer's relation, union over heads.
    let mut layer: Vec<Bits> = vec![Bits::new(seq); seq];
    for h in 0..heads {
        let m = if h == head { counts.clone() } else { counts_matrix(spec, seq, heads, h) };
        for (i, row) in m.iter().enumerate() {
            row.iter().enumerate().filter(|(_, c)| **c > 0).for_each(|(j, _)| layer[i].set(j));
        }
    }
    // 64 evenly spaced queries (all of them when fewer), the last one last.
    let samples = 64.min(seq);
    let sampled: Vec<usize> =
        (0..samples).map(|s| if samples == 1 { seq - 1 } else { s * (seq - 1) / (samples - 1) }).collect();
    let mut fields: Vec<Bits> = sampled.iter().map(|&i| layer[i].clone()).collect();
    let mut receptive_field = Vec::new();
    for l in 1..=layers {
        if l > 1 {
            for field in &mut fields {
                let mut next = Bits::new(seq);
                field.ones().for_each(|j| next.union(&layer[j]));
                *field = next;
            }
        }
        let min = fields.iter().map(Bits::count).min().unwrap_or(0);
        receptive_field.push((l, fields.last().map_or(0, Bits::count), min));
    }
    Ok(PatternStats {
        seq,
        heads,
        head,
        density: allowed as f64 / (seq * seq) as f64,
        keys_min: per_query.iter().copied().min().unwrap_or(0),
        keys_mean: allowed as f64 / seq as f64,
        keys_max: per_query.iter().copied().max().unwrap_or(0),
        max_multiplicity: counts.iter().flatten().copied().max().unwrap_or(0),
        empty_queries: per_query.iter().filter(|&&c| c == 0).count(),
        receptive_field,
    })
}

/// The statistics as the text `pattern show` prints.
pub fn render(stats: &PatternStats) -> String {
    let mut text = format!(
        "seq {}, head {} of {}\ndensity {:.4}  keys per query min {} mean {:.1} max {}  max multiplicity {}  queries with no key {}\n\n",
        stats.seq,
        stats.head,
        stats.heads,
        stats.density,
        stats.keys_min,
        stats.keys_mean,
        stats.keys_max,
        stats.max_multiplicity,
        stats.empty_queries
    );
    let rows: Vec<Vec<String>> = stats
        .receptive_field
        .iter()
        .map(|&(l, last, min)| vec![l.to_string(), last.to_string(), min.to_string()])
        .collect();
    text.push_str(&crate::table::render(&["layers", "receptive field (last query)", "min over queries"], &rows));
    text
}

/// Colour of a cell by multiplicity: white (masked), dark blue (1), orange (2 or more).
fn colour(count: u32) -> [u8; 3] {
    match count {
        0 => [255, 255, 255],
        1 => [31, 58, 147],
        _ => [230, 120, 20],
    }
}

/// Draw the `[query, key]` masks of `draw` heads side by side (query down, key right),
/// each cell `zoom` pixels, 4 panels per row with an 8-pixel grey gap.
pub fn write_png(spec: &Spec, seq: usize, heads: usize, draw: &[usize], path: &Path) -> Result<(), Box<dyn Error>> {
    const GAP: usize = 8;
    const PER_ROW: usize = 4;
    let zoom = (512 / seq).clamp(1, 16);
    let panel = seq * zoom;
    let cols = draw.len().min(PER_ROW);
    let rows = draw.len().div_ceil(PER_ROW);
    let (width, height) = (cols * panel + (cols - 1) * GAP, rows * panel + (rows - 1) * GAP);
    let mut pixels = vec![160u8; width * height * 3];
    for (p, &head) in draw.iter().enumerate() {
        let (x0, y0) = ((p % PER_ROW) * (panel + GAP), (p / PER_ROW) * (panel + GAP));
        for (i, row) in counts_matrix(spec, seq, heads, head).iter().enumerate() {
            for (j, &c) in row.iter().enumerate() {
                for (dy, dx) in (0..zoom).flat_map(|dy| (0..zoom).map(move |dx| (dy, dx))) {
                    let at = ((y0 + i * zoom + dy) * width + x0 + j * zoom + dx) * 3;
                    pixels[at..at + 3].copy_from_slice(&colour(c));
                }
            }
        }
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width as u32, height as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(&pixels)?;
    Ok(())
}

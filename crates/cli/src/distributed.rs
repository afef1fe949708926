//! The CLI's view of the reference's distributed schedules: choosing a layout and a
//! schedule from the command line, and costing a schedule per rank and step (`plan`).

use clap::ValueEnum;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use ringdil_reference::ring::{Kind, Layout, Schedule};
use serde::{Serialize, Serializer};

/// How the CLI writes a schedule [`Kind`]: its `--schedule` value (also its name in
/// `plan --json`), its name in text output and its help line. These spellings are older
/// than the shared enum and stay, so that scripts and saved outputs keep working.
struct Spelling {
    kind: Kind,
    flag: &'static str,
    label: &'static str,
    help: &'static str,
}

const SPELLINGS: [Spelling; 5] = [
    Spelling {
        kind: Kind::Ring,
        flag: "ring",
        label: "Ring",
        help: "Ring attention: K/V blocks travel around the ring, partials are merged",
    },
    Spelling {
        kind: Kind::PatternRing,
        flag: "pattern",
        label: "Pattern",
        help: "The ring, moving only the K/V rows the pattern needs (dilated rows, nothing for segments inside a rank)",
    },
    Spelling {
        kind: Kind::AllGather,
        flag: "all-gather",
        label: "AllGather",
        help: "Context parallelism: all-gather K and V (Megatron / Llama 3)",
    },
    Spelling {
        kind: Kind::Ulysses,
        flag: "ulysses",
        label: "Ulysses",
        help: "Head parallelism: all-to-all to heads and back (DeepSpeed-Ulysses)",
    },
    Spelling {
        kind: Kind::Hybrid,
        flag: "hybrid",
        label: "Hybrid",
        help: "Ulysses inside groups of ranks (as wide as the heads fill: the largest divisor of the ranks not above \
               the heads), the ring between the groups (USP)",
    },
];

fn spelling(kind: Kind) -> &'static Spelling {
    SPELLINGS.iter().find(|s| s.kind == kind).expect("SPELLINGS lists every kind (tested below)")
}

/// The parser of `--schedule`: the flags of `SPELLINGS`, with their help, to a [`Kind`].
pub fn schedule_arg() -> impl TypedValueParser<Value = Kind> {
    PossibleValuesParser::new(SPELLINGS.iter().map(|s| PossibleValue::new(s.flag).help(s.help)))
        .map(|flag| kind_of_flag(&flag).expect("clap accepts only listed values"))
}

/// The name of `kind` in text output (`plan`'s header, `verify`'s rows).
pub fn label(kind: Kind) -> &'static str {
    spelling(kind).label
}

/// `kind` as its `--schedule` value (also its name in `plan --json`).
pub fn flag(kind: Kind) -> &'static str {
    spelling(kind).flag
}

/// The kind whose `--schedule` value is `flag`, if any.
pub fn kind_of_flag(flag: &str) -> Option<Kind> {
    SPELLINGS.iter().find(|s| s.flag == flag).map(|s| s.kind)
}

/// `kind` as its `--schedule` value, for `plan --json`.
fn serialize_flag<S: Serializer>(kind: &Kind, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(flag(*kind))
}

/// How tokens are laid out over ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// Rank r owns the r-th contiguous chunk.
    Contiguous,
    /// Rank r owns chunks r and 2P-1-r of 2P (balances causal work).
    Zigzag,
    /// Token t lives on rank t mod P.
    Striped,
}

/// The layout from `--layout`, or explicit `--boundaries` (which win).
pub fn layout(arg: LayoutArg, boundaries: Option<Vec<usize>>) -> Layout {
    match (boundaries, arg) {
        (Some(b), _) => Layout::Boundaries(b),
        (None, LayoutArg::Contiguous) => Layout::Contiguous,
        (None, LayoutArg::Zigzag) => Layout::Zigzag,
        (None, LayoutArg::Striped) => Layout::Striped,
    }
}

/// Bytes sent per rank and step of one schedule, and the dense ring's totals for
/// comparison.
#[derive(Debug, Clone, Serialize)]
pub struct PlanCost {
    #[serde(serialize_with = "serialize_flag")]
    pub schedule: Kind,
    pub ranks: usize,
    pub seq: usize,
    pub heads: usize,
    /// K/V heads (equal to `heads` unless grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// v's head dim (V, dV, O, dO rows): `head_dim` unless they differ (MLA).
    pub value_dim: usize,
    pub element_bytes: usize,
    pub tokens_per_rank: Vec<usize>,
    /// `forward[step][rank]`, bytes.
    pub forward: Vec<Vec<usize>>,
    pub backward: Vec<Vec<usize>>,
    pub skipped_computes: usize,
    pub dense_ring_forward: usize,
    pub dense_ring_backward: usize,
}

impl PlanCost {
    /// Cost `schedule` for batch 1, `(head_dim, value_dim)` (Q, K and their gradients at
    /// the first; V, the output and theirs at the second) and `element_bytes` bytes per
    /// element (K/V rows at the schedule's K/V heads); `dense` is the plain ring on the
    /// same chunks, heads and widths.
    pub fn new(
        schedule: &Schedule,
        dense: &Schedule,
        (head_dim, value_dim): (usize, usize),
        element_bytes: usize,
    ) -> Self {
        let bytes = |steps: Vec<Vec<usize>>| -> Vec<Vec<usize>> {
            steps.into_iter().map(|s| s.into_iter().map(|e| e * element_bytes).collect()).collect()
        };
        let [forward, backward] = schedule.sent_elements(1, head_dim, value_dim).map(bytes);
        let [dense_forward, dense_backward] = dense.sent_elements(1, head_dim, value_dim);
        let total = |steps: Vec<Vec<usize>>| steps.iter().flatten().sum::<usize>() * element_bytes;
        PlanCost {
            schedule: schedule.kind,
            ranks: schedule.ranks(),
            seq: schedule.chunks.seq_len,
            heads: schedule.heads,
            kv_heads: schedule.kv_heads,
            head_dim,
            value_dim,
            element_bytes,
            tokens_per_rank: (0..schedule.ranks()).map(|r| schedule.chunks.tokens(r).len()).collect(),
            forward,
            backward,
            skipped_computes: schedule.skipped(),
            dense_ring_forward: total(dense_forward),
            dense_ring_backward: total(dense_backward),
        }
    }

    /// `8 heads`, or `8 heads over 2 K/V heads` under grouped-query attention.
    fn head_text(&self) -> String {
        if self.kv_heads == self.heads {
            format!("{} heads", self.heads)
        } else {
            format!("{} heads over {} K/V heads", self.heads, self.kv_heads)
        }
    }

    /// `head_dim 128`, or `head_dim 192, value head_dim 128` when v's differs.
    fn dim_text(&self) -> String {
        if self.value_dim == self.head_dim {
            format!("head_dim {}", self.head_dim)
        } else {
            format!("head_dim {}, value head_dim {}", self.head_dim, self.value_dim)
        }
    }

    pub fn forward_total(&self) -> usize {
        self.forward.iter().flatten().sum()
    }

    pub fn backward_total(&self) -> usize {
        self.backward.iter().flatten().sum()
    }

    /// The text `ringdil plan` prints: a step x rank table of KiB sent per phase, then
    /// totals against the dense ring.
    pub fn render(&self) -> String {
        let mut text = format!(
            "{} schedule: {} tokens over {} ranks (tokens per rank {:?}), {}, {}, {} bytes per element\n",
            label(self.schedule),
            self.seq,
            self.ranks,
            self.tokens_per_rank,
            self.head_text(),
            self.dim_text(),
            self.element_bytes
        );
        let mut headers = vec!["phase".to_string(), "step".to_string()];
        headers.extend((0..self.ranks).map(|r| format!("rank {r} KiB")));
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut rows = Vec::new();
        for (phase, steps) in [("forward", &self.forward), ("backward", &self.backward)] {
            for (i, step) in steps.iter().enumerate() {
                let mut row = vec![phase.to_string(), i.to_string()];
                row.extend(step.iter().map(|&b| format!("{:.1}", b as f64 / 1024.0)));
                rows.push(row);
            }
        }
        text.push('\n');
        text.push_str(&crate::table::render(&headers, &rows));
        let ratio = |x: usize, dense: usize| {
            if dense == 0 { "-".to_string() } else { format!("{:.3}", x as f64 / dense as f64) }
        };
        text.push_str(&format!(
            "\nforward  {:.1} KiB sent in all (dense ring {:.1} KiB, ratio {})\nbackward {:.1} KiB sent in all (dense ring {:.1} KiB, ratio {})\ncomputes skipped because the pattern leaves them empty: {}\n",
            self.forward_total() as f64 / 1024.0,
            self.dense_ring_forward as f64 / 1024.0,
            ratio(self.forward_total(), self.dense_ring_forward),
            self.backward_total() as f64 / 1024.0,
            self.dense_ring_backward as f64 / 1024.0,
            ratio(self.backward_total(), self.dense_ring_backward),
            self.skipped_computes
        ));
        text
    }

    /// An SVG drawing: one row per rank, one column per step (forward then backward),
    /// each cell shaded by the bytes that rank sends in that step and labelled in KiB.
    pub fn svg(&self) -> String {
        const CELL_W: usize = 86;
        const CELL_H: usize = 34;
        const LEFT: usize = 80;
        const TOP: usize = 50;
        let steps: Vec<(&str, usize, &Vec<usize>)> = [("fwd", &self.forward), ("bwd", &self.backward)]
            .into_iter()
            .flat_map(|(phase, s)| s.iter().enumerate().map(move |(i, step)| (phase, i, step)))
            .collect();
        let max = steps.iter().flat_map(|(_, _, s)| s.iter()).copied().max().unwrap_or(0).max(1);
        let (width, height) = (LEFT + steps.len() * CELL_W + 10, TOP + self.ranks * CELL_H + 30);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">\n\
             <text x=\"4\" y=\"18\">{}: {} tokens, {} ranks, {}, {}, {} B/elt (KiB sent per rank per step)</text>\n",
            label(self.schedule),
            self.seq,
            self.ranks,
            self.head_text(),
            self.dim_text(),
            self.element_bytes
        );
        for (c, (phase, i, _)) in steps.iter().enumerate() {
            svg.push_str(&format!("<text x=\"{}\" y=\"{}\">{phase} {i}</text>\n", LEFT + c * CELL_W + 8, TOP - 8));
        }
        for r in 0..self.ranks {
            let y = TOP + r * CELL_H;
            svg.push_str(&format!("<text x=\"4\" y=\"{}\">rank {r}</text>\n", y + CELL_H / 2 + 4));
            for (c, (_, _, step)) in steps.iter().enumerate() {
                let shade = 255 - (step[r] * 200 / max) as u8;
                let x = LEFT + c * CELL_W;
                svg.push_str(&format!(
                    "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"rgb({shade},{shade},255)\" stroke=\"#888\"/>\n\
                     <text x=\"{}\" y=\"{}\">{:.1}</text>\n",
                    CELL_W - 2,
                    CELL_H - 2,
                    x + 6,
                    y + CELL_H / 2 + 4,
                    step[r] as f64 / 1024.0
                ));
            }
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::builder::TypedValueParser;

    /// Every kind has exactly one spelling, and the parser turns each flag back into its
    /// kind; unknown values (the reference's own names among them) are refused.
    #[test]
    fn every_kind_is_spelled_once_and_parses_back() {
        let command = clap::Command::new("t");
        let parser = schedule_arg();
        for kind in Kind::ALL {
            assert_eq!(SPELLINGS.iter().filter(|s| s.kind == kind).count(), 1, "{kind}");
            let flag = spelling(kind).flag;
            assert_eq!(parser.parse_ref(&command, None, flag.as_ref()).unwrap(), kind);
            assert_eq!(kind_of_flag(super::flag(kind)), Some(kind));
        }
        for unknown in ["pattern_ring", "all_gather", "Ring", ""] {
            assert!(parser.parse_ref(&command, None, unknown.as_ref()).is_err(), "{unknown}");
            assert_eq!(kind_of_flag(unknown), None);
        }
    }
}

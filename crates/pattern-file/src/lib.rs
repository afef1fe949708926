//! Pattern files: a pattern, its causality and scale, as JSON or TOML.
//!
//! The dilated pattern uses LongNet's own words (`segment_lengths`, `dilation_rates`),
//! so a torchscale or PyTorch-port configuration can be copied over:
//!
//! ```json
//! { "kind": "dilated", "segment_lengths": [2048, 4096, 8192], "dilation_rates": [1, 2, 4],
//!   "offsets": "head_mod", "combine": "softmax_denominator", "causal": true }
//! ```
//!
//! `offsets` is `"head_mod"` (h mod r, the default), `"head_block"` (torchscale) or a list
//! with one fixed offset per branch; `combine` is `"softmax_denominator"` (LongNet, the
//! default) or `"head_groups"` (the PyTorch ports). Other kinds: `dense`,
//! `sliding_window` (`left`, `right`), `block_sparse` (`block`, `local_radius`,
//! `dilated_stride`, `global_tokens`, `block_mask`). Unknown fields are errors, so a typo
//! never silently falls back to a default.
//!
//! Pattern expressions (issue 21; the language is `docs/semantics.md` section 14):
//! `expr` is a boolean `mask` over `h q k n H` and the file's `constants`;
//! `dilated_expr` has `branches`, each a `segment`, `dilation` (default `1`) and
//! `offset` (default `h % r`) written as expressions or plain integers, with an optional
//! `mask`, and a `combine` of `"softmax_denominator"` (default) or `"union"`:
//!
//! ```toml
//! kind = "dilated_expr"
//! branches = [{ segment = 8, dilation = 2, offset = "h + s" }]
//! ```

use ringdil_reference::pattern::expr::{Constants, ExprError};
use ringdil_reference::pattern::{
    BlockSparse, Branch, Combine, Dense, Dilated, ExprBranch, ExprCombine, ExprDilated, ExprPattern, Offset,
    SlidingWindow,
};
use ringdil_reference::{Pattern, Spec};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// One pattern file. See the module docs for the fields. On disk the variant is named by
/// a `kind` field next to the others (see [`PatternFile::parse`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PatternFile {
    Dense {
        #[serde(default)]
        causal: bool,
        scale: Option<f64>,
    },
    Dilated {
        segment_lengths: Vec<usize>,
        dilation_rates: Vec<usize>,
        #[serde(default)]
        offsets: Offsets,
        #[serde(default = "softmax_denominator")]
        combine: Combine,
        #[serde(default)]
        causal: bool,
        scale: Option<f64>,
    },
    SlidingWindow {
        left: usize,
        #[serde(default)]
        right: usize,
        #[serde(default)]
        causal: bool,
        scale: Option<f64>,
    },
    BlockSparse {
        block: usize,
        local_radius: Option<usize>,
        dilated_stride: Option<usize>,
        #[serde(default)]
        global_tokens: usize,
        block_mask: Option<Vec<Vec<bool>>>,
        #[serde(default)]
        causal: bool,
        scale: Option<f64>,
    },
    Expr {
        mask: String,
        #[serde(default)]
        constants: Constants,
        #[serde(default)]
        causal: bool,
        scale: Option<f64>,
    },
    DilatedExpr {
        branches: Vec<ExprBranchFile>,
        #[serde(default = "softmax_denominator_expr")]
        combine: ExprCombine,
        #[serde(default)]
        constants: Constants,
        #[serde(default)]
        causal: bool,
        scale: Option<f64>,
    },
}

/// One branch of a `dilated_expr` file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExprBranchFile {
    segment: ExprText,
    #[serde(default = "one")]
    dilation: ExprText,
    #[serde(default = "head_mod")]
    offset: ExprText,
    mask: Option<ExprText>,
}

fn one() -> ExprText {
    ExprText("1".to_string())
}

fn head_mod() -> ExprText {
    ExprText("h % r".to_string())
}

fn softmax_denominator_expr() -> ExprCombine {
    ExprCombine::SoftmaxDenominator
}

/// An expression field: a string, or an integer (`segment = 64` for `segment = "64"`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExprText(String);

impl<'de> Deserialize<'de> for ExprText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = ExprText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an expression (a string) or an integer")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExprText, E> {
                Ok(ExprText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExprText, E> {
                Ok(ExprText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExprText, E> {
                Ok(ExprText(v.to_string()))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

/// The values `kind` may take, for error messages.
const KINDS: &str = "`dense`, `dilated`, `sliding_window`, `block_sparse`, `expr`, `dilated_expr`";

fn softmax_denominator() -> Combine {
    Combine::SoftmaxDenominator
}

/// The `offsets` field of a dilated pattern.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Offsets {
    #[default]
    HeadMod,
    HeadBlock,
    Fixed(Vec<usize>),
}

const OFFSETS_EXPECTED: &str = "\"head_mod\", \"head_block\" or a list of one offset per branch";

impl<'de> Deserialize<'de> for Offsets {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OffsetsVisitor;
        impl<'de> Visitor<'de> for OffsetsVisitor {
            type Value = Offsets;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(OFFSETS_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Offsets, E> {
                match v {
                    "head_mod" => Ok(Offsets::HeadMod),
                    "head_block" => Ok(Offsets::HeadBlock),
                    other => Err(E::custom(format!("unknown rule `{other}`, expected {OFFSETS_EXPECTED}"))),
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Offsets, A::Error> {
                let mut fixed = Vec::new();
                while let Some(o) = seq.next_element()? {
                    fixed.push(o);
                }
                Ok(Offsets::Fixed(fixed))
            }
        }
        deserializer.deserialize_any(OffsetsVisitor)
    }
}

/// The patterns a GPU kernel evaluates from indices ([`PatternFile::builtin`]), as the
/// reference defines them: the built-in kinds and mask expressions (compiled into a
/// kernel module of their own).
#[derive(Debug, Clone, PartialEq)]
pub enum Builtin {
    Dense(Dense),
    SlidingWindow(SlidingWindow),
    BlockSparse(BlockSparse),
    Dilated(Dilated),
    Expr(ExprPattern),
}

/// A `dilated_expr` file's branches, parsed; an error names the branch.
fn expr_branches(branches: &[ExprBranchFile], constants: &Constants) -> Result<Vec<ExprBranch>, FileError> {
    branches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mask = b.mask.as_ref().map(|m| m.0.as_str());
            ExprBranch::new(&b.segment.0, &b.dilation.0, &b.offset.0, mask, constants)
                .map_err(|e| FileError::Expression(e.in_field(format!("branches[{i}]"))))
        })
        .collect()
}

/// A `dilated` file's branches: one per segment length, with its dilation and offset.
fn dilated(
    segment_lengths: &[usize],
    dilation_rates: &[usize],
    offsets: &Offsets,
    combine: Combine,
) -> Result<Dilated, FileError> {
    let branches = segment_lengths.len();
    let lengths = |field, len| FileError::Lengths { field, len, other: "segment_lengths", other_len: branches };
    if dilation_rates.len() != branches {
        return Err(lengths("dilation_rates", dilation_rates.len()));
    }
    if let Offsets::Fixed(fixed) = offsets
        && fixed.len() != branches
    {
        return Err(lengths("offsets", fixed.len()));
    }
    let offset = |i: usize| match offsets {
        Offsets::HeadMod => Offset::HeadMod,
        Offsets::HeadBlock => Offset::HeadBlock,
        Offsets::Fixed(fixed) => Offset::Fixed(fixed[i]),
    };
    let branches = (0..branches)
        .map(|i| Branch { segment: segment_lengths[i], dilation: dilation_rates[i], offset: offset(i) })
        .collect();
    Ok(Dilated { branches, combine })
}

/// Why a pattern file was rejected.
#[derive(Debug)]
pub enum FileError {
    Read {
        path: String,
        error: std::io::Error,
    },
    Parse {
        path: String,
        message: String,
    },
    /// Two list fields that must have the same length do not.
    Lengths {
        field: &'static str,
        len: usize,
        other: &'static str,
        other_len: usize,
    },
    /// An expression that does not build (the error names the field, line, column and token).
    Expression(ExprError),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Read { path, error } => write!(f, "{path}: {error}"),
            FileError::Parse { path, message } => write!(f, "{path}: {message}"),
            FileError::Lengths { field, len, other, other_len } => write!(
                f,
                "`{field}` has {len} entries but `{other}` has {other_len}; they must have one entry per branch"
            ),
            FileError::Expression(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for FileError {}

impl PatternFile {
    /// Read a `.json` or `.toml` file (by extension; anything else is parsed as JSON).
    pub fn load(path: &Path) -> Result<Self, FileError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| FileError::Read { path: name.clone(), error })?;
        let is_toml = path.extension().is_some_and(|e| e == "toml");
        Self::parse(&text, is_toml).map_err(|message| FileError::Parse { path: name, message })
    }

    /// Parse file contents; the message names the bad field and the allowed values.
    ///
    /// The file's flat form `{"kind": K, fields...}` is rewritten to serde's external
    /// tagging `{K: {fields...}}` first, because serde's internally tagged enums buffer
    /// their content and lose the path of a bad field; this way the error says
    /// `combine: unknown variant ...` instead of just `unknown variant ...`.
    pub fn parse(text: &str, is_toml: bool) -> Result<Self, String> {
        let value: Value = if is_toml {
            let table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_string())?;
            serde_json::to_value(table).map_err(|e| e.to_string())?
        } else {
            serde_json::from_str(text).map_err(|e| e.to_string())?
        };
        let Value::Object(mut fields) = value else {
            return Err("a pattern file is a table of fields with a `kind`".to_string());
        };
        let kind = match fields.remove("kind") {
            Some(Value::String(kind)) => kind,
            _ => return Err(format!("missing string field `kind`; expected one of {KINDS}")),
        };
        let tagged = Value::Object([(kind, Value::Object(fields))].into_iter().collect());
        serde_path_to_error::deserialize(tagged).map_err(|e| {
            // The path starts with the kind; the field inside it is what the user wrote.
            let path = e.path().to_string();
            match path.split_once('.') {
                Some((_, field)) if !field.is_empty() => format!("field `{field}`: {}", e.inner()),
                _ => format!("field `kind`: {}", e.inner()),
            }
        })
    }

    /// The pattern the file describes as a GPU launcher inspects it; `None` for
    /// `dilated_expr`, which exists as a reference pattern only ([`PatternFile::pattern`]).
    pub fn builtin(&self) -> Result<Option<Builtin>, FileError> {
        Ok(Some(match self {
            PatternFile::Dense { .. } => Builtin::Dense(Dense),
            PatternFile::Dilated { segment_lengths, dilation_rates, offsets, combine, .. } => {
                Builtin::Dilated(dilated(segment_lengths, dilation_rates, offsets, *combine)?)
            }
            PatternFile::SlidingWindow { left, right, .. } => {
                Builtin::SlidingWindow(SlidingWindow { left: *left, right: *right })
            }
            PatternFile::BlockSparse { block, local_radius, dilated_stride, global_tokens, block_mask, .. } => {
                Builtin::BlockSparse(BlockSparse {
                    block: *block,
                    local_radius: *local_radius,
                    dilated_stride: *dilated_stride,
                    global_tokens: *global_tokens,
                    block_mask: block_mask.clone(),
                })
            }
            PatternFile::Expr { mask, constants, .. } => {
                Builtin::Expr(ExprPattern::new(mask, constants).map_err(FileError::Expression)?)
            }
            PatternFile::DilatedExpr { .. } => return Ok(None),
        }))
    }

    /// The pattern as parts whose multiplicities add (the softmax-denominator combine):
    /// one per branch for a `dilated_expr` file that combines its branches that way (a key
    /// two branches keep counts twice, which one GPU mask table cannot hold, while each
    /// branch keeps a key at most once), else the whole pattern. The GPU runs one masked
    /// launch per part and merges them, as it runs a `dilated` file's branches.
    pub fn table_parts(&self) -> Result<Vec<Arc<dyn Pattern>>, FileError> {
        match self.expr_dilated()? {
            Some(p) => Ok(p.parts().into_iter().map(|p| Arc::new(p) as Arc<dyn Pattern>).collect()),
            None => Ok(vec![self.pattern()?]),
        }
    }

    /// A `dilated_expr` file's pattern (None for the other kinds).
    pub fn expr_dilated(&self) -> Result<Option<ExprDilated>, FileError> {
        Ok(match self {
            PatternFile::DilatedExpr { branches, combine, constants, .. } => {
                Some(ExprDilated { branches: expr_branches(branches, constants)?, combine: *combine })
            }
            _ => None,
        })
    }

    /// The pattern the file describes.
    pub fn pattern(&self) -> Result<Arc<dyn Pattern>, FileError> {
        Ok(match self {
            PatternFile::DilatedExpr { branches, combine, constants, .. } => {
                Arc::new(ExprDilated { branches: expr_branches(branches, constants)?, combine: *combine })
            }
            PatternFile::Dense { .. }
            | PatternFile::Dilated { .. }
            | PatternFile::SlidingWindow { .. }
            | PatternFile::BlockSparse { .. }
            | PatternFile::Expr { .. } => match self.builtin()? {
                Some(Builtin::Dense(p)) => Arc::new(p),
                Some(Builtin::SlidingWindow(p)) => Arc::new(p),
                Some(Builtin::BlockSparse(p)) => Arc::new(p),
                Some(Builtin::Dilated(p)) => Arc::new(p),
                Some(Builtin::Expr(p)) => Arc::new(p),
                None => unreachable!("builtin() describes every kind but dilated_expr"),
            },
        })
    }

    /// The attention spec: the pattern plus the file's `causal` and `scale`.
    pub fn spec(&self) -> Result<Spec, FileError> {
        let (causal, scale) = match self {
            PatternFile::Dense { causal, scale }
            | PatternFile::Dilated { causal, scale, .. }
            | PatternFile::SlidingWindow { causal, scale, .. }
            | PatternFile::BlockSparse { causal, scale, .. }
            | PatternFile::Expr { causal, scale, .. }
            | PatternFile::DilatedExpr { causal, scale, .. } => (*causal, *scale),
        };
        Ok(Spec { pattern: self.pattern()?, causal, key_lengths: None, scale, documents: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::KeyRun;

    fn example(name: &str) -> PatternFile {
        PatternFile::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/patterns").join(name)).unwrap()
    }

    /// The rotating-offsets example: branch 2 (`w = 32`, `r = 2`, offset `h + s`) keeps
    /// residue `(h + s) mod 2` of segment `s`, so head 0 keeps the odd positions of
    /// segment 1; integers and strings are both accepted as expressions.
    #[test]
    fn rotating_offsets_example_builds() {
        let spec = example("rotating_offsets.toml").spec().unwrap();
        assert!(spec.causal);
        spec.pattern.validate(2, 100).unwrap();
        let mut runs = Vec::new();
        spec.pattern.key_runs(33, 0, 2, 100, &mut runs);
        assert_eq!(runs, [KeyRun::range(32, 48), KeyRun { start: 33, end: 64, step: 2 }]);
    }

    /// The union example keeps the rotating example's keys, each once: query 33 of head 0
    /// sees its 16-segment [32, 48) (branch 0) and the odd positions of [48, 64) (branch
    /// 1's keys past branch 0's segment), and its branches nest.
    #[test]
    fn rotating_union_example_nests() {
        let file = example("rotating_union.toml");
        let spec = file.spec().unwrap();
        assert!(spec.causal);
        let mut runs = Vec::new();
        spec.pattern.key_runs(33, 0, 2, 100, &mut runs);
        let mut keys: Vec<usize> = runs.iter().flat_map(|r| r.iter()).collect();
        keys.sort_unstable();
        keys.dedup();
        let want: Vec<usize> = (32..48).chain((49..64).step_by(2)).collect();
        assert_eq!(keys, want);
        assert!(file.expr_dilated().unwrap().unwrap().is_nested_union());
    }

    #[test]
    fn mask_example_builds() {
        let spec = example("local_global.json").spec().unwrap();
        let mut runs = Vec::new();
        spec.pattern.key_runs(100, 0, 1, 200, &mut runs);
        assert_eq!(runs, [KeyRun::range(0, 4), KeyRun::range(36, 165)]);
    }

    #[test]
    fn expression_errors_name_the_branch_and_field() {
        let text =
            r#"{ "kind": "dilated_expr", "branches": [{ "segment": 8 }, { "segment": 8, "offset": "(h + s" }] }"#;
        let err = PatternFile::parse(text, false).unwrap().pattern().unwrap_err();
        assert_eq!(err.to_string(), "branches[1]: offset: expected ')' at 1:7, found end of input");
        let text = "kind = \"expr\"\nmask = \"q < k\"\nwindow = 3";
        let err = PatternFile::parse(text, true).unwrap_err();
        assert!(err.starts_with("field `window`: unknown field"), "{err}");
    }

    /// The parts of a softmax-denominator `dilated_expr` file add up to it: for every head
    /// and query of a length no segment divides, the parts' key counts sum to the file's
    /// (which reach 2 where branches overlap), and each part counts a key at most once.
    /// Any other file is one part, itself.
    #[test]
    fn table_parts_add_up_to_the_pattern() {
        use ringdil_reference::pattern::key_counts;
        let file = example("rotating_offsets.toml");
        let (whole, parts) = (file.pattern().unwrap(), file.table_parts().unwrap());
        assert_eq!(parts.len(), 3);
        let (n, heads) = (150, 3);
        let mut overlaps = 0;
        for h in 0..heads {
            for q in 0..n {
                let want = key_counts(whole.as_ref(), q, h, heads, n);
                let counts: Vec<Vec<u32>> = parts.iter().map(|p| key_counts(p.as_ref(), q, h, heads, n)).collect();
                for (k, &w) in want.iter().enumerate() {
                    assert_eq!(counts.iter().map(|c| c[k]).sum::<u32>(), w, "head {h} query {q} key {k}");
                    assert!(counts.iter().all(|c| c[k] <= 1));
                    overlaps += usize::from(w > 1);
                }
            }
        }
        assert!(overlaps > 0, "the example's branches overlap somewhere");
        let union = PatternFile::parse(
            r#"{"kind": "dilated_expr", "combine": "union", "branches": [{"segment": "16"}, {"segment": "32", "dilation": 2}]}"#,
            false,
        )
        .unwrap();
        assert_eq!(union.table_parts().unwrap().len(), 1);
        assert_eq!(example("longnet.json").table_parts().unwrap().len(), 1);
    }
}

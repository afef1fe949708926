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

use ringdil_reference::pattern::{BlockSparse, Branch, Combine, Dense, Dilated, Offset, SlidingWindow};
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
}

/// The values `kind` may take, for error messages.
const KINDS: &str = "`dense`, `dilated`, `sliding_window`, `block_sparse`";

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

    /// The pattern the file describes.
    pub fn pattern(&self) -> Result<Arc<dyn Pattern>, FileError> {
        Ok(match self {
            PatternFile::Dense { .. } => Arc::new(Dense),
            PatternFile::Dilated { segment_lengths, dilation_rates, offsets, combine, .. } => {
                let branches = segment_lengths.len();
                let lengths =
                    |field, len| FileError::Lengths { field, len, other: "segment_lengths", other_len: branches };
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
                Arc::new(Dilated { branches, combine: *combine })
            }
            PatternFile::SlidingWindow { left, right, .. } => Arc::new(SlidingWindow { left: *left, right: *right }),
            PatternFile::BlockSparse { block, local_radius, dilated_stride, global_tokens, block_mask, .. } => {
                Arc::new(BlockSparse {
                    block: *block,
                    local_radius: *local_radius,
                    dilated_stride: *dilated_stride,
                    global_tokens: *global_tokens,
                    block_mask: block_mask.clone(),
                })
            }
        })
    }

    /// The attention spec: the pattern plus the file's `causal` and `scale`.
    pub fn spec(&self) -> Result<Spec, FileError> {
        let (causal, scale) = match self {
            PatternFile::Dense { causal, scale }
            | PatternFile::Dilated { causal, scale, .. }
            | PatternFile::SlidingWindow { causal, scale, .. }
            | PatternFile::BlockSparse { causal, scale, .. } => (*causal, *scale),
        };
        Ok(Spec { pattern: self.pattern()?, causal, key_lengths: None, scale })
    }
}

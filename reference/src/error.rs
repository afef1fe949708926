//! The one error type of the reference crate.
//!
//! Every check on user input happens at the API boundary and names the value that
//! failed, so that a bad argument never turns into a panic deep inside a block loop
//! or, worse, into silently wrong numbers.

use std::fmt;

/// What went wrong, with the offending value.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A tensor dimension that must be positive is zero (`batch`, `seq`, `heads`, `head_dim`).
    ZeroDim { tensor: &'static str, dim: &'static str },
    /// Two tensors (or a tensor and a side input) disagree on a dimension.
    ShapeMismatch { what: &'static str, expected: Vec<usize>, got: Vec<usize> },
    /// A NaN or infinity in an input tensor, at the first index found.
    NonFinite { tensor: &'static str, index: Vec<usize>, value: f64 },
    /// A LongNet branch with segment length 0.
    SegmentZero { branch: usize },
    /// A LongNet branch with dilation 0.
    DilationZero { branch: usize },
    /// An expression branch (`dilated_expr`) whose segment length or dilation rate
    /// evaluates below 1: the value, and the head (and, for the dilation, the segment
    /// index) where it does.
    BranchValue { branch: usize, parameter: &'static str, value: i64, head: usize, segment: Option<usize> },
    /// A LongNet branch whose dilation exceeds its segment length (the branch would keep
    /// one position per segment at best, and none for most offsets).
    DilationExceedsSegment { branch: usize, dilation: usize, segment: usize },
    /// A fixed offset that is not smaller than the branch's dilation.
    OffsetOutOfRange { branch: usize, offset: usize, dilation: usize },
    /// A dilated pattern with no branches.
    NoBranches,
    /// Grouped-query attention with `kv_heads` K/V heads that do not divide the `heads`
    /// query heads (each K/V head must serve the same number of query heads).
    KvHeads { heads: usize, kv_heads: usize },
    /// Head-group combine needs at least one head per branch.
    TooFewHeads { heads: usize, branches: usize },
    /// A pattern parameter that must be positive is zero (block size, ...).
    ZeroParameter { pattern: &'static str, parameter: &'static str },
    /// A user block mask whose size does not cover the sequence.
    BlockMaskTooSmall { blocks_needed: usize, rows: usize, cols: usize },
    /// An explicit mask built for another sequence length or head count.
    MaskShape { expected: Vec<usize>, got: Vec<usize> },
    /// A key-padding length longer than the sequence.
    KeyPaddingTooLong { batch: usize, length: usize, seq: usize },
    /// A position list entry outside `0..seq_len`, or listed twice.
    BadPosition { what: &'static str, position: usize, seq_len: usize },
    /// A softmax scale that is zero, negative or not finite.
    BadScale { scale: f64 },
    /// Partials of different shapes cannot be merged.
    MergeShape { left: Vec<usize>, right: Vec<usize> },
    /// A score `scale * q . k` of an allowed (query, key) pair that is not finite in the
    /// element type `dtype`: `q` and `k` are finite, but their product overflowed (or
    /// overflows of both signs made it NaN). Positions are global token positions; the
    /// first offending pair in (batch, head, query, key) order is named.
    ScoreOverflow { batch: usize, head: usize, query: usize, key: usize, score: f64, dtype: &'static str },
    /// A log-sum-exp that is NaN or `+inf` (`what` says whose: a merge operand or the
    /// `lse` of a backward's `OutputGrad`), at the first such index `[batch, head, row]`.
    /// A valid LSE is finite, or `-inf` for a row with no key.
    BadLse { what: &'static str, index: Vec<usize>, value: f64 },
    /// The backward was given `lse = -inf` (no key in the forward) for a query (global
    /// position) that has keys in this chunk: the `OutputGrad` does not belong to a
    /// forward pass of these inputs and spec.
    LseMismatch { batch: usize, head: usize, query: usize },
    /// A distributed layout over 0 ranks (or a head split over 0 parts).
    ZeroRanks,
    /// A Ulysses x ring grid whose Ulysses degree is 0 or does not divide the ranks.
    UlyssesDegree { ulysses: usize, ranks: usize },
    /// Chunk boundaries that are not `ranks + 1` non-decreasing values from 0 to `seq_len`.
    BadBoundaries { boundaries: Vec<usize>, ranks: usize, seq_len: usize },
    /// A token order that is not a permutation of `0..seq_len`: wrong length, or `token`
    /// out of range or repeated.
    NotAPermutation { len: usize, seq_len: usize, token: Option<usize> },
    /// A schedule names a rank outside `0..ranks`.
    BadRank { rank: usize, ranks: usize },
    /// A schedule names heads outside `0..heads`.
    BadHeads { start: usize, end: usize, heads: usize },
    /// A schedule computes query heads `start..end` that cut a group of `group` query
    /// heads sharing one K/V head and reach into the next group: such a range has no
    /// uniform grouping of its own (see [`crate::Heads::runs_alone`]).
    GroupSplit { start: usize, end: usize, group: usize },
    /// A schedule step needs a row that the rank does not hold (`head` is the tensor's
    /// own head: a K/V head for `K`, `V`, `dK`, `dV`).
    MissingRow { rank: usize, tensor: &'static str, token: usize, head: usize },
    /// After a phase, an accumulator row is left on a rank that does not own its token.
    StrandedRow { rank: usize, tensor: &'static str, token: usize, head: usize },
    /// A schedule computes an allowed (query, key) pair of a head `count` times instead of once.
    PairCoverage { query: usize, key: usize, head: usize, count: usize },
    /// The backward pass of a simulation was asked for before its forward pass.
    BackwardBeforeForward,
    /// Per-row document boundaries with `lists` lists for `batch` batch rows.
    DocumentRows { lists: usize, batch: usize },
    /// A document boundary list (of batch row `row`, or the flat list when `None`) whose
    /// first boundary is not 0 (`first = None`: the list is empty).
    DocumentStart { row: Option<usize>, first: Option<usize> },
    /// Boundary `index` of a document list is smaller than boundary `index - 1`.
    DocumentOrder { row: Option<usize>, index: usize, previous: usize, boundary: usize },
    /// The last document boundary is not the row's length (`seq_len`; `batch * seq_len`
    /// for a flat list).
    DocumentEnd { row: Option<usize>, last: usize, expected: usize },
    /// A flat document list without a boundary at the start `position = row * seq_len`
    /// of batch row `row` (a document would span two rows).
    DocumentRowStart { row: usize, position: usize },
    /// A tile whose `axis` ("query" or "key") range `start..end` is empty or ends past
    /// the sequence.
    BadTile { axis: &'static str, start: usize, end: usize, seq_len: usize },
}

/// `batch row 3` or `the flat list`, for document errors.
fn document_list(row: &Option<usize>) -> String {
    match row {
        Some(b) => format!("boundaries of batch row {b}"),
        None => "boundaries of the flat list".to_string(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ZeroDim { tensor, dim } => write!(f, "{tensor}: dimension `{dim}` is 0; it must be at least 1"),
            Error::ShapeMismatch { what, expected, got } => {
                write!(f, "{what}: expected shape {expected:?}, got {got:?}")
            }
            Error::NonFinite { tensor, index, value } => {
                write!(f, "{tensor}: non-finite value {value} at index {index:?}")
            }
            Error::SegmentZero { branch } => write!(f, "branch {branch}: segment_length is 0; it must be at least 1"),
            Error::DilationZero { branch } => write!(f, "branch {branch}: dilation_rate is 0; it must be at least 1"),
            Error::BranchValue { branch, parameter, value, head, segment } => {
                write!(f, "branch {branch}: {parameter} evaluates to {value} for head {head}")?;
                if let Some(s) = segment {
                    write!(f, " in segment {s}")?;
                }
                write!(f, "; it must be at least 1")
            }
            Error::DilationExceedsSegment { branch, dilation, segment } => write!(
                f,
                "branch {branch}: dilation_rate {dilation} exceeds segment_length {segment}; \
                 the dilation must be at most the segment length"
            ),
            Error::OffsetOutOfRange { branch, offset, dilation } => {
                write!(f, "branch {branch}: offset {offset} must be smaller than dilation_rate {dilation}")
            }
            Error::NoBranches => {
                write!(f, "dilated pattern: at least one (segment_length, dilation_rate) branch is required")
            }
            Error::KvHeads { heads, kv_heads } => write!(
                f,
                "grouped-query attention: {kv_heads} K/V heads do not divide {heads} query heads; \
                 the K/V head count must divide the query head count (k and v have the K/V heads)"
            ),
            Error::TooFewHeads { heads, branches } => write!(
                f,
                "head_groups combine: {heads} heads cannot be split into {branches} non-empty groups (one per branch)"
            ),
            Error::ZeroParameter { pattern, parameter } => {
                write!(f, "{pattern}: `{parameter}` is 0; it must be at least 1")
            }
            Error::BlockMaskTooSmall { blocks_needed, rows, cols } => {
                write!(f, "block mask is {rows}x{cols} blocks but the sequence needs {blocks_needed}x{blocks_needed}")
            }
            Error::MaskShape { expected, got } => {
                write!(f, "explicit mask: expected [heads, seq, seq] = {expected:?}, got {got:?}")
            }
            Error::KeyPaddingTooLong { batch, length, seq } => {
                write!(f, "key padding: batch row {batch} has length {length} > seq {seq}")
            }
            Error::BadPosition { what, position, seq_len } => {
                write!(f, "{what}: position {position} is out of range 0..{seq_len} or repeated")
            }
            Error::BadScale { scale } => write!(f, "softmax scale {scale} must be finite and positive"),
            Error::MergeShape { left, right } => {
                write!(f, "merge: partials have different shapes {left:?} and {right:?}")
            }
            Error::ScoreOverflow { batch, head, query, key, score, dtype } => write!(
                f,
                "score overflow: batch row {batch}, head {head}, query {query}, key {key}: \
                 scale * q.k = {score} is not finite in {dtype} (q and k are finite, but their \
                 scaled dot product exceeds the type's range); scale q or k down"
            ),
            Error::BadLse { what, index, value } => write!(
                f,
                "{what}: lse {value} at index {index:?}; a log-sum-exp must be finite, or -inf for a row with no key"
            ),
            Error::LseMismatch { batch, head, query } => write!(
                f,
                "backward: lse of batch row {batch}, head {head}, query {query} is -inf (no key in the forward) \
                 but the row has keys in this chunk; the OutputGrad does not belong to these inputs"
            ),
            Error::ZeroRanks => write!(f, "the number of ranks (or parts) is 0; it must be at least 1"),
            Error::UlyssesDegree { ulysses, ranks } => write!(
                f,
                "Ulysses degree {ulysses} does not divide {ranks} ranks into groups (it must be at least 1 and a \
                 divisor of the ranks)"
            ),
            Error::BadBoundaries { boundaries, ranks, seq_len } => write!(
                f,
                "chunk boundaries {boundaries:?} do not split 0..{seq_len} over {ranks} ranks: \
                 expected {} non-decreasing values from 0 to {seq_len}",
                ranks + 1
            ),
            Error::NotAPermutation { len, seq_len, token: Some(token) } => write!(
                f,
                "token order of length {len}: token {token} is out of range 0..{seq_len} or repeated; \
                 it must be a permutation of 0..{seq_len}"
            ),
            Error::NotAPermutation { len, seq_len, token: None } => {
                write!(f, "token order has {len} entries; a permutation of 0..{seq_len} has {seq_len}")
            }
            Error::BadRank { rank, ranks } => write!(f, "schedule: rank {rank} is out of range 0..{ranks}"),
            Error::BadHeads { start, end, heads } => {
                write!(f, "schedule: heads {start}..{end} are not a range inside 0..{heads}")
            }
            Error::GroupSplit { start, end, group } => write!(
                f,
                "schedule: a compute over query heads {start}..{end} cuts a group of {group} query heads \
                 that share one K/V head; it must cover whole groups or lie inside one group"
            ),
            Error::MissingRow { rank, tensor, token, head } => {
                write!(f, "schedule: rank {rank} needs {tensor} of token {token}, head {head}, but does not hold it")
            }
            Error::StrandedRow { rank, tensor, token, head } => write!(
                f,
                "schedule: {tensor} of token {token}, head {head} ends on rank {rank}, which does not own the token"
            ),
            Error::PairCoverage { query, key, head, count } => write!(
                f,
                "schedule: pair (query {query}, key {key}) of head {head} is computed {count} times; \
                 every allowed pair must be computed exactly once"
            ),
            Error::BackwardBeforeForward => write!(f, "simulation: backward called before forward"),
            Error::DocumentRows { lists, batch } => write!(
                f,
                "documents: {lists} boundary lists for {batch} batch rows; one list per batch row is required"
            ),
            Error::DocumentStart { row, first: Some(first) } => {
                write!(f, "documents: {} start at {first}; the first boundary must be 0", document_list(row))
            }
            Error::DocumentStart { row, first: None } => {
                write!(f, "documents: {} are empty; it must start at 0 and end at the row length", document_list(row))
            }
            Error::DocumentOrder { row, index, previous, boundary } => write!(
                f,
                "documents: {}: boundary {index} is {boundary}, smaller than boundary {} = {previous}; \
                 boundaries must be non-decreasing",
                document_list(row),
                index - 1
            ),
            Error::DocumentEnd { row, last, expected } => write!(
                f,
                "documents: {} end at {last}; the last boundary must be {expected} (the row length)",
                document_list(row)
            ),
            Error::DocumentRowStart { row, position } => write!(
                f,
                "documents: flat boundary list has no boundary at {position}, the start of batch row {row}; \
                 a document must not span two rows"
            ),
            Error::BadTile { axis, start, end, seq_len } => write!(
                f,
                "tile: {axis} range {start}..{end} must be non-empty and end at or before the sequence length {seq_len}"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

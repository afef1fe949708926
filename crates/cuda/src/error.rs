//! The error type of the GPU crate. Every check on user input runs on the host before
//! any launch and names the value that failed, as in the reference crate.

use std::fmt;

/// What went wrong, with the offending value.
#[derive(Debug)]
pub enum CudaError {
    /// The head dimension has no kernel (the register tiles are compile-time) that this
    /// family or device can run: `supported` lists those it can ([`crate::Family::head_dims`],
    /// on a device those whose blocks fit its shared memory: [`crate::Family::fits`]).
    UnsupportedHeadDim { head_dim: usize, supported: Vec<usize> },
    /// v's head dim differs from q's in a pair no kernel pairs (`supported`: the (q / k, v)
    /// pairs of different dims that do run, [`crate::Family::value_dim_pairs`]).
    UnsupportedValueDim { head_dim: usize, value_dim: usize, supported: Vec<(usize, usize)> },
    /// A pattern or combine rule the GPU kernels do not implement.
    Unsupported { what: &'static str },
    /// A tensor dimension that must be positive is zero.
    ZeroDim { tensor: &'static str, dim: &'static str },
    /// Grouped-query attention with a K/V head count that does not divide the query heads.
    KvHeads { heads: usize, kv_heads: usize },
    /// Two tensors disagree on a shape.
    ShapeMismatch { what: &'static str, expected: Vec<usize>, got: Vec<usize> },
    /// A pattern whose heads' outputs are scaled by different factors
    /// (`Pattern::output_scale`): the GPU applies one factor to a whole result.
    OutputScales { first: f64, head: usize, other: f64 },
    /// A chunk (ring step) that does not fit in the global sequence.
    ChunkOutOfRange { side: &'static str, offset: usize, rows: usize, stride: usize, seq_len: usize },
    /// A head slice `first..first + heads` that is not inside the pattern's `all_heads`.
    HeadSliceOutOfRange { first: usize, heads: usize, all_heads: usize },
    /// Batch rows `start..end` that are empty or not inside a batch of `batch` rows.
    BatchRows { start: usize, end: usize, batch: usize },
    /// A pattern materialised as a GPU table ([`crate::mask_table`]) that counts `key`
    /// more than once for `query` of `head` (a table holds each pair once).
    Multiplicity { query: usize, key: usize, head: usize },
    /// Packed documents with a pattern that runs as mask tables ([`crate::spec_documents`])
    /// where batch row `row`'s boundary list `other` is not row 0's `first`: a table has
    /// no batch index.
    DocumentTables { row: usize, first: Vec<usize>, other: Vec<usize> },
    /// Memory from another library that does not start on a 16-byte boundary: the
    /// kernels load 16-byte words (TMA, cp.async, vector loads).
    Misaligned { what: &'static str, address: u64 },
    /// A size that does not fit the kernels' 32-bit indexing or the launch grid.
    TooLarge { what: &'static str, value: usize, max: usize },
    /// The spec is invalid for these tensors (the reference crate's own check).
    Spec(ringdil_reference::Error),
    /// A device ordinal not below the number of visible CUDA devices.
    NoSuchDevice { ordinal: usize, count: usize },
    /// libcuda was found but NVRTC (libnvrtc) was not.
    NvrtcMissing,
    /// NVRTC rejected the kernel source; `log` is its compiler output.
    Compile { module: String, log: String },
    /// A CUDA driver call failed.
    Driver(cudarc::driver::DriverError),
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::UnsupportedHeadDim { head_dim, supported } => {
                let list: Vec<String> = supported.iter().map(|d| d.to_string()).collect();
                write!(f, "head_dim {head_dim} has no GPU kernel; supported: {}", list.join(", "))
            }
            CudaError::UnsupportedValueDim { head_dim, value_dim, supported } => {
                let list: Vec<String> = supported.iter().map(|(d, v)| format!("d = {d} with d_v = {v}")).collect();
                write!(f, "head_dim {head_dim} with value head_dim {value_dim} has no GPU kernel; ")?;
                match list.is_empty() {
                    true => write!(f, "v's head dim must equal q's here"),
                    false => write!(f, "v's head dim may differ from q's only as {}", list.join(", ")),
                }
            }
            CudaError::Unsupported { what } => write!(f, "not supported on the GPU: {what}"),
            CudaError::ZeroDim { tensor, dim } => write!(f, "{tensor}: dimension `{dim}` is 0; it must be at least 1"),
            CudaError::KvHeads { heads, kv_heads } => write!(
                f,
                "kv_heads = {kv_heads} does not divide heads = {heads}: grouped-query attention needs whole groups of query heads per K/V head"
            ),
            CudaError::OutputScales { first, head, other } => write!(
                f,
                "the pattern scales head 0's output by {first} and head {head}'s by {other}: the GPU applies one output scale to every head"
            ),
            CudaError::ShapeMismatch { what, expected, got } => {
                write!(f, "{what}: expected shape {expected:?}, got {got:?}")
            }
            CudaError::ChunkOutOfRange { side, offset, rows, stride: 1, seq_len } => {
                write!(f, "{side} chunk: offset {offset} + {rows} rows exceeds the global sequence length {seq_len}")
            }
            CudaError::ChunkOutOfRange { side, offset, rows, stride, seq_len } => write!(
                f,
                "{side} chunk: {rows} rows at positions {offset} + i * {stride} pass the global sequence length {seq_len}"
            ),
            CudaError::HeadSliceOutOfRange { first, heads, all_heads } => {
                write!(f, "head slice {first}..{} is not inside the pattern's {all_heads} heads", first + heads)
            }
            CudaError::BatchRows { start, end, batch } => {
                write!(f, "batch rows {start}..{end} are empty or not inside the batch of {batch} rows")
            }
            CudaError::Multiplicity { query, key, head } => write!(
                f,
                "the pattern counts key {key} more than once for query {query} of head {head}: a GPU mask table keeps \
                 each pair once (the built-in dilated pattern runs overlapping branches; a dilated_expr file can \
                 combine its branches by union)"
            ),
            CudaError::DocumentTables { row, first, other } => write!(
                f,
                "packed documents: batch row {row} has boundaries {} but row 0 has {}; with this pattern the GPU \
                 evaluates the documents as one mask table, which every batch row must share (pack the rows alike, \
                 or call once per row; dense and sliding-window patterns take any rows)",
                short(other),
                short(first)
            ),
            CudaError::Misaligned { what, address } => write!(
                f,
                "{what}: device address {address:#x} is not a multiple of 16 bytes; the kernels load 16-byte words (copy it to fresh memory)"
            ),
            CudaError::TooLarge { what, value, max } => write!(f, "{what} = {value} exceeds the GPU limit {max}"),
            CudaError::Spec(e) => write!(f, "invalid attention spec: {e}"),
            CudaError::NoSuchDevice { ordinal, count } => write!(
                f,
                "CUDA device {ordinal} does not exist: {count} device(s) visible (ordinals 0..{count}; check CUDA_VISIBLE_DEVICES)"
            ),
            CudaError::NvrtcMissing => write!(f, "libcuda is present but libnvrtc (NVRTC) could not be loaded"),
            CudaError::Compile { module, log } => write!(f, "NVRTC failed to compile {module}:\n{log}"),
            CudaError::Driver(e) => write!(f, "CUDA driver error: {e:?}"),
        }
    }
}

impl std::error::Error for CudaError {}

/// A boundary list for a message: whole up to 12 entries, else its first and last 5.
fn short(list: &[usize]) -> String {
    match list.len() {
        0..=12 => format!("{list:?}"),
        n => format!("{:?} ... {:?} ({n} entries)", &list[..5], &list[n - 5..]),
    }
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(e)
    }
}

impl From<ringdil_reference::Error> for CudaError {
    fn from(e: ringdil_reference::Error) -> Self {
        CudaError::Spec(e)
    }
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, CudaError>;

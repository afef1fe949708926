//! The library behind the `ringdil` command-line tool: pattern files (re-exported from
//! `ringdil-pattern-file`), tensor files, the `verify` sweep, pattern pictures and text
//! tables. Kept as a library so its pieces can be tested directly and reused from user code.

pub mod attend;
pub mod attend_gpu;
pub mod distributed;
pub mod pattern_view;
pub mod table;
pub mod tensor_io;
pub mod verify;

/// Pattern files (JSON/TOML), from their own crate so that the Python package can
/// use them without the CLI.
pub use ringdil_pattern_file as pattern_file;

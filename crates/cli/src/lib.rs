//! The library behind the `ringdil` command-line tool: pattern files, the `verify`
//! sweep and text tables. Kept as a library so its pieces can be tested directly and
//! reused from notebooks and user code.

pub mod pattern_file;
pub mod table;
pub mod verify;

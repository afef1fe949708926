//! The library behind the `ringdil` command-line tool: pattern files, tensor files,
//! the `verify` sweep, pattern pictures and text tables. Kept as a library so its
//! pieces can be tested directly and reused from user code.

pub mod attend;
pub mod distributed;
pub mod pattern_file;
pub mod pattern_view;
pub mod table;
pub mod tensor_io;
pub mod verify;

//! Rust errors as Python exceptions.
//!
//! Argument mistakes a caller can fix (shapes, dtypes, pattern fields, scales) become
//! `ValueError` / `TypeError` whose message starts with the argument's name, so the
//! message alone says which argument to fix. The reference's typed errors already name
//! the offending value; their `Display` text is passed through unchanged.

use pyo3::PyErr;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use ringdil_pattern_file::FileError;

/// A `ringdil_reference::Error` (bad shape, scale, pattern parameter, LSE, ...) as `ValueError`.
pub fn reference(error: ringdil_reference::Error) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// A pattern file that cannot be read (`OSError`, `FileNotFoundError`) or parsed or built
/// (`ValueError`); the message starts with `pattern: `.
pub fn pattern_file(error: FileError) -> PyErr {
    let message = format!("pattern: {error}");
    match &error {
        FileError::Read { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(message)
        }
        FileError::Read { .. } => PyOSError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// `ValueError("{name}: {message}")`.
pub fn value(name: &str, message: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{name}: {message}"))
}

//! Tensor files: NumPy `.npy` and `.safetensors`, in the `[batch, seq, heads, head_dim]`
//! layout, so that PyTorch users can feed their own tensors to the reference.
//!
//! `.npy` holds f32 or f64. A `.safetensors` file is named `FILE.safetensors:NAME`
//! (or just `FILE.safetensors` when it holds one tensor) and may hold f64, f32, bf16
//! or f16; bf16 and f16 are widened to f32 exactly, and the reference then computes in
//! f32, as the precision rule says.

use ndarray::{Array4, ArrayD, IxDyn};
use safetensors::{Dtype, SafeTensors};
use std::fmt;
use std::path::Path;

/// A tensor as read: its element type decides the precision of the computation.
#[derive(Debug, Clone, PartialEq)]
pub enum Tensor {
    F32(Array4<f32>),
    F64(Array4<f64>),
}

impl Tensor {
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32(a) => a.shape(),
            Tensor::F64(a) => a.shape(),
        }
    }

    pub fn dtype(&self) -> &'static str {
        match self {
            Tensor::F32(_) => "f32",
            Tensor::F64(_) => "f64",
        }
    }

    pub fn to_f64(&self) -> Array4<f64> {
        match self {
            Tensor::F32(a) => a.mapv(f64::from),
            Tensor::F64(a) => a.clone(),
        }
    }

    pub fn to_f32(&self) -> Array4<f32> {
        match self {
            Tensor::F32(a) => a.clone(),
            Tensor::F64(a) => a.mapv(|x| x as f32),
        }
    }
}

/// Why a tensor file could not be used; every variant names the file.
#[derive(Debug)]
pub enum IoError {
    Io { path: String, message: String },
    Format { path: String, message: String },
    Rank { path: String, shape: Vec<usize> },
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::Io { path, message } => write!(f, "{path}: {message}"),
            IoError::Format { path, message } => write!(f, "{path}: {message}"),
            IoError::Rank { path, shape } => {
                write!(f, "{path}: shape {shape:?} is not 4-dimensional; expected [batch, seq, heads, head_dim]")
            }
        }
    }
}

impl std::error::Error for IoError {}

fn format_error(path: &str, message: impl fmt::Display) -> IoError {
    IoError::Format { path: path.to_string(), message: message.to_string() }
}

fn rank4<T>(path: &str, a: ArrayD<T>) -> Result<Array4<T>, IoError> {
    let shape = a.shape().to_vec();
    a.into_dimensionality().map_err(|_| IoError::Rank { path: path.to_string(), shape })
}

/// Read `PATH.npy`, `PATH.safetensors` or `PATH.safetensors:NAME`.
pub fn read(spec: &str) -> Result<Tensor, IoError> {
    let (path, name) = match spec.split_once(".safetensors:") {
        Some((stem, name)) => (format!("{stem}.safetensors"), Some(name)),
        None => (spec.to_string(), None),
    };
    let io = |e: std::io::Error| IoError::Io { path: path.clone(), message: e.to_string() };
    if path.ends_with(".safetensors") {
        let bytes = std::fs::read(&path).map_err(io)?;
        return read_safetensors(&path, &bytes, name);
    }
    let file = || std::fs::File::open(&path).map_err(io);
    use ndarray_npy::ReadNpyExt;
    match ArrayD::<f64>::read_npy(file()?) {
        Ok(a) => Ok(Tensor::F64(rank4(&path, a)?)),
        Err(_) => match ArrayD::<f32>::read_npy(file()?) {
            Ok(a) => Ok(Tensor::F32(rank4(&path, a)?)),
            Err(e) => Err(format_error(&path, format!("not an f32 or f64 .npy array: {e}"))),
        },
    }
}

fn read_safetensors(path: &str, bytes: &[u8], name: Option<&str>) -> Result<Tensor, IoError> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| format_error(path, e))?;
    let name = match name {
        Some(n) => n.to_string(),
        None => match file.names().as_slice() {
            [only] => only.to_string(),
            names => {
                return Err(format_error(path, format!("holds tensors {names:?}; name one as {path}:NAME")));
            }
        },
    };
    let view = file.tensor(&name).map_err(|e| format_error(path, format!("tensor `{name}`: {e}")))?;
    let shape = IxDyn(view.shape());
    let data = view.data();
    let words = |size: usize| data.chunks_exact(size);
    let widened = |values: Vec<f32>| Ok(Tensor::F32(from_values(path, &shape, values)?));
    match view.dtype() {
        Dtype::F64 => {
            let values = words(8).map(|w| f64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
            Ok(Tensor::F64(from_values(path, &shape, values)?))
        }
        Dtype::F32 => widened(words(4).map(|w| f32::from_le_bytes(w.try_into().expect("4 bytes"))).collect()),
        Dtype::BF16 => widened(words(2).map(|w| half::bf16::from_le_bytes([w[0], w[1]]).to_f32()).collect()),
        Dtype::F16 => widened(words(2).map(|w| half::f16::from_le_bytes([w[0], w[1]]).to_f32()).collect()),
        other => {
            Err(format_error(path, format!("tensor `{name}` has dtype {other:?}; expected F64, F32, BF16 or F16")))
        }
    }
}

fn from_values<T>(path: &str, shape: &IxDyn, values: Vec<T>) -> Result<Array4<T>, IoError> {
    rank4(path, ArrayD::from_shape_vec(shape.clone(), values).map_err(|e| format_error(path, e))?)
}

/// Write an f32 or f64 array of any rank as `.npy`.
pub fn write_npy<T: ndarray_npy::WritableElement, D: ndarray::Dimension>(
    path: &Path,
    a: &ndarray::Array<T, D>,
) -> Result<(), IoError> {
    ndarray_npy::write_npy(path, a)
        .map_err(|e| IoError::Io { path: path.display().to_string(), message: e.to_string() })
}

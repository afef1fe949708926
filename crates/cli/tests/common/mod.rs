//! What the `ringdil` binary's tests share: running it from the workspace root, and
//! tensors written to scratch `.npy` files.
#![allow(dead_code)] // each test file uses its own subset

use ndarray::Array4;
use ndarray_npy::write_npy;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run `ringdil ARGS` in the workspace root: (stdout, stderr, exit code).
pub fn ringdil(args: &[&str]) -> (String, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_ringdil"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("the ringdil binary runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringdil-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// Write `inputs` as `PREFIX-q.npy`, `-k`, `-v` and name `outputs` files after them;
/// returns all paths as arguments, inputs first.
pub fn npy_files(prefix: &str, inputs: &[&Array4<f64>; 3], outputs: &[&str]) -> Vec<String> {
    let mut paths = Vec::new();
    for (name, x) in ["q", "k", "v"].iter().zip(inputs) {
        let path = scratch(&format!("{prefix}-{name}.npy"));
        write_npy(&path, *x).unwrap();
        paths.push(path);
    }
    paths.extend(outputs.iter().map(|name| scratch(&format!("{prefix}-{name}.npy"))));
    paths.iter().map(|p| p.to_str().unwrap().to_string()).collect()
}

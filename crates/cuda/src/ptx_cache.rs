//! NVRTC's output kept on disk, so that a new process (a notebook's restarted kernel, the
//! next script of a training job, each shard of a check) does not compile again a kernel
//! module that an earlier one compiled.
//!
//! # Why
//! A module is compiled at the first call that needs it: NVRTC takes 10-30 s of one CPU
//! core per module, then the driver turns the PTX into machine code (the driver keeps that
//! step's result in its own disk cache, `~/.nv/ComputeCache`, keyed by the PTX). Without
//! this cache every process paid NVRTC again for the same source.
//!
//! # Key
//! A file holds the PTX of one compilation and is named by the SHA-256 of everything
//! that decides it: the translation unit's whole text (kernel files and generated headers:
//! the contract, the expression, the tile sizes), NVRTC's options (target, defines) and
//! NVRTC's version. Any change to one of them names another file, so a stale entry is never
//! read. A file is written under a temporary name and renamed into place, so a reader sees
//! all of it or nothing.
//!
//! # One compile per entry
//! Processes started together (the shards of `gpu_check --jobs`, `ring_check --jobs`)
//! need the same modules at the same moment. The first to miss an entry claims its
//! compile by creating `<entry>.lock` exclusively, with its process id in it; the others
//! wait for the entry instead of compiling it too ([`claim`]). A claim ends when its
//! holder stores the entry or gives up (the lock is removed either way, [`Compile`]'s
//! drop); a lock whose process is gone (killed mid-compile: `/proc/<pid>` absent) or older
//! than [`STALE_AFTER`] is taken over, so a dead holder costs a waiter one poll.
//!
//! # Where
//! [`CACHE_ENV`] names the directory (`off` turns the cache off); unset, it is
//! `$XDG_CACHE_HOME/ringdil/ptx`, else `$HOME/.cache/ringdil/ptx`; with neither, there is
//! no cache. A directory that cannot be created or written only costs the compile.

use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The cache directory, or `off`.
pub const CACHE_ENV: &str = "RINGDIL_PTX_CACHE";

/// The directory of the cache, `None` when it is off or there is no home to put it in.
pub fn dir() -> Option<PathBuf> {
    dir_from(|name| std::env::var_os(name))
}

/// [`dir`] with the environment read through `var`.
fn dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    match set(CACHE_ENV) {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => {
            let base = set("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(base.join("ringdil").join("ptx"))
        }
    }
}

/// The key of one compilation: SHA-256 (hex) of its source, its options and the NVRTC
/// version, each part length-prefixed so that no two different inputs run together.
pub fn key(source: &str, options: &[String], nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(source.as_bytes());
    for o in options {
        part(o.as_bytes());
    }
    part(format!("nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    h.finalize().iter().fold(String::with_capacity(64), |mut s, b| {
        write!(s, "{b:02x}").expect("write to a String");
        s
    })
}

/// The file of module `module` under `key`.
fn path(dir: &Path, module: &str, key: &str) -> PathBuf {
    dir.join(format!("{module}-{key}.ptx"))
}

/// The PTX stored for (`module`, `key`), if any.
pub fn load(dir: &Path, module: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path(dir, module, key)).ok()
}

/// Store `ptx` for (`module`, `key`): written to a name of this process, then renamed into
/// place (a rename within one directory replaces the target whole). Failures are ignored:
/// the next process compiles instead.
pub fn store(dir: &Path, module: &str, key: &str, ptx: &str) {
    let target = path(dir, module, key);
    let temporary = dir.join(format!(".{module}-{key}.{}.tmp", std::process::id()));
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&temporary, ptx))
        .and_then(|()| std::fs::rename(&temporary, &target));
    if written.is_err() {
        // A partial temporary file is no entry; leave nothing behind.
        drop(std::fs::remove_file(&temporary));
    }
}

/// A lock older than this is taken over whatever its holder: longer than any module's
/// compile (the largest take about a minute of one core, several at once on a loaded host).
pub const STALE_AFTER: Duration = Duration::from_secs(600);
/// How often a waiter looks for the entry.
const POLL: Duration = Duration::from_millis(100);

/// The compile of one entry, claimed by this process: its lock, removed on drop (after
/// [`store`], or when the compile failed, so that a waiter compiles instead). `None`
/// where there is no lock to hold (a directory that cannot be written).
pub struct Compile(Option<PathBuf>);

impl Drop for Compile {
    fn drop(&mut self) {
        if let Some(lock) = &self.0 {
            drop(std::fs::remove_file(lock));
        }
    }
}

/// What [`claim`] found.
pub enum Claim {
    /// The entry's PTX: stored already, or by the process that held its compile.
    Ready(String),
    /// This process compiles the entry; store it before dropping the claim.
    Compile(Compile),
}

/// The entry (`module`, `key`) if stored, else the right to compile it, waiting while a
/// live process holds that right (module docs, "One compile per entry").
pub fn claim(dir: &Path, module: &str, key: &str) -> Claim {
    let lock = dir.join(format!("{module}-{key}.lock"));
    loop {
        if let Some(ptx) = load(dir, module, key) {
            return Claim::Ready(ptx);
        }
        if std::fs::create_dir_all(dir).is_err() {
            return Claim::Compile(Compile(None));
        }
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(mut file) => {
                use std::io::Write as _;
                drop(write!(file, "{}", std::process::id()));
                // The holder may have stored the entry between the load and the lock.
                if let Some(ptx) = load(dir, module, key) {
                    drop(std::fs::remove_file(&lock));
                    return Claim::Ready(ptx);
                }
                return Claim::Compile(Compile(Some(lock)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if held_by_the_dead(&lock) {
                    // Taken over: the next pass creates it anew (or waits for a faster taker).
                    drop(std::fs::remove_file(&lock));
                } else {
                    std::thread::sleep(POLL);
                }
            }
            Err(_) => return Claim::Compile(Compile(None)),
        }
    }
}

/// Is `lock` left by a process that no longer runs, or older than [`STALE_AFTER`]? A lock
/// that vanished meanwhile is no one's (false: the caller looks again).
fn held_by_the_dead(lock: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(lock) else { return false };
    let age = meta.modified().ok().and_then(|t| SystemTime::now().duration_since(t).ok());
    if age.is_some_and(|a| a > STALE_AFTER) {
        return true;
    }
    // The holder's id (an empty file: its holder is between create and write).
    let pid = std::fs::read_to_string(lock).ok().and_then(|s| s.trim().parse::<u32>().ok());
    let proc = Path::new("/proc");
    matches!(pid, Some(pid) if proc.is_dir() && !proc.join(pid.to_string()).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_directory_follows_the_variable_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        assert_eq!(dir_from(env(&[(CACHE_ENV, "/c"), ("HOME", "/h")])), Some(PathBuf::from("/c")));
        assert_eq!(dir_from(env(&[(CACHE_ENV, "off"), ("HOME", "/h")])), None);
        assert_eq!(
            dir_from(env(&[(CACHE_ENV, ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/ringdil/ptx"))
        );
        assert_eq!(
            dir_from(env(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/ringdil/ptx"))
        );
        assert_eq!(dir_from(env(&[])), None);
    }

    #[test]
    fn the_key_changes_with_the_source_the_options_and_the_version() {
        let base = key("src", &opts(&["--gpu-architecture=sm_90a"]), (13, 0));
        assert_eq!(base.len(), 64);
        assert_eq!(base, key("src", &opts(&["--gpu-architecture=sm_90a"]), (13, 0)));
        for other in [
            key("src ", &opts(&["--gpu-architecture=sm_90a"]), (13, 0)),
            key("src", &opts(&["--gpu-architecture=sm_80"]), (13, 0)),
            key("src", &opts(&["--gpu-architecture=sm_90a", "-DX=1"]), (13, 0)),
            key("src", &opts(&["--gpu-architecture=sm_90a"]), (13, 1)),
            // Parts do not run together: the same bytes split differently.
            key("srcA", &opts(&["B"]), (13, 0)),
        ] {
            assert_ne!(base, other);
        }
        assert_ne!(key("srcA", &opts(&["B"]), (13, 0)), key("src", &opts(&["AB"]), (13, 0)));
    }

    /// SHA-256 itself, against the standard's test vector, so that a key is the digest
    /// the docs say (and the same on every machine and Rust version).
    #[test]
    fn sha256_of_abc_is_the_published_digest() {
        let digest: String = Sha256::digest(b"abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(digest, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn a_stored_entry_is_read_back_and_a_missing_one_is_none() {
        let dir = scratch("cache-test");
        let k = key("src", &[], (13, 0));
        assert_eq!(load(&dir, "m", &k), None);
        store(&dir, "m", &k, ".version 8.8\n");
        assert_eq!(load(&dir, "m", &k).as_deref(), Some(".version 8.8\n"));
        assert_eq!(load(&dir, "other", &k), None);
        // No temporary file is left next to the entry.
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringdil-ptx-{name}-{}", std::process::id()));
        drop(std::fs::remove_dir_all(&dir));
        dir
    }

    /// A claim of entry ("m", "k") in `dir` by another thread, started now.
    fn claim_elsewhere(dir: &Path) -> std::thread::JoinHandle<Claim> {
        let dir = dir.to_path_buf();
        std::thread::spawn(move || claim(&dir, "m", "k"))
    }

    #[test]
    fn a_second_claimer_waits_for_the_first_ones_entry() {
        let dir = scratch("claim-wait");
        let Claim::Compile(first) = claim(&dir, "m", "k") else { panic!("an empty cache has no entry") };
        let waiter = claim_elsewhere(&dir);
        std::thread::sleep(3 * POLL);
        assert!(!waiter.is_finished(), "the waiter returned before the entry was stored");
        store(&dir, "m", "k", "ptx of m");
        drop(first);
        match waiter.join().unwrap() {
            Claim::Ready(ptx) => assert_eq!(ptx, "ptx of m"),
            Claim::Compile(_) => panic!("compiled while the first claim was held"),
        }
        // The lock is gone with the claim; only the entry is left.
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["m-k.ptx"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_claim_given_up_or_left_by_a_dead_process_passes_on() {
        let dir = scratch("claim-dead");
        // Given up (a compile that failed): the waiter compiles.
        let Claim::Compile(first) = claim(&dir, "m", "k") else { panic!("no entry yet") };
        let waiter = claim_elsewhere(&dir);
        std::thread::sleep(3 * POLL);
        drop(first);
        assert!(matches!(waiter.join().unwrap(), Claim::Compile(_)), "the waiter did not take the compile over");
        // A lock whose process is gone (no such pid) is taken over at once, where the
        // system lists its processes under /proc.
        if Path::new("/proc").is_dir() {
            std::fs::write(dir.join("m-k.lock"), "4294967295").unwrap();
            let start = std::time::Instant::now();
            assert!(matches!(claim(&dir, "m", "k"), Claim::Compile(_)));
            assert!(start.elapsed() < STALE_AFTER / 10);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_directory_costs_only_the_entry() {
        // A directory path below a file cannot be created.
        let file = std::env::temp_dir().join(format!("ringdil-ptx-cache-file-{}", std::process::id()));
        std::fs::write(&file, "x").unwrap();
        let dir = file.join("ptx");
        store(&dir, "m", "k", "ptx");
        assert_eq!(load(&dir, "m", "k"), None);
        // No lock can be taken there: the caller compiles, unlocked.
        assert!(matches!(claim(&dir, "m", "k"), Claim::Compile(Compile(None))));
        std::fs::remove_file(&file).unwrap();
    }
}

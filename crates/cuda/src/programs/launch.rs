//! The launch flags the distributed programs share (`ring_check`, `ring_bench`):
//!
//! ```text
//! --nproc N            processes on this host, one GPU each
//! --nnodes H           hosts of the launch (default 1)
//! --node-rank I        this host's index, 0 <= I < H (default 0)
//! --id-file PATH       the NCCL id file, on a filesystem every host sees (or export
//!                      NCCL_COMM_ID=host:port on every host instead)
//! --timeout SECONDS    the watchdog's timeout (RINGDIL_TIMEOUT_S; 0 = off)
//! ```

use super::Args;
use crate::dist::{LaunchOptions, watchdog};
use std::time::Duration;

impl Args {
    /// [`Args::try_launch_options`], stopping with exit code 2 and the message.
    pub fn launch_options(&self, nproc: usize) -> LaunchOptions {
        self.try_launch_options(nproc).unwrap_or_else(|m| self.fail(2, m))
    }

    /// The launch `--nproc` (given as `nproc`), `--nnodes`, `--node-rank` and
    /// `--id-file` ask for, validated; the message names the flag or value at fault.
    pub fn try_launch_options(&self, nproc: usize) -> Result<LaunchOptions, String> {
        let int = |flag: &str| -> Result<Option<usize>, String> {
            self.value(flag).map(|v| v.parse().map_err(|_| format!("{flag} takes an integer, got {v:?}"))).transpose()
        };
        let o = LaunchOptions {
            nproc,
            nnodes: int("--nnodes")?.unwrap_or(1),
            node_rank: int("--node-rank")?.unwrap_or(0),
            id_file: self.value("--id-file").map(Into::into),
        };
        o.validate().map_err(|e| e.to_string())?;
        Ok(o)
    }

    /// `--timeout SECONDS`: `Some(None)` for 0 (watchdog off), `None` when not given.
    pub fn timeout(&self) -> Option<Option<Duration>> {
        let text = self.value("--timeout")?;
        Some(watchdog::parse_timeout("--timeout", &text).unwrap_or_else(|e| self.fail(2, e)))
    }
}

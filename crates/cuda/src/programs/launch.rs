//! The launch flags the distributed programs share (`ring_check`, `ring_bench`):
//!
//! ```text
//! --nproc N            processes on this host, one GPU each
//! --nnodes H           hosts of the launch (default 1)
//! --node-rank I        this host's index, 0 <= I < H (default 0)
//! --id-file PATH       the NCCL id file, on a filesystem every host sees (or export
//!                      RINGDIL_NCCL_ID on every host instead)
//! --timeout SECONDS    the watchdog's timeout (RINGDIL_TIMEOUT_S; 0 = off)
//! --print-nccl-id      print a fresh NCCL unique id (hex) for RINGDIL_NCCL_ID and stop
//! ```

use super::Args;
use crate::dist::{LaunchOptions, UniqueId, watchdog};
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

    /// With `--print-nccl-id`: print a fresh NCCL unique id (256 hex digits, for
    /// `RINGDIL_NCCL_ID`) and exit 0 (1 when libnccl cannot make one).
    pub fn print_nccl_id(&self) {
        if self.switch("--print-nccl-id") {
            // cudarc panics when libnccl cannot be loaded: that is a message, not a crash.
            std::panic::set_hook(Box::new(|_| {}));
            match std::panic::catch_unwind(UniqueId::new) {
                Ok(Ok(id)) => println!("{}", id.to_hex()),
                Ok(Err(e)) => self.fail(1, format!("no NCCL id: {e}")),
                Err(_) => self.fail(1, "no NCCL id: libnccl could not be loaded (LD_LIBRARY_PATH?)"),
            }
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Program;
    use super::*;

    fn args(line: &str) -> Args {
        Args::new(Program::RingCheck, line.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn the_launch_flags_make_the_launch_options() {
        let o = args("--nproc 1 --nnodes 2 --node-rank 1 --id-file /shared/id").try_launch_options(1).unwrap();
        assert_eq!(o, LaunchOptions { nproc: 1, nnodes: 2, node_rank: 1, id_file: Some("/shared/id".into()) });
        assert_eq!(args("--nproc 4").try_launch_options(4).unwrap(), LaunchOptions::local(4));
        let e = args("--nnodes 2 --node-rank 2 --id-file /x").try_launch_options(1).unwrap_err();
        assert_eq!(e, "launch: node_rank = 2: must be below nnodes");
        let e = args("--nnodes two").try_launch_options(1).unwrap_err();
        assert_eq!(e, "--nnodes takes an integer, got \"two\"");
        assert!(args("").try_launch_options(0).unwrap_err().contains("nproc = 0"));
    }

    #[test]
    fn the_timeout_flag_is_seconds_and_zero_is_off() {
        assert_eq!(args("--timeout 20").timeout(), Some(Some(Duration::from_secs(20))));
        assert_eq!(args("--timeout 0").timeout(), Some(None));
        assert_eq!(args("--seed 1").timeout(), None);
    }
}

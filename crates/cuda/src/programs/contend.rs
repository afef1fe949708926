//! `--contend MS`: a check run beside another CUDA context that keeps the GPU busy.
//!
//! # Why
//! Without MPS a GPU runs one context at a time and time-slices between contexts that both
//! have work: when a slice ends, the running kernels are preempted mid-flight and resumed
//! later. A kernel, or the way its launches meet the rest of the context's work, can pass
//! every run alone and fail beside another process: the wgmma backward does, on ring pieces
//! (`docs/benchmarks/profiles/ring-grad-race.md`, cause not yet found). With `--contend MS`
//! a check starts a second process of its own binary (`--contend-child MS`), which opens
//! its own context and launches, back to back and each waited for, a kernel in which one
//! block per multiprocessor spins for MS milliseconds. Every case of the check then runs
//! under time-slicing, as it would beside a training job on a shared GPU.
//!
//! The contender stops when the check drops it, and by itself once its parent is gone
//! (a check that exits through `std::process::exit` drops nothing): it looks after each
//! launch.

use super::Args;
use crate::Gpu;
use cudarc::driver::{LaunchConfig, PushKernelArg};
use std::process::{Child, Command, Stdio};

/// The switch of a check that wants a contender, with its kernel's length in milliseconds.
pub const CONTEND: &str = "--contend";
/// The contender's own switch (the same length).
pub const CONTEND_CHILD: &str = "--contend-child";

/// The longest spin a contender launch may take: a context switch waits for nothing this
/// long in practice, and a longer launch only slows the check.
pub const MAX_MS: u64 = 1000;

const SOURCE: &str = r#"
extern "C" __global__ void ringdil_contend(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"#;

/// The milliseconds after `flag`, if given: 1 to [`MAX_MS`], else an error naming the value.
pub fn millis(args: &Args, flag: &str) -> Result<Option<u64>, String> {
    let Some(text) = args.value(flag) else { return Ok(None) };
    match text.parse::<u64>() {
        Ok(ms) if (1..=MAX_MS).contains(&ms) => Ok(Some(ms)),
        _ => Err(format!("{flag} takes milliseconds from 1 to {MAX_MS}, got {text:?}")),
    }
}

/// The contender process of a check; killed and waited for when dropped.
#[derive(Debug)]
pub struct Contender(Child);

impl Contender {
    /// With `--contend MS` among `args`, start this binary again as `--contend-child MS`
    /// (no other argument); `None` without the switch.
    pub fn start(args: &Args) -> Result<Option<Contender>, String> {
        let Some(ms) = millis(args, CONTEND)? else { return Ok(None) };
        let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
        // Its standard output stays out of the check's (a log read to its end would wait
        // for the contender too); its errors go to the check's standard error.
        Self::spawn(Command::new(exe).args([CONTEND_CHILD, &ms.to_string()]).stdin(Stdio::null()).stdout(Stdio::null()))
    }

    fn spawn(cmd: &mut Command) -> Result<Option<Contender>, String> {
        cmd.spawn().map(|c| Some(Contender(c))).map_err(|e| format!("starting the contender: {e}"))
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        // It may have stopped already (no GPU, or its own error): nothing to kill then.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With `--contend-child MS` among `args`, be the contender: spin on this machine's GPU
/// until the parent is gone, then exit (0; 1 with the error on a CUDA failure; 2 on a bad
/// value). Without the switch, return at once. Without a GPU, exit 0: the check itself
/// reports the skip.
pub fn child_main_if_asked(args: &Args) {
    let ms = match millis(args, CONTEND_CHILD) {
        Ok(None) => return,
        Ok(Some(ms)) => ms,
        Err(e) => args.fail(2, e),
    };
    let parent = std::os::unix::process::parent_id();
    let gpu = match Gpu::probe() {
        Ok(Some(gpu)) => gpu,
        Ok(None) => std::process::exit(0),
        Err(e) => args.fail(1, format!("contender: {e}")),
    };
    if let Err(e) = spin_while(&gpu, ms, || std::os::unix::process::parent_id() == parent) {
        args.fail(1, format!("contender: {e}"));
    }
    std::process::exit(0);
}

/// Launch the spin kernel (one block of 32 threads per multiprocessor, `ms` milliseconds)
/// and wait for it, again and again while `go` holds.
fn spin_while(gpu: &Gpu, ms: u64, go: impl Fn() -> bool) -> Result<(), String> {
    let ptx = cudarc::nvrtc::compile_ptx(SOURCE).map_err(|e| format!("compiling the spin kernel: {e:?}"))?;
    let module = gpu.context().load_module(ptx).map_err(|e| e.to_string())?;
    let f = module.load_function("ringdil_contend").map_err(|e| e.to_string())?;
    let ns = ms * 1_000_000;
    let config = LaunchConfig { grid_dim: (gpu.sms, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    while go() {
        let mut l = gpu.stream.launch_builder(&f);
        l.arg(&ns);
        // SAFETY: the kernel takes one integer and touches no memory.
        unsafe { l.launch(config) }.map_err(|e| e.to_string())?;
        gpu.stream.synchronize().map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::Program;

    fn args(line: &str) -> Args {
        Args::of_line(Program::RingCheck, line)
    }

    #[test]
    fn the_length_is_milliseconds_within_bounds() {
        assert_eq!(millis(&args("--only x"), CONTEND), Ok(None));
        assert_eq!(millis(&args("--contend 20 --only x"), CONTEND), Ok(Some(20)));
        assert_eq!(millis(&args("--contend-child 1000"), CONTEND_CHILD), Ok(Some(1000)));
        for bad in ["0", "1001", "-3", "fast"] {
            let e = millis(&args(&format!("--contend {bad}")), CONTEND).unwrap_err();
            assert!(e.contains("--contend takes milliseconds from 1 to 1000") && e.contains(bad), "{e}");
        }
        // A check's switch is not the contender's, nor the other way round.
        assert_eq!(millis(&args("--contend 20"), CONTEND_CHILD), Ok(None));
        assert_eq!(millis(&args("--contend-child 20"), CONTEND), Ok(None));
    }

    #[test]
    fn dropping_the_contender_stops_its_process() {
        let c = Contender::spawn(Command::new("sleep").arg("30")).unwrap().unwrap();
        let pid = c.0.id();
        let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
        assert!(proc.exists());
        let started = std::time::Instant::now();
        drop(c);
        assert!(!proc.exists(), "process {pid} still there after the drop");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}

//! The GPU programs' command lines, and how the programs stop.

use crate::Gpu;
use std::fmt::Display;
use std::str::FromStr;

/// One of the four GPU programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    GpuCheck,
    GpuBench,
    RingCheck,
    RingBench,
}

impl Program {
    /// The name its messages start with (`ring check: skipped: no CUDA device`).
    pub fn name(self) -> &'static str {
        match self {
            Program::GpuCheck => "GPU check",
            Program::GpuBench => "GPU bench",
            Program::RingCheck => "ring check",
            Program::RingBench => "ring bench",
        }
    }

    /// Its binary, the first word of the command its reports record.
    pub fn binary(self) -> &'static str {
        match self {
            Program::GpuCheck => "gpu_check",
            Program::GpuBench => "gpu_bench",
            Program::RingCheck => "ring_check",
            Program::RingBench => "ring_bench",
        }
    }

    /// Checks count passes and failures, so a skip must say that nothing passed.
    fn is_check(self) -> bool {
        matches!(self, Program::GpuCheck | Program::RingCheck)
    }
}

/// A program's command line: `--flag value` options (the value is the next argument)
/// and bare `--switch`es. Arguments are kept in order, so a program that starts copies
/// of itself (one process per GPU) hands them on unchanged ([`Args::rest`]).
#[derive(Debug, Clone)]
pub struct Args {
    program: Program,
    args: Vec<String>,
}

impl Args {
    /// This process's arguments (after the program's own path).
    pub fn from_env(program: Program) -> Args {
        Args::new(program, std::env::args().skip(1).collect())
    }

    /// `args` as given after the program's path.
    pub fn new(program: Program, args: Vec<String>) -> Args {
        Args { program, args }
    }

    /// The arguments of a command line written as one string (words split at spaces), for
    /// tests.
    #[cfg(test)]
    pub(crate) fn of_line(program: Program, line: &str) -> Args {
        Args::new(program, line.split_whitespace().map(String::from).collect())
    }

    /// The value after `flag`, if the flag is given.
    pub fn value(&self, flag: &str) -> Option<String> {
        self.args.iter().position(|a| a == flag).and_then(|i| self.args.get(i + 1)).cloned()
    }

    /// The integer after `flag`, if the flag is given; a value that is not one stops the
    /// program with exit code 2 and a message naming the flag.
    pub fn integer<T: FromStr>(&self, flag: &str) -> Option<T> {
        self.parse(flag).unwrap_or_else(|message| self.fail(2, message))
    }

    fn parse<T: FromStr>(&self, flag: &str) -> Result<Option<T>, String> {
        self.value(flag).map(|v| v.parse().map_err(|_| format!("{flag} takes an integer, got {v:?}"))).transpose()
    }

    /// Whether the bare switch `flag` is given.
    pub fn switch(&self, flag: &str) -> bool {
        self.args.iter().any(|a| a == flag)
    }

    /// `--date`, as the reports record it (`unknown` without).
    pub fn date(&self) -> String {
        self.value("--date").unwrap_or_else(|| "unknown".into())
    }

    /// The command line as the reports record it: the binary and its arguments.
    pub fn command(&self) -> String {
        std::iter::once(self.program.binary()).chain(self.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
    }

    /// The arguments after the program's path, for copies of the program to start with.
    pub fn rest(&self) -> &[String] {
        &self.args
    }

    /// Stop with `code`, printing `{name}: {message}` on stderr.
    pub fn fail(&self, code: i32, message: impl Display) -> ! {
        eprintln!("{}: {message}", self.program.name());
        std::process::exit(code);
    }

    /// Stop on a machine without a CUDA device. A check prints
    /// `{name}: skipped: no CUDA device (0 passed, 0 failed, all skipped)` and exits 0, or
    /// 1 with `--require-gpu`, so that a skip is never read as a pass; a benchmark prints
    /// `{name}: skipped: no CUDA device` and exits 0.
    pub fn skip(&self) -> ! {
        let name = self.program.name();
        if !self.program.is_check() {
            println!("{name}: skipped: no CUDA device");
            std::process::exit(0);
        }
        println!("{name}: skipped: no CUDA device (0 passed, 0 failed, all skipped)");
        std::process::exit(if self.switch("--require-gpu") { 1 } else { 0 });
    }

    /// This machine's GPU; without one the program skips ([`Args::skip`]), and a CUDA
    /// that is installed but unusable stops it with exit code 1.
    pub fn gpu(&self) -> Gpu {
        match Gpu::probe() {
            Ok(Some(gpu)) => gpu,
            Ok(None) => self.skip(),
            Err(e) => self.fail(1, format!("error: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Args {
        Args::of_line(Program::RingCheck, line)
    }

    #[test]
    fn flags_take_the_next_argument_and_switches_stand_alone() {
        let a = args("--seed 7 --require-gpu --log out.md --rings 2");
        assert_eq!(a.value("--log").as_deref(), Some("out.md"));
        assert_eq!(a.integer::<u64>("--seed"), Some(7));
        assert_eq!(a.integer::<usize>("--rings"), Some(2));
        assert_eq!(a.integer::<usize>("--nproc"), None);
        assert!(a.switch("--require-gpu") && !a.switch("--threads"));
        assert_eq!(a.value("--rings").as_deref(), Some("2"));
        assert_eq!(args("--log").value("--log"), None, "a flag at the end has no value");
    }

    #[test]
    fn a_bad_integer_names_the_flag_and_the_value() {
        assert_eq!(args("--nproc two").parse::<usize>("--nproc").unwrap_err(), "--nproc takes an integer, got \"two\"");
        assert!(args("--seed -1").parse::<u64>("--seed").is_err());
    }

    #[test]
    fn the_recorded_command_is_the_binary_and_its_arguments() {
        assert_eq!(args("--seed 7 --require-gpu").command(), "ring_check --seed 7 --require-gpu");
        assert_eq!(args("").command(), "ring_check");
        assert_eq!(Args::new(Program::GpuBench, vec![]).command(), "gpu_bench");
        assert_eq!(args("--seed 7").rest(), ["--seed", "7"]);
        assert_eq!(args("--date 2026-01-02").date(), "2026-01-02");
        assert_eq!(args("").date(), "unknown");
    }

    #[test]
    fn only_checks_count_their_skips() {
        let checks: Vec<Program> = [Program::GpuCheck, Program::GpuBench, Program::RingCheck, Program::RingBench]
            .into_iter()
            .filter(|p| p.is_check())
            .collect();
        assert_eq!(checks, [Program::GpuCheck, Program::RingCheck]);
        assert_eq!(Program::RingBench.name(), "ring bench");
    }
}

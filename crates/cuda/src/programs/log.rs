//! The Markdown log of a check run (`gpu_check`, `ring_check`).

use crate::check::Metric;
use ringdil_reference::compare::worst;
use std::fmt::Write;

/// A check run's log: one Markdown table row per case, its console line, the pass / fail
/// counts and the worst error per quantity. The program writes the header before
/// [`CheckLog::rows`] and its own summary tables after them.
#[derive(Debug, Default)]
pub struct CheckLog {
    rows: String,
    passed: usize,
    failed: usize,
    /// `(quantity, worst error, bound)` in the order first seen.
    worst: Vec<(String, f64, f64)>,
}

impl CheckLog {
    /// Record a case measured by `metrics`: it passes when every metric is within its
    /// bound ([`Metric::passed`]; NaN never is). Writes the table row
    /// `| {number} | pass | {label} | out 1.20e-3, lse 4.00e-4{extra} |` (without the
    /// number when there is none, `**FAIL**` for a failure), prints
    /// `PASS {label} | out 1.20e-3, lse 4.00e-4{extra}`, and keeps each error for the
    /// worst-error table under `{group} {what}`. Returns whether the case passed.
    pub fn record(&mut self, number: Option<usize>, label: &str, group: &str, metrics: &[Metric], extra: &str) -> bool {
        let ok = metrics.iter().all(Metric::passed);
        let errors: Vec<String> = metrics.iter().map(|m| format!("{} {:.2e}", m.what, m.err)).collect();
        let errors = errors.join(", ");
        println!("{} {label} | {errors}{extra}", if ok { "PASS" } else { "FAIL" });
        let number = number.map_or(String::new(), |i| format!("| {i} "));
        writeln!(self.rows, "{number}| {} | {label} | {errors}{extra} |", verdict(ok)).expect("write to a String");
        for m in metrics {
            let key = format!("{group} {}", m.what);
            match self.worst.iter_mut().find(|(k, _, _)| *k == key) {
                Some(entry) => entry.1 = worst([entry.1, m.err]),
                None => self.worst.push((key, m.err, m.bound)),
            }
        }
        self.count(ok);
        ok
    }

    /// Record case `number`, whose answer is yes or no, with no errors to show (a typed
    /// error that must appear): its table row only.
    pub fn record_answer(&mut self, number: usize, ok: bool, label: &str) {
        writeln!(self.rows, "| {number} | {} | {label} |  |", verdict(ok)).expect("write to a String");
        self.count(ok);
    }

    /// Record a case that could not be measured (it errored) as failed, with the error in
    /// its row: `| {number} | **FAIL** | {label} | errored: {why} |`.
    pub fn record_errored(&mut self, number: usize, label: &str, why: &str) {
        println!("FAIL {label} | errored: {why}");
        writeln!(self.rows, "| {number} | {} | {label} | errored: {why} |", verdict(false)).expect("write to a String");
        self.failed += 1;
    }

    /// Count a case that could not run as failed (the program prints why; no row).
    pub fn record_error(&mut self) {
        self.failed += 1;
    }

    fn count(&mut self, ok: bool) {
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
    }

    /// The table rows so far, one line per case.
    pub fn rows(&self) -> &str {
        &self.rows
    }

    /// `(quantity, worst error, bound)` per quantity, in the order first seen; a NaN
    /// anywhere stays NaN.
    pub fn worst(&self) -> &[(String, f64, f64)] {
        &self.worst
    }

    pub fn passed(&self) -> usize {
        self.passed
    }

    pub fn failed(&self) -> usize {
        self.failed
    }
}

/// The result cell of a row.
fn verdict(ok: bool) -> &'static str {
    if ok { "pass" } else { "**FAIL**" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(what: &'static str, err: f64) -> Metric {
        Metric { what, err, bound: 1e-2 }
    }

    #[test]
    fn rows_counts_and_worst_errors() {
        let mut log = CheckLog::default();
        assert!(log.record(Some(0), "case a", "Forward", &[metric("out", 1e-3), metric("lse", 2e-3)], ""));
        assert!(!log.record(None, "case b", "Forward", &[metric("out", 5e-2), metric("lse", f64::NAN)], " | x"));
        assert!(log.record(None, "case c", "Backward", &[metric("out", 4e-3)], ""));
        log.record_answer(3, true, "typed error");
        log.record_error();
        assert_eq!(
            log.rows(),
            "| 0 | pass | case a | out 1.00e-3, lse 2.00e-3 |\n\
             | **FAIL** | case b | out 5.00e-2, lse NaN | x |\n\
             | pass | case c | out 4.00e-3 |\n\
             | 3 | pass | typed error |  |\n"
        );
        assert_eq!((log.passed(), log.failed()), (3, 2));
        let worst = log.worst();
        assert_eq!(worst.len(), 3);
        assert_eq!((worst[0].0.as_str(), worst[0].1, worst[0].2), ("Forward out", 5e-2, 1e-2));
        assert!(worst[1].0 == "Forward lse" && worst[1].1.is_nan(), "a NaN must stay the worst: {worst:?}");
        assert_eq!((worst[2].0.as_str(), worst[2].1), ("Backward out", 4e-3));
    }
}

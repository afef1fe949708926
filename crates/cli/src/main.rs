//! `ringdil`: the command-line front of the ringdil toolkit.

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use ringdil_cli::pattern_file::PatternFile;
use ringdil_cli::table;
use ringdil_cli::verify::{self, Check, Row};
use std::path::PathBuf;
use std::process::ExitCode;

/// ringdil: long-context attention you can trust.
///
/// LongNet dilated attention, ring attention and the online-softmax algebra that ties
/// them together, with a float64 reference that defines the semantics. Start with
/// `ringdil verify`, which re-proves the toolkit's laws on random cases.
#[derive(Parser)]
#[command(name = "ringdil", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prove on random cases that the reference agrees with itself: blocked engine ==
    /// explicit mask, merge of partials over any key partition == full attention (and
    /// the merge laws), analytic gradients == finite differences, f32 ~ f64.
    ///
    /// Prints one row per case and check (relative error ||x - ref|| / ||ref|| against
    /// an f64 oracle, its bound, pass) and exits non-zero if any check fails.
    Verify {
        /// Number of random cases.
        #[arg(long, default_value_t = 24)]
        cases: usize,
        /// Seed of the sweep; the same seed gives the same cases on every machine.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Use this pattern file (JSON or TOML) for every case instead of random ones.
        #[arg(long, value_name = "FILE")]
        pattern: Option<PathBuf>,
        /// Print the rows and the summary as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Verify { cases, seed, pattern, json } => run_verify(cases, seed, pattern, json),
    }
}

fn run_verify(cases: usize, seed: u64, pattern: Option<PathBuf>, json: bool) -> ExitCode {
    let fixed = match pattern.map(|p| PatternFile::load(&p).and_then(|f| f.spec()).map(|s| (s, p.display().to_string()))).transpose() {
        Ok(fixed) => fixed,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let bar = if json { ProgressBar::hidden() } else { ProgressBar::new(cases as u64) };
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} cases {elapsed}").expect("static template"));
    let mut rows: Vec<Row> = Vec::new();
    for index in 0..cases {
        let case = verify::draw_case(seed, index, fixed.as_ref().map(|(s, n)| (s, n.as_str())));
        match verify::run_case(&case) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                bar.abandon();
                eprintln!("error: case {index} (seed {}), pattern {}: {e}", case.seed, case.pattern);
                return ExitCode::from(2);
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let failed = rows.iter().filter(|r| !r.pass).count();
    if json {
        let summary = serde_json::json!({ "seed": seed, "cases": cases, "rows": rows, "failed": failed });
        println!("{}", serde_json::to_string_pretty(&summary).expect("rows serialise"));
    } else {
        print!("{}", render_rows(&rows));
        println!();
        print!("{}", render_summary(&rows));
        println!("{} passed, {} failed", rows.len() - failed, failed);
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn render_rows(rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.case.to_string(),
                r.check.name().to_string(),
                r.pattern.clone(),
                format!("{:?}", r.shape),
                if r.causal { "causal" } else { "-" }.to_string(),
                if r.padded { "padded" } else { "-" }.to_string(),
                format!("{:.2e}", r.rel_err),
                format!("{:.0e}", r.bound),
                if r.pass { "pass" } else { "FAIL" }.to_string(),
            ]
        })
        .collect();
    table::render(&["case", "check", "pattern", "shape [b,n,h,d]", "mask", "keys", "max rel err", "bound", "result"], &cells)
}

fn render_summary(rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = Check::ALL
        .iter()
        .map(|&check| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.check == check).collect();
            let worst = mine.iter().map(|r| r.rel_err).fold(0.0, |a: f64, b| if b.is_nan() { b } else { a.max(b) });
            vec![
                check.name().to_string(),
                mine.len().to_string(),
                format!("{worst:.2e}"),
                format!("{:.0e}", check.bound()),
                mine.iter().filter(|r| !r.pass).count().to_string(),
            ]
        })
        .collect();
    table::render(&["check", "cases", "worst rel err", "bound", "failed"], &cells)
}

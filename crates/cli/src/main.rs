//! `ringdil`: the command-line front of the ringdil toolkit.

use clap::builder::RangedU64ValueParser;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use ringdil_cli::distributed::{self, LayoutArg, PlanCost};
use ringdil_cli::pattern_file::PatternFile;
use ringdil_cli::verify::{self, Check, Row};
use ringdil_cli::{attend, pattern_view, table};
use ringdil_cuda::dist::{LaunchOptions, launch};
use ringdil_reference::compare::worst;
use ringdil_reference::ring::{ChunkPlan, Kind};
use ringdil_reference::{Heads, Spec};
use std::error::Error;
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
    /// the merge laws), analytic gradients == finite differences, f32 ~ f64, and every
    /// distributed schedule on 1..=8 simulated ranks == single device.
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
    /// Attention on your own tensors: read q, k, v ([batch, seq, heads, head_dim], .npy
    /// f32/f64 or .safetensors f64/f32/bf16/f16, name a tensor as FILE.safetensors:NAME),
    /// write the output (and optionally the log-sum-exp, [batch, heads, seq]) as .npy. The
    /// reference computes f64 inputs in f64, anything else in f32; `--device gpu` runs
    /// ringdil's kernels instead (inputs rounded to 16 bits, f32 results; `--check`
    /// prints their error against the reference).
    ///
    /// k and v may have fewer heads than q if their count divides q's (grouped-query
    /// attention: query head h reads K/V head h / (heads / kv_heads); 1 is multi-query).
    Attend {
        #[arg(long)]
        q: String,
        #[arg(long)]
        k: String,
        #[arg(long)]
        v: String,
        /// Pattern file (JSON or TOML); dense when omitted.
        #[arg(long, value_name = "FILE")]
        pattern: Option<PathBuf>,
        /// Make the pattern causal (in addition to the file's own `causal`).
        #[arg(long)]
        causal: bool,
        /// Packed sequences: a JSON file with one document boundary list per batch row,
        /// `[[0, c_1, ..., seq], ...]` (cu_seqlens per row; docs/semantics.md section 16).
        #[arg(long, value_name = "FILE.json")]
        documents: Option<PathBuf>,
        /// Output tensor (.npy).
        #[arg(long)]
        out: PathBuf,
        /// Log-sum-exp output (.npy); rows with no allowed key hold -inf.
        #[arg(long)]
        lse: Option<PathBuf>,
        /// Compute on this many simulated ranks (the reference's distributed schedules);
        /// the output comes back in the original token order and the report says what
        /// each rank sent.
        #[arg(long, value_name = "P")]
        ring: Option<usize>,
        #[command(flatten)]
        distribution: Distribution,
        #[command(flatten)]
        device: DeviceArgs,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a distributed schedule's communication plan: bytes each rank sends at each
    /// step (forward and backward), against the dense ring, and the computes the pattern
    /// lets it skip. `--listing` prints every send and compute; `--svg` draws the table.
    Plan {
        /// Pattern file (JSON or TOML).
        file: PathBuf,
        /// Sequence length.
        #[arg(long, default_value_t = 4096)]
        seq: usize,
        /// Number of ranks.
        #[arg(long, default_value_t = 4)]
        ranks: usize,
        #[command(flatten)]
        distribution: Distribution,
        /// Number of (query) heads.
        #[arg(long, default_value_t = 8)]
        heads: usize,
        /// Number of K/V heads, dividing --heads (grouped-query attention; 1 is
        /// multi-query). K, V, dK, dV rows are costed at this many heads. Default: --heads.
        #[arg(long, value_name = "H_KV")]
        kv_heads: Option<usize>,
        /// Head dimension of q and k (sets the bytes per Q, K, dQ, dK row).
        #[arg(long, default_value_t = 128, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        head_dim: usize,
        /// Head dimension of v, the output and their gradients, when it differs from
        /// --head-dim (MLA: 128 beside 192). V, dV, O and dO rows are costed at it.
        /// Default: --head-dim.
        #[arg(long, value_name = "D_V", value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        value_dim: Option<usize>,
        /// Bytes per element (2 for bf16/f16, 4 for f32).
        #[arg(long, default_value_t = 2)]
        element_bytes: usize,
        /// Also print every operation of the schedule.
        #[arg(long)]
        listing: bool,
        /// Write an SVG drawing of the per-rank, per-step volumes.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Print the plan (costs and the full schedule) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Inspect attention patterns.
    #[command(subcommand)]
    Pattern(PatternCommand),
    /// Start one process per GPU, the way torchrun does: each gets RINGDIL_RANK,
    /// RINGDIL_LOCAL_RANK, RINGDIL_WORLD, RINGDIL_NCCL_ID_FILE (rank 0 writes the NCCL
    /// unique id there, the others read it) and its own CUDA_VISIBLE_DEVICES. If one rank
    /// fails, the others are stopped and the error names it.
    ///
    /// Example, the 2-GPU ring check: `ringdil launch --nproc 2 -- target/release/ring_check --seed 7`.
    /// Several hosts: run it on each with --nnodes, --node-rank and a shared --id-file.
    Launch {
        /// Processes (GPUs) on this host.
        #[arg(long)]
        nproc: usize,
        /// Hosts taking part.
        #[arg(long, default_value_t = 1)]
        nnodes: usize,
        /// This host's index, 0..nnodes.
        #[arg(long, default_value_t = 0)]
        node_rank: usize,
        /// Where the NCCL unique id is exchanged (a shared path for several hosts).
        #[arg(long, value_name = "FILE")]
        id_file: Option<PathBuf>,
        /// The program and its arguments, after `--`.
        #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

/// How a sequence is spread over ranks, and which schedule moves the data.
#[derive(clap::Args)]
struct Distribution {
    /// Token layout over ranks.
    #[arg(long, value_enum, default_value_t = LayoutArg::Zigzag)]
    layout: LayoutArg,
    /// Explicit chunk boundaries `0,b1,...,seq` (any split; overrides --layout).
    #[arg(long, value_delimiter = ',')]
    boundaries: Option<Vec<usize>>,
    /// The distributed schedule.
    #[arg(long, value_parser = distributed::schedule_arg(), default_value = "pattern")]
    schedule: Kind,
}

impl Distribution {
    fn chunks(&self, seq: usize, ranks: usize) -> Result<ChunkPlan, Box<dyn Error>> {
        Ok(ChunkPlan::new(seq, ranks, &distributed::layout(self.layout, self.boundaries.clone()))?)
    }
}

/// Where `attend` computes.
#[derive(clap::Args)]
struct DeviceArgs {
    /// `cpu`: the f64/f32 reference in the inputs' precision. `gpu`: ringdil's kernels on
    /// the first CUDA device; the inputs are rounded to `--dtype` (bf16 keeps 8
    /// significant bits, f16 11 with values up to 65504), sums and results are f32.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// With `--device gpu`: the 16-bit type the inputs are rounded to [default: bf16].
    #[arg(long, value_enum)]
    dtype: Option<GpuDtype>,
    /// With `--device gpu`: also run the f64 reference and print the GPU's error against
    /// it, on the rounded inputs (the kernels' error) and on the inputs as read.
    #[arg(long)]
    check: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Device {
    Cpu,
    Gpu,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum GpuDtype {
    Bf16,
    F16,
}

#[derive(Subcommand)]
enum PatternCommand {
    /// Show which keys each query sees: density, keys per query (min/mean/max), the
    /// largest multiplicity (a key counted by two LongNet branches has 2), the receptive
    /// field after 1..=L layers, and optionally a PNG of the mask (query down, key
    /// right; blue = allowed, orange = counted twice or more).
    Show {
        /// Pattern file (JSON or TOML).
        file: PathBuf,
        /// Sequence length.
        #[arg(long, default_value_t = 256)]
        seq: usize,
        /// Number of heads (dilation offsets depend on the head).
        #[arg(long, default_value_t = 4)]
        heads: usize,
        /// Head whose statistics are printed and drawn.
        #[arg(long, default_value_t = 0)]
        head: usize,
        /// Draw every head in a grid instead of one.
        #[arg(long)]
        all_heads: bool,
        /// Layers for the receptive field.
        #[arg(long, default_value_t = 4)]
        layers: usize,
        /// Write the mask picture here.
        #[arg(long, value_name = "FILE")]
        png: Option<PathBuf>,
        /// Print the statistics as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Verify { cases, seed, pattern, json } => return run_verify(cases, seed, pattern, json),
        Command::Attend { q, k, v, pattern, causal, documents, out, lse, ring, distribution, device, json } => {
            let distributed = ring.map(|p| (p, distribution));
            let inputs = AttendInputs { q, k, v, pattern, causal, documents };
            run_attend(&inputs, &out, lse.as_deref(), distributed, &device, json)
        }
        Command::Plan {
            file,
            seq,
            ranks,
            distribution,
            heads,
            kv_heads,
            head_dim,
            value_dim,
            element_bytes,
            listing,
            svg,
            json,
        } => {
            let heads = (heads, kv_heads.unwrap_or(heads));
            let dims = (head_dim, value_dim.unwrap_or(head_dim));
            run_plan(&file, seq, ranks, &distribution, heads, dims, element_bytes, listing, svg.as_deref(), json)
        }
        Command::Launch { nproc, nnodes, node_rank, id_file, command } => {
            let options = LaunchOptions { nproc, nnodes, node_rank, id_file };
            launch(std::path::Path::new(&command[0]), &command[1..], &options).map_err(Into::into)
        }
        Command::Pattern(PatternCommand::Show { file, seq, heads, head, all_heads, layers, png, json }) => {
            run_show(&file, seq, heads, head, all_heads, layers, png.as_deref(), json)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn load_spec(pattern: Option<&std::path::Path>) -> Result<Spec, Box<dyn Error>> {
    Ok(match pattern {
        Some(path) => PatternFile::load(path)?.spec()?,
        None => Spec::dense(),
    })
}

/// The inputs of `ringdil attend`: tensors, pattern file, causality, documents file.
struct AttendInputs {
    q: String,
    k: String,
    v: String,
    pattern: Option<PathBuf>,
    causal: bool,
    documents: Option<PathBuf>,
}

fn run_attend(
    inputs: &AttendInputs,
    out: &std::path::Path,
    lse: Option<&std::path::Path>,
    distributed: Option<(usize, Distribution)>,
    device: &DeviceArgs,
    json: bool,
) -> Result<(), Box<dyn Error>> {
    let AttendInputs { q, k, v, pattern, causal, documents } = inputs;
    let how_gpu = attend_gpu_options(pattern.as_deref(), device, distributed.is_some())?;
    let mut spec = load_spec(pattern.as_deref())?;
    spec.causal |= causal;
    if let Some(path) = documents {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let lists: Vec<Vec<usize>> = serde_json::from_str(&text)
            .map_err(|e| format!("{}: expected one list of document boundaries per batch row: {e}", path.display()))?;
        spec.documents = Some(ringdil_reference::Documents::per_row(lists));
    }
    let how = match (&distributed, how_gpu) {
        (_, Some(gpu)) => gpu,
        (None, None) => attend::How::SingleDevice,
        (Some((ranks, d)), None) => attend::How::Distributed(attend::Ranks {
            ranks: *ranks,
            layout: distributed::layout(d.layout, d.boundaries.clone()),
            schedule: d.schedule,
        }),
    };
    // A spinner with the elapsed time on a terminal (indicatif draws nothing elsewhere).
    let spinner = if json { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
    spinner.set_style(ProgressStyle::with_template("{spinner} attention {elapsed}").expect("static template"));
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let report = attend::attend(q, k, v, &spec, &how, out, lse);
    spinner.finish_and_clear();
    let report = report?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "attention {:?} ({}) in {:.3} s, {} empty rows -> {}",
            report.shape,
            report.dtype,
            report.seconds,
            report.empty_rows,
            out.display()
        );
        if let Some(gpu) = &report.gpu {
            print_gpu(gpu);
        }
        if let Some(comm) = &report.distributed {
            let rows: Vec<Vec<String>> = (0..comm.peak.len())
                .map(|r| {
                    let sent = |steps: &[Vec<usize>]| steps.iter().map(|s| s[r]).sum::<usize>() * comm.element_bytes;
                    vec![
                        r.to_string(),
                        format!("{:.1}", sent(&comm.forward_sent) as f64 / 1024.0),
                        format!("{:.1}", sent(&comm.backward_sent) as f64 / 1024.0),
                        format!("{:.1}", (comm.peak[r] * comm.element_bytes) as f64 / 1024.0),
                    ]
                })
                .collect();
            print!("{}", table::render(&["rank", "forward sent KiB", "backward sent KiB", "peak KiB"], &rows));
        }
    }
    Ok(())
}

/// `attend`'s GPU options as a [`attend::How`], or None on the CPU; their misuse (a GPU
/// option without `--device gpu`, simulated ranks with it) is an error before any tensor
/// is read.
fn attend_gpu_options(
    pattern: Option<&std::path::Path>,
    device: &DeviceArgs,
    ranks: bool,
) -> Result<Option<attend::How>, Box<dyn Error>> {
    if device.device == Device::Cpu {
        if device.dtype.is_some() {
            return Err("--dtype: the type the GPU's inputs are rounded to; it needs --device gpu".into());
        }
        if device.check {
            return Err("--check: compares the GPU's result with the reference; it needs --device gpu".into());
        }
        return Ok(None);
    }
    if ranks {
        return Err("--ring: simulated ranks run the CPU reference; with --device gpu, attention runs on one GPU \
                    (the NCCL ring: ringdil.ring_attention, or ring_bench / ring_check under `ringdil launch`)"
            .into());
    }
    // The built-in kinds as themselves; a dilated_expr file as compact launches with
    // offset tables where its branches allow, else as mask tables.
    let gpu_pattern = match pattern {
        None => ringdil_cuda::GpuPattern::Dense,
        Some(path) => ringdil_cuda::GpuPattern::from_file(&PatternFile::load(path)?)?,
    };
    let dtype = match device.dtype.unwrap_or(GpuDtype::Bf16) {
        GpuDtype::Bf16 => ringdil_cuda::Dtype::Bf16,
        GpuDtype::F16 => ringdil_cuda::Dtype::F16,
    };
    Ok(Some(attend::How::Gpu { pattern: gpu_pattern, dtype, check: device.check }))
}

/// The GPU part of `attend`'s terminal report.
fn print_gpu(gpu: &ringdil_cli::attend_gpu::GpuReport) {
    println!("on {}; inputs rounded to {}, sums and results in f32", gpu.device, gpu.inputs);
    if let Some(c) = &gpu.check {
        println!(
            "against the f64 reference: output {:.2e} on the rounded inputs (the kernels' error; gpu_check's bound {:.0e}), \
             {:.2e} on the inputs as read; LSE pointwise {:.2e}; rows empty in one only: {}",
            c.out_vs_rounded_inputs, c.bound, c.out_vs_inputs, c.lse_vs_rounded_inputs, c.empty_row_mismatches
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn run_plan(
    file: &std::path::Path,
    seq: usize,
    ranks: usize,
    distribution: &Distribution,
    (heads, kv_heads): (usize, usize),
    dims: (usize, usize),
    element_bytes: usize,
    listing: bool,
    svg: Option<&std::path::Path>,
    json: bool,
) -> Result<(), Box<dyn Error>> {
    let spec = load_spec(Some(file))?;
    let chunks = distribution.chunks(seq, ranks)?;
    let heads = Heads::new(heads, kv_heads)?;
    let schedule = distribution.schedule.build(&chunks, &spec, heads)?;
    let dense = Kind::Ring.build(&chunks, &Spec::dense(), heads)?;
    let cost = PlanCost::new(&schedule, &dense, dims, element_bytes);
    if let Some(path) = svg {
        std::fs::write(path, cost.svg())?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "cost": cost, "schedule": schedule }))?);
        return Ok(());
    }
    print!("{}", cost.render());
    if listing {
        print!("\n{schedule}");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_show(
    file: &std::path::Path,
    seq: usize,
    heads: usize,
    head: usize,
    all_heads: bool,
    layers: usize,
    png: Option<&std::path::Path>,
    json: bool,
) -> Result<(), Box<dyn Error>> {
    let spec = load_spec(Some(file))?;
    let stats = pattern_view::stats(&spec, seq, heads, head, layers)?;
    if let Some(path) = png {
        let draw: Vec<usize> = if all_heads { (0..heads).collect() } else { vec![head] };
        pattern_view::write_png(&spec, seq, heads, &draw, path)?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(());
    }
    print!("{}", pattern_view::render(&stats));
    if let Some(path) = png {
        println!("mask picture: {}", path.display());
    }
    Ok(())
}

fn run_verify(cases: usize, seed: u64, pattern: Option<PathBuf>, json: bool) -> ExitCode {
    let fixed = match pattern
        .map(|p| PatternFile::load(&p).and_then(|f| f.spec()).map(|s| (s, p.display().to_string())))
        .transpose()
    {
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
                match &r.how {
                    Some(how) => format!("{} ({how})", r.check.name()),
                    None => r.check.name().to_string(),
                },
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
    table::render(
        &["case", "check", "pattern", "shape [b,n,h,d]", "mask", "keys", "max rel err", "bound", "result"],
        &cells,
    )
}

fn render_summary(rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = Check::ALL
        .iter()
        .map(|&check| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.check == check).collect();
            let largest = worst(mine.iter().map(|r| r.rel_err));
            vec![
                check.name().to_string(),
                mine.len().to_string(),
                format!("{largest:.2e}"),
                format!("{:.0e}", check.bound()),
                mine.iter().filter(|r| !r.pass).count().to_string(),
            ]
        })
        .collect();
    table::render(&["check", "cases", "worst rel err", "bound", "failed"], &cells)
}

//! Distributed attention against the f64 reference: every schedule (ring, pattern-aware,
//! all-gather; virtual ranks on one GPU), layout (contiguous, zigzag, striped, unequal
//! boundaries with a nearly empty or empty rank) and pattern (dense, causal, window,
//! LongNet dilated, with segments inside one rank and across ranks), on lengths that do
//! not divide evenly. Output, LSE, dQ, dK and dV are gathered to rank 0 and compared
//! with the reference's `attention` / `attention_backward` on the same bf16-rounded
//! inputs: relative L2 error < 1e-2 (the bf16 bound of `gpu_check`). The gathered host
//! arrays start as NaN, so a row nobody wrote fails. For the dense ring, rank 0 also
//! runs the same case on virtual ranks and reports the largest difference from the
//! real ring (same launches, same merge order: expected 0). Every pattern runs on every
//! layout (striped pieces launch at true positions, `dist::layout`); a permutation that
//! gives a rank more runs than the ring launches per step must be a typed error.
//!
//! The distributed cases run the same per-rank body (`dist_main`) whichever way the
//! ranks are started: one process per GPU (`--nproc`, re-executed under the launcher)
//! or one thread per GPU of this process (`--threads`). With `--rings R` the `W` ranks
//! form `R` rings of `W / R` (the 2-D layout, `dist::grid`): each ring runs the ring on
//! its own sub-communicator over its slice of the batch (cases use batch `b + R - 1`, so
//! an uneven split is covered), every rank sends its pieces to global rank 0 over the
//! world communicator, and rank 0 compares the whole batch with the reference; the
//! dense ring is compared with virtual ranks ring by ring.
//!
//! ```text
//! ring_check [--seed N] [--log FILE.md] [--date TEXT] [--require-gpu]  # virtual ranks, one GPU
//! ring_check --nproc W [--rings R] [same options]                      # NCCL, one process per GPU
//! ring_check --threads W [--rings R] [same options]                    # NCCL, one thread per GPU
//! ```
//! Without a CUDA device it prints "skipped: no CUDA device" and exits 0 (1 with
//! `--require-gpu`); a skip is never counted as a pass.

use cudarc::driver::CudaSlice;
use ndarray::{Array3, Array4};
use ringdil_cuda::Gpu;
use ringdil_cuda::check::{bound, rounded};
use ringdil_cuda::dist::{
    Communicator, DistPlan, DistRank, DistResult, Grid, LaunchOptions, RankData, RankEnv, RankGrads, SCHEDULES,
    VirtualRanks, launch, run_threads,
};
use ringdil_cuda::gpu::DevicePartial;
use ringdil_cuda::launch::Dtype;
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::compare::{rel_err, worst};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout};
use ringdil_reference::{Attention, attention, attention_backward};
use std::fmt::Write;
use std::ops::Range;

struct Case {
    /// Ranks per ring.
    ranks: usize,
    /// Rings side by side (1: the plain ring).
    rings: usize,
    layout: Layout,
    layout_name: String,
    pattern: (&'static str, GpuSpec),
    batch: usize,
    heads: usize,
    head_dim: usize,
    seq: usize,
    /// Inputs and reference depend only on (size, pattern): computed once, shared by
    /// every rank count, layout and schedule.
    key: (usize, usize),
}

fn patterns(n: usize) -> Vec<(&'static str, GpuSpec)> {
    vec![
        ("dense", GpuSpec::new(GpuPattern::Dense)),
        ("causal", GpuSpec::new(GpuPattern::Dense).causal(true)),
        ("window 100/0 causal", GpuSpec::new(GpuPattern::Window { left: 100, right: 0 }).causal(true)),
        (
            "dilated (64,1)(256,2)(512,4) causal",
            GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(64, 1), (256, 2), (512.min(n), 4)]))).causal(true),
        ),
        ("dilated (128,2)", GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(128, 2)])))),
    ]
}

fn layouts(n: usize, p: usize) -> Vec<(String, Layout)> {
    if p == 1 {
        // One rank per ring (pure data parallelism): every layout is the identity.
        return vec![("contiguous".into(), Layout::Contiguous)];
    }
    let mut v = vec![
        ("contiguous".into(), Layout::Contiguous),
        ("zigzag".into(), Layout::Zigzag),
        ("striped".into(), Layout::Striped),
    ];
    // Unequal: rank 0 gets 7 tokens, the rest split unevenly; with 3+ ranks one is empty.
    let mut b = vec![0, 7];
    if p >= 3 {
        b.push(7);
    }
    while b.len() < p {
        let last = *b.last().unwrap();
        b.push(last + (n - last) * 2 / 3);
    }
    b.push(n);
    v.push((format!("boundaries {b:?}"), Layout::Boundaries(b)));
    v
}

/// The cases for `ranks` per ring and `rings` rings; with several rings the batch grows
/// by `rings - 1` so that every ring gets rows and the split is uneven for one size.
fn cases(ranks: &[usize], rings: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for &p in ranks {
        for (i, &(seq, head_dim, batch)) in [(1000usize, 64usize, 1usize), (777, 128, 2)].iter().enumerate() {
            for (layout_name, layout) in layouts(seq, p) {
                for (j, pattern) in patterns(seq).into_iter().enumerate() {
                    if i == 1 && pattern.0.starts_with("window") {
                        continue;
                    }
                    out.push(Case {
                        ranks: p,
                        rings,
                        layout: layout.clone(),
                        layout_name: layout_name.clone(),
                        pattern,
                        batch: batch + rings - 1,
                        heads: 4,
                        head_dim,
                        seq,
                        key: (i, j),
                    });
                }
            }
        }
    }
    out
}

fn describe(c: &Case) -> String {
    let rings = if c.rings > 1 { format!(" x R={}", c.rings) } else { String::new() };
    format!(
        "P={}{rings} {} | {} | B={} N={} H={} d={}",
        c.ranks, c.layout_name, c.pattern.0, c.batch, c.seq, c.heads, c.head_dim
    )
}

struct Inputs {
    bits: [Vec<u16>; 4],
    reference: (Attention<f64>, ringdil_reference::Gradients<f64>),
}

type Cache = std::collections::HashMap<(usize, usize), std::rc::Rc<Inputs>>;

/// The inputs (and, when asked, the reference) of `c`, computed once per key.
fn cached(cache: &mut Cache, c: &Case, seed: u64, with_reference: bool) -> std::rc::Rc<Inputs> {
    cache
        .entry(c.key)
        .or_insert_with(|| {
            std::rc::Rc::new(inputs(c, seed ^ (c.key.0 as u64 * 1000 + c.key.1 as u64 + 1), with_reference))
        })
        .clone()
}

fn inputs(c: &Case, seed: u64, with_reference: bool) -> Inputs {
    let dims = [c.batch, c.seq, c.heads, c.head_dim];
    let mut rng = SplitMix64::new(seed);
    let (q, qf) = rounded(dims, Dtype::Bf16, &mut rng);
    let (k, kf) = rounded(dims, Dtype::Bf16, &mut rng);
    let (v, vf) = rounded(dims, Dtype::Bf16, &mut rng);
    let (g, gf) = rounded(dims, Dtype::Bf16, &mut rng);
    let reference = if with_reference {
        let spec = c.pattern.1.to_reference();
        let fwd = attention(qf.view(), kf.view(), vf.view(), &spec).expect("reference forward");
        let grads =
            attention_backward(qf.view(), kf.view(), vf.view(), &spec, &fwd, gf.view()).expect("reference backward");
        (fwd, grads)
    } else {
        let z = Array4::zeros((0, 0, 0, 0));
        (
            Attention { out: z.clone(), lse: Array3::zeros((0, 0, 0)) },
            ringdil_reference::Gradients { dq: z.clone(), dk: z.clone(), dv: z },
        )
    };
    Inputs { bits: [q, k, v, g], reference }
}

/// Per rank: [out, lse, dq, dk, dv], each per piece, on the host.
type HostResult = Vec<[Vec<Vec<f32>>; 5]>;

/// One ring's share of a case: its plan (over its batch rows) and those rows.
struct RingPart {
    plan: DistPlan,
    rows: Range<usize>,
}

/// The ring parts of `c` on `grid` (one part covering the whole batch when `R = 1`).
fn ring_parts(c: &Case, grid: &Grid) -> DistResult<Vec<RingPart>> {
    grid.batch_rows(c.batch)?
        .into_iter()
        .map(|rows| {
            let chunks = ChunkPlan::new(c.seq, c.ranks, &c.layout)?;
            let plan = DistPlan::new(chunks, c.pattern.1.clone(), rows.len(), c.heads, c.head_dim)?;
            Ok(RingPart { plan, rows })
        })
        .collect()
}

/// Batch rows `rows` of a `[batch, seq, heads, head_dim]` host tensor of `c`.
fn batch_slice<'a>(x: &'a [u16], c: &Case, rows: &Range<usize>) -> &'a [u16] {
    let per_row = c.seq * c.heads * c.head_dim;
    &x[rows.start * per_row..rows.end * per_row]
}

/// Errors of the whole batch: every ring's ranks (`res[ring][position]`) are gathered
/// into the rows of its ring.
fn compare(
    c: &Case,
    parts: &[RingPart],
    res: &[HostResult],
    reference: &(Attention<f64>, ringdil_reference::Gradients<f64>),
) -> Vec<(&'static str, f64)> {
    let (b, n, h, d) = (c.batch, c.seq, c.heads, c.head_dim);
    let mut arrays: Vec<Vec<f64>> =
        (0..5).map(|i| vec![f64::NAN; if i == 1 { b * h * n } else { b * n * h * d }]).collect();
    for (part, ring) in parts.iter().zip(res) {
        let Range { start, end } = part.rows;
        for (r, kinds) in ring.iter().enumerate() {
            for (i, part_of) in kinds.iter().enumerate() {
                let p64: Vec<Vec<f64>> = part_of.iter().map(|x| x.iter().map(|&v| v as f64).collect()).collect();
                if i == 1 {
                    part.plan.gather_lse_into(&mut arrays[1][start * h * n..end * h * n], r, &p64);
                } else {
                    part.plan.gather_into(&mut arrays[i][start * n * h * d..end * n * h * d], d, r, &p64);
                }
            }
        }
    }
    let (fwd, g) = reference;
    vec![
        ("out", rel_err(&arrays[0], fwd.out.iter())),
        ("lse", rel_err(&arrays[1], fwd.lse.iter())),
        ("dq", rel_err(&arrays[2], g.dq.iter())),
        ("dk", rel_err(&arrays[3], g.dk.iter())),
        ("dv", rel_err(&arrays[4], g.dv.iter())),
    ]
}

/// Largest absolute difference of two results of the same plans (equal infinities count 0).
fn max_diff(a: &[HostResult], b: &[HostResult]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y))
        .flat_map(|(x, y)| x.iter().zip(y.iter()))
        .flat_map(|(x, y)| x.iter().zip(y.iter()))
        .flat_map(|(x, y)| x.iter().zip(y.iter()))
        .map(|(a, b)| if a == b || (a.is_infinite() && b.is_infinite()) { 0.0 } else { (a - b).abs() as f64 })
        .fold(0.0, f64::max)
}

fn download(gpu: &Gpu, out: &[DevicePartial], grads: &RankGrads) -> [Vec<Vec<f32>>; 5] {
    let dl = |xs: Vec<&CudaSlice<f32>>| xs.into_iter().map(|x| gpu.download(x).expect("download")).collect::<Vec<_>>();
    [
        dl(out.iter().map(|p| &p.out).collect()),
        dl(out.iter().map(|p| &p.lse).collect()),
        dl(grads.dq.iter().collect()),
        dl(grads.dk.iter().collect()),
        dl(grads.dv.iter().collect()),
    ]
}

/// One ring's part of `c` on virtual ranks of one GPU.
fn run_virtual(gpu: &Gpu, c: &Case, part: &RingPart, inp: &Inputs) -> DistResult<HostResult> {
    let [q, k, v, g] = inp.bits.each_ref().map(|x| batch_slice(x, c, &part.rows));
    let plan = &part.plan;
    let data: Vec<RankData> =
        (0..plan.ranks()).map(|r| RankData::upload(gpu, plan, r, q, k, v)).collect::<Result<_, _>>()?;
    let dout: Vec<_> = (0..plan.ranks())
        .map(|r| ringdil_cuda::dist::ring::upload_pieces(gpu, plan, r, g))
        .collect::<Result<_, _>>()?;
    let mut vr = VirtualRanks::new(gpu, plan, Dtype::Bf16)?;
    let outs = vr.forward(&data)?;
    let grads = vr.backward(&data, &outs, &dout)?;
    Ok(outs.iter().zip(&grads).map(|(o, g)| download(gpu, o, g)).collect())
}

struct Log {
    text: String,
    passed: usize,
    failed: usize,
    worst: Vec<(String, f64)>,
}

impl Log {
    fn record(&mut self, label: &str, errs: &[(&'static str, f64)], extra: &str) {
        let b = bound(Dtype::Bf16);
        let ok = errs.iter().all(|(_, e)| *e < b);
        if ok {
            self.passed += 1
        } else {
            self.failed += 1
        }
        for (what, e) in errs {
            let key = format!("{} {what}", label.split(" | ").next().unwrap_or("").split(' ').next().unwrap_or(""));
            match self.worst.iter_mut().find(|(k, _)| *k == key) {
                Some(w) => w.1 = worst([w.1, *e]),
                None => self.worst.push((key, *e)),
            }
        }
        let errs: Vec<String> = errs.iter().map(|(w, e)| format!("{w} {e:.2e}")).collect();
        println!("{} {label} | {}{extra}", if ok { "PASS" } else { "FAIL" }, errs.join(", "));
        writeln!(self.text, "| {} | {label} | {}{extra} |", if ok { "pass" } else { "**FAIL**" }, errs.join(", "))
            .unwrap();
    }

    fn finish(&self, header: &str, path: Option<String>, seconds: f64) -> bool {
        let mut out = String::new();
        out.push_str(header);
        writeln!(out, "\n| result | case | relative errors |\n|---|---|---|").unwrap();
        out.push_str(&self.text);
        writeln!(
            out,
            "\n## Worst errors (bound {} each)\n\n| schedule / quantity | worst |\n|---|---|",
            bound(Dtype::Bf16)
        )
        .unwrap();
        for (k, e) in &self.worst {
            writeln!(out, "| {k} | {e:.2e} |").unwrap();
        }
        writeln!(out, "\n**{} passed, {} failed** in {seconds:.1} s.", self.passed, self.failed).unwrap();
        if let Some(p) = path {
            std::fs::write(&p, &out).expect("write log");
            println!("log written to {p}");
        }
        println!("ring check: {} passed, {} failed", self.passed, self.failed);
        self.failed == 0
    }
}

fn header(title: &str, device: &str, seed: u64, date: &str, command: &str) -> String {
    format!(
        "# {title}\n\n* device: {device}\n* date: {date}\n* seed: {seed}\n* command: `{command}`\n* reference: f64 `attention` / `attention_backward` on the same bf16-rounded inputs; bound: relative L2 error < {} for out, lse, dq, dk, dv\n* gathered host arrays start as NaN: a row no rank wrote fails\n",
        bound(Dtype::Bf16)
    )
}

/// What every rank of a distributed run shares: the options and how ranks were started.
struct DistRun {
    seed: u64,
    date: String,
    command: String,
    log: Option<String>,
    rings: usize,
    /// "one process per GPU" or "one thread per GPU", for the log.
    mode: &'static str,
}

fn fail(code: i32, msg: impl std::fmt::Display) -> ! {
    eprintln!("ring check: {msg}");
    std::process::exit(code);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let count = |flag: &str| {
        value(flag)
            .map(|n| n.parse::<usize>().unwrap_or_else(|_| fail(2, format!("{flag} takes an integer, got {n:?}"))))
    };
    let require = args.iter().any(|a| a == "--require-gpu");
    let seed: u64 = value("--seed").map(|s| s.parse().expect("--seed takes an integer")).unwrap_or(1);
    let (nproc, threads, rings) = (count("--nproc"), count("--threads"), count("--rings"));
    let command = args.iter().skip(1).cloned().collect::<Vec<_>>().join(" ");
    let env = RankEnv::from_env().unwrap_or_else(|e| fail(2, e));
    // The world: this process's launch environment, else the flag that will start it.
    let world = match (nproc, threads) {
        (Some(_), Some(_)) => fail(2, "--nproc and --threads exclude each other"),
        (n, t) => env.as_ref().map(|e| e.world).or(n).or(t),
    };
    let rings = match (world, rings) {
        (None, Some(r)) => fail(2, format!("--rings {r} needs --nproc or --threads")),
        (Some(w), r) => Grid::new(w, r.unwrap_or(1)).unwrap_or_else(|e| fail(2, e)).rings(),
        (None, None) => 1,
    };
    let run = DistRun {
        seed,
        date: value("--date").unwrap_or_else(|| "unknown".into()),
        command: format!("ring_check {command}"),
        log: value("--log"),
        rings,
        mode: if threads.is_some() { "one thread per GPU" } else { "one process per GPU" },
    };
    let skip = || -> ! {
        println!("ring check: skipped: no CUDA device (0 passed, 0 failed, all skipped)");
        std::process::exit(if require { 1 } else { 0 });
    };
    let ok = match (env, nproc, threads) {
        (None, Some(n), _) => {
            let exe = std::env::current_exe().expect("own path");
            match launch(&exe, &args[1..], &LaunchOptions::local(n)) {
                Ok(()) => return,
                Err(e) => fail(1, e),
            }
        }
        (None, _, Some(n)) => match run_threads(n, |gpu, comm| Ok(dist_main(gpu, comm, &run))) {
            Ok(Some(oks)) => oks.iter().all(|&ok| ok),
            Ok(None) => skip(),
            Err(e) => fail(1, e),
        },
        (None, None, None) => match Gpu::probe() {
            Ok(Some(gpu)) => virtual_main(&gpu, &run),
            Ok(None) => skip(),
            Err(e) => fail(1, e),
        },
        (Some(env), _, _) => match env.connect() {
            Ok(Some((gpu, comm))) => dist_main(&gpu, &comm, &run),
            Ok(None) => skip(),
            Err(e) => fail(1, format!("rank {}: {e}", env.rank)),
        },
    };
    std::process::exit(if ok { 0 } else { 1 });
}

fn virtual_main(gpu: &Gpu, run: &DistRun) -> bool {
    let start = std::time::Instant::now();
    let device = gpu.describe().unwrap_or_default();
    let mut log = Log { text: String::new(), passed: 0, failed: 0, worst: Vec::new() };
    let mut cache = Cache::new();
    let one_ring = Grid::new(1, 1).expect("one rank, one ring");
    for c in cases(&[2, 3, 4], 1).iter() {
        let parts = ring_parts(c, &one_ring).expect("plan");
        let inp = cached(&mut cache, c, run.seed, true);
        match run_virtual(gpu, c, &parts[0], &inp) {
            Ok(res) => {
                log.record(&format!("virtual | {}", describe(c)), &compare(c, &parts, &[res], &inp.reference), "")
            }
            Err(e) => {
                println!("FAIL virtual | {}: {e}", describe(c));
                log.failed += 1;
            }
        }
    }
    too_many_pieces(&mut log);
    log.finish(
        &header("Ring check (virtual ranks, one GPU)", &device, run.seed, &run.date, &run.command),
        run.log.clone(),
        start.elapsed().as_secs_f64(),
    )
}

/// A layout whose rank holds more runs than the ring launches per step must be a typed
/// error naming the rank (descending tokens: every run is one token long).
fn too_many_pieces(log: &mut Log) {
    let order: Vec<usize> = (0..64).rev().collect();
    let chunks = ChunkPlan::new(64, 2, &Layout::Permuted { order, boundaries: None }).expect("layout");
    let e = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense), 1, 1, 64);
    let ok = matches!(&e, Err(ringdil_cuda::dist::DistError::TooManyPieces { rank: 0, .. }));
    if ok {
        log.passed += 1
    } else {
        log.failed += 1
    }
    writeln!(
        log.text,
        "| {} | descending permutation: typed error `{}` |  |",
        if ok { "pass" } else { "**FAIL**" },
        e.err().map(|e| e.to_string()).unwrap_or_default()
    )
    .unwrap();
}

/// Global rank 0 receives every other rank's [out, lse, dq, dk, dv] pieces over the
/// world communicator `comm`; it returns them per ring, per position (`res[ring][pos]`).
fn gather(
    gpu: &Gpu,
    comm: &Communicator,
    grid: &Grid,
    parts: &[RingPart],
    out: &[DevicePartial],
    grads: &RankGrads,
) -> Option<Vec<HostResult>> {
    if comm.rank() != 0 {
        let mut sends: Vec<(usize, &CudaSlice<f32>)> = Vec::new();
        sends.extend(out.iter().map(|x| (0, &x.out)));
        sends.extend(out.iter().map(|x| (0, &x.lse)));
        for g in [&grads.dq, &grads.dk, &grads.dv] {
            sends.extend(g.iter().map(|x| (0, x)));
        }
        comm.exchange(&sends, &mut []).expect("gather send");
        gpu.synchronize().expect("sync");
        comm.stream().synchronize().expect("sync");
        return None;
    }
    let mut bufs: Vec<(usize, Vec<Vec<CudaSlice<f32>>>)> = Vec::new();
    for g in 1..grid.world() {
        let (ring, pos) = grid.place(g).expect("rank of the grid");
        let plan = &parts[ring].plan;
        let lens = plan.piece_lens(pos);
        let lse: Vec<usize> = plan.pieces(pos).iter().map(|pc| plan.batch * plan.heads * pc.rows).collect();
        let kinds = [&lens, &lse, &lens, &lens, &lens]
            .map(|l| l.iter().map(|&n| comm.stream().alloc_zeros::<f32>(n).expect("alloc")).collect::<Vec<_>>());
        bufs.push((ring, kinds.into()));
    }
    {
        let mut recvs: Vec<(usize, &mut CudaSlice<f32>)> = Vec::new();
        for (g, (_, kinds)) in bufs.iter_mut().enumerate() {
            for kind in kinds.iter_mut() {
                for b in kind.iter_mut() {
                    recvs.push((g + 1, b));
                }
            }
        }
        comm.exchange(&[], &mut recvs).expect("gather recv");
    }
    comm.stream().synchronize().expect("sync");
    // Ranks come in global order, so each ring's positions come in order too.
    let mut res: Vec<HostResult> = (0..grid.rings()).map(|_| Vec::new()).collect();
    res[0].push(download(gpu, out, grads));
    for (ring, kinds) in bufs {
        let host: Vec<Vec<Vec<f32>>> =
            kinds.iter().map(|k| k.iter().map(|b| comm.stream().clone_dtoh(b).expect("dtoh")).collect()).collect();
        res[ring].push(host.try_into().expect("five kinds"));
    }
    Some(res)
}

/// One rank of a distributed run (a process or a thread): its ring on a
/// sub-communicator when there are several rings, gathers to global rank 0, which checks.
fn dist_main(gpu: &Gpu, comm: &Communicator, run: &DistRun) -> bool {
    let start = std::time::Instant::now();
    let grid = Grid::new(comm.world(), run.rings).expect("grid checked in main");
    let me = comm.rank();
    let (ring, pos) = grid.place(me).expect("rank of the grid");
    let ring_comm = (grid.rings() > 1).then(|| comm.split(gpu, ring, pos).expect("split into rings"));
    let ring_comm = ring_comm.as_ref().unwrap_or(comm);
    let (w, p) = (grid.world(), grid.ring_size());
    let shape = if grid.rings() > 1 { format!(" = {} rings x {p}", grid.rings()) } else { String::new() };
    let device = format!("{} x {w} ranks{shape} (NCCL, {})", gpu.describe().unwrap_or_default(), run.mode);
    let mut log = Log { text: String::new(), passed: 0, failed: 0, worst: Vec::new() };
    let mut cache = Cache::new();
    for c in cases(&[p], grid.rings()).iter() {
        let parts = ring_parts(c, &grid).expect("plan");
        let mine = &parts[ring];
        let inp = cached(&mut cache, c, run.seed, me == 0);
        let [q, k, v, g] = inp.bits.each_ref().map(|x| batch_slice(x, c, &mine.rows));
        let data = RankData::upload(gpu, &mine.plan, pos, q, k, v).expect("upload");
        let dout = ringdil_cuda::dist::ring::upload_pieces(gpu, &mine.plan, pos, g).expect("upload");
        let mut rank = DistRank::new(gpu, ring_comm, &mine.plan, Dtype::Bf16).expect("rank");
        let virt: Option<Vec<HostResult>> = (me == 0)
            .then(|| parts.iter().map(|part| run_virtual(gpu, c, part, &inp).expect("virtual ranks")).collect());
        for schedule in SCHEDULES {
            let out = rank.forward(schedule, &data).expect("forward");
            let grads = rank.backward(schedule, &data, &out, &dout).expect("backward");
            // One communicator at a time on this GPU: the ring's transfers are finished
            // before the world communicator gathers.
            gpu.synchronize().expect("sync");
            ring_comm.stream().synchronize().expect("sync");
            let res = gather(gpu, comm, &grid, &parts, &out, &grads);
            comm.barrier(gpu).expect("barrier");
            if let Some(res) = res {
                let moved: usize = parts
                    .iter()
                    .map(|part| {
                        let plan = &part.plan;
                        if schedule == Kind::PatternRing {
                            (0..p)
                                .flat_map(|d| (0..p).filter(move |&s| s != d).map(move |s| (d, s)))
                                .map(|(d, s)| plan.pattern_volume(d, s))
                                .sum::<usize>()
                        } else {
                            (0..p).map(|r| plan.ring_volume(r)).sum()
                        }
                    })
                    .sum();
                let mut extra = format!(" | K/V elements moved (fwd, all ranks) {moved}");
                if schedule == Kind::Ring {
                    let diff = virt.as_ref().map_or(f64::NAN, |vres| max_diff(&res, vres));
                    write!(extra, " | max abs diff ring vs virtual ranks {diff:.1e}").unwrap();
                }
                log.record(
                    &format!("{} | {}", schedule.name(), describe(c)),
                    &compare(c, &parts, &res, &inp.reference),
                    &extra,
                );
            }
        }
    }
    if me == 0 {
        too_many_pieces(&mut log);
        log.finish(
            &header(
                &format!("Ring check ({w} GPUs{shape}, NCCL, {})", run.mode),
                &device,
                run.seed,
                &run.date,
                &run.command,
            ),
            run.log.clone(),
            start.elapsed().as_secs_f64(),
        )
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(ranks: usize, rings: usize, batch: usize, layout: Layout) -> Case {
        let pattern = ("causal", GpuSpec::new(GpuPattern::Dense).causal(true));
        let layout_name = format!("{layout:?}");
        Case { ranks, rings, layout, layout_name, pattern, batch, heads: 2, head_dim: 64, seq: 200, key: (0, 0) }
    }

    /// What every rank would hold if it computed exactly: the reference (as f32) cut into
    /// ring rows and rank pieces, `[ring][position]`.
    fn exact(c: &Case, parts: &[RingPart], inp: &Inputs) -> Vec<HostResult> {
        let (n, h, d) = (c.seq, c.heads, c.head_dim);
        let (fwd, g) = &inp.reference;
        let [out, dq, dk, dv] =
            [&fwd.out, &g.dq, &g.dk, &g.dv].map(|x| x.iter().map(|&v| v as f32).collect::<Vec<_>>());
        let lse: Vec<f32> = fwd.lse.iter().map(|&v| v as f32).collect();
        let ring = |part: &RingPart| -> HostResult {
            let rows = |x: &[f32]| x[part.rows.start * n * h * d..part.rows.end * n * h * d].to_vec();
            (0..part.plan.ranks())
                .map(|r| {
                    let tokens = part.plan.chunks.tokens(r);
                    let lse_pieces = part
                        .plan
                        .pieces(r)
                        .iter()
                        .map(|pc| {
                            let mut v = Vec::new();
                            for bi in part.rows.clone() {
                                for hi in 0..h {
                                    v.extend(
                                        tokens[pc.local..pc.local + pc.rows]
                                            .iter()
                                            .map(|&t| lse[(bi * h + hi) * n + t]),
                                    );
                                }
                            }
                            v
                        })
                        .collect();
                    let pieces = |x: &[f32]| part.plan.scatter(&rows(x), d, r);
                    [pieces(&out), lse_pieces, pieces(&dq), pieces(&dk), pieces(&dv)]
                })
                .collect()
        };
        parts.iter().map(ring).collect()
    }

    /// The 2-D assembly on the host: exact per-rank pieces of every ring, put back by
    /// `compare`, reproduce the reference; rings put in each other's rows do not.
    #[test]
    fn rings_are_assembled_into_their_batch_rows() {
        for (world, rings, batch, layout) in [
            (4, 2, 3, Layout::Zigzag),     // 2 rings x 2 ranks, uneven batch 2 + 1
            (1, 1, 2, Layout::Contiguous), // the plain ring (and the virtual-rank path)
            (3, 3, 4, Layout::Contiguous), // pure data parallelism, 2 + 1 + 1
            (6, 2, 2, Layout::Striped),    // 2 rings x 3 ranks, striped
        ] {
            let grid = Grid::new(world, rings).unwrap();
            let c = case(grid.ring_size(), rings, batch, layout);
            let parts = ring_parts(&c, &grid).unwrap();
            assert_eq!(parts.iter().map(|p| p.rows.len()).sum::<usize>(), batch);
            let inp = inputs(&c, 3, true);
            let mut res = exact(&c, &parts, &inp);
            for (what, e) in compare(&c, &parts, &res, &inp.reference) {
                assert!(e < 1e-6, "W={world} R={rings} {what}: {e}");
            }
            if rings > 1 && parts[0].rows.len() == parts[1].rows.len() {
                res.swap(0, 1);
                let errs = compare(&c, &parts, &res, &inp.reference);
                assert!(errs.iter().all(|(_, e)| *e > bound(Dtype::Bf16)), "swapped rings must fail: {errs:?}");
            }
        }
    }

    #[test]
    fn a_ring_with_no_batch_rows_is_a_typed_error() {
        let c = case(1, 2, 1, Layout::Contiguous);
        let e = ring_parts(&c, &Grid::new(2, 2).unwrap()).err().unwrap();
        assert!(matches!(e, ringdil_cuda::dist::DistError::EmptyRing { batch: 1, rings: 2 }), "{e}");
    }

    #[test]
    fn cases_grow_the_batch_with_the_rings() {
        let one: Vec<usize> = cases(&[2], 1).iter().map(|c| c.batch).collect();
        let two: Vec<usize> = cases(&[2], 2).iter().map(|c| c.batch).collect();
        assert_eq!(one.len(), two.len());
        assert!(one.iter().zip(&two).all(|(a, b)| b == &(a + 1)));
        assert!(cases(&[1], 2).iter().all(|c| c.layout == Layout::Contiguous));
    }
}

//! Scaling benchmark of distributed attention: tokens per second and per-GPU memory of
//! the ring (and all-gather, pattern-aware plan) on `P` GPUs against one GPU, the time
//! the transfers hide behind the kernels, measured link and compute speeds with the
//! auto rule's decisions on them, the run-time auto selection checked against the
//! measured time of every option, and the largest sequence the ring runs.
//!
//! `ring_bench --nproc P [--json FILE] [--md FILE] [--date TEXT] [--max-per-gpu TOKENS] [--links-only]`
//! (several hosts: `--nnodes H --node-rank I --id-file PATH`; `--timeout T`; `--print-nccl-id`)
//!
//! `ring_bench --virtual P [--json FILE] [--md FILE] [--date TEXT]`: the ring's kernel time
//! on `P` virtual ranks of one GPU against one GPU ([`virtual_timing`]), packed documents
//! on contiguous ranks and on the work-balanced split included.
//!
//! Ratio = `t_1(N) / (P t_P(N))`: `P`-GPU throughput over `P` times one GPU's at the same
//! total length `N` (1.0 = perfect). Every row keeps `N` fixed across `P` (strong
//! scaling; the `N/GPU` column says the per-GPU length); runs with different `P` at the
//! same `N/GPU` give weak scaling.
//! One GPU runs the whole sequence with the single-GPU path (`Gpu::forward_into`; dilated
//! branches compacted), the ring runs chunk launches (dilated branches compacted per
//! chunk pair, segment bases per side). Times are
//! medians of 3 after a warm-up, the slowest rank's, forward only and forward + backward.

mod links;
mod report;
mod virtual_timing;

use ringdil_cuda::Gpu;
use ringdil_cuda::dist::auto::{Decision, Selected, Speeds, select};
use ringdil_cuda::dist::{Communicator, DistPlan, DistRank, Probe, RankData, RankEnv, SCHEDULES, launch};
use ringdil_cuda::programs::{Args, Program};
use ringdil_cuda::shape::{Chunk, Dtype, Shape};
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout};
use std::time::Instant;

const HEADS: usize = 8;
const DIM: usize = 128;

/// The spec of a row's pattern over `n` tokens.
fn pattern(name: &str, n: usize) -> GpuSpec {
    match name {
        "dense causal" | "gqa 8:1 dense causal" => GpuSpec::new(GpuPattern::Dense).causal(true),
        "packed dense causal" => GpuSpec::new(GpuPattern::Dense).causal(true).documents(packed_documents(n)),
        _ => GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(4096, 1), (16384, 2), (65536, 4), (262_144, 8)])))
            .causal(true),
    }
}

/// Long-tailed documents packed into one row of `n` tokens (a fixed draw): Pareto lengths
/// `256 / u^(1 / 1.2)` (`u` uniform in (0, 1]; `P(L > x) = (256 / x)^1.2`: mean 1536
/// tokens, one in ~12 over 2K, one in ~150 over 16K), the last one cut at `n`.
fn packed_documents(n: usize) -> Documents {
    let mut rng = SplitMix64::new(0xD0C5);
    let mut list = vec![0];
    while *list.last().expect("starts at 0") < n {
        let len = 256.0 / (1.0 - rng.uniform()).powf(1.0 / 1.2);
        list.push((list.last().expect("non-empty") + len as usize).min(n));
    }
    Documents::per_row(vec![list])
}

/// K/V heads of a pattern's rows: grouped-query rows put the 8 query heads over one K/V
/// head, whose K/V (and every ring transfer of it) is 1/8 of the multi-head size.
fn kv_heads(name: &str) -> usize {
    if name.starts_with("gqa 8:1") { HEADS / 8 } else { HEADS }
}

/// Pseudo-random bf16 in [-1, 1) (a hash per element: fast for 10^8 elements). Timings
/// need no reference values, and the checks' rounded normals (`check::rounded_bits`)
/// cost about 4 s of one core per 10^8 draws, where one configuration here draws up to
/// 5 * 10^8.
fn random_bits(n: usize, salt: u64) -> Vec<u16> {
    (0..n as u64)
        .map(|i| {
            let mut x = (i ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 31;
            let u = (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            half::bf16::from_f32(u).to_bits()
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Device memory a pass needs: what is in use outside the memory pool (context, NCCL
/// buffers, modules) plus the pool's peak use by live buffers since the last
/// [`Gpu::reset_pool_peaks`]. Freed memory the pool keeps for reuse (`ringdil_cuda::pool`)
/// is not counted.
fn used_memory(gpu: &Gpu) -> f64 {
    let Ok((free, total)) = gpu.context().mem_get_info() else { return f64::NAN };
    match gpu.pool_usage() {
        Ok(Some(p)) => ((total - free) as u64 - p.reserved + p.used_peak) as f64,
        Ok(None) => (total - free) as f64,
        Err(_) => f64::NAN,
    }
}

#[derive(serde::Serialize, Clone)]
struct Row {
    pattern: String,
    schedule: String,
    layout: String,
    ranks: usize,
    seq_len: usize,
    fwd_ms: f64,
    fwd_bwd_ms: f64,
    tokens_per_s_fwd: f64,
    tokens_per_s_fwd_bwd: f64,
    memory_gib: f64,
    kv_block_mib: f64,
}

impl Row {
    /// A row from its forward and forward+backward seconds, memory in bytes and own K/V in
    /// MiB; the derived columns (ms, tokens/s, GiB) are computed here only.
    #[allow(clippy::too_many_arguments)] // one table row's measured values
    fn new(
        pattern: &str,
        schedule: &str,
        layout: &str,
        ranks: usize,
        seq_len: usize,
        (fwd_s, both_s): (f64, f64),
        memory_bytes: f64,
        kv_block_mib: f64,
    ) -> Row {
        Row {
            pattern: pattern.into(),
            schedule: schedule.into(),
            layout: layout.into(),
            ranks,
            seq_len,
            fwd_ms: fwd_s * 1e3,
            fwd_bwd_ms: both_s * 1e3,
            tokens_per_s_fwd: seq_len as f64 / fwd_s,
            tokens_per_s_fwd_bwd: seq_len as f64 / both_s,
            memory_gib: memory_bytes / (1u64 << 30) as f64,
            kv_block_mib,
        }
    }
}

/// MiB of `elements` bf16 values.
fn mib(elements: usize) -> f64 {
    elements as f64 * 2.0 / (1u64 << 20) as f64
}

/// One GPU, whole sequence: forward and forward+backward times and memory.
fn single(gpu: &Gpu, pat: &str, n: usize) -> Row {
    let spec = pattern(pat, n);
    let shape = Shape::square(1, n, HEADS, DIM).with_kv_heads(kv_heads(pat));
    let mut prep = gpu.prepare(&shape, Dtype::Bf16, &spec, &Chunk::whole(&shape)).expect("prepare");
    let up = |s, dims: [usize; 4]| gpu.upload(&random_bits(dims.iter().product(), s), dims).expect("upload");
    let (q, k, v, g) = (up(1, shape.q_dims()), up(2, shape.k_dims()), up(3, shape.k_dims()), up(4, shape.q_dims()));
    let mut out = gpu.alloc_partial(&prep).expect("alloc");
    let mut grads = gpu.alloc_grads(&prep).expect("alloc");
    let mut fwd = Vec::new();
    let mut both = Vec::new();
    gpu.reset_pool_peaks().expect("pool");
    for i in 0..4 {
        gpu.synchronize().unwrap();
        let t = Instant::now();
        gpu.forward_into(&mut prep, &q, &k, &v, &mut out).expect("forward");
        gpu.synchronize().unwrap();
        let f = t.elapsed().as_secs_f64();
        gpu.backward_into(&mut prep, &q, &k, &v, &out, &g, &mut grads).expect("backward");
        gpu.synchronize().unwrap();
        if i > 0 {
            fwd.push(f);
            both.push(t.elapsed().as_secs_f64());
        }
    }
    let kv = mib(2 * shape.k_len());
    Row::new(pat, "single", "-", 1, n, (median(fwd), median(both)), used_memory(gpu), kv)
}

struct Measured {
    row: Row,
    /// K/V MiB rank 0 sends in one forward.
    sent_mib: f64,
    compute_ms: f64,
    comm_ms: f64,
    full_ms: f64,
}

/// `P` ranks: forward (and its compute-only / comm-only probes for ring schedules) and
/// forward+backward; rank 0 gets the slowest rank's times.
fn distributed(
    gpu: &Gpu,
    comm: &Communicator,
    pat: &str,
    layout: &Layout,
    schedule: Kind,
    n: usize,
    probes: bool,
) -> Result<Measured, String> {
    let (me, p) = (comm.rank(), comm.world());
    let chunks = ChunkPlan::new(n, p, layout).map_err(|e| e.to_string())?;
    let plan = DistPlan::new(chunks, pattern(pat, n), 1, HEADS, DIM)
        .and_then(|p| p.with_kv_heads(kv_heads(pat)))
        .map_err(|e| e.to_string())?;
    let (len, kv_len) = (n * HEADS * DIM, n * plan.kv_heads * DIM);
    let (q, k, v, g) = (random_bits(len, 1), random_bits(kv_len, 2), random_bits(kv_len, 3), random_bits(len, 4));
    let data = RankData::upload(gpu, &plan, me, &q, &k, &v).map_err(|e| e.to_string())?;
    let dout = ringdil_cuda::dist::ring::upload_pieces(gpu, &plan, me, &g).map_err(|e| e.to_string())?;
    drop((q, k, v, g));
    let mut rank = DistRank::new(gpu, comm, &plan, Dtype::Bf16).map_err(|e| e.to_string())?;
    let mut timed = |probe: Probe, backward: bool, reps: usize| -> Result<(f64, f64), String> {
        let mut ts = Vec::new();
        let mut peak = 0.0f64;
        gpu.reset_pool_peaks().map_err(|e| e.to_string())?;
        for i in 0..reps + 1 {
            comm.barrier(gpu).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let out = rank.forward_probe(schedule, &data, probe).map_err(|e| e.to_string())?;
            if backward {
                let grads = rank.backward(schedule, &data, &out, &dout).map_err(|e| e.to_string())?;
                gpu.synchronize().map_err(|e| e.to_string())?;
                comm.stream().synchronize().map_err(|e| e.to_string())?;
                peak = peak.max(used_memory(gpu));
                drop(grads);
            }
            gpu.synchronize().map_err(|e| e.to_string())?;
            comm.stream().synchronize().map_err(|e| e.to_string())?;
            peak = peak.max(used_memory(gpu));
            drop(out);
            // Stop the clock when the slowest rank is done.
            comm.barrier(gpu).map_err(|e| e.to_string())?;
            if i > 0 {
                ts.push(t.elapsed().as_secs_f64());
            }
        }
        Ok((median(ts), peak))
    };
    let (full, _) = timed(Probe::Full, false, 3)?;
    let (both, mem) = timed(Probe::Full, true, 2)?;
    let (compute, comm_t) = if probes && p > 1 {
        (timed(Probe::ComputeOnly, false, 3)?.0, timed(Probe::CommOnly, false, 3)?.0)
    } else {
        (f64::NAN, f64::NAN)
    };
    // Every pass starts and ends with a barrier, so rank 0's wall time is the slowest
    // rank's (plus one barrier).
    let kv = mib(2 * plan.kv_piece_lens(me).iter().sum::<usize>());
    // K/V this rank sends in one forward (bf16: 2 bytes per element).
    let sent = match schedule {
        Kind::Ring => plan.ring_volume(me),
        Kind::PatternRing => (0..p).filter(|&d| d != me).map(|d| plan.pattern_volume(d, me)).sum(),
        Kind::AllGather => 2 * (p - 1) * plan.kv_piece_lens(me).iter().sum::<usize>(),
        Kind::Ulysses => unreachable!("the rank refused it in the passes above"),
    };
    Ok(Measured {
        row: Row::new(pat, schedule.name(), &format!("{layout:?}").to_lowercase(), p, n, (full, both), mem, kv),
        sent_mib: mib(sent),
        compute_ms: compute * 1e3,
        comm_ms: comm_t * 1e3,
        full_ms: full * 1e3,
    })
}

fn main() {
    let args = Args::from_env(Program::RingBench);
    if let Some(p) = args.integer::<usize>("--virtual") {
        virtual_timing::run(&args, p);
        return;
    }
    args.print_nccl_id();
    let mut env = RankEnv::from_env().unwrap_or_else(|e| args.fail(2, e));
    if let (Some(env), Some(t)) = (env.as_mut(), args.timeout()) {
        env.timeout = t;
    }
    let Some(env) = env else {
        let n: usize = args.integer("--nproc").unwrap_or(1);
        let exe = std::env::current_exe().expect("own path");
        if let Err(e) = launch(&exe, args.rest(), &args.launch_options(n)) {
            args.fail(1, e);
        }
        return;
    };
    let (gpu, comm) = match env.connect() {
        Ok(Some(x)) => x,
        Ok(None) => args.skip(),
        Err(e) => {
            eprintln!("ring bench rank {}: {e}", env.rank);
            std::process::exit(1);
        }
    };
    let (me, p) = (comm.rank(), comm.world());
    let links = links::measure(&gpu, &comm).unwrap_or_else(|e| args.fail(1, e));
    if me == 0 {
        let g = |x: f64| x / 1e9;
        println!(
            "links (GB/s sent per rank): ring hop {:.1}, all-to-all {:.1}, all-gather {:.1}",
            g(links.ring),
            g(links.all_to_all),
            g(links.all_gather)
        );
    }
    if args.switch("--links-only") {
        return;
    }
    let max_per_gpu: usize = args.integer("--max-per-gpu").unwrap_or(1024 * 1024);
    let start = Instant::now();
    let k = 1024;
    // One GPU (rank 0 alone; the others wait at the barrier).
    let mut singles: Vec<Row> = Vec::new();
    if me == 0 {
        for (pat, ns) in [
            ("dense causal", vec![8 * k, 16 * k, 32 * k, 64 * k, 128 * k]),
            ("longnet dilated causal", vec![32 * k, 64 * k, 128 * k]),
            ("gqa 8:1 dense causal", vec![32 * k, 128 * k]),
        ] {
            for n in ns {
                let r = single(&gpu, pat, n);
                println!(
                    "single {pat} N={n}: fwd {:.2} ms, fwd+bwd {:.2} ms, {:.2} GiB",
                    r.fwd_ms, r.fwd_bwd_ms, r.memory_gib
                );
                singles.push(r);
            }
        }
    }
    comm.barrier(&gpu).expect("barrier");
    let mut rows: Vec<(Measured, &'static str)> = Vec::new();
    let configs: Vec<(&str, Layout, Kind, usize, &'static str)> = vec![
        ("dense causal", Layout::Zigzag, Kind::Ring, 8 * k, "strong"),
        ("dense causal", Layout::Zigzag, Kind::Ring, 32 * k, "strong"),
        ("dense causal", Layout::Zigzag, Kind::Ring, 128 * k, "strong"),
        ("dense causal", Layout::Contiguous, Kind::Ring, 128 * k, "strong (unbalanced layout)"),
        ("dense causal", Layout::Zigzag, Kind::AllGather, 128 * k, "strong (all-gather baseline)"),
        ("dense causal", Layout::Zigzag, Kind::PatternRing, 128 * k, "strong (pattern-aware)"),
        ("gqa 8:1 dense causal", Layout::Zigzag, Kind::Ring, 32 * k, "strong (K/V at 1/8)"),
        ("gqa 8:1 dense causal", Layout::Zigzag, Kind::Ring, 128 * k, "strong (K/V at 1/8)"),
        ("longnet dilated causal", Layout::Contiguous, Kind::Ring, 32 * k, "strong"),
        ("longnet dilated causal", Layout::Contiguous, Kind::PatternRing, 32 * k, "strong (pattern-aware)"),
        ("longnet dilated causal", Layout::Contiguous, Kind::PatternRing, 128 * k, "strong"),
        ("longnet dilated causal", Layout::Contiguous, Kind::Ring, 128 * k, "strong"),
        ("longnet dilated causal", Layout::Zigzag, Kind::PatternRing, 128 * k, "strong (balanced layout)"),
    ];
    for (pat, layout, schedule, n, what) in configs {
        let n = n.max(p * 128);
        match distributed(&gpu, &comm, pat, &layout, schedule, n, schedule == Kind::Ring) {
            Ok(m) => {
                if me == 0 {
                    println!(
                        "{} {pat} {layout:?} N={n}: fwd {:.2} ms (compute-only {:.2}, comm-only {:.2}), fwd+bwd {:.2} ms, {:.2} GiB",
                        schedule.name(),
                        m.row.fwd_ms,
                        m.compute_ms,
                        m.comm_ms,
                        m.row.fwd_bwd_ms,
                        m.row.memory_gib
                    );
                }
                rows.push((m, what));
            }
            Err(e) => {
                if me == 0 {
                    println!("{} {pat} N={n}: error {e}", schedule.name());
                }
            }
        }
    }
    // Largest sequence: dense causal zigzag ring forward, doubling the per-GPU length.
    let mut largest = Vec::new();
    let mut per = 128 * k;
    while per <= max_per_gpu {
        let n = per * p;
        let t = Instant::now();
        let chunks = ChunkPlan::new(n, p, &Layout::Zigzag).expect("plan");
        let r = DistPlan::new(chunks, pattern("dense causal", n), 1, HEADS, DIM).map_err(|e| e.to_string()).and_then(
            |plan| {
                let len = n * HEADS * DIM;
                let b = random_bits(len, 7);
                let data = RankData::upload(&gpu, &plan, me, &b, &b, &b).map_err(|e| e.to_string())?;
                let mut rank = DistRank::new(&gpu, &comm, &plan, Dtype::Bf16).map_err(|e| e.to_string())?;
                gpu.reset_pool_peaks().map_err(|e| e.to_string())?;
                comm.barrier(&gpu).map_err(|e| e.to_string())?;
                let t0 = Instant::now();
                let out = rank.forward(Kind::Ring, &data).map_err(|e| e.to_string())?;
                gpu.synchronize().map_err(|e| e.to_string())?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                let mem = used_memory(&gpu) / (1u64 << 30) as f64;
                drop(out);
                comm.barrier(&gpu).map_err(|e| e.to_string())?;
                Ok((ms, mem))
            },
        );
        match r {
            Ok((ms, mem)) => {
                if me == 0 {
                    println!("largest: N={n} ({per}/GPU) forward {ms:.1} ms, {mem:.1} GiB in use");
                }
                largest.push((n, ms, mem));
            }
            Err(e) => {
                if me == 0 {
                    println!("largest: N={n} failed: {e}");
                }
                break;
            }
        }
        if t.elapsed().as_secs_f64() > 60.0 {
            break;
        }
        per *= 2;
    }
    // The auto rule at run time: rank 0's measured speeds, shared so every rank decides alike.
    let mine = if me == 0 { measured_speeds(&gpu, p, &links, &singles, &rows).to_vec() } else { vec![0.0; Speeds::LEN] };
    let speeds = Speeds::from_slice(&comm.broadcast_f64(0, &mine).expect("broadcast")).expect("six speeds");
    let autos = auto_rows(&gpu, &comm, &speeds);
    if me != 0 {
        return;
    }
    report::report(&gpu, p, &singles, &rows, &largest, (&speeds, &autos), start.elapsed().as_secs_f64(), &args);
}

/// The auto rule's speeds from this run (rank 0): compute from one GPU's dense causal
/// forward at 128K, link bandwidth from the comm-only ring at 128K, the per-step overhead
/// from the 8K ring forward (an upper bound), memory from the device.
fn measured_speeds(gpu: &Gpu, p: usize, links: &links::Links, singles: &[Row], rows: &[(Measured, &str)]) -> Speeds {
    let n = 128 * 1024;
    let flops = singles
        .iter()
        .find(|r| r.pattern == "dense causal" && r.seq_len == n)
        .map_or(f64::NAN, |s| 4.0 * (HEADS * DIM) as f64 * (n as f64).powi(2) * 0.5 / (s.fwd_ms / 1e3));
    let link = rows
        .iter()
        .find(|(m, _)| m.row.schedule == "ring" && m.row.seq_len == n && m.comm_ms.is_finite())
        .map_or(f64::NAN, |(m, _)| {
            let bytes = 4.0 * (HEADS * DIM) as f64 * (m.row.seq_len / p) as f64 * (p - 1) as f64;
            bytes / (m.comm_ms / 1e3)
        });
    let step_overhead = rows
        .iter()
        .find(|(m, _)| m.row.seq_len == 8 * 1024 && m.row.schedule == "ring")
        .map_or(f64::NAN, |(m, _)| m.row.fwd_ms / 1e3 / p as f64);
    let memory = gpu.context().mem_get_info().map(|x| x.1 as f64).unwrap_or(f64::NAN);
    Speeds {
        flops,
        link_bytes: link,
        all_to_all_bytes: links.all_to_all,
        all_gather_bytes: links.all_gather,
        step_overhead,
        memory,
    }
}

/// One row of the run-time auto check: the rule's decision and the measured forward time
/// of every option on the same problem.
#[derive(serde::Serialize)]
struct AutoRow {
    pattern: String,
    seq_len: usize,
    decision: Decision,
    selected: Selected,
    measured_ms: Vec<(String, f64)>,
}

/// Decide with `speeds` for each problem, then time every option (rank 0 alone for one GPU).
fn auto_rows(gpu: &Gpu, comm: &Communicator, speeds: &Speeds) -> Vec<AutoRow> {
    let k = 1024;
    let me = comm.rank();
    let mut out = Vec::new();
    for (pat, layout, n) in [
        ("dense causal", Layout::Zigzag, 4 * k),
        ("dense causal", Layout::Zigzag, 16 * k),
        ("dense causal", Layout::Zigzag, 64 * k),
        ("dense causal", Layout::Zigzag, 128 * k),
        ("longnet dilated causal", Layout::Contiguous, 128 * k),
    ] {
        let chunks = ChunkPlan::new(n, comm.world(), &layout).expect("plan");
        let plan = DistPlan::new(chunks, pattern(pat, n), 1, HEADS, DIM).expect("plan");
        let (decision, selected) = select(&plan, speeds).expect("select");
        let mut measured = Vec::new();
        let single_ms = if me == 0 { single(gpu, pat, n).fwd_ms } else { f64::NAN };
        comm.barrier(gpu).expect("barrier");
        measured.push(("single".to_string(), single_ms));
        for schedule in SCHEDULES {
            let ms = distributed(gpu, comm, pat, &layout, schedule, n, false).map_or(f64::NAN, |m| m.row.fwd_ms);
            measured.push((schedule.name().to_string(), ms));
        }
        if me == 0 {
            println!("auto {pat} N={n}: {selected:?}, measured {measured:?}");
        }
        out.push(AutoRow { pattern: pat.into(), seq_len: n, decision, selected, measured_ms: measured });
    }
    out
}

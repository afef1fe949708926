//! Distributed attention against the f64 reference (`ringdil_cuda::check::ring` holds
//! the cases and the comparison): every schedule the GPU runs (ring, pattern-aware,
//! all-gather, Ulysses, the Ulysses x ring hybrid; virtual ranks on one GPU), layout and pattern, on lengths that do not
//! divide evenly. Output, LSE, dQ, dK and dV are gathered to rank 0 and compared with the
//! reference on the same bf16-rounded inputs: relative L2 error < 1e-2 (the bf16 bound
//! of `gpu_check`). For the dense ring, rank 0 also runs the same case on virtual ranks
//! and reports the largest difference from the real ring (same launches, same merge
//! order: expected 0). Every pattern runs on every layout (striped pieces launch at true
//! positions, `dist::layout`); a permutation that gives a rank more runs than the ring
//! launches per step must be a typed error.
//!
//! The distributed cases run the same per-rank body (`dist_main`) whichever way the
//! ranks are started: one process per GPU (`--nproc`, re-executed under the launcher)
//! or one thread per GPU of this process (`--threads`). With `--rings R` the `W` ranks
//! form `R` rings of `W / R` (the 2-D layout, `dist::grid`): each ring runs the ring on
//! its own sub-communicator over its slice of the batch, every rank sends its pieces to
//! global rank 0 over the world communicator, and rank 0 compares the whole batch with
//! the reference; the dense ring is compared with virtual ranks ring by ring.
//!
//! ```text
//! ring_check [--seed N] [--log FILE.md] [--date TEXT] [--require-gpu]  # virtual ranks (ring, Ulysses, hybrid), one GPU
//! ring_check --jobs N [--time-limit S] [same options]                  # the same in N processes (--shard K/N each)
//! ring_check --nproc W [--rings R] [same options]                      # NCCL, one process per GPU
//! ring_check --threads W [--rings R] [same options]                    # NCCL, one thread per GPU
//! ring_check --nproc 1 --nnodes H --node-rank I --id-file PATH [...]   # one of H hosts
//! ring_check (--nproc W | --threads W) --stall RANK:SECONDS --timeout T # stall check
//! ```
//! `--schedules ring,hybrid` checks only the schedules named (`Kind::name`; all by
//! default; virtual ranks run the ring, Ulysses and the hybrid); `--only TEXT` only the
//! cases whose description (the log's case column) contains TEXT, e.g. `d_v=128`. `--timeout T` sets the watchdog's timeout (`RINGDIL_TIMEOUT_S`, 0 = off); the stall
//! check is `ringdil_cuda::check::faults`. `--jobs N` runs the virtual-rank check as N
//! processes on the one GPU, each the cases of every N-th (size, pattern) key (`--shard K/N`), so that
//! the kernel modules' compiles on a fresh machine run side by side; the rows of the log
//! are numbered by case and schedule, the same in every shard, and merged by number.
//! Every process rewrites its log before each case; `--time-limit S` stops the shards
//! still running after S seconds and merges what they wrote, the rows they did not reach
//! counted as failed (a run that must end within a wall-clock limit).
//! `--contend MS` runs the check beside a second process of this binary that keeps the GPU
//! busy with MS-millisecond spin kernels, so that the driver time-slices the two contexts and
//! preempts the kernels under check mid-flight (`ringdil_cuda::programs::contend`; one
//! contender for all shards of `--jobs`, and for all ranks of `--nproc` on this host).
//! Without a CUDA device it prints "skipped: no CUDA device" and exits 0 (1 with
//! `--require-gpu`); a skip is never counted as a pass.

use cudarc::driver::CudaSlice;
use ringdil_cuda::Gpu;
use ringdil_cuda::check::bound;
use ringdil_cuda::check::ring::{
    Cache, Case, HostResult, RingPart, batch_slices, cached, cases, compare_explained, describe, download, max_diff,
    ring_parts, run_virtual, run_virtual_schedule,
};
use ringdil_cuda::dist::head_split::HeadSplit;
use ringdil_cuda::dist::hybrid_split::HybridSplit;
use ringdil_cuda::dist::ring::upload_dout;
use ringdil_cuda::dist::{
    Communicator, DistError, DistPlan, DistRank, Grid, RankData, RankEnv, RankGrads, SCHEDULES, launch,
    run_threads_with, timeout_from_env,
};
use ringdil_cuda::programs::contend::{self, Contender};
use ringdil_cuda::programs::{Args, CheckLog, Program, shards};
use ringdil_cuda::shape::Dtype;
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_cuda::tensors::DevicePartial;
use ringdil_reference::ring::{ChunkPlan, Kind, Layout};
use std::fmt::Write;
use std::time::Duration;

/// The log's header: what ran, where, and what passing means.
fn header(title: &str, device: &str, run: &DistRun) -> String {
    format!(
        "# {title}\n\n* device: {device}\n* date: {}\n* seed: {}\n* command: `{}`\n* reference: f64 `attention` / `attention_backward` on the same bf16-rounded inputs; bound: relative L2 error < {} for out, lse, dq, dk, dv\n* gathered host arrays start as NaN: a row no rank wrote fails\n",
        run.date,
        run.seed,
        run.command,
        bound(Dtype::Bf16)
    )
}

/// Write the log (`--log`) and the summary; true when every case passed.
fn finish(log: &CheckLog, header: &str, run: &DistRun, seconds: f64) -> bool {
    let worst: String =
        log.worst().iter().map(|(key, err, bound)| format!("| {key} | {err:.2e} | {bound} |\n")).collect();
    write_log(header, log.rows(), &worst, (log.passed(), log.failed()), run, seconds)
}

/// The head of the log's case table (its rows follow, `| N | result | case | errors |`).
const CASES_TABLE: &str = "\n## Cases\n\n| # | result | case | relative errors |\n|---|---|---|---|\n";

/// The log from its parts: the case rows (`| N | result | case | errors |`, the table
/// [`shards::merge_logs`] reads back), the worst-error rows (`| key | worst | bound |`)
/// and the counts.
fn write_log(
    header: &str,
    rows: &str,
    worst: &str,
    (passed, failed): (usize, usize),
    run: &DistRun,
    seconds: f64,
) -> bool {
    let mut out = header.to_string();
    out.push_str(CASES_TABLE);
    out.push_str(rows);
    writeln!(out, "\n## Worst errors\n\n| schedule / quantity | worst | bound |\n|---|---|---|").unwrap();
    out.push_str(worst);
    writeln!(out, "\n**{passed} passed, {failed} failed** in {seconds:.1} s.").unwrap();
    if let Some(path) = &run.log {
        std::fs::write(path, &out).expect("write log");
        println!("log written to {path}");
    }
    println!("ring check: {passed} passed, {failed} failed");
    failed == 0
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
    /// The schedules to check (`--schedules a,b`; every one by default).
    schedules: Vec<Kind>,
    /// `--only TEXT`: the cases whose description contains TEXT (all by default).
    only: Option<String>,
    /// `--shard K/N` (virtual ranks): the cases of every N-th input key ([`shard_by_key`]).
    shard: Option<(usize, usize)>,
}

impl DistRun {
    /// The cases of `ranks` per ring and `rings` rings that this run checks, each with its
    /// index in the list `--only` leaves (its rows' numbers come from it, so that they are
    /// the same in every shard).
    fn cases(&self, ranks: &[usize], rings: usize) -> Vec<(usize, Case)> {
        let mut all = cases(ranks, rings);
        if let Some(t) = &self.only {
            all.retain(|c| describe(c).contains(t.as_str()));
        }
        all.into_iter().enumerate().collect()
    }
}

/// The cases of `list` in shard `K/N` (`None`: every case): those of every N-th input key
/// (size, pattern), counted in the order the keys first appear, from the K-th. A key's
/// cases (every rank count, layout and schedule) share their inputs and reference
/// ([`cached`]), so they stay in one process; a kernel module that several shards need
/// compiles once through the PTX disk cache. With more shards than keys the shards past
/// the last key get no case.
fn shard_by_key(list: &[(usize, Case)], shard: Option<(usize, usize)>) -> Vec<&(usize, Case)> {
    let mut keys: Vec<(usize, usize)> = Vec::new();
    list.iter()
        .filter(|(_, c)| {
            let ordinal = keys.iter().position(|k| *k == c.key).unwrap_or_else(|| {
                keys.push(c.key);
                keys.len() - 1
            });
            shard.is_none_or(|(k, n)| ordinal % n == k)
        })
        .collect()
}

/// The schedules on virtual ranks, with the name of each in the log; a row's number is
/// `case index * VIRTUAL.len() + schedule index`.
const VIRTUAL: [(&str, Kind); 3] =
    [("virtual", Kind::Ring), ("virtual ulysses", Kind::Ulysses), ("virtual hybrid", Kind::Hybrid)];
/// The rank counts of the virtual-rank check.
const VIRTUAL_RANKS: [usize; 3] = [2, 3, 4];

impl DistRun {
    /// The virtual-rank schedules `--schedules` keeps: (index in [`VIRTUAL`], name, kind).
    fn virtual_schedules(&self) -> impl Iterator<Item = (usize, &'static str, Kind)> + '_ {
        VIRTUAL.into_iter().enumerate().filter(|(_, (_, k))| self.schedules.contains(k)).map(|(si, (n, k))| (si, n, k))
    }
}

/// The schedules named by `--schedules` (comma-separated names of `Kind::name`), or all.
fn schedules(args: &Args) -> Vec<Kind> {
    let Some(list) = args.value("--schedules") else { return SCHEDULES.to_vec() };
    list.split(',')
        .map(|name| {
            SCHEDULES.into_iter().find(|k| k.name() == name).unwrap_or_else(|| {
                let known: Vec<_> = SCHEDULES.iter().map(|k| k.name()).collect();
                args.fail(2, format!("--schedules: unknown schedule {name:?} (known: {})", known.join(", ")))
            })
        })
        .collect()
}

fn main() {
    let args = Args::from_env(Program::RingCheck);
    contend::child_main_if_asked(&args);
    let seed: u64 = args.integer("--seed").unwrap_or(1);
    let (nproc, threads, rings) = (args.integer("--nproc"), args.integer("--threads"), args.integer("--rings"));
    let mut env = RankEnv::from_env().unwrap_or_else(|e| args.fail(2, e));
    let timeout = args.timeout();
    if let (Some(env), Some(t)) = (env.as_mut(), timeout) {
        env.timeout = t;
    }
    if args.value("--stall").is_some() {
        ringdil_cuda::check::faults::main(&args, env, nproc, threads);
    }
    // The world: this process's launch environment, else the flag that will start it.
    let world = match (nproc, threads) {
        (Some(_), Some(_)) => args.fail(2, "--nproc and --threads exclude each other"),
        (n, t) => env.as_ref().map(|e| e.world).or(n).or(t),
    };
    let rings = match (world, rings) {
        (None, Some(r)) => args.fail(2, format!("--rings {r} needs --nproc or --threads")),
        (Some(w), r) => Grid::new(w, r.unwrap_or(1)).unwrap_or_else(|e| args.fail(2, e)).rings(),
        (None, None) => 1,
    };
    let run = DistRun {
        seed,
        date: args.date(),
        command: args.command(),
        log: args.value("--log"),
        rings,
        mode: if threads.is_some() { "one thread per GPU" } else { "one process per GPU" },
        schedules: schedules(&args),
        only: args.value("--only"),
        shard: args.value("--shard").map(|s| shards::parse_shard(&s).unwrap_or_else(|e| args.fail(2, e))),
    };
    let jobs = args.integer::<usize>("--jobs");
    match (jobs, &run.shard, world) {
        (Some(0), _, _) => args.fail(2, "--jobs 0: expected at least 1 process"),
        (Some(j), Some(_), _) => args.fail(2, format!("--jobs {j} with --shard: --jobs runs the shards itself")),
        (Some(j), _, Some(w)) => args.fail(2, format!("--jobs {j} with {w} ranks: --jobs shards the virtual-rank run")),
        (None, Some(_), Some(w)) => {
            args.fail(2, format!("--shard with {w} ranks: --shard shards the virtual-rank run"))
        }
        _ => {}
    }
    let limit = shards::time_limit(&args, jobs);
    // One contender per host: the process the check starts in, not the ranks it launches.
    let _contender = match env {
        None => Contender::start(&args).unwrap_or_else(|e| args.fail(2, e)),
        Some(_) => None,
    };
    let ok = match (env, nproc, threads) {
        (None, Some(n), _) => {
            let exe = std::env::current_exe().expect("own path");
            match launch(&exe, args.rest(), &args.launch_options(n)) {
                Ok(()) => return,
                Err(e) => args.fail(1, e),
            }
        }
        (None, _, Some(n)) => match run_threads_with(
            n,
            timeout.unwrap_or_else(|| timeout_from_env().unwrap_or_else(|e| args.fail(2, e))),
            |gpu, comm| Ok(dist_main(gpu, comm, &run)),
        ) {
            Ok(Some(oks)) => oks.iter().all(|&ok| ok),
            Ok(None) => args.skip(),
            Err(e) => args.fail(1, e),
        },
        (None, None, None) => match jobs {
            Some(j) => virtual_jobs(&args, &args.gpu(), &run, j, limit),
            None => virtual_main(&args.gpu(), &run),
        },
        (Some(env), _, _) => match env.connect() {
            Ok(Some((gpu, comm))) => dist_main(&gpu, &comm, &run),
            Ok(None) => args.skip(),
            Err(e) => args.fail(1, format!("rank {}: {e}", env.rank)),
        },
    };
    std::process::exit(if ok { 0 } else { 1 });
}

fn virtual_main(gpu: &Gpu, run: &DistRun) -> bool {
    let start = std::time::Instant::now();
    let device = gpu.describe().unwrap_or_default();
    let mut log = CheckLog::default();
    let mut cache = Cache::new();
    let one_ring = Grid::new(1, 1).expect("one rank, one ring");
    let list = run.cases(&VIRTUAL_RANKS, 1);
    let head = header("Ring check (virtual ranks, one GPU)", &device, run);
    let mine = shard_by_key(&list, run.shard);
    for (done, &(ci, ref c)) in mine.iter().copied().enumerate() {
        write_partial(&log, &head, run, (done, mine.len()));
        let parts = ring_parts(c, &one_ring).expect("plan");
        let inp = cached(&mut cache, c, run.seed, true);
        for (si, name, schedule) in run.virtual_schedules() {
            let (number, label) = (ci * VIRTUAL.len() + si, format!("{name} | {}", describe(c)));
            match run_virtual_schedule(gpu, c, &parts[0], &inp, schedule) {
                Ok(res) => {
                    let res = [res];
                    let (metrics, why) = compare_explained(c, &parts, &res, &inp.reference);
                    log.record(Some(number), &label, name, &metrics, &why);
                }
                Err(e) => log.record_errored(number, &label, &e.to_string()),
            }
        }
    }
    // The typed-error check needs no GPU: the unsharded run or the shards' parent has it.
    if run.shard.is_none() {
        too_many_pieces(&mut log, list.len() * VIRTUAL.len());
    }
    finish(&log, &head, run, start.elapsed().as_secs_f64())
}

/// The log so far (`--log`), rewritten before each case, so that a run cut short (a time
/// limit, a kernel fault that ends the process) keeps the rows it checked; `--jobs`
/// merges such a log like a finished one, its missing rows counted as failed.
fn write_partial(log: &CheckLog, header: &str, run: &DistRun, (done, total): (usize, usize)) {
    if let Some(path) = &run.log {
        let mut out = header.to_string();
        out.push_str(CASES_TABLE);
        out.push_str(log.rows());
        writeln!(out, "\n(run in progress: {done} of {total} cases done)").unwrap();
        std::fs::write(path, out).expect("write log");
    }
}

/// `--jobs N` on virtual ranks: this program as shards `K/N` ([`shards::run_shards`]),
/// then one log from theirs, with the typed-error check. A row no shard wrote (a shard
/// that stopped) counts as failed and is named.
fn virtual_jobs(args: &Args, gpu: &Gpu, run: &DistRun, jobs: usize, limit: Option<Duration>) -> bool {
    let start = std::time::Instant::now();
    let device = gpu.describe().unwrap_or_default();
    let base = shards::log_base(run.log.clone(), "ring-check");
    let logs = shards::run_shards(args.rest(), &[], &[], jobs, &base, limit).unwrap_or_else(|e| args.fail(1, e));
    let merged = shards::merge_logs(&logs).unwrap_or_else(|e| args.fail(1, e));
    let list = run.cases(&VIRTUAL_RANKS, 1);
    let expected = list.iter().flat_map(|(ci, _)| run.virtual_schedules().map(move |(si, ..)| ci * VIRTUAL.len() + si));
    let missing: Vec<usize> = expected.filter(|n| merged.numbers.binary_search(n).is_err()).collect();
    let mut log = CheckLog::default();
    too_many_pieces(&mut log, list.len() * VIRTUAL.len());
    let mut rows = merged.rows + log.rows();
    if !missing.is_empty() {
        writeln!(rows, "\nNot run (a shard stopped first; counted as failed): rows {missing:?}").unwrap();
    }
    let counts = (merged.passed + log.passed(), merged.failed + log.failed() + missing.len());
    let title = format!("Ring check (virtual ranks, one GPU, {jobs} processes)");
    write_log(&header(&title, &device, run), &rows, &merged.worst, counts, run, start.elapsed().as_secs_f64())
}

/// A layout whose rank holds more runs than the ring launches per step must be a typed
/// error naming the rank (descending tokens: every run is one token long).
fn too_many_pieces(log: &mut CheckLog, number: usize) {
    let order: Vec<usize> = (0..64).rev().collect();
    let chunks = ChunkPlan::new(64, 2, &Layout::Permuted { order, boundaries: None }).expect("layout");
    let e = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Dense), 1, 1, 64);
    let ok = matches!(&e, Err(DistError::TooManyPieces { rank: 0, .. }));
    let message = e.err().map(|e| e.to_string()).unwrap_or_default();
    log.record_answer(number, ok, &format!("descending permutation: typed error `{message}`"));
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
        let (q_lens, out_lens) = (plan.piece_lens(pos), plan.out_piece_lens(pos));
        let (k_lens, v_lens) = (plan.kv_piece_lens(pos), plan.v_piece_lens(pos));
        let lse: Vec<usize> = plan.pieces(pos).iter().map(|pc| plan.batch * plan.heads * pc.rows).collect();
        let kinds = [&out_lens, &lse, &q_lens, &k_lens, &v_lens]
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
    let mut log = CheckLog::default();
    let mut cache = Cache::new();
    let list = run.cases(&[p], grid.rings());
    for (ci, c) in &list {
        let parts = ring_parts(c, &grid).expect("plan");
        let mine = &parts[ring];
        let inp = cached(&mut cache, c, run.seed, me == 0);
        let [q, k, v, g] = batch_slices(&inp.bits, c, &mine.rows);
        let data = RankData::upload(gpu, &mine.plan, pos, q, k, v).expect("upload");
        let dout = upload_dout(gpu, &mine.plan, pos, g).expect("upload");
        let mut rank = DistRank::new(gpu, ring_comm, &mine.plan, Dtype::Bf16).expect("rank");
        let virt: Option<Vec<HostResult>> = (me == 0)
            .then(|| parts.iter().map(|part| run_virtual(gpu, c, part, &inp).expect("virtual ranks")).collect());
        for &schedule in &run.schedules {
            let si = SCHEDULES.iter().position(|&k| k == schedule).expect("a schedule of SCHEDULES");
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
                        match schedule {
                            Kind::PatternRing => (0..p)
                                .flat_map(|d| (0..p).filter(move |&s| s != d).map(move |s| (d, s)))
                                .map(|(d, s)| plan.pattern_volume(d, s))
                                .sum::<usize>(),
                            Kind::Ulysses => {
                                let split = HeadSplit::of(plan);
                                (0..p).map(|r| split.forward_volume(plan, r)).sum()
                            }
                            Kind::Hybrid => {
                                let split = HybridSplit::new(plan, plan.hybrid_degree()).expect("checked by the run");
                                (0..p).map(|r| split.forward_volume(plan, r)).sum()
                            }
                            _ => (0..p).map(|r| plan.ring_volume(r)).sum(),
                        }
                    })
                    .sum();
                let what = match schedule {
                    Kind::Ulysses => "Q/K/V/out/LSE".to_string(),
                    Kind::Hybrid => format!("Q/K/V/out/LSE, groups of {}", parts[0].plan.hybrid_degree()),
                    _ => "K/V".to_string(),
                };
                let mut extra = format!(" | {what} elements moved (fwd, all ranks) {moved}");
                if schedule == Kind::Ring {
                    let diff = virt.as_ref().map_or(f64::NAN, |vres| max_diff(&res, vres));
                    write!(extra, " | max abs diff ring vs virtual ranks {diff:.1e}").unwrap();
                }
                let label = format!("{} | {}", schedule.name(), describe(c));
                let number = ci * SCHEDULES.len() + si;
                let (metrics, why) = compare_explained(c, &parts, &res, &inp.reference);
                log.record(Some(number), &label, schedule.name(), &metrics, &(extra + &why));
            }
        }
    }
    if me == 0 {
        too_many_pieces(&mut log, list.len() * SCHEDULES.len());
        let title = format!("Ring check ({w} GPUs{shape}, NCCL, {})", run.mode);
        finish(&log, &header(&title, &device, run), run, start.elapsed().as_secs_f64())
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    /// Shards of the whole virtual-rank list cover it once, keep each key's cases
    /// together, and with 24 processes (more than the 12 patterns) none is idle.
    #[test]
    fn shards_cover_the_cases_once_and_keep_a_key_together() {
        let list: Vec<(usize, Case)> = cases(&VIRTUAL_RANKS, 1).into_iter().enumerate().collect();
        let keys: HashSet<_> = list.iter().map(|(_, c)| c.key).collect();
        assert!(keys.len() > 24, "{} keys", keys.len());
        for n in [1, 5, 16, 24] {
            let mut seen = vec![0usize; list.len()];
            let mut shard_of_key = HashMap::new();
            for k in 0..n {
                let shard = shard_by_key(&list, Some((k, n)));
                assert!(!shard.is_empty(), "shard {k}/{n} has no case");
                for (i, c) in shard {
                    seen[*i] += 1;
                    assert_eq!(*shard_of_key.entry(c.key).or_insert(k), k, "key {:?} split over shards", c.key);
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{n} shards: a case run {:?} times", seen.iter().max());
        }
        assert_eq!(shard_by_key(&list, None).len(), list.len());
    }
}

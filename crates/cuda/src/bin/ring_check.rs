//! Distributed attention against the f64 reference: every schedule (ring, pattern-aware,
//! all-gather; virtual ranks on one GPU), layout (contiguous, zigzag, striped, unequal
//! boundaries with a nearly empty or empty rank) and pattern (dense, causal, window,
//! LongNet dilated, with segments inside one rank and across ranks), on lengths that do
//! not divide evenly. Output, LSE, dQ, dK and dV are gathered to rank 0 and compared
//! with the reference's `attention` / `attention_backward` on the same bf16-rounded
//! inputs: relative L2 error < 1e-2 (the bf16 bound of `gpu_check`). The gathered host
//! arrays start as NaN, so a row nobody wrote fails. For the dense ring, rank 0 also
//! runs the same case on virtual ranks and reports the largest difference from the
//! real ring (same launches, same merge order: expected 0).
//!
//! ```text
//! ring_check [--seed N] [--log FILE.md] [--date TEXT] [--require-gpu]            # virtual ranks, one GPU
//! ring_check --nproc 2 [--seed N] [--log FILE.md] [--date TEXT] [--require-gpu]  # NCCL, one process per GPU
//! ```
//! Without a CUDA device it prints "skipped: no CUDA device" and exits 0 (1 with
//! `--require-gpu`); a skip is never counted as a pass.

use cudarc::driver::CudaSlice;
use ndarray::{Array3, Array4};
use ringdil_cuda::Gpu;
use ringdil_cuda::check::{bound, lse_err, rel_err};
use ringdil_cuda::dist::{
    Communicator, DistPlan, DistRank, LaunchOptions, RankData, RankEnv, RankGrads, Schedule, VirtualRanks, launch,
};
use ringdil_cuda::gpu::DevicePartial;
use ringdil_cuda::launch::Dtype;
use ringdil_cuda::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;
use ringdil_reference::ring::{ChunkPlan, Layout};
use ringdil_reference::{Attention, attention, attention_backward};
use std::fmt::Write;

struct Case {
    ranks: usize,
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
        ("dilated (128,2) in-rank segments", GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(128, 2)])))),
    ]
}

fn layouts(n: usize, p: usize) -> Vec<(String, Layout)> {
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

fn cases(ranks: &[usize]) -> Vec<Case> {
    let mut out = Vec::new();
    for &p in ranks {
        for (i, &(seq, head_dim, batch)) in [(1000usize, 64usize, 1usize), (777, 128, 2)].iter().enumerate() {
            for (layout_name, layout) in layouts(seq, p) {
                for (j, pattern) in patterns(seq).into_iter().enumerate() {
                    let striped = layout == Layout::Striped;
                    if striped && (pattern.1.pattern != GpuPattern::Dense) {
                        continue; // rejected with a typed error (see dist::layout); checked below
                    }
                    if i == 1 && pattern.0.starts_with("window") {
                        continue;
                    }
                    out.push(Case {
                        ranks: p,
                        layout: layout.clone(),
                        layout_name: layout_name.clone(),
                        pattern,
                        batch,
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
    format!(
        "P={} {} | {} | B={} N={} H={} d={}",
        c.ranks, c.layout_name, c.pattern.0, c.batch, c.seq, c.heads, c.head_dim
    )
}

/// bf16 bits and their exact f64 values.
fn rounded(dims: [usize; 4], rng: &mut SplitMix64) -> (Vec<u16>, Array4<f64>) {
    let n: usize = dims.iter().product();
    let (mut bits, mut vals) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let h = half::bf16::from_f64(rng.normal());
        bits.push(h.to_bits());
        vals.push(h.to_f64());
    }
    (bits, Array4::from_shape_vec(dims, vals).expect("sized"))
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
    let (q, qf) = rounded(dims, &mut rng);
    let (k, kf) = rounded(dims, &mut rng);
    let (v, vf) = rounded(dims, &mut rng);
    let (g, gf) = rounded(dims, &mut rng);
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

fn compare(
    c: &Case,
    plan: &DistPlan,
    res: &HostResult,
    reference: &(Attention<f64>, ringdil_reference::Gradients<f64>),
) -> Vec<(&'static str, f64)> {
    let (b, n, h, d) = (c.batch, c.seq, c.heads, c.head_dim);
    let mut arrays: Vec<Vec<f64>> =
        (0..5).map(|i| vec![f64::NAN; if i == 1 { b * h * n } else { b * n * h * d }]).collect();
    for (r, parts) in res.iter().enumerate() {
        for (i, part) in parts.iter().enumerate() {
            let p64: Vec<Vec<f64>> = part.iter().map(|x| x.iter().map(|&v| v as f64).collect()).collect();
            if i == 1 {
                plan.gather_lse_into(&mut arrays[1], r, &p64);
            } else {
                plan.gather_into(&mut arrays[i], d, r, &p64);
            }
        }
    }
    let (fwd, g) = reference;
    let lse = Array3::from_shape_vec((b, h, n), arrays[1].clone()).expect("dims");
    vec![
        ("out", rel_err(&arrays[0], fwd.out.iter())),
        ("lse", lse_err(lse.view(), fwd.lse.view())),
        ("dq", rel_err(&arrays[2], g.dq.iter())),
        ("dk", rel_err(&arrays[3], g.dk.iter())),
        ("dv", rel_err(&arrays[4], g.dv.iter())),
    ]
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

fn run_virtual(gpu: &Gpu, c: &Case, plan: &DistPlan, inp: &Inputs) -> ringdil_cuda::dist::DistResult<HostResult> {
    let [q, k, v, g] = &inp.bits;
    let data: Vec<RankData> =
        (0..c.ranks).map(|r| RankData::upload(gpu, plan, r, q, k, v)).collect::<Result<_, _>>()?;
    let dout: Vec<_> =
        (0..c.ranks).map(|r| ringdil_cuda::dist::ring::upload_pieces(gpu, plan, r, g)).collect::<Result<_, _>>()?;
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
                Some(w) => w.1 = if e.is_nan() || w.1.is_nan() { f64::NAN } else { w.1.max(*e) },
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let require = args.iter().any(|a| a == "--require-gpu");
    let seed: u64 = value("--seed").map(|s| s.parse().expect("--seed takes an integer")).unwrap_or(1);
    let date = value("--date").unwrap_or_else(|| "unknown".into());
    let command = args.iter().skip(1).cloned().collect::<Vec<_>>().join(" ");
    let env = match RankEnv::from_env() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ring check: {e}");
            std::process::exit(2);
        }
    };
    if env.is_none()
        && let Some(n) = value("--nproc")
    {
        let n: usize = n.parse().expect("--nproc takes an integer");
        let exe = std::env::current_exe().expect("own path");
        match launch(&exe, &args[1..], &LaunchOptions::local(n)) {
            Ok(()) => return,
            Err(e) => {
                eprintln!("ring check: {e}");
                std::process::exit(1);
            }
        }
    }
    let skip = || -> ! {
        println!("ring check: skipped: no CUDA device (0 passed, 0 failed, all skipped)");
        std::process::exit(if require { 1 } else { 0 });
    };
    let ok = match env {
        None => {
            let gpu = match Gpu::probe() {
                Ok(Some(g)) => g,
                Ok(None) => skip(),
                Err(e) => {
                    eprintln!("ring check: {e}");
                    std::process::exit(1);
                }
            };
            virtual_main(&gpu, seed, &date, &format!("ring_check {command}"), value("--log"))
        }
        Some(env) => match env.connect() {
            Ok(Some((gpu, comm))) => {
                dist_main(&gpu, &comm, seed, &date, &format!("ring_check {command}"), value("--log"))
            }
            Ok(None) => skip(),
            Err(e) => {
                eprintln!("ring check rank {}: {e}", env.rank);
                std::process::exit(1);
            }
        },
    };
    std::process::exit(if ok { 0 } else { 1 });
}

fn virtual_main(gpu: &Gpu, seed: u64, date: &str, command: &str, log_path: Option<String>) -> bool {
    let start = std::time::Instant::now();
    let device = gpu.describe().unwrap_or_default();
    let mut log = Log { text: String::new(), passed: 0, failed: 0, worst: Vec::new() };
    let mut cache = Cache::new();
    for c in cases(&[2, 3, 4]).iter() {
        let chunks = ChunkPlan::new(c.seq, c.ranks, &c.layout).expect("layout");
        let plan = DistPlan::new(chunks, c.pattern.1.clone(), c.batch, c.heads, c.head_dim).expect("plan");
        let inp = cached(&mut cache, c, seed, true);
        match run_virtual(gpu, c, &plan, &inp) {
            Ok(res) => log.record(&format!("virtual | {}", describe(c)), &compare(c, &plan, &res, &inp.reference), ""),
            Err(e) => {
                println!("FAIL virtual | {}: {e}", describe(c));
                log.failed += 1;
            }
        }
    }
    striped_rejection(&mut log);
    log.finish(
        &header("Ring check (virtual ranks, one GPU)", &device, seed, date, command),
        log_path,
        start.elapsed().as_secs_f64(),
    )
}

/// A striped layout with a window pattern must be a typed error naming the layout.
fn striped_rejection(log: &mut Log) {
    let chunks = ChunkPlan::new(100, 2, &Layout::Striped).expect("layout");
    let e = DistPlan::new(chunks, GpuSpec::new(GpuPattern::Window { left: 4, right: 0 }), 1, 1, 64);
    let ok = matches!(&e, Err(ringdil_cuda::dist::DistError::UnsupportedLayout { layout: "striped", .. }));
    if ok {
        log.passed += 1
    } else {
        log.failed += 1
    }
    writeln!(
        log.text,
        "| {} | striped + window: typed error `{}` |  |",
        if ok { "pass" } else { "**FAIL**" },
        e.err().map(|e| e.to_string()).unwrap_or_default()
    )
    .unwrap();
}

/// Rank 0 receives every other rank's [out, lse, dq, dk, dv] pieces.
fn gather(
    gpu: &Gpu,
    comm: &Communicator,
    plan: &DistPlan,
    out: &[DevicePartial],
    grads: &RankGrads,
) -> Option<HostResult> {
    let (me, p) = (comm.rank(), comm.world());
    if me != 0 {
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
    for r in 1..p {
        let lens = plan.piece_lens(r);
        let lse: Vec<usize> = plan.pieces(r).iter().map(|pc| plan.batch * plan.heads * pc.rows).collect();
        let kinds = [&lens, &lse, &lens, &lens, &lens]
            .map(|l| l.iter().map(|&n| comm.stream().alloc_zeros::<f32>(n).expect("alloc")).collect::<Vec<_>>());
        bufs.push((r, kinds.into()));
    }
    {
        let mut recvs: Vec<(usize, &mut CudaSlice<f32>)> = Vec::new();
        for (r, kinds) in bufs.iter_mut() {
            for kind in kinds.iter_mut() {
                for b in kind.iter_mut() {
                    recvs.push((*r, b));
                }
            }
        }
        comm.exchange(&[], &mut recvs).expect("gather recv");
    }
    comm.stream().synchronize().expect("sync");
    let mut res: HostResult = vec![download(gpu, out, grads)];
    for (_, kinds) in bufs {
        let host: Vec<Vec<Vec<f32>>> =
            kinds.iter().map(|k| k.iter().map(|b| comm.stream().clone_dtoh(b).expect("dtoh")).collect()).collect();
        res.push(host.try_into().expect("five kinds"));
    }
    Some(res)
}

fn dist_main(gpu: &Gpu, comm: &Communicator, seed: u64, date: &str, command: &str, log_path: Option<String>) -> bool {
    let start = std::time::Instant::now();
    let (me, p) = (comm.rank(), comm.world());
    let device = format!("{} x {p} ranks (NCCL, one process per GPU)", gpu.describe().unwrap_or_default());
    let mut log = Log { text: String::new(), passed: 0, failed: 0, worst: Vec::new() };
    let mut cache = Cache::new();
    for c in cases(&[p]).iter() {
        let chunks = ChunkPlan::new(c.seq, c.ranks, &c.layout).expect("layout");
        let plan = DistPlan::new(chunks, c.pattern.1.clone(), c.batch, c.heads, c.head_dim).expect("plan");
        let inp = cached(&mut cache, c, seed, me == 0);
        let [q, k, v, g] = &inp.bits;
        let data = RankData::upload(gpu, &plan, me, q, k, v).expect("upload");
        let dout = ringdil_cuda::dist::ring::upload_pieces(gpu, &plan, me, g).expect("upload");
        let mut rank = DistRank::new(gpu, comm, &plan, Dtype::Bf16).expect("rank");
        let virt = if me == 0 { Some(run_virtual(gpu, c, &plan, &inp).expect("virtual ranks")) } else { None };
        for schedule in Schedule::ALL {
            let out = rank.forward(schedule, &data).expect("forward");
            let grads = rank.backward(schedule, &data, &out, &dout).expect("backward");
            let res = gather(gpu, comm, &plan, &out, &grads);
            comm.barrier(gpu).expect("barrier");
            if let Some(res) = res {
                let moved: usize = if schedule == Schedule::PatternRing {
                    (0..p)
                        .flat_map(|d| (0..p).filter(move |&s| s != d).map(move |s| (d, s)))
                        .map(|(d, s)| plan.pattern_volume(d, s))
                        .sum()
                } else {
                    (0..p).map(|r| plan.ring_volume(r)).sum()
                };
                let mut extra = format!(" | K/V elements moved (fwd, all ranks) {moved}");
                if schedule == Schedule::Ring {
                    let diff = virt.as_ref().map_or(f64::NAN, |vres| {
                        res.iter()
                            .zip(vres)
                            .flat_map(|(a, b)| a.iter().zip(b.iter()))
                            .flat_map(|(x, y)| x.iter().zip(y.iter()))
                            .flat_map(|(x, y)| x.iter().zip(y.iter()))
                            .map(|(a, b)| {
                                if a == b || (a.is_infinite() && b.is_infinite()) { 0.0 } else { (a - b).abs() as f64 }
                            })
                            .fold(0.0, f64::max)
                    });
                    write!(extra, " | max abs diff ring vs virtual ranks {diff:.1e}").unwrap();
                }
                log.record(
                    &format!("{} | {}", schedule.name(), describe(c)),
                    &compare(c, &plan, &res, &inp.reference),
                    &extra,
                );
            }
        }
    }
    if me == 0 {
        striped_rejection(&mut log);
        log.finish(
            &header(&format!("Ring check ({p} GPUs, NCCL)"), &device, seed, date, command),
            log_path,
            start.elapsed().as_secs_f64(),
        )
    } else {
        true
    }
}

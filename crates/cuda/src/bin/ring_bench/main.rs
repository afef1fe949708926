//! Scaling benchmark of distributed attention (issue 25): tokens per second and per-GPU
//! memory of the ring, the pattern-aware plan, all-gather and Ulysses on `P` GPUs against
//! one GPU, by tokens per GPU; the time the ring's transfers hide behind the kernels; the
//! measured link speeds and the auto rule's decisions on them, checked against the
//! measured time of every option; and the largest sequence the ring runs.
//!
//! `ring_bench --nproc P [--json FILE] [--md FILE] [--date TEXT] [--max-per-gpu TOKENS] [--links-only]`
//! (several hosts: `--nnodes H --node-rank I --id-file PATH`; `--timeout T`)
//!
//! `ring_bench --virtual P [--json FILE] [--md FILE] [--date TEXT] [--only TEXT]`: the
//! ring's kernel time on `P` virtual ranks of one GPU against one GPU ([`virtual_timing`]),
//! packed documents on contiguous ranks and on the work-balanced split included; `--only`
//! runs the rows whose "pattern layout" contains TEXT (one row under a profiler).
//!
//! Ratio = `t_1(N) / (P t_P(N))`: `P`-GPU throughput over `P` times one GPU's at the same
//! total length `N = P x N/GPU` (1.0 = perfect); runs with different `P` at the same
//! `N/GPU` give weak scaling. One GPU runs the whole sequence with the single-GPU path,
//! once per `N` ([`single`]); the distributed rows ([`configs`]) run chunk launches
//! ([`distributed`]). A schedule the runtime refuses (`DistError::UnsupportedSchedule`)
//! is reported as an error and skipped. Files: [`configs`] (what runs), [`measure`]
//! (inputs, memory, rows), [`single`], [`distributed`], [`largest`], [`links`],
//! [`auto_check`], [`goals`], [`report`], [`virtual_timing`].
//!
//! Run time: about 2-3 minutes on 4 H100/H200 and 3-5 on 8 (the one-GPU baselines at
//! `P x 64K` tokens and the largest-sequence section dominate).

mod auto_check;
mod configs;
mod distributed;
mod goals;
mod largest;
mod links;
mod measure;
mod report;
mod single;
mod virtual_timing;

use ringdil_cuda::dist::auto::Speeds;
use ringdil_cuda::dist::{RankEnv, launch};
use ringdil_cuda::programs::{Args, Program};
use std::time::Instant;

pub const HEADS: usize = 8;
pub const DIM: usize = 128;

fn main() {
    let args = Args::from_env(Program::RingBench);
    if let Some(p) = args.integer::<usize>("--virtual") {
        virtual_timing::run(&args, p);
        return;
    }
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
    let start = Instant::now();
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
    let configs = configs::configs();
    // One GPU (rank 0 alone; the others wait at the barrier), once per N.
    let mut singles = Vec::new();
    if me == 0 {
        for (pat, n) in configs::singles(&configs, p) {
            let r = single::single(&gpu, pat, n);
            println!(
                "single {pat} N={n}: fwd {:.2} ms, fwd+bwd {:.2} ms, {:.2} GiB",
                r.fwd_ms, r.fwd_bwd_ms, r.memory_gib
            );
            singles.push(r);
        }
    }
    comm.barrier(&gpu).expect("barrier");
    let (mut rows, mut errors) = (Vec::new(), Vec::new());
    let mut inputs = distributed::Inputs::default();
    for cfg in &configs {
        let n = cfg.seq_len(p);
        match distributed::distributed(&gpu, &comm, &mut inputs, cfg) {
            Ok(m) => {
                if me == 0 {
                    println!(
                        "{} {} {} N={n}: fwd {:.2} ms (compute-only {:.2}, comm-only {:.2}), fwd+bwd {:.2} ms, {:.2} GiB",
                        cfg.schedule.name(),
                        cfg.pattern,
                        cfg.split.name(),
                        m.row.fwd_ms,
                        m.compute_ms,
                        m.comm_ms,
                        m.row.fwd_bwd_ms,
                        m.row.memory_gib
                    );
                }
                rows.push(m);
            }
            Err(e) => {
                if me == 0 {
                    println!("{} {} {} N={n}: error {e}", cfg.schedule.name(), cfg.pattern, cfg.split.name());
                }
                errors.push((*cfg, e));
            }
        }
    }
    drop(inputs);
    let largest = largest::largest(&gpu, &comm, max_per_gpu);
    // The auto rule: rank 0's measured speeds, shared so every rank decides alike.
    let mine = if me == 0 {
        auto_check::measured_speeds(&gpu, p, &links, &singles, &rows).to_vec()
    } else {
        vec![0.0; Speeds::LEN]
    };
    let speeds = Speeds::from_slice(&comm.broadcast_f64(0, &mine).expect("broadcast")).expect("the speeds");
    let autos = auto_check::auto_rows(&gpu, &comm, &speeds, &singles, &rows);
    if me != 0 {
        return;
    }
    let run = report::Run {
        p,
        links: &links,
        singles: &singles,
        rows: &rows,
        errors: &errors,
        largest: &largest,
        speeds: &speeds,
        autos: &autos,
        secs: start.elapsed().as_secs_f64(),
    };
    report::report(&gpu, &run, &args);
}

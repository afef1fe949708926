//! `P` ranks: one [`Config`]'s forward (with compute-only / comm-only probes for the dense
//! ring) and forward + backward, the slowest rank's times and the fullest GPU's memory.
//! Every pass starts and ends with a barrier, so rank 0's wall time is the slowest rank's
//! (plus one barrier). Medians of 3 forward and 2 forward + backward passes after a
//! warm-up each (1 forward + backward when the warm-up took over `single::LONG_S`).

use crate::configs::{self, Config};
use crate::measure::{Row, max_over_ranks, median, mib, random_bits, used_memory};
use crate::single::LONG_S;
use crate::{DIM, HEADS};
use ringdil_cuda::Gpu;
use ringdil_cuda::dist::head_split::HeadSplit;
use ringdil_cuda::dist::hybrid_split::HybridSplit;
use ringdil_cuda::dist::{Communicator, DistPlan, DistRank, Probe, RankData};
use ringdil_cuda::shape::Dtype;
use ringdil_reference::ring::Kind;
use std::time::Instant;

/// The full inputs of the current size, drawn once for every configuration of that size
/// (Q and dOut at `N H d`, K and V at `N H_kv d`; every rank draws the same).
#[derive(Default)]
pub struct Inputs {
    q: Vec<u16>,
    k: Vec<u16>,
    v: Vec<u16>,
    g: Vec<u16>,
}

impl Inputs {
    fn prepare(&mut self, len: usize, kv_len: usize) {
        if self.q.len() != len {
            (self.q, self.g) = (Vec::new(), Vec::new());
            (self.q, self.g) = (random_bits(len, 1), random_bits(len, 4));
        }
        if self.k.len() != kv_len {
            (self.k, self.v) = (Vec::new(), Vec::new());
            (self.k, self.v) = (random_bits(kv_len, 2), random_bits(kv_len, 3));
        }
    }
}

pub struct Measured {
    pub config: Config,
    pub row: Row,
    /// MiB rank 0 sends in one forward: K/V for the token-split schedules; Q, K, V out
    /// and output + LSE back for Ulysses.
    pub sent_mib: f64,
    pub compute_ms: f64,
    pub comm_ms: f64,
    pub full_ms: f64,
}

/// Elements rank `me` sends in one forward of `schedule` on `plan`.
fn sent(plan: &DistPlan, schedule: Kind, me: usize) -> f64 {
    let p = plan.ranks();
    match schedule {
        Kind::Ring => plan.ring_volume(me) as f64,
        Kind::PatternRing => (0..p).filter(|&d| d != me).map(|d| plan.pattern_volume(d, me)).sum::<usize>() as f64,
        Kind::AllGather => (2 * (p - 1) * plan.kv_piece_lens(me).iter().sum::<usize>()) as f64,
        Kind::Ulysses => HeadSplit::of(plan).forward_volume(plan, me) as f64,
        Kind::Hybrid => {
            HybridSplit::new(plan, plan.hybrid_degree()).map_or(f64::NAN, |s| s.forward_volume(plan, me) as f64)
        }
    }
}

/// Time `cfg` on the ranks of `comm` (collective: every rank calls it with the same `cfg`).
pub fn distributed(gpu: &Gpu, comm: &Communicator, inputs: &mut Inputs, cfg: &Config) -> Result<Measured, String> {
    let (me, p) = (comm.rank(), comm.world());
    let n = cfg.seq_len(p);
    let plan = configs::plan(cfg.pattern, cfg.split, n, p)?;
    inputs.prepare(n * HEADS * DIM, n * plan.kv_heads * DIM);
    let data = RankData::upload(gpu, &plan, me, &inputs.q, &inputs.k, &inputs.v).map_err(|e| e.to_string())?;
    let dout = ringdil_cuda::dist::ring::upload_dout(gpu, &plan, me, &inputs.g).map_err(|e| e.to_string())?;
    let mut rank = DistRank::new(gpu, comm, &plan, Dtype::Bf16).map_err(|e| e.to_string())?;
    let schedule = cfg.schedule;
    let mut timed = |probe: Probe, backward: bool, reps: usize| -> Result<(f64, f64), String> {
        let (mut ts, mut peak, mut passes) = (Vec::new(), 0.0f64, reps + 1);
        gpu.reset_pool_peaks().map_err(|e| e.to_string())?;
        let mut i = 0;
        while i < passes {
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
            let s = t.elapsed().as_secs_f64();
            // The barrier above makes `s` the same decision on every rank up to jitter;
            // rank 0's is shared so that every rank runs the same number of passes.
            if i == 0 && backward && comm.broadcast_f64(0, &[s]).map_err(|e| e.to_string())?[0] > LONG_S {
                passes = 2;
            }
            if i > 0 {
                ts.push(s);
            }
            i += 1;
        }
        Ok((median(ts), peak))
    };
    let (full, mut mem) = timed(Probe::Full, false, 3)?;
    let both = if cfg.forward_only {
        f64::NAN
    } else {
        let (both, m) = timed(Probe::Full, true, 2)?;
        mem = mem.max(m);
        both
    };
    let (compute, comm_t) = if cfg.probes() && p > 1 {
        (timed(Probe::ComputeOnly, false, 3)?.0, timed(Probe::CommOnly, false, 3)?.0)
    } else {
        (f64::NAN, f64::NAN)
    };
    let mem = max_over_ranks(comm, mem)?;
    let kv = mib(2.0 * plan.kv_piece_lens(me).iter().sum::<usize>() as f64);
    Ok(Measured {
        config: *cfg,
        row: Row::new(cfg.pattern, &configs::schedule_name(schedule, p), cfg.split.name(), p, n, (full, both), mem, kv),
        sent_mib: mib(sent(&plan, schedule, me)),
        compute_ms: compute * 1e3,
        comm_ms: comm_t * 1e3,
        full_ms: full * 1e3,
    })
}

//! The largest sequence: dense causal, zigzag ring, forward only, from 128K tokens per GPU
//! doubling up to `--max-per-gpu`, stopping at the first failure (out of memory) or when
//! the next size's forward (4x the last) would take over [`NEXT_LIMIT_S`].

use crate::configs::{DENSE, K, Split, plan};
use crate::measure::{random_bits, used_memory};
use ringdil_cuda::Gpu;
use ringdil_cuda::dist::{Communicator, DistRank, RankData};
use ringdil_cuda::shape::Dtype;
use ringdil_reference::ring::Kind;
use std::time::Instant;

/// Seconds the next size's forward may be predicted to take.
pub const NEXT_LIMIT_S: f64 = 30.0;

/// One forward of `n` tokens: (ms, GiB in use on this rank).
fn forward(gpu: &Gpu, comm: &Communicator, n: usize) -> Result<(f64, f64), String> {
    let (me, p) = (comm.rank(), comm.world());
    let plan = plan(DENSE, Split::Zigzag, n, p)?;
    let b = random_bits(n * plan.heads * plan.head_dim, 7);
    let data = RankData::upload(gpu, &plan, me, &b, &b, &b).map_err(|e| e.to_string())?;
    drop(b);
    let mut rank = DistRank::new(gpu, comm, &plan, Dtype::Bf16).map_err(|e| e.to_string())?;
    gpu.reset_pool_peaks().map_err(|e| e.to_string())?;
    comm.barrier(gpu).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let out = rank.forward(Kind::Ring, &data).map_err(|e| e.to_string())?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    comm.stream().synchronize().map_err(|e| e.to_string())?;
    comm.barrier(gpu).map_err(|e| e.to_string())?;
    // Rank 0's time, so that every rank takes the same decision to go on.
    let ms = comm.broadcast_f64(0, &[t0.elapsed().as_secs_f64() * 1e3]).map_err(|e| e.to_string())?[0];
    let mem = used_memory(gpu) / (1u64 << 30) as f64;
    drop(out);
    Ok((ms, mem))
}

/// (N, forward ms, GiB in use on rank 0) of each size that ran.
pub fn largest(gpu: &Gpu, comm: &Communicator, max_per_gpu: usize) -> Vec<(usize, f64, f64)> {
    let (me, p) = (comm.rank(), comm.world());
    let mut out = Vec::new();
    let mut per = 128 * K;
    while per <= max_per_gpu {
        let n = per * p;
        match forward(gpu, comm, n) {
            Ok((ms, mem)) => {
                if me == 0 {
                    println!("largest: N={n} ({per}/GPU) forward {ms:.1} ms, {mem:.1} GiB in use");
                }
                out.push((n, ms, mem));
                // The ring's forward grows as N^2 / P: 4x per doubling.
                if 4.0 * ms / 1e3 > NEXT_LIMIT_S {
                    break;
                }
            }
            Err(e) => {
                if me == 0 {
                    println!("largest: N={n} failed: {e}");
                }
                break;
            }
        }
        per *= 2;
    }
    out
}

//! What every timing shares: pseudo-random inputs, medians, the memory a pass needs,
//! the slowest rank's figures, and the table [`Row`] that one GPU and `P` GPUs fill.

use ringdil_cuda::Gpu;
use ringdil_cuda::dist::Communicator;

/// Pseudo-random bf16 in [-1, 1) (a hash per element, on up to 8 threads: 5 * 10^8
/// elements in well under a second). Timings need no reference values, and the checks'
/// rounded normals (`check::rounded_bits`) cost about 4 s of one core per 10^8 draws,
/// where one configuration here draws up to 2 * 10^9.
pub fn random_bits(n: usize, salt: u64) -> Vec<u16> {
    let mut out = vec![0u16; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(8);
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                for (j, o) in part.iter_mut().enumerate() {
                    let i = (c * chunk + j) as u64;
                    let mut x = (i ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    x ^= x >> 31;
                    let u = (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                    *o = half::bf16::from_f32(u).to_bits();
                }
            });
        }
    });
    out
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Device memory a pass needs: what is in use outside the memory pool (context, NCCL
/// buffers, modules) plus the pool's peak use by live buffers since the last
/// [`Gpu::reset_pool_peaks`]. Freed memory the pool keeps for reuse (`ringdil_cuda::pool`)
/// is not counted.
pub fn used_memory(gpu: &Gpu) -> f64 {
    let Ok((free, total)) = gpu.context().mem_get_info() else { return f64::NAN };
    match gpu.pool_usage() {
        Ok(Some(p)) => ((total - free) as u64 - p.reserved + p.used_peak) as f64,
        Ok(None) => (total - free) as f64,
        Err(_) => f64::NAN,
    }
}

/// The largest of every rank's `x` (collective: every rank calls it), through one
/// broadcast per rank.
pub fn max_over_ranks(comm: &Communicator, x: f64) -> Result<f64, String> {
    let mut m = f64::NEG_INFINITY;
    for root in 0..comm.world() {
        let v = comm.broadcast_f64(root, &[x]).map_err(|e| e.to_string())?;
        m = m.max(v[0]);
    }
    Ok(m)
}

/// MiB of `elements` bf16 values.
pub fn mib(elements: f64) -> f64 {
    elements * 2.0 / (1u64 << 20) as f64
}

/// One table row: a pattern on one GPU or `P` ranks, its times and peak memory.
#[derive(serde::Serialize, Clone, Debug)]
pub struct Row {
    pub pattern: String,
    pub schedule: String,
    pub layout: String,
    pub ranks: usize,
    pub seq_len: usize,
    pub fwd_ms: f64,
    /// `NaN` where only the forward was timed (the auto check's extra options).
    pub fwd_bwd_ms: f64,
    pub tokens_per_s_fwd: f64,
    pub tokens_per_s_fwd_bwd: f64,
    /// Peak device memory of the passes on the fullest GPU.
    pub memory_gib: f64,
    /// Own K/V of one rank (the model figure `2 * 2 B (N/P) H_kv d` bytes).
    pub kv_block_mib: f64,
}

impl Row {
    /// A row from its forward and forward+backward seconds, memory in bytes and own K/V in
    /// MiB; the derived columns (ms, tokens/s, GiB) are computed here only.
    #[allow(clippy::too_many_arguments)] // one table row's measured values
    pub fn new(
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

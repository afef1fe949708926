//! Measured NCCL speeds of the three communication shapes the schedules use, through
//! the same `Communicator::exchange` groups the ranks run: a ring hop (send to `r + 1`,
//! receive from `r - 1`), an all-to-all (a `1/P` part to every peer: Ulysses) and an
//! all-gather (the whole block to every peer). Each is timed on fresh receive buffers per
//! pass, as the ring allocates them, over `BYTES` of bf16 per rank.
//!
//! Speeds are bytes *sent by one rank* per second: the ring hop sends `BYTES`, the
//! all-to-all `BYTES (P-1)/P`, the all-gather `BYTES (P-1)`. The auto rule prices each
//! schedule's transfer with the speed of its own shape (a 4-way all-gather does not run at
//! the ring neighbour's speed).

use ringdil_cuda::Gpu;
use ringdil_cuda::dist::Communicator;
use serde::Serialize;
use std::time::Instant;

/// Bytes each rank sends per ring hop in the measurement (the K/V of 32K tokens, 8 heads
/// of d = 128 in bf16: a ring step at 32K tokens per GPU).
const BYTES: usize = 128 << 20;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Links {
    /// Ring hop, bytes/s sent per rank.
    pub ring: f64,
    /// All-to-all, bytes/s sent per rank.
    pub all_to_all: f64,
    /// All-gather, bytes/s sent per rank.
    pub all_gather: f64,
}

/// Median seconds of `f` over 5 passes after 2 warm-ups, each pass between barriers.
fn timed(gpu: &Gpu, comm: &Communicator, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut ts = Vec::new();
    for i in 0..7 {
        comm.barrier(gpu).map_err(|e| e.to_string())?;
        let t = Instant::now();
        f()?;
        comm.stream().synchronize().map_err(|e| e.to_string())?;
        comm.barrier(gpu).map_err(|e| e.to_string())?;
        if i >= 2 {
            ts.push(t.elapsed().as_secs_f64());
        }
    }
    ts.sort_by(f64::total_cmp);
    Ok(ts[ts.len() / 2])
}

/// The three speeds on this communicator (collective: every rank calls it).
pub fn measure(gpu: &Gpu, comm: &Communicator) -> Result<Links, String> {
    let (me, p) = (comm.rank(), comm.world());
    let elems = BYTES / 2;
    let st = comm.stream();
    let e = |x: cudarc::driver::DriverError| x.to_string();
    let block = st.alloc_zeros::<u16>(elems).map_err(e)?;
    let part = elems / p;
    let parts: Vec<_> = (0..p).map(|_| st.alloc_zeros::<u16>(part)).collect::<Result<_, _>>().map_err(e)?;
    let peers: Vec<usize> = (0..p).filter(|&o| o != me).collect();
    let ring = timed(gpu, comm, || {
        // SAFETY: written by the receive.
        let mut buf = unsafe { st.alloc::<u16>(elems) }.map_err(e)?;
        comm.exchange(&[((me + 1) % p, &block)], &mut [((me + p - 1) % p, &mut buf)]).map_err(|x| x.to_string())
    })?;
    let all_to_all = timed(gpu, comm, || {
        // SAFETY: written by the receives.
        let mut bufs: Vec<_> =
            peers.iter().map(|_| unsafe { st.alloc::<u16>(part) }).collect::<Result<_, _>>().map_err(e)?;
        let sends: Vec<_> = peers.iter().map(|&o| (o, &parts[o])).collect();
        let mut recvs: Vec<_> = peers.iter().zip(bufs.iter_mut()).map(|(&o, b)| (o, b)).collect();
        comm.exchange(&sends, &mut recvs).map_err(|x| x.to_string())
    })?;
    let all_gather = timed(gpu, comm, || {
        // SAFETY: written by the receives.
        let mut bufs: Vec<_> =
            peers.iter().map(|_| unsafe { st.alloc::<u16>(elems) }).collect::<Result<_, _>>().map_err(e)?;
        let sends: Vec<_> = peers.iter().map(|&o| (o, &block)).collect();
        let mut recvs: Vec<_> = peers.iter().zip(bufs.iter_mut()).map(|(&o, b)| (o, b)).collect();
        comm.exchange(&sends, &mut recvs).map_err(|x| x.to_string())
    })?;
    let b = BYTES as f64;
    Ok(Links {
        ring: b / ring,
        all_to_all: b * (p - 1) as f64 / p as f64 / all_to_all,
        all_gather: b * (p - 1) as f64 / all_gather,
    })
}

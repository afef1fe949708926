//! One GPU, whole sequence: the baseline of every ratio. The single-GPU path
//! (`Gpu::forward_into`, `backward_into`; dilated branches compacted) over the whole
//! sequence, timed forward and forward + backward: medians of 3 after a warm-up, or of
//! 1 when the warm-up's forward + backward took over [`LONG_S`] (the largest `N` of an
//! 8-GPU run: 512K tokens, ~8 s a pass).

use crate::configs::{kv_heads, pattern};
use crate::measure::{Row, median, mib, random_bits, used_memory};
use crate::{DIM, HEADS};
use ringdil_cuda::Gpu;
use ringdil_cuda::shape::{Chunk, Dtype, Shape};
use std::time::Instant;

/// Seconds of a warm-up forward + backward above which one timed pass is enough.
pub const LONG_S: f64 = 2.0;

/// Forward and forward+backward times and peak memory of `pat` over `n` tokens.
pub fn single(gpu: &Gpu, pat: &str, n: usize) -> Row {
    let spec = pattern(pat, n);
    let shape = Shape::square(1, n, HEADS, DIM).with_kv_heads(kv_heads(pat));
    let mut prep = gpu.prepare(&shape, Dtype::Bf16, &spec, &Chunk::whole(&shape)).expect("prepare");
    let up = |s, dims: [usize; 4]| gpu.upload(&random_bits(dims.iter().product(), s), dims).expect("upload");
    let (q, k, v, g) = (up(1, shape.q_dims()), up(2, shape.k_dims()), up(3, shape.k_dims()), up(4, shape.q_dims()));
    let mut out = gpu.alloc_partial(&prep).expect("alloc");
    let mut grads = gpu.alloc_grads(&prep).expect("alloc");
    let (mut fwd, mut both) = (Vec::new(), Vec::new());
    gpu.reset_pool_peaks().expect("pool");
    let mut passes = 4;
    let mut i = 0;
    while i < passes {
        gpu.synchronize().unwrap();
        let t = Instant::now();
        gpu.forward_into(&mut prep, &q, &k, &v, &mut out).expect("forward");
        gpu.synchronize().unwrap();
        let f = t.elapsed().as_secs_f64();
        gpu.backward_into(&mut prep, &q, &k, &v, &out, &g, &mut grads).expect("backward");
        gpu.synchronize().unwrap();
        let b = t.elapsed().as_secs_f64();
        if i == 0 && b > LONG_S {
            passes = 2;
        }
        if i > 0 {
            fwd.push(f);
            both.push(b);
        }
        i += 1;
    }
    let kv = mib(2.0 * shape.k_len() as f64);
    Row::new(pat, "single", "-", 1, n, (median(fwd), median(both)), used_memory(gpu), kv)
}

//! The large-score sweep (`gpu_check --large-sweep N`): the large-score backward cases of
//! many seeds, with what explains their gradient errors, to check the bound of
//! [`super::bound_for`] against a measured distribution rather than one run.
//!
//! Per case one line: the tensor-wide errors over `eps(T, 128)`, how many query rows the
//! reference dQ comes from (its participation number `(sum w)^2 / sum w^2`, `w` a row's
//! squared norm), how many rows are near-tied (second largest weight above 1e-3), how
//! much of the error sits in one-hot rows (largest weight above `1 - 1e-9`), and the
//! worst per-row relative error.

use super::kernels::draw;
use super::{Case, GRAD_RMS_FLOOR, Kind, Logits, partial_bound, rounded, score_err};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::shape::{Chunk, Shape};
use crate::tensors::{DeviceGrads, DevicePartial};
use ndarray::Array4;
use ringdil_reference::{Attention, attention, attention_backward};

/// One backward case's inputs and the GPU's gradients.
pub struct Raw {
    pub case: Case,
    pub index: usize,
    pub seed: u64,
    inputs: [Array4<f64>; 4],
    got: [Vec<f64>; 3],
    out: Vec<f64>,
}

/// The GPU's dQ, dK, dV of backward case `case` (drawn as `run_case` draws it).
pub fn backward_raw(gpu: &Gpu, case: &Case, index: usize, seed: u64) -> Result<Raw> {
    let (mut rng, [(qb, q), (kb, k), (vb, v)]) = draw(case, seed ^ (index as u64 + 1));
    let (b, n, h, d) = (case.batch, case.seq, case.heads, case.head_dim);
    let dims = [b, n, h, d];
    let (dob, dout) = rounded(dims, case.dtype, &mut rng);
    let shape = Shape::square(b, n, h, d).with_kv_heads(case.kv_heads);
    let mut prep = gpu.prepare(&shape, case.dtype, &case.spec, &Chunk::whole(&shape))?;
    let (qd, kd, vd) = (gpu.upload(&qb, dims)?, gpu.upload(&kb, dims)?, gpu.upload(&vb, dims)?);
    let mut out =
        DevicePartial { out: gpu.filled(b * n * h * d, f32::NAN)?, lse: gpu.filled(b * h * n, f32::NAN)?, dims };
    gpu.forward_into(&mut prep, &qd, &kd, &vd, &mut out)?;
    let dod = gpu.upload(&dob, dims)?;
    let mut grads = DeviceGrads {
        dq: gpu.filled(shape.q_len(), f32::NAN)?,
        dk: gpu.filled(shape.k_len(), f32::NAN)?,
        dv: gpu.filled(shape.k_len(), f32::NAN)?,
    };
    gpu.backward_into(&mut prep, &qd, &kd, &vd, &out, &dod, &mut grads)?;
    let out: Vec<f64> = gpu.download(&out.out)?.iter().map(|&x| x as f64).collect();
    let mut got = Vec::new();
    for buf in [&grads.dq, &grads.dk, &grads.dv] {
        got.push(gpu.download(buf)?.iter().map(|&x| x as f64).collect());
    }
    let got: [Vec<f64>; 3] = got.try_into().expect("three");
    Ok(Raw { case: case.clone(), index, seed, inputs: [q, k, v, dout], got, out })
}

/// The sweep's line for one case (the reference is computed here, on the CPU).
pub fn analyze(raw: &Raw) -> String {
    let case = &raw.case;
    let [q, k, v, dout] = &raw.inputs;
    let spec = case.spec.to_reference();
    let fwd = attention(q.view(), k.view(), v.view(), &spec).expect("reference");
    let ref_out = fwd.out.clone();
    let g = attention_backward(
        q.view(),
        k.view(),
        v.view(),
        &spec,
        &Attention { out: fwd.out, lse: fwd.lse.clone() },
        dout.view(),
    )
    .expect("reference");
    let want: [Vec<f64>; 3] = [&g.dq, &g.dk, &g.dv].map(|a| a.iter().copied().collect());
    let floors = super::grad_floor_scales(q, k);
    let errs: Vec<f64> = (0..3).map(|t| super::grad_err(&raw.got[t], &want[t], floors[t])).collect();
    let bound = super::bound_for(case.dtype, case.logits);
    let verdict = if errs.iter().all(|&e| e < bound) { "PASS" } else { "FAIL" };
    let eps = score_err(partial_bound(case.logits), 128);
    let (b, n, h, d) = q.dim();
    let scale = 1.0 / (d as f64).sqrt();
    // Per query row: second largest weight, largest weight, reference and error norms^2.
    let (mut wsum, mut w2sum, mut tied, mut onehot_err, mut all_err) = (0.0, 0.0, 0, 0.0, 0.0);
    let mut worst_row = (0.0f64, 0.0f64, 0.0f64); // (rel err, p2, share)
    let mut rows = Vec::new();
    let (mut delta_max, mut delta_sq, mut out_max) = (0.0f64, 0.0, 0.0f64);
    for bb in 0..b {
        for hh in 0..h {
            for i in 0..n {
                let lse = fwd.lse[[bb, hh, i]];
                if lse == f64::NEG_INFINITY {
                    continue;
                }
                let keys = super::extreme::keys(&spec, (bb, hh, h), n, i);
                let mut p: Vec<f64> = keys
                    .iter()
                    .map(|&j| ((0..d).map(|c| q[[bb, i, hh, c]] * k[[bb, j, hh, c]]).sum::<f64>() * scale - lse).exp())
                    .collect();
                p.sort_by(|a, b| b.total_cmp(a));
                let p2 = p.get(1).copied().unwrap_or(0.0);
                let at = ((bb * n + i) * h + hh) * d;
                let (mut dg, mut dr, mut oe) = (0.0, 0.0, 0.0f64);
                for c in 0..d {
                    let r = ref_out[[bb, i, hh, c]];
                    dg += dout[[bb, i, hh, c]] * raw.out[at + c];
                    dr += dout[[bb, i, hh, c]] * r;
                    oe += (raw.out[at + c] - r).powi(2);
                }
                delta_max = delta_max.max((dg - dr).abs());
                delta_sq += (dg - dr).powi(2);
                out_max = out_max.max(oe.sqrt());
                let r2: f64 = want[0][at..at + d].iter().map(|x| x * x).sum();
                let e2: f64 = (at..at + d).map(|c| (raw.got[0][c] - want[0][c]).powi(2)).sum();
                rows.push((r2, e2, p2));
                wsum += r2;
                w2sum += r2 * r2;
                tied += usize::from(p2 > 1e-3);
                all_err += e2;
                if p[0] > 1.0 - 1e-9 {
                    onehot_err += e2;
                }
            }
        }
    }
    let floor_row = GRAD_RMS_FLOOR * GRAD_RMS_FLOOR * d as f64;
    for &(r2, e2, p2) in &rows {
        let rel = (e2 / r2.max(floor_row)).sqrt();
        if rel > worst_row.0 {
            worst_row = (rel, p2, r2 / wsum);
        }
    }
    let ref_rms = (wsum / want[0].len() as f64).sqrt();
    format!(
        "{verdict} {} {} {:?} {:?} d={} b={} h={} n={} lens={:?} | dq {:.3e} dk {:.3e} dv {:.3e} | eps {:.3e} dq/eps {:.2} dk/eps {:.2} | rows {} tied {} part {:.2} refrms {:.2e} onehot_err_share {:.3} | worst_row rel {:.3e} p2 {:.2e} share {:.3} | delta err max {:.2e} rms {:.2e} out row err max {:.2e}",
        raw.seed,
        raw.index,
        case.logits,
        case.dtype,
        d,
        b,
        h,
        n,
        case.spec.key_lengths,
        errs[0],
        errs[1],
        errs[2],
        eps,
        errs[0] / eps,
        errs[1] / eps,
        rows.len(),
        tied,
        wsum * wsum / w2sum,
        ref_rms,
        if all_err > 0.0 { onehot_err / all_err } else { 0.0 },
        worst_row.0,
        worst_row.1,
        worst_row.2,
        delta_max,
        (delta_sq / rows.len().max(1) as f64).sqrt(),
        out_max,
    )
}

/// The large-score backward cases of seeds `first..first + count`: GPU sequentially, the
/// reference on every core.
pub fn run(gpu: &Gpu, first: u64, count: u64) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    let mut batch = Vec::new();
    let flush = |batch: &mut Vec<Raw>| {
        let lines: Vec<String> = std::thread::scope(|s| {
            let chunk = batch.len().div_ceil(threads).max(1);
            let handles: Vec<_> =
                batch.chunks(chunk).map(|part| s.spawn(move || part.iter().map(analyze).collect::<Vec<_>>())).collect();
            handles.into_iter().flat_map(|h| h.join().expect("analysis")).collect()
        });
        lines.iter().for_each(|l| println!("{l}"));
        batch.clear();
    };
    for seed in first..first + count {
        let list = super::cases(seed, false);
        for (i, case) in list.iter().enumerate() {
            if case.kind == Kind::Backward && case.logits != Logits::Unit {
                batch.push(backward_raw(gpu, case, i, seed)?);
            }
        }
        if batch.len() >= 4 * threads {
            flush(&mut batch);
        }
    }
    flush(&mut batch);
    Ok(())
}

"""Time ringdil.attention from PyTorch against its kernels alone and against cuDNN.

The shapes are gpu_bench's n = 4096 rows (bf16, batch 4, heads x head_dim = 2048, d = 64 and
128, causal and not). For each, the forward ``ringdil.attention(q, k, v)`` and forward +
backward (``out.backward(d_out)``, the gradients set to ``None`` first as
``optimizer.zero_grad()`` leaves them; kept, autograd would add each call's into them, three
passes that no other column has) as a PyTorch user calls them: argument checks, results
allocated by PyTorch, 16-bit results.

Three references:
* **kernels**, in this process: the kernels the Rust API launches for the same pass with
  16-bit results (``attn_fwd``; for the backward also ``bwd_delta``, the dQ memset,
  ``attn_bwd`` and the pass rounding dQ), their device times summed per call by the PyTorch
  profiler. "Python / kernels" is what the Python layer adds: host work the GPU waits for.
* **Rust**: ``gpu_bench``'s 16-bit rows (``Gpu::forward_half_into`` /
  ``backward_half_into``, the results the Python call returns), read from its JSON (same
  session, another process: the GPU's clock differs between processes by a few percent,
  which is why the in-process column exists).
* **cuDNN**: torch SDPA's cuDNN backend.

Each time is the median of ROUNDS rounds, the rounds alternating ringdil and cuDNN; a
round is the mean of 20 calls after 5, between CUDA events (``torch_peer.timed``).

usage: python3 torch_bench.py GPU_BENCH.json OUT.json OUT.md
"""
import datetime
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import ringdil

# The timing of crates/cuda/bench/torch_peer.py, which times gpu_bench's torch peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cuda" / "bench"))
from torch_peer import ITERS, timed, training_step  # noqa: E402

SEQ, TOKENS, HIDDEN = 4096, 16384, 2048
ROUNDS = 7
# The kernels of a pass as the Rust API launches them (names as the profiler gives them:
# the attention kernels' variants start with these; the memset clears dQ, to_half rounds it).
KERNELS = ("attn_fwd", "attn_bwd", "bwd_delta", "Memset", "to_half")


def fwd_and_step(attend, q, k, v, d_out):
    """The forward call and one training step's forward + backward of ``attend``."""
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    return (lambda: attend(q, k, v)), training_step(attend, leaves, d_out)


def kernel_ms(fn):
    """Device milliseconds per call of the KERNELS ``fn`` launches (ITERS calls profiled)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(ITERS):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in p.key_averages() if e.key.startswith(KERNELS))
    return total / 1e3 / ITERS


def main():
    rust = json.load(open(sys.argv[1]))
    rows, md = [], []
    md.append(f"## ringdil.attention from PyTorch on {torch.cuda.get_device_name()}\n")
    md.append(f"Date {datetime.date.today()}; command `python3 crates/python/bench/torch_bench.py {' '.join(sys.argv[1:])}`; "
              f"torch {torch.__version__}; Rust times from `{rust['command']}` (same session). "
              f"Medians of {ROUNDS} rounds.\n")
    md.append("| d | causal | pass | Python ms | kernels ms | Python / kernels | Rust ms | Python / Rust | cuDNN ms |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    for d in (64, 128):
        b, h = TOKENS // SEQ, HIDDEN // d
        q, k, v, d_out = (torch.randn(b, SEQ, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        for causal in (False, True):
            ours = fwd_and_step(lambda q, k, v: ringdil.attention(q, k, v, causal=causal), q, k, v, d_out)

            cudnn = fwd_and_step(lambda q, k, v: F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2),
                q, k, v, d_out)
            for i, name in enumerate(("fwd", "fwd+bwd")):
                times = {"python": [], "cudnn": []}
                for _ in range(ROUNDS):
                    times["python"].append(timed(ours[i]))
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        times["cudnn"].append(timed(cudnn[i]))
                py, cu = statistics.median(times["python"]), statistics.median(times["cudnn"])
                kernels = statistics.median(kernel_ms(ours[i]) for _ in range(3))
                rust_ms = next(r["ms"] for r in rust["half"]
                               if r["seq"] == SEQ and r["head_dim"] == d and r["causal"] == causal and r["pass"] == name)
                row = {"seq": SEQ, "batch": b, "heads": h, "head_dim": d, "causal": causal, "pass": name,
                       "python_ms": py, "kernels_ms": kernels, "overhead": py / kernels, "rust_ms": rust_ms,
                       "over_rust": py / rust_ms, "cudnn_ms": cu, "python_rounds": times["python"],
                       "cudnn_rounds": times["cudnn"]}
                rows.append(row)
                print({k: v for k, v in row.items() if not k.endswith("rounds")}, flush=True)
                md.append(f"| {d} | {causal} | {name} | {py:.3f} | {kernels:.3f} | {py / kernels:.3f} | {rust_ms:.3f} | "
                          f"{py / rust_ms:.3f} | {cu:.3f} |")
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": str(datetime.date.today()),
               "rust_command": rust["command"], "rounds": ROUNDS, "rows": rows}, open(sys.argv[2], "w"), indent=1)
    open(sys.argv[3], "w").write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()

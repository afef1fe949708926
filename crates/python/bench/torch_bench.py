"""Time ringdil.attention from PyTorch against the same kernels called without the Python
layer, against gpu_bench's Rust timing and against cuDNN.

The shapes are gpu_bench's n = 4096 rows (bf16, batch 4, heads x head_dim = 2048, d = 64 and
128, causal and not). For each, the forward ``ringdil.attention(q, k, v)`` and forward +
backward (``out.backward(d_out)``, the gradients set to ``None`` first as
``optimizer.zero_grad()`` leaves them; kept, autograd would add each call's into them, three
passes that no other column has) as a PyTorch user calls them: argument checks, results
allocated by PyTorch, 16-bit results.

References:
* **extension**, in this process: the same kernels launched by the compiled extension's
  entry points (``_ringdil.cuda_forward`` / ``cuda_backward``, the Rust API behind one
  PyO3 call each) on buffers allocated once: no argument checks, no autograd, no
  allocation. "Python / extension" is what the Python layer adds.
* **Rust**: ``gpu_bench``'s 16-bit rows (``Gpu::forward_half_into`` /
  ``backward_half_into``, the results the Python call returns), read from its JSON (same
  session, another process). The GPU's clock differs between processes and with how long
  the GPU has been busy (the power limit), by 5-10% at these shapes, which is why the
  in-process column exists.
* **cuDNN**: torch SDPA's cuDNN backend.

Each time is the median of ROUNDS rounds, each round timing Python, extension and cuDNN in
turn; a round's time is the mean of 20 calls after 5, between CUDA events
(``torch_peer.timed``).

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

import ringdil
from ringdil import _ringdil
from ringdil._torch import _where

# The timing of crates/cuda/bench/torch_peer.py, which times gpu_bench's torch peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cuda" / "bench"))
from torch_peer import ITERS, timed, training_step  # noqa: E402

SEQ, TOKENS, HIDDEN = 4096, 16384, 2048
ROUNDS = 7


def fwd_and_step(attend, q, k, v, d_out):
    """The forward call and one training step's forward + backward of ``attend``."""
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    return (lambda: attend(q, k, v)), training_step(attend, leaves, d_out)


def extension_calls(q, k, v, d_out, causal):
    """The forward and forward + backward through the extension's entry points alone, on
    buffers allocated here once (what ``ringdil.attention`` passes them, minus its work)."""
    b, n, h, _ = q.shape
    call = _where(q) + (list(q.shape), k.shape[2], "bfloat16", None, causal, None, None, None)
    out, dq, dk, dv = (torch.empty_like(x) for x in (q, q, k, v))
    lse = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
    dq_len, kv_len = _ringdil.cuda_backward_scratch(call)
    sums = [torch.empty(m, dtype=torch.float32, device=q.device) for m in (dq_len, kv_len, kv_len) if m]
    fwd_ptrs = [x.data_ptr() for x in (q, k, v, out, lse)]
    bwd_ptrs = [x.data_ptr() for x in (q, k, v, out, lse, d_out, dq, dk, dv, *sums)]
    bwd_ptrs += [0] * (12 - len(bwd_ptrs))

    def forward():
        _ringdil.cuda_forward(call, fwd_ptrs)

    def step():
        forward()
        _ringdil.cuda_backward(call, bwd_ptrs)

    return forward, step


def main():
    rust = json.load(open(sys.argv[1]))
    rows, md = [], []
    md.append(f"## ringdil.attention from PyTorch on {torch.cuda.get_device_name()}\n")
    md.append(f"Date {datetime.date.today()}; command `python3 crates/python/bench/torch_bench.py {' '.join(sys.argv[1:])}`; "
              f"torch {torch.__version__}; Rust times from `{rust['command']}` (same session). "
              f"Medians of {ROUNDS} rounds.\n")
    md.append("| d | causal | pass | Python ms | extension ms | Python / extension | Rust ms | Python / Rust | cuDNN ms |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    for d in (64, 128):
        b, h = TOKENS // SEQ, HIDDEN // d
        q, k, v, d_out = (torch.randn(b, SEQ, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        for causal in (False, True):
            ours = fwd_and_step(lambda q, k, v: ringdil.attention(q, k, v, causal=causal), q, k, v, d_out)
            ext = extension_calls(q, k, v, d_out, causal)
            cudnn = fwd_and_step(lambda q, k, v: F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2),
                q, k, v, d_out)
            for i, name in enumerate(("fwd", "fwd+bwd")):
                times = {"python": [], "extension": [], "cudnn": []}
                for _ in range(ROUNDS):
                    times["python"].append(timed(ours[i]))
                    times["extension"].append(timed(ext[i]))
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        times["cudnn"].append(timed(cudnn[i]))
                py, ex, cu = (statistics.median(times[x]) for x in ("python", "extension", "cudnn"))
                rust_ms = next(r["ms"] for r in rust["half"]
                               if r["seq"] == SEQ and r["head_dim"] == d and r["causal"] == causal and r["pass"] == name)
                row = {"seq": SEQ, "batch": b, "heads": h, "head_dim": d, "causal": causal, "pass": name,
                       "python_ms": py, "extension_ms": ex, "overhead": py / ex, "rust_ms": rust_ms,
                       "over_rust": py / rust_ms, "cudnn_ms": cu,
                       **{f"{x}_rounds": t for x, t in times.items()}}
                rows.append(row)
                print({k: v for k, v in row.items() if not k.endswith("rounds")}, flush=True)
                md.append(f"| {d} | {causal} | {name} | {py:.3f} | {ex:.3f} | {py / ex:.3f} | {rust_ms:.3f} | "
                          f"{py / rust_ms:.3f} | {cu:.3f} |")
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": str(datetime.date.today()),
               "rust_command": rust["command"], "rounds": ROUNDS, "rows": rows}, open(sys.argv[2], "w"), indent=1)
    open(sys.argv[3], "w").write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()

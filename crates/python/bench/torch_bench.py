"""Time ringdil.attention from PyTorch against the Rust benchmark of the same kernels.

The shapes are gpu_bench's n = 4096 rows (bf16, batch 4, heads x head_dim = 2048, d = 64 and
128, causal and not). For each: the forward ``ringdil.attention(q, k, v)`` and forward +
backward (``out.backward(d_out)``, the gradients set to ``None`` first as
``optimizer.zero_grad()`` leaves them; kept, autograd would add each call's into them, three
passes neither the kernels nor cuDNN's timing would otherwise have) as a PyTorch user calls
them (argument checks, output allocation by PyTorch, the 16-bit results), the same passes of
``gpu_bench`` (read from its JSON, made in the same run: the kernels alone on prepared
launches), and torch SDPA's cuDNN backend. "Python / Rust" is the whole call's time over
the kernels' time. Times as torch_peer.py takes them (the mean of 20 calls after 5, between
CUDA events).

usage: python3 torch_bench.py GPU_BENCH.json OUT.json OUT.md
"""
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import ringdil

# The timing of crates/cuda/bench/torch_peer.py, which times gpu_bench's torch peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cuda" / "bench"))
from torch_peer import timed  # noqa: E402

SEQ, TOKENS, HIDDEN = 4096, 16384, 2048


def passes(attend, q, k, v, d_out):
    """(forward ms, forward + backward ms) of ``attend`` on [b, n, h, d] tensors."""
    fwd = timed(lambda: attend(q, k, v))
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))

    def step():
        for x in (qg, kg, vg):
            x.grad = None  # as optimizer.zero_grad() leaves them before a training step
        attend(qg, kg, vg).backward(d_out)

    both = timed(step)
    return fwd, both


def main():
    rust = json.load(open(sys.argv[1]))
    rows, md = [], []
    md.append(f"## ringdil.attention from PyTorch on {torch.cuda.get_device_name()}\n")
    md.append(f"Date {datetime.date.today()}; command `python3 crates/python/bench/torch_bench.py {' '.join(sys.argv[1:])}`; "
              f"torch {torch.__version__}; Rust times from `{rust['command']}` (same run).\n")
    md.append("| d | causal | pass | Python ms | Rust ms | Python / Rust | cuDNN ms |")
    md.append("|---|---|---|---|---|---|---|")
    for d in (64, 128):
        b, h = TOKENS // SEQ, HIDDEN // d
        q, k, v, d_out = (torch.randn(b, SEQ, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        for causal in (False, True):
            ours = passes(lambda q, k, v: ringdil.attention(q, k, v, causal=causal), q, k, v, d_out)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                cudnn = passes(lambda q, k, v: F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2),
                    q, k, v, d_out)
            for i, name in enumerate(("fwd", "fwd+bwd")):
                kernels = next(r["ms"] for r in rust["rows"]
                               if r["seq"] == SEQ and r["head_dim"] == d and r["causal"] == causal and r["pass"] == name)
                row = {"seq": SEQ, "batch": b, "heads": h, "head_dim": d, "causal": causal, "pass": name,
                       "python_ms": ours[i], "rust_ms": kernels, "overhead": ours[i] / kernels, "cudnn_ms": cudnn[i]}
                rows.append(row)
                print(row, flush=True)
                md.append(f"| {d} | {causal} | {name} | {ours[i]:.3f} | {kernels:.3f} | {ours[i] / kernels:.3f} | "
                          f"{cudnn[i]:.3f} |")
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": str(datetime.date.today()),
               "rust_command": rust["command"], "rows": rows}, open(sys.argv[2], "w"), indent=1)
    open(sys.argv[3], "w").write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()

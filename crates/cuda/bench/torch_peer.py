"""Time torch.nn.functional.scaled_dot_product_attention (flash and cuDNN backends) on the
shapes of ringdil-cuda's gpu_bench, in the same run, and write JSON for it to read: `rows`
(multi-head shapes), `gqa` (n = 16384, 16 query heads of d = 128 over 16, 2 and 1 K/V
heads, with enable_gqa=True) and `head_dims` (n = 16384, 16 heads of d = 96, 128, 192, 256,
and MLA's d = 192 with v's head dim 128).

usage: python3 torch_peer.py OUT.json
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS = 16384   # batch * seq
HIDDEN = 2048    # heads * head_dim
WARMUP, ITERS = 5, 20


def timed(fn):
    for _ in range(WARMUP):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS


def training_step(attend, leaves, d_out):
    """One training step's forward + backward of ``attend`` on ``leaves`` (tensors that
    require grad), their gradients set to ``None`` first, as ``optimizer.zero_grad()``
    leaves them: kept, autograd would add each call's gradients into the last ones, three
    elementwise passes that are not attention's (and that no ringdil timing has)."""
    def step():
        for x in leaves:
            x.grad = None
        attend(*leaves).backward(d_out)
    return step


def main():
    rows = []
    for seq in (4096, 16384):
        for d in (64, 128):
            b, h = TOKENS // seq, HIDDEN // d
            # The bench's layout [batch, seq, heads, dim], viewed as SDPA's [b, h, n, d].
            q, k, v, do = (torch.randn(b, seq, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                           for _ in range(4))
            for causal in (False, True):
                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    row = dict(seq=seq, batch=b, heads=h, head_dim=d, causal=causal, backend=name)
                    try:
                        with sdpa_kernel(backend):
                            row["fwd_ms"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                            leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                            row["fwd_bwd_ms"] = timed(training_step(
                                lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal), leaves, do))
                    except RuntimeError as e:  # backend unavailable for this shape
                        row["error"] = str(e).splitlines()[0]
                    rows.append(row)
                    print(row, flush=True)
    json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows, "gqa": gqa(),
               "head_dims": head_dims()},
              open(sys.argv[1], "w"), indent=1)


def gqa(seq=16384, heads=16, d=128):
    """The grouped-query rows: K/V at kv_heads heads, query head h reading K/V head
    h // (heads // kv_heads) (SDPA's enable_gqa rule, the same as ringdil's)."""
    rows = []
    for kv_heads in (16, 2, 1):
        q, do = (torch.randn(1, seq, heads, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        k, v = (torch.randn(1, seq, kv_heads, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        for causal in (False, True):
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                row = dict(seq=seq, heads=heads, kv_heads=kv_heads, head_dim=d, causal=causal, backend=name)
                try:
                    with sdpa_kernel(backend):
                        sdpa = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal, enable_gqa=True)
                        row["fwd_ms"] = timed(lambda: sdpa(q, k, v))
                        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                        row["fwd_bwd_ms"] = timed(training_step(sdpa, leaves, do))
                except RuntimeError as e:  # backend unavailable for this shape
                    row["error"] = str(e).splitlines()[0]
                rows.append(row)
                print(row, flush=True)
    return rows


def head_dims(seq=16384, heads=16):
    """The head-dim rows: n = 16384, 16 heads of d = 96, 128, 192, 256 and d = 192 with
    v's head dim 128 (gpu_bench's head_dims.rs), each backend as far as it takes the
    head dims."""
    rows = []
    for d, dv in ((96, 96), (128, 128), (192, 192), (256, 256), (192, 128)):
        q, k = (torch.randn(1, seq, heads, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        v, do = (torch.randn(1, seq, heads, dv, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
        for causal in (False, True):
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                row = dict(seq=seq, heads=heads, head_dim=d, value_dim=dv, causal=causal, backend=name)
                try:
                    with sdpa_kernel(backend):
                        sdpa = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal)
                        row["fwd_ms"] = timed(lambda: sdpa(q, k, v))
                        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                        row["fwd_bwd_ms"] = timed(training_step(sdpa, leaves, do))
                except RuntimeError as e:  # backend unavailable for this head dim
                    row["error"] = str(e).splitlines()[0]
                rows.append(row)
                print(row, flush=True)
    return rows


if __name__ == "__main__":
    main()

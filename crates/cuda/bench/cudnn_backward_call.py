"""cuDNN's SDPA forward + backward at gpu_bench's dense row shape (b = 1, h = 16, n = 16384,
d = 128, bf16, not causal), twice: the call a kernel profiler compares with
`profile_call --calls 2 --backward` (docs/benchmarks/profiles/ncu-bwd-vs-cudnn-h200.md):

    ncu --clock-control none --set full -k regex:bprop -s 1 -c 1 python3 crates/cuda/bench/cudnn_backward_call.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
q, k, v = (torch.randn(1, 16, 16384, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
do = torch.randn_like(q)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(2):
        o = F.scaled_dot_product_attention(q, k, v)
        o.backward(do)
torch.cuda.synchronize()
print("done")

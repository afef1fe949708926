"""``ringdil.ring_attention`` under ``torchrun`` against ``ringdil.attention`` on the whole sequence.

    torchrun --nproc-per-node 2 crates/python/tests/torchrun_ring.py [--out-md FILE.md] [--date TEXT]

Every rank draws the same whole-sequence inputs (seeded), computes ``ringdil.attention`` on
them with autograd (the single-GPU kernels: the reference of this check, itself checked
against the f64 reference by ``test_torch.py``), then calls ``ring_attention`` on its shard
(``ringdil.ring.shard``) and backpropagates its shard of the same upstream gradient. Its
output, dQ, and its shard's dK, dV must equal the whole-sequence results' rows of its
tokens: relative L2 error ``||ring - whole|| / ||whole||`` over all ranks below 1e-2
(bfloat16) / 2e-3 (float16); the two differ only in the order of the f32 merges and
the one rounding of each result; the same bounds hold for MLA's cases (v, the output,
d_out and dV 128 wide beside q, k at 192), which compare the same four results. One more
row: a pair of head dims no kernel runs (192 / 64) must be a ``ValueError`` naming both
dims on every rank. Rank 0 gathers every rank's errors and writes the log.
Run by ``test_ring_torch.py`` on a machine with two or more CUDA devices.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import ringdil
from ringdil import ring

BOUND = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
LONGNET = {"kind": "dilated", "segment_lengths": [256, 512, 1024], "dilation_rates": [1, 2, 4],
           "offsets": "head_mod", "combine": "softmax_denominator"}
# The PyTorch ports' combine (ringdil.nn's default): one head group per branch, outputs / 3.
HEAD_GROUPS = {"kind": "dilated", "segment_lengths": [256, 512, 1024], "dilation_rates": [1, 2, 4],
               "offsets": [0, 1, 2], "combine": "head_groups"}
# (name, batch, seq, heads, kv_heads, head_dim (or (q/k's, v's)), dtype, keyword arguments, layout)
CASES = [
    ("dense causal", 1, 2000, 8, 8, 128, torch.bfloat16, {"causal": True}, "zigzag"),
    ("dense", 1, 1999, 4, 4, 64, torch.bfloat16, {}, "contiguous"),
    ("longnet causal", 1, 2048, 8, 8, 64, torch.bfloat16, {"pattern": LONGNET, "causal": True}, "zigzag"),
    ("gqa 8:2 causal, batch 2", 2, 1500, 8, 2, 128, torch.bfloat16, {"causal": True}, "contiguous"),
    ("window, striped", 1, 1024, 4, 4, 64, torch.bfloat16,
     {"pattern": {"kind": "sliding_window", "left": 100}}, "striped"),
    ("packed documents causal", 1, 3000, 4, 4, 128, torch.bfloat16,
     {"causal": True, "documents": [0, 700, 701, 1900, 3000]}, "balanced"),
    # LongNet inside documents, rows packed differently: launches over the documents on
    # every contiguous piece pair (segment tables, dense segments).
    ("packed longnet causal, rows apart", 2, 3000, 4, 4, 64, torch.bfloat16,
     {"pattern": LONGNET, "causal": True, "documents": [[0, 700, 701, 1900, 3000], [0, 1500, 3000]]}, "contiguous"),
    ("dense causal f16", 1, 2000, 8, 8, 128, torch.float16, {"causal": True}, "zigzag"),
    ("head groups causal (ringdil.nn's combine)", 1, 2048, 6, 6, 64, torch.bfloat16,
     {"pattern": HEAD_GROUPS, "causal": True}, "zigzag"),
    # MLA: v (and the output, d_out, dV) 128 wide beside q and k at 192, grouped-query.
    ("mla causal, gqa 4:2", 1, 1536, 4, 2, (192, 128), torch.bfloat16, {"causal": True}, "zigzag"),
    ("mla longnet causal, gqa 4:2", 1, 2048, 4, 2, (192, 128), torch.bfloat16,
     {"pattern": LONGNET, "causal": True}, "zigzag"),
]
# (schedule, hybrid_degree): the hybrid in one group of all ranks (the default rule on 2
# ranks) and in groups of one rank (the ring over groups, on head-slice plans).
SCHEDULES = [("ring", None), ("pattern_ring", None), ("all_gather", None), ("ulysses", None), ("hybrid", None),
             ("hybrid", 1), ("tune", None)]


def rel(x, ref):
    """Relative L2 error over every rank's rows (sums of squares all-reduced)."""
    x, ref = x.detach().double(), ref.detach().double()
    s = torch.stack([(x - ref).square().sum(), ref.square().sum(), (~torch.isfinite(x)).sum().double()])
    dist.all_reduce(s)
    return float("inf") if s[2] > 0 else float((s[0] / s[1]).sqrt())


def run_case(case, schedule, rank, world, device):
    schedule, degree = schedule
    name, b, n, h, hkv, d, dtype, kw, layout = case
    d, dv = d if isinstance(d, tuple) else (d, d)
    g = torch.Generator().manual_seed(1234)
    q, dout = torch.randn(b, n, h, d, generator=g), torch.randn(b, n, h, dv, generator=g)
    k, v = torch.randn(b, n, hkv, d, generator=g), torch.randn(b, n, hkv, dv, generator=g)
    q, k, v, dout = (x.to(device=device, dtype=dtype) for x in (q, k, v, dout))
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    out = ringdil.attention(*whole, **kw)
    out.backward(dout)
    docs = kw.get("documents")
    local = [ring.shard(x, rank, world, layout, documents=docs).detach().requires_grad_() for x in (q, k, v)]
    lout = ringdil.ring_attention(*local, layout=layout, schedule=schedule, hybrid_degree=degree, **kw)
    lout.backward(ring.shard(dout, rank, world, layout, documents=docs))
    mine = lambda x: ring.shard(x, rank, world, layout, documents=docs)  # noqa: E731
    errs = {
        "out": rel(lout, mine(out)),
        "dq": rel(local[0].grad, mine(whole[0].grad)),
        "dk": rel(local[1].grad, mine(whole[1].grad)),
        "dv": rel(local[2].grad, mine(whole[2].grad)),
    }
    dims = f"d={d}" if dv == d else f"d={d} d_v={dv}"
    shape = f"B={b} N={n} H={h} H_kv={hkv} {dims} {str(dtype).removeprefix('torch.')}"
    label = schedule if degree is None else f"{schedule} (groups of {degree})"
    return f"{label} | {name} | {layout} | {shape}", errs, BOUND[dtype]


def refused_value_dim(rank, world, device):
    """v's head dim 64 beside q's and k's 192 (no kernel runs the pair): a ``ValueError``
    naming both dims on every rank, raised by the ring's plan before anything runs."""
    b, n, h, d, dv = 1, 512, 2, 192, 64
    q = torch.zeros(b, n, h, d, device=device, dtype=torch.bfloat16)
    v = torch.zeros(b, n, h, dv, device=device, dtype=torch.bfloat16)
    q_l, v_l = (ring.shard(x, rank, world, "zigzag") for x in (q, v))
    want = f"head_dim {d} with value head_dim {dv} has no GPU kernel"
    try:
        ringdil.ring_attention(q_l, q_l, v_l, causal=True, seq_len=n)
        got = "no error"
    except ValueError as e:
        got = f"ValueError: {e}"
    ok = torch.tensor([int(want in got)], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    shape = f"B={b} N={n} H={h} H_kv={h} d={d} d_v={dv} bfloat16"
    return f"ring | refused value dim | zigzag | {shape}", bool(ok.item()), got.replace("|", "/")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-md", help="where rank 0 writes the log (not --log: torchrun rejects a prefix of its own options)")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    args = ap.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    start = time.time()
    rows, failed = [], 0
    for case in CASES:
        for schedule in SCHEDULES:
            label, errs, bound = run_case(case, schedule, rank, world, device)
            ok = all(e < bound for e in errs.values())
            failed += not ok
            text = ", ".join(f"{k} {v:.2e}" for k, v in errs.items())
            rows.append(f"| {'PASS' if ok else 'FAIL'} | {label} | {text} (bound {bound:g}) |")
            if rank == 0:
                print(rows[-1], flush=True)
    label, ok, got = refused_value_dim(rank, world, device)
    failed += not ok
    rows.append(f"| {'PASS' if ok else 'FAIL'} | {label} | {got} (on every rank) |")
    if rank == 0:
        print(rows[-1], flush=True)
    if rank == 0:
        passed = len(rows) - failed
        log = [
            f"# ring_attention under torchrun ({world} GPU{'s' if world > 1 else ''}) against ringdil.attention on the whole sequence",
            "",
            f"* device: {torch.cuda.get_device_name(device)} x {world}, torch {torch.__version__}, ringdil {ringdil.__version__}",
            f"* date: {args.date}",
            f"* command: `torchrun --nproc-per-node {world} crates/python/tests/torchrun_ring.py`",
            "* check: each rank's output, dQ, dK, dV (its shard, `ringdil.ring.shard`) against the rows of its "
            "tokens in `ringdil.attention` + autograd on the whole sequence, same inputs; relative L2 error over "
            "all ranks",
            "",
            "| result | schedule | case | layout | shape | relative errors |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"**{passed} passed, {failed} failed** in {time.time() - start:.1f} s.",
        ]
        if args.out_md:
            with open(args.out_md, "w") as f:
                f.write("\n".join(log) + "\n")
        print(f"ring_attention check: {passed} passed, {failed} failed")
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

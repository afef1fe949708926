"""``ringdil.ring_attention`` timed under ``torchrun``: scaling against ``ringdil.attention`` on
one GPU, from Python, at the shapes of the Rust ``ring_bench``'s dense-causal rows.

    torchrun --nproc-per-node 2 crates/python/bench/ring_torch_bench.py --json F.json --md F.md

B = 1, H = 8, d = 128, bf16, causal, zigzag; N = P x N/GPU. Times are medians over
``--reps`` passes after two warm-ups, each pass between barriers and ended by a device
synchronisation on every rank (the slowest rank's time). ratio = t_1(N) / (P t_P(N)),
where t_1 is ``ringdil.attention`` on the whole sequence on rank 0's GPU; the Rust
``ring_bench`` rows of the same machine give the same ratio without Python.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import ringdil
from ringdil import ring


def timed(fn, reps):
    """Median wall time of ``fn`` (ms) over ``reps`` passes after two warm-ups."""
    ts = []
    for i in range(reps + 2):
        dist.barrier()
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        dist.barrier()
        if i >= 2:
            ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def fresh(leaves):
    """Set the gradients to None, as ``optimizer.zero_grad()`` leaves them before a training
    step (kept, autograd would add each call's into the last: an extra pass per tensor)."""
    for x in leaves:
        x.grad = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--per-gpu", default="16384,65536")
    ap.add_argument("--schedules", default="ring,pattern_ring,tune")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    h, d = 8, 128
    rows = []
    for per_gpu in (int(x) for x in args.per_gpu.split(",")):
        n = per_gpu * world
        g = torch.Generator().manual_seed(7)
        q, k, v, dout = (torch.randn(1, n, h, d, generator=g).to(device, torch.bfloat16) for _ in range(4))
        whole = [x.clone().requires_grad_() for x in (q, k, v)]

        def single_fwd():
            if rank == 0:
                ringdil.attention(*whole, causal=True)

        def single_both():
            if rank == 0:
                fresh(whole)
                ringdil.attention(*whole, causal=True).backward(dout)

        t1 = (timed(single_fwd, args.reps), timed(single_both, args.reps))
        local_in = [ring.shard(x, rank, world, "zigzag").requires_grad_() for x in (q, k, v)]
        local_dout = ring.shard(dout, rank, world, "zigzag")
        for schedule in args.schedules.split(","):

            def fwd():
                ringdil.ring_attention(*local_in, causal=True, schedule=schedule, seq_len=n)

            def both():
                fresh(local_in)
                ringdil.ring_attention(*local_in, causal=True, schedule=schedule, seq_len=n).backward(local_dout)

            tp = (timed(fwd, args.reps), timed(both, args.reps))
            row = {
                "n": n, "per_gpu": per_gpu, "schedule": schedule,
                "single_fwd_ms": t1[0], "single_fwd_bwd_ms": t1[1],
                "fwd_ms": tp[0], "fwd_bwd_ms": tp[1],
                "ratio_fwd": t1[0] / (world * tp[0]), "ratio_fwd_bwd": t1[1] / (world * tp[1]),
            }
            rows.append(row)
            if rank == 0:
                print(row, flush=True)
    if rank == 0:
        meta = {
            "command": f"torchrun --nproc-per-node {world} crates/python/bench/ring_torch_bench.py",
            "device": f"{torch.cuda.get_device_name(device)} x {world}",
            "date": args.date, "torch": torch.__version__, "ringdil": ringdil.__version__,
            "shape": {"batch": 1, "heads": h, "head_dim": d, "dtype": "bfloat16", "causal": True, "layout": "zigzag"},
        }
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**meta, "rows": rows}, f, indent=1)
        if args.md:
            lines = [
                f"# ring_attention from Python ({world} GPUs)",
                "",
                f"* device: {meta['device']}; torch {meta['torch']}; date {meta['date']}",
                f"* command: `{meta['command']}`",
                "* B = 1, H = 8, d = 128, bf16, dense causal, zigzag; medians of "
                f"{args.reps} passes after 2 warm-ups, between barriers (the slowest rank)",
                "* ratio = t_1(N) / (P t_P(N)); t_1 = `ringdil.attention` on the whole sequence, one GPU",
                "",
                "| N | N/GPU | schedule | one GPU fwd ms | fwd ms | ratio fwd | one GPU fwd+bwd ms | fwd+bwd ms | ratio fwd+bwd |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for r in rows:
                lines.append(
                    f"| {r['n']} | {r['per_gpu'] // 1024}K | {r['schedule']} | {r['single_fwd_ms']:.2f} | {r['fwd_ms']:.2f} "
                    f"| {r['ratio_fwd']:.2f} | {r['single_fwd_bwd_ms']:.2f} | {r['fwd_bwd_ms']:.2f} | {r['ratio_fwd_bwd']:.2f} |"
                )
            with open(args.md, "w") as f:
                f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

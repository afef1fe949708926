"""Time FlexAttention (torch.compile'd flex_attention with a block mask) on the masks of
ringdil-cuda's gpu_bench, in the same run, and write JSON for `gpu_bench --flex`.

Rows (`what`, `impl` = "flex"; `fwd_ms`, `fwd_bwd_ms`):
- "documents causal": the packed row of gpu_bench (one row of `seq` tokens, 16 heads of
  d = 128, bf16), causal within each document, boundaries read from DOCS.json
  (`gpu_bench --write-documents DOCS.json`), so both sides time the same documents;
- "dense causal": the same row with one document, the rate the packed row is held to;
- "longnet (w, r)" and "longnet (w, r) causal": one LongNet branch at n = 16384, 16 heads
  of d = 128 (segment w, dilation r, offset h mod r: a query attends the keys of its segment
  on its dilation lattice, rows off the lattice attend nothing; causal: and k <= q), forward
  and forward + backward, as gpu_bench's dilated rows;
- "window 512 causal" (k <= q < k + 512) and "block local 128" (|q // 128 - k // 128| <= 1)
  at n = 16384, forward and forward + backward: the masks of gpu_bench's expression rows;
- "rotating offsets": notebook 01's rule (LongNet (2048, 1), (4096, 4), (8192, 8), causal,
  head h keeping residue (h + s) mod r in segment s; gpu_bench's expressions.rs ROTATING).

The block masks are built once per mask, outside the timed region (FlexAttention's intended
use: a mask is reused across layers and steps). Times as torch_peer.py takes them.

usage: python3 flex_peer.py DOCS.json OUT.json [PREFIXES]
PREFIXES, comma-separated, times only the rows whose `what` starts with one of them (a
section's rows, e.g. "window,block,rotating,longnet (4096, 4)" for gpu_bench's expressions).
"""
import itertools
import json
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

HEADS, DIM = 16, 128
LONGNET_SEQ = 16384
LONGNET_BRANCHES = ((2048, 1), (4096, 4), (8192, 8), (16384, 16))

from torch_peer import timed, training_step  # this folder's torch_peer.py: the same timing for every peer

# Each mask, length and requires_grad setting is its own compiled graph; past dynamo's default
# limit of 8 it would fall back to the unfused eager path (full score matrix) without saying so.
torch._dynamo.config.recompile_limit = 64
torch._dynamo.config.accumulated_recompile_limit = 256
flex = torch.compile(flex_attention, dynamic=False)


def time_mask(block_mask, seq, backward):
    """Forward (and forward + backward) of flex_attention under `block_mask`, [1, H, seq, D]."""
    q, k, v, do = (torch.randn(1, HEADS, seq, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    row = {"fwd_ms": timed(lambda: flex(q, k, v, block_mask=block_mask))}
    if backward:
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        row["fwd_bwd_ms"] = timed(training_step(lambda a, b, c: flex(a, b, c, block_mask=block_mask), leaves, do))
    return row


def document_ids(boundaries, seq):
    """Per position, the index of its document (empty documents take no position)."""
    lengths = torch.tensor([b - a for a, b in zip(boundaries, boundaries[1:])], device="cuda")
    ids = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"), lengths)
    assert ids.numel() == seq, "boundaries must end at the row's length"
    return ids


def main():
    docs = json.load(open(sys.argv[1]))
    seq, boundaries = docs["seq"], docs["boundaries"]
    prefixes = sys.argv[3].split(",") if len(sys.argv) > 3 else [""]

    def wanted(what):
        return any(what.startswith(p) for p in prefixes)
    ids = document_ids(boundaries, seq)

    def packed_causal(b, h, q, kv):
        return (ids[q] == ids[kv]) & (q >= kv)

    def causal(b, h, q, kv):
        return q >= kv

    rows = []
    for what, mask_mod in (("documents causal", packed_causal), ("dense causal", causal)):
        if not wanted(what):
            continue
        mask = create_block_mask(mask_mod, None, None, seq, seq, device="cuda")
        row = {"what": what, "impl": "flex", "seq": seq, "heads": HEADS, "head_dim": DIM,
               "mask_sparsity_percent": float(mask.sparsity()), **time_mask(mask, seq, True)}
        rows.append(row)
        print(row, flush=True)
    for (w, r), causal_branch in itertools.product(LONGNET_BRANCHES, (False, True)):
        def branch(b, h, q, kv, w=w, r=r, causal_branch=causal_branch):
            o = h % r
            kept = (q // w == kv // w) & ((q % w) % r == o) & ((kv % w) % r == o)
            return kept & (q >= kv) if causal_branch else kept

        what = f"longnet ({w}, {r})" + (" causal" if causal_branch else "")
        if not wanted(what):
            continue
        mask = create_block_mask(branch, None, HEADS, LONGNET_SEQ, LONGNET_SEQ, device="cuda")
        row = {"what": what, "impl": "flex", "seq": LONGNET_SEQ, "heads": HEADS, "head_dim": DIM,
               "mask_sparsity_percent": float(mask.sparsity()), **time_mask(mask, LONGNET_SEQ, True)}
        rows.append(row)
        print(row, flush=True)
    def rotating(b, h, q, kv):
        def branch(w, r):
            s = q // w
            return (kv // w == s) & ((q % w) % r == (h + s) % r) & ((kv % w) % r == (h + s) % r)
        return (kv <= q) & ((q // 2048 == kv // 2048) | branch(4096, 4) | branch(8192, 8))

    masks = (("window 512 causal", lambda b, h, q, kv: (kv <= q) & (q - kv < 512), None),
             ("block local 128", lambda b, h, q, kv: (q // 128 - kv // 128).abs() <= 1, None),
             ("rotating offsets", rotating, HEADS))
    for what, mask_mod, heads in masks:
        if not wanted(what):
            continue
        mask = create_block_mask(mask_mod, None, heads, LONGNET_SEQ, LONGNET_SEQ, device="cuda")
        row = {"what": what, "impl": "flex", "seq": LONGNET_SEQ, "heads": HEADS, "head_dim": DIM,
               "mask_sparsity_percent": float(mask.sparsity()), **time_mask(mask, LONGNET_SEQ, True)}
        rows.append(row)
        print(row, flush=True)
    json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "seq": seq,
               "boundaries": boundaries, "rows": rows}, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()

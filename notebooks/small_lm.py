"""Train a small LongNet-style language model with ``ringdil.attention``, then time the same
model's training step with torch SDPA (dense causal) and FlexAttention (the LongNet mask).

The model is a 4-layer decoder (d_model 512, 8 heads of 64, pre-norm, rotary positions on
half of each head's dimensions)
whose attention is a plug: ``q, k, v`` of ``[batch, seq, heads, head_dim]`` in, the output
in the same layout out. Three plugs compute on the same weights:

* ``ringdil``: ``ringdil.attention`` with the LongNet pattern of ``longnet_mask.py``
  (segments 2048, 4096, 8192, 16384 with dilations 1, 2, 4, 8 at 16384 tokens; offsets
  ``h mod r``; softmax-denominator combine; causal);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, dense causal: what the
  LongNet pattern is meant to save;
* ``flex``: ``flex_attention`` compiled with ``torch.compile``, the same LongNet pattern as a
  block mask built once (``mask_mod``) plus ``log(multiplicity)`` added to the score
  (``score_mod``), so that it computes ringdil's function, keys counted twice included.

What a run does, in order (each phase prints a line):

1. checks ``ringdil.attention`` (output and the three gradients) against dense attention
   under the pattern's explicit multiplicities from ``ringdil.reference.key_counts``, in
   float32, on one 4096-token batch, and Flex against ringdil at the training shape; a
   relative L2 error over 1e-2 stops the run;
2. trains with ringdil for ``--steps`` steps (AdamW, bf16 autocast, fp32 weights) on the
   class-member recall task of ``recall_data.py``, recording the loss and the recall loss
   (member tokens whose class came up earlier in the row) at every step;
3. trains the sdpa and flex models the same way for ``--reference-steps`` steps, from the
   same initial weights on the same batches: a sanity reference for the curve;
4. evaluates each trained model's recall loss on held-out rows, by how far back the key was;
5. times ``--time-steps`` training steps of each (forward, backward, optimizer step;
   ``torch.cuda.synchronize`` around each; median after ``--warmup`` steps), and one
   attention call's forward + backward at the training shape;
6. writes everything to ``--out`` as JSON (``notebooks/03_train_small_lm.ipynb`` plots it).

usage: python3 notebooks/small_lm.py --out FILE.json [--steps 500] [--seq 16384] [--batch 2]
       [--reference-steps N] [--time-steps 20] [--warmup 5] [--lr 2e-3] [--seed 0]

Needs a CUDA device, PyTorch with Triton (for Flex) and the ``ringdil`` package.
"""
import argparse
import datetime
import json
import math
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import ringdil
import longnet_mask
import recall_data

BOUND = 1e-2  # bf16 against float32, as crates/python/tests/test_torch.py holds the kernels to
TASK = recall_data.Task()


@dataclass
class Config:
    vocab: int = recall_data.Task().vocab
    d_model: int = 512
    heads: int = 8
    layers: int = 4
    mlp: int = 2048
    seq: int = 16384
    first_segment: int = 2048
    rotary_dims: int = 32   # of head_dim 64: the other half carries no position (see rotate)
    rope_base: float = 10000.0

    @property
    def head_dim(self):
        return self.d_model // self.heads

    @property
    def pattern(self):
        return longnet_mask.longnet_pattern(self.seq, self.first_segment)


# ----------------------------------------------------------------------------- the model

def rotate(x, cos, sin):
    """Rotary positions on the first ``2 * cos.shape[-1]`` dims of each head of ``x``
    ``[batch, seq, heads, head_dim]`` (computed in float32); the other dims pass unrotated.

    Rotary positions let a head find "the token r back" the same way everywhere; the
    unrotated half lets it match by content at any distance: with base 10000 even the
    slowest rotary pair of a 64-dim head turns by about 2 radians over 16384 tokens, which
    scrambles a content match between far tokens (partial rotary, as GPT-NeoX and others)."""
    r = 2 * cos.shape[-1]
    x = x.float()
    x1, x2, rest = x[..., : r // 2], x[..., r // 2: r], x[..., r:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class Block(nn.Module):
    """Pre-norm attention + GELU MLP. The attention is passed in at each call, so one set
    of weights runs under every plug."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.heads = cfg.heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.up = nn.Linear(d, cfg.mlp, bias=False)
        self.down = nn.Linear(cfg.mlp, d, bias=False)

    def forward(self, x, attend, cos, sin):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        # One dtype and contiguous [b, n, h, d] for every plug: bf16 under autocast (the
        # kernels' input type), and the same strides each call (Flex is compiled for them).
        v = v.contiguous()
        q, k = rotate(q, cos, sin).to(v.dtype), rotate(k, cos, sin).to(v.dtype)
        x = x + self.out(attend(q, k, v).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class SmallLM(nn.Module):
    """Token embedding, ``layers`` blocks, final norm and an untied output head."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        half = cfg.rotary_dims // 2
        freq = cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)
        angle = torch.arange(cfg.seq, dtype=torch.float64)[:, None] * freq[None, :]
        self.register_buffer("cos", angle.cos().float()[:, None, :], persistent=False)  # [seq, 1, half]
        self.register_buffer("sin", angle.sin().float()[:, None, :], persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2's initialisation: residual outputs scaled by depth
                std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("out.weight", "down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens, attend):
        n = tokens.shape[1]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, attend, self.cos[:n], self.sin[:n])
        return self.head(self.norm(x))

    def losses(self, tokens, recall, attend):
        """Per-token cross-entropy of next-token prediction, float32 ``[batch, seq]``, for
        inputs ``tokens[:, :-1]`` and targets ``tokens[:, 1:]``; and its mean over the
        recall targets (``recall[:, 1:]``)."""
        logits = self.forward(tokens[:, :-1], attend)
        ce = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
        ce = ce.view(tokens.shape[0], -1)
        mask = recall[:, 1:]
        return ce, (ce * mask).sum() / mask.sum().clamp(min=1)


# ------------------------------------------------------------------------ the attentions

def to_heads_first(*xs):
    """``[b, n, h, d]`` -> ``[b, h, n, d]`` views, torch's attention layout."""
    return [x.transpose(1, 2) for x in xs]


def sdpa_dense():
    """Dense causal attention (torch picks flash / cuDNN / efficient): the baseline the
    LongNet pattern is meant to beat at long lengths."""

    def attend(q, k, v):
        return F.scaled_dot_product_attention(*to_heads_first(q, k, v), is_causal=True).transpose(1, 2)

    return attend


def ringdil_longnet(pattern):
    """``ringdil.attention`` under ``pattern`` (parsed once into a ``ringdil.Pattern``)."""
    parsed = ringdil.Pattern.from_dict(pattern)

    def attend(q, k, v):
        return ringdil.attention(q, k, v, pattern=parsed)

    return attend


def flex_longnet(pattern, heads, seq, device):
    """FlexAttention under the same pattern: ``mask_mod`` keeps the pairs of multiplicity
    >= 1 (built once into a block mask, outside any timed region, as FlexAttention is
    meant to be used), ``score_mod`` adds ``log(multiplicity)`` so that a key kept by two
    branches counts twice, as in LongNet's softmax-denominator combine."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, q, kv):
        return longnet_mask.allowed(pattern, h, q, kv)

    def score_mod(score, b, h, q, kv):
        return score + torch.log(longnet_mask.multiplicity(pattern, h, q, kv).clamp(min=1).to(score.dtype))

    block_mask = create_block_mask(mask_mod, None, heads, seq, seq, device=device)
    flex = torch.compile(flex_attention, dynamic=False)

    def attend(q, k, v):
        return flex(*to_heads_first(q, k, v), score_mod=score_mod, block_mask=block_mask).transpose(1, 2)

    attend.sparsity_percent = float(block_mask.sparsity())
    return attend


def masked_reference(counts):
    """Dense attention with the explicit multiplicities ``counts`` ``[heads, n, n]``: the
    float mask ``log(counts)`` (``-inf`` where 0) gives ``exp(s + log c) = c exp(s)``, the
    definition in docs/semantics.md section 3. The check's ground truth."""
    bias = torch.log(counts.float())[None]

    def attend(q, k, v):
        return F.scaled_dot_product_attention(*to_heads_first(q, k, v), attn_mask=bias.to(q.dtype)).transpose(1, 2)

    return attend


def make_attention(name, cfg, device):
    if name == "ringdil":
        return ringdil_longnet(cfg.pattern)
    if name == "sdpa":
        return sdpa_dense()
    if name == "flex":
        return flex_longnet(cfg.pattern, cfg.heads, cfg.seq, device)
    raise ValueError(f"attention: unknown {name!r}; expected ringdil, sdpa or flex")


# -------------------------------------------------------------------------------- checks

def rel_err(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).norm() / ref.norm())


def reference_counts(pattern, heads, n, device):
    """The pattern's multiplicities ``[heads, n, n]`` from the specification
    (``ringdil.reference.key_counts``), checked equal head by head to
    ``longnet_mask.multiplicity`` and ``allowed`` (the formulas Flex evaluates)."""
    counts = torch.stack([torch.from_numpy(ringdil.reference.key_counts(pattern, n, h, heads).astype(np.int64))
                          for h in range(heads)]).to(device)
    idx = torch.arange(n, device=device)
    for h in range(heads):
        formula = longnet_mask.multiplicity(pattern, h, idx[:, None], idx[None, :])
        keep = longnet_mask.allowed(pattern, h, idx[:, None], idx[None, :])
        if not (torch.equal(formula, counts[h]) and torch.equal(keep, counts[h] > 0)):
            raise SystemExit(f"small_lm.py: longnet_mask differs from ringdil.reference.key_counts at head {h}")
    return counts


def attention_errors(attend, reference, inputs, d_out, reference_dtype):
    """Relative L2 errors of ``attend``'s output and input gradients against those of
    ``reference`` run on the same ``inputs`` cast to ``reference_dtype``."""
    def run(fn, dtype):
        xs = [x.detach().to(dtype).requires_grad_() for x in inputs]
        out = fn(*xs)
        out.backward(d_out.to(dtype))
        return [out] + [x.grad for x in xs]

    ours, ref = run(attend, inputs[0].dtype), run(reference, reference_dtype)
    return {name: rel_err(a, b) for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref)}


def check(cfg, batch, device, variants, seed):
    """Step 1: ringdil against the f32 masked reference on ``min(seq, 4096)`` tokens; Flex
    (when it runs) against ringdil at the training shape, which also compiles it."""
    n = min(cfg.seq, 4096)
    g = torch.Generator().manual_seed(seed)
    draw = lambda b, m: torch.randn(b, m, cfg.heads, cfg.head_dim, generator=g).to(device, torch.bfloat16)  # noqa: E731
    counts = reference_counts(cfg.pattern, cfg.heads, n, device)
    inputs, d_out = [draw(1, n) for _ in range(3)], draw(1, n)
    errors = attention_errors(ringdil_longnet(cfg.pattern), masked_reference(counts), inputs, d_out, torch.float32)
    result = {"seq": n, "bound": BOUND, "formula_equals_reference_counts": True, "ringdil_vs_f32_masked": errors}
    print(f"check: ringdil vs f32 dense masked reference, n={n}: {fmt(errors)}", flush=True)
    del counts
    if "flex" in variants:
        inputs, d_out = [draw(batch, cfg.seq) for _ in range(3)], draw(batch, cfg.seq)
        with autocast(device):  # as in training, so the compiled graph is the one training reuses
            flex_err = attention_errors(variants["flex"], ringdil_longnet(cfg.pattern), inputs, d_out, torch.bfloat16)
        result["flex_vs_ringdil"] = flex_err
        result["flex_seq"] = cfg.seq
        print(f"check: flex vs ringdil, n={cfg.seq}: {fmt(flex_err)}", flush=True)
    worst = max(v for key in ("ringdil_vs_f32_masked", "flex_vs_ringdil") for v in result.get(key, {}).values())
    if not worst < BOUND:
        raise SystemExit(f"small_lm.py: check failed: relative error {worst:.3g} >= {BOUND} ({result})")
    return result


def fmt(errors):
    return ", ".join(f"{k} {v:.2e}" for k, v in errors.items())


# ------------------------------------------------------------------------------ training

def autocast(device):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def device_batch(rows, seq, seed, step, device):
    data = recall_data.batch(rows, seq, seed=seed, step=step, task=TASK)
    return (torch.from_numpy(data["tokens"]).to(device, non_blocking=True),
            torch.from_numpy(data["recall"]).to(device, non_blocking=True))


def fresh(cfg, lr, seed, device):
    """The model and optimizer every variant starts from: the same weights for the same
    ``seed`` (drawn on the CPU, so on any device)."""
    torch.manual_seed(seed)
    model = SmallLM(cfg).to(device)
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    return model, opt


def train_step(model, opt, attend, tokens, recall, device):
    """One step: forward under bf16 autocast, backward, clip to norm 1, AdamW. Returns the
    (loss, recall loss) tensors without synchronising."""
    with autocast(device):
        ce, recall_loss = model.losses(tokens, recall, attend)
        loss = ce.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach(), recall_loss.detach()


def schedule(step, steps, warmup):
    """Learning-rate factor: linear warm-up, then cosine down to 10%."""
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))


def train(cfg, attend, *, steps, batch, lr, seed, device, name=""):
    """Train a fresh model for ``steps`` steps on batches ``(seed, 0..steps-1)``; returns the
    model and the per-step loss and recall loss."""
    model, opt = fresh(cfg, lr, seed, device)
    warmup = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: schedule(s, steps, warmup))
    losses, recalls = [], []
    t0 = time.perf_counter()
    for step in range(steps):
        tokens, recall = device_batch(batch, cfg.seq, seed, step, device)
        loss, recall_loss = train_step(model, opt, attend, tokens, recall, device)
        sched.step()
        losses.append(loss)
        recalls.append(recall_loss)
        if (step + 1) % 50 == 0 or step + 1 == steps:
            print(f"train {name}: step {step + 1}/{steps} loss {loss.item():.4f} recall {recall_loss.item():.4f} "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)
    return model, torch.stack(losses).tolist(), torch.stack(recalls).tolist()


def evaluate(model, attend, cfg, *, batch, seed, batches, device):
    """Held-out loss (rows ``seed + 1``): overall, and the recall targets' loss bucketed by
    how far back their key was, with the pattern's segment lengths as bucket edges.
    Run with autograd on (nothing is stepped): inference mode would make torch.compile
    build Flex a second graph."""
    edges = [0] + [w for w in cfg.pattern["segment_lengths"] if w < cfg.seq] + [cfg.seq]
    sums, counts, total = np.zeros(len(edges) - 1), np.zeros(len(edges) - 1), []
    for i in range(batches):
        data = recall_data.batch(batch, cfg.seq, seed=seed + 1, step=i, task=TASK)
        tokens = torch.from_numpy(data["tokens"]).to(device)
        with autocast(device):
            ce, _ = model.losses(tokens, torch.from_numpy(data["recall"]).to(device), attend)
        ce = ce.detach().cpu().numpy()
        total.append(ce.mean())
        dist = data["distance"][:, 1:]
        for j, (lo, hi) in enumerate(zip(edges, edges[1:])):
            sel = (dist >= max(lo, 1)) & (dist < hi)
            sums[j] += ce[sel].sum()
            counts[j] += sel.sum()
    buckets = [{"from": lo, "to": hi, "targets": int(c), "loss": float(s / c) if c else None}
               for lo, hi, s, c in zip(edges, edges[1:], sums, counts)]
    return {"loss": float(np.mean(total)), "recall_by_distance": buckets}


# -------------------------------------------------------------------------------- timing

def median_ms(fn, warmup, steps):
    """Median wall time of ``fn`` in ms, synchronising the device around every call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def time_variant(cfg, attend, *, batch, lr, seed, warmup, steps, device):
    """A training step's median time (fresh model, one fixed batch) and one attention call's
    forward + backward at the training shape (bf16, random inputs)."""
    model, opt = fresh(cfg, lr, seed, device)
    tokens, recall = device_batch(batch, cfg.seq, seed, 0, device)
    step_ms, step_all = median_ms(lambda: train_step(model, opt, attend, tokens, recall, device), warmup, steps)
    shape = (batch, cfg.seq, cfg.heads, cfg.head_dim)
    q, k, v, d_out = (torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    def fwd_bwd():
        for x in (q, k, v):
            x.grad = None  # as a training step starts: no accumulation pass into the last gradients
        with autocast(device):
            out = attend(q, k, v)
        out.backward(d_out)

    attn_ms, _ = median_ms(fwd_bwd, warmup, steps)
    return {"step_ms": step_ms, "step_ms_all": step_all, "tokens_per_s": batch * cfg.seq / (step_ms / 1e3),
            "attention_fwd_bwd_ms": attn_ms}


# ---------------------------------------------------------------------------------- main

def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--steps", type=int, default=500, help="training steps with ringdil (default 500)")
    p.add_argument("--reference-steps", type=int, default=None,
                   help="training steps of the sdpa and flex models (default: --steps; 0 skips them)")
    p.add_argument("--seq", type=int, default=16384, help="tokens per row (default 16384)")
    p.add_argument("--batch", type=int, default=2, help="rows per step (default 2)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak AdamW learning rate (default 2e-3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-steps", type=int, default=20, help="timed steps per variant (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them (default 5)")
    p.add_argument("--eval-batches", type=int, default=8, help="held-out batches per model (default 8)")
    p.add_argument("--variants", default="ringdil,sdpa,flex", help="comma-separated subset of ringdil,sdpa,flex")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if not torch.cuda.is_available():
        raise SystemExit("small_lm.py: no CUDA device (torch.cuda.is_available() is False); the training and "
                         "timing run on a GPU. The notebook shows the committed results instead.")
    names = args.variants.split(",")
    if "ringdil" not in names or any(n not in ("ringdil", "sdpa", "flex") for n in names):
        raise SystemExit(f"small_lm.py: --variants {args.variants!r}: ringdil plus any of sdpa, flex")
    ref_steps = args.steps if args.reference_steps is None else args.reference_steps
    device = torch.device("cuda")
    cfg = Config(seq=args.seq)
    started = time.perf_counter()
    print(f"small_lm: {torch.cuda.get_device_name()}, torch {torch.__version__}, ringdil {ringdil.__version__}; "
          f"pattern {cfg.pattern['segment_lengths']} / {cfg.pattern['dilation_rates']}", flush=True)

    variants = {n: make_attention(n, cfg, device) for n in names}
    result = {
        "command": "python3 " + " ".join(shlex.quote(a) for a in ["notebooks/small_lm.py"] + list(sys.argv[1:] if argv is None else argv)),
        "device": torch.cuda.get_device_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "ringdil": ringdil.__version__,
        "config": {**asdict(cfg), "head_dim": cfg.head_dim,
                   "parameters": sum(p.numel() for p in SmallLM(cfg).parameters())},
        "pattern": cfg.pattern,
        "data": {"task": "class-member recall (recall_data.py)", **TASK.asdict()},
        "train": {"steps": args.steps, "reference_steps": ref_steps, "batch": args.batch, "lr": args.lr,
                  "seed": args.seed, "optimizer": "AdamW(betas=(0.9, 0.95), weight_decay=0.1), clip 1.0, "
                  "10% warm-up then cosine to 10%", "precision": "bf16 autocast, fp32 weights"},
    }
    if "flex" in variants:
        result["flex_block_sparsity_percent"] = variants["flex"].sparsity_percent

    t = time.perf_counter()
    result["check"] = check(cfg, args.batch, device, variants, args.seed)
    result["check"]["seconds"] = time.perf_counter() - t

    common = {"batch": args.batch, "lr": args.lr, "seed": args.seed, "device": device}
    result["reference_losses"], result["reference_recall_losses"], result["eval"] = {}, {}, {}
    result["train_seconds"] = {}
    for name, attend in variants.items():
        steps = args.steps if name == "ringdil" else ref_steps
        if steps == 0:
            continue
        t = time.perf_counter()
        model, losses, recalls = train(cfg, attend, steps=steps, name=name, **common)
        result["train_seconds"][name] = time.perf_counter() - t
        if name == "ringdil":
            result["losses"], result["recall_losses"] = losses, recalls
        else:
            result["reference_losses"][name], result["reference_recall_losses"][name] = losses, recalls
        result["eval"][name] = evaluate(model, attend, cfg, batch=args.batch, seed=args.seed,
                                        batches=args.eval_batches, device=device)
        print(f"eval {name}: {result['eval'][name]}", flush=True)
        del model
        torch.cuda.empty_cache()

    result["timing"] = {"warmup": args.warmup, "steps": args.time_steps}
    for name, attend in variants.items():
        row = time_variant(cfg, attend, warmup=args.warmup, steps=args.time_steps, **common)
        result["timing"][name] = row
        print(f"time {name}: step {row['step_ms']:.2f} ms ({row['tokens_per_s']:.0f} tokens/s), "
              f"attention fwd+bwd {row['attention_fwd_bwd_ms']:.2f} ms", flush=True)
        torch.cuda.empty_cache()

    result["wall_seconds"] = time.perf_counter() - started
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out} ({result['wall_seconds']:.0f} s)", flush=True)
    return result


if __name__ == "__main__":
    main()

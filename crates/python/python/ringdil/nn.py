"""Drop-in modules for the PyTorch LongNet port (``dilated_attention_pytorch``).

``from ringdil.nn import DilatedAttention, MultiheadDilatedAttention`` in place of the port's
import keeps the constructors and ``forward`` signatures (same positional order, same
keyword names) and runs ringdil's GPU kernels through :func:`ringdil.attention`.

The branch combine is selectable (``combine=``):

* ``"head_groups"`` (the default, the port's rule; ``docs/semantics.md`` section 7.6): the
  heads are split into one contiguous group per branch (the first ``H mod G`` groups one
  head larger), group ``g`` attends with branch ``g`` alone at the fixed offset ``g mod r_g``,
  and every output is divided by ``G``. One GPU call: each branch's launch covers its
  group's heads, and the output is scaled by ``1/G`` (``docs/gpu-patterns.md``, "Head-group combine").
* ``"softmax_denominator"`` (LongNet's formula, section 7.5): every head sees every branch,
  offsets ``h mod r``, the branches weighted by their softmax denominators; one GPU call.

What differs from the port numerically (section 7.6): ringdil does not divide a branch's
output by its sum over segments and positions (``x / x.sum(dim=(1, 2))``, present in some
versions of the port); sequence lengths need not be multiples of the segment lengths (the
last segment is shorter, section 7.1); and the kernels round once to the input dtype
(bfloat16 / float16 only: run the model under ``torch.autocast`` or in a 16-bit dtype).
Attention dropout is not implemented by the kernels, so ``attention_dropout`` / ``dropout``
must be 0.
"""

from typing import Optional, Sequence, Union

import torch
from torch import Tensor, nn

from . import attention

COMBINES = ("head_groups", "softmax_denominator")


def _check_branches(segment_lengths, dilation_rates, combine):
    if len(segment_lengths) != len(dilation_rates):
        raise ValueError(
            f"dilation_rates: {len(dilation_rates)} rates for {len(segment_lengths)} segment_lengths; "
            "one rate per segment length"
        )
    if combine not in COMBINES:
        raise ValueError(f"combine: expected one of {COMBINES}, got {combine!r}")


def _no_dropout(name, p):
    if p != 0.0:
        raise ValueError(f"{name}: {p}; ringdil's kernels have no attention dropout, only 0.0 is accepted")


def head_group_bounds(heads, groups):
    """The head ranges of the head-group combine: ``groups`` contiguous groups of
    ``heads // groups`` heads, the first ``heads % groups`` one larger."""
    if heads < groups:
        raise ValueError(f"heads: {heads} heads for {groups} branches; the head-group combine needs one per branch")
    base, extra = divmod(heads, groups)
    bounds, start = [], 0
    for g in range(groups):
        size = base + (1 if g < extra else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


class DilatedAttention(nn.Module):
    """Dilated attention of ``query``, ``key``, ``value`` (``[batch, seq, heads, head_dim]``).

    ``softmax_scale`` defaults to ``1/sqrt(head_dim)``; ``op`` (the port's xformers operator)
    is accepted for compatibility and must be ``None``.
    """

    def __init__(self, segment_lengths: Sequence[int], dilation_rates: Sequence[int],
                 softmax_scale: Optional[float] = None, attention_dropout: float = 0.0, op=None, *,
                 combine: str = "head_groups"):
        super().__init__()
        _check_branches(segment_lengths, dilation_rates, combine)
        _no_dropout("attention_dropout", attention_dropout)
        if op is not None:
            raise ValueError("op: an xformers operator has no meaning for ringdil's kernels; pass None")
        self.segment_lengths = list(segment_lengths)
        self.dilation_rates = list(dilation_rates)
        self.softmax_scale = softmax_scale
        self.combine = combine

    def forward(self, query: Tensor, key: Tensor, value: Tensor, causal: bool = False) -> Tensor:
        if self.combine == "softmax_denominator":
            pattern = {"kind": "dilated", "segment_lengths": self.segment_lengths,
                       "dilation_rates": self.dilation_rates, "offsets": "head_mod"}
            return attention(query, key, value, pattern=pattern, causal=causal, scale=self.softmax_scale)
        head_group_bounds(query.shape[2], len(self.segment_lengths))  # one head per group at least, by name
        pattern = {"kind": "dilated", "segment_lengths": self.segment_lengths, "dilation_rates": self.dilation_rates,
                   "offsets": [g % r for g, r in enumerate(self.dilation_rates)], "combine": "head_groups"}
        return attention(query, key, value, pattern=pattern, causal=causal, scale=self.softmax_scale)


class MultiheadDilatedAttention(nn.Module):
    """Multi-head dilated attention of ``[batch, seq, embed_dim]`` inputs: the q, k, v
    projections, :class:`DilatedAttention`, a layer norm before the output projection
    (MAGNETO's sub-layer norm, as the port; ``layer_norm=False`` drops it) and the output
    projection. ``forward`` returns ``(output, None)`` like the port and
    ``nn.MultiheadAttention`` without weights.

    ``num_kv_heads`` (keyword only; not in the port) makes it grouped-query attention: the
    k and v projections produce ``num_kv_heads`` heads of ``embed_dim // num_heads``, which
    must divide ``num_heads``, and query head ``h`` reads K/V head ``h // (num_heads //
    num_kv_heads)`` (``docs/semantics.md``); the kernels read each K/V head once per group,
    without replicating it. ``None`` (the default): as many as ``num_heads``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dilation_rates: Sequence[int],
                 segment_lengths: Sequence[int], dropout: float = 0.0, bias: bool = True,
                 layer_norm: bool = True, layer_norm_eps: float = 1e-5, gamma_init: float = 1.0,
                 device: Optional[Union[torch.device, str]] = None, dtype: Optional[torch.dtype] = None, op=None, *,
                 combine: str = "head_groups", num_kv_heads: Optional[int] = None):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim: {embed_dim} is not divisible by num_heads = {num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_kv_heads: {num_kv_heads} does not divide num_heads = {num_heads}")
        _check_branches(segment_lengths, dilation_rates, combine)
        if combine == "head_groups":
            head_group_bounds(num_heads, len(dilation_rates))
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.gamma_init = gamma_init
        factory = {"device": device, "dtype": dtype}
        kv_dim = num_kv_heads * (embed_dim // num_heads)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias, **factory)
        self.attention = DilatedAttention(segment_lengths, dilation_rates, attention_dropout=dropout, op=op,
                                          combine=combine)
        self.norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **factory) if layer_norm else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self):
        """Xavier-normal weights, zero biases; the value and output projections take the gain
        ``gamma_init`` (MAGNETO's initialisation, which depends on the model's depth)."""
        for proj, gain in ((self.q_proj, 1.0), (self.k_proj, 1.0), (self.v_proj, self.gamma_init),
                           (self.out_proj, self.gamma_init)):
            nn.init.xavier_normal_(proj.weight, gain=gain)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False):
        b, n, e = query.shape
        heads = lambda x, h: x.reshape(b, n, h, e // self.num_heads)  # noqa: E731
        x = self.attention(heads(self.q_proj(query), self.num_heads), heads(self.k_proj(key), self.num_kv_heads),
                           heads(self.v_proj(value), self.num_kv_heads), causal=is_causal)
        x = x.reshape(b, n, e)
        if self.norm is not None:
            x = self.norm(x)
        return self.out_proj(x), None

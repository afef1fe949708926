"""Ring layouts: which tokens each rank of a ring owns, and moving a sequence onto the
ranks and back (``docs/semantics.md``, ring section; ``docs/distributed.md``).

A layout is a token order and a split of it over ``ranks`` ranks; rank ``r``'s local rows
are the global tokens ``tokens(seq_len, ranks, layout)[r]``, in that order. Tokens keep
their global positions wherever they go, so masks and dilation offsets are computed from
global positions on every rank. The plans are the reference's (``ChunkPlan``): the same
ones the ring simulation, the GPU ring and ``ringdil plan`` use.

Layouts:

* ``"contiguous"``: rank ``r`` owns one contiguous run; the first ``seq_len mod ranks``
  ranks one token more;
* ``"zigzag"``: ``0..seq_len`` cut evenly into ``2 ranks`` chunks ``c_0 .. c_{2P-1}``; rank
  ``i`` owns ``c_i`` then ``c_{2P-1-i}``, which balances causal work;
* ``"striped"``: token ``t`` on rank ``t mod ranks``;
* ``"balanced"``: contiguous runs of nearly equal causal work over packed ``documents``
  (each rank within ``W/P`` plus or minus the largest position's work);
* ``{"boundaries": [0, b_1, ..., seq_len]}``: contiguous runs with any boundaries (a rank
  may own nothing); ``{"order": [...], "boundaries": [...]}``: any token order.

:func:`shard` and :func:`unshard` work on NumPy arrays and PyTorch tensors (any device)
alike, along any dimension (``dim=1``: the sequence of ``[batch, seq, heads, head_dim]``).
"""

import numpy as np

from . import _ringdil

__all__ = ["tokens", "shard", "unshard"]


def tokens(seq_len, ranks, layout="zigzag", *, documents=None, batch=1):
    """The global token indices of each rank's local rows: a list of ``ranks`` int64 arrays.
    ``documents`` (per-row boundary lists or one flat list over ``batch`` rows) is read by
    the ``"balanced"`` layout only."""
    return [np.asarray(t, dtype=np.int64) for t in _ringdil.layout_tokens(seq_len, ranks, layout, documents, batch)]


def _take(x, index, dim):
    """``x``'s rows ``index`` along ``dim``: NumPy's take or PyTorch's index_select."""
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=dim)
    import torch

    return torch.index_select(x, dim, torch.as_tensor(index, device=x.device))


def shard(x, rank, ranks, layout="zigzag", *, dim=1, documents=None):
    """Rank ``rank``'s part of the full sequence ``x`` (its tokens along ``dim``, in local
    order)."""
    if not 0 <= rank < ranks:
        raise ValueError(f"rank: {rank} is not in 0..{ranks}")
    batch = x.shape[0] if documents is not None else 1
    return _take(x, tokens(x.shape[dim], ranks, layout, documents=documents, batch=batch)[rank], dim)


def unshard(parts, layout="zigzag", *, dim=1, documents=None):
    """The full sequence from every rank's part (``parts[r]`` as :func:`shard` gave it): the
    inverse of :func:`shard`, tokens back in global order."""
    if not parts:
        raise ValueError("parts: expected one part per rank, got none")
    seq_len = sum(p.shape[dim] for p in parts)
    batch = parts[0].shape[0] if documents is not None else 1
    per_rank = tokens(seq_len, len(parts), layout, documents=documents, batch=batch)
    for r, (p, t) in enumerate(zip(parts, per_rank)):
        if p.shape[dim] != len(t):
            raise ValueError(f"parts: rank {r}'s part has {p.shape[dim]} rows along dim {dim}; its layout gives {len(t)}")
    inverse = np.argsort(np.concatenate(per_rank), kind="stable")
    if isinstance(parts[0], np.ndarray):
        return _take(np.concatenate(parts, axis=dim), inverse, dim)
    import torch

    return _take(torch.cat(list(parts), dim=dim), inverse, dim)

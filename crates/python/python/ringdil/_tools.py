"""The CLI's inspection tools as functions: :func:`pattern_stats` (``ringdil pattern
show``), :func:`verify` (``ringdil verify``) and :func:`plan` (``ringdil plan``).

Each runs the function of the CLI's library that the command runs and returns what the
command prints with ``--json`` (plain dicts, lists and numbers), so the numbers are the
CLI's own.
"""

import json
import os

from . import _ringdil
from ._pattern import as_pattern

__all__ = ["pattern_stats", "verify", "plan"]


def pattern_stats(pattern, seq_len=256, *, heads=4, head=0, layers=4):
    """What ``pattern`` lets each query of ``head`` (of ``heads``) see in a sequence of
    ``seq_len`` tokens, as ``ringdil pattern show --json`` reports it: a dict with

    * ``density``: allowed ``(query, key)`` pairs over ``seq_len ** 2`` (a key counted by
      two branches counts once);
    * ``keys_min``, ``keys_mean``, ``keys_max``: allowed keys per query;
    * ``max_multiplicity``: the largest count of one key for one query;
    * ``empty_queries``: queries with no key;
    * ``receptive_field``: ``[layers, last, smallest]`` for 1..``layers`` layers: how many
      tokens reach the last query, and the fewest that reach any of 64 evenly spaced
      queries, when every layer lets a query see the union over heads of its keys;
    * ``seq``, ``heads``, ``head``: the arguments.

    Causality is the pattern's own ``causal`` field. ``pattern`` takes the forms of
    :func:`ringdil.reference.attention` (``None`` is dense).
    """
    return _ringdil.pattern_stats(as_pattern(pattern), seq_len, heads, head, layers)


def _name(pattern):
    """How the verify rows name a fixed pattern: its path, as the CLI does, or its fields."""
    if isinstance(pattern, (str, os.PathLike)):
        return os.fspath(pattern)
    if isinstance(pattern, dict):
        return json.dumps(pattern, separators=(",", ":"))
    return repr(pattern)


def verify(pattern=None, *, cases=24, seed=2026):
    """Re-prove the reference's laws on ``cases`` random cases, as ``ringdil verify --json``:
    the blocked engine against dense attention under the explicit mask, the merge of
    partials over random key partitions (forward and backward), analytic gradients
    against finite differences, f32 against f64, and a distributed schedule on simulated
    ranks against one device.

    With ``pattern``, every case uses it (shapes, key padding and inputs still vary);
    without, each case draws a pattern. The same ``seed`` gives the same cases as the CLI.
    Returns ``{"seed", "cases", "rows", "failed"}``; each row is a dict with ``case``,
    ``seed``, ``check`` (``"masked"``, ``"merge"``, ``"backward"``, ``"f32"``, ``"ring"``),
    ``how``, ``pattern``, ``shape``, ``causal``, ``padded``, ``rel_err``, ``bound`` and
    ``pass``. A failed check is a row with ``pass`` false (and counted in ``failed``), not
    an exception.
    """
    p = as_pattern(pattern)
    return _ringdil.verify(p, _name(pattern) if p is not None else "", cases, seed)


def plan(pattern, seq_len=4096, ranks=4, *, schedule="pattern", layout="zigzag", heads=8, kv_heads=None,
         head_dim=128, value_dim=None, element_bytes=2):
    """A distributed schedule's communication plan, as the ``cost`` object of
    ``ringdil plan --json``: a dict with ``forward`` and ``backward`` (``[step][rank]``,
    bytes sent, batch 1), ``dense_ring_forward`` and ``dense_ring_backward`` (the plain
    ring's totals on the same chunks), ``skipped_computes``, ``tokens_per_rank`` and the
    arguments (``schedule``, ``ranks``, ``seq``, ``heads``, ``kv_heads``, ``head_dim``,
    ``value_dim``, ``element_bytes``).

    * ``schedule``: ``"ring"``, ``"pattern"`` (the ring moving only the K/V rows the
      pattern needs), ``"all-gather"``, ``"ulysses"`` or ``"hybrid"`` (Ulysses inside groups of
      ranks, the ring between them) (the CLI's ``--schedule`` values).
    * ``layout``: the layouts of :mod:`ringdil.ring` (``"contiguous"``, ``"zigzag"``,
      ``"striped"``, ``{"boundaries": [...]}``, ``{"order": [...], "boundaries": [...]}``).
    * ``kv_heads``: K/V heads dividing ``heads`` (grouped-query attention); K/V rows are
      costed at this many heads.
    * ``value_dim``: v's head dim where it differs from ``head_dim`` (MLA: 128 beside 192);
      V, dV, the output and its gradient are costed at it, Q, K, dQ and dK at ``head_dim``.
    """
    return _ringdil.plan(as_pattern(pattern), seq_len, ranks, schedule, layout, heads, kv_heads, head_dim,
                         value_dim, element_bytes)

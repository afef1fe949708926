"""The CPU reference of ringdil on NumPy arrays: the specification, not a fast path.

Layout (``docs/semantics.md`` section 1): ``q``, ``k``, ``v``, ``out``, ``d_out`` and the
gradients are ``[batch, seq, heads, head_dim]`` (``v`` may have another ``head_dim``);
the log-sum-exp ``lse`` is ``[batch, heads, seq]`` (flash-attention's ``softmax_lse``).

Dtypes: all float arrays of one call are float64 or all float32 (fixed by ``q``, or by
``out1`` for :func:`merge`); the reference computes in that type and returns that type.
float64 is the ground truth. Arrays of any strides are read in place, never modified.

Errors: a wrong rank or mismatched shape is a ``ValueError``, a wrong dtype or a
non-array a ``TypeError``; the message starts with the argument's name. Everything the
reference itself rejects (a bad scale, pattern parameter, non-finite input, overflowing
score, bad LSE) is a ``ValueError`` with the reference's message.
"""

from . import _ringdil
from ._pattern import as_pattern

__all__ = ["attention", "attention_backward", "merge", "key_runs", "key_counts", "mask"]


def attention(q, k, v, *, pattern=None, causal=False, scale=None, key_lengths=None, documents=None):
    """Self-attention of ``q`` over ``k``, ``v`` under ``pattern``: ``(out, lse)``.

    ``out[b, i, h] = sigma_h * sum_j c_ij exp(s_ij - lse[b, h, i]) v[b, j, h]`` with
    ``s_ij = scale * q_i . k_j`` and ``c_ij`` the pattern's key multiplicity after
    causality and key padding (``docs/semantics.md`` sections 3-5). A row with no key
    has ``out = 0`` and ``lse = -inf``.

    * ``pattern``: ``None`` (dense), a :class:`ringdil.Pattern`, a dict with the fields
      of a pattern file, or the path of a ``.json`` / ``.toml`` pattern file.
    * ``causal``: OR-ed with the pattern's own ``causal`` (as ``ringdil attend --causal``).
    * ``scale``: the softmax scale; ``None`` takes the pattern's ``scale``, else
      ``1 / sqrt(head_dim)``.
    * ``key_lengths``: one integer per batch row; keys ``j >= key_lengths[b]`` are masked
      (key padding; the padded query rows still attend to the valid keys).
    * ``documents``: packed sequences (``docs/semantics.md`` section 16), flash-attention's
      ``cu_seqlens`` per batch row (``[[0, 5, 9, seq], ...]``: each list starts at 0, never
      decreases, ends at ``seq``; equal neighbours are empty documents) or one flat list over
      the batch rows laid end to end (a boundary at every ``b * seq``). A query sees only
      the keys of its own document, and the pattern sees each document as its own
      sequence (LongNet segments start at the document's start).
    * ``k`` and ``v`` may have fewer heads than ``q`` (grouped-query attention, section
      15): query head ``h`` reads K/V head ``h // (heads // kv_heads)``.
    """
    return _ringdil.attention(q, k, v, as_pattern(pattern), causal, scale, key_lengths, documents)


def attention_backward(q, k, v, d_out, *, pattern=None, causal=False, scale=None, key_lengths=None,
                       documents=None):
    """The gradients ``(dq, dk, dv)`` of :func:`attention`'s ``out`` for the upstream
    gradient ``d_out`` (shaped like ``out``), with the same keyword arguments.

    The forward pass is recomputed; the backward is the reference's flash-attention-2
    style pass (``docs/semantics.md`` section 10), the exact gradient of the forward.
    Under grouped-query attention ``dk`` and ``dv`` are shaped like ``k`` and ``v``: each
    K/V head's gradient is the sum over its group of query heads.
    """
    return _ringdil.attention_backward(q, k, v, d_out, as_pattern(pattern), causal, scale, key_lengths, documents)


def merge(out1, lse1, out2, lse2):
    """Merge two partial results over disjoint key sets into the result over their
    union (the online-softmax merge, ``docs/semantics.md`` section 6): ``(out, lse)``.

    ``lse = logaddexp(lse1, lse2)`` and ``out = exp(lse1 - lse) out1 + exp(lse2 - lse) out2``,
    per row; two empty rows (``lse = -inf``) merge to ``(0, -inf)``. ``out2`` must be
    shaped like ``out1`` and both LSEs ``[batch, heads, seq]`` of it. New arrays are
    returned; the inputs are not modified.
    """
    return _ringdil.merge(out1, lse1, out2, lse2)


def key_runs(pattern, query, head, heads, seq_len):
    """The keys that ``query`` of ``head`` (of ``heads``) sees under ``pattern`` in a
    sequence of ``seq_len`` tokens, as a list of ``range`` objects (global positions,
    before causality and key padding). Ranges may overlap: a key in ``m`` ranges enters
    the softmax ``m`` times (LongNet's softmax-denominator combine)."""
    return _ringdil.key_runs(as_pattern(pattern), query, head, heads, seq_len)


def key_counts(pattern, seq_len, head, heads, causal=False):
    """The key multiplicities of ``head``: a ``uint32`` array ``[seq_len, seq_len]`` whose
    entry ``[i, j]`` is how often query ``i`` counts key ``j`` (``causal`` OR-ed with the
    pattern's own)."""
    return _ringdil.key_counts(as_pattern(pattern), seq_len, head, heads, causal)


def mask(pattern, seq_len, head, heads, causal=False):
    """The boolean mask of ``head``: ``[seq_len (query), seq_len (key)]``, ``True`` where
    query ``i`` may see key ``j``. It drops the multiplicities; see :func:`key_counts`."""
    return key_counts(pattern, seq_len, head, heads, causal) > 0

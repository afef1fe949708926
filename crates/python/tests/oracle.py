"""An independent NumPy attention, written from docs/semantics.md, never from ringdil.

Patterns are dense key-multiplicity matrices ``c[h, i, j]`` (section 3) built here from
the documented rules; attention and its gradient are the textbook formulas on them. The
tests compare ringdil.reference against these, so a test fails when either the Rust code
or the docs' rules change without the other.
"""

import math

import numpy as np

# ---- key multiplicities c[h, i, j], sections 5, 7, 8 ---------------------------------


def dense_counts(n, heads):
    return np.ones((heads, n, n), dtype=np.int64)


def head_offset(rule, h, heads, r, branch):
    """Section 7.3: the offset of head ``h`` in a branch of dilation ``r``."""
    if rule == "head_mod":
        return h % r
    if rule == "head_block":
        return h // math.ceil(heads / r)
    return rule[branch]  # a fixed offset per branch


def branch_counts(n, h, heads, w, r, offset):
    """Sections 7.1, 7.2, 7.4: one branch (w, r), head offset ``offset``."""
    c = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        a = w * (i // w)
        e = min(a + w, n)
        if (i - a) % r != offset:
            continue  # the query is not kept: it gets nothing from this branch
        for j in range(a + offset, e, r):
            c[i, j] += 1
    return c


def dilated_counts(n, heads, segments, dilations, offsets="head_mod"):
    """Section 7.5 (softmax-denominator combine): the multiset union of the branches."""
    c = np.zeros((heads, n, n), dtype=np.int64)
    for h in range(heads):
        for b, (w, r) in enumerate(zip(segments, dilations)):
            c[h] += branch_counts(n, h, heads, w, r, head_offset(offsets, h, heads, r, b))
    return c


def head_groups(n, heads, segments, dilations, offsets):
    """Section 7.6: head group g uses branch g only; returns (counts, output scale)."""
    groups = len(segments)
    sizes = [heads // groups + (1 if g < heads % groups else 0) for g in range(groups)]
    c = np.zeros((heads, n, n), dtype=np.int64)
    h = 0
    for g, size in enumerate(sizes):
        for _ in range(size):
            c[h] = branch_counts(n, h, heads, segments[g], dilations[g], offsets[g])
            h += 1
    return c, 1.0 / groups


def window_counts(n, heads, left, right):
    """Section 8: keys max(0, i - left) ..= min(n - 1, i + right)."""
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    c = ((j >= i - left) & (j <= i + right)).astype(np.int64)
    return np.broadcast_to(c, (heads, n, n)).copy()


def per_batch(counts, batch, causal=False, key_lengths=None):
    """Section 5: causality and key padding on top of the pattern: c[b, h, i, j]."""
    heads, n, _ = counts.shape
    c = np.broadcast_to(counts, (batch, heads, n, n)).copy()
    if causal:
        c *= np.tril(np.ones((n, n), dtype=np.int64))
    if key_lengths is not None:
        for b, length in enumerate(key_lengths):
            c[b, :, :, length:] = 0
    return c


# ---- attention with multiplicities, sections 2-4, 10 ----------------------------------


def _scores(q, k, scale):
    """s[b, h, i, j] = scale * q_i . k_j, in float64."""
    return scale * np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64))


def attention(q, k, v, c, scale=None, head_scale=1.0):
    """(out [b, n, h, dv], lse [b, h, n]) of attention with multiplicities c[b, h, i, j]."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = _scores(q, k, scale)
    with np.errstate(divide="ignore"):
        logc = np.log(c.astype(np.float64))  # log 0 = -inf removes a key
    z = s + logc
    m = z.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    total = np.exp(z - m).sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(total))
    p = np.where(empty, 0.0, np.exp(z - np.where(empty, 0.0, lse)))
    out = head_scale * np.einsum("bhij,bjhd->bihd", p, v.astype(np.float64))
    return out, lse[..., 0]


def attention_backward(q, k, v, d_out, c, scale=None, head_scale=1.0):
    """(dq, dk, dv) by the chain rule through softmax, from the same p as the forward."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, lse = attention(q, k, v, c, scale, head_scale)
    s = _scores(q, k, scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(c > 0, c * np.exp(s - lse[..., None]), 0.0)
    g = head_scale * d_out.astype(np.float64)  # gradient w.r.t. the normalised output
    o = out / head_scale
    dv = np.einsum("bhij,bihd->bjhd", p, g)
    dp = np.einsum("bihd,bjhd->bhij", g, v.astype(np.float64))
    delta = np.einsum("bihd,bihd->bhi", g, o)[..., None]
    ds = p * (dp - delta)
    dq = scale * np.einsum("bhij,bjhd->bihd", ds, k.astype(np.float64))
    dk = scale * np.einsum("bhij,bihd->bjhd", ds, q.astype(np.float64))
    return dq, dk, dv

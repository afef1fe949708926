"""ringdil.reference.attention_backward against an independent NumPy backward
(oracle.attention_backward) and against central finite differences of the forward."""

import numpy as np
import pytest
from conftest import qkv

import oracle
from ringdil import reference as rd

CASES = [
    # (shape, pattern dict or None, causal, key_lengths, oracle counts [h, i, j] and head scale)
    ((2, 9, 2, 4), None, True, None, lambda n, h: (oracle.dense_counts(n, h), 1.0)),
    ((2, 10, 2, 3), None, False, [10, 0], lambda n, h: (oracle.dense_counts(n, h), 1.0)),
    ((1, 13, 4, 4), {"kind": "dilated", "segment_lengths": [4, 8], "dilation_rates": [1, 2]}, True, None,
     lambda n, h: (oracle.dilated_counts(n, h, [4, 8], [1, 2]), 1.0)),
    ((2, 15, 3, 4), {"kind": "dilated", "segment_lengths": [6, 12], "dilation_rates": [2, 4],
                     "offsets": "head_block"}, False, [15, 7],
     lambda n, h: (oracle.dilated_counts(n, h, [6, 12], [2, 4], "head_block"), 1.0)),
    ((1, 16, 5, 4), {"kind": "dilated", "segment_lengths": [4, 8, 16], "dilation_rates": [1, 2, 4],
                     "offsets": [0, 1, 2], "combine": "head_groups"}, False, None,
     lambda n, h: oracle.head_groups(n, h, [4, 8, 16], [1, 2, 4], [0, 1, 2])),
]


@pytest.mark.parametrize("shape,pattern,causal,key_lengths,counts", CASES)
def test_against_numpy_backward(shape, pattern, causal, key_lengths, counts):
    b, n, h, _ = shape
    q, k, v = qkv(shape, seed=n)
    d_out = np.random.default_rng(1).standard_normal(shape)
    base, head_scale = counts(n, h)
    c = oracle.per_batch(base, b, causal=causal, key_lengths=key_lengths)
    got = rd.attention_backward(q, k, v, d_out, pattern=pattern, causal=causal, key_lengths=key_lengths)
    want = oracle.attention_backward(q, k, v, d_out, c, head_scale=head_scale)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.shape == w.shape and g.dtype == np.float64, name
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-11, err_msg=name)


def test_against_finite_differences():
    """d/dx sum(out * d_out) by central differences, for every entry of q, k and v."""
    pattern = {"kind": "dilated", "segment_lengths": [3, 6], "dilation_rates": [1, 2]}
    kwargs = dict(pattern=pattern, causal=True, scale=0.8)
    q, k, v = qkv((1, 7, 2, 3), seed=3)
    d_out = np.random.default_rng(4).standard_normal(q.shape)
    grads = rd.attention_backward(q, k, v, d_out, **kwargs)
    eps = 1e-6
    for index, (name, x) in enumerate((("q", q), ("k", k), ("v", v))):
        numeric = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            args = [q, k, v]
            loss = []
            for sign in (1, -1):
                shifted = x.copy()
                shifted[i] += sign * eps
                args[index] = shifted
                loss.append(np.sum(rd.attention(*args, **kwargs)[0] * d_out))
            numeric[i] = (loss[0] - loss[1]) / (2 * eps)
        np.testing.assert_allclose(grads[index], numeric, rtol=1e-6, atol=1e-8, err_msg=name)


def test_float32():
    q, k, v = qkv((1, 12, 2, 8), seed=5, dtype=np.float32)
    d_out = np.random.default_rng(6).standard_normal(q.shape).astype(np.float32)
    got = rd.attention_backward(q, k, v, d_out, causal=True)
    want = oracle.attention_backward(q, k, v, d_out, oracle.per_batch(oracle.dense_counts(12, 2), 1, causal=True))
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

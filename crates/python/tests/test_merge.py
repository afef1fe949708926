"""ringdil.reference.merge: partials over disjoint key sets merge to attention over
their union."""

import numpy as np
import pytest
from conftest import qkv

import oracle
from ringdil import reference as rd

TOL = dict(rtol=1e-12, atol=1e-13)


def test_oracle_partials_merge_to_full_attention():
    b, n, h = 2, 11, 3
    q, k, v = qkv((b, n, h, 4), seed=1)
    full = oracle.per_batch(oracle.dense_counts(n, h), b, causal=True)
    first = full.copy()
    first[..., 5:] = 0  # keys 0..5
    second = full - first  # keys 5..n: disjoint, union is all
    out1, lse1 = oracle.attention(q, k, v, first)
    out2, lse2 = oracle.attention(q, k, v, second)
    out, lse = rd.merge(out1, lse1, out2, lse2)
    want_out, want_lse = oracle.attention(q, k, v, full)
    np.testing.assert_allclose(out, want_out, **TOL)
    np.testing.assert_allclose(lse, want_lse, **TOL)


@pytest.mark.parametrize("dtype,tol", [(np.float64, TOL), (np.float32, dict(rtol=1e-5, atol=1e-6))])
def test_ringdil_partials_merge_to_ringdil_attention(dtype, tol):
    """Even and odd keys (expression patterns) merged == dense attention."""
    q, k, v = qkv((1, 9, 2, 4), seed=2, dtype=dtype)
    even = rd.attention(q, k, v, pattern={"kind": "expr", "mask": "k % 2 == 0"})
    odd = rd.attention(q, k, v, pattern={"kind": "expr", "mask": "k % 2 == 1"})
    out, lse = rd.merge(*even, *odd)
    assert out.dtype == dtype and lse.dtype == dtype
    want_out, want_lse = rd.attention(q, k, v)
    np.testing.assert_allclose(out, want_out, **tol)
    np.testing.assert_allclose(lse, want_lse, **tol)


def test_empty_rows_are_the_identity_and_inputs_are_untouched():
    q, k, v = qkv((1, 6, 2, 3), seed=3)
    out1, lse1 = rd.attention(q, k, v, causal=True)
    empty_out, empty_lse = np.zeros_like(out1), np.full_like(lse1, -np.inf)
    copies = [x.copy() for x in (out1, lse1, empty_out, empty_lse)]
    out, lse = rd.merge(out1, lse1, empty_out, empty_lse)
    np.testing.assert_array_equal(out, out1)
    np.testing.assert_array_equal(lse, lse1)
    for before, after in zip(copies, (out1, lse1, empty_out, empty_lse)):
        np.testing.assert_array_equal(before, after)
    out, lse = rd.merge(empty_out, empty_lse, empty_out, empty_lse)
    assert np.all(out == 0.0) and np.all(np.isneginf(lse))

"""ringdil.reference.attention against the independent NumPy oracle (oracle.py)."""

import numpy as np
import pytest
from conftest import qkv

import oracle
import ringdil
from ringdil import reference as rd

TOL64 = dict(rtol=1e-11, atol=1e-12)


def check(q, k, v, counts, tol=TOL64, head_scale=1.0, scale=None, **kwargs):
    out, lse = rd.attention(q, k, v, scale=scale, **kwargs)
    want_out, want_lse = oracle.attention(q, k, v, counts, scale=scale, head_scale=head_scale)
    assert out.shape == want_out.shape and lse.shape == want_lse.shape
    np.testing.assert_allclose(out, want_out, **tol)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], **tol)
    return out, lse


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 7, 16])
def test_dense(causal, n):
    q, k, v = qkv((2, n, 3, 5), seed=n)
    c = oracle.per_batch(oracle.dense_counts(n, 3), 2, causal=causal)
    out, lse = check(q, k, v, c, causal=causal)
    assert out.dtype == np.float64 and lse.dtype == np.float64


def test_value_head_dim_differs():
    q, k, v = qkv((1, 9, 2, 4), seed=1, dv=7)
    out, _ = check(q, k, v, oracle.per_batch(oracle.dense_counts(9, 2), 1))
    assert out.shape == (1, 9, 2, 7)


@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_with_empty_rows(causal):
    n, lengths = 10, [10, 4, 0]
    q, k, v = qkv((3, n, 2, 4), seed=2)
    c = oracle.per_batch(oracle.dense_counts(n, 2), 3, causal=causal, key_lengths=lengths)
    out, lse = check(q, k, v, c, causal=causal, key_lengths=np.array(lengths))
    assert np.all(np.isneginf(lse[2])) and np.all(out[2] == 0.0)  # L_b = 0: every row empty


DILATED = [
    # (seq, heads, segments, dilations, offsets): non-divisible lengths, w > n, H < r.
    (13, 4, [4, 8], [1, 2], "head_mod"),
    (21, 3, [5, 16, 32], [1, 2, 4], "head_mod"),
    (19, 3, [6, 12], [2, 4], "head_block"),
    (17, 2, [4, 8], [2, 4], [1, 3]),
    (11, 2, [3, 30], [3, 8], "head_block"),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,heads,segments,dilations,offsets", DILATED)
def test_longnet_dilated(n, heads, segments, dilations, offsets, causal):
    q, k, v = qkv((2, n, heads, 4), seed=n)
    pattern = {"kind": "dilated", "segment_lengths": segments, "dilation_rates": dilations, "offsets": offsets}
    counts = oracle.dilated_counts(n, heads, segments, dilations, offsets)
    check(q, k, v, oracle.per_batch(counts, 2, causal=causal), pattern=pattern, causal=causal)


def test_longnet_dilated_with_key_padding():
    n, heads, lengths = 23, 4, [23, 9]
    q, k, v = qkv((2, n, heads, 3), seed=5)
    pattern = {"kind": "dilated", "segment_lengths": [4, 8, 16], "dilation_rates": [1, 2, 4]}
    counts = oracle.dilated_counts(n, heads, [4, 8, 16], [1, 2, 4])
    c = oracle.per_batch(counts, 2, causal=True, key_lengths=lengths)
    check(q, k, v, c, pattern=pattern, causal=True, key_lengths=lengths)


def test_head_groups():
    n, heads, segs, dils, offs = 21, 5, [4, 8, 16], [1, 2, 4], [0, 1, 2]
    q, k, v = qkv((1, n, heads, 4), seed=6)
    pattern = {"kind": "dilated", "segment_lengths": segs, "dilation_rates": dils, "offsets": offs,
               "combine": "head_groups"}
    counts, head_scale = oracle.head_groups(n, heads, segs, dils, offs)
    check(q, k, v, oracle.per_batch(counts, 1), pattern=pattern, head_scale=head_scale)


def test_sliding_window():
    q, k, v = qkv((1, 12, 2, 4), seed=7)
    counts = oracle.window_counts(12, 2, left=3, right=2)
    check(q, k, v, oracle.per_batch(counts, 1), pattern={"kind": "sliding_window", "left": 3, "right": 2})


def test_pattern_file_json_carries_causal(patterns_dir):
    """docs/patterns/longnet.json: w = 16, 32, 64 over 70 tokens, causal from the file."""
    n, heads = 70, 4
    q, k, v = qkv((1, n, heads, 4), seed=8)
    counts = oracle.dilated_counts(n, heads, [16, 32, 64], [1, 2, 4])
    c = oracle.per_batch(counts, 1, causal=True)
    check(q, k, v, c, pattern=patterns_dir / "longnet.json")
    check(q, k, v, c, pattern=str(patterns_dir / "longnet.json"), causal=False)  # OR-ed, not overridden


def test_pattern_object_from_toml(patterns_dir):
    """torchscale.toml: head-block offsets, segments longer than the sequence."""
    pattern = ringdil.Pattern.from_file(patterns_dir / "torchscale.toml")
    assert pattern.causal
    n, heads = 40, 8
    q, k, v = qkv((1, n, heads, 4), seed=9)
    counts = oracle.dilated_counts(n, heads, [2048, 4096, 8192, 16384], [1, 2, 4, 8], "head_block")
    check(q, k, v, oracle.per_batch(counts, 1, causal=True), pattern=pattern)


def test_scale_argument_and_file_scale():
    q, k, v = qkv((1, 8, 2, 4), seed=10)
    c = oracle.per_batch(oracle.dense_counts(8, 2), 1)
    check(q, k, v, c, scale=0.3)
    pattern = ringdil.Pattern.from_dict({"kind": "dense", "scale": 0.7})
    assert pattern.scale == 0.7
    out, _ = rd.attention(q, k, v, pattern=pattern)
    np.testing.assert_allclose(out, oracle.attention(q, k, v, c, scale=0.7)[0], **TOL64)
    out, _ = rd.attention(q, k, v, pattern=pattern, scale=0.3)  # the argument wins
    np.testing.assert_allclose(out, oracle.attention(q, k, v, c, scale=0.3)[0], **TOL64)


def test_float32_in_float32_out():
    q, k, v = qkv((2, 11, 2, 8), seed=11, dtype=np.float32)
    pattern = {"kind": "dilated", "segment_lengths": [4, 8], "dilation_rates": [1, 2]}
    counts = oracle.dilated_counts(11, 2, [4, 8], [1, 2])
    out, lse = check(q, k, v, oracle.per_batch(counts, 2, causal=True), tol=dict(rtol=1e-4, atol=1e-5),
                     pattern=pattern, causal=True)
    assert out.dtype == np.float32 and lse.dtype == np.float32


def test_strided_views_are_read_in_place():
    q, k, v = qkv((1, 3, 10, 4), seed=12)  # [b, h, n, d] memory, viewed as [b, n, h, d]
    q, k, v = (x.transpose(0, 2, 1, 3)[:, ::-1] for x in (q, k, v))
    assert not q.flags.c_contiguous
    before = q.copy()
    check(q, k, v, oracle.per_batch(oracle.dense_counts(10, 3), 1, causal=True), causal=True)
    np.testing.assert_array_equal(q, before)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_equals_replicated_kv(kv_heads):
    # 4 query heads over kv_heads K/V heads: query head h reads K/V head h // (4 // kv_heads)
    # (docs/semantics.md, section 15); the oracle runs multi-head on K/V repeated per group.
    q, _, _ = qkv((2, 11, 4, 5), seed=3)
    _, k, v = qkv((2, 11, kv_heads, 5), seed=4)
    group = 4 // kv_heads
    k_rep, v_rep = (np.repeat(x, group, axis=2) for x in (k, v))
    c = oracle.per_batch(oracle.dilated_counts(11, 4, [4, 8], [1, 2]), 2, causal=True)
    pattern = {"kind": "dilated", "segment_lengths": [4, 8], "dilation_rates": [1, 2]}
    out, lse = rd.attention(q, k, v, pattern=pattern, causal=True)
    want_out, want_lse = oracle.attention(q, k_rep, v_rep, c)
    np.testing.assert_allclose(out, want_out, **TOL64)
    np.testing.assert_allclose(lse, want_lse, **TOL64)
    d_out = np.random.default_rng(5).standard_normal(out.shape)
    dq, dk, dv = rd.attention_backward(q, k, v, d_out, pattern=pattern, causal=True)
    want = oracle.attention_backward(q, k_rep, v_rep, d_out, c)
    np.testing.assert_allclose(dq, want[0], **TOL64)
    # dK, dV of a K/V head: the sum over its group of query heads.
    for got, rep in ((dk, want[1]), (dv, want[2])):
        assert got.shape == k.shape
        np.testing.assert_allclose(got, rep.reshape(2, 11, kv_heads, group, 5).sum(axis=3), **TOL64)


@pytest.mark.parametrize("flat", [False, True])
def test_packed_documents_equal_attention_per_document(flat):
    # Row 0 holds documents [0, 4), [4, 4) (empty), [4, 5) (one token), [5, 12); row 1
    # [0, 7), [7, 12). Each document is attended as its own sequence (section 16): the
    # oracle runs on each slice alone, with the LongNet segments starting at its start.
    n, rows = 12, [[0, 4, 4, 5, 12], [0, 7, 12]]
    q, k, v = qkv((2, n, 2, 3), seed=9)
    segments, dilations = [2, 4], [1, 2]
    pattern = {"kind": "dilated", "segment_lengths": segments, "dilation_rates": dilations}
    documents = [0, 4, 4, 5, 12, 19, 24] if flat else rows
    out, lse = rd.attention(q, k, v, pattern=pattern, causal=True, documents=documents)
    d_out = np.random.default_rng(10).standard_normal(out.shape)
    dq, dk, dv = rd.attention_backward(q, k, v, d_out, pattern=pattern, causal=True, documents=documents)
    for b, bounds in enumerate(rows):
        for s, e in zip(bounds, bounds[1:]):
            if s == e:
                continue
            part = [x[b : b + 1, s:e] for x in (q, k, v, d_out)]
            c = oracle.per_batch(oracle.dilated_counts(e - s, 2, segments, dilations), 1, causal=True)
            want_out, want_lse = oracle.attention(*part[:3], c)
            np.testing.assert_allclose(out[b : b + 1, s:e], want_out, **TOL64)
            np.testing.assert_allclose(lse[b : b + 1, :, s:e], want_lse, **TOL64)
            for got, want in zip((dq, dk, dv), oracle.attention_backward(*part, c)):
                np.testing.assert_allclose(got[b : b + 1, s:e], want, **TOL64)

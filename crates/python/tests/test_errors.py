"""Bad arguments raise ValueError / TypeError whose message names the argument."""

import re

import numpy as np
import pytest
from conftest import qkv

from ringdil import reference as rd

SHAPE = (2, 6, 3, 4)


def raises(kind, message, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` raises ``kind`` with a message starting with ``message``."""
    with pytest.raises(kind, match="^" + re.escape(message)):
        fn(*args, **kwargs)


def test_rank():
    q, k, v = qkv(SHAPE)
    raises(ValueError, "k: expected 4 dimensions [batch, seq, heads, head_dim], got 3",
           rd.attention, q, k[0], v)
    raises(ValueError, "q: expected 4 dimensions [batch, seq, heads, head_dim], got 5",
           rd.attention, q[None], k, v)


def test_dtype():
    q, k, v = qkv(SHAPE)
    raises(TypeError, "q: expected dtype float64 or float32, got float16", rd.attention, q.astype(np.float16), k, v)
    raises(TypeError, "k: expected dtype float64 (the dtype of q), got float32",
           rd.attention, q, k.astype(np.float32), v)
    raises(TypeError, "v: expected dtype float32 (the dtype of q), got int64",
           rd.attention, q.astype(np.float32), k.astype(np.float32), v.astype(np.int64))
    raises(TypeError, "q: expected a numpy.ndarray, got list", rd.attention, q.tolist(), k, v)


def test_mismatched_shapes():
    q, k, v = qkv(SHAPE)
    # k and v with fewer heads than q are grouped-query attention: v must follow k, and
    # the K/V heads must divide the query heads.
    raises(ValueError, "v: expected shape [2, 6, 2, 4], got [2, 6, 3, 4]", rd.attention, q, k[:, :, :2], v)
    raises(ValueError, "grouped-query attention: 2 K/V heads do not divide 3 query heads", rd.attention, q, k[:, :, :2],
           v[:, :, :2])
    raises(ValueError, "v: expected shape", rd.attention, q, k, v[:, :5])
    raises(ValueError, "k (self-attention: same seq as q)", rd.attention, q, k[:, :5], v[:, :5])
    raises(ValueError, "d_out: expected shape", rd.attention_backward, q, k, v, np.zeros((2, 6, 3, 3)))
    raises(ValueError, "d_out: expected 4 dimensions", rd.attention_backward, q, k, v, np.zeros((2, 6, 3)))


def test_bad_documents():
    q, k, v = qkv(SHAPE)
    raises(ValueError, "documents: expected one list of boundaries per batch row", rd.attention, q, k, v,
           documents="0,6")
    with pytest.raises(ValueError, match="document"):
        rd.attention(q, k, v, documents=[[0, 6], [0, 4, 3, 6]])  # decreasing
    with pytest.raises(ValueError, match="document"):
        rd.attention(q, k, v, documents=[[0, 5], [0, 6]])  # row 0 ends before seq


def test_bad_patterns(tmp_path):
    q, k, v = qkv(SHAPE)
    raises(ValueError, "pattern: dict: field `combine`: unknown variant `avg`", rd.attention, q, k, v,
           pattern={"kind": "dilated", "segment_lengths": [4], "dilation_rates": [1], "combine": "avg"})
    raises(ValueError, "pattern: dict: missing string field `kind`", rd.attention, q, k, v, pattern={})
    raises(ValueError, "pattern: `dilation_rates` has 1 entries but `segment_lengths` has 2",
           rd.attention, q, k, v, pattern={"kind": "dilated", "segment_lengths": [4, 8], "dilation_rates": [1]})
    raises(ValueError, "branch 0: dilation_rate 4 exceeds segment_length 2", rd.attention, q, k, v,
           pattern={"kind": "dilated", "segment_lengths": [2], "dilation_rates": [4]})
    raises(TypeError, "pattern: expected None, a dict", rd.attention, q, k, v, pattern=3)
    with pytest.raises(FileNotFoundError, match="^pattern: "):
        rd.attention(q, k, v, pattern=tmp_path / "missing.json")
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "expr"\nmask = "q < k"\nwindow = 3\n')
    raises(ValueError, f"pattern: {bad}: field `window`: unknown field", rd.attention, q, k, v, pattern=bad)


def test_bad_spec_values():
    q, k, v = qkv(SHAPE)
    raises(ValueError, "softmax scale -1 must be finite and positive", rd.attention, q, k, v, scale=-1.0)
    raises(ValueError, "key_lengths: expected shape [2], got [3]", rd.attention, q, k, v, key_lengths=[1, 2, 3])
    raises(ValueError, "key_lengths: entry 1 is -3", rd.attention, q, k, v, key_lengths=[1, -3])
    raises(ValueError, "key padding: batch row 0 has length 7 > seq 6", rd.attention, q, k, v, key_lengths=[7, 1])
    q[1, 2, 0, 3] = np.nan
    raises(ValueError, "q: non-finite value NaN at index [1, 2, 0, 3]", rd.attention, q, k, v)


def test_merge_shapes_and_lse():
    out, lse = rd.attention(*qkv(SHAPE))
    raises(ValueError, "lse1: expected shape [2, 3, 6] ([batch, heads, seq] of out1), got [2, 6, 3]",
           rd.merge, out, lse.transpose(0, 2, 1), out, lse)
    raises(ValueError, "out2: expected shape [2, 6, 3, 4] (the shape of out1), got [2, 5, 3, 4]",
           rd.merge, out, lse, out[:, :5], lse[..., :5])
    raises(TypeError, "lse2: expected dtype float64 (the dtype of out1), got float32",
           rd.merge, out, lse, out, lse.astype(np.float32))
    bad = lse.copy()
    bad[0, 1, 2] = np.inf
    raises(ValueError, "merge: right operand: lse inf at index [0, 1, 2]", rd.merge, out, lse, out, bad)


def test_key_set_arguments():
    raises(ValueError, "query: 5 is out of range 0..5", rd.key_runs, None, 5, 0, 1, 5)
    raises(ValueError, "head: 2 is out of range 0..2", rd.mask, None, 5, 2, 2)
    raises(ValueError, "heads: must be at least 1, got 0", rd.mask, None, 5, 0, 0)

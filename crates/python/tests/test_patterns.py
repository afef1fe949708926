"""Pattern key sets: mask, key_counts and key_runs against the documented rules."""

import numpy as np
import pytest

import oracle
import ringdil
from ringdil import reference as rd


@pytest.mark.parametrize("causal", [False, True])
def test_key_counts_and_mask_of_dilated(causal):
    n, heads = 22, 4
    pattern = {"kind": "dilated", "segment_lengths": [4, 8, 16], "dilation_rates": [1, 2, 4]}
    want = oracle.per_batch(oracle.dilated_counts(n, heads, [4, 8, 16], [1, 2, 4]), 1, causal=causal)[0]
    for h in range(heads):
        counts = rd.key_counts(pattern, n, h, heads, causal=causal)
        assert counts.dtype == np.uint32 and counts.shape == (n, n)
        np.testing.assert_array_equal(counts, want[h])
        mask = rd.mask(pattern, n, h, heads, causal=causal)
        assert mask.dtype == np.bool_
        np.testing.assert_array_equal(mask, want[h] > 0)
    assert want.max() >= 2  # the case exercises multiplicities, not just a boolean mask


def test_dense_mask_and_causal_from_the_file(patterns_dir):
    assert np.all(rd.mask(None, 5, 0, 1))
    np.testing.assert_array_equal(rd.mask(patterns_dir / "dense_causal.json", 5, 0, 1), np.tri(5, dtype=bool))


def test_key_runs_of_the_documented_example(patterns_dir):
    """docs/patterns/local_global.json: |q - k| <= 64 or k < 4 or q < 4."""
    runs = rd.key_runs(patterns_dir / "local_global.json", 100, 0, 1, 200)
    assert runs == [range(0, 4), range(36, 165)]


def test_key_runs_of_a_dilated_branch():
    """w = 8, r = 2, head 1 keeps the odd positions of its segment: query 11 sees 9, 11, 13, 15."""
    pattern = ringdil.Pattern.from_dict({"kind": "dilated", "segment_lengths": [8], "dilation_rates": [2]})
    runs = rd.key_runs(pattern, 11, 1, 2, 20)
    assert [list(r) for r in runs] == [[9, 11, 13, 15]]
    assert rd.key_runs(pattern, 10, 1, 2, 20) == []  # query 10 is not kept by head 1


def test_pattern_properties_and_repr():
    pattern = ringdil.Pattern.from_dict({"kind": "sliding_window", "left": 2, "causal": True})
    assert pattern.causal and pattern.scale is None
    assert "SlidingWindow" in repr(pattern)

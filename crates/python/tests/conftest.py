"""Shared helpers: random inputs and the repository's example pattern files."""

from pathlib import Path

import numpy as np
import pytest

# docs/patterns/ of the checkout this package was built from.
PATTERNS = Path(__file__).resolve().parents[3] / "docs" / "patterns"


def qkv(shape, seed=0, dtype=np.float64, dv=None):
    """Random q, k, v of ``shape`` = [batch, seq, heads, head_dim] (v's last dim ``dv``)."""
    rng = np.random.default_rng(seed)
    b, n, h, d = shape
    q, k = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    v = rng.standard_normal((b, n, h, dv or d)).astype(dtype)
    return q, k, v


@pytest.fixture
def patterns_dir():
    assert PATTERNS.is_dir(), f"example pattern files not found at {PATTERNS}"
    return PATTERNS

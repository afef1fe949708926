"""ringdil.ring: the layouts against independent transcriptions of their rules, and
shard / unshard as exact inverses on NumPy arrays (PyTorch tensors where installed)."""

import numpy as np
import pytest

from ringdil import ring


def even(n, parts):
    """Part sizes of an even split, the first ``n mod parts`` one larger."""
    return [n // parts + (1 if p < n % parts else 0) for p in range(parts)]


def contiguous(n, ranks):
    starts = np.cumsum([0] + even(n, ranks))
    return [list(range(starts[r], starts[r + 1])) for r in range(ranks)]


def zigzag(n, ranks):
    starts = np.cumsum([0] + even(n, 2 * ranks))
    chunk = [list(range(starts[c], starts[c + 1])) for c in range(2 * ranks)]
    return [chunk[i] + chunk[2 * ranks - 1 - i] for i in range(ranks)]


def striped(n, ranks):
    return [[t for t in range(n) if t % ranks == r] for r in range(ranks)]


@pytest.mark.parametrize("name,rule", [("contiguous", contiguous), ("zigzag", zigzag), ("striped", striped)])
def test_layouts_follow_their_rules(name, rule):
    for n in (1, 2, 7, 64, 100, 1001):
        for ranks in range(1, 9):
            got = [t.tolist() for t in ring.tokens(n, ranks, name)]
            assert got == rule(n, ranks), (name, n, ranks)


def test_boundaries_and_orders_are_taken_as_given():
    assert [t.tolist() for t in ring.tokens(10, 3, {"boundaries": [0, 3, 3, 10]})] == [[0, 1, 2], [], list(range(3, 10))]
    order = [4, 0, 3, 1, 2]
    got = ring.tokens(5, 2, {"order": order, "boundaries": [0, 2, 5]})
    assert [t.tolist() for t in got] == [[4, 0], [3, 1, 2]]


def test_balanced_split_gives_every_rank_its_causal_share():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n, ranks, batch = int(rng.integers(1, 400)), int(rng.integers(1, 6)), int(rng.integers(1, 3))
        rows = []
        for _ in range(batch):
            cuts = np.sort(rng.integers(0, n + 1, size=int(rng.integers(0, 8))))
            rows.append([0, *cuts.tolist(), n])
        # Position i of a document starting at s sees i - s + 1 keys; summed over the rows.
        work = np.zeros(n, dtype=np.int64)
        for row in rows:
            for i in range(n):
                start = max(c for c in row if c <= i)
                work[i] += i - start + 1
        parts = ring.tokens(n, ranks, "balanced", documents=rows, batch=batch)
        assert np.array_equal(np.concatenate(parts), np.arange(n)), "contiguous runs in order"
        share, largest = work.sum() / ranks, work.max(initial=0)
        for p in parts:
            assert abs(work[p].sum() - share) <= largest, (rows, ranks)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped", {"boundaries": [0, 0, 5, 37]}])
def test_unshard_inverts_shard(layout):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 37, 3, 4))
    ranks = 3
    for dim in (0, 1, 3) if layout != {"boundaries": [0, 0, 5, 37]} else (1,):
        parts = [ring.shard(x, r, ranks, layout, dim=dim) for r in range(ranks)]
        assert sum(p.shape[dim] for p in parts) == x.shape[dim]
        np.testing.assert_array_equal(ring.unshard(parts, layout, dim=dim), x)
    got = ring.shard(x, 1, ranks, layout)
    np.testing.assert_array_equal(got, x[:, ring.tokens(37, ranks, layout)[1]])


def test_balanced_shards_use_the_documents():
    x = np.arange(2 * 20).reshape(2, 20, 1, 1)
    docs = [[0, 15, 20], [0, 20]]
    parts = [ring.shard(x, r, 2, "balanced", documents=docs) for r in range(2)]
    np.testing.assert_array_equal(ring.unshard(parts, "balanced", documents=docs), x)


def test_torch_tensors_shard_and_unshard_alike():
    torch = pytest.importorskip("torch", reason="skipped: PyTorch is not installed")
    x = torch.randn(2, 50, 3, 8)
    parts = [ring.shard(x, r, 4, "zigzag") for r in range(4)]
    assert torch.equal(ring.unshard(parts, "zigzag"), x)


def test_bad_layouts_are_errors_naming_the_argument():
    with pytest.raises(ValueError, match="^ranks: must be at least 1, got 0"):
        ring.tokens(10, 0, "zigzag")
    with pytest.raises(ValueError, match='^layout: unknown layout "spiral"'):
        ring.tokens(10, 2, "spiral")
    with pytest.raises(ValueError, match='^layout: "balanced" splits packed documents'):
        ring.tokens(10, 2, "balanced")
    with pytest.raises(ValueError, match="^layout: "):
        ring.tokens(10, 2, {"boundaries": [0, 4, 9]})
    with pytest.raises(ValueError, match="^layout: expected"):
        ring.tokens(10, 2, 3)
    with pytest.raises(ValueError, match="^documents: "):
        ring.tokens(10, 2, "balanced", documents=[[0, 5, 4, 10]])
    with pytest.raises(ValueError, match=r"^rank: 2 is not in 0..2"):
        ring.shard(np.zeros((1, 4)), 2, 2)
    with pytest.raises(ValueError, match="^parts: rank 0's part has 3 rows along dim 1; its layout gives 2"):
        ring.unshard([np.zeros((1, 3)), np.zeros((1, 1))], "contiguous")

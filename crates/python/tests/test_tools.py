"""pattern_stats, verify and plan (the CLI's pattern show / verify / plan reports) against
NumPy transcriptions of what they report, and against the CLI binary when one is built."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import oracle
import ringdil
from ringdil import reference as rd

RATIO3 = {"kind": "dilated", "segment_lengths": [32, 96, 288], "dilation_rates": [1, 3, 9],
          "offsets": "head_mod", "combine": "softmax_denominator", "causal": True}
LONGNET2 = {"kind": "dilated", "segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4]}
BAD = {**RATIO3, "dilation_rates": [1, 3, 500]}


# ---- pattern_stats ------------------------------------------------------------------


def counts_of(pattern, n, heads):
    """c[h, i, j] of the test patterns from the documented rules (oracle.py), causality applied."""
    kind = pattern["kind"]
    if kind == "dense":
        c = oracle.dense_counts(n, heads)
    elif kind == "sliding_window":
        c = oracle.window_counts(n, heads, pattern["left"], pattern.get("right", 0))
    else:
        c = oracle.dilated_counts(n, heads, pattern["segment_lengths"], pattern["dilation_rates"],
                                  pattern.get("offsets", "head_mod"))
    return oracle.per_batch(c, 1, causal=pattern.get("causal", False))[0]


def stats_of(pattern, n, heads, head, layers):
    """pattern show's numbers, transcribed from its documentation (crates/cli/src/pattern_view.rs)."""
    c = counts_of(pattern, n, heads)
    per_query = (c[head] > 0).sum(axis=1)
    layer = (c > 0).any(axis=0).astype(np.int64)  # one layer: union over heads
    samples = min(64, n)
    sampled = [n - 1] if samples == 1 else [s * (n - 1) // (samples - 1) for s in range(samples)]
    field = layer[sampled]
    rf = []
    for depth in range(1, layers + 1):
        if depth > 1:
            field = ((field @ layer) > 0).astype(np.int64)
        counts = field.sum(axis=1)
        rf.append([depth, int(counts[-1]), int(counts.min())])
    return {
        "seq": n, "heads": heads, "head": head,
        "density": per_query.sum() / n**2,
        "keys_min": int(per_query.min()), "keys_mean": per_query.sum() / n, "keys_max": int(per_query.max()),
        "max_multiplicity": int(c[head].max()), "empty_queries": int((per_query == 0).sum()),
        "receptive_field": rf,
    }


@pytest.mark.parametrize("pattern, n, heads, head, layers", [
    (RATIO3, 300, 4, 0, 6),
    (RATIO3, 256, 4, 3, 6),
    (LONGNET2, 50, 3, 1, 4),
    ({"kind": "sliding_window", "left": 5, "right": 0, "causal": True}, 70, 2, 0, 5),
    ({"kind": "sliding_window", "left": 3, "right": 2}, 9, 1, 0, 3),
    ({"kind": "dense", "causal": True}, 1, 1, 0, 2),
])
def test_pattern_stats_against_numpy(pattern, n, heads, head, layers):
    got = ringdil.pattern_stats(pattern, n, heads=heads, head=head, layers=layers)
    want = stats_of(pattern, n, heads, head, layers)
    assert got.keys() == want.keys()
    for key in want:
        if isinstance(want[key], float):
            assert got[key] == pytest.approx(want[key], rel=1e-12), key
        else:
            assert got[key] == want[key], key


def test_pattern_stats_density_is_the_masks():
    """The density and keys per query agree with ringdil.reference.mask's array."""
    for head in range(4):
        mask = rd.mask(RATIO3, 300, head, 4)
        s = ringdil.pattern_stats(RATIO3, 300, heads=4, head=head, layers=1)
        assert s["density"] == pytest.approx(mask.mean(), rel=1e-12)
        assert s["keys_max"] == mask.sum(axis=1).max()
        assert s["max_multiplicity"] == rd.key_counts(RATIO3, 300, head, 4).max() == 3


def test_pattern_stats_receptive_field_stops_at_the_short_last_segment():
    """The notebook's observation: at 300 tokens the last query is in [288, 300), and no
    number of layers reaches past it; at 256 one segment of 288 covers the sequence."""
    s = ringdil.pattern_stats(RATIO3, 300, heads=4, layers=6)
    assert [f[1] for f in s["receptive_field"]] == [300 - 288] * 6
    assert ringdil.pattern_stats(RATIO3, 256, heads=4, layers=6)["receptive_field"][-1][1] > 250


def test_pattern_stats_takes_every_pattern_form(patterns_dir):
    path = patterns_dir / "longnet.json"
    by_path = ringdil.pattern_stats(path, 64)
    assert by_path == ringdil.pattern_stats(str(path), 64) == ringdil.pattern_stats(ringdil.Pattern.from_file(path), 64)
    assert by_path == ringdil.pattern_stats(json.loads(path.read_text()), 64)
    assert ringdil.pattern_stats(None, 10, heads=1)["density"] == 1.0


def test_pattern_stats_errors():
    with pytest.raises(ValueError, match=r"^pattern: .*dilation_rate 500 exceeds segment_length 288"):
        ringdil.pattern_stats(BAD, 64)
    with pytest.raises(ValueError, match=r"^head: 4 is out of range 0\.\.4"):
        ringdil.pattern_stats(RATIO3, 64, heads=4, head=4)
    with pytest.raises(ValueError, match=r"^seq_len: must be at least 1"):
        ringdil.pattern_stats(RATIO3, 0)
    with pytest.raises(ValueError, match=r"^heads: must be at least 1"):
        ringdil.pattern_stats(RATIO3, 8, heads=0)
    with pytest.raises(TypeError, match=r"^pattern: expected None, a dict"):
        ringdil.pattern_stats(3, 8)


# ---- verify -------------------------------------------------------------------------

CHECKS = {"masked": 1e-11, "merge": 1e-11, "backward": 1e-6, "f32": 1e-5, "ring": 1e-11}


def test_verify_with_a_pattern():
    report = ringdil.verify(RATIO3, cases=3, seed=1)
    assert report["seed"] == 1 and report["cases"] == 3 and report["failed"] == 0
    rows = report["rows"]
    assert len(rows) == 3 * len(CHECKS)
    assert [r["case"] for r in rows] == [c for c in range(3) for _ in CHECKS]
    assert [r["check"] for r in rows] == list(CHECKS) * 3
    name = json.dumps(RATIO3, separators=(",", ":"))
    for r in rows:
        assert r["bound"] == CHECKS[r["check"]]
        assert r["pass"] and 0 <= r["rel_err"] <= r["bound"]
        assert r["pattern"] == name and r["causal"]  # every case runs the given (causal) pattern
        b, n, h, d = r["shape"]
        assert 1 <= b <= 2 and 1 <= n <= 97 and 1 <= h <= 4 and d in (1, 4, 8, 16)
        assert (r["how"] is not None) == (r["check"] == "ring")


def test_verify_is_deterministic_and_draws_patterns():
    a = ringdil.verify(cases=4, seed=7)
    assert a == ringdil.verify(cases=4, seed=7)
    b = ringdil.verify(cases=4, seed=8)
    assert [r["shape"] for r in a["rows"]] != [r["shape"] for r in b["rows"]]
    assert a["failed"] == 0 and len({r["pattern"] for r in a["rows"]}) > 1
    assert ringdil.verify(RATIO3, cases=0) == {"seed": 2026, "cases": 0, "rows": [], "failed": 0}


def test_verify_names_a_pattern_file_by_its_path(patterns_dir):
    path = patterns_dir / "sliding_window.json"
    rows = ringdil.verify(path, cases=1, seed=3)["rows"]
    assert {r["pattern"] for r in rows} == {str(path)}


def test_verify_rejects_a_bad_pattern():
    with pytest.raises(ValueError, match=r"^pattern: .*dilation_rate 500 exceeds segment_length 288"):
        ringdil.verify(BAD, cases=1)


# ---- plan ---------------------------------------------------------------------------


@pytest.mark.parametrize("seq, ranks, layout, heads, kv_heads", [
    (64, 4, "zigzag", 4, 4), (100, 3, "contiguous", 8, 2), (37, 5, "striped", 2, 1),
])
def test_plan_of_the_ring_against_its_volume(seq, ranks, layout, heads, kv_heads):
    """The dense ring: at each of ranks - 1 steps every rank passes on the K and V rows
    it holds (its own chunk's size, one step later its neighbour's)."""
    d, eb = 16, 2
    cost = ringdil.plan(None, seq, ranks, schedule="ring", layout=layout, heads=heads, kv_heads=kv_heads,
                        head_dim=d, element_bytes=eb)
    tokens = [len(t) for t in ringdil.ring.tokens(seq, ranks, layout)]
    assert cost["tokens_per_rank"] == tokens
    row = kv_heads * d * 2 * eb  # bytes of one token's K and V
    want = [[tokens[(r - step) % ranks] * row for r in range(ranks)] for step in range(ranks - 1)]
    assert [s for s in cost["forward"] if any(s)] == want
    assert cost["dense_ring_forward"] == sum(map(sum, cost["forward"])) == (ranks - 1) * seq * row
    assert cost["schedule"] == "ring" and cost["ranks"] == ranks and cost["seq"] == seq
    assert (cost["heads"], cost["kv_heads"], cost["head_dim"], cost["element_bytes"]) == (heads, kv_heads, d, eb)


def test_plan_costs_v_rows_at_value_dim():
    """MLA's 192 / 128 on the dense ring: each step passes a token's K row at 192 and its
    V row at 128; the backward's dK and dV travel at the same widths as K and V."""
    seq, ranks, eb = 90, 3, 2
    mla = ringdil.plan(None, seq, ranks, schedule="ring", heads=2, head_dim=192, value_dim=128, element_bytes=eb)
    even = ringdil.plan(None, seq, ranks, schedule="ring", heads=2, head_dim=160, element_bytes=eb)
    assert (mla["head_dim"], mla["value_dim"], even["value_dim"]) == (192, 128, 160)
    assert sum(map(sum, mla["forward"])) == (ranks - 1) * seq * 2 * (192 + 128) * eb == mla["dense_ring_forward"]
    assert sum(map(sum, mla["backward"])) == sum(map(sum, even["backward"])) > 0


def test_plan_of_a_local_pattern_sends_less(patterns_dir):
    window = {"kind": "sliding_window", "left": 16, "right": 0, "causal": True}
    pattern = ringdil.plan(window, 4096, 4, layout="contiguous")
    dense = ringdil.plan(window, 4096, 4, schedule="ring", layout="contiguous")
    assert pattern["schedule"] == "pattern"
    assert pattern["dense_ring_forward"] == dense["dense_ring_forward"] == sum(map(sum, dense["forward"]))
    # each rank needs only the 16 rows before its chunk: K and V, 8 heads of 128, bf16
    assert sum(map(sum, pattern["forward"])) == 3 * 16 * 8 * 128 * 2 * 2
    assert ringdil.plan(patterns_dir / "torchscale.toml", 16384, 8)["forward"]
    # Ulysses x ring on 4 ranks with 2 heads: groups of 2, a ring of 2 steps between them
    hybrid = ringdil.plan(window, 4096, 4, schedule="hybrid", heads=2, layout="contiguous")
    assert hybrid["schedule"] == "hybrid" and sum(map(sum, hybrid["forward"])) > 0


def test_plan_errors():
    with pytest.raises(ValueError, match=r'^schedule: unknown schedule "pattern_ring"; expected one of "ring", '
                                         r'"pattern", "all-gather", "ulysses", "hybrid"'):
        ringdil.plan(None, 64, 4, schedule="pattern_ring")
    with pytest.raises(ValueError, match=r"^ranks: must be at least 1"):
        ringdil.plan(None, 64, 0)
    with pytest.raises(ValueError, match=r"^kv_heads: "):
        ringdil.plan(None, 64, 4, heads=8, kv_heads=3)
    with pytest.raises(ValueError, match=r"^value_dim: must be at least 1, got 0"):
        ringdil.plan(None, 64, 4, value_dim=0)
    with pytest.raises(ValueError, match=r"^layout: "):
        ringdil.plan(None, 64, 4, layout="balanced")
    with pytest.raises(ValueError, match=r"^layout: "):
        ringdil.plan(None, 64, 4, layout={"boundaries": [0, 10, 64]})
    with pytest.raises(ValueError, match=r"^pattern: .*dilation_rate 500 exceeds segment_length 288"):
        ringdil.plan(BAD, 1024, 4)


# ---- the same reports as the CLI, when a CLI is built -------------------------------


def cli_binary():
    if os.environ.get("RINGDIL_BIN"):
        return pathlib.Path(os.environ["RINGDIL_BIN"])
    root = pathlib.Path(__file__).resolve().parents[3]
    for profile in ("release", "debug"):
        candidate = root / "target" / profile / "ringdil"
        if candidate.exists():
            return candidate
    return None


@pytest.mark.skipif(cli_binary() is None, reason="no ringdil CLI built (target/*/ringdil or $RINGDIL_BIN)")
def test_the_same_reports_as_the_cli(patterns_dir):
    def cli(*args):
        return json.loads(subprocess.run([str(cli_binary()), *map(str, args)], check=True, capture_output=True,
                                         text=True).stdout)

    path = patterns_dir / "longnet.json"
    assert ringdil.pattern_stats(path, 96, heads=4, head=1, layers=3) == cli(
        "pattern", "show", path, "--seq", 96, "--heads", 4, "--head", 1, "--layers", 3, "--json")
    assert ringdil.verify(path, cases=2, seed=5) == cli("verify", "--pattern", path, "--cases", 2, "--seed", 5, "--json")
    assert ringdil.plan(path, 1000, 3, layout="striped", heads=4) == cli(
        "plan", path, "--seq", 1000, "--ranks", 3, "--layout", "striped", "--heads", 4, "--json")["cost"]

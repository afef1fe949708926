"""ringdil.nn, the drop-in modules for the PyTorch LongNet port, against ringdil.reference.

The modules' attention is compared with the reference's dilated pattern of the same
combine (head groups: ``combine = "head_groups"`` with offsets ``g mod r_g``, section 7.6;
LongNet: the softmax-denominator combine with offsets ``h mod r``), forward and backward,
within the bfloat16 bound of test_torch.py. The multi-head module is compared with the
same computation in float64 (projections, reference attention, layer norm, output
projection) from its own weights.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="skipped: PyTorch is not installed")

from ringdil import reference  # noqa: E402
from ringdil.nn import DilatedAttention, MultiheadDilatedAttention, head_group_bounds  # noqa: E402

from test_torch import BOUND, draw, host, rel  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA device")

SEGMENTS, RATES = [64, 128, 256], [1, 2, 4]


def reference_pattern(combine):
    if combine == "head_groups":
        return {"kind": "dilated", "segment_lengths": SEGMENTS, "dilation_rates": RATES,
                "offsets": [g % r for g, r in enumerate(RATES)], "combine": "head_groups"}
    return {"kind": "dilated", "segment_lengths": SEGMENTS, "dilation_rates": RATES, "offsets": "head_mod"}


def test_head_groups_split_the_heads_contiguously_larger_first():
    assert head_group_bounds(8, 3) == [(0, 3), (3, 6), (6, 8)]
    assert head_group_bounds(3, 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="^heads: 2 heads for 3 branches"):
        head_group_bounds(2, 3)


def test_constructor_errors_name_the_argument():
    with pytest.raises(ValueError, match="^dilation_rates: 1 rates for 2 segment_lengths"):
        DilatedAttention([8, 16], [1])
    with pytest.raises(ValueError, match="^attention_dropout: 0.1"):
        DilatedAttention([8], [1], attention_dropout=0.1)
    with pytest.raises(ValueError, match="^combine: "):
        DilatedAttention([8], [1], combine="mean")
    with pytest.raises(ValueError, match="^embed_dim: 100 is not divisible by num_heads = 3"):
        MultiheadDilatedAttention(100, 3, [1], [8])
    with pytest.raises(ValueError, match="^num_kv_heads: 3 does not divide num_heads = 4"):
        MultiheadDilatedAttention(64, 4, [1], [8], num_kv_heads=3)
    with pytest.raises(ValueError, match="^num_kv_heads: 0 does not divide num_heads = 4"):
        MultiheadDilatedAttention(64, 4, [1], [8], num_kv_heads=0)


def test_grouped_query_projections_have_the_kv_heads():
    m = MultiheadDilatedAttention(64, 4, [1], [8], num_kv_heads=2)
    assert (m.q_proj.out_features, m.k_proj.out_features, m.v_proj.out_features) == (64, 32, 32)
    assert MultiheadDilatedAttention(64, 4, [1], [8]).k_proj.out_features == 64


@cuda
@pytest.mark.parametrize("combine", ["head_groups", "softmax_denominator"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dilated_attention_is_the_reference_pattern(combine, causal):
    b, n, h, d = 2, 300, 7, 64  # 7 heads over 3 branches: groups of 3, 2, 2
    q, k, v, d_out = (draw((b, n, h, d), torch.bfloat16, seed) for seed in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = DilatedAttention(SEGMENTS, RATES, combine=combine)(q, k, v, causal=causal)
    out.backward(d_out)
    pattern = reference_pattern(combine)
    ref, _ = reference.attention(host(q), host(k), host(v), pattern=pattern, causal=causal)
    grads = reference.attention_backward(host(q), host(k), host(v), host(d_out), pattern=pattern, causal=causal)
    assert rel(host(out), ref) < BOUND[torch.bfloat16]
    for g, r, what in zip((q.grad, k.grad, v.grad), grads, ("dq", "dk", "dv")):
        assert rel(host(g), r) < BOUND[torch.bfloat16], what


@cuda
@pytest.mark.parametrize("combine", ["head_groups", "softmax_denominator"])
@pytest.mark.parametrize("kv_heads", [None, 2], ids=["mha", "gqa"])
def test_multihead_module_is_its_float64_computation(combine, kv_heads):
    torch.manual_seed(0)
    b, n, e, h = 2, 256, 256, 4
    hk = h if kv_heads is None else kv_heads
    m = MultiheadDilatedAttention(e, h, RATES, SEGMENTS, device="cuda", dtype=torch.bfloat16, combine=combine,
                                  num_kv_heads=kv_heads)
    x = draw((b, n, e), torch.bfloat16, 7)
    y, none = m(x, x, x, is_causal=True)
    assert none is None and y.shape == (b, n, e) and y.dtype == torch.bfloat16

    def linear(proj, t):
        return t @ proj.weight.double().T + proj.bias.double()

    x64 = x.double()
    q = host(linear(m.q_proj, x64).reshape(b, n, h, e // h))
    k, v = (host(linear(p, x64).reshape(b, n, hk, e // h)) for p in (m.k_proj, m.v_proj))
    a, _ = reference.attention(q, k, v, pattern=reference_pattern(combine), causal=True)
    a = torch.from_numpy(a).cuda().reshape(b, n, e)
    a = torch.nn.functional.layer_norm(a, (e,), m.norm.weight.double(), m.norm.bias.double(), m.norm.eps)
    expected = linear(m.out_proj, a)
    # Four bf16 roundings of intermediate results (q, k, v; attention; norm; output) on top
    # of the kernels' error: twice the single-call bound.
    assert rel(host(y), host(expected)) < 2 * BOUND[torch.bfloat16]

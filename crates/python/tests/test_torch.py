"""ringdil.attention on PyTorch CUDA tensors, against ringdil.reference in float64.

Inputs are drawn in float32, rounded to the 16-bit dtype on the GPU, and the reference
runs on exactly those rounded values in float64, so the error measured is the kernels'
(f32 accumulation, 16-bit P in P V) plus the one rounding of the results to 16 bits.
Bounds: ``||x - ref|| / ||ref||`` below 1e-2 (bfloat16) and 1e-3 (float16), the bounds of
``gpu_check`` for the same kernels; the rounding of a result adds at most 2^-9 (bf16) or
2^-12 (f16) relative per element, well inside them.

Without PyTorch the module is skipped; without a CUDA device every GPU test says
"skipped: no CUDA device" (the argument checks that need no GPU still run).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="skipped: PyTorch is not installed")

import ringdil  # noqa: E402
from ringdil import reference  # noqa: E402

from conftest import PATTERNS  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA device")

BOUND = {torch.bfloat16: 1e-2, torch.float16: 1e-3}
DTYPES = [torch.bfloat16, torch.float16]


def rel(x, ref):
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert np.all(np.isfinite(x)), "non-finite values in the GPU result"
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def draw(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device="cuda", dtype=dtype)


def host(x):
    return x.detach().double().cpu().numpy()


# (name, keyword arguments, [batch, seq, heads, kv_heads, head_dim(, v's head dim)]): every
# pattern kind the kernels evaluate, lengths no tile size divides, key padding, packed
# documents (cut by the kernels, or with other patterns as mask tables), grouped-query attention, every head dim and MLA's v head dim (128 at 192).
CASES = [
    ("dense", {}, [2, 300, 4, 4, 64]),
    ("causal", {"causal": True}, [1, 333, 4, 4, 128]),
    ("sliding window", {"pattern": {"kind": "sliding_window", "left": 50, "right": 10}, "causal": True},
     [2, 257, 2, 2, 64]),
    ("block sparse", {"pattern": {"kind": "block_sparse", "block": 64, "local_radius": 1, "global_tokens": 1}},
     [1, 300, 2, 2, 128]),
    ("longnet", {"pattern": {"kind": "dilated", "segment_lengths": [64, 128], "dilation_rates": [1, 2]}},
     [2, 300, 4, 4, 64]),
    ("longnet file, causal", {"pattern": str(PATTERNS / "longnet.json")}, [1, 201, 4, 4, 128]),
    ("key padding", {"causal": True, "key_lengths": [250, 300]}, [2, 300, 2, 2, 64]),
    ("documents", {"causal": True, "documents": [[0, 100, 101, 101, 300], [0, 300]]}, [2, 300, 2, 2, 64]),
    ("flat documents, window", {"pattern": {"kind": "sliding_window", "left": 40}, "documents": [0, 77, 300, 600]},
     [2, 300, 2, 2, 128]),
    ("packed longnet, rows packed alike",
     {"pattern": {"kind": "dilated", "segment_lengths": [64, 128], "dilation_rates": [1, 2]}, "causal": True,
      "documents": [[0, 100, 101, 101, 300], [0, 100, 101, 101, 300]]}, [2, 300, 4, 2, 64]),
    ("packed longnet, rows packed differently (launches per row)",
     {"pattern": {"kind": "dilated", "segment_lengths": [64, 128], "dilation_rates": [1, 2]}, "causal": True,
      "documents": [[0, 100, 101, 101, 300], [0, 30, 300]]}, [2, 300, 4, 2, 64]),
    ("packed longnet with key padding, rows packed differently",
     {"pattern": {"kind": "dilated", "segment_lengths": [64, 128], "dilation_rates": [1, 2]},
      "documents": [[0, 100, 101, 101, 300], [0, 30, 300]], "key_lengths": [280, 190]}, [2, 300, 4, 2, 64]),
    ("packed expression, flat list (a mask table)",
     {"pattern": {"kind": "expr", "mask": "q / 16 == k / 16 || (q - k) % 5 == 0"}, "documents": [0, 77, 300]},
     [1, 300, 2, 2, 128]),
    ("gqa longnet causal", {"pattern": {"kind": "dilated", "segment_lengths": [64, 256], "dilation_rates": [1, 4]},
                            "causal": True}, [1, 300, 8, 2, 128]),
    ("mqa", {"causal": True}, [2, 200, 4, 1, 64]),
    ("head groups (the PyTorch ports' combine), causal",
     {"pattern": {"kind": "dilated", "segment_lengths": [32, 64, 128], "dilation_rates": [1, 2, 4],
                  "offsets": [0, 1, 2], "combine": "head_groups"}, "causal": True}, [2, 300, 5, 5, 64]),
    ("head groups, gqa", {"pattern": {"kind": "dilated", "segment_lengths": [64, 256], "dilation_rates": [2, 4],
                                      "offsets": [0, 1], "combine": "head_groups"}}, [1, 300, 6, 3, 128]),
    ("d=96 causal", {"causal": True}, [1, 200, 4, 4, 96]),
    ("d=192 longnet", {"pattern": {"kind": "dilated", "segment_lengths": [64, 128], "dilation_rates": [1, 2]}},
     [1, 250, 2, 2, 192]),
    ("d=256 gqa causal", {"causal": True}, [1, 200, 4, 2, 256]),
    ("d=192 d_v=128 gqa causal", {"causal": True, "key_lengths": [300, 211]}, [2, 300, 4, 2, 192, 128]),
    ("d=192 d_v=128 longnet", {"pattern": {"kind": "dilated", "segment_lengths": [64, 128], "dilation_rates": [1, 2]}},
     [1, 250, 2, 2, 192, 128]),
    ("expression: band and global keys, per head",
     {"pattern": {"kind": "expr", "mask": "abs(q - k) <= 20 + 10 * h || k < 3"}, "causal": True},
     [1, 300, 4, 2, 64]),
    ("expression: blocks and a lattice", {"pattern": {"kind": "expr", "mask": "q / 64 == k / 64 || (q - k) % 7 == 0"}},
     [2, 257, 2, 2, 128]),
    ("dilated_expr, rotating offsets, union (mask table)",
     {"pattern": {"kind": "dilated_expr", "combine": "union", "branches": [
         {"segment": "32", "dilation": "1", "offset": "0"}, {"segment": "96", "dilation": "3", "offset": "h + s"},
         {"segment": "192", "dilation": "4", "offset": "h + 2 * s"}]}, "causal": True},
     [1, 300, 4, 2, 64]),
    ("dilated_expr, rotating offsets, softmax denominator (a mask table per branch)",
     {"pattern": str(PATTERNS / "rotating_offsets.toml")}, [2, 200, 4, 4, 128]),
]


@cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name,kwargs,dims", CASES, ids=[c[0] for c in CASES])
def test_forward_and_gradients_match_the_f64_reference(name, kwargs, dims, dtype):
    b, n, h, kvh, d = dims[:5]
    dv = dims[5] if len(dims) > 5 else d
    q, k, v, d_out = (draw(s, dtype, seed) for seed, s in enumerate([(b, n, h, d), (b, n, kvh, d), (b, n, kvh, dv),
                                                                        (b, n, h, dv)]))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, lse = ringdil.attention(q, k, v, return_lse=True, **kwargs)
    out.backward(d_out)
    assert out.dtype == dtype and q.grad.dtype == dtype and out.shape == (b, n, h, dv)
    assert (k.grad.shape, v.grad.shape) == (k.shape, v.shape)
    ref_out, ref_lse = reference.attention(host(q), host(k), host(v), **kwargs)
    ref_grads = reference.attention_backward(host(q), host(k), host(v), host(d_out), **kwargs)
    bound = BOUND[dtype]
    assert rel(host(out), ref_out) < bound
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(host(lse)), finite)  # -inf exactly where a row has no key
    assert np.max(np.abs(host(lse)[finite] - ref_lse[finite])) < 1e-3
    for grad, ref, what in zip((q.grad, k.grad, v.grad), ref_grads, ("dq", "dk", "dv")):
        assert rel(host(grad), ref) < bound, what


@cuda
@pytest.mark.parametrize("causal", [False, True], ids=["dense", "causal"])
def test_benchmark_shape_matches_sdpa(causal):
    """n = 4096, 16 heads of d = 128, bf16 (a gpu_bench shape): ringdil's output and
    gradients against float32 SDPA on the same rounded inputs, next to bf16 SDPA's own
    error against that float32 result."""
    F = torch.nn.functional
    shape = (1, 4096, 16, 128)
    q, k, v, d_out = (draw(shape, torch.bfloat16, seed) for seed in range(4))
    errors = {}
    for impl in ("ringdil", "sdpa"):
        xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        if impl == "ringdil":
            out = ringdil.attention(*xs, causal=causal)
        else:
            out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in xs), is_causal=causal).transpose(1, 2)
        out.backward(d_out)
        errors[impl] = (out, *(x.grad for x in xs))
    x32 = [x.detach().float().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in x32), is_causal=causal).transpose(1, 2)
    ref.backward(d_out.float())
    refs = (ref, *(x.grad for x in x32))
    for ours, sdpa, r, what in zip(errors["ringdil"], errors["sdpa"], refs, ("out", "dq", "dk", "dv")):
        e_ours, e_sdpa = rel(host(ours), host(r)), rel(host(sdpa), host(r))
        print(f"{what}: ringdil {e_ours:.2e}, sdpa bf16 {e_sdpa:.2e}")
        assert e_ours < BOUND[torch.bfloat16], what


@cuda
def test_current_stream_orders_the_kernels():
    """Launched on a side stream: the result must be the one computed after the inputs were
    written on that stream (no host synchronisation in between)."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        q, k, v = (torch.randn(2, 512, 4, 64, device="cuda").to(torch.bfloat16) for _ in range(3))
        out = ringdil.attention(q, k, v, causal=True)
        again = ringdil.attention(q, k, v, causal=True)
    s.synchronize()
    assert torch.equal(out, again)
    ref, _ = reference.attention(host(q), host(k), host(v), causal=True)
    assert rel(host(out), ref) < BOUND[torch.bfloat16]


@cuda
def test_views_off_a_16_byte_boundary_give_the_aligned_result():
    """Contiguous views that start one element into their storage (2 bytes off the 16-byte
    words the kernels load): inputs and the upstream gradient are copied, and the output,
    dK and dV equal those of the same values in aligned tensors bit for bit (dQ is summed
    by atomic adds in any order, so it is compared with a bound)."""
    shape = (1, 200, 2, 64)
    n = int(np.prod(shape))

    def shifted(x):
        base = torch.empty(n + 1, device="cuda", dtype=x.dtype)
        view = base[1:].view(shape)
        view.copy_(x)
        assert view.is_contiguous() and view.data_ptr() % 16 != 0
        return view

    q, k, v, d_out = (draw(shape, torch.bfloat16, seed) for seed in range(4))
    results = []
    for make in (lambda x: x.clone(), shifted):
        leaves = [make(x).requires_grad_() for x in (q, k, v)]
        out = ringdil.attention(*leaves, causal=True)
        out.backward(make(d_out))
        results.append([out.detach()] + [x.grad for x in leaves])
    (out, dq, dk, dv), (out2, dq2, dk2, dv2) = results
    assert torch.equal(out, out2) and torch.equal(dk, dk2) and torch.equal(dv, dv2)
    assert rel(host(dq2), host(dq)) < 1e-3


def test_cpu_tensors_are_refused_naming_the_argument():
    q = torch.zeros(1, 8, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^q: ringdil.attention runs on CUDA tensors"):
        ringdil.attention(q, q, q)
    with pytest.raises(TypeError, match=r"^k: expected a torch.Tensor, got ndarray"):
        ringdil.attention(q, np.zeros((1, 8, 1, 64)), q)


@cuda
def test_bad_arguments_are_errors_naming_them():
    q = torch.zeros(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"^q: dtype must be torch.bfloat16 or torch.float16, got torch.float32"):
        ringdil.attention(q.float(), q, q)
    with pytest.raises(TypeError, match=r"^v: dtype torch.float16 differs from q's torch.bfloat16"):
        ringdil.attention(q, q, q.half())
    with pytest.raises(ValueError, match=r"^k: expected 4 dimensions"):
        ringdil.attention(q, q[0], q)
    with pytest.raises(ValueError, match=r"^v: shape \(1, 64, 1, 64\) differs from k's \(1, 64, 2, 64\)"):
        ringdil.attention(q, q, q[:, :, :1])
    with pytest.raises(ValueError, match="head_dim 64 with value head_dim 32 has no GPU kernel; v's head dim may "
                                         "differ from q's only as d = 192 with d_v = 128"):
        ringdil.attention(q, q, q[..., :32])
    with pytest.raises(ValueError, match=r"^k: shape \(1, 32, 2, 64\) does not match q's"):
        ringdil.attention(q, q[:, :32], q[:, :32])
    with pytest.raises(ValueError, match="kv_heads = 2 does not divide heads = 3"):
        ringdil.attention(torch.zeros(1, 64, 3, 64, device="cuda", dtype=torch.bfloat16), q, q)
    with pytest.raises(ValueError, match="head_dim 32"):
        x = torch.zeros(1, 64, 2, 32, device="cuda", dtype=torch.bfloat16)
        ringdil.attention(x, x, x)
    with pytest.raises(ValueError, match=r"^pattern: "):
        ringdil.attention(q, q, q, pattern={"kind": "dilated", "segment_lengths": [8], "dilation_rates": [1, 2]})
    with pytest.raises(ValueError, match="segment"):
        ringdil.attention(q, q, q, pattern={"kind": "dilated", "segment_lengths": [0], "dilation_rates": [1]})
    with pytest.raises(ValueError, match="key padding: batch row 0 has length 65 > seq 64"):
        ringdil.attention(q, q, q, key_lengths=[65])
    with pytest.raises(ValueError, match="documents: boundaries of batch row 0: boundary 2 is 30, smaller than boundary 1 = 40"):
        ringdil.attention(q, q, q, documents=[[0, 40, 30, 64]])
    with pytest.raises(ValueError, match=r"batch row 1 has boundaries \[0, 50, 64\] but row 0 has \[0, 40, 64\]"):
        x = torch.zeros(2, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
        blocks = {"kind": "block_sparse", "block": 16, "local_radius": 1}
        ringdil.attention(x, x, x, pattern=blocks, documents=[[0, 40, 64], [0, 50, 64]])
    with pytest.raises(ValueError, match="softmax scale NaN must be finite and positive"):
        ringdil.attention(q, q, q, scale=float("nan"))

"""``ringdil.ring_attention``: argument errors (wherever PyTorch is installed) and, on a
machine with two or more CUDA devices, the whole check of ``torchrun_ring.py`` under
``torchrun --nproc-per-node 2`` (ring vs ``ringdil.attention`` on the whole sequence,
forward and backward, every schedule). Set ``RINGDIL_RING_LOG`` to keep its log."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="skipped: PyTorch is not installed")

import ringdil  # noqa: E402


def test_a_cpu_tensor_is_refused_naming_it():
    x = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q_local: ring_attention runs on CUDA tensors"):
        ringdil.ring_attention(x, x, x)


@pytest.mark.parametrize(
    "degree, error, message",
    [("2", TypeError, "hybrid_degree: expected an int or None, got str"),
     (True, TypeError, "hybrid_degree: expected an int or None, got bool"),
     (0, ValueError, "hybrid_degree: 0 is not a positive number of ranks")],
)
def test_a_bad_hybrid_degree_is_refused_naming_it(degree, error, message):
    x = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(error, match=message):
        ringdil.ring_attention(x, x, x, schedule="hybrid", hybrid_degree=degree)


_Q, _K = (1, 8, 4, 192), (1, 8, 2, 192)


def test_v_local_may_differ_from_k_local_only_in_its_head_dim():
    # MLA: v's last dim apart from q's and k's (d = 192, d_v = 128; which pairs run, the
    # ring's plan checks on the GPU). The shape check comes before any CUDA call or
    # collective, so it is tested here on shapes, without a GPU.
    from ringdil._ring_torch import _check_shapes

    q, k = torch.Size(_Q), torch.Size(_K)
    _check_shapes(q, k, torch.Size([1, 8, 2, 128]))  # MLA, grouped-query: not refused
    _check_shapes(q, k, k)
    _check_shapes(q, q, torch.Size([1, 8, 4, 64]))


@pytest.mark.parametrize("k, v, message", [
    (_K, (2, 8, 2, 128), r"^v_local: shape \(2, 8, 2, 128\) does not match q_local's \(1, 8, 4, 192\) in batch or "
                         r"local rows"),
    (_K, (1, 4, 2, 128), r"^v_local: shape \(1, 4, 2, 128\) does not match q_local's \(1, 8, 4, 192\) in batch or "
                         r"local rows"),
    (_K, (1, 8, 1, 128), r"^v_local: shape \(1, 8, 1, 128\) differs from k_local's \(1, 8, 2, 192\) in batch, "
                         r"local rows or heads"),
    # k's head dim stays q's: only v's may differ.
    ((1, 8, 2, 128), (1, 8, 2, 128), r"^k_local: shape \(1, 8, 2, 128\) does not match q_local's \(1, 8, 4, 192\) "
                                     r"in batch, local rows or head_dim"),
])
def test_other_shapes_of_k_local_and_v_local_are_refused_naming_them(k, v, message):
    from ringdil._ring_torch import _check_shapes

    with pytest.raises(ValueError, match=message):
        _check_shapes(torch.Size(_Q), torch.Size(k), torch.Size(v))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA device")
def test_a_wrong_dtype_is_refused_naming_it():
    x = torch.zeros(1, 8, 2, 64, device="cuda")
    with pytest.raises(TypeError, match="q_local: dtype must be torch.bfloat16 or torch.float16"):
        ringdil.ring_attention(x, x, x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA device")
def test_without_torch_distributed_the_group_is_named():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    x = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="group: torch.distributed is not initialized"):
        ringdil.ring_attention(x, x, x)
    with pytest.raises(ValueError, match="k_local: shape"):
        ringdil.ring_attention(x, x[:, :4], x[:, :4])
    # v may have another head dim than q and k (MLA), not other rows or heads than k.
    v = torch.zeros(1, 8, 2, 32, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="group: torch.distributed is not initialized"):
        ringdil.ring_attention(x, x, v)
    with pytest.raises(ValueError, match="v_local: shape .* in batch or local rows"):
        ringdil.ring_attention(x, x, v[:, :4])
    with pytest.raises(ValueError, match="v_local: shape .* differs from k_local's .* in batch, local rows or heads"):
        ringdil.ring_attention(x, x, v[:, :, :1])


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="skipped: fewer than 2 CUDA devices"
)
def test_ring_attention_under_torchrun_matches_the_whole_sequence():
    script = Path(__file__).with_name("torchrun_ring.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)]
    if os.environ.get("RINGDIL_RING_LOG"):
        cmd += ["--out-md", os.environ["RINGDIL_RING_LOG"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "0 failed" in r.stdout

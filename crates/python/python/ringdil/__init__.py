"""ringdil for Python: long-context attention (LongNet dilated, ring, online softmax).

* :func:`attention`: ringdil's GPU kernels on PyTorch CUDA tensors, differentiable
  (imports PyTorch at its first call; the rest of the package needs only NumPy).
* :mod:`ringdil.reference`: the f64/f32 CPU reference on NumPy arrays, the specification
  every other part of ringdil (ring, GPU kernels) is tested against.
* :func:`ring_attention`: ringdil's NCCL ring inside a ``torch.distributed`` job (one
  rank per GPU, e.g. under ``torchrun``), differentiable.
* :mod:`ringdil.ring`: ring layouts (contiguous, zigzag, striped, work-balanced over
  packed documents) and sharding a sequence onto the ranks and back.
* :class:`Pattern`: the attention patterns of ringdil's pattern files.
* :func:`pattern_stats`, :func:`verify`, :func:`plan`: the CLI's ``pattern show``,
  ``verify`` and ``plan`` reports (their ``--json``), from the same library functions.

See ``docs/python.md``.
"""

from importlib.metadata import PackageNotFoundError, version

from . import reference, ring
from ._ringdil import Pattern
from ._tools import pattern_stats, plan, verify


def attention(q, k, v, *, pattern=None, causal=False, scale=None, key_lengths=None, documents=None,
              return_lse=False):
    """Attention of PyTorch CUDA tensors ``q``, ``k``, ``v`` (``[batch, seq, heads, head_dim]``,
    bfloat16 or float16) on ringdil's GPU kernels, differentiable; the arguments of
    :func:`ringdil.reference.attention`. Full documentation: ``ringdil._torch.attention``."""
    try:
        from ._torch import attention as on_gpu
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ImportError(
            "ringdil.attention needs PyTorch (it runs on CUDA tensors); ringdil.reference computes on "
            "NumPy arrays without it"
        ) from e

    return on_gpu(q, k, v, pattern=pattern, causal=causal, scale=scale, key_lengths=key_lengths,
                  documents=documents, return_lse=return_lse)


def _needs_torch(what):
    """Import ``ringdil.<what>``'s PyTorch half, or say why it cannot run."""
    import importlib

    try:
        return importlib.import_module(f"ringdil.{what}")
    except ModuleNotFoundError as e:
        if e.name not in ("torch", "torch.distributed"):
            raise
        raise ImportError("this part of ringdil runs on PyTorch CUDA tensors and needs PyTorch") from e


def ring_attention(q_local, k_local, v_local, *, layout="zigzag", pattern=None, causal=False, scale=None,
                   documents=None, schedule="ring", seq_len=None, group=None, return_lse=False):
    """This rank's rows of attention over the whole sequence, by ringdil's NCCL ring over the
    ranks of a ``torch.distributed`` group (``torchrun``), differentiable. Full
    documentation: ``ringdil._ring_torch.ring_attention``."""
    return _needs_torch("_ring_torch").ring_attention(
        q_local, k_local, v_local, layout=layout, pattern=pattern, causal=causal, scale=scale, documents=documents,
        schedule=schedule, seq_len=seq_len, group=group, return_lse=return_lse)


try:
    __version__ = version("ringdil")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"

__all__ = ["Pattern", "attention", "pattern_stats", "plan", "reference", "ring", "ring_attention", "verify", "__version__"]

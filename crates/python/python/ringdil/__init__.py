"""ringdil for Python: long-context attention (LongNet dilated, ring, online softmax).

* :func:`attention`: ringdil's GPU kernels on PyTorch CUDA tensors, differentiable
  (imports PyTorch at its first call; the rest of the package needs only NumPy).
* :mod:`ringdil.reference`: the f64/f32 CPU reference on NumPy arrays, the specification
  every other part of ringdil (ring, GPU kernels) is tested against.
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


try:
    __version__ = version("ringdil")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"

__all__ = ["Pattern", "attention", "pattern_stats", "plan", "reference", "ring", "verify", "__version__"]

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
    return _needs_torch("_torch", "ringdil.attention").attention(q, k, v, **_keywords(locals()))


def _keywords(arguments):
    """The keyword arguments of a wrapper below, to forward by name: every keyword of its
    signature reaches the PyTorch half, so the two signatures cannot drift apart unnoticed (a
    test compares them)."""
    return {name: value for name, value in arguments.items() if name not in ("q", "k", "v", "q_local", "k_local", "v_local")}


def _needs_torch(module, caller):
    """Import ``ringdil.<module>``, the PyTorch half of ``caller``, or say why it cannot run."""
    import importlib

    try:
        return importlib.import_module(f"ringdil.{module}")
    except ModuleNotFoundError as e:
        if e.name not in ("torch", "torch.distributed"):
            raise
        raise ImportError(
            f"{caller} needs PyTorch (it runs on CUDA tensors); ringdil.reference computes on NumPy arrays without it"
        ) from e


def ring_attention(q_local, k_local, v_local, *, layout="zigzag", pattern=None, causal=False, scale=None,
                   documents=None, schedule="ring", hybrid_degree=None, seq_len=None, group=None,
                   return_lse=False):
    """This rank's rows of attention over the whole sequence, by ringdil's NCCL ring over the
    ranks of a ``torch.distributed`` group (``torchrun``), differentiable. Full
    documentation: ``ringdil._ring_torch.ring_attention``."""
    return _needs_torch("_ring_torch", "ringdil.ring_attention").ring_attention(
        q_local, k_local, v_local, **_keywords(locals()))


try:
    __version__ = version("ringdil")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"

__all__ = ["Pattern", "attention", "pattern_stats", "plan", "reference", "ring", "ring_attention", "verify", "__version__"]

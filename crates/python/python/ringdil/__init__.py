"""ringdil for Python: long-context attention (LongNet dilated, ring, online softmax).

Step 1 of the PyTorch package (issue 23): the f64/f32 CPU reference on NumPy arrays,
:mod:`ringdil.reference`, and :class:`Pattern`, the attention patterns of ringdil's
pattern files. The numbers come from the Rust crate ``ringdil-reference``, the
specification every other part of ringdil (ring, GPU kernels) is tested against; see
``docs/python.md``.
"""

from importlib.metadata import PackageNotFoundError, version

from . import reference
from ._ringdil import Pattern

try:
    __version__ = version("ringdil")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "unknown"

__all__ = ["Pattern", "reference", "__version__"]

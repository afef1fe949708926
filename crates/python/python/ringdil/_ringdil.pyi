# Types of the native module (src/*.rs); the documented API is ringdil.reference.
import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

class Pattern:
    """An attention pattern built from a pattern file or dict. Immutable."""

    @staticmethod
    def from_dict(fields: dict[str, Any]) -> Pattern: ...
    @staticmethod
    def from_file(path: str | os.PathLike[str]) -> Pattern: ...
    @property
    def causal(self) -> bool: ...
    @property
    def scale(self) -> Optional[float]: ...

Array = npt.NDArray[np.floating[Any]]

def attention(
    q: Array, k: Array, v: Array, pattern: Optional[Pattern], causal: bool, scale: Optional[float],
    key_lengths: Optional[Sequence[int]], documents: Optional[Sequence[Any]],
) -> Tuple[Array, Array]: ...
def attention_backward(
    q: Array, k: Array, v: Array, d_out: Array, pattern: Optional[Pattern], causal: bool,
    scale: Optional[float], key_lengths: Optional[Sequence[int]], documents: Optional[Sequence[Any]],
) -> Tuple[Array, Array, Array]: ...
def merge(out1: Array, lse1: Array, out2: Array, lse2: Array) -> Tuple[Array, Array]: ...
def key_runs(pattern: Optional[Pattern], query: int, head: int, heads: int, seq_len: int) -> list[range]: ...
def key_counts(
    pattern: Optional[Pattern], seq_len: int, head: int, heads: int, causal: bool
) -> npt.NDArray[np.uint32]: ...
def cuda_forward(
    device: int, stream: int, q: int, k: int, v: int, out: int, lse: int, q_dims: Sequence[int], kv_heads: int,
    dtype: str, pattern: Optional[Pattern], causal: bool, scale: Optional[float],
    key_lengths: Optional[Sequence[int]], documents: Optional[Sequence[Any]],
) -> None: ...
def cuda_backward(
    device: int, stream: int, q: int, k: int, v: int, out: int, lse: int, d_out: int, dq: int, dk: int, dv: int,
    q_dims: Sequence[int], kv_heads: int, dtype: str, pattern: Optional[Pattern], causal: bool,
    scale: Optional[float], key_lengths: Optional[Sequence[int]], documents: Optional[Sequence[Any]],
) -> None: ...

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
def pattern_stats(
    pattern: Optional[Pattern], seq_len: int, heads: int, head: int, layers: int
) -> dict[str, Any]: ...
def verify(pattern: Optional[Pattern], name: str, cases: int, seed: int) -> dict[str, Any]: ...
def plan(
    pattern: Optional[Pattern], seq_len: int, ranks: int, schedule: str, layout: Any, heads: int,
    kv_heads: Optional[int], head_dim: int, element_bytes: int,
) -> dict[str, Any]: ...
def layout_tokens(
    seq_len: int, ranks: int, layout: Any, documents: Optional[Sequence[Any]] = None, batch: int = 1
) -> list[list[int]]: ...

# (device, stream, q dims, kv_heads, v's head dim, dtype name, pattern, causal, scale, key_lengths,
# documents)
CallArgs = Tuple[int, int, Sequence[int], int, int, str, Optional[Pattern], bool, Optional[float],
                 Optional[Sequence[int]], Optional[Sequence[Any]]]

def cuda_forward(call: CallArgs, ptrs: Sequence[int]) -> None: ...
def cuda_backward_scratch(call: CallArgs) -> Tuple[int, int, int]: ...
def cuda_backward(call: CallArgs, ptrs: Sequence[int]) -> None: ...

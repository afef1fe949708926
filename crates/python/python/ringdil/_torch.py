"""``ringdil.attention`` on CUDA tensors: ringdil's GPU kernels as a ``torch.autograd.Function``.

The forward and backward are ringdil-cuda's kernels (wgmma on H100/H200, mma.sync on other
GPUs from sm_80), launched on PyTorch's current stream on the tensors' own memory: the
inputs are read in place, every result is allocated by PyTorch's caching allocator, and
nothing synchronises with the host.

What is saved for the backward: q, k, v, the 16-bit output and its f32 log-sum-exp (the
backward's ``delta = rowsum(dO * O)`` is taken from the 16-bit output, as flash-attention
does). The kernels accumulate in f32 and round each result once to the inputs' dtype:
the output, and dK, dV where one launch writes each row, as they store it (no f32 copy
exists); dQ (f32 reductions from every key tile) and the results of patterns with several
launches by one pass after, from f32 sums that PyTorch allocates too. ``gpu_check`` checks
both ways word for word.
"""

import torch

from . import _ringdil
from ._pattern import as_pattern

_DTYPES = (torch.bfloat16, torch.float16)


def _is_tensor(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")


def _tensor(name, x, like=None, *, caller="ringdil.attention", like_name="q", seq="seq"):
    """Check that the tensor ``x`` is a 4-d CUDA tensor of a 16-bit float type (and of
    ``like``'s device and dtype), naming it (``caller`` names the function in the
    messages, ``like_name`` the tensor ``like``, ``seq`` the sequence axis); return it
    contiguous."""
    if x.device.type != "cuda":
        raise ValueError(
            f"{name}: {caller} runs on CUDA tensors, got a tensor on {x.device} "
            "(ringdil.reference computes on the CPU, from NumPy arrays)"
        )
    if like is not None and x.device != like.device:
        raise ValueError(f"{name}: on {x.device}, but {like_name} is on {like.device}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name}: dtype must be torch.bfloat16 or torch.float16, got {x.dtype}")
    if like is not None and x.dtype != like.dtype:
        raise TypeError(f"{name}: dtype {x.dtype} differs from {like_name}'s {like.dtype}")
    if x.dim() != 4:
        raise ValueError(f"{name}: expected 4 dimensions [batch, {seq}, heads, head_dim], got shape {tuple(x.shape)}")
    return _dense(x)


def _dense(x):
    """``x`` contiguous and starting on a 16-byte boundary: the kernels load 16-byte words
    (TMA, cp.async), so a view that starts mid-word (a storage offset that is not a
    multiple of 8 elements) is copied to fresh memory, which PyTorch's allocator aligns."""
    x = x.contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _inputs(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        _is_tensor(name, x)
    q = _tensor("q", q)
    k = _tensor("k", k, q)
    v = _tensor("v", v, q)
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"v: shape {tuple(v.shape)} differs from k's {tuple(k.shape)} in batch, seq or heads")
    b, n, h, d = q.shape
    if k.shape[0] != b or k.shape[1] != n or k.shape[3] != d:
        raise ValueError(
            f"k: shape {tuple(k.shape)} does not match q's {tuple(q.shape)} in batch, seq or head_dim "
            "(self-attention: k and v have q's batch, sequence length and head_dim; their heads may "
            "divide q's)"
        )
    return q, k, v


def _where(q):
    """The device ordinal and PyTorch's current stream there: where the kernels run."""
    return (q.device.index, torch.cuda.current_stream(q.device).cuda_stream)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, pattern, causal, scale, key_lengths, documents):
        b, n, h, d = q.shape
        out = torch.empty((b, n, h, v.shape[3]), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
        ctx.call = (list(q.shape), k.shape[2], v.shape[3], str(q.dtype).removeprefix("torch."), pattern, causal, scale,
                    key_lengths, documents)
        _ringdil.cuda_forward(_where(q) + ctx.call, [x.data_ptr() for x in (q, k, v, out, lse)])
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, _d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        d_out = _dense(d_out.to(q.dtype))
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        # The kernels' f32 sums (dQ always; dK, dV where rows are added into), from
        # PyTorch's allocator like every other buffer of the call.
        lens = _ringdil.cuda_backward_scratch(_where(q) + ctx.call)
        sums = [torch.empty(n, dtype=torch.float32, device=q.device) for n in lens if n]
        ptrs = [x.data_ptr() for x in (q, k, v, out, lse, d_out, dq, dk, dv, *sums)]
        _ringdil.cuda_backward(_where(q) + ctx.call, ptrs + [0] * (12 - len(ptrs)))
        return dq, dk, dv, None, None, None, None, None


def attention(q, k, v, *, pattern=None, causal=False, scale=None, key_lengths=None, documents=None,
              return_lse=False):
    """Attention of ``q`` over ``k``, ``v`` on the GPU, differentiable (``torch.autograd``).

    Tensors are ``[batch, seq, heads, head_dim]`` (flash-attention's layout), CUDA, bfloat16
    or float16, on one device; ``k`` and ``v`` may have fewer heads than ``q``
    (grouped-query attention: query head ``h`` reads K/V head ``h // (heads // kv_heads)``).
    Non-contiguous inputs are copied to contiguous ones first. Head dims: 64, 96, 128, 192
    and 256 (on H100/H200, 96 runs the portable mma.sync kernels; 192 and 256 the
    wgmma forward with the mma.sync backward). ``v`` may have another head dim than ``q``
    and ``k`` where the kernels pair them: 128 with 192 (MLA's), on the mma.sync kernels;
    the output then has ``v``'s head dim.

    The arguments mean what they mean in :func:`ringdil.reference.attention` (the
    specification this function is tested against): ``pattern`` is ``None`` (dense), a
    :class:`ringdil.Pattern`, a dict of pattern-file fields or a pattern file's path, of a
    kind the kernels evaluate (dense, sliding_window, block_sparse, dilated with the
    softmax-denominator combine, and ``expr`` masks, compiled into a kernel module at their
    first use; ``dilated_expr`` as a mask table built on the host at its first use, when
    no key counts twice for a query);
    ``causal`` is OR-ed with the pattern's; ``scale`` defaults to the pattern's, else
    ``1 / sqrt(head_dim)``; ``key_lengths`` masks keys ``j >= key_lengths[b]``;
    ``documents`` packs documents into each row (``cu_seqlens`` per row, or one flat list);
    the pattern applies inside each document. Dense and sliding-window patterns take any
    rows; so does a built-in dilated pattern (one launch per branch over every document);
    every other pattern runs as mask tables of the pattern inside the documents,
    which need one list for every batch row (one row, or rows packed alike: else
    ``ValueError``).

    Returns the output in the inputs' dtype, and with ``return_lse=True`` also the
    natural-log log-sum-exp ``[batch, heads, seq]`` (float32, ``-inf`` for a row with no
    key; not differentiable).
    """
    q, k, v = _inputs(q, k, v)
    out, lse = _Attention.apply(q, k, v, as_pattern(pattern), bool(causal), scale, key_lengths, documents)
    return (out, lse) if return_lse else out

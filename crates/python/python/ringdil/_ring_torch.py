"""``ringdil.ring_attention``: ringdil's NCCL ring inside a ``torch.distributed`` job.

Each rank holds its local rows of the sequence (``ringdil.ring.shard`` of the whole
sequence for a layout) and calls :func:`ring_attention` on them; the result is its local
rows of attention over the **whole** sequence, differentiable through autograd. The
ranks are those of a ``torch.distributed`` process group (``torchrun`` starts them; no
other launcher): rank 0 of the group creates an NCCL unique id, the group's
``broadcast_object_list`` carries it to every rank, and each rank joins ringdil's own
NCCL communicator over the same GPUs (``ringdil._ringdil.RingGroup``). Its transfers run
on ringdil's communication stream, overlapping the kernels, which run on PyTorch's
current stream.

A rank's local rows are cut into **pieces**, runs of consecutive global tokens (a zigzag
rank has two); the kernels read each piece in place when the batch is 1 (a piece of a
larger batch is copied to be contiguous), and the results come back as f32 pieces in
PyTorch's memory, concatenated and rounded once to the inputs' dtype, as in
:func:`ringdil.attention`.
"""

import torch
import torch.distributed as dist

from . import _ringdil
from ._pattern import as_pattern
from ._torch import _dense, _is_tensor, _tensor

# The ring group of each (process group, device): created at the first call, collectively.
_GROUPS = {}


def _local(name, x, like=None):
    """``x`` checked as :func:`ringdil.attention` checks its tensors (and, for k and v,
    with ``q_local``'s device and dtype), contiguous; the shapes: :func:`_check_shapes`."""
    _is_tensor(name, x)
    return _tensor(name, x, like, caller="ring_attention", like_name="q_local", seq="local_seq")


def _check_shapes(q, k, v):
    """``k_local``'s and ``v_local``'s 4-d shapes against ``q_local``'s, naming the argument:
    k has q's batch, local rows and head_dim (and may have fewer heads, dividing q's: the
    ring checks that); v has k's batch, local rows and heads, and its own head_dim (MLA's
    d_v: which pairs run, the ring checks)."""
    b, n, _, d = q
    if k[0] != b or k[1] != n or k[3] != d:
        raise ValueError(
            f"k_local: shape {tuple(k)} does not match q_local's {tuple(q)} in batch, local rows or head_dim "
            "(k and v may have fewer heads than q, dividing them)"
        )
    if v[0] != b or v[1] != n:
        raise ValueError(
            f"v_local: shape {tuple(v)} does not match q_local's {tuple(q)} in batch or local rows "
            "(v may have fewer heads than q, as k has, and another head_dim)"
        )
    if tuple(v[:3]) != tuple(k[:3]):
        raise ValueError(f"v_local: shape {tuple(v)} differs from k_local's {tuple(k)} in batch, local rows or heads")


def _ring_group(group, device):
    """The process group (``None``: the default one) and this rank's ring group on
    ``device``, joined at the first call (collective)."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "group: torch.distributed is not initialized; call torch.distributed.init_process_group first "
            "(torchrun sets its environment)"
        )
    group = dist.group.WORLD if group is None else group
    key = (group, device.index)
    if key not in _GROUPS:
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("group: this process is not a member of the group")
        holder = [_ringdil.nccl_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(holder, src=dist.get_global_rank(group, 0), group=group, device=device)
        _GROUPS[key] = _ringdil.RingGroup(list(holder[0]), rank, world, device.index)
    return group, _GROUPS[key]


def _seq_len(group, rows, device):
    """The whole sequence's length: the sum of every rank's local rows (an all-reduce, so
    the host waits for it; ``seq_len=`` avoids it)."""
    t = torch.tensor([rows], dtype=torch.int64, device=device)
    dist.all_reduce(t, group=group)
    return int(t.item())


def _where(x):
    return (x.device.index, torch.cuda.current_stream(x.device).cuda_stream)


def _pieces(x, lens):
    """``x``'s pieces along the sequence, each contiguous (views when ``x``'s batch is 1)."""
    return [p.contiguous() for p in torch.split(x, lens, dim=1)]


def _ptrs(xs):
    return [x.data_ptr() for x in xs]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring, call, lens):
        qs, ks, vs = _pieces(q, lens), _pieces(k, lens), _pieces(v, lens)
        schedule = ring.schedule(_where(q) + call, _ptrs(qs), _ptrs(ks), _ptrs(vs))
        call = call[:-1] + (schedule,)
        b, _, h, _ = q.shape
        dv = v.shape[3]  # the output is v's head dim wide
        outs = [torch.empty((b, n, h, dv), dtype=torch.float32, device=q.device) for n in lens]
        lses = [torch.empty((b, h, n), dtype=torch.float32, device=q.device) for n in lens]
        ring.forward(_where(q) + call, [_ptrs(qs), _ptrs(ks), _ptrs(vs), _ptrs(outs), _ptrs(lses)])
        ctx.ring, ctx.call, ctx.lens, ctx.pieces = ring, call, lens, len(lens)
        ctx.save_for_backward(*qs, *ks, *vs, *outs, *lses)
        lse = torch.cat(lses, dim=2)
        ctx.mark_non_differentiable(lse)
        return torch.cat(outs, dim=1).to(q.dtype), lse

    @staticmethod
    def backward(ctx, d_out, _d_lse):
        m = ctx.pieces
        saved = ctx.saved_tensors
        qs, ks, vs, outs, lses = (list(saved[i * m:(i + 1) * m]) for i in range(5))
        dtype = qs[0].dtype
        douts = _pieces(_dense(d_out.to(dtype)), ctx.lens)
        f32 = lambda x: torch.empty(x.shape, dtype=torch.float32, device=x.device)  # noqa: E731
        # Each gradient is its input's shape: dQ, dK at q's head dim, dV (like d_out) at v's.
        dqs, dks, dvs = [f32(x) for x in qs], [f32(x) for x in ks], [f32(x) for x in vs]
        ctx.ring.backward(
            _where(qs[0]) + ctx.call,
            [_ptrs(x) for x in (qs, ks, vs, outs, lses, douts, dqs, dks, dvs)],
        )
        cat = lambda xs: torch.cat(xs, dim=1).to(dtype)  # noqa: E731
        return cat(dqs), cat(dks), cat(dvs), None, None, None


def ring_attention(q_local, k_local, v_local, *, layout="zigzag", pattern=None, causal=False, scale=None,
                   documents=None, schedule="ring", hybrid_degree=None, seq_len=None, group=None,
                   return_lse=False):
    """This rank's rows of attention over the whole sequence, computed by ringdil's NCCL
    ring across the ranks of ``group`` (``None``: the default process group of
    ``torch.distributed``), differentiable.

    ``q_local``, ``k_local``, ``v_local`` are ``[batch, local_seq, heads, head_dim]`` CUDA
    tensors (bfloat16 or float16) holding this rank's rows in the order of
    ``ringdil.ring.tokens(seq_len, world, layout)[rank]``, i.e. ``ringdil.ring.shard`` of the
    whole sequence; ``k_local``/``v_local`` may have fewer heads (grouped-query attention),
    and ``v_local`` another head dim than ``q_local``/``k_local`` (MLA's d = 192 with d_v =
    128, the one such pair the kernels run; another pair is a ``ValueError`` naming both):
    the output, and the gradient flowing into it, are then ``[batch, local_seq, heads, d_v]``.
    Every rank calls with the same keyword arguments.

    * ``layout``: ``"zigzag"`` (default; balances causal work), ``"contiguous"``,
      ``"striped"``, ``"balanced"`` (needs ``documents``) or a dict of boundaries / an
      order, as in :mod:`ringdil.ring`;
    * ``pattern``, ``causal``, ``scale``, ``documents``: as in :func:`ringdil.attention`,
      over global positions (``documents`` are boundaries of the whole sequence);
    * ``schedule``: ``"ring"`` (K/V blocks travel around the ring), ``"pattern_ring"``
      (only the pieces, and of a dilated piece only the rows, the pattern needs),
      ``"all_gather"``, ``"ulysses"`` (all-to-all over heads), ``"hybrid"`` (Ulysses inside
      groups of ranks, the ring across them), or ``"tune"``: time every schedule's forward
      on the first call of each shape and keep the fastest;
    * ``hybrid_degree``: ranks per Ulysses group of ``"hybrid"`` (consecutive ranks; it must
      divide the ranks and not exceed the heads), e.g. the GPUs of one node so that the
      all-to-all stays inside nodes and the ring goes across them; ``None`` (default): the
      largest divisor of the ranks not above the heads;
    * ``seq_len``: the whole sequence's length; by default the sum of the ranks' local
      rows, which costs an all-reduce and a host wait per call (ranks' local lengths may
      differ, so no rank can infer it alone): pass it in a training loop.

    Returns this rank's output rows in the inputs' dtype (and with ``return_lse=True`` the
    log-sum-exp ``[batch, heads, local_seq]``, float32).
    """
    if hybrid_degree is not None and (isinstance(hybrid_degree, bool) or not isinstance(hybrid_degree, int)):
        raise TypeError(f"hybrid_degree: expected an int or None, got {type(hybrid_degree).__name__}")
    if hybrid_degree is not None and hybrid_degree < 1:
        raise ValueError(f"hybrid_degree: {hybrid_degree} is not a positive number of ranks")
    q_local = _local("q_local", q_local)
    k_local = _local("k_local", k_local, q_local)
    v_local = _local("v_local", v_local, q_local)
    _check_shapes(q_local.shape, k_local.shape, v_local.shape)
    if not isinstance(schedule, str):
        raise TypeError(f"schedule: expected a schedule's name, got {type(schedule).__name__}")
    group, ring = _ring_group(group, q_local.device)
    b, rows, h, d = q_local.shape
    d_v = v_local.shape[3]  # v's head dim: the output's, d_out's and dV's (MLA: 128 at d = 192)
    n = _seq_len(group, rows, q_local.device) if seq_len is None else int(seq_len)
    call = ([b, n, h, d, d_v], k_local.shape[2], str(q_local.dtype).removeprefix("torch."), as_pattern(pattern),
            bool(causal), scale, documents, layout, hybrid_degree, schedule)
    lens = ring.piece_lens(_where(q_local) + call)
    if sum(lens) != rows:
        raise ValueError(
            f"q_local: rank {ring.rank} holds {rows} rows, but layout {layout!r} of a {n}-token sequence over "
            f"{ring.world} ranks gives it {sum(lens)} (shard the whole sequence with ringdil.ring.shard)"
        )
    out, lse = _RingAttention.apply(q_local, k_local, v_local, ring, call, lens)
    return (out, lse) if return_lse else out

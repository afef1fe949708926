"""The LongNet pattern of the small language model, as a pattern dict and as a formula.

``longnet_pattern(seq)`` is the pattern ``ringdil.attention`` runs: LongNet's geometric
branches ``(w, r) = (first * 2^i, 2^i)`` up to a segment as long as the sequence (so no
segment boundary cuts the sequence in two), offsets ``h mod r``, the softmax-denominator
combine, causal (``docs/guide/pattern-files.md``, ``docs/semantics.md`` section 7).

``multiplicity(pattern, h, q, k)`` writes the same pattern as one closed formula:
how often query ``q`` of head ``h`` counts key ``k``; ``allowed`` is its ``> 0`` in
booleans only. Both use ``//``, ``%``, ``==``, ``&``, ``|`` and ``*`` and nothing else, so
the same functions evaluate on NumPy index grids (the notebook checks them against
``ringdil.reference.key_counts`` and ``mask``, the specification) and on PyTorch index
tensors inside FlexAttention's ``mask_mod`` / ``score_mod`` (``small_lm.py``). That check
is what makes the Flex baseline compute the same function as ringdil, not a look-alike:
a key kept by two branches counts twice (semantics.md 7.5), which a boolean mask cannot
say, so Flex adds ``log(multiplicity)`` to the score.

No import of torch here: the notebook's CPU part uses this file where PyTorch is absent.
"""


def longnet_pattern(seq, first_segment=2048):
    """LongNet branches for a ``seq``-token sequence: segments ``first_segment * 2^i`` with
    dilation ``2^i``, the last one the first segment length that covers ``seq``."""
    if seq < 1 or first_segment < 1:
        raise ValueError(f"seq and first_segment must be >= 1, got {seq} and {first_segment}")
    segments, rates = [first_segment], [1]
    while segments[-1] < seq:
        segments.append(segments[-1] * 2)
        rates.append(rates[-1] * 2)
    return {
        "kind": "dilated",
        "segment_lengths": segments,
        "dilation_rates": rates,
        "offsets": "head_mod",
        "combine": "softmax_denominator",
        "causal": True,
    }


def branches(pattern):
    """The ``(segment, rate)`` pairs of a ``longnet_pattern`` dict, checking it is one this
    formula describes (head_mod offsets, softmax-denominator combine, causal)."""
    expected = {"kind": "dilated", "offsets": "head_mod", "combine": "softmax_denominator", "causal": True}
    for field, value in expected.items():
        if pattern.get(field) != value:
            raise ValueError(f"pattern: {field} must be {value!r} for this formula, got {pattern.get(field)!r}")
    return list(zip(pattern["segment_lengths"], pattern["dilation_rates"]))


def multiplicity(pattern, h, q, k):
    """How often query ``q`` of head ``h`` counts key ``k`` (0 = masked), elementwise over
    broadcastable integer arrays or tensors: the number of branches ``(w, r)`` in which
    ``q`` and ``k`` share a segment (``q // w == k // w``) and both sit on the head's
    lattice (position in the segment ``= h mod r``, modulo ``r``), with ``k <= q``.

    Segments are aligned to position 0 and a short last segment is used as it is, which
    the integer division gives for free (semantics.md 7.1-7.4)."""
    count = 0
    for w, r in branches(pattern):
        o = h % r
        count = count + ((q // w == k // w) & ((q % w) % r == o) & ((k % w) % r == o)) * 1
    return count * (k <= q)


def allowed(pattern, h, q, k):
    """``multiplicity(pattern, h, q, k) > 0`` computed in booleans only: FlexAttention's
    ``create_block_mask`` evaluates the mask over the whole ``[heads, seq, seq]`` grid at
    once, where a bool is 1 byte and an integer count 8."""
    keep = None
    for w, r in branches(pattern):
        o = h % r
        kept = (q // w == k // w) & ((q % w) % r == o) & ((k % w) % r == o)
        keep = kept if keep is None else keep | kept
    return keep & (k <= q)

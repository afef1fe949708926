"""The synthetic task of the small language model: recall which member of a class this row uses.

The vocabulary has *markers* (one per class), *members* (``members`` tokens per class) and
*filler*. A row is filler text with pairs ``[marker c, member of c]`` dropped in at random
gaps::

    filler filler ... [c, m_c] filler ... [c', m_c'] filler ... [c, m_c] ...

* Each row picks its own member ``m_c`` for every class and uses it every time class ``c``
  comes up. Which class a marker announces is in the weights (a bigram, learnt at once);
  *which member* is only in the row: the first time a class comes up it is a guess among
  ``members`` (``ln 8`` nats), every later time it can be copied from an earlier
  ``[c, m_c]``. Those later member tokens are the *recall targets*.
* Classes come up with Zipf frequencies: common classes recur within tens of tokens (where
  the copying is learnt fast), rare ones thousands of tokens apart, beyond LongNet's first
  (dense) 2048-token segment: in a 16384-token row, about 46 recall targets lie beyond
  2048 tokens, 14 beyond 4096 and 2 beyond 8192 (the notebook counts them).
* The filler is a fixed first-order Markov chain (4 successors per token, one table for
  every row) restarted after each pair: the part of the loss the weights learn within
  tens of steps, whatever the attention.

Why this task for a LongNet model: a marker can find its member in one attention step,
by content alone (the marker's query matches its class's member tokens wherever they
are; ``small_lm.py`` leaves half of each head's dimensions without rotary positions for
that), and the gaps are random, so earlier members sit at every position modulo every
dilation rate: a query's dilated lattice catches a share of them. (A task whose answer
needs two steps, an arbitrary key-value mapping, was not learnt within 400 steps by this
model, then with rotary positions on every dimension, with dense or LongNet attention, in a
trial run on an H100.)

Everything here is NumPy, seeded by ``(seed, step)``: the notebook shows the very data the
GPU run trains on, without PyTorch.
"""
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Task:
    classes: int = 32
    members: int = 8
    filler: int = 224
    successors: int = 4
    zipf: float = 1.5      # class c comes up with probability proportional to 1 / (c + 1)^zipf
    gap_min: int = 4       # filler tokens between two pairs: uniform in [gap_min, gap_max]
    gap_max: int = 16
    table_seed: int = 20251127  # the filler's transition table: fixed, shared by every row and run

    @property
    def vocab(self):
        return self.classes * (1 + self.members) + self.filler

    def member_token(self, c, m):
        """Token of member ``m`` of class ``c`` (markers are ``0..classes``)."""
        return self.classes + c * self.members + m

    def asdict(self):
        return {**asdict(self), "vocab": self.vocab}


def successor_table(task):
    """``[filler, successors]``: the filler tokens that may follow each filler token."""
    return np.random.default_rng(task.table_seed).integers(task.filler, size=(task.filler, task.successors))


def batch(rows, seq, *, seed, step, task=Task()):
    """One batch: a dict of NumPy arrays over ``seq + 1`` positions (inputs are ``[:, :-1]``,
    targets ``[:, 1:]``).

    * ``tokens``: int64 ``[rows, seq + 1]``;
    * ``distance``: int64 ``[rows, seq + 1]``: at a member token, how many tokens back the
      row's previous member of the same class is, ``0`` when the class is new to the row;
      ``-1`` at every other token;
    * ``recall``: bool ``[rows, seq + 1]``: member tokens whose class came up before in the
      row (``distance > 0``), the tokens only attention over that distance can predict.
    """
    rng = np.random.default_rng([seed, step])
    width = 2 + task.gap_max
    chunks = -(-(seq + 1) // (2 + task.gap_min))            # enough chunks for the shortest gaps
    weights = 1.0 / np.arange(1, task.classes + 1) ** task.zipf
    classes = rng.choice(task.classes, size=(rows, chunks), p=weights / weights.sum())
    chosen = rng.integers(task.members, size=(rows, task.classes))   # this row's member of each class
    gaps = rng.integers(task.gap_min, task.gap_max + 1, size=(rows, chunks))

    chunk = np.empty((rows, chunks, width), dtype=np.int64)
    chunk[:, :, 0] = classes
    chunk[:, :, 1] = task.member_token(classes, np.take_along_axis(chosen, classes, axis=1))
    succ = successor_table(task)
    filler = rng.integers(task.filler, size=(rows, chunks))
    choice = rng.integers(task.successors, size=(rows, chunks, task.gap_max))
    for t in range(task.gap_max):
        chunk[:, :, 2 + t] = task.classes * (1 + task.members) + filler
        filler = succ[filler, choice[:, :, t]]
    valid = np.arange(width)[None, None, :] < (2 + gaps)[:, :, None]

    start = np.cumsum(2 + gaps, axis=1) - (2 + gaps)          # each chunk's first position
    prev = previous_same(classes)
    dist = np.where(prev >= 0, start - np.take_along_axis(start, np.maximum(prev, 0), axis=1), 0)
    distance = np.full((rows, chunks, width), -1, dtype=np.int64)
    distance[:, :, 1] = dist

    tokens = np.stack([chunk[r][valid[r]][: seq + 1] for r in range(rows)])
    distance = np.stack([distance[r][valid[r]][: seq + 1] for r in range(rows)])
    return {"tokens": tokens, "distance": distance, "recall": distance > 0}


def previous_same(classes):
    """Per chunk, the index of the row's previous chunk of the same class (-1: none)."""
    rows, chunks = classes.shape
    order = np.argsort(classes, axis=1, kind="stable")          # each class's chunks, in order
    ordered = np.take_along_axis(classes, order, axis=1)
    repeat = ordered[:, 1:] == ordered[:, :-1]
    prev = np.full((rows, chunks), -1, dtype=np.int64)
    r = np.arange(rows)[:, None]
    prev[r, order[:, 1:]] = np.where(repeat, order[:, :-1], -1)
    return prev

"""``ringdil.attention`` and ``ringdil.ring_attention`` are thin wrappers that import their
PyTorch halves (``ringdil._torch``, ``ringdil._ring_torch``) only when called, so ``import
ringdil`` works without PyTorch. These tests run without PyTorch and without a GPU: the
wrappers' signatures must equal their halves' (read from the source, not imported), every
keyword must reach the half by name, and a missing PyTorch is an ImportError naming the caller.
"""

import ast
import sys
import types
from pathlib import Path

import pytest

import ringdil

SOURCE = Path(ringdil.__file__).resolve().parent
# (wrapper, the module of its PyTorch half)
WRAPPERS = [("attention", "_torch"), ("ring_attention", "_ring_torch")]


def signature_in_source(module, name):
    """(positional names, keyword-only names with their default's source) of ``def name`` in
    ``ringdil/<module>.py``, parsed, not imported."""
    tree = ast.parse((SOURCE / f"{module}.py").read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    positional = [a.arg for a in fn.args.args]
    keywords = [(a.arg, ast.unparse(d)) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)]
    return positional, keywords


@pytest.mark.parametrize("name, half", WRAPPERS)
def test_a_wrapper_has_the_signature_of_its_pytorch_half(name, half):
    assert signature_in_source("__init__", name) == signature_in_source(half, name)


@pytest.mark.parametrize("name, half", WRAPPERS)
def test_a_wrapper_forwards_every_keyword_by_name(name, half, monkeypatch):
    received = {}

    def fake(*args, **kwargs):
        received["args"], received["kwargs"] = args, kwargs
        return "result"

    monkeypatch.setitem(sys.modules, f"ringdil.{half}", types.SimpleNamespace(**{name: fake}))
    _, keywords = signature_in_source("__init__", name)
    # A distinct value per keyword: a keyword dropped, renamed or swapped shows.
    sent = {keyword: object() for keyword, _ in keywords}
    assert getattr(ringdil, name)("q", "k", "v", **sent) == "result"
    assert received["args"] == ("q", "k", "v")
    assert received["kwargs"].keys() == sent.keys()
    assert all(received["kwargs"][k] is sent[k] for k in sent)


@pytest.mark.parametrize("name, half", WRAPPERS)
def test_without_pytorch_a_wrapper_says_it_needs_pytorch(name, half, monkeypatch):
    monkeypatch.delitem(sys.modules, f"ringdil.{half}", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails as if absent
    with pytest.raises(ImportError, match=f"ringdil.{name} needs PyTorch"):
        getattr(ringdil, name)(None, None, None)

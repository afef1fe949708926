"""Helpers shared by the notebooks: where the repository is, and saving pattern files.

Every number a notebook shows comes from the toolkit itself (the `ringdil` Python
package, `import ringdil`, or the JSON files the benchmarks write), never from pasted
values.
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "notebooks" / "out"
OUT.mkdir(exist_ok=True)


def write_pattern(name: str, pattern: dict) -> pathlib.Path:
    """Save a pattern dict as a pattern file under notebooks/out/."""
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(pattern, indent=2))
    return path

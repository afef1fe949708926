"""Helpers shared by the notebooks: find the repository and run the `ringdil` CLI.

Every number a notebook shows comes from the toolkit itself (the CLI's --json output
or the JSON files the benchmarks write), never from pasted values.
"""
import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "notebooks" / "out"
OUT.mkdir(exist_ok=True)


def binary() -> pathlib.Path:
    """The ringdil binary: $RINGDIL_BIN, else a release or debug build, else build one."""
    if os.environ.get("RINGDIL_BIN"):
        return pathlib.Path(os.environ["RINGDIL_BIN"])
    for profile in ("release", "debug"):
        candidate = ROOT / "target" / profile / "ringdil"
        if candidate.exists():
            return candidate
    subprocess.run(["cargo", "build", "--release", "-p", "ringdil-cli"], cwd=ROOT, check=True)
    return ROOT / "target" / "release" / "ringdil"


def ringdil(*args, parse_json=True):
    """Run `ringdil ARGS` in the repository root; return parsed JSON (or text)."""
    done = subprocess.run([str(binary()), *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ringdil {' '.join(map(str, args))} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout) if parse_json else done.stdout


def write_pattern(name: str, pattern: dict) -> pathlib.Path:
    """Save a pattern dict as a pattern file under notebooks/out/."""
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(pattern, indent=2))
    return path

#!/usr/bin/env python3
"""Plant each known bug class into the code, run the tests, and report which tests catch it.

Each entry of plants.json is one textual edit of the code under test (`file`, `old` ->
`new`; `old` must occur exactly once) and the tests that must fail with it (`caught_by`).
For every plant this script applies the edit, runs `cargo test` on the packages named by
the plant (default: the reference and its proofs), restores the file (always, even on
Ctrl-C), and checks that every test in `caught_by` failed. It exits non-zero if a plant
no longer applies or a listed test passed with the bug in place.

    python3 tests/plants/run.py                 # every plant
    python3 tests/plants/run.py zigzag-off-by-one short-segment-dropped
    CARGO_TARGET_DIR=/tmp/plants python3 tests/plants/run.py   # keep the main build warm

docs/verification.md lists the bug classes, the tests that catch each, and this script.
"""
import json
import os
import re
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLANTS = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "plants.json")))
DEFAULT_PACKAGES = ["ringdil-reference", "ringdil-proofs"]


def failed_tests(output):
    """Names of the tests cargo reports as failed (the lines under `failures:`)."""
    names = set()
    for block in re.findall(r"^failures:\n((?:    \S+\n)+)", output, re.M):
        names.update(line.strip() for line in block.splitlines())
    return names


def run(plant):
    path = os.path.join(ROOT, plant["file"])
    text = open(path).read()
    if text.count(plant["old"]) != 1:
        return f"does not apply: `old` occurs {text.count(plant['old'])} times in {plant['file']}", set()
    open(path, "w").write(text.replace(plant["old"], plant["new"]))
    try:
        cmd = ["cargo", "test", "--no-fail-fast"]
        for p in plant.get("packages", DEFAULT_PACKAGES):
            cmd += ["-p", p]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        output = out.stdout + out.stderr
        if "error[" in output:
            return "the planted code does not compile", set()
        return None, failed_tests(output)
    finally:
        open(path, "w").write(text)


def main():
    # A plain `kill` must restore the planted file too: turn SIGTERM into an exception,
    # which unwinds through run()'s `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    wanted = set(sys.argv[1:])
    bad = 0
    for plant in PLANTS:
        if wanted and plant["name"] not in wanted:
            continue
        problem, failed = run(plant)
        missed = [t for t in plant["caught_by"] if not any(f == t or f.endswith("::" + t) for f in failed)]
        if problem or missed or not failed:
            bad += 1
        status = problem or ("MISSED by " + ", ".join(missed) if missed else "caught" if failed else "NOT CAUGHT")
        print(f"{plant['name']}: {status}; failed: {', '.join(sorted(failed)) or 'none'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

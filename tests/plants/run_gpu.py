"""Apply kernel plants (gpu_plants.json) one at a time and run gpu_check on each.

    python3 tests/plants/run_gpu.py GPU_CHECK [--only TEXT] [--seed N] [--jobs N] [NAME ...]

Each plant's edit is applied to a copy of crates/cuda/kernels/ and gpu_check compiles the
kernels from that copy (RINGDIL_CUDA_SOURCE), so no rebuild is needed; `--only TEXT`
runs only the gpu_check cases whose name contains TEXT, `--jobs N` spreads them over N
processes. A plant is caught when gpu_check fails. Prints one line per plant and exits non-zero when one is not caught.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
KERNELS = HERE.parent.parent / "crates" / "cuda" / "kernels"


def main() -> int:
    argv = sys.argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    binary, argv = argv[0], argv[1:]
    check_args, names = [], []
    while argv:
        arg = argv.pop(0)
        if arg in ("--only", "--seed", "--jobs"):
            check_args += [arg, argv.pop(0)]
        else:
            names.append(arg)
    plants = json.loads((HERE / "gpu_plants.json").read_text())
    if names:
        plants = [p for p in plants if p["name"] in names]
    missed = 0
    for plant in plants:
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp) / "kernels"
            shutil.copytree(KERNELS, src)
            path = src / plant["file"]
            text = path.read_text()
            if text.count(plant["old"]) != 1:
                print(f"STALE  {plant['name']}: its line is not in {plant['file']} exactly once")
                missed += 1
                continue
            path.write_text(text.replace(plant["old"], plant["new"]))
            done = subprocess.run(
                [binary, *check_args],
                env={**os.environ, "RINGDIL_CUDA_SOURCE": str(src)},
                capture_output=True,
                text=True,
            )
            summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            caught = done.returncode != 0
            missed += not caught
            print(f"{'CAUGHT' if caught else 'MISSED'} {plant['name']}: {summary}", flush=True)
    print(f"{len(plants) - missed} of {len(plants)} plants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Execute every notebook headless (as CI does) and fail on the first error.

    python3 notebooks/run.py            # execute into notebooks/out/, committed files untouched
    python3 notebooks/run.py --inplace  # refresh the committed notebooks' outputs
"""
import pathlib
import sys

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent


def main() -> int:
    inplace = "--inplace" in sys.argv
    notebooks = sorted(HERE.glob("*.ipynb"))
    if not notebooks:
        print("no notebooks found", file=sys.stderr)
        return 1
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
        target = path if inplace else HERE / "out" / path.name
        target.parent.mkdir(exist_ok=True)
        nbformat.write(nb, target)
        print(f"executed {path.name} -> {target.relative_to(HERE.parent)}")
    print(f"{len(notebooks)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

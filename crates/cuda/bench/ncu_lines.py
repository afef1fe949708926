"""Compare two Nsight Compute source-counter exports line by line, scaled to time per unit
of work (the tables of docs/benchmarks/profiles/short-causal-items-h200.md).

    python3 ncu_lines.py A.csv[.gz] DURATION_A SCALE_A B.csv[.gz] DURATION_B SCALE_B [--top N]

Each export is `ncu -i REPORT --page source --print-source cuda,sass --csv` of one kernel
compiled with -lineinfo (RINGDIL_CUDA_DEFINES=-lineinfo). A CUDA source line's cost is its
share of the launch's warp-state samples times the launch's DURATION (any unit) times
SCALE, the factor that brings the two launches to the same work (8 for a launch doing an
eighth of the other's pairs). Samples count every warp, idle producer warps included.

Prints the cost per file, per stall reason and per line (largest difference first), A then
B. Only the CUDA source rows count; the SASS rows repeat their samples.
"""
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def number(text):
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def load(path):
    """(total samples, samples per (file, line), per stall reason, source text per line)."""
    opener = gzip.open if path.endswith(".gz") else open
    per_line, per_reason, text = collections.Counter(), collections.Counter(), {}
    total, current, header = 0, None, None
    with opener(path, "rt") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "File Path":
                current, header = row[1].rsplit("/", 1)[-1], None
            elif row[0] == "Line No":
                header = row
            elif header and row[0].isdigit():
                cells = dict(zip(header, row))
                samples = number(cells.get(SAMPLES, "0"))
                key = (current, int(row[0]))
                per_line[key] += samples
                text[key] = row[1].strip()
                total += samples
                for name, value in cells.items():
                    if name.startswith("stall_") and "Not Issued" not in name:
                        per_reason[name] += number(value)
    if total == 0:
        sys.exit(f"{path}: no CUDA source rows with samples (exported with --print-source cuda,sass?)")
    return total, per_line, per_reason, text


def scaled(counts, unit):
    """The counts times `unit` (missing keys: 0)."""
    return collections.Counter({k: v * unit for k, v in counts.items()})


def main():
    args = sys.argv[1:]
    top = 25
    if "--top" in args:
        at = args.index("--top")
        top = int(args[at + 1])
        del args[at : at + 2]
    if len(args) != 6:
        sys.exit(__doc__)
    total_a, lines_a, reasons_a, text = load(args[0])
    total_b, lines_b, reasons_b, text_b = load(args[3])
    text.update(text_b)
    # Every count in units of time per work: samples times one sample's share of the launch.
    unit_a = float(args[1]) * float(args[2]) / total_a
    unit_b = float(args[4]) * float(args[5]) / total_b
    lines_a, reasons_a = scaled(lines_a, unit_a), scaled(reasons_a, unit_a)
    lines_b, reasons_b = scaled(lines_b, unit_b), scaled(reasons_b, unit_b)
    print(f"total: A {total_a * unit_a:.0f}, B {total_b * unit_b:.0f}")
    files_a, files_b = collections.Counter(), collections.Counter()
    for (name, _), c in lines_a.items():
        files_a[name] += c
    for (name, _), c in lines_b.items():
        files_b[name] += c
    print("\n| file | A | B |\n|---|---|---|")
    for name in sorted(set(files_a) | set(files_b), key=lambda n: -files_a[n]):
        print(f"| {name} | {files_a[name]:.0f} | {files_b[name]:.0f} |")
    print("\n| stall reason | A | B |\n|---|---|---|")
    for name in sorted(set(reasons_a) | set(reasons_b), key=lambda n: -reasons_a[n]):
        print(f"| {name} | {reasons_a[name]:.0f} | {reasons_b[name]:.0f} |")
    print("\n| line | A | B | source |\n|---|---|---|---|")
    keys = sorted(set(lines_a) | set(lines_b), key=lambda k: -(lines_a[k] - lines_b[k]))
    for key in keys[:top]:
        print(f"| {key[0]}:{key[1]} | {lines_a[key]:.0f} | {lines_b[key]:.0f} | `{text[key][:80]}` |")

if __name__ == "__main__":
    main()

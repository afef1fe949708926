"""Compare gpu_bench JSON reports of kernel-source variants, row by row.

    python3 ab_compare.py NAME=RUN.json[,RUN.json ...] NAME=RUN.json[,...] ... [--json ALL.json]

Each NAME is a variant (the first is the baseline), each RUN a `gpu_bench --json` report of
it; several runs of one variant (alternating rounds, as `ab_kernels.sh` makes them) are
averaged. A timing is any number under a key `ms` or ending in `_ms`, except the peers'
(keys starting with `torch` or `flex`, and the sections under such keys: timed by other
programs). A row is identified by its
section and the non-timing fields of its object that say what it is (strings, booleans,
integers, lists of integers: pass, causal, seq, branches, name, ...), so rows of different
reports match whatever their order.

Prints a Markdown table: per variant the runs' times and, after the baseline, the mean's
ratio to the baseline's mean (above 1: slower). `--json ALL.json` also writes every run's
report and the table's rows into one file.
"""
import json
import sys


def is_timing(key):
    return (key == "ms" or key.endswith("_ms")) and not key.startswith(("torch", "flex"))


def ident(value):
    """A hashable form of an identifying field, or None for a field that does not identify."""
    if isinstance(value, bool) or isinstance(value, str) or isinstance(value, int):
        return value
    if isinstance(value, list) and all(isinstance(x, (int, list)) for x in value):
        return json.dumps(value)
    return None


def timings(node, path, out):
    """Every (row key, timing key) -> ms under `node`, in document order."""
    if isinstance(node, list):
        for item in node:
            timings(item, path, out)
        return
    if not isinstance(node, dict):
        return
    fields = tuple(sorted((k, ident(v)) for k, v in node.items() if not is_timing(k) and ident(v) is not None))
    for key, value in node.items():
        if is_timing(key) and isinstance(value, (int, float)):
            # Objects that no field tells apart are numbered in document order.
            row, n = (path, fields, key), 1
            while row in out:
                n += 1
                row = (path, fields + (("#", n),), key)
            out[row] = float(value)
        elif isinstance(value, (dict, list)) and not key.startswith(("torch", "flex")):
            timings(value, path + (key,), out)


def label(row):
    path, fields, key = row
    described = " ".join(f"{k}={v}" for k, v in fields)
    return f"{'/'.join(path)} {described} {key}".strip()


def main(argv):
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if not argv:
        sys.exit(__doc__)
    variants = []
    for arg in argv:
        name, _, files = arg.partition("=")
        if not files:
            sys.exit(f"{arg!r}: expected NAME=RUN.json[,RUN.json ...]")
        reports = [json.load(open(f)) for f in files.split(",")]
        runs = []
        for report in reports:
            rows = {}
            timings(report, (), rows)
            runs.append(rows)
        variants.append((name, files.split(","), reports, runs))
    base_runs = variants[0][3]
    order = list(base_runs[0])
    header = "| row | " + " | ".join(
        f"{name} ms" + (f" | {name} / {variants[0][0]}" if i else "") for i, (name, *_rest) in enumerate(variants)
    )
    lines = [header + " |", "|---" * (1 + 2 * len(variants) - 1) + "|"]
    table = []
    for row in order:
        cells, means = [], []
        for _, _, _, runs in variants:
            values = [r[row] for r in runs if row in r]
            means.append(sum(values) / len(values) if values else None)
            cells.append(" / ".join(f"{v:.3f}" for v in values) or "-")
        line = [label(row), cells[0]]
        for cell, mean in zip(cells[1:], means[1:]):
            ratio = mean / means[0] if mean is not None and means[0] else None
            line += [cell, f"{ratio:.3f}" if ratio is not None else "-"]
        lines.append("| " + " | ".join(line) + " |")
        table.append({"row": label(row), "ms": {v[0]: m for v, m in zip(variants, means)}})
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"variants": {name: dict(zip(files, reports)) for name, files, reports, _ in variants},
                       "table": table}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])

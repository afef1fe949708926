"""Append one kernel version's key figures from a gpu_bench JSON report to history.csv.

    python3 docs/benchmarks/history.py v26 docs/benchmarks/gpu-bench-h100.json [--commit HASH]

Per version, history.csv holds the 16 dense rows of the report (pass, length, head dim,
causal: ringdil's ms and TFLOP/s, torch's flash and cuDNN TFLOP/s from the same run) and
one `longnet-fwd` row: the four LongNet branches of the report's dilated table
((2048, 1) (4096, 4) (8192, 8) (16384, 16), n = 16384, h = 16, d = 128, forward; its dense
reference is the `fwd` row of the same shape). `commit` names a commit whose tree holds the
full report; leave it out for a report committed together with its row.
"""
import csv
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
COLUMNS = ["version", "date", "commit", "device", "pass", "seq", "head_dim", "causal",
           "ms", "tflops", "flash_tflops", "cudnn_tflops"]


def rows(version, report, date, commit=""):
    """history.csv rows of one report (a gpu_bench JSON as a dict)."""
    base = {"version": version, "date": report.get("date") or date, "commit": commit,
            "device": report["device"]}
    out = []
    for r in report["rows"]:
        out.append({**base, "pass": r["pass"], "seq": r["seq"], "head_dim": r["head_dim"],
                    "causal": str(r["causal"]).lower(), "ms": f"{r['ms']:.4f}",
                    "tflops": f"{r['tflops']:.1f}",
                    "flash_tflops": f"{r['torch_flash_tflops']:.1f}" if r.get("torch_flash_tflops") else "",
                    "cudnn_tflops": f"{r['torch_cudnn_tflops']:.1f}" if r.get("torch_cudnn_tflops") else ""})
    dil = report["dilated"]
    four = [b for b in dil["branches"] if len(b["branches"]) == 4]
    if four:
        out.append({**base, "pass": "longnet-fwd", "seq": dil["seq"], "head_dim": dil["head_dim"],
                    "causal": "false", "ms": f"{four[0]['ms']:.4f}", "tflops": "",
                    "flash_tflops": "", "cudnn_tflops": ""})
    return out


def main():
    args = sys.argv[1:]
    commit = ""
    if "--commit" in args:
        i = args.index("--commit")
        commit = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    version, path = args
    report = json.loads(pathlib.Path(path).read_text())
    if not report.get("date"):
        print("the report has no date (run gpu_bench with --date)", file=sys.stderr)
        return 1
    table = HERE / "history.csv"
    with table.open() as f:
        if any(row["version"] == version for row in csv.DictReader(f)):
            print(f"{version} is already in {table.name}", file=sys.stderr)
            return 1
    with table.open("a", newline="") as f:
        csv.DictWriter(f, COLUMNS, lineterminator="\n").writerows(rows(version, report, "", commit))
    print(f"appended {version} to {table.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

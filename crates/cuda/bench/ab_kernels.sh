#!/usr/bin/env bash
# A/B of kernel variants on gpu_bench, in alternating rounds on one GPU. A variant is a
# directory of kernel sources (crates/cuda/kernels as it stands, a copy with a change),
# loaded through RINGDIL_CUDA_SOURCE by the same gpu_bench binary, or a gpu_bench binary
# of its own (a change the host takes part in: a launch grid, a Params field). Run from
# the repository root:
#   bash crates/cuda/bench/ab_kernels.sh SCRATCH ROUNDS SECTIONS NAME=DIR|NAME=BINARY ...
# e.g. bash crates/cuda/bench/ab_kernels.sh /tmp/ab 2 dense,packed base=.gpu/base v2=.gpu/v2
#      bash crates/cuda/bench/ab_kernels.sh /tmp/ab 2 dense base=.gpu/v57/gpu_bench new=.gpu/gpu_bench
# (GPU_BENCH, the binary that runs the directories, defaults to .gpu/gpu_bench). Round r
# runs every variant in the order given, so a drift of the machine's clocks over the run
# falls on all of them; the first round of a variant also pays its modules' JIT (on a cold
# machine, minutes for several sections), outside the timed loops. Reports go to
# SCRATCH/NAME-r.json and .md; the comparison (ab_compare.py, the first variant the
# baseline) is printed and written with every report to SCRATCH/ab.json, one file to bring
# back from a device run.
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,13p "$0"; exit 2; }
scratch=$1 rounds=$2 sections=$3
shift 3
bench=${GPU_BENCH:-.gpu/gpu_bench}
mkdir -p "$scratch"
for v in "$@"; do
  [ -d "${v#*=}" ] || [ -x "${v#*=}" ] ||
    { echo "ab_kernels: ${v#*=}: neither a directory nor an executable (variant ${v%%=*})" >&2; exit 2; }
done
for r in $(seq 1 "$rounds"); do
  for v in "$@"; do
    name=${v%%=*} path=${v#*=}
    # A directory: its sources under the common binary; a binary: its own built-in sources.
    if [ -d "$path" ]; then
      run=(env "RINGDIL_CUDA_SOURCE=$(cd "$path" && pwd)" "$bench")
    else
      run=("$path")
    fi
    start=$SECONDS
    "${run[@]}" --sections "$sections" --label "$name" --date "$(date -u +%F)" \
      --json "$scratch/$name-$r.json" --md "$scratch/$name-$r.md" > "$scratch/$name-$r.out" 2>&1 \
      || { echo "ab_kernels: $name round $r failed (log: $scratch/$name-$r.out)" >&2; tail -5 "$scratch/$name-$r.out" >&2; exit 1; }
    echo "ab_kernels: $name round $r: $((SECONDS - start)) s" >&2
  done
done
args=()
for v in "$@"; do
  name=${v%%=*}
  args+=("$name=$(seq -f "$scratch/$name-%g.json" -s , 1 "$rounds")")
done
python3 "$(dirname "$0")/ab_compare.py" "${args[@]}" --json "$scratch/ab.json"

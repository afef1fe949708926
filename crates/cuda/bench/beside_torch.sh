#!/usr/bin/env bash
# The ring rows that fail under contention (race_filters.sh), run by one ring_check at a time
# beside a torch process that keeps the GPU busy with bf16 matmuls (16384^2, each waited
# for): the GPU time-slices the two contexts. This brings the failures out faster than
# several ring_check processes at once (profiles/ring-grad-race.md), and with no other
# ring_check running, a variant's failures are its own. Variants run one after the other,
# each for SECONDS: a loop over the filters, again and again. Run from the repository root
# on a GPU machine with PyTorch:
#   bash crates/cuda/bench/beside_torch.sh OUTDIR SECONDS NAME=BINARY[,VAR=VALUE...] ...
# e.g. bash crates/cuda/bench/beside_torch.sh /tmp/bt 80 main=.gpu/ring_check \
#        mma=.gpu/ring_check,RINGDIL_KERNELS=mma patch=.gpu/ring_check,RINGDIL_CUDA_SOURCE=.gpu/kernels
# The first variant's binary runs every filter once first, alone, to fill the PTX cache.
# OUTDIR/NAME.txt holds a variant's runs (each followed by `exit STATUS`; 124: cut after 60 s,
# a hang); OUTDIR/summary.txt counts its runs, PASS and FAIL rows and faults, with its FAIL
# and error lines.
set -u
[ $# -ge 3 ] || { sed -n 2,15p "$0"; exit 2; }
out=$1 limit=$2
shift 2
mkdir -p "$out"
# shellcheck source=race_filters.sh
. "$(dirname "$0")/race_filters.sh"
first=${1#*=}
first=${first%%,*}
for f in "${filters[@]}"; do timeout 300 "$first" --require-gpu --only "$f" --schedules ring > /dev/null 2>&1; done
seconds=$(($# * limit + 30))
python3 -c "
import time, torch
a = torch.randn(16384, 16384, device='cuda', dtype=torch.bfloat16); b = a.clone(); n = 0
t = time.time()
while time.time() - t < $seconds:
    c = a @ b; torch.cuda.synchronize(); n += 1
print('matmuls', n)
" > "$out/torch.txt" 2>&1 &
torch=$!
sleep 5
: > "$out/summary.txt"
for v in "$@"; do
  name=${v%%=*} rest=${v#*=}
  IFS=, read -r -a parts <<< "$rest"
  bin=${parts[0]}
  [ -x "$bin" ] || { echo "beside_torch: $bin: not an executable (variant $name)" >&2; continue; }
  : > "$out/$name.txt"
  start=$SECONDS runs=0
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    for f in "${filters[@]}"; do
      env "${parts[@]:1}" timeout 60 "$bin" --require-gpu --only "$f" --schedules ring >> "$out/$name.txt" 2>&1
      echo "exit $?" >> "$out/$name.txt"
      runs=$((runs + 1))
    done
  done
  {
    echo "$name: $runs runs ($((SECONDS - start)) s), PASS $(grep -c '^PASS' "$out/$name.txt"), FAIL $(grep -c '^FAIL' "$out/$name.txt"), faults $(grep -c 'LAUNCH_FAILED\|ILLEGAL_ADDRESS' "$out/$name.txt"), hangs $(grep -c '^exit 124' "$out/$name.txt")"
    grep -h '^FAIL\|rror\|panick' "$out/$name.txt"
  } >> "$out/summary.txt"
done
kill "$torch" 2> /dev/null
wait
cat "$out/torch.txt" >> "$out/summary.txt"
cat "$out/summary.txt"
